"""BertEncoder on tiny odd sizes: against a numpy transcription of BERT, padding, variable length, config and
`.keras` round trips, mixed precision, XLA, dropout and initialisation."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model.encoder import BertEncoder, padding_skipped

# Odd sizes so that a transposed or mixed-up axis cannot hide: B=3, T=7, H=12, N=3 (D=4), I=37, V=99.
B, T = 3, 7


def tiny_config(**overrides) -> BertConfig:
  fields = dict(vocab_size=99, hidden_size=12, num_hidden_layers=2, num_attention_heads=3,
                intermediate_size=37, max_position_embeddings=16, type_vocab_size=3, hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1)
  fields.update(overrides)
  return BertConfig(**fields)


def tiny_inputs(seed=0, length=T):
  rng = np.random.default_rng(seed)
  mask = np.ones((B, length), np.int32)
  mask[1, 4:] = 0  # Row 1 has 4 real tokens, row 2 has 2; row 0 is full.
  mask[2, 2:] = 0
  return {"input_ids": rng.integers(0, 99, (B, length)).astype(np.int32),
          "input_mask": mask,
          "segment_ids": rng.integers(0, 3, (B, length)).astype(np.int32)}


def randomize(model, seed=1):
  """Non-trivial values everywhere (the initial LayerNorm/bias values 1 and 0 would hide mistakes)."""
  rng = np.random.default_rng(seed)
  for v in model.weights:
    v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))


_ACTS = {
    "gelu": np.vectorize(lambda x: 0.5 * x * (1.0 + math.erf(x / math.sqrt(2.0)))),
    "gelu_new": lambda x: 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3))),
    "relu": lambda x: np.maximum(x, 0.0),
    "tanh": np.tanh,
}


def reference_bert(weights, config, inputs):
  """google-research's modeling.py transcribed to float64 numpy; weights by TF1 name."""
  ids, mask, seg = inputs["input_ids"], inputs["input_mask"], inputs["segment_ids"]
  n, d = config.num_attention_heads, config.head_size
  w = {k: v.astype(np.float64) for k, v in weights.items()}

  def ln(x, p):
    mu = x.mean(-1, keepdims=True)
    var = ((x - mu) ** 2).mean(-1, keepdims=True)
    return (x - mu) / np.sqrt(var + 1e-12) * w[p + "/gamma"] + w[p + "/beta"]

  def dense(x, p):
    return x @ w[p + "/kernel"] + w[p + "/bias"]

  length = ids.shape[1]
  x = (w["bert/embeddings/word_embeddings"][ids] + w["bert/embeddings/token_type_embeddings"][seg]
       + w["bert/embeddings/position_embeddings"][:length])
  x = ln(x, "bert/embeddings/LayerNorm")
  embeddings = x
  adder = (1.0 - mask[:, None, None, :]) * -10000.0
  layers = []
  for k in range(config.num_hidden_layers):
    p = f"bert/encoder/layer_{k}"

    def heads(t):
      return t.reshape(t.shape[0], length, n, d).transpose(0, 2, 1, 3)  # [B, N, T, D]

    q, kk, v = (heads(dense(x, f"{p}/attention/self/{name}")) for name in ("query", "key", "value"))
    scores = q @ kk.transpose(0, 1, 3, 2) / math.sqrt(d) + adder
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    ctx = (probs @ v).transpose(0, 2, 1, 3).reshape(x.shape)
    x = ln(x + dense(ctx, f"{p}/attention/output/dense"), f"{p}/attention/output/LayerNorm")
    h = _ACTS[config.hidden_act](dense(x, f"{p}/intermediate/dense"))
    x = ln(x + dense(h, f"{p}/output/dense"), f"{p}/output/LayerNorm")
    layers.append(x)
  pooled = np.tanh(dense(x[:, 0], "bert/pooler/dense"))
  return layers, pooled, embeddings


