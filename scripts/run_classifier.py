"""Fine-tunes BERT on a GLUE task or on your own CSV, TSV or JSON lines files, evaluates, predicts and exports.

google-research/bert's flag names; see docs/finetuning.md. Examples (from a pretraining run):

  python scripts/run_classifier.py --task_name=MRPC --data_dir=glue_data/MRPC --vocab_file=vocab.txt \
      --bert_config_file=out/pretrain/bert_config.json --init_checkpoint=out/pretrain \
      --do_train --do_eval --do_predict --output_dir=out/mrpc --export_dir=export
  python scripts/run_classifier.py --train_file=train.csv --validation_file=dev.csv --test_file=test.csv \
      --vocab_file=vocab.txt --init_checkpoint=out/pretrain --do_train --do_eval --do_predict --output_dir=out/own

--init_checkpoint takes a pretraining output dir or checkpoint, encoder_checkpoint/, encoder_savedmodel/, a
scripts/convert_checkpoint.py output, a google-research checkpoint (bert_model.ckpt) or a Hugging Face directory;
for --do_eval/--do_predict alone, a run's <output_dir>/classifier. --vocab_file defaults to the vocab.txt that
comes with it (a converted, Hugging Face or fine-tuned model's folder has one; a pretraining output dir has not).
"""

import json

from absl import flags, logging

from bert_tf import cli

FLAGS = flags.FLAGS
# google-research/bert's flags, with its defaults.
flags.DEFINE_string("task_name", None, "CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI or AX.")
flags.DEFINE_string("data_dir", None, "The task's folder of the GLUE download (train.tsv, dev.tsv, test.tsv).")
flags.DEFINE_string("vocab_file", None, "vocab.txt of the pretrained model (default: the one that comes with "
                    "--init_checkpoint: in its folder or beside its bert_config.json).")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model (default: the one "
                    "beside --init_checkpoint).")
flags.DEFINE_string("init_checkpoint", None, "The pretrained encoder (see above).")
flags.DEFINE_string("output_dir", None, "Where checkpoints, eval_results, predictions and classifier/ go.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_bool("do_train", False, "Fine-tune on the training set: --train_file, or a GLUE task's train.tsv.")
flags.DEFINE_bool("do_eval", False, "Evaluate on the dev set: --validation_file, or a GLUE task's dev.tsv (MNLI: "
                  "matched and mismatched).")
flags.DEFINE_bool("do_predict", False, "Predict the test set: --test_file into test_predictions.csv/.tsv/.jsonl "
                  "(label strings; scored too when it has labels), or a GLUE task's test.tsv in the GLUE submission "
                  "format.")
flags.DEFINE_integer("max_seq_length", 128, "Tokens per example after WordPiece, [CLS] and [SEP]s included.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch.")
flags.DEFINE_integer("eval_batch_size", 8, "Evaluation batch (per worker).")
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch (per worker).")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training set.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with a linear warmup.")
# The shared training flags (as scripts/run_pretraining.py): save_checkpoints_steps, iterations_per_loop, use_tpu,
# tpu_name, tpu_zone, gcp_project; distribution_strategy, num_gpus, optimizer, dtype, jit_compile,
# gradient_accumulation_steps, steps_per_loop, log_steps.
cli.define_training_flags(steps_per_loop=50, log_steps=50)
# Evaluation while training: eval_every_steps, keep_best_checkpoint, metric_for_best, early_stopping_patience.
cli.define_evaluation_flags()
# New flags: the paper's selection protocol, features, export.
flags.DEFINE_integer("seed", 12345, "Seed of the head's initialisation, dropout and data order.")
flags.DEFINE_list("learning_rates", [], "Selection protocol: fine-tune with each learning rate (the paper: "
                  "5e-5,4e-5,3e-5,2e-5) and keep the best on dev.")
flags.DEFINE_integer("num_restarts", 1, "Selection protocol: random restarts (seeds seed, seed+1, ...) per "
                     "learning rate.")
flags.DEFINE_string("features_dir", None, "Where the TFRecord features are written once and reused; default "
                    "features/ beside --output_dir (out/features for --output_dir=out/mrpc).")
flags.DEFINE_bool("dynamic_padding", True, "Cut each batch to its longest example (not on TPU).")
flags.DEFINE_integer("max_train_examples", 0, "Use only the first N training examples (0: all).")
flags.DEFINE_string("export_dir", None, "Also export a SavedModel for TensorFlow Serving to "
                    "<export_dir>/<model_name>/<version>/.")
flags.DEFINE_string("model_name", None, "The served model's name (default: the task name, lower case).")
# Your own files, instead of --task_name and --data_dir (Hugging Face's flag names).
flags.DEFINE_string("train_file", None, "Your training file: .csv, .tsv or .json/.jsonl (JSON lines), with a header "
                    "naming the columns (CSV, TSV).")
