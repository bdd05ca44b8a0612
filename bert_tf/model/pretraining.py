"""The pretraining model (masked LM + next sentence prediction heads on a `BertEncoder`) and its loss terms.

Three objectives, the paper's Table 5: BERT's (masked LM + next sentence), "No NSP" (`next_sentence=False`:
masked LM alone, no NSP head at all) and "LTR & No NSP" (a config with `causal_attention`: a left-to-right
language model predicting token t+1 from positions <= t at every real position, through the masked-LM head's
transform and tied output embeddings).

The loss is returned as SUMS with their denominators (`pretraining_loss_terms`), so a multi-replica trainer
all-reduces numerators and denominators separately and divides once: the loss then does not depend on how
the global batch is split across replicas. `pretraining_loss` divides locally, for one device and tests.

Shape legend: B = batch size, T = sequence length, P = max_predictions_per_seq, H = hidden_size,
V = vocab_size.
"""

from __future__ import annotations

from typing import Any

import keras
import tensorflow as tf
from keras import ops

from bert_tf.config import BertConfig
from bert_tf.model.encoder import INPUT_NAMES, BertConfigModel, BertEncoder, layer_norm_epsilon, select_inputs
from bert_tf.model.layers import LayerNorm, activation_fn, linear, scatter_rows, truncated_normal, unpadded_ok

# The feature names of a pretraining record that the model reads; the labels are read by the loss only.
PRETRAINING_INPUT_NAMES = INPUT_NAMES + ("masked_lm_positions",)


@keras.saving.register_keras_serializable(package="bert_tf")
class MaskedLMHead(keras.layers.Layer):
  """Masked-LM head: gather the masked positions, transform, project onto the tied word embeddings.

  Call: `head(sequence_output, masked_lm_positions, training=False)` with `sequence_output` [B, T, H] (compute
  dtype) and `masked_lm_positions` int32 [B, P]; returns logits float32 [B, P, V]. In training outside XLA
  the slots at position 0 (google-research's padding of unused slots) are not computed and get logits 0.
  `head(sequence_output, None)` projects every position: logits float32 [B, T, V] (the left-to-right LM's).

  The output projection is the encoder's word-embedding matrix transposed (`word_embeddings.embeddings`,
  [V, H]) plus this layer's `output_bias` [V]. Only the P gathered positions are transformed and projected:
  the [*, H] x [H, V] matmul is the most expensive op of pretraining, and P is ~15% of T.

  Variables: transform/kernel [H, H], transform/bias [H], transform_layer_norm/gamma, beta [H],
  output_bias [V]. It holds a layer of the encoder, so it has no config of its own: `BertPretrainer`
  builds it and its `get_config` rebuilds it.
  """

  def __init__(self, word_embeddings: keras.layers.Embedding, hidden_act: str = "gelu",
               initializer_range: float = 0.02, layer_norm_epsilon: float = 1e-12, **kwargs):
    super().__init__(**kwargs)
    self.word_embeddings = word_embeddings
    self.hidden_act = hidden_act
    self.initializer_range = initializer_range
    self.layer_norm_epsilon = layer_norm_epsilon
    self._activation = activation_fn(hidden_act)
    vocab_size, hidden_size = word_embeddings.input_dim, word_embeddings.output_dim
    self.transform = keras.layers.Dense(
        hidden_size, kernel_initializer=truncated_normal(initializer_range), dtype=self.dtype_policy,
        name="transform")
    self.transform_layer_norm = LayerNorm(epsilon=layer_norm_epsilon, dtype=self.dtype_policy,
                                          name="transform_layer_norm")
    self.output_bias = self.add_weight(name="output_bias", shape=(vocab_size,), initializer="zeros",
                                       autocast=False)

  def build(self, sequence_output_shape, masked_lm_positions_shape=None):
    hidden_size = self.word_embeddings.output_dim
    self.transform.build((None, hidden_size))
    self.transform_layer_norm.build((None, hidden_size))
    self.built = True

  def call(self, sequence_output, masked_lm_positions=None, training=None):
    if masked_lm_positions is None:
      shape = tf.shape(sequence_output)
      rows = tf.reshape(sequence_output, [-1, self.word_embeddings.output_dim])  # [B*T, H]
      return tf.reshape(self._logits(rows), [shape[0], shape[1], self.word_embeddings.input_dim])
    positions = tf.cast(masked_lm_positions, tf.int32)
    batch, predictions = tf.shape(positions)[0], tf.shape(positions)[1]
    vocab_size, hidden_size = self.word_embeddings.input_dim, self.word_embeddings.output_dim
    rows = tf.reshape(tf.gather(sequence_output, positions, batch_dims=1), [-1, hidden_size])  # [B*P, H]
    if not (training and unpadded_ok()):
      return tf.reshape(self._logits(rows), [batch, predictions, vocab_size])
    # Training, outside XLA: only the N real slots are projected. Unused slots are google-research's padding,
    # position 0 with weight 0 (position 0 holds [CLS], which is never masked): a quarter of the slots of
    # records made from the embedded corpus, and the [*, H] x [H, V] products are a fifth of a step. Their
    # logits are 0 here; weight 0 keeps them out of the loss, whose gradient there is 0 either way.
    keep = tf.where(tf.reshape(positions, [-1]) > 0)  # [N, 1] int64 slot numbers
    logits = self._logits(tf.gather(rows, keep[:, 0]))  # [N, V]
    logits = scatter_rows(logits, keep, batch * predictions)
    return tf.reshape(logits, [batch, predictions, vocab_size])

  def _logits(self, rows):
    """rows [M, H] gathered from the sequence output -> float32 logits [M, V]."""
    rows = self.transform_layer_norm(self._activation(linear(self.transform, rows)))
    # transpose_b instead of a transposed copy of the [V, H] matrix. The embedding variable is read inside
    # this layer's call, so Keras casts it to the compute dtype.
    logits = tf.matmul(rows, self.word_embeddings.embeddings, transpose_b=True)  # [M, V]
    return tf.cast(logits, tf.float32) + self.output_bias  # output_bias is never autocast: float32.

  def compute_output_shape(self, sequence_output_shape, masked_lm_positions_shape=None):
    if masked_lm_positions_shape is None:
      return (*sequence_output_shape[:2], self.word_embeddings.input_dim)
    return (*masked_lm_positions_shape, self.word_embeddings.input_dim)


