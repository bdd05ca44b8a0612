"""Sentence and sentence-pair classification and regression: GLUE and your own files.

  glue.py        GLUE's official TSV files -> examples; the tasks' labels and metrics (`GlueTask`)
  user_data.py   your own CSV / TSV / JSON lines files -> the same examples and a `GlueTask` of their labels
  classifier.py  features and records, `BertClassifier`, the trainer's `ClassificationTask`, the saved folder
  metrics.py     accuracy, F1, Matthews, Pearson / Spearman, as the official scores compute them
  serving.py     the raw-text SavedModel (through bert_tf.export's shared path)
  run.py         what scripts/run_classifier.py runs
"""

from __future__ import annotations

from bert_tf import registry


@registry.register_task
class Classifier(registry.Task, name="classifier", model_dir="classifier", settings_name="classifier.json",
                 description="classifier", hf_class="BertForSequenceClassification", served_name=None,
                 exporter="export_from_directory"):
  """scripts/run_classifier.py and export_classifier.py; the served name is the task's name in lower case (a GLUE
  task's, or your files' --task_name)."""
