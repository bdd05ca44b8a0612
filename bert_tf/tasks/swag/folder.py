"""SWAG: a fine-tuned model's folder (`<output_dir>/swag_model/`): writing it, reading its settings and loading
the model, for the run (`run.py`), export (`serving.py`) and `--init_checkpoint` alike."""

from __future__ import annotations

from bert_tf.tasks.common.folder import ModelFolder
from bert_tf.tasks.swag import data as swag
from bert_tf.tasks.swag import model as sf

MODEL_DIR = "swag_model"  # under --output_dir
SETTINGS_NAME = "swag.json"
FOLDER = ModelFolder(MODEL_DIR, SETTINGS_NAME, "run_swag.py", input_shape=(1, swag.NUM_CHOICES, 2))
is_model_dir, save_model, read_settings = FOLDER.is_model_dir, FOLDER.save_model, FOLDER.read_settings


def load_model(directory: str) -> sf.BertMultipleChoice:
  """The float32 model saved by `save_model` in `directory` (call under the strategy's scope)."""
  return FOLDER.restore(sf.BertMultipleChoice(FOLDER.bert_config(directory), dtype="float32"), directory)
