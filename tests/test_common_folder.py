"""bert_tf.tasks.common.folder: `ModelFolder`, a task's fine-tuned model folder (save, settings, restore) as the
SQuAD, SWAG and NER folders use it; a model of C choices ([B, C, T] inputs) round trips; a folder of another config
names the script that writes a matching one. Tiny sizes, odd where they can be."""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.common.folder import ModelFolder
from bert_tf.tasks.swag import folder as swag_folder
from bert_tf.tasks.swag import model as swag_model

C, T = 4, 7  # SWAG's choices; sequence length


def _config(layers=1):
  return BertConfig.from_preset("tiny", vocab_size=23, num_hidden_layers=layers, hidden_size=18, num_attention_heads=3,
                                intermediate_size=37, max_position_embeddings=T + 2)


def _inputs(batch=3, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(5, 23, size=(batch, C, T)).astype(np.int32)
  return {"input_ids": ids, "input_mask": np.ones_like(ids), "segment_ids": np.zeros_like(ids)}


def _saved(tmp_path, folder, settings):
  model = swag_model.BertMultipleChoice(_config(), dtype="float32")
  model({name: tf.zeros([1, C, 2], tf.int32) for name in INPUT_NAMES})
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"t{i}\n" for i in range(23)))
  directory = str(tmp_path / folder.model_dir)
  assert folder.save_model(model, settings, str(vocab), directory) == directory
  return model, directory


def test_a_saved_folder_is_found_read_and_restored_with_its_weights(tmp_path):
  folder = ModelFolder("toy_model", "toy.json", "run_toy.py", input_shape=(1, C, 2))
  settings = {"max_seq_length": T, "do_lower_case": False, "labels": ["a", "b"]}
  model, directory = _saved(tmp_path, folder, settings)
  assert folder.is_model_dir(directory) and not folder.is_model_dir(str(tmp_path)) and not folder.is_model_dir(None)
  assert folder.read_settings(directory) == settings
  assert json.loads((tmp_path / "toy_model" / "toy.json").read_text()) == settings
  assert folder.bert_config(directory).to_dict() == _config().to_dict()
  restored = folder.restore(swag_model.BertMultipleChoice(folder.bert_config(directory), dtype="float32"), directory)
  inputs = _inputs()
  np.testing.assert_array_equal(restored(inputs, training=False).numpy(), model(inputs, training=False).numpy())


def test_the_swag_folder_is_a_model_folder_of_its_task(tmp_path):
  assert (swag_folder.FOLDER.model_dir, swag_folder.FOLDER.settings_name) == ("swag_model", "swag.json")
  model, directory = _saved(tmp_path, swag_folder.FOLDER, {"max_seq_length": T})
  inputs = _inputs(batch=5, seed=1)
  np.testing.assert_array_equal(swag_folder.load_model(directory)(inputs, training=False).numpy(),
                                model(inputs, training=False).numpy())


def test_a_model_of_another_config_is_refused_naming_the_script_that_writes_the_folder(tmp_path):
  folder = ModelFolder("toy_model", "toy.json", "run_toy.py", input_shape=(1, C, 2))
  _, directory = _saved(tmp_path, folder, {})
  other = swag_model.BertMultipleChoice(_config(layers=2), dtype="float32")
  with pytest.raises(ValueError, match=r"use a folder written by run_toy\.py \(<output_dir>/toy_model/\)$"):
    folder.restore(other, directory)
