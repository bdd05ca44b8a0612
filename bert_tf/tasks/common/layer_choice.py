"""The paper's feature choices (section 5.3, Table 7): which of the encoder's layer outputs a feature-based model
reads, and how they are combined. `FeatureChoice` turns the encoder's outputs dict into one tensor.

Shape legend: B batch, T tokens, H hidden size, L = num_hidden_layers (transformer layers; the embeddings are not
one of them). Layer -1 is the last transformer layer, -4 the fourth from the end, as google-research's
`extract_features.py --layers=-1,-2,-3,-4` counts them.

  choice                   reads                                 output
  embeddings               embedding_output                      [B, T, H]
  second_to_last_hidden    encoder_outputs[-2]                   [B, T, H]
  last_hidden              encoder_outputs[-1]                   [B, T, H]
  weighted_sum_last_four   encoder_outputs[-4:]                  [B, T, H]   gamma * sum_j softmax(s)_j h_j
  concat_last_four         encoder_outputs[-1], [-2], [-3], [-4] [B, T, 4H]  concatenated in that order
  weighted_sum_all         embedding_output and every layer      [B, T, H]   gamma * sum_j softmax(s)_j h_j

The weighted sums are ELMo's scalar mix (Peters et al. 2018, eq. 1): one learned scalar s_j per layer,
softmax-normalised, and one learned scale gamma. s starts at 0 and gamma at 1, so a fresh layer is the plain mean
of its layers. The paper does not say how it weighted its sums; ELMo's mix is the usual reading.

The concatenation order is google-research's default `--layers=-1,-2,-3,-4` (its `extract_features.py` writes
the layers in that order): the last layer's H features come first.
"""

from __future__ import annotations

import keras
import tensorflow as tf

# The paper's Table 7 rows, in its order.
CHOICES = ("embeddings", "second_to_last_hidden", "last_hidden", "weighted_sum_last_four", "concat_last_four",
           "weighted_sum_all")


def check_choice(choice: str, num_hidden_layers: int | None = None, flag: str = "feature choice") -> None:
  """Raises ValueError for an unknown choice (naming the valid ones) or one the encoder is too shallow for."""
  if choice not in CHOICES:
    raise ValueError(f"{flag}={choice!r}: unknown feature choice; choose one of {', '.join(CHOICES)}")
  if num_hidden_layers is not None:
    wanted = {"second_to_last_hidden": 2, "weighted_sum_last_four": 4, "concat_last_four": 4}.get(choice, 1)
    if num_hidden_layers < wanted:
      raise ValueError(f"{flag}={choice}: needs at least {wanted} transformer layers; the encoder has "
                       f"{num_hidden_layers}")


def layers_read(choice: str, num_hidden_layers: int) -> list[int]:
  """Indices into [embedding_output, layer 1, ..., layer L] of the outputs `choice` reads, in the order it
  combines them (0: the embeddings; L: the last layer)."""
  check_choice(choice, num_hidden_layers)
  last = num_hidden_layers
  return {"embeddings": [0], "second_to_last_hidden": [last - 1], "last_hidden": [last],
          "weighted_sum_last_four": [last - 3, last - 2, last - 1, last],
          "concat_last_four": [last, last - 1, last - 2, last - 3],
          "weighted_sum_all": list(range(last + 1))}[choice]


def feature_size(choice: str, hidden_size: int) -> int:
  """H' of `choice`'s output: 4H for concat_last_four, else H."""
  check_choice(choice)
  return 4 * hidden_size if choice == "concat_last_four" else hidden_size


def stacked_outputs(outputs: dict) -> list:
  """[embedding_output, layer 1, ..., layer L] of an encoder's outputs dict: L + 1 tensors [B, T, H]."""
  missing = [k for k in ("embedding_output", "encoder_outputs") if k not in outputs]
  if missing:
    raise KeyError(f"FeatureChoice: the encoder outputs lack {missing}; they have {sorted(outputs)}")
  return [outputs["embedding_output"], *outputs["encoder_outputs"]]


@keras.saving.register_keras_serializable(package="bert_tf")
class FeatureChoice(keras.layers.Layer):
  """One of `CHOICES` computed from an encoder's outputs.

  Args:
    choice: one of `CHOICES`.
    num_hidden_layers: L, the encoder's transformer layers (the weighted sums have one weight per layer read).
  Input: a dict with embedding_output [B, T, H] and encoder_outputs, a list of L tensors [B, T, H] (what
    `BertEncoder` returns; other entries are ignored).
  Output: [B, T, H'] in the inputs' dtype; H' = `feature_size(choice, H)`.
  Weights (weighted sums only): `layer_logits` float32 [n] (n = 4 or L + 1), starting at 0; `scale` float32 [],
    starting at 1.
  """

  def __init__(self, choice: str, num_hidden_layers: int, **kwargs):
    super().__init__(**kwargs)
    check_choice(choice, num_hidden_layers)
    self.choice = choice
    self.num_hidden_layers = num_hidden_layers
    self.read = layers_read(choice, num_hidden_layers)
    self.weighted = choice.startswith("weighted_sum")
    if self.weighted:
      # Created here, not in build: the input is a dict, and the count depends on the choice alone.
      self.layer_logits = self.add_weight(shape=(len(self.read),), initializer="zeros", name="layer_logits",
                                          dtype="float32")
      self.scale = self.add_weight(shape=(), initializer="ones", name="scale", dtype="float32")
    self.built = True

  def call(self, outputs):
    layers = stacked_outputs(outputs)
    if len(layers) != self.num_hidden_layers + 1:
      raise ValueError(f"FeatureChoice({self.choice}) was built for {self.num_hidden_layers} layers; the encoder "
                       f"gave {len(layers) - 1}")
    picked = [layers[i] for i in self.read]  # each [B, T, H]
    if self.choice == "concat_last_four":
      return tf.concat(picked, axis=-1)  # [B, T, 4H]
    if not self.weighted:
      return picked[0]
    dtype = picked[0].dtype
    weights = tf.cast(tf.nn.softmax(tf.convert_to_tensor(self.layer_logits)) * self.scale, dtype)  # [n]
    return tf.tensordot(tf.stack(picked, axis=-1), weights, axes=[[-1], [0]])  # [B, T, H, n] . [n] -> [B, T, H]

  def compute_output_shape(self, outputs_shape):
    shape = list(outputs_shape["embedding_output"])
    shape[-1] = feature_size(self.choice, shape[-1]) if shape[-1] is not None else None
    return tuple(shape)

  def get_config(self):
    return {**super().get_config(), "choice": self.choice, "num_hidden_layers": self.num_hidden_layers}
