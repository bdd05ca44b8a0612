"""`BertEncoder`: the BERT encoder as a functional Keras model, built from a `BertConfig`.

Used unchanged by pretraining (`pretraining.py`) and by every fine-tuning task. Layout:

  input_ids, segment_ids, input_mask      int32 [B, T]
  word + token_type + position embeddings -> LayerNorm -> dropout
  num_hidden_layers x TransformerBlock (post-LayerNorm, padding-masked self-attention; with
    `config.causal_attention` also masked to the positions before each one, a left-to-right model)
  pooler: dense + tanh on the first ([CLS]) token; with causal attention on the last real token

T is not fixed (any T <= max_position_embeddings). Under a mixed policy (`mixed_float16`,
`mixed_bfloat16`) variables stay float32, matmuls run in the half type, and softmax and LayerNorm compute in
float32; the outputs are in the compute dtype, so cast them where float32 is needed.
"""

from __future__ import annotations

import contextlib
from typing import Any

import keras
import tensorflow as tf
from keras import ops

from bert_tf.config import BertConfig
from bert_tf.model.layers import (
  Dropout16,
  LayerNorm,
  PositionEmbedding,
  TransformerBlock,
  real_token_rows,
  scatter_rows,
  truncated_normal,
  unpadded_ok,
)

# The project's input names: the TFRecord features and every model use them.
INPUT_NAMES = ("input_ids", "input_mask", "segment_ids")

# LayerNorm epsilon of every published BERT. A Hugging Face config may say otherwise (`layer_norm_eps`,
# kept in `BertConfig.extras` by the converter); honouring it keeps converted models exact.
DEFAULT_LAYER_NORM_EPSILON = 1e-12


def select_inputs(inputs, names: tuple[str, ...], model: str):
  """The entries `names` of a feature dict that may hold more (labels, other features)."""
  if not isinstance(inputs, dict):
    return inputs
  missing = [n for n in names if n not in inputs]
  if missing:
    raise KeyError(f"{model}: the input dict lacks {missing}; it has {sorted(inputs)}")
  return {n: inputs[n] for n in names}


def pooled_token(x, input_mask, causal: bool):
  """The row the pooler reads: x [B, T, H] -> [B, H]: position 0 ([CLS]), or with `causal` the last real token
  (the highest position whose input_mask is 1; 0 for a row without one)."""
  if not causal:
    return x[:, 0, :]
  mask = ops.cast(input_mask, "int32")
  positions = ops.cumsum(ops.ones_like(mask), axis=1) - 1  # [B, T]: 0, 1, ... (T is unknown while building)
  last = ops.max(ops.where(mask > 0, positions, 0), axis=1)  # [B]
  return ops.take_along_axis(x, ops.reshape(last, [-1, 1, 1]), axis=1)[:, 0, :]


def layer_norm_epsilon(config: BertConfig) -> float:
  return float(config.extras.get("layer_norm_eps", DEFAULT_LAYER_NORM_EPSILON))


