"""SWAG multiple choice (and any file in SWAG's columns): a score per ending, softmax over the four.

  data.py    SWAG's CSV (or JSON lines) -> examples -> four sequences each
  model.py   `BertMultipleChoice` and the trainer's task
  folder.py  the fine-tuned model's folder (swag_model/): save, settings, load
  serving.py the raw-text SavedModel: context and endings in, the chosen ending out
  run.py     what scripts/run_swag.py runs
"""

from __future__ import annotations

from bert_tf import registry


@registry.register_task
class Swag(registry.Task, name="swag", model_dir="swag_model", settings_name="swag.json", description="SWAG model",
           hf_class="BertForMultipleChoice", served_name="swag", exporter="export_swag"):
  """scripts/run_swag.py and export_swag.py."""
