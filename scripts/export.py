"""Exports any fine-tuned model for TensorFlow Serving: the folder says its task; see docs/serving.md.

  python scripts/export.py --model_dir=out/mrpc/classifier --export_dir=export --model_name=mrpc
  python scripts/export.py --model_dir=out/squad --export_dir=export
  python scripts/export.py --model_dir=hf:<a BertForTokenClassification> --export_dir=export

--model_dir takes a run's model folder (classifier/, squad_model/, ner_model/, swag_model/: its settings file says
the task), a run's --output_dir holding one of them, or a Hugging Face model with a task head (its folder, or
hf:<id>; converted first). Writes <export_dir>/<model_name>/<version>/ (the next free version unless
--model_version; --model_name defaults to the task's) on the export path every task shares
(`serving.export_servable`), as the task's run script does with --export_dir at the end of a run.
scripts/export_<task>.py are the same for one task, with their folder flags (--classifier_dir, ...).
"""

from bert_tf import cli

cli.define_export_flags()

if __name__ == "__main__":
  cli.run(cli.export_main())