class BertConfigModel:
  """Keras config of a model built from a `BertConfig` alone (the encoder, the pretrainer): its name, dtype
  policy and the BertConfig's dict. Not chained to keras.Model's: a functional model's config is its layer
  graph, which __init__ rebuilds from the BertConfig."""

  def get_config(self) -> dict[str, Any]:
    return {"name": self.name, "trainable": self.trainable,
            "dtype": keras.dtype_policies.serialize(self.dtype_policy),
            "config": self.config.to_dict()}

  @classmethod
  def from_config(cls, config: dict[str, Any]):
    config = dict(config)
    if isinstance(config.get("dtype"), dict):
      config["dtype"] = keras.dtype_policies.get(config["dtype"])
    return cls(**config)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertEncoder(BertConfigModel, keras.Model):
  """The BERT encoder.

  Args:
    config: a `BertConfig` (or its dict, as `get_config` writes it).
    dtype: a dtype policy or its name, e.g. "mixed_float16"; default the global policy.

  Inputs: a dict of int32 [B, T] tensors
    input_ids: token ids in [0, vocab_size).
    input_mask: 1 for real tokens, 0 for padding; padded positions are never attended to.
    segment_ids: token type ids in [0, type_vocab_size).
  Outputs: a dict
    sequence_output: [B, T, H], the last layer (compute dtype).
    pooled_output: [B, H], tanh(dense(sequence_output[:, 0])). With `config.causal_attention`, the last real
      token's row instead (position sum(input_mask) - 1, real tokens first as in every record): under a causal
      mask [CLS] sees only itself, so its row says nothing of the sentence, while the last token's row has
      seen all of it - where OpenAI GPT's classifier reads too.
    encoder_outputs: list of num_hidden_layers tensors [B, T, H], each layer's output in order
      (the last one is sequence_output).
    embedding_output: [B, T, H], word + token_type + position embeddings after LayerNorm and dropout: the
      input of the first block (the paper's "embeddings" feature, Table 7). In training outside XLA its padded
      positions are zeros, as every layer's output there; graphs that do not use it prune it.

  Attributes: `word_embeddings` (the `keras.layers.Embedding`; its `embeddings` [V, H] is the matrix the
  masked-LM output is tied to), `token_type_embeddings`, `position_embeddings`, `embeddings_layer_norm`,
  `transformer_layers` (list of `TransformerBlock`), `pooler`.
  """

  def __init__(self, config: BertConfig | dict[str, Any], dtype=None, **kwargs):
    if isinstance(config, dict):
      config = BertConfig.from_dict(config, source="BertEncoder config")
    init = truncated_normal(config.initializer_range)
    epsilon = layer_norm_epsilon(config)

    # === Layers ===
    self.word_embeddings = keras.layers.Embedding(
        config.vocab_size, config.hidden_size, embeddings_initializer=init, dtype=dtype,
        name="word_embeddings")
    self.token_type_embeddings = keras.layers.Embedding(
        config.type_vocab_size, config.hidden_size, embeddings_initializer=init, dtype=dtype,
        name="token_type_embeddings")
    self.position_embeddings = PositionEmbedding(
        config.max_position_embeddings, config.hidden_size, config.initializer_range, dtype=dtype,
        name="position_embeddings")
    self.embeddings_layer_norm = LayerNorm(epsilon=epsilon, dtype=dtype, name="embeddings_layer_norm")
    self.embeddings_dropout = Dropout16(
        config.hidden_dropout_prob, dtype=dtype, name="embeddings_dropout")
    # Attributes layer_0 ... layer_{L-1}, not a list: Keras' tracked lists are invisible to
    # tf.train.Checkpoint, which would then name the blocks by their position in the graph.
    for i in range(config.num_hidden_layers):
      block = TransformerBlock(
          hidden_size=config.hidden_size,
          num_attention_heads=config.num_attention_heads,
          intermediate_size=config.intermediate_size,
          hidden_act=config.hidden_act,
          hidden_dropout_prob=config.hidden_dropout_prob,
          attention_probs_dropout_prob=config.attention_probs_dropout_prob,
          initializer_range=config.initializer_range,
          layer_norm_epsilon=epsilon,
          causal=config.causal_attention,
          dtype=dtype,
          name=f"layer_{i}")
      setattr(self, f"layer_{i}", block)
    self.pooler = keras.layers.Dense(
        config.hidden_size, activation="tanh", kernel_initializer=init, dtype=dtype, name="pooler")

    # === Functional model ===
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in INPUT_NAMES}
    words = self.word_embeddings(inputs["input_ids"])  # [B, T, H]
    x = words + self.token_type_embeddings(inputs["segment_ids"]) + self.position_embeddings(words)
    x = self.embeddings_dropout(self.embeddings_layer_norm(x))
    embedding_output = x
    encoder_outputs = []
    for block in (getattr(self, f"layer_{i}") for i in range(config.num_hidden_layers)):
      x = block(x, inputs["input_mask"])
      encoder_outputs.append(x)
    pooled = self.pooler(pooled_token(x, inputs["input_mask"], config.causal_attention))  # [B, H]
    super().__init__(
        inputs=inputs,
        outputs={"sequence_output": x, "pooled_output": pooled, "encoder_outputs": encoder_outputs,
                 "embedding_output": embedding_output},
        dtype=dtype,
        **kwargs)

    # === Config ===
    self.config = config
    if dtype is not None:  # The functional constructor does not keep the policy it was given.
      self.dtype_policy = keras.dtype_policies.get(dtype)

  # Whether inference calls run on the real tokens alone, as training does (see `padding_skipped`).
  skip_padding = False

  def _on_real_tokens(self, training) -> bool:
    return bool(training or self.skip_padding) and unpadded_ok()

  def call(self, inputs, training=None, mask=None):
    # Keras matches a dict to the inputs by position when it has other keys; pass exactly ours.
    inputs = select_inputs(inputs, INPUT_NAMES, "BertEncoder")
    if self._on_real_tokens(training):
      keep, rows = self._real_tokens(inputs, self.transformer_layers, training)
      # Padding is put back for every layer's output; graphs that do not use an output prune its op.
      embedding_output, *encoder_outputs = [self._padded(x, keep, inputs["input_mask"]) for x in rows]
      x = encoder_outputs[-1]
      pooled = self.pooler(pooled_token(x, inputs["input_mask"], self.config.causal_attention))
      return {"sequence_output": x, "pooled_output": pooled, "encoder_outputs": encoder_outputs,
              "embedding_output": embedding_output}
    return super().call(inputs, training=training, mask=mask)

  def _real_tokens(self, inputs, blocks, training):
    """Outside XLA, in training (or in inference under `padding_skipped`): the embeddings and `blocks` computed
    for the real tokens alone.

    Returns `keep` = `real_token_rows(input_mask)` [R, 1] and the rows [R, H] (in `keep`'s order) of the
    embeddings (after LayerNorm and dropout) and of each block's output. The blocks hand real rows to each other
    (`TransformerBlock(real_rows=keep)`), and the caller puts padding back only where it needs the [B, T, H]
    layout: the same real rows as the padded computation, without a gather and a scatter of [B*T, H] per layer.
    """
    mask = inputs["input_mask"]
    keep = real_token_rows(mask)
    index = keep[:, 0]
    length = tf.shape(inputs["input_ids"], out_type=tf.int64)[1]

    def take(name):
      return tf.gather(tf.reshape(inputs[name], [-1]), index)  # [R]

    x = (self.word_embeddings(take("input_ids")) + self.token_type_embeddings(take("segment_ids"))
         + tf.gather(self.position_embeddings(inputs["input_ids"]), index % length))
    rows = [self.embeddings_dropout(self.embeddings_layer_norm(x), training=training)]
    for block in blocks:
      rows.append(block(rows[-1], mask, training=training, real_rows=keep))
    return keep, rows

  def _padded(self, rows, keep, input_mask):
    """Real rows [R, H] -> [B, T, H] with zeros at the padded positions."""
    shape = tf.shape(input_mask)
    hidden = self.config.hidden_size
    return tf.reshape(scatter_rows(rows, keep, shape[0] * shape[1]), [shape[0], shape[1], hidden])

  def pooled_output(self, inputs, training=None):
    """`self(inputs)["pooled_output"]` [B, H] alone, cheaper: the last layer runs for the [CLS] position only
    (see `TransformerBlock(first_token_only=True)`). What sentence classification needs. A causal encoder pools
    its last real token, which the shortcut does not compute: it runs the whole encoder."""
    inputs = select_inputs(inputs, INPUT_NAMES, "BertEncoder")
    if self.config.causal_attention:
      return self(inputs, training=training)["pooled_output"]
    mask = inputs["input_mask"]
    *layers, last = self.transformer_layers
    if self._on_real_tokens(training):
      keep, rows = self._real_tokens(inputs, layers, training)
      x = self._padded(rows[-1], keep, mask)
    else:
      words = self.word_embeddings(inputs["input_ids"])  # [B, T, H]
      x = words + self.token_type_embeddings(inputs["segment_ids"]) + self.position_embeddings(words)
      x = self.embeddings_dropout(self.embeddings_layer_norm(x), training=training)
      for block in layers:
        x = block(x, mask, training=training)
    return self.pooler(last(x, mask, training=training, first_token_only=True))

  @property
  def transformer_layers(self) -> list[TransformerBlock]:
    return [getattr(self, f"layer_{i}") for i in range(self.config.num_hidden_layers)]

  @property
  def word_embedding_matrix(self):
    """The word-embedding variable, float32 [vocab_size, hidden_size]."""
    return self.word_embeddings.embeddings


@contextlib.contextmanager
def padding_skipped(model):
  """Inference calls of `model`'s encoder traced inside the block run on the real tokens alone, as training does.

  `model`: a `BertEncoder` or a task model holding one as `.encoder`; anything else (a stand-in) runs as it is.
  The row-wise work of every layer (the projections, the feed-forward, LayerNorm: most of the FLOPs) then skips
  the padded positions of a batch, where a batch of requests of mixed lengths has a third or more of its
  positions (the attention itself still runs on [B, T]). Real positions get the padded computation's values up
  to the order of float additions; padded positions of `sequence_output` and of every layer's output are 0
  rather than the values the padded computation leaves there, which no task head reads. The serving exports
  trace their signatures inside it, except NER's `encoded`, which returns the logits of every position.
  A flag read while tracing: a tf.function traced inside keeps it, one traced later does not.
  """
  encoder = model if isinstance(model, BertEncoder) else getattr(model, "encoder", None)
  if not isinstance(encoder, BertEncoder):
    yield
    return
  previous = encoder.skip_padding
  encoder.skip_padding = True
  try:
    yield
  finally:
    encoder.skip_padding = previous
