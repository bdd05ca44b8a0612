"""Exports a fine-tuned NER model for TensorFlow Serving; see docs/ner.md.

  python scripts/export_ner.py --model_dir=out/ner/ner_model --export_dir=export --model_name=ner

writes export/ner/<version>/ (the next free version unless --model_version): a SavedModel whose `serving_default`
takes raw text and returns each word (as the basic tokenizer splits it), its tag and the entities (type, start
and end characters, text), written by `ner_serving.export_ner` on the export path every task shares
(`serving.export_servable`). (`scripts/run_ner.py --export_dir=...` does the same at the end of a run.)
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "A fine-tuned NER model: <run_ner --output_dir>/ner_model, or a Hugging "
                    "Face BertForTokenClassification (its folder, or hf:<id>).")
flags.DEFINE_string("export_dir", None, "TF Serving's model root (local or gs://).")
flags.DEFINE_string("model_name", "ner", "The served model's name.")
flags.DEFINE_integer("model_version", None, "The version folder (default: 1 + the newest existing one).")


def main(argv):
  del argv
  for name in ("model_dir", "export_dir"):
    if not getattr(FLAGS, name):
      raise ValueError(f"--{name} is required")
  from bert_tf.tasks.ner import serving as ner_serving

  print(ner_serving.export_ner(FLAGS.model_dir, FLAGS.export_dir, FLAGS.model_name, FLAGS.model_version))


if __name__ == "__main__":
  cli.run(main)
