"""A fine-tuned model as its folder (bert_tf.model.checkpoints.save_task_model) and its export hold it."""

from __future__ import annotations

from typing import Sequence

import tensorflow as tf

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