@pytest.mark.parametrize("hidden_act", ["gelu", "gelu_new", "relu", "tanh"])
def test_matches_numpy_reference(hidden_act):
  from bert_tf.model import convert

  config = tiny_config(hidden_act=hidden_act)
  encoder = BertEncoder(config)
  randomize(encoder)
  weights = convert.get_tf1_weights(convert.tf1_links(encoder))
  inputs = tiny_inputs()
  out = encoder(inputs)
  layers, pooled, embeddings = reference_bert(weights, config, inputs)
  assert len(out["encoder_outputs"]) == config.num_hidden_layers
  for ours, ref in zip(out["encoder_outputs"], layers):
    np.testing.assert_allclose(ours.numpy(), ref, atol=2e-5)
  np.testing.assert_allclose(out["sequence_output"].numpy(), layers[-1], atol=2e-5)
  np.testing.assert_allclose(out["pooled_output"].numpy(), pooled, atol=2e-5)
  np.testing.assert_allclose(out["embedding_output"].numpy(), embeddings, atol=2e-5)


def test_shapes_and_dtypes():
  config = tiny_config()
  encoder = BertEncoder(config)
  out = encoder(tiny_inputs())
  assert set(out) == {"sequence_output", "pooled_output", "encoder_outputs", "embedding_output"}
  assert out["embedding_output"].shape == (B, T, 12)
  assert out["sequence_output"].shape == (B, T, 12) and out["sequence_output"].dtype == tf.float32
  assert out["pooled_output"].shape == (B, 12)
  assert [o.shape for o in out["encoder_outputs"]] == [(B, T, 12)] * 2
  assert encoder.word_embedding_matrix is encoder.word_embeddings.embeddings
  assert tuple(encoder.word_embedding_matrix.shape) == (99, 12)
  assert [i.name for i in encoder.inputs] == ["input_ids", "input_mask", "segment_ids"]


def test_embedding_output_is_the_first_blocks_input():
  encoder = BertEncoder(tiny_config())
  randomize(encoder)
  inputs = tiny_inputs()
  out = encoder(inputs)
  first = encoder.layer_0(out["embedding_output"], tf.constant(inputs["input_mask"]))
  np.testing.assert_allclose(first.numpy(), out["encoder_outputs"][0].numpy(), atol=1e-6)
  # Dropout applies to it in training (the dropout the first block sees).
  dropped = BertEncoder(tiny_config(hidden_dropout_prob=0.5))
  a = dropped(inputs)["embedding_output"].numpy()
  b = dropped(inputs, training=True)["embedding_output"].numpy()
  real = inputs["input_mask"] > 0
  assert (b[real] == 0).mean() > 0.3 and np.abs(a - b).max() > 1e-3


def test_padded_tokens_do_not_change_real_positions():
  encoder = BertEncoder(tiny_config())
  randomize(encoder)
  inputs = tiny_inputs()
  changed = {k: v.copy() for k, v in inputs.items()}
  pad = inputs["input_mask"] == 0
  changed["input_ids"][pad] = (changed["input_ids"][pad] + 17) % 99
  changed["segment_ids"][pad] = (changed["segment_ids"][pad] + 1) % 3
  a = encoder(inputs)["sequence_output"].numpy()
  b = encoder(changed)["sequence_output"].numpy()
  real = ~pad
  np.testing.assert_allclose(a[real], b[real], atol=1e-6)
  # ...while the same change at a real position does change the row.
  changed["input_ids"][1, 0] = (changed["input_ids"][1, 0] + 1) % 99
  c = encoder(changed)["sequence_output"].numpy()
  assert np.abs(a[1, :4] - c[1, :4]).max() > 1e-3


