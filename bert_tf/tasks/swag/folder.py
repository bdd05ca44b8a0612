"""SWAG: a fine-tuned model's folder (`<output_dir>/swag_model/`): writing it, reading its settings and loading
the model, for the run (`run.py`), export (`serving.py`) and `--init_checkpoint` alike."""

from __future__ import annotations

import json
import os

import tensorflow as tf

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.common.folder import float32_copy
from bert_tf.tasks.swag import data as swag
from bert_tf.tasks.swag import model as sf

MODEL_DIR = "swag_model"  # under --output_dir
SETTINGS_NAME = "swag.json"


def is_model_dir(path: str | None) -> bool:
  return bool(path) and fileio.exists(os.path.join(path, SETTINGS_NAME))


def save_model(model: sf.BertMultipleChoice, settings: dict, vocab_file: str, directory: str) -> str:
  """Writes the fine-tuned model (float32 weights whatever the training policy), its config, vocab and settings
  under `directory`, whole or not at all."""
  settings_text = json.dumps(settings, indent=2) + "\n"
  copy = float32_copy(model, (1, swag.NUM_CHOICES, 2))
  return checkpoints.save_task_model(copy, SETTINGS_NAME, settings_text, vocab_file, directory)


def read_settings(directory: str) -> dict:
  return checkpoints.read_settings_file(os.path.join(directory, SETTINGS_NAME))


def load_model(directory: str) -> sf.BertMultipleChoice:
  """The float32 model saved by `save_model` in `directory` (call under the strategy's scope)."""
  config_path = os.path.join(directory, "bert_config.json")
  model = sf.BertMultipleChoice(BertConfig.from_json_file(config_path), dtype="float32")
  model({name: tf.zeros([1, swag.NUM_CHOICES, 2], tf.int32) for name in INPUT_NAMES})
  checkpoints.restore_task_model(model, directory, f"run_swag.py (<output_dir>/{MODEL_DIR}/)")
  return model
