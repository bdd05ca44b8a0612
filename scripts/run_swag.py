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

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
# run_classifier.py's flags (google-research's names, bert_tf/cli.py's), with the paper's SWAG values as defaults.
flags.DEFINE_string("data_dir", None, "The SWAG release's data/ folder (train.csv, val.csv, test.csv), or a "
                    "folder of files with its columns (CSV, or JSON lines: train.jsonl, val.jsonl, test.jsonl).")
cli.define_finetuning_flags(
    "swag", unit="sequence (one of an example's four)", train_batch_size=16, learning_rate=2e-5, model_name="swag",
    max_train_examples=True, do_train="Fine-tune on --data_dir's train.csv (or train.jsonl).",
    do_eval="Evaluate (accuracy) on val.csv (or val.jsonl).",
    do_predict="Predict test.csv (or test.jsonl) into test_predictions.csv.",
    helps={"train_batch_size": "Global training batch, in examples (each of four sequences).",
           "dynamic_padding": "Cut each batch to its longest sequence (not on TPU).",
           "model_name": "The served model's name."})


def _config():
  from bert_tf.tasks.swag import run as swag_run

  return cli.finetuning_config(
      swag_run.SwagConfig, require={"data_dir": "the SWAG release's data/ folder (train.csv, val.csv, test.csv)"},
      data_dir=FLAGS.data_dir)


def _run(config, say):
  from bert_tf.tasks.swag import run as swag_run

  return swag_run.run_swag(config, say=say)


if __name__ == "__main__":
  cli.run(cli.finetuning_main(_config, _run))