def test_variable_sequence_length_and_padding_agree():
  encoder = BertEncoder(tiny_config())
  randomize(encoder)
  short = tiny_inputs(seed=3, length=5)
  short["input_mask"][:] = 1
  long = {k: np.concatenate([v, np.zeros((B, 6), np.int32)], axis=1) for k, v in short.items()}
  out_short = encoder(short)["sequence_output"].numpy()
  out_long = encoder(long)["sequence_output"].numpy()
  assert out_short.shape == (B, 5, 12) and out_long.shape == (B, 11, 12)
  np.testing.assert_allclose(out_long[:, :5], out_short, atol=1e-5)


def test_get_config_round_trip():
  config = tiny_config(hidden_act="gelu_new", extras={"layer_norm_eps": 1e-12, "note": "kept"})
  encoder = BertEncoder(config, name="my_encoder")
  clone = BertEncoder.from_config(encoder.get_config())
  assert clone.get_config() == encoder.get_config()
  assert clone.config == config and clone.name == "my_encoder"
  clone.set_weights(encoder.get_weights())
  inputs = tiny_inputs()
  np.testing.assert_array_equal(clone(inputs)["sequence_output"], encoder(inputs)["sequence_output"])


def test_keras_save_and_reload(tmp_path):
  encoder = BertEncoder(tiny_config())
  randomize(encoder)
  path = str(tmp_path / "encoder.keras")
  encoder.save(path)
  restored = keras.models.load_model(path)
  assert isinstance(restored, BertEncoder)
  inputs = tiny_inputs()
  a, b = encoder(inputs), restored(inputs)
  for key in ("sequence_output", "pooled_output"):
    np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_mixed_precision(policy):
  encoder = BertEncoder(tiny_config(), dtype=policy)
  reference = BertEncoder(tiny_config())
  randomize(reference)
  encoder.set_weights(reference.get_weights())
  assert all(v.dtype == "float32" for v in encoder.weights)
  inputs = tiny_inputs()
  out = encoder(inputs)
  half = tf.float16 if policy == "mixed_float16" else tf.bfloat16
  assert out["sequence_output"].dtype == half
  seq = tf.cast(out["sequence_output"], tf.float32).numpy()
  assert np.isfinite(seq).all()
  tolerance = 0.05 if policy == "mixed_float16" else 0.3  # LayerNorm outputs are O(1).
  np.testing.assert_allclose(seq, reference(inputs)["sequence_output"].numpy(), atol=tolerance)


def test_global_mixed_policy_is_followed():
  keras.mixed_precision.set_global_policy("mixed_float16")
  try:
    encoder = BertEncoder(tiny_config())
  finally:
    keras.mixed_precision.set_global_policy("float32")
  assert encoder(tiny_inputs())["pooled_output"].dtype == tf.float16


def test_xla_matches_eager_and_trains():
  encoder = BertEncoder(tiny_config())
  randomize(encoder)
  inputs = {k: tf.constant(v) for k, v in tiny_inputs().items()}

  @tf.function(jit_compile=True)
  def forward_and_grad(features):
    with tf.GradientTape() as tape:
      out = encoder(features, training=True)
      loss = tf.reduce_sum(out["pooled_output"]) + tf.reduce_sum(out["sequence_output"])
    grads = tape.gradient(loss, encoder.trainable_variables)
    return encoder(features, training=False)["sequence_output"], grads

  seq, grads = forward_and_grad(inputs)
  np.testing.assert_allclose(seq.numpy(), encoder(inputs)["sequence_output"].numpy(), atol=1e-5)
  assert all(g is not None for g in grads)


def test_dropout_only_in_training():
  encoder = BertEncoder(tiny_config(hidden_dropout_prob=0.5, attention_probs_dropout_prob=0.5))
  inputs = tiny_inputs()
  a = encoder(inputs, training=False)["sequence_output"].numpy()
  np.testing.assert_array_equal(a, encoder(inputs)["sequence_output"].numpy())
  assert np.abs(a - encoder(inputs, training=True)["sequence_output"].numpy()).max() > 1e-3


