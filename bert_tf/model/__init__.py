"""Model: the BERT encoder, the pretraining heads and losses, and weight conversion.

  layers       TransformerBlock (fused-QKV post-LayerNorm layer), PositionEmbedding, Dropout16
  encoder      BertEncoder: {input_ids, input_mask, segment_ids} -> sequence/pooled/encoder_outputs
  pretraining  BertPretrainer (MLM head tied to the word embeddings + NSP head), pretraining_loss_terms
  checkpoints  what a checkpoint is; the encoder hand-off (export_encoder, load_encoder, restore_encoder); a
               fine-tuned task model's folder (save_task_model, restore_task_model)
  convert      google-research TF1 checkpoints and Hugging Face directories <-> our checkpoints (keras-hub presets in)
  released     released weights by name (hf:<model id>, keras_hub:<preset>): downloaded, converted once, cached
"""
