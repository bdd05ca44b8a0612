"""What the task models share: `EncoderHeadModel`, the encoder with a head on it (dropout, then a dense output
layer), a Keras model of a `BertConfig` (the classifier's, the NER tagger's, SWAG's)."""

from __future__ import annotations

import keras

from bert_tf.config import BertConfig
from bert_tf.model.encoder import BertConfigModel, BertEncoder
from bert_tf.model.layers import Dropout16, truncated_normal


class EncoderHeadModel(BertConfigModel, keras.Model):
  """The encoder (`self.encoder`) and a head, which the subclass makes with `output_layers` and runs in `call`.

  Args:
    config: the encoder's `BertConfig` (or its dict, as the model's Keras config holds it).
    dropout: before the output layer; default the config's hidden_dropout_prob (0.1 in every BERT).
    encoder: an existing `BertEncoder` to use (e.g. one loaded from a checkpoint); default a new one.
    dtype: the dtype policy of the model and its layers (default the global policy).
  Keras config: `BertConfigModel`'s and the dropout; a subclass adds its own arguments.
  """

  def __init__(self, config, dropout: float | None = None, encoder=None, dtype=None, **kwargs):
    super().__init__(dtype=dtype, **kwargs)
    if isinstance(config, dict):
      config = BertConfig.from_dict(config, source=f"{type(self).__name__} config")
    self.config = config
    self.dropout_rate = config.hidden_dropout_prob if dropout is None else dropout
    self.encoder = encoder if encoder is not None else BertEncoder(config, dtype=dtype, name="encoder")

  def output_layers(self, dropout_name: str, name: str, units: int, dtype=None):
    """(the head's dropout at `dropout_rate`, its Dense of `units` outputs initialized as the encoder's weights),
    named `dropout_name` and `name`: the names its checkpoints and the Hugging Face conversion know.

    The dropout is made first: each layer takes a seed from Keras's global stream when it is made, so this order
    keeps the head's starting weights for a given --seed what they were before this base existed."""
    dropout = Dropout16(self.dropout_rate, dtype=dtype, name=dropout_name)
    dense = keras.layers.Dense(units, kernel_initializer=truncated_normal(self.config.initializer_range),
                               dtype=dtype, name=name)
    return dropout, dense

  def get_config(self):
    return {**super().get_config(), "dropout": self.dropout_rate}
