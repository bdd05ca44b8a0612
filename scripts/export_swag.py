"""Exports a fine-tuned SWAG model for TensorFlow Serving; see docs/swag.md.

  python scripts/export_swag.py --model_dir=out/swag/swag_model --export_dir=export --model_name=swag

writes export/swag/<version>/ (the next free version unless --model_version): a SavedModel whose
`serving_default` takes raw sent1, sent2 and ending0..ending3 strings and returns the four endings'
probabilities, the chosen ending's index and its text, written by `swag_serving.export_swag` on the export path
every task shares (`serving.export_servable`). (`scripts/run_swag.py --export_dir=...` does the same at the end
of a run.)
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("model_dir", None, "A fine-tuned SWAG model: <run_swag --output_dir>/swag_model, or a "
                    "Hugging Face BertForMultipleChoice (its folder, or hf:<id>).")
flags.DEFINE_string("export_dir", None, "TF Serving's model root (local or gs://).")
flags.DEFINE_string("model_name", "swag", "The served model's name.")
flags.DEFINE_integer("model_version", None, "The version folder (default: 1 + the newest existing one).")


def main(argv):
  del argv
  for name in ("model_dir", "export_dir"):
    if not getattr(FLAGS, name):
      raise ValueError(f"--{name} is required")
  from bert_tf.tasks.swag import serving as swag_serving

  print(swag_serving.export_swag(FLAGS.model_dir, FLAGS.export_dir, FLAGS.model_name, FLAGS.model_version))


if __name__ == "__main__":
  cli.run(main)
