"""NER: a fine-tuned model's folder (`<output_dir>/ner_model/`): writing it, reading its settings and loading
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
from bert_tf.tasks.ner import feature_based as nfb
from bert_tf.tasks.ner import model as nf

MODEL_DIR = "ner_model"  # under --output_dir
SETTINGS_NAME = "ner.json"


def is_model_dir(path: str | None) -> bool:
  return bool(path) and fileio.exists(os.path.join(path, SETTINGS_NAME))


def save_model(model, settings: dict, vocab_file: str, directory: str) -> str:
  """Writes the trained model (a `BertTokenClassifier`, or a `BertFeatureTagger`; float32 weights whatever the
  training policy), its config, vocab and settings under `directory`, whole or not at all."""
  settings_text = json.dumps(settings, indent=2) + "\n"
  return checkpoints.save_task_model(float32_copy(model), SETTINGS_NAME, settings_text, vocab_file, directory)


def read_settings(directory: str) -> dict:
  return checkpoints.read_settings_file(os.path.join(directory, SETTINGS_NAME))


def load_model(directory: str) -> tuple[nf.BertTokenClassifier | nfb.BertFeatureTagger, dict]:
  """(the float32 tagger saved by `save_model` in `directory`, its settings); call under the strategy's scope."""
  settings = read_settings(directory)
  bert_config = BertConfig.from_json_file(os.path.join(directory, "bert_config.json"))
  if settings.get("feature_based"):
    model = nfb.BertFeatureTagger(bert_config, len(settings["labels"]), settings["feature_based"],
                                  lstm_units=settings["lstm_units"], dtype="float32")
  else:
    model = nf.BertTokenClassifier(bert_config, len(settings["labels"]), dtype="float32")
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  checkpoints.restore_task_model(model, directory, f"run_ner.py (<output_dir>/{MODEL_DIR}/)")
  return model, settings
