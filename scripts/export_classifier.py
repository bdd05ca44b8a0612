"""Exports a fine-tuned classifier for TensorFlow Serving; see docs/serving.md.

  python scripts/export_classifier.py --classifier_dir=out/mrpc/classifier --export_dir=export --model_name=mrpc

writes export/mrpc/<version>/ (the next free version unless --model_version): a SavedModel whose
`serving_default` takes raw text, with its warmup requests and manifest in assets.extra/, written by
`classifier_serving.export_classifier` on the export path every task shares (`serving.export_servable`).
(`scripts/run_classifier.py --export_dir=...` does the same at the end of a run.) The folder's vocab.txt must
fit its bert_config.json (checked before anything is written).
"""

from bert_tf import cli

# scripts/export.py for this task alone (bert_tf/cli.py), with this script's flag for the folder.
cli.define_export_flags("classifier", model_dir_flag="classifier_dir")

if __name__ == "__main__":
  cli.run(cli.export_main("classifier", model_dir_flag="classifier_dir"))
