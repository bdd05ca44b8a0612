"""SQuAD: a fine-tuned model's folder (`<output_dir>/squad_model/`): writing it, reading its settings and loading
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
from bert_tf.tasks.squad import model as sf

MODEL_DIR = "squad_model"  # under --output_dir
SETTINGS_NAME = "squad.json"


def is_model_dir(path: str | None) -> bool:
  return bool(path) and fileio.exists(os.path.join(path, SETTINGS_NAME))


def save_model(model: sf.BertSpanLabeler, settings: dict, vocab_file: str, directory: str) -> str:
  """Writes the fine-tuned model (float32 weights whatever the training policy), its config, vocab and settings
  under `directory`, whole or not at all."""
  settings_text = json.dumps(settings, indent=2) + "\n"
  return checkpoints.save_task_model(float32_copy(model), SETTINGS_NAME, settings_text, vocab_file, directory)


def read_settings(directory: str) -> dict:
  return checkpoints.read_settings_file(os.path.join(directory, SETTINGS_NAME))


def write_threshold(directory: str, threshold: float) -> None:
  """Stores `threshold` as the model's null_score_diff_threshold (atomically)."""
  settings = dict(read_settings(directory), null_score_diff_threshold=threshold)
  fileio.write_text_atomic(os.path.join(directory, SETTINGS_NAME), json.dumps(settings, indent=2) + "\n")


def load_model(directory: str) -> sf.BertSpanLabeler:
  """The float32 span labeller saved by `save_model` in `directory` (call under the strategy's scope)."""
  config_path = os.path.join(directory, "bert_config.json")
  model = sf.BertSpanLabeler(BertConfig.from_json_file(config_path), dtype="float32")
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  checkpoints.restore_task_model(model, directory, f"run_squad.py (<output_dir>/{MODEL_DIR}/)")
  return model
