"""Training: the shared trainer under tf.distribute, and what every run shares (BERT pretraining is the task
bert_tf/tasks/pretraining/).

  run_options    RunOptions: strategy, devices, precision, XLA, accumulation, cadence (every training config's)
  choices        the choices of those flags, without TensorFlow (the scripts define their flags from them)
  optimization   AdamWeightDecay (google-research's AdamW), Lamb, the warmup + linear-decay schedule
  distribute     get_strategy: one_device, mirrored, multi_worker_mirrored, tpu
  inputs         the pretraining input pipeline over sharded TFRecords; in-graph dynamic masking
  trainer        Task (what a task supplies) and Trainer (the custom loop every task runs through)
  checkpointing  checkpoints that survive kill and SIGTERM; chief-only writes under multiple workers
  finetuning     what every fine-tuning task shares: its config, the pretrained encoder, training, prediction
  driver         one fine-tuning run's sequence over a task's hooks
  run_identity   what a run is (<output_dir>/run.json): a rerun that would change it is refused, more steps resume
"""
