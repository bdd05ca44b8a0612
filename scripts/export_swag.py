"""Exports a fine-tuned SWAG model for TensorFlow Serving; see docs/swag.md.

  python scripts/export_swag.py --model_dir=out/swag/swag_model --export_dir=export --model_name=swag

writes export/swag/<version>/ (the next free version unless --model_version): a SavedModel whose
`serving_default` takes raw sent1, sent2 and ending0..ending3 strings and returns the four endings'
probabilities, the chosen ending's index and its text, written by `swag_serving.export_swag` on the export path
every task shares (`serving.export_servable`). (`scripts/run_swag.py --export_dir=...` does the same at the end
of a run.)
"""

from bert_tf import cli

# scripts/export.py for this task alone (bert_tf/cli.py), with this script's flag for the folder.
cli.define_export_flags("swag", model_dir_flag="model_dir")

if __name__ == "__main__":
  cli.run(cli.export_main("swag", model_dir_flag="model_dir"))
