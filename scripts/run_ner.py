"""Fine-tunes BERT for named-entity recognition on CoNLL-2003 (or any file in its column format), evaluates with
conlleval's entity-level scores, writes predictions conlleval reads, and exports. A tag set that is not entities
(part-of-speech tags, any label per word) is word-level tagging, scored by accuracy (docs/ner.md).

run_classifier.py's flag names; see docs/ner.md. Example (the release's eng.train, eng.testa, eng.testb in
$CONLL_DIR; a cased model):

  python scripts/run_ner.py --data_dir=$CONLL_DIR --vocab_file=$BERT_DIR/vocab.txt \
      --bert_config_file=$BERT_DIR/bert_config.json --init_checkpoint=$BERT_DIR/bert_model.ckpt \
      --nodo_lower_case --do_train --do_eval --do_predict --document_context --output_dir=out/ner

--init_checkpoint takes what scripts/run_classifier.py takes; for --do_eval/--do_predict alone, a run's
<output_dir>/ner_model. --feature_based=<choice> trains a BiLSTM tagger on the frozen encoder's features instead of
fine-tuning (the paper's Table 7; docs/feature_based.md).
"""

import json

from absl import flags, logging

from bert_tf import cli

FLAGS = flags.FLAGS
# run_classifier.py's flags (google-research's names), with the paper's fine-tuning defaults.
flags.DEFINE_string("data_dir", None, "Folder of eng.train, eng.testa, eng.testb (the CoNLL-2003 release), "
                    "train.txt, valid.txt, test.txt (a common copy) or train.jsonl, dev.jsonl, test.jsonl (JSON lines "
                    '{"tokens": [...], "tags": [...]}).')
flags.DEFINE_string("vocab_file", None, "vocab.txt of the pretrained model (default: the one that comes with "
                    "--init_checkpoint: in its folder or beside its bert_config.json).")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the pretrained model (default: the one "
                    "beside --init_checkpoint).")
flags.DEFINE_string("init_checkpoint", None, "The pretrained encoder (see above).")
flags.DEFINE_string("output_dir", None, "Where checkpoints, predictions, results and ner_model/ go.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models; pass --nodo_lower_case "
                  "for a cased one).")
flags.DEFINE_bool("do_train", False, "Fine-tune on the training file.")
flags.DEFINE_bool("do_eval", False, "Predict and score the dev file (eng.testa / valid.txt).")
flags.DEFINE_bool("do_predict", False, "Predict and score the test file (eng.testb / test.txt).")
flags.DEFINE_integer("max_seq_length", 128, "WordPieces per window, [CLS] and [SEP] included.")
flags.DEFINE_integer("train_batch_size", 32, "Global training batch (windows).")
flags.DEFINE_integer("predict_batch_size", 8, "Prediction batch (per worker).")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate.")
flags.DEFINE_float("num_train_epochs", 3.0, "Epochs over the training file.")
flags.DEFINE_float("warmup_proportion", 0.1, "Share of the steps with a linear warmup.")
# The shared training flags (as scripts/run_classifier.py).
cli.define_training_flags(steps_per_loop=50, log_steps=50)
# Evaluation while training: eval_every_steps, keep_best_checkpoint, metric_for_best, early_stopping_patience.
cli.define_evaluation_flags()
# New flags.
flags.DEFINE_enum("tag_scheme", "auto", ["auto", "IOB1", "IOB2", "BIOES", "plain"], "The data files' tags: "
                  "detected, or the scheme they must be in (IOB1: the release's); plain: tags that are not entities "
                  "(part of speech, any label per word), learnt as they are and scored by word-level accuracy.")
flags.DEFINE_enum("label_scheme", "IOB2", ["IOB2", "BIOES"], "The model's labels; predictions are written back "
                  "in each file's scheme.")
flags.DEFINE_bool("document_context", False, "Fill each window with the neighbouring sentences of its document "
                  "(the paper's maximal document context); predictions stay for the centre sentence.")
flags.DEFINE_integer("seed", 12345, "Seed of the head's initialisation, dropout and data order.")
flags.DEFINE_string("features_dir", None, "Where the TFRecord features are written once and reused; default "
                    "features/ beside --output_dir (out/features for --output_dir=out/mrpc).")
flags.DEFINE_bool("dynamic_padding", True, "Cut each batch to its longest window (not on TPU).")
flags.DEFINE_string("export_dir", None, "Also export a SavedModel for TensorFlow Serving to "
                    "<export_dir>/<model_name>/<version>/.")
flags.DEFINE_string("model_name", None, "The served model's name (default: ner).")
flags.DEFINE_string("feature_based", None, "The paper's feature-based mode (section 5.3): the encoder stays frozen "
                    "and a two-layer BiLSTM tagger trains on this feature choice: embeddings, second_to_last_hidden, "
                    "last_hidden, weighted_sum_last_four, concat_last_four or weighted_sum_all (see "
                    "docs/feature_based.md; a head trained from scratch wants a larger --learning_rate, e.g. 1e-3).")
flags.DEFINE_bool("cache_features", True, "With --feature_based: compute the frozen encoder's layers once per data "
                  "file and keep them under --features_dir/ner_layers/ (else the encoder runs in every step).")


def _config():
  from bert_tf.tasks.ner import run as ner_run
  from bert_tf.training import finetuning

  if not FLAGS.output_dir:
    raise ValueError("--output_dir is required")
  if not FLAGS.data_dir:
    raise ValueError("--data_dir is required: the folder of eng.train, eng.testa, eng.testb")
  ft = finetuning.FinetuningConfig(
      output_dir=FLAGS.output_dir,
      bert_config=finetuning.bert_config_for(FLAGS.bert_config_file, FLAGS.init_checkpoint),
      init_checkpoint=FLAGS.init_checkpoint, train_batch_size=FLAGS.train_batch_size,
      predict_batch_size=FLAGS.predict_batch_size, learning_rate=FLAGS.learning_rate,
      num_train_epochs=FLAGS.num_train_epochs, warmup_proportion=FLAGS.warmup_proportion, seed=FLAGS.seed,
      **cli.training_flag_values(), **cli.evaluation_flag_values())
  vocab_file = finetuning.vocab_file_for(FLAGS.vocab_file, FLAGS.init_checkpoint)  # after the config's checks
  return ner_run.NerConfig(
      data_dir=FLAGS.data_dir, vocab_file=vocab_file, finetuning=ft, do_lower_case=FLAGS.do_lower_case,
      do_train=FLAGS.do_train, do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict,
      max_seq_length=FLAGS.max_seq_length, tag_scheme=FLAGS.tag_scheme, label_scheme=FLAGS.label_scheme,
      document_context=FLAGS.document_context, features_dir=FLAGS.features_dir,
      dynamic_padding=FLAGS.dynamic_padding, export_dir=FLAGS.export_dir, model_name=FLAGS.model_name,
      bert_config_file=FLAGS.bert_config_file, feature_based=FLAGS.feature_based,
      cache_features=FLAGS.cache_features)


def main(argv):
  del argv
  from bert_tf.training import run_identity

  run_identity.check_output_dir(FLAGS.output_dir)  # a file there: one line, before TensorFlow loads
  config = _config()
  config.validate()  # Before TensorFlow starts devices: bad flags fail fast.
  from bert_tf.tasks.ner import run as ner_run

  summary = cli.run_finetuning(lambda: ner_run.run_ner(config, say=lambda line: logging.info("%s", line)),
                               config.output_dir)
  print(json.dumps(summary, indent=2, default=str))


if __name__ == "__main__":
  cli.run(main)
