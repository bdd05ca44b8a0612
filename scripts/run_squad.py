"""Fine-tunes BERT on SQuAD v1.1 or v2.0, predicts answers and (--do_eval) scores them with the official metrics.

google-research/bert's run_squad.py flags, same names and defaults; see docs/squad.md. Example (SQuAD 1.1):

  python scripts/run_squad.py --vocab_file=$BERT_BASE_DIR/vocab.txt \
      --bert_config_file=$BERT_BASE_DIR/bert_config.json --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \
      --do_train=True --train_file=$SQUAD_DIR/train-v1.1.json --do_predict=True \
      --predict_file=$SQUAD_DIR/dev-v1.1.json --train_batch_size=12 --learning_rate=3e-5 --num_train_epochs=2.0 \
      --max_seq_length=384 --doc_stride=128 --output_dir=/tmp/squad_base/

--init_checkpoint takes what scripts/run_classifier.py takes (a pretraining output, a google-research checkpoint,
a Hugging Face directory, ...); for --do_predict/--do_eval alone, a run's <output_dir>/squad_model.
"""

import json

from absl import flags, logging

from bert_tf import cli

FLAGS = flags.FLAGS
# google-research/bert's run_squad.py flags, with its defaults.
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model (default: the one "
                    "beside --init_checkpoint).")
flags.DEFINE_string("vocab_file", None, "vocab.txt of the pretrained model (default: the one that comes with "
                    "--init_checkpoint: in its folder or beside its bert_config.json).")
flags.DEFINE_string("output_dir", None, "Where checkpoints, predictions, eval_results and squad_model/ go.")
flags.DEFINE_string("train_file", None, "SQuAD JSON for training, e.g. train-v1.1.json.")
flags.DEFINE_string("predict_file", None, "SQuAD JSON to predict, e.g. dev-v1.1.json.")
flags.DEFINE_string("init_checkpoint", None, "The pretrained encoder (see above).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_integer("max_seq_length", 384, "Tokens per window after WordPiece, [CLS] and [SEP]s included.")
flags.DEFINE_integer("doc_stride", 128, "Tokens between the starts of a context's windows.")
flags.DEFINE_integer("max_query_length", 64, "Question tokens kept (the rest are cut).")
flags.DEFINE_bool("do_train", False, "Fine-tune on --train_file.")
flags.DEFINE_bool("do_predict", False, "Predict the answers of --predict_file.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch.")
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch (per worker).")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over --train_file.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with a linear warmup.")
flags.DEFINE_integer("n_best_size", 20, "Answers kept per question in nbest_predictions.json.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in WordPiece tokens.")
flags.DEFINE_bool("version_2_with_negative", False, "SQuAD 2.0: some questions have no answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0, "SQuAD 2.0: answer \"\" when null score - best score "
                   "exceeds this (default: the threshold stored in --init_checkpoint's squad.json by --do_eval, "
                   "else 0.0).")
# The shared training flags (as scripts/run_classifier.py): save_checkpoints_steps, iterations_per_loop, use_tpu,
# tpu_name, tpu_zone, gcp_project; distribution_strategy, num_gpus, optimizer, dtype, jit_compile,
# gradient_accumulation_steps, steps_per_loop, log_steps.
cli.define_training_flags(steps_per_loop=50, log_steps=50)
# Evaluation while training: eval_every_steps, keep_best_checkpoint, metric_for_best, early_stopping_patience.
cli.define_evaluation_flags()
# New flags.
flags.DEFINE_bool("do_eval", False, "Predict --predict_file (which needs answers) and score it with the official "
                  "metrics; for SQuAD 2.0 also search the best null_score_diff_threshold and store it in "
                  "squad_model/squad.json.")
flags.DEFINE_integer("seed", 12345, "Seed of the head's initialisation, dropout and data order.")
flags.DEFINE_string("features_dir", None, "Where the TFRecord features are written once and reused; default "
                    "features/ beside --output_dir (out/features for --output_dir=out/mrpc).")
flags.DEFINE_bool("dynamic_padding", True, "Cut each batch to its longest window (not on TPU).")
flags.DEFINE_string("export_dir", None, "Also export a SavedModel that answers raw questions to "
                    "<export_dir>/<model_name>/<version>/ (after --do_eval has stored the threshold).")
flags.DEFINE_string("model_name", "squad", "The exported model's name (with --export_dir).")


def _config():
  from bert_tf.tasks.squad import run as squad_run
  from bert_tf.training import finetuning

  if not FLAGS.output_dir:
    raise ValueError("--output_dir is required")
  ft = finetuning.FinetuningConfig(
      output_dir=FLAGS.output_dir,
      bert_config=finetuning.bert_config_for(FLAGS.bert_config_file, FLAGS.init_checkpoint),
      init_checkpoint=FLAGS.init_checkpoint, train_batch_size=FLAGS.train_batch_size,
      predict_batch_size=FLAGS.predict_batch_size, learning_rate=FLAGS.learning_rate,
      num_train_epochs=FLAGS.num_train_epochs, warmup_proportion=FLAGS.warmup_proportion, seed=FLAGS.seed,
      **cli.training_flag_values(), **cli.evaluation_flag_values())
  threshold = FLAGS.null_score_diff_threshold if FLAGS["null_score_diff_threshold"].present else None
  vocab_file = finetuning.vocab_file_for(FLAGS.vocab_file, FLAGS.init_checkpoint)  # after the config's checks
  return squad_run.SquadConfig(
      vocab_file=vocab_file, finetuning=ft, train_file=FLAGS.train_file, predict_file=FLAGS.predict_file,
      do_lower_case=FLAGS.do_lower_case, do_train=FLAGS.do_train, do_predict=FLAGS.do_predict,
      do_eval=FLAGS.do_eval, version_2_with_negative=FLAGS.version_2_with_negative,
      null_score_diff_threshold=threshold, n_best_size=FLAGS.n_best_size,
      max_answer_length=FLAGS.max_answer_length, max_seq_length=FLAGS.max_seq_length, doc_stride=FLAGS.doc_stride,
      max_query_length=FLAGS.max_query_length, features_dir=FLAGS.features_dir,
      dynamic_padding=FLAGS.dynamic_padding, bert_config_file=FLAGS.bert_config_file,
      export_dir=FLAGS.export_dir, model_name=FLAGS.model_name)


def main(argv):
  del argv
  from bert_tf.training import run_identity

  run_identity.check_output_dir(FLAGS.output_dir)  # a file there: one line, before TensorFlow loads
  config = _config()
  config.validate()  # Before TensorFlow starts devices: bad flags fail fast.
  from bert_tf.tasks.squad import run as squad_run

  summary = cli.run_finetuning(lambda: squad_run.run_squad(config, say=lambda line: logging.info("%s", line)),
                               config.output_dir)
  print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
  cli.run(main)
