"""Pretrains BERT (masked LM + next sentence) on google-research-format TFRecords; see docs/pretraining.md.
The paper's ablations are flags: --no_nsp, --left_to_right, and with --dynamic_masking --mask_token_rate and
--random_token_rate.

Flags are google-research/bert's where it had them. Rerunning the same command resumes from the newest
checkpoint in --output_dir; Ctrl-C or SIGTERM saves a checkpoint and exits with status 130 or 143 (rerun to
resume; a second Ctrl-C exits at once). One run per --output_dir: a second is refused while the first lives.
At the end the encoder is written for fine-tuning: <output_dir>/encoder_checkpoint/, encoder_savedmodel/,
bert_config.json.

  python scripts/run_pretraining.py --input_file='tfrecords/pretrain-*.tfrecord' --output_dir=out/pretrain \
      --bert_config_file=configs/bert_tiny.json --num_train_steps=10000 --num_warmup_steps=1000
"""

import sys

from absl import flags

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
flags.DEFINE_bool("do_train", False, "Train. With neither --do_train nor --do_eval, trains (as before these flags).")
flags.DEFINE_bool("do_eval", False, "Evaluate (after training, or without --do_train the newest checkpoint in "
                  "--output_dir) and write <output_dir>/eval_results.txt.")
flags.DEFINE_integer("eval_batch_size", 8, "Examples per evaluation batch.")
flags.DEFINE_integer("max_eval_steps", 100, "Evaluation batches, at most.")
# The shared training flags: save_checkpoints_steps, iterations_per_loop, use_tpu, tpu_name, tpu_zone,
# gcp_project; distribution_strategy, num_gpus, optimizer, dtype, jit_compile, gradient_accumulation_steps,
# steps_per_loop, log_steps.
cli.define_training_flags(steps_per_loop=100, log_steps=100)
# New flags.
flags.DEFINE_integer("keep_checkpoint_max", 5, "Training checkpoints kept.")
flags.DEFINE_bool("dynamic_masking", False, "The records are unmasked: mask in the input pipeline.")
flags.DEFINE_bool("do_whole_word_mask", False, "With --dynamic_masking: mask all WordPieces of a word together "
                  "(static records were masked when written: see create_pretraining_data.py's flag).")
flags.DEFINE_string("vocab_file", None, "The vocabulary, for --dynamic_masking.")
flags.DEFINE_string("eval_input_file", None, "Evaluation TFRecord files, as --input_file; default --input_file "
                    "(as google-research, which evaluates on its training records): pass held-out records.")
if "eval_every_steps" not in FLAGS:  # the shared training flags may define it
  flags.DEFINE_integer("eval_every_steps", 0, "Also evaluate every this many updates during training and at the "
                       "last one (0: never): logged and written to TensorBoard under <output_dir>/eval.")
flags.DEFINE_integer("seed", 12345, "Seed of initialisation, data order and dynamic masking.")
# The paper's ablations (Tables 5 and 8; docs/pretraining.md).
cli.define_masking_flags("--dynamic_masking")  # --mask_token_rate, --random_token_rate
flags.DEFINE_bool("no_nsp", False, "Masked LM only: no next-sentence head or loss (the records' "
                  "next_sentence_labels are read and ignored).")
flags.DEFINE_bool("left_to_right", False, "A left-to-right language model (the paper's 'LTR & No NSP'; implies "
                  "--no_nsp): causal attention (written to <output_dir>/bert_config.json as causal_attention, "
                  "which fine-tuning then keeps), next-token loss over every real position. Reads unmasked "
                  "records (create_pretraining_data.py --dynamic_masking), without --dynamic_masking here.")

def _config():
  from bert_tf.config import BertConfig
  from bert_tf.tasks.pretraining.config import PretrainingConfig

  # Neither --do_train nor --do_eval: train, as this script did before it had them.
  do_train = FLAGS.do_train or not (FLAGS["do_train"].present or FLAGS["do_eval"].present)
  for name in ("output_dir", "bert_config_file", *(("input_file",) if do_train or not FLAGS.eval_input_file
                                                   else ())):
    if not getattr(FLAGS, name):
      raise ValueError(f"--{name} is required")
  return PretrainingConfig(
      input_file=FLAGS.input_file, output_dir=FLAGS.output_dir,
      bert_config=BertConfig.from_json_file(FLAGS.bert_config_file), bert_config_file=FLAGS.bert_config_file,
      init_checkpoint=FLAGS.init_checkpoint,
      max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      train_batch_size=FLAGS.train_batch_size, learning_rate=FLAGS.learning_rate,
      num_train_steps=FLAGS.num_train_steps, num_warmup_steps=FLAGS.num_warmup_steps,
      keep_checkpoint_max=FLAGS.keep_checkpoint_max, dynamic_masking=FLAGS.dynamic_masking,
      do_whole_word_mask=FLAGS.do_whole_word_mask, vocab_file=FLAGS.vocab_file, seed=FLAGS.seed,
      mask_token_rate=FLAGS.mask_token_rate, random_token_rate=FLAGS.random_token_rate, no_nsp=FLAGS.no_nsp,
      left_to_right=FLAGS.left_to_right, do_train=do_train, do_eval=FLAGS.do_eval,
      eval_input_file=FLAGS.eval_input_file, eval_batch_size=FLAGS.eval_batch_size,
      max_eval_steps=FLAGS.max_eval_steps,
      # The shared training flags may come to include --eval_every_steps: one value either way.
      **{"eval_every_steps": FLAGS.eval_every_steps, **cli.training_flag_values()})


def main(argv):
  del argv
  from bert_tf import fileio
  from bert_tf.training import run_identity

  # A file there, or a folder that cannot be written: one line, before TensorFlow loads.
  run_identity.check_output_dir(FLAGS.output_dir)
  fileio.check_writable("output_dir", FLAGS.output_dir)
  config = _config()
  config.validate()  # Before TensorFlow starts devices: bad flags fail fast.
  from bert_tf.tasks.pretraining import run as pretraining

  cli.start_training()
  result = pretraining.run_pretraining(config)
  if result.interrupted:
    sys.exit(result.exit_code)  # 130 after Ctrl-C, 143 after SIGTERM: saved; rerun to resume


if __name__ == "__main__":
  cli.run(main)