flags.DEFINE_string("validation_file", None, "Your dev file (for --do_eval), in any of the same formats.")
flags.DEFINE_string("test_file", None, "Your test file (for --do_predict); its label column is optional.")
flags.DEFINE_string("text_a_column", "sentence1", "Your files' column of the (first) text.")
flags.DEFINE_string("text_b_column", None, "Your files' column of the second text of a pair (default: sentence2 "
                    "when the training file has it; else single texts).")
flags.DEFINE_string("label_column", "label", "Your files' column of the label.")
flags.DEFINE_list("labels", [], "The labels in id order (default: the sorted set of the training file's labels).")
flags.DEFINE_enum("task_type", "classification", ["classification", "regression"], "Your labels: class names, or "
                  "numbers to predict (one output, mean squared error).")
_OWN_FLAGS = ("train_file", "validation_file", "test_file", "text_a_column", "text_b_column", "label_column",
              "labels", "task_type")


def _data_files():
  """Your own files from the flags, or None for a GLUE task (--task_name, --data_dir)."""
  from bert_tf.tasks.classification import user_data

  if not (FLAGS.train_file or FLAGS.validation_file or FLAGS.test_file):
    given = [f"--{name}" for name in _OWN_FLAGS if FLAGS[name].present]
    if given:
      raise ValueError(f"{', '.join(given)}: for your own files only; give --train_file, --validation_file or "
                       "--test_file (or drop it for --task_name)")
    if not FLAGS.task_name:
      raise ValueError("--task_name is required (a GLUE task), or give your own files with --train_file, "
                       "--validation_file, --test_file")
    if not FLAGS.data_dir:
      raise ValueError("--data_dir is required: the task's folder of the GLUE download")
    return None
  return user_data.DataFiles(
      train_file=FLAGS.train_file, validation_file=FLAGS.validation_file, test_file=FLAGS.test_file,
      text_a_column=FLAGS.text_a_column, text_b_column=FLAGS.text_b_column, label_column=FLAGS.label_column,
      labels=tuple(FLAGS.labels), task_type=FLAGS.task_type)


def _config():
  from bert_tf.tasks.classification import run as glue_finetuning
  from bert_tf.training import finetuning

  data_files = _data_files()
  if not FLAGS.output_dir:
    raise ValueError("--output_dir is required")
  try:
    rates = tuple(float(r) for r in FLAGS.learning_rates)
  except ValueError:
    raise ValueError(f"--learning_rates={','.join(FLAGS.learning_rates)}: give numbers, e.g. "
                     "5e-5,4e-5,3e-5,2e-5") from None
  ft = finetuning.FinetuningConfig(
      output_dir=FLAGS.output_dir,
      bert_config=finetuning.bert_config_for(FLAGS.bert_config_file, FLAGS.init_checkpoint),
      init_checkpoint=FLAGS.init_checkpoint, train_batch_size=FLAGS.train_batch_size,
      eval_batch_size=FLAGS.eval_batch_size, predict_batch_size=FLAGS.predict_batch_size,
      learning_rate=FLAGS.learning_rate, num_train_epochs=FLAGS.num_train_epochs,
      warmup_proportion=FLAGS.warmup_proportion, seed=FLAGS.seed,
      **cli.training_flag_values(), **cli.evaluation_flag_values())
  vocab_file = finetuning.vocab_file_for(FLAGS.vocab_file, FLAGS.init_checkpoint)  # after the config's checks
  return glue_finetuning.ClassifierConfig(
      task_name=FLAGS.task_name, data_dir=FLAGS.data_dir, vocab_file=vocab_file, finetuning=ft,
      do_lower_case=FLAGS.do_lower_case, do_train=FLAGS.do_train, do_eval=FLAGS.do_eval,
      do_predict=FLAGS.do_predict, max_seq_length=FLAGS.max_seq_length, features_dir=FLAGS.features_dir,
      dynamic_padding=FLAGS.dynamic_padding, max_train_examples=FLAGS.max_train_examples,
      learning_rates=rates, num_restarts=FLAGS.num_restarts, export_dir=FLAGS.export_dir,
      model_name=FLAGS.model_name, bert_config_file=FLAGS.bert_config_file, data_files=data_files)


def main(argv):
  del argv
  from bert_tf.training import run_identity

  run_identity.check_output_dir(FLAGS.output_dir)  # a file there: one line, before TensorFlow loads
  config = _config()
  config.validate()  # Before TensorFlow starts devices: bad flags fail fast.
  from bert_tf.tasks.classification import run as glue_finetuning

  summary = cli.run_finetuning(
      lambda: glue_finetuning.run_classifier(config, say=lambda line: logging.info("%s", line)), config.output_dir)
  shown = {k: v for k, v in summary.items() if k not in ("train_history",)}
  print(json.dumps(shown, indent=2, default=str))


if __name__ == "__main__":
  cli.run(main)
