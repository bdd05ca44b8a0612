"""A fine-tuned model as its folder (bert_tf.model.checkpoints.save_task_model) and its export hold it: the
float32 copy that both write, and `ModelFolder`, a task's folder (writing it, reading its settings, restoring its
model) for the task's run, its export and `--init_checkpoint` alike."""

from __future__ import annotations

import json
import os
from typing import Sequence

import tensorflow as tf

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model.encoder import INPUT_NAMES


def float32_copy(model, input_shape: Sequence[int] = (1, 2)):
  """A float32 model of `model`'s class and settings (its Keras config) with its weights, made outside any strategy
  scope: what is saved and exported whatever the policy of training (TF Serving's clients expect float32, and CPUs
  serve float16 slowly). `input_shape` is that of one int32 input ([1, 2]; [1, C, 2] for C choices), with which
  the copy is called once to make its variables."""
  config = {k: v for k, v in model.get_config().items() if k not in ("name", "trainable", "dtype")}
  copy = type(model).from_config({**config, "dtype": "float32"})
  copy({name: tf.zeros(list(input_shape), tf.int32) for name in INPUT_NAMES})
  copy.set_weights(model.get_weights())
  return copy


class ModelFolder:
  """A task's fine-tuned model folder, `<output_dir>/<model_dir>/` (`checkpoints.save_task_model`): the float32
  weights, bert_config.json, vocab.txt and the settings file `settings_name` (JSON), which says whose folder it is.

  Args:
    model_dir: the folder's name under a run's --output_dir ("squad_model").
    settings_name: its settings file ("squad.json").
    script: the script that writes it ("run_squad.py"), named when a folder's files do not belong together.
    input_shape: the shape of one int32 input of the task's model ([1, 2]; [1, C, 2] for C choices), with
      which a model is called once to make its variables.
  """

  def __init__(self, model_dir: str, settings_name: str, script: str, input_shape: Sequence[int] = (1, 2)):
    self.model_dir = model_dir
    self.settings_name = settings_name
    self.script = script
    self.input_shape = tuple(input_shape)

  def is_model_dir(self, path: str | None) -> bool:
    """Whether `path` holds the settings file (local or gs://)."""
    return bool(path) and fileio.exists(os.path.join(path, self.settings_name))

  def save_model(self, model, settings: dict, vocab_file: str, directory: str) -> str:
    """Writes the fine-tuned model (float32 weights whatever the training policy), its config, vocab and settings
    under `directory`, whole or not at all; returns `directory`."""
    settings_text = json.dumps(settings, indent=2) + "\n"
    copy = float32_copy(model, self.input_shape)
    return checkpoints.save_task_model(copy, self.settings_name, settings_text, vocab_file, directory)

  def read_settings(self, directory: str) -> dict:
    """The settings file of the folder `directory` (a ValueError naming it when it is not a JSON object)."""
    return checkpoints.read_settings_file(os.path.join(directory, self.settings_name))

  def bert_config(self, directory: str) -> BertConfig:
    """The encoder's config of the folder `directory`."""
    return BertConfig.from_json_file(os.path.join(directory, checkpoints.CONFIG_NAME))

  def restore(self, model, directory: str):
    """`model` (a float32 model of the folder's class and config, not yet called) with the weights of the folder
    `directory`; returns it. Call under the strategy's scope."""
    model({name: tf.zeros(list(self.input_shape), tf.int32) for name in INPUT_NAMES})
    checkpoints.restore_task_model(model, directory, f"{self.script} (<output_dir>/{self.model_dir}/)")
    return model