@keras.saving.register_keras_serializable(package="bert_tf")
class BertPretrainer(BertConfigModel, keras.Model):
  """A `BertEncoder` with the masked-LM and next-sentence heads of BERT pretraining.

  Args:
    config: a `BertConfig` (or its dict, as `get_config` writes it).
    encoder: an existing `BertEncoder` built from the same config, or None to build one.
    dtype: a dtype policy or its name; default the global policy (or the encoder's, when given).
    next_sentence: whether there is a next-sentence head; default True, except for a `causal_attention`
      config (the left-to-right LM, which has none: True is then an error). False: masked LM only ("No NSP").

  Inputs: a dict with `input_ids`, `input_mask`, `segment_ids` int32 [B, T] and `masked_lm_positions`
    int32 [B, P] (not for a causal config); other keys of a pretraining record may be present and are ignored.
  Outputs: a dict
    mlm_logits: float32 [B, P, V], logits of the token at each masked position.
    nsp_logits: float32 [B, 2], class 1 = "sentence B is random" (only with next_sentence).
    With a causal config instead: lm_logits float32 [B, T, V], at position t the logits of token t+1.

  Attributes: `encoder` (what fine-tuning restores), `mlm_head` (`MaskedLMHead`), `nsp_head` (Dense, kernel
  [H, 2], bias [2]; None without next_sentence), `next_sentence`, `input_names`.
  """

  def __init__(self, config: BertConfig | dict[str, Any], encoder: BertEncoder | None = None, dtype=None,
               next_sentence: bool | None = None, **kwargs):
    if isinstance(config, dict):
      config = BertConfig.from_dict(config, source="BertPretrainer config")
    if next_sentence is None:
      next_sentence = not config.causal_attention
    if next_sentence and config.causal_attention:
      raise ValueError("BertPretrainer: a causal_attention config is a left-to-right LM, which has no "
                       "next-sentence head; pass next_sentence=False (or leave it unset)")
    if encoder is None:
      encoder = BertEncoder(config, dtype=dtype)
    elif encoder.config.to_dict() != config.to_dict():
      raise ValueError("BertPretrainer: the encoder was built from a different BertConfig than `config`")
    if dtype is None:
      dtype = encoder.dtype_policy

    # === Layers ===
    self.encoder = encoder
    self.mlm_head = MaskedLMHead(
        encoder.word_embeddings, hidden_act=config.hidden_act,
        initializer_range=config.initializer_range, layer_norm_epsilon=layer_norm_epsilon(config),
        dtype=dtype, name="mlm_head")
    self.nsp_head = None
    if next_sentence:
      self.nsp_head = keras.layers.Dense(
          2, kernel_initializer=truncated_normal(config.initializer_range), dtype=dtype, name="nsp_head")

    # === Functional model ===
    input_names = INPUT_NAMES if config.causal_attention else PRETRAINING_INPUT_NAMES
    inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name) for name in input_names}
    outputs = encoder({name: inputs[name] for name in INPUT_NAMES})
    if config.causal_attention:
      model_outputs = {"lm_logits": self.mlm_head(outputs["sequence_output"], None)}
    else:
      model_outputs = {"mlm_logits": self.mlm_head(outputs["sequence_output"], inputs["masked_lm_positions"])}
    if next_sentence:
      model_outputs["nsp_logits"] = ops.cast(self.nsp_head(outputs["pooled_output"]), "float32")
    super().__init__(inputs=inputs, outputs=model_outputs, dtype=dtype, **kwargs)

    # === Config ===
    self.config = config
    self.next_sentence = next_sentence
    self.input_names = input_names
    if dtype is not None:  # The functional constructor does not keep the policy it was given.
      self.dtype_policy = keras.dtype_policies.get(dtype)

  def call(self, inputs, training=None, mask=None):
    # A whole pretraining record may be passed; keep only the model's inputs (labels go to the loss).
    inputs = select_inputs(inputs, self.input_names, "BertPretrainer")
    return super().call(inputs, training=training, mask=mask)

  def get_config(self) -> dict[str, Any]:
    return {**super().get_config(), "next_sentence": self.next_sentence}



