"""SQuAD: a fine-tuned model's folder (`<output_dir>/squad_model/`): writing it, reading its settings and loading
the model, for the run (`run.py`), export (`serving.py`) and `--init_checkpoint` alike."""

from __future__ import annotations

import json
import os

from bert_tf import fileio
from bert_tf.tasks.common.folder import ModelFolder
from bert_tf.tasks.squad import model as sf

MODEL_DIR = "squad_model"  # under --output_dir
SETTINGS_NAME = "squad.json"
FOLDER = ModelFolder(MODEL_DIR, SETTINGS_NAME, "run_squad.py")
is_model_dir, save_model, read_settings = FOLDER.is_model_dir, FOLDER.save_model, FOLDER.read_settings


def write_threshold(directory: str, threshold: float) -> None:
  """Stores `threshold` as the model's null_score_diff_threshold (atomically)."""
  settings = dict(read_settings(directory), null_score_diff_threshold=threshold)
  fileio.write_text_atomic(os.path.join(directory, SETTINGS_NAME), json.dumps(settings, indent=2) + "\n")


def load_model(directory: str) -> sf.BertSpanLabeler:
  """The float32 span labeller saved by `save_model` in `directory` (call under the strategy's scope)."""
  return FOLDER.restore(sf.BertSpanLabeler(FOLDER.bert_config(directory), dtype="float32"), directory)
