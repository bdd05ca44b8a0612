"""SWAG multiple choice (and any file in SWAG's columns): a score per ending, softmax over the four.

  data.py    SWAG's CSV (or JSON lines) -> examples -> four sequences each
  model.py   `BertMultipleChoice` and the trainer's task
  folder.py  the fine-tuned model's folder (swag_model/): save, settings, load
  serving.py the raw-text SavedModel: context and endings in, the chosen ending out
  run.py     what scripts/run_swag.py runs
"""