def test_initialisation():
  config = tiny_config(hidden_size=60, num_attention_heads=3, intermediate_size=240, initializer_range=0.05)
  encoder = BertEncoder(config)
  for kernel in (encoder.layer_0.intermediate.kernel, encoder.word_embeddings.embeddings):
    value = kernel.numpy()
    assert np.abs(value).max() <= 2 * 0.05 + 1e-6  # Truncated at two standard deviations.
    assert 0.03 < value.std() < 0.05  # A normal truncated at 2 sigma keeps ~88% of its stddev.
  np.testing.assert_array_equal(encoder.layer_0.attention_layer_norm.gamma.numpy(), 1.0)
  np.testing.assert_array_equal(encoder.layer_0.attention_qkv.bias.numpy(), 0.0)


def test_variable_names():
  encoder = BertEncoder(tiny_config(num_hidden_layers=1))
  assert [v.path for v in encoder.weights] == [
      "word_embeddings/embeddings", "token_type_embeddings/embeddings", "position_embeddings/embeddings",
      "embeddings_layer_norm/gamma", "embeddings_layer_norm/beta",
      "layer_0/attention_qkv/kernel", "layer_0/attention_qkv/bias",
      "layer_0/attention_output/kernel", "layer_0/attention_output/bias",
      "layer_0/attention_layer_norm/gamma", "layer_0/attention_layer_norm/beta",
      "layer_0/intermediate/kernel", "layer_0/intermediate/bias",
      "layer_0/output/kernel", "layer_0/output/bias",
      "layer_0/output_layer_norm/gamma", "layer_0/output_layer_norm/beta",
      "pooler/kernel", "pooler/bias"]


def test_dropout16_statistics():
  from bert_tf.model.layers import Dropout16

  x = tf.ones((64, 1001))  # An odd element count: the last 16-bit half-word is dropped.
  layer = Dropout16(0.1, seed=7)
  np.testing.assert_array_equal(layer(x), x)
  y = layer(x, training=True).numpy()
  kept = y != 0
  assert abs(kept.mean() - 0.9) < 0.01
  np.testing.assert_allclose(y[kept], 65536 / (65536 - 6554))  # Scaled by 1 / (1 - quantised rate).
  assert abs(y.mean() - 1.0) < 0.015
  assert not np.array_equal(y, layer(x, training=True).numpy())  # A new mask each call.
  np.testing.assert_array_equal(Dropout16(0.0)(x, training=True), x)


def test_training_skips_padded_rows_with_the_same_real_rows_and_gradients():
  encoder = BertEncoder(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  randomize(encoder)
  inputs = {k: tf.constant(v) for k, v in tiny_inputs().items()}
  real = inputs["input_mask"].numpy().astype(bool)

  def loss_and_grads(features):
    with tf.GradientTape() as tape:
      out = encoder(features, training=True)
      # Only real rows enter the loss, as in every BERT loss (masked positions, [CLS]).
      loss = tf.reduce_sum(out["pooled_output"]) + tf.reduce_sum(
          tf.boolean_mask(out["sequence_output"], features["input_mask"] > 0) ** 2)
    return ([out["embedding_output"], *out["encoder_outputs"]], out["pooled_output"],
            tape.gradient(loss, encoder.trainable_variables))

  unpadded, pooled, grads = tf.function(loss_and_grads)(inputs)
  padded, xla_pooled, xla_grads = tf.function(loss_and_grads, jit_compile=True)(inputs)  # XLA: padded rows
  out = encoder(inputs)
  inference = [out["embedding_output"], *out["encoder_outputs"]]  # the embeddings, then each layer's output
  assert len(unpadded) == len(padded) == 3
  for layer_unpadded, layer_padded, layer_inference in zip(unpadded, padded, inference):
    layer_unpadded, layer_padded = layer_unpadded.numpy(), layer_padded.numpy()
    np.testing.assert_allclose(layer_unpadded[real], layer_padded[real], atol=1e-5)
    np.testing.assert_array_equal(layer_unpadded[~real], 0.0)
    assert np.abs(layer_padded[~real]).max() > 0.1  # the padded computation does give padded rows values
    np.testing.assert_allclose(layer_unpadded[real], layer_inference.numpy()[real], atol=1e-5)
  np.testing.assert_allclose(pooled, xla_pooled, atol=1e-5)
  # The classifier's shortcut takes the real-row path too, with the same [CLS] output.
  np.testing.assert_allclose(tf.function(encoder.pooled_output)(inputs, training=True), pooled, atol=1e-5)
  for g, x in zip(grads, xla_grads):
    np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), tf.convert_to_tensor(x).numpy(), atol=1e-4)


