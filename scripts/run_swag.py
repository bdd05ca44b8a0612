"""Fine-tunes BERT on SWAG (multiple choice: which of four endings continues a sentence), evaluates on val.csv
and predicts test.csv.

run_classifier.py's flag names; the paper's SWAG settings as defaults (learning rate 2e-5, batch 16, 3 epochs);
see docs/swag.md. Example:

  python scripts/run_swag.py --data_dir=swagaf/data --vocab_file=$BERT_BASE_DIR/vocab.txt \
      --bert_config_file=$BERT_BASE_DIR/bert_config.json --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \
      --do_train --do_eval --do_predict --output_dir=out/swag

--init_checkpoint takes what scripts/run_classifier.py takes (a pretraining output, a google-research checkpoint,
a Hugging Face directory, ...); for --do_eval/--do_predict alone, a run's <output_dir>/swag_model.
"""

import json

from absl import flags, logging

from bert_tf import cli

FLAGS = flags.FLAGS
# run_classifier.py's flags (google-research's names), with the paper's SWAG values as defaults.
flags.DEFINE_string("data_dir", None, "The SWAG release's data/ folder (train.csv, val.csv, test.csv), or a "
                    "folder of files with its columns (CSV, or JSON lines: train.jsonl, val.jsonl, test.jsonl).")
flags.DEFINE_string("vocab_file", None, "vocab.txt of the pretrained model (default: the one that comes with "
                    "--init_checkpoint: in its folder or beside its bert_config.json).")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model (default: the one "
                    "beside --init_checkpoint).")
flags.DEFINE_string("init_checkpoint", None, "The pretrained encoder (see above).")
flags.DEFINE_string("output_dir", None, "Where checkpoints, eval_results, test_predictions.csv and swag_model/ go.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_bool("do_train", False, "Fine-tune on --data_dir's train.csv (or train.jsonl).")
flags.DEFINE_bool("do_eval", False, "Evaluate (accuracy) on val.csv (or val.jsonl).")
flags.DEFINE_bool("do_predict", False, "Predict test.csv (or test.jsonl) into test_predictions.csv.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per sequence (one of an example's four) after WordPiece, "
                     "[CLS] and [SEP]s included.")
flags.DEFINE_integer("train_batch_size", 16, "Global training batch, in examples (each of four sequences).")
flags.DEFINE_integer("eval_batch_size", 8, "Evaluation batch (per worker).")
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch (per worker).")
flags.DEFINE_float("learning_rate", 2e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training file.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with a linear warmup.")
# The shared training flags (as scripts/run_classifier.py): save_checkpoints_steps, iterations_per_loop, use_tpu,
# tpu_name, tpu_zone, gcp_project; distribution_strategy, num_gpus, optimizer, dtype, jit_compile,
# gradient_accumulation_steps, steps_per_loop, log_steps, deterministic.
cli.define_training_flags(steps_per_loop=50, log_steps=50)
# Evaluation while training: eval_every_steps, keep_best_checkpoint, metric_for_best, early_stopping_patience.
cli.define_evaluation_flags()
# New flags.
flags.DEFINE_integer("seed", 12345, "Seed of the head's initialisation, dropout and data order.")
flags.DEFINE_string("features_dir", None, "Where the TFRecord features are written once and reused; default "
                    "features/ beside --output_dir (out/features for --output_dir=out/mrpc).")
flags.DEFINE_bool("dynamic_padding", True, "Cut each batch to its longest sequence (not on TPU).")
flags.DEFINE_integer("max_train_examples", 0, "Use only the first N training examples (0: all).")
flags.DEFINE_string("export_dir", None, "Also export a SavedModel for TensorFlow Serving (raw text in) to "
                    "<export_dir>/<model_name>/<version>/.")
flags.DEFINE_string("model_name", "swag", "The served model's name.")


def _config():
  from bert_tf.tasks.swag import run as swag_run
  from bert_tf.training import finetuning

  if not FLAGS.output_dir:
    raise ValueError("--output_dir is required")
  if not FLAGS.data_dir:
    raise ValueError("--data_dir is required: the SWAG release's data/ folder (train.csv, val.csv, test.csv)")
  ft = finetuning.FinetuningConfig(
      output_dir=FLAGS.output_dir,
      bert_config=finetuning.bert_config_for(FLAGS.bert_config_file, FLAGS.init_checkpoint),
      init_checkpoint=FLAGS.init_checkpoint, train_batch_size=FLAGS.train_batch_size,
      eval_batch_size=FLAGS.eval_batch_size, predict_batch_size=FLAGS.predict_batch_size,
      learning_rate=FLAGS.learning_rate, num_train_epochs=FLAGS.num_train_epochs,
      warmup_proportion=FLAGS.warmup_proportion, seed=FLAGS.seed,
      **cli.training_flag_values(), **cli.evaluation_flag_values())
  vocab_file = finetuning.vocab_file_for(FLAGS.vocab_file, FLAGS.init_checkpoint)  # after the config's checks
  return swag_run.SwagConfig(
      data_dir=FLAGS.data_dir, vocab_file=vocab_file, finetuning=ft, do_lower_case=FLAGS.do_lower_case,
      do_train=FLAGS.do_train, do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict,
      max_seq_length=FLAGS.max_seq_length, features_dir=FLAGS.features_dir, dynamic_padding=FLAGS.dynamic_padding,
      max_train_examples=FLAGS.max_train_examples, export_dir=FLAGS.export_dir, model_name=FLAGS.model_name,
      bert_config_file=FLAGS.bert_config_file)


def main(argv):
  del argv
  from bert_tf.training import run_identity

  run_identity.check_output_dir(FLAGS.output_dir)  # a file there: one line, before TensorFlow loads
  config = _config()
  config.validate()  # Before TensorFlow starts devices: bad flags fail fast.
  from bert_tf.tasks.swag import run as swag_run

  summary = cli.run_finetuning(lambda: swag_run.run_swag(config, say=lambda line: logging.info("%s", line)),
                               config.output_dir)
  print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
  cli.run(main)
