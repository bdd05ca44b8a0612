"""Exports a fine-tuned NER model for TensorFlow Serving; see docs/ner.md.

  python scripts/export_ner.py --model_dir=out/ner/ner_model --export_dir=export --model_name=ner

writes export/ner/<version>/ (the next free version unless --model_version): a SavedModel whose `serving_default`
takes raw text and returns each word (as the basic tokenizer splits it), its tag and the entities (type, start
and end characters, text), written by `ner_serving.export_ner` on the export path every task shares
(`serving.export_servable`). (`scripts/run_ner.py --export_dir=...` does the same at the end of a run.)
"""

from bert_tf import cli

# scripts/export.py for this task alone (bert_tf/cli.py), with this script's flag for the folder.
cli.define_export_flags("ner", model_dir_flag="model_dir")

if __name__ == "__main__":
  cli.run(cli.export_main("ner", model_dir_flag="model_dir"))
