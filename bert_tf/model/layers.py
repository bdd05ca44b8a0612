"""The layers of the BERT encoder that Keras does not ship in the form we want.

`TransformerBlock` is one post-LayerNorm BERT layer written for CPU speed:
  - one fused [H, 3H] query/key/value matmul instead of three [H, H] ones (a bigger GEMM, one bias add);
  - every projection is a plain 2-D matmul on [B*T, H] rows followed by a bias add: Keras' Dense on 3-D input
    goes through tensordot, which XLA compiles noticeably slower, and grappler fuses MatMul+BiasAdd into one
    oneDNN call without XLA;
  - one transpose brings query, key and value into head-major layout together, one brings the context back;
  - dropout draws 16 random bits per element instead of a float (`Dropout16`): the random generator is the
    largest non-matmul cost of a training step;
  - in training (outside XLA) the row-wise work skips padded tokens: 15% off a dynamically padded GLUE step;
  - LayerNorm (`LayerNorm`) and the exact GELU (`gelu_exact`) have hand-written gradients, with the same values
    as Keras' ops but fewer elementwise passes than autodiff makes through them.
Its variables carry google-research's structure (`attention_qkv`, `attention_output`, `attention_layer_norm`,
`intermediate`, `output`, `output_layer_norm`) so that `convert.py` maps them one to one.

Shape legend used in comments:
  B = batch size, T = sequence length, H = hidden_size, N = num_attention_heads, D = H // N (head size),
  I = intermediate_size.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf
from keras import ops

# Added to the attention scores of padded keys, in float32 (the scores are cast up before it is added).
# google-research uses this value; exp(-10000) is exactly 0 in float32, so padded keys get no weight.
MASK_ADDER = -10000.0


def attention_bias(input_mask, causal: bool = False):
  """`input_mask` int [B, T] (1 = real token) -> additive bias float32 [B, 1, 1, T] for the scores.

  Recomputed by every layer from the integer mask; it is [B, T] work. With `causal`, [B, 1, T, T]: query
  position i also gets MASK_ADDER at every key j > i (a left-to-right model sees no later token).
  """
  mask = ops.cast(input_mask, "float32")
  bias = (1.0 - mask[:, None, None, :]) * MASK_ADDER
  if causal:
    length = tf.shape(input_mask)[1]
    later = tf.linalg.band_part(tf.ones([length, length]), 0, -1) - tf.eye(length)  # 1 where j > i
    bias = bias + later[None, None, :, :] * MASK_ADDER
  return bias


def truncated_normal(stddev: float) -> keras.initializers.Initializer:
  """The initializer of every BERT weight matrix: truncated normal with `initializer_range` as stddev."""
  return keras.initializers.TruncatedNormal(stddev=stddev)


def gelu_exact(x):
  """x * Phi(x), Phi the standard normal CDF (HF's "gelu"; see `activation_fn` on google-research's); any shape.

  The same values as `keras.activations.gelu(x, approximate=False)`, with a hand-written gradient
  Phi(x) + x phi(x) that reuses Phi from the forward pass: autodiff of the erf expression makes about twice the
  elementwise passes over [rows, intermediate_size], the largest activation of a layer (1.6x faster forward and
  backward together on CPU at [3072, 1024]).
  """

  @tf.custom_gradient
  def forward(x):
    cdf = 0.5 + 0.5 * tf.math.erf(x * tf.constant(1.0 / math.sqrt(2.0), x.dtype))

    def grad(dy):
      pdf = tf.exp(tf.square(x) * tf.constant(-0.5, x.dtype)) * tf.constant(1.0 / math.sqrt(2.0 * math.pi), x.dtype)
      return dy * (cdf + x * pdf)

    return x * cdf, grad

  return forward(x)


def gelu_exact_forward(x):
  """`gelu_exact`'s values, written for inference as x * ((erf(x / sqrt(2)) + 1) * 0.5); any shape.

  Bit for bit `gelu_exact`'s forward (halving is exact in binary floating point, so (e + 1) * 0.5 and
  0.5 + 0.5 * e round alike), but without the custom gradient's wrapper and in the op order that TensorFlow's
  graph optimizer (grappler's remapper, with oneDNN: TensorFlow's default on x86 CPUs) matches after a MatMul and
  BiasAdd: the three become one `_FusedMatMul` with an exact-GELU epilogue, so the largest activation of a layer
  [rows, intermediate_size] is not written and read again by four elementwise ops. Where the fusion applies the
  GELU is oneDNN's erf, equal within float rounding.
  """
  return x * ((tf.math.erf(x * tf.constant(1.0 / math.sqrt(2.0), x.dtype)) + 1.0) * 0.5)


def activation_fn(hidden_act: str):
  """`config.hidden_act` -> a function of one tensor.

  "gelu" is the exact erf form, HF's "gelu"; "gelu_new" is the tanh approximation (HF's
  "gelu_new"/"gelu_pytorch_tanh"). google-research's modeling.py as published later (GitHub, bert-tensorflow
  1.0.4) computes "gelu" with the tanh approximation; HF's port, and this project, keep the erf form (HF
  describes it as that repository's original one). They differ by up to about 1e-3 an activation, more
  through the layers: `scripts/extract_features.py --gelu` chooses (docs/features.md).
  """
  if hidden_act == "gelu":
    return gelu_exact
  if hidden_act == "gelu_new":
    return lambda x: keras.activations.gelu(x, approximate=True)
  if hidden_act == "relu":
    return keras.activations.relu
  if hidden_act == "tanh":
    return keras.activations.tanh
  raise ValueError(f"hidden_act {hidden_act!r} is not one of 'gelu', 'gelu_new', 'relu', 'tanh'")


def layer_norm(x, gamma, beta, epsilon: float):
  """LayerNorm over the last axis: (x - mean) / sqrt(var + epsilon) * gamma + beta, in float32.

  x: [..., H] (any float dtype; computed in float32 and returned in x's dtype); gamma, beta: float32 [H].
  The same values as Keras' `LayerNormalization` (and exact on rows of equal values, where Keras' form
  x * inv - mean * inv cancels two large terms when epsilon is tiny), with the closed-form gradient
  dx = (g - mean(g) - xhat mean(g xhat)) / sigma, g = dy gamma, in place of autodiff through the moments:
  a third fewer ops, 1.3x faster forward and backward together on CPU at [3072, 256].
  """
  width = tf.shape(x)[-1]
  dtype = x.dtype

  @tf.custom_gradient
  def forward(x, gamma, beta):
    shape = tf.shape(x)
    rows = tf.reshape(tf.cast(x, tf.float32), [-1, width])  # [R, H]
    centred = rows - tf.reduce_mean(rows, axis=-1, keepdims=True)
    inv = tf.math.rsqrt(tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True) + epsilon)  # [R, 1]
    normed = centred * inv

    def grad(dy):
      dy = tf.reshape(tf.cast(dy, tf.float32), [-1, width])
      g = dy * gamma
      dx = inv * (g - tf.reduce_mean(g, axis=-1, keepdims=True)
                  - normed * tf.reduce_mean(g * normed, axis=-1, keepdims=True))
      # Column sums by BiasAddGrad: about 1.7x faster than reduce_sum over axis 0 on CPU.
      return (tf.cast(tf.reshape(dx, shape), dtype), tf.raw_ops.BiasAddGrad(out_backprop=dy * normed),
              tf.raw_ops.BiasAddGrad(out_backprop=dy))

    return tf.cast(tf.reshape(normed * gamma + beta, shape), dtype), grad

  return forward(x, gamma, beta)


@keras.saving.register_keras_serializable(package="bert_tf")
class LayerNorm(keras.layers.LayerNormalization):
  """Keras' `LayerNormalization` (same variables `gamma`, `beta`, same values) over the last axis, computed by
  `layer_norm`: its hand-written gradient is cheaper than autodiff's. Always in float32, as Keras' is."""

  def __init__(self, epsilon: float = 1e-12, **kwargs):
    kwargs.pop("axis", None)
    super().__init__(axis=-1, epsilon=epsilon, **kwargs)

  def call(self, inputs):
    return tf.cast(layer_norm(inputs, tf.convert_to_tensor(self.gamma), tf.convert_to_tensor(self.beta),
                              self.epsilon), self.compute_dtype)


@keras.saving.register_keras_serializable(package="bert_tf")
class Dropout16(keras.layers.Layer):
  """Inverted dropout that decides each element from 16 random bits.

  Same contract as `keras.layers.Dropout(rate)` (identity unless `training`; kept elements scaled so the
  expectation is unchanged), but it draws one 32-bit Philox word per two elements where Keras draws a float
  per element: about half the random-number work, which dominates dropout on CPU (and more so under XLA).
  The rate is quantised to k/65536 (0.1 -> 0.100006); the scale uses the quantised rate, so the output
  stays unbiased.
  """

  def __init__(self, rate: float, seed: int | None = None, **kwargs):
    super().__init__(**kwargs)
    if not 0.0 <= rate < 1.0:
      raise ValueError(f"dropout rate must be in [0, 1), got {rate!r}")
    self.rate = rate
    self.seed = seed
    self._threshold = min(int(round(rate * 65536)), 65535)  # Keep elements whose 16 bits are >= this.
    self.seed_generator = keras.random.SeedGenerator(seed) if self._threshold else None

  def call(self, x, training=None):
    if not training or not self._threshold:
      return x
    seed = tf.cast(tf.math.floormod(self.seed_generator.next(), 2**31 - 1), tf.int32)
    shape = tf.shape(x)
    count = tf.reduce_prod(shape)
    words = tf.random.stateless_uniform([(count + 1) // 2], seed=seed, minval=None, maxval=None,
                                        dtype=tf.uint32)
    bits = tf.reshape(tf.bitcast(words, tf.uint16), [-1])[:count]  # 2 x 16 bits per word.
    keep = tf.reshape(bits, shape) >= tf.constant(self._threshold, tf.uint16)
    scale = tf.cast(65536.0 / (65536 - self._threshold), x.dtype)
    return tf.where(keep, x * scale, tf.zeros([], x.dtype))

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    return {**super().get_config(), "rate": self.rate, "seed": self.seed}


@keras.saving.register_keras_serializable(package="bert_tf")
class PositionEmbedding(keras.layers.Layer):
  """Learned absolute position embeddings, variable `embeddings` float32 [max_positions, H].

  Call with the token embeddings `x` [B, T, H] (or any tensor whose axis 1 has length T); returns the first T
  rows, [T, H] in the compute dtype, to be added with broadcasting. T must be <= max_positions.
  """

  def __init__(self, max_positions: int, width: int, initializer_range: float = 0.02, **kwargs):
    super().__init__(**kwargs)
    self.max_positions = max_positions
    self.width = width
    self.initializer_range = initializer_range

  def build(self, input_shape=None):
    self.embeddings = self.add_weight(
        name="embeddings", shape=(self.max_positions, self.width),
        initializer=truncated_normal(self.initializer_range))
    self.built = True

  def call(self, x):
    length = ops.shape(x)[1]
    return ops.cast(self.embeddings[:length], self.compute_dtype)

  def compute_output_shape(self, input_shape):
    return (input_shape[1], self.width)

  def get_config(self):
    return {**super().get_config(), "max_positions": self.max_positions, "width": self.width,
            "initializer_range": self.initializer_range}


def in_xla_context() -> bool:
  """Whether the code being traced is compiled by XLA (a jit_compile function, a TPU step)."""
  from tensorflow.python.ops import control_flow_util  # pylint: disable=g-direct-tensorflow-import

  return tf.inside_function() and control_flow_util.GraphOrParentsInXlaContext(tf.compat.v1.get_default_graph())


def unpadded_ok() -> bool:
  """Whether dropping padded rows (data-dependent shapes) is possible here: not under XLA (jit_compile, TPUs),
  which needs static shapes."""
  return not in_xla_context()


def real_token_rows(input_mask):
  """int [B, T] mask (1 = real token) -> int64 [R, 1]: the row numbers in [B*T] of the R real tokens, in order
  (the index form tf.gather(..., rows[:, 0]) and `scatter_rows` take)."""
  return tf.where(tf.reshape(input_mask, [-1]) > 0)


def scatter_rows(rows, keep, count):
  """rows [R, W] -> [count, W]: input row i becomes output row keep[i, 0], the other rows are 0.

  The same values and gradient as tf.scatter_nd(keep, rows, [count, W]) for distinct row numbers `keep` int64
  [R, 1] (as `real_token_rows` gives), computed as a gather from `rows` plus one zero row: TensorFlow's CPU
  ScatterNd copies row by row on one thread, 1.8x slower at [3,000 of 4,096 rows, 768] and 2.6x at the
  masked-LM logits [450 of 640 rows, 30,522]. The gradient is the rows `keep` of the output's gradient.
  """
  count = tf.cast(count, tf.int64)

  @tf.custom_gradient
  def forward(rows):
    real = tf.shape(rows, out_type=tf.int64)[0]
    # source[j]: the input row that output row j takes; `real` (the appended zero row) where there is none.
    source = tf.tensor_scatter_nd_update(tf.fill([count], real), keep, tf.range(real))
    out = tf.gather(tf.pad(rows, [[0, 1], [0, 0]]), source)

    def grad(dy):
      return tf.gather_nd(dy, keep)

    return out, grad

  return forward(rows)


def linear(layer: keras.layers.Dense, x):
  """x [R, in] -> [R, out] with `layer`'s kernel and bias (read inside the caller's autocast scope)."""
  return tf.nn.bias_add(tf.matmul(x, layer.kernel), layer.bias)


@keras.saving.register_keras_serializable(package="bert_tf")
class TransformerBlock(keras.layers.Layer):
  """One post-LayerNorm BERT layer: x + attention -> LayerNorm -> x + feed-forward -> LayerNorm.

  Call: `block(x, input_mask, training=False)` with `x` [B, T, H] in the compute dtype and `input_mask`
  int32 [B, T] (1 = real token); returns [B, T, H] in the compute dtype. The mask goes in as integers, not
  as a float bias, because Keras casts floating inputs to the compute dtype. In training outside XLA the
  padded rows of the output are 0 (see `_real_rows`); real rows are the same either way. With `causal=True`
  position i attends to positions <= i only (`BertConfig.causal_attention`).
  `block(real, input_mask, training=True, real_rows=keep)` takes and returns only the real rows [R, H]
  (`keep` = `real_token_rows(input_mask)`), so that consecutive blocks skip the scatter back to [B, T, H].

  Variables (kernels are [in, out], as in google-research's checkpoints); the Dense sublayers hold them and
  give them their names, the matmuls are done here:
    attention_qkv/kernel [H, 3H], bias [3H]   columns: query | key | value, each split into N heads of D
    attention_output/kernel [H, H], bias [H]
    attention_layer_norm/gamma, beta [H]
    intermediate/kernel [H, I], bias [I]
    output/kernel [I, H], bias [H]
    output_layer_norm/gamma, beta [H]
  """

  def __init__(self, hidden_size: int, num_attention_heads: int, intermediate_size: int,
               hidden_act: str = "gelu", hidden_dropout_prob: float = 0.1,
               attention_probs_dropout_prob: float = 0.1, initializer_range: float = 0.02,
               layer_norm_epsilon: float = 1e-12, causal: bool = False, **kwargs):
    super().__init__(**kwargs)
    if hidden_size % num_attention_heads:
      raise ValueError(f"hidden_size ({hidden_size}) must be a multiple of num_attention_heads "
                       f"({num_attention_heads})")
    self.hidden_size = hidden_size
    self.num_attention_heads = num_attention_heads
    self.intermediate_size = intermediate_size
    self.hidden_act = hidden_act
    self.hidden_dropout_prob = hidden_dropout_prob
    self.attention_probs_dropout_prob = attention_probs_dropout_prob
    self.initializer_range = initializer_range
    self.layer_norm_epsilon = layer_norm_epsilon
    self.causal = causal
    self.head_size = hidden_size // num_attention_heads
    self._activation = activation_fn(hidden_act)
    # Inference (no gradient needed) takes the fusable form of the exact GELU (`gelu_exact_forward`).
    self._inference_activation = gelu_exact_forward if hidden_act == "gelu" else self._activation

    def dense(units, name):
      return keras.layers.Dense(units, kernel_initializer=truncated_normal(initializer_range),
                                dtype=self.dtype_policy, name=name)

    def norm(name):
      # In float32 even under a mixed policy (as Keras' LayerNormalization), cast back to the compute dtype.
      return LayerNorm(epsilon=layer_norm_epsilon, dtype=self.dtype_policy, name=name)

    self.attention_qkv = dense(3 * hidden_size, "attention_qkv")
    self.attention_output = dense(hidden_size, "attention_output")
    self.attention_layer_norm = norm("attention_layer_norm")
    self.intermediate = dense(intermediate_size, "intermediate")
    self.output_dense = dense(hidden_size, "output")  # `self.output` is taken by keras.Layer.
    self.output_layer_norm = norm("output_layer_norm")
    self.attention_dropout = Dropout16(attention_probs_dropout_prob, dtype=self.dtype_policy,
                                       name="attention_dropout")
    self.hidden_dropout = Dropout16(hidden_dropout_prob, dtype=self.dtype_policy, name="hidden_dropout")

  def build(self, x_shape, input_mask_shape=None):
    hidden, inter = self.hidden_size, self.intermediate_size
    self.attention_qkv.build((None, hidden))
    self.attention_output.build((None, hidden))
    self.attention_layer_norm.build((None, hidden))
    self.intermediate.build((None, hidden))
    self.output_dense.build((None, inter))
    self.output_layer_norm.build((None, hidden))
    self.built = True

  def _attention(self, qkv, input_mask, batch, length, training):
    """qkv [B*T, 3H] -> context [B*T, H] (before the output projection)."""
    heads, size = self.num_attention_heads, self.head_size
    qkv = tf.reshape(qkv, [batch, length, 3, heads, size])
    qkv = tf.transpose(qkv, [2, 0, 3, 1, 4])  # [3, B, N, T, D]
    # Unstack rather than index: the gradient of an index is a zero-filled [3, B, N, T, D] per slice.
    query, key, value = tf.unstack(qkv, 3, axis=0)  # each [B, N, T, D]
    # Scaling the query ([B, N, T, D]) is cheaper than scaling the scores ([B, N, T, T]).
    query = query * tf.cast(1.0 / math.sqrt(size), query.dtype)
    scores = tf.matmul(query, key, transpose_b=True)  # [B, N, T, T]
    # Softmax in float32: float16 scores overflow and bfloat16 sums lose the small probabilities.
    scores = tf.cast(scores, tf.float32) + attention_bias(input_mask, self.causal)
    probs = tf.cast(tf.nn.softmax(scores, axis=-1), qkv.dtype)
    probs = self.attention_dropout(probs, training=training)
    context = tf.transpose(tf.matmul(probs, value), [0, 2, 1, 3])  # [B, T, N, D]
    return tf.reshape(context, [-1, self.hidden_size])

  def call(self, x, input_mask, training=None, first_token_only=False, real_rows=None):
    if first_token_only:
      return self._first_token(x, input_mask, training)
    if real_rows is not None:
      return self._real_rows(x, real_rows, input_mask, training)
    shape = tf.shape(x)
    rows = tf.reshape(x, [-1, self.hidden_size])  # [B*T, H]
    if not (training and unpadded_ok()):
      context = self._attention(linear(self.attention_qkv, rows), input_mask, shape[0], shape[1], training)
      return tf.reshape(self._after_attention(rows, context, training), shape)
    keep = real_token_rows(input_mask)
    out = self._real_rows(tf.gather(rows, keep[:, 0]), keep, input_mask, training)
    return tf.reshape(scatter_rows(out, keep, shape[0] * shape[1]), shape)

  def _real_rows(self, real, keep, input_mask, training):
    """The block on the real tokens only: `real` [R, H] are the rows `keep` [R, 1] (`real_token_rows`) of the
    [B*T, H] input; returns their output rows [R, H].

    Every row-wise op (the projections, the feed-forward, LayerNorm, dropout) runs on the R real tokens; only
    the attention itself needs the [B, T] layout, for which the query/key/value rows are put into a
    zero-filled [B*T, 3H]. Padding is a third of the tokens of a dynamically padded GLUE batch and a quarter
    of a pretraining batch, and these ops hold most of the FLOPs. Real rows get the same values as in the
    padded computation, so the loss and gradients are the same. Only outside XLA (data-dependent shapes): in
    training, and in inference under `encoder.padding_skipped` (the serving exports' text signatures); other
    inference keeps the padded computation, so that every output row, padded ones included, matches the
    reference.
    """
    shape = tf.shape(input_mask)
    qkv = scatter_rows(linear(self.attention_qkv, real), keep, shape[0] * shape[1])  # [B*T, 3H]
    context = tf.gather(self._attention(qkv, input_mask, shape[0], shape[1], training), keep[:, 0])  # [R, H]
    return self._after_attention(real, context, training)

  def _first_token(self, x, input_mask, training):
    """x [B, T, H] -> the output of the first ([CLS]) position only, [B, H]: the same values as row 0 of the
    full output. Keys and values still come from every token; the query, the output projection and the
    feed-forward run on one row per sequence - for the last layer of a classifier, most of its work."""
    if self.causal:  # the first position of a causal block sees itself alone; no caller needs that shortcut
      raise ValueError("TransformerBlock: first_token_only is for bidirectional blocks (causal=False)")
    heads, size, hidden = self.num_attention_heads, self.head_size, self.hidden_size
    shape = tf.shape(x)
    kernel, bias = self.attention_qkv.kernel, self.attention_qkv.bias  # columns: query | key | value
    first = x[:, 0, :]  # [B, H]
    query = tf.nn.bias_add(tf.matmul(first, kernel[:, :hidden]), bias[:hidden])  # [B, H]
    kv = tf.nn.bias_add(tf.matmul(tf.reshape(x, [-1, hidden]), kernel[:, hidden:]), bias[hidden:])  # [B*T, 2H]
    kv = tf.transpose(tf.reshape(kv, [shape[0], shape[1], 2, heads, size]), [2, 0, 3, 1, 4])  # [2, B, N, T, D]
    key, value = tf.unstack(kv, 2, axis=0)
    query = tf.reshape(query, [-1, heads, 1, size]) * tf.cast(1.0 / math.sqrt(size), x.dtype)  # [B, N, 1, D]
    scores = tf.cast(tf.matmul(query, key, transpose_b=True), tf.float32) + attention_bias(input_mask)
    probs = self.attention_dropout(tf.cast(tf.nn.softmax(scores, axis=-1), x.dtype), training=training)
    context = tf.reshape(tf.matmul(probs, value), [-1, hidden])  # [B, N, 1, D] -> [B, H]
    return self._after_attention(first, context, training)

  def _after_attention(self, rows, context, training):
    """rows, context [R, H] -> the block's output rows [R, H]: projection, residual, LayerNorm, feed-forward."""
    attention = linear(self.attention_output, context)
    rows = self.attention_layer_norm(rows + self.hidden_dropout(attention, training=training))
    activation = self._activation if training else self._inference_activation
    hidden = activation(linear(self.intermediate, rows))  # [R, I]
    hidden = self.hidden_dropout(linear(self.output_dense, hidden), training=training)
    return self.output_layer_norm(rows + hidden)

  def compute_output_shape(self, x_shape, input_mask_shape=None):
    return x_shape

  def get_config(self):
    return {
        **super().get_config(),
        "hidden_size": self.hidden_size,
        "num_attention_heads": self.num_attention_heads,
        "intermediate_size": self.intermediate_size,
        "hidden_act": self.hidden_act,
        "hidden_dropout_prob": self.hidden_dropout_prob,
        "attention_probs_dropout_prob": self.attention_probs_dropout_prob,
        "initializer_range": self.initializer_range,
        "layer_norm_epsilon": self.layer_norm_epsilon,
        "causal": self.causal,
    }