def cross_entropy(logits: tf.Tensor, labels: tf.Tensor) -> tf.Tensor:
  """-log softmax(logits)[label]: float32 [N, C] and int32 [N] -> float32 [N].

  The same values as tf.nn.sparse_softmax_cross_entropy_with_logits, with a hand-written gradient
  (softmax - one_hot, the one-hot part scattered in place): on CPU the masked-LM logits [B*P, V] are the
  largest tensor of pretraining, and this makes fewer passes over them than TensorFlow's kernel (about 45%
  less time for the loss and its gradient at V = 30,522).
  """
  labels = tf.cast(labels, tf.int32)

  @tf.custom_gradient
  def forward(logits):
    shift = tf.reduce_max(logits, axis=-1, keepdims=True)
    exp = tf.exp(logits - shift)
    total = tf.reduce_sum(exp, axis=-1, keepdims=True)
    loss = tf.squeeze(tf.math.log(total) + shift, -1) - tf.gather(logits, labels, batch_dims=1)

    def grad(dloss):
      dlogits = exp * (dloss[:, None] / total)  # softmax * dloss
      rows = tf.range(tf.shape(labels)[0], dtype=tf.int32)
      return tf.tensor_scatter_nd_sub(dlogits, tf.stack([rows, labels], axis=1), dloss)

    return loss, grad

  return forward(tf.cast(logits, tf.float32))


