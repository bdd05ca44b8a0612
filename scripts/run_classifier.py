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

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
# google-research/bert's flags, with its defaults; the flags every fine-tuning script has are bert_tf/cli.py's:
# vocab_file, bert_config_file, init_checkpoint, output_dir, do_lower_case, do_train/do_eval/do_predict,
# max_seq_length, the batch sizes, learning_rate, num_train_epochs, warmup_proportion; the training flags
# (save_checkpoints_steps, use_tpu, ..., distribution_strategy, optimizer, dtype, ...: as scripts/run_pretraining.py);
# evaluation while training (eval_every_steps, keep_best_checkpoint, metric_for_best, early_stopping_patience);
# seed, features_dir, dynamic_padding, max_train_examples, export_dir, model_name.
flags.DEFINE_string("task_name", None, "CoLA, SST-2, MRPC, STS-B, QQP, MNLI, QNLI, RTE, WNLI or AX.")
flags.DEFINE_string("data_dir", None, "The task's folder of the GLUE download (train.tsv, dev.tsv, test.tsv).")
cli.define_finetuning_flags(
    "classifier", unit="example", max_train_examples=True,
    do_train="Fine-tune on the training set: --train_file, or a GLUE task's train.tsv.",
    do_eval="Evaluate on the dev set: --validation_file, or a GLUE task's dev.tsv (MNLI: matched and mismatched).",
    do_predict="Predict the test set: --test_file into test_predictions.csv/.tsv/.jsonl (label strings; scored too "
    "when it has labels), or a GLUE task's test.tsv in the GLUE submission format.",
    helps={"model_name": "The served model's name (default: the task name, lower case)."})
# New flags: the paper's selection protocol.
flags.DEFINE_list("learning_rates", [], "Selection protocol: fine-tune with each learning rate (the paper: "
                  "5e-5,4e-5,3e-5,2e-5) and keep the best on dev.")
flags.DEFINE_integer("num_restarts", 1, "Selection protocol: random restarts (seeds seed, seed+1, ...) per "
                     "learning rate.")
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
  from bert_tf.tasks.classification import run as classification_run

  data_files = _data_files()
  try:
    rates = tuple(float(r) for r in FLAGS.learning_rates)
  except ValueError:
    raise ValueError(f"--learning_rates={','.join(FLAGS.learning_rates)}: give numbers, e.g. "
                     "5e-5,4e-5,3e-5,2e-5") from None
  return cli.finetuning_config(classification_run.ClassifierConfig, task_name=FLAGS.task_name, data_dir=FLAGS.data_dir,
                               learning_rates=rates, num_restarts=FLAGS.num_restarts, data_files=data_files)


def _run(config, say):
  from bert_tf.tasks.classification import run as classification_run

  return classification_run.run_classifier(config, say=say)


if __name__ == "__main__":
  cli.run(cli.finetuning_main(_config, _run, hidden=("train_history",)))
