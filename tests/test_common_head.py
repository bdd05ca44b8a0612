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