def pretraining_loss_terms(features: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor]
                           ) -> dict[str, tf.Tensor]:
  """Sums of the pretraining losses and accuracies, and their denominators; all float32 scalars.

  Args:
    features: `masked_lm_ids` int32 [B, P], `masked_lm_weights` float32 [B, P] (0 for padding slots),
      `next_sentence_labels` int32 [B, 1] or [B] (1 = sentence B is random); for `lm_logits`, `input_ids`
      and `input_mask` int32 [B, T] instead.
    outputs: `BertPretrainer` outputs: `mlm_logits` [B, P, V] and `nsp_logits` [B, 2] (BERT), `mlm_logits`
      alone (No NSP), or `lm_logits` [B, T, V] (left-to-right). Terms are made for the outputs present, so
      without `nsp_logits` the next-sentence labels are not read.

  Returns: for mlm_logits `mlm_loss_sum` (sum of weight x cross-entropy), `mlm_weight_sum`, `mlm_correct_sum`
    (weighted); for nsp_logits `nsp_loss_sum`, `nsp_correct_sum`, `nsp_count`; for lm_logits `lm_loss_sum`,
    `lm_weight_sum`, `lm_correct_sum` (`next_token_loss_terms`). Sum each over replicas, then divide: the loss
    is mlm_loss_sum / mlm_weight_sum + nsp_loss_sum / nsp_count (the terms present), or
    lm_loss_sum / lm_weight_sum.
  """
  terms = {}
  if "mlm_logits" in outputs:
    mlm_logits = tf.cast(outputs["mlm_logits"], tf.float32)
    vocab_size = tf.shape(mlm_logits)[-1]
    mlm_logits = tf.reshape(mlm_logits, [-1, vocab_size])  # [B*P, V]
    mlm_ids = tf.reshape(tf.cast(features["masked_lm_ids"], tf.int32), [-1])  # [B*P]
    mlm_weights = tf.reshape(tf.cast(features["masked_lm_weights"], tf.float32), [-1])
    mlm_loss = cross_entropy(mlm_logits, mlm_ids)
    mlm_correct = tf.cast(tf.equal(tf.argmax(mlm_logits, axis=-1, output_type=tf.int32), mlm_ids), tf.float32)
    terms.update(mlm_loss_sum=tf.reduce_sum(mlm_weights * mlm_loss), mlm_weight_sum=tf.reduce_sum(mlm_weights),
                 mlm_correct_sum=tf.reduce_sum(mlm_weights * mlm_correct))
  if "nsp_logits" in outputs:
    nsp_logits = tf.cast(outputs["nsp_logits"], tf.float32)
    nsp_labels = tf.reshape(tf.cast(features["next_sentence_labels"], tf.int32), [-1])  # [B]
    nsp_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=nsp_labels, logits=nsp_logits)  # [B]
    nsp_correct = tf.cast(tf.equal(tf.argmax(nsp_logits, axis=-1, output_type=tf.int32), nsp_labels),
                          tf.float32)
    terms.update(nsp_loss_sum=tf.reduce_sum(nsp_loss), nsp_correct_sum=tf.reduce_sum(nsp_correct),
                 nsp_count=tf.cast(tf.size(nsp_labels), tf.float32))
  if "lm_logits" in outputs:
    terms.update(next_token_loss_terms(features, outputs["lm_logits"]))
  return terms


def next_token_weights(input_mask: tf.Tensor) -> tf.Tensor:
  """int [B, T] -> float32 [B, T - 1]: 1 where position t predicts a real token t+1 (the left-to-right LM's
  predictions: every real position whose next one is real)."""
  return tf.cast(input_mask[:, 1:] > 0, tf.float32)


def next_token_loss_terms(features: dict[str, tf.Tensor], lm_logits: tf.Tensor) -> dict[str, tf.Tensor]:
  """The left-to-right LM's sums: cross-entropy of token t+1 under the logits at position t, over every t whose
  token t+1 is real (`next_token_weights`).

  Args: features `input_ids`, `input_mask` int32 [B, T]; lm_logits [B, T, V].
  Returns: float32 scalars `lm_loss_sum`, `lm_weight_sum` (the number of predictions), `lm_correct_sum`.
  """
  logits = tf.cast(lm_logits, tf.float32)[:, :-1, :]  # position t predicts t+1; the last predicts nothing
  logits = tf.reshape(logits, [-1, tf.shape(logits)[-1]])  # [B*(T-1), V]
  labels = tf.reshape(tf.cast(features["input_ids"], tf.int32)[:, 1:], [-1])  # [B*(T-1)]
  weights = tf.reshape(next_token_weights(features["input_mask"]), [-1])
  loss = cross_entropy(logits, labels)
  correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), labels), tf.float32)
  return {"lm_loss_sum": tf.reduce_sum(weights * loss), "lm_weight_sum": tf.reduce_sum(weights),
          "lm_correct_sum": tf.reduce_sum(weights * correct)}


def pretraining_loss(features: dict[str, tf.Tensor], outputs: dict[str, tf.Tensor],
                     epsilon: float = 1e-5) -> tf.Tensor:
  """Mean masked-LM loss + mean NSP loss (when the model has that head) on this device's batch, or the mean
  next-token loss of a left-to-right model; float32 scalar.

  `epsilon` bounds the (masked-)LM denominator away from 0 for a batch without predictions.
  """
  terms = pretraining_loss_terms(features, outputs)
  loss = tf.constant(0.0)
  for name in ("mlm", "lm"):
    if f"{name}_loss_sum" in terms:
      loss += terms[f"{name}_loss_sum"] / tf.maximum(terms[f"{name}_weight_sum"], epsilon)
  if "nsp_loss_sum" in terms:
    loss += terms["nsp_loss_sum"] / tf.maximum(terms["nsp_count"], 1.0)
  return loss
