"""The tasks: BERT pretraining (pretraining/), and the fine-tuning tasks, each with its reader, features, head,
metric and post-processing (registered in bert_tf/registry.py)."""
