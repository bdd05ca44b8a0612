"""BERT pretraining (masked LM + next sentence, and the paper's ablations) on the shared trainer: what
scripts/run_pretraining.py runs.

  config.py  `PretrainingConfig`: the run's settings (its run options, `RunOptions`, shared with fine-tuning)
  task.py    `PretrainingTask` (the trainer's task: model, input pipeline, loss, metrics) and its `Evaluator`
  run.py     `run_pretraining`: the input checks, resuming, training, the encoder hand-off, --do_eval

Not a registered task (bert_tf/registry.py): those are the fine-tuning tasks, each with a fine-tuned model's
folder, an export for TensorFlow Serving and a Hugging Face head, none of which pretraining has; it writes the
encoder they start from, and its script is one of bert_tf.console's GENERAL_SCRIPTS. Imports no TensorFlow
(`registry.tasks()` imports every package of bert_tf.tasks).
"""
