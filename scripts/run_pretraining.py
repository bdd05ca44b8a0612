"""Pretrains BERT (masked LM + next sentence) on google-research-format TFRecords; see docs/pretraining.md.

Flags are google-research/bert's where it had them. Rerunning the same command resumes from the newest
checkpoint in --output_dir; SIGTERM saves a checkpoint and exits with status 143 (rerun to resume). At the end
the encoder is written for fine-tuning: <output_dir>/encoder_checkpoint/, encoder_savedmodel/, bert_config.json.

  python scripts/run_pretraining.py --input_file='tfrecords/pretrain-*.tfrecord' --output_dir=out/pretrain \
      --bert_config_file=configs/bert_tiny.json --num_train_steps=10000 --num_warmup_steps=1000
"""

import sys

from absl import flags, logging

from bert_tf import cli

FLAGS = flags.FLAGS
# google-research/bert's flags, with its defaults.
flags.DEFINE_string("input_file", None, "Input TFRecord files: comma-separated files or globs, local or gs://.")
flags.DEFINE_string("output_dir", None, "Where checkpoints, summaries and the encoder are written.")
flags.DEFINE_string("bert_config_file", None, "The model's bert_config.json.")
flags.DEFINE_string("init_checkpoint", None, "Initial encoder weights, when not resuming: a bert_tf checkpoint, "
                    "encoder_checkpoint/ or encoder_savedmodel/ (see docs/pretraining.md).")
flags.DEFINE_integer("max_seq_length", 128, "Sequence length of the records.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Masked LM predictions per sequence of the records (or "
                     "made by --dynamic_masking).")
flags.DEFINE_integer("train_batch_size", 32, "Global batch: examples per optimizer update over all replicas "
                     "(and accumulation steps).")
flags.DEFINE_float("learning_rate", 1e-4, "Peak learning rate.")
flags.DEFINE_integer("num_train_steps", 100000, "Optimizer updates.")
flags.DEFINE_integer("num_warmup_steps", 10000, "Linear warmup updates.")
flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many updates.")
flags.DEFINE_integer("iterations_per_loop", None, "google-research's name for --steps_per_loop.")
flags.DEFINE_bool("use_tpu", False, "Same as --distribution_strategy=tpu.")
flags.DEFINE_string("tpu_name", None, "'local' on a Cloud TPU VM, else the TPU's name or grpc:// address.")
flags.DEFINE_string("tpu_zone", None, "GCE zone of the TPU (when --tpu_name is a name).")
flags.DEFINE_string("gcp_project", None, "GCP project of the TPU (when --tpu_name is a name).")
# New flags.
flags.DEFINE_enum("distribution_strategy", "mirrored", ["one_device", "mirrored", "multi_worker_mirrored", "tpu"],
                  "How to distribute: see docs/pretraining.md.")
flags.DEFINE_integer("num_gpus", 0, "GPUs to use on this machine (0: CPU).")
flags.DEFINE_enum("optimizer", "adamw", ["adamw", "adamw_bias_corrected", "lamb"],
                  "AdamW as google-research's (no bias correction), AdamW with Adam's bias correction (as "
                  "torch.optim.AdamW and the TF Model Garden), or LAMB.")
flags.DEFINE_enum("dtype", "float32", ["float32", "mixed_float16", "mixed_bfloat16"], "Compute precision.")
flags.DEFINE_bool("jit_compile", False, "XLA-compile the forward and backward pass.")
flags.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-batches per update (train_batch_size / this "
                     "examples each, split across replicas).")
flags.DEFINE_integer("steps_per_loop", 100, "Updates per host call (checkpoints and logs fall on loop ends).")
flags.DEFINE_integer("log_steps", 100, "A progress line and TensorBoard summaries every this many updates.")
flags.DEFINE_integer("keep_checkpoint_max", 5, "Training checkpoints kept.")
flags.DEFINE_bool("dynamic_masking", False, "The records are unmasked: mask in the input pipeline.")
flags.DEFINE_string("vocab_file", None, "The vocabulary, for --dynamic_masking.")
flags.DEFINE_integer("seed", 12345, "Seed of initialisation, data order and dynamic masking.")
flags.DEFINE_bool("deterministic", False, "Enable TensorFlow op determinism (slower; same seed, same weights).")

TERMINATED = 143  # 128 + SIGTERM: stopped early after saving; rerun to resume.


def _config():
  from bert_tf.config import BertConfig
  from bert_tf.training import pretraining

  for name in ("input_file", "output_dir", "bert_config_file"):
    if not getattr(FLAGS, name):
      raise ValueError(f"--{name} is required")
  strategy = FLAGS.distribution_strategy
  if FLAGS.use_tpu:
    if FLAGS["distribution_strategy"].present and strategy != "tpu":
      raise ValueError(f"--use_tpu contradicts --distribution_strategy={strategy}; pass one of them")
    strategy = "tpu"
  steps_per_loop = FLAGS.steps_per_loop
  if FLAGS.iterations_per_loop is not None:
    if FLAGS["steps_per_loop"].present:
      raise ValueError("--iterations_per_loop and --steps_per_loop are the same setting; pass one of them")
    steps_per_loop = FLAGS.iterations_per_loop
  return pretraining.PretrainingConfig(
      input_file=FLAGS.input_file, output_dir=FLAGS.output_dir,
      bert_config=BertConfig.from_json_file(FLAGS.bert_config_file), init_checkpoint=FLAGS.init_checkpoint,
      max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      train_batch_size=FLAGS.train_batch_size, learning_rate=FLAGS.learning_rate,
      num_train_steps=FLAGS.num_train_steps, num_warmup_steps=FLAGS.num_warmup_steps,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps, keep_checkpoint_max=FLAGS.keep_checkpoint_max,
      steps_per_loop=steps_per_loop, log_steps=FLAGS.log_steps, distribution_strategy=strategy,
      num_gpus=FLAGS.num_gpus, tpu_name=FLAGS.tpu_name, tpu_zone=FLAGS.tpu_zone, gcp_project=FLAGS.gcp_project,
      optimizer=FLAGS.optimizer, dtype=FLAGS.dtype, jit_compile=FLAGS.jit_compile,
      gradient_accumulation_steps=FLAGS.gradient_accumulation_steps, dynamic_masking=FLAGS.dynamic_masking,
      vocab_file=FLAGS.vocab_file, seed=FLAGS.seed)


def main(argv):
  del argv
  config = _config()
  config.validate()  # Before TensorFlow starts devices: bad flags fail fast.
  import tensorflow as tf

  from bert_tf.training import pretraining

  if FLAGS.deterministic:
    tf.config.experimental.enable_op_determinism()
  logging.set_verbosity(logging.INFO)
  result = pretraining.run_pretraining(config)
  if result.interrupted:
    sys.exit(TERMINATED)


if __name__ == "__main__":
  cli.run(main)
