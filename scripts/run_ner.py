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

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
# run_classifier.py's flags (google-research's names, bert_tf/cli.py's), with the paper's fine-tuning defaults.
flags.DEFINE_string("data_dir", None, "Folder of eng.train, eng.testa, eng.testb (the CoNLL-2003 release), "
                    "train.txt, valid.txt, test.txt (a common copy) or train.jsonl, dev.jsonl, test.jsonl (JSON lines "
                    '{"tokens": [...], "tags": [...]}).')
cli.define_finetuning_flags(
    "ner", unit="window", eval_batch_size=False, do_train="Fine-tune on the training file.",
    do_eval="Predict and score the dev file (eng.testa / valid.txt).",
    do_predict="Predict and score the test file (eng.testb / test.txt).",
    helps={"train_batch_size": "Global training batch (windows).",
           "model_name": "The served model's name (default: ner)."})
# New flags.
flags.DEFINE_enum("tag_scheme", "auto", ["auto", "IOB1", "IOB2", "BIOES", "plain"], "The data files' tags: "
                  "detected, or the scheme they must be in (IOB1: the release's); plain: tags that are not entities "
                  "(part of speech, any label per word), learnt as they are and scored by word-level accuracy.")
flags.DEFINE_enum("label_scheme", "IOB2", ["IOB2", "BIOES"], "The model's labels; predictions are written back "
                  "in each file's scheme.")
flags.DEFINE_bool("document_context", False, "Fill each window with the neighbouring sentences of its document "
                  "(the paper's maximal document context); predictions stay for the centre sentence.")
flags.DEFINE_string("feature_based", None, "The paper's feature-based mode (section 5.3): the encoder stays frozen "
                    "and a two-layer BiLSTM tagger trains on this feature choice: embeddings, second_to_last_hidden, "
                    "last_hidden, weighted_sum_last_four, concat_last_four or weighted_sum_all (see "
                    "docs/feature_based.md; a head trained from scratch wants a larger --learning_rate, e.g. 1e-3).")
flags.DEFINE_bool("cache_features", True, "With --feature_based: compute the frozen encoder's layers once per data "
                  "file and keep them under --features_dir/ner_layers/ (else the encoder runs in every step).")


def _config():
  from bert_tf.tasks.ner import run as ner_run

  return cli.finetuning_config(
      ner_run.NerConfig, require={"data_dir": "the folder of eng.train, eng.testa, eng.testb"},
      data_dir=FLAGS.data_dir, tag_scheme=FLAGS.tag_scheme, label_scheme=FLAGS.label_scheme,
      document_context=FLAGS.document_context, feature_based=FLAGS.feature_based,
      cache_features=FLAGS.cache_features)


def _run(config, say):
  from bert_tf.tasks.ner import run as ner_run

  return ner_run.run_ner(config, say=say)


if __name__ == "__main__":
  cli.run(cli.finetuning_main(_config, _run))
