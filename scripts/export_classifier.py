"""Exports a fine-tuned classifier for TensorFlow Serving; see docs/serving.md.

  python scripts/export_classifier.py --classifier_dir=out/mrpc/classifier --export_dir=export --model_name=mrpc

writes export/mrpc/<version>/ (the next free version unless --model_version): a SavedModel whose
`serving_default` takes raw text, with its warmup requests and manifest in assets.extra/, written by
`classifier_serving.export_classifier` on the export path every task shares (`serving.export_servable`).
(`scripts/run_classifier.py --export_dir=...` does the same at the end of a run.) The folder's vocab.txt must
fit its bert_config.json (checked before anything is written).
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("classifier_dir", None, "A fine-tuned classifier: <run_classifier --output_dir>/classifier, "
                    "or a Hugging Face BertForSequenceClassification (its folder, or hf:<id>).")
flags.DEFINE_string("export_dir", None, "TF Serving's model root (local or gs://).")
flags.DEFINE_string("model_name", None, "The served model's name (default: the task name, lower case).")
flags.DEFINE_integer("model_version", None, "The version folder (default: 1 + the newest existing one).")


def main(argv):
  del argv
  for name in ("classifier_dir", "export_dir"):
    if not getattr(FLAGS, name):
      raise ValueError(f"--{name} is required")
  from bert_tf.tasks.classification import serving as classifier_serving

  path = classifier_serving.export_from_directory(FLAGS.classifier_dir, FLAGS.export_dir, FLAGS.model_name,
                                       FLAGS.model_version)
  print(path)


if __name__ == "__main__":
  cli.run(main)