def test_inference_under_padding_skipped_runs_real_rows_with_the_padded_real_outputs():
  """What the serving exports trace: real rows as the padded computation's, padded rows 0 (not computed), the
  pooled output the same; a function traced inside keeps it, the flag is back off after, XLA stays padded."""
  encoder = BertEncoder(tiny_config())
  randomize(encoder)
  inputs = {k: tf.constant(v) for k, v in tiny_inputs().items()}
  real = inputs["input_mask"].numpy().astype(bool)
  padded = encoder(inputs)
  with padding_skipped(encoder):
    skipped = encoder(inputs)
    traced = tf.function(lambda x: encoder(x)["sequence_output"]).get_concrete_function(inputs)
    pooled = encoder.pooled_output(inputs)
    xla = tf.function(lambda x: encoder(x)["sequence_output"], jit_compile=True)(inputs).numpy()
  assert encoder.skip_padding is False
  np.testing.assert_allclose(skipped["pooled_output"], padded["pooled_output"], atol=1e-5)
  np.testing.assert_allclose(pooled, padded["pooled_output"], atol=1e-5)
  for out in (skipped["sequence_output"].numpy(), traced(inputs).numpy()):
    np.testing.assert_allclose(out[real], padded["sequence_output"].numpy()[real], atol=1e-5)
    np.testing.assert_array_equal(out[~real], 0.0)
  assert np.abs(padded["sequence_output"].numpy()[~real]).max() > 0.1  # padded rows do get values otherwise
  np.testing.assert_allclose(xla, padded["sequence_output"].numpy(), atol=1e-5)  # XLA needs static shapes
  after = encoder(inputs)["sequence_output"].numpy()
  assert np.abs(after[~real]).max() > 0.1  # off again outside the block
  with padding_skipped(lambda x: x):  # a stand-in without an encoder runs as it is
    pass


@pytest.mark.parametrize("policy", ["float32", "mixed_bfloat16"])
def test_pooled_output_alone_equals_the_full_encoders(policy):
  encoder = BertEncoder(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0), dtype=policy)
  randomize(encoder)
  inputs = {k: tf.constant(v) for k, v in tiny_inputs().items()}
  full = encoder(inputs)["pooled_output"]
  alone = encoder.pooled_output(inputs)
  assert alone.dtype == full.dtype and alone.shape == (B, 12)
  atol = 1e-6 if policy == "float32" else 2e-2
  np.testing.assert_allclose(tf.cast(alone, tf.float32).numpy(), tf.cast(full, tf.float32).numpy(), atol=atol)
  if policy != "float32":
    return

  def grads(fn):
    with tf.GradientTape() as tape:
      loss = tf.reduce_sum(tf.sin(fn()))
    return tape.gradient(loss, encoder.trainable_variables)

  for a, b in zip(grads(lambda: encoder.pooled_output(inputs, training=True)),
                  grads(lambda: encoder(inputs, training=True)["pooled_output"])):
    assert a is not None and b is not None
    np.testing.assert_allclose(tf.convert_to_tensor(a).numpy(), tf.convert_to_tensor(b).numpy(), atol=1e-5)
