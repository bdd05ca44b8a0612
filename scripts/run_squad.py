"""Fine-tunes BERT on SQuAD v1.1 or v2.0, predicts answers and (--do_eval) scores them with the official metrics.

google-research/bert's run_squad.py flags, same names and defaults, but for what an epoch is: a pass over the
training windows (--epoch_unit=questions: google-research's count); see docs/squad.md. Example (SQuAD 1.1):

  python scripts/run_squad.py --vocab_file=$BERT_BASE_DIR/vocab.txt \
      --bert_config_file=$BERT_BASE_DIR/bert_config.json --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \
      --do_train=True --train_file=$SQUAD_DIR/train-v1.1.json --do_predict=True \
      --predict_file=$SQUAD_DIR/dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 --num_train_epochs=2.0 \
      --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad_base/

--init_checkpoint takes what scripts/run_classifier.py takes (a pretraining output, a google-research checkpoint,
a Hugging Face directory, ...); for --do_predict/--do_eval alone, a run's <output_dir>/squad_model.
"""

from absl import flags

from bert_tf import cli
from bert_tf.tasks.squad.data import EPOCH_UNITS

FLAGS = flags.FLAGS
# google-research/bert's run_squad.py flags, with its defaults; those every fine-tuning script has (bert_tf/cli.py,
# listed in scripts/run_classifier.py) with SQuAD's max_seq_length and no eval_batch_size (--do_eval scores
# --predict_file's predictions).
cli.define_finetuning_flags(
    "squad", unit="window", max_seq_length=384, eval_batch_size=False, model_name="squad",
    do_train="Fine-tune on --train_file.", do_predict="Predict the answers of --predict_file.",
    do_eval="Predict --predict_file (which needs answers) and score it with the official metrics; for SQuAD 2.0 "
    "also search the best null_score_diff_threshold and store it in squad_model/squad.json.",
    helps={"num_train_epochs": "Passes over the training windows (a context longer than a window makes several; "
           "--epoch_unit=questions: google-research's count).",
           "export_dir": "Also export a SavedModel that answers raw questions to <export_dir>/<model_name>/<version>/ "
           "(after --do_eval has stored the threshold).",
           "model_name": "The exported model's name (with --export_dir)."})
flags.DEFINE_string("train_file", None, "SQuAD JSON for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict, e.g. dev-v1.1.json.")
flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of a context's windows.")
flags.DEFINE_integer("max_query_length", 64, "Question tokens kept (the rest are cut).")
flags.DEFINE_enum("epoch_unit", "windows", list(EPOCH_UNITS), "What --num_train_epochs counts: windows (an epoch is "
                  "a pass over the training windows, as Hugging Face's scripts) or questions (google-research's "
                  "run_squad.py: int(questions / train_batch_size * num_train_epochs) steps, a fraction of a pass "
                  "where contexts make several windows each).")
flags.DEFINE_float("include_unknowns", -1.0, "If in (0, 1), keep each training window that holds no answer with "
                   "this probability, and every window that holds one (google-research's flag of its Natural "
                   "Questions and TyDi QA baselines): long documents, where most windows hold none, e.g. 0.1; "
                   "negative keeps every window.")
flags.DEFINE_integer("n_best_size", 20, "Answers kept per question in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in WordPiece tokens.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: some questions have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0, "SQuAD 2.0: answer \"\" when null score - best score "
                   "exceeds this (default: the threshold stored in --init_checkpoint's squad.json by --do_eval, "
                   "else 0.0).")


def _config():
  from bert_tf.tasks.squad import run as squad_run

  threshold = FLAGS.null_score_diff_threshold if FLAGS["null_score_diff_threshold"].present else None
  return cli.finetuning_config(
      squad_run.SquadConfig, train_file=FLAGS.train_file, predict_file=FLAGS.predict_file,
      version_2_with_negative=FLAGS.version_2_with_negative, null_score_diff_threshold=threshold,
      n_best_size=FLAGS.n_best_size, max_answer_length=FLAGS.max_answer_length, doc_stride=FLAGS.doc_stride,
      max_query_length=FLAGS.max_query_length, epoch_unit=FLAGS.epoch_unit,
      include_unknowns=FLAGS.include_unknowns)


def _run(config, say):
  from bert_tf.tasks.squad import run as squad_run

  return squad_run.run_squad(config, say=say)


if __name__ == "__main__":
  cli.run(cli.finetuning_main(_config, _run))
