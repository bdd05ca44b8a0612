"""bert_tf.tasks.common.head: `EncoderHeadModel`, the encoder and a head's dropout and output layer as the
classifier, the NER tagger and SWAG's model make them; their Keras configs round trip with the dropout."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.model.encoder import INPUT_NAMES, BertEncoder
from bert_tf.tasks.classification.classifier import BertClassifier
from bert_tf.tasks.common.folder import float32_copy
from bert_tf.tasks.common.head import EncoderHeadModel
from bert_tf.tasks.ner.model import BertTokenClassifier
from bert_tf.tasks.swag.model import BertMultipleChoice


class _Toy(EncoderHeadModel):

  def __init__(self, config, dropout=None, encoder=None, dtype=None, **kwargs):
    super().__init__(config, dropout, encoder, dtype=dtype, **kwargs)
    self.toy_dropout, self.toy_output = self.output_layers("toy_dropout", "toy_output", 5, dtype)

  def call(self, inputs, training=None):
    return self.toy_output(self.toy_dropout(self.encoder.pooled_output(inputs, training=training)))


def test_the_config_gives_the_dropout_the_encoder_and_the_output_layer():
  config = th.tiny_bert_config(dropout=0.3)
  toy = _Toy(config.to_dict(), dtype="float32")  # a dict, as a saved model's Keras config holds it
  assert toy.config.to_dict() == config.to_dict() and toy.dropout_rate == 0.3 and toy.toy_dropout.rate == 0.3
  assert isinstance(toy.encoder, BertEncoder) and toy.encoder.name == "encoder"
  assert (toy.toy_dropout.name, toy.toy_output.name, toy.toy_output.units) == ("toy_dropout", "toy_output", 5)
  assert toy.toy_output.kernel_initializer.stddev == pytest.approx(config.initializer_range)
  encoder = BertEncoder(config)
  shared = _Toy(config, dropout=0.05, encoder=encoder)
  assert shared.encoder is encoder and shared.dropout_rate == 0.05 and shared.get_config()["dropout"] == 0.05


@pytest.mark.parametrize("make, shape, names", [
    (lambda c: BertClassifier(c, 3), (2, 7), ["encoder", "classifier_dropout", "classifier"]),
    (lambda c: BertTokenClassifier(c, 5), (2, 7), ["encoder", "tag_dropout", "tag_output"]),
    (lambda c: BertMultipleChoice(c), (2, 4, 7), ["encoder", "choice_dropout", "choice_score"]),
])
def test_the_task_models_keep_their_layer_names_and_round_trip_their_keras_config(make, shape, names):
  model = make(th.tiny_bert_config(dropout=0.2))
  inputs = {name: tf.ones(shape, tf.int32) for name in INPUT_NAMES}
  expected = model(inputs, training=False).numpy()
  assert [layer.name for layer in model.layers] == names
  assert model.get_config()["dropout"] == 0.2
  copy = float32_copy(model, (1, *shape[1:-1], 2))  # from_config(get_config()) and the weights
  assert copy.dropout_rate == 0.2 and getattr(copy, "num_labels", None) == getattr(model, "num_labels", None)
  np.testing.assert_allclose(copy(inputs, training=False).numpy(), expected, rtol=1e-6, atol=1e-6)


class _MadeInTheOldOrder(tf.keras.Model):
  """A task model as each was written before `EncoderHeadModel`: the encoder, then the dropout, then the output
  layer, made in that order in its constructor."""

  def __init__(self, config, units):
    from bert_tf.model.layers import Dropout16, truncated_normal

    super().__init__()
    self.encoder = BertEncoder(config, name="encoder")
    self.head_dropout = Dropout16(config.hidden_dropout_prob)
    self.head = tf.keras.layers.Dense(units, kernel_initializer=truncated_normal(config.initializer_range))

  def call(self, inputs, training=None):
    return self.head(self.head_dropout(self.encoder.pooled_output(inputs, training=training)))


@pytest.mark.parametrize("make, units, output, shape", [
    (lambda c: BertClassifier(c, 3), 3, "classifier", (2, 7)),
    (lambda c: BertTokenClassifier(c, 5), 5, "tag_output", (2, 7)),
    (lambda c: BertMultipleChoice(c), 1, "choice_score", (2, 4, 7)),
])
def test_a_seed_gives_the_head_the_start_it_had_before_the_base(make, units, output, shape):
  """Each layer takes its seed from Keras's global stream when it is made: made in the order each task model made
  its layers before `EncoderHeadModel` (encoder, dropout, output layer), a --seed gives the same starting weights
  (made in another order, the same command fine-tuned another model)."""
  config = th.tiny_bert_config(dropout=0.1)  # dropout on: a layer that draws a seed when it is made
  tf.keras.utils.set_random_seed(7)
  model = make(config)
  model({name: tf.ones(shape, tf.int32) for name in INPUT_NAMES}, training=False)
  tf.keras.utils.set_random_seed(7)
  reference = _MadeInTheOldOrder(config, units)
  reference({name: tf.ones((2, 7), tf.int32) for name in INPUT_NAMES}, training=False)
  np.testing.assert_array_equal(getattr(model, output).kernel.numpy(), reference.head.kernel.numpy())
  np.testing.assert_array_equal(model.encoder.weights[0].numpy(), reference.encoder.weights[0].numpy())
