"""The hand-written gradients of `layers.gelu_exact` and `layers.LayerNorm` against Keras' own ops (autodiff)
on odd shapes: same values and gradients in float32, close in float16 / bfloat16, and the same in graphs with
unknown shapes; `layers.scatter_rows` against tf.scatter_nd; the inference GELU (`gelu_exact_forward`) equal to
`gelu_exact` and fused with the matmul before it by TensorFlow's graph optimizer."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model import layers

SHAPE = (3, 5, 11)  # [B, T, H], odd so that a mixed-up axis cannot hide


def values_and_grads(fn, x, variables=()):
  """fn(x) and d/d(x, variables) of sum(fn(x) * w) for a fixed random w (not sum(fn(x)): LayerNorm's gradient of
  that is 0)."""
  w = tf.constant(np.random.default_rng(7).standard_normal(x.shape), tf.float32)
  with tf.GradientTape() as tape:
    tape.watch(x)
    y = fn(x)
    loss = tf.reduce_sum(tf.cast(y, tf.float32) * w)
  return y, tape.gradient(loss, [x, *variables])


def test_gelu_exact_matches_keras_values_and_gradient():
  # Wide range: the tails (|x| ~ 8) are where Phi and phi underflow or saturate.
  x = tf.constant(np.random.default_rng(0).standard_normal(SHAPE) * 3.0, tf.float32)
  x = tf.concat([tf.reshape(x, [-1, SHAPE[-1]]),
                 tf.constant([[-8.0, -3.0, -0.5, 0.0, 0.5, 3.0, 8.0, 1e-3, -1e-3, 20.0, -20.0]])], axis=0)
  ours, (dours,) = values_and_grads(layers.gelu_exact, x)
  ref, (dref,) = values_and_grads(lambda t: keras.activations.gelu(t, approximate=False), x)
  np.testing.assert_allclose(ours.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(dours.numpy(), dref.numpy(), rtol=1e-5, atol=1e-6)
  # Closed form at a few points: gelu(0) = 0, gelu'(0) = 0.5, gelu'(x) = Phi(x) + x phi(x).
  y, (dy,) = values_and_grads(layers.gelu_exact, tf.constant([0.0, 1.0]))
  w = np.random.default_rng(7).standard_normal(2)
  phi1 = np.exp(-0.5) / np.sqrt(2 * np.pi)
  np.testing.assert_allclose(dy.numpy(), w * np.array([0.5, 0.8413447460685429 + phi1]), rtol=1e-6)
  assert y.numpy()[0] == 0.0


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16"])
def test_inference_gelu_is_gelu_exact_bit_for_bit(dtype):
  x = tf.constant(np.random.default_rng(2).standard_normal([7, 13]) * 4.0, tf.float32)
  x = tf.cast(tf.concat([tf.reshape(x, [-1]), [-30.0, -8.0, -1e-3, 0.0, 1e-3, 8.0, 30.0]], axis=0), dtype)
  np.testing.assert_array_equal(tf.cast(layers.gelu_exact_forward(x), tf.float32).numpy(),
                                tf.cast(layers.gelu_exact(x), tf.float32).numpy())


def executed_op_types(saved_model_dir: str, feeds) -> list[str]:
  """The op types TF Serving's loader (a TF1 session, after grappler's rewrites) runs for the SavedModel's
  serving_default, one entry per executed node."""
  from tensorflow.core.protobuf import config_pb2

  graph = tf.Graph()
  metadata = config_pb2.RunMetadata()
  with tf.compat.v1.Session(graph=graph) as session:
    meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], saved_model_dir)
    signature = meta.signature_def["serving_default"]
    session.run({k: v.name for k, v in signature.outputs.items()},
                {signature.inputs[k].name: v for k, v in feeds.items()}, run_metadata=metadata,
                options=config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE))
  return [node.timeline_label.split("(")[0].split("=")[-1].strip()
          for device in metadata.step_stats.dev_stats for node in device.node_stats]


def test_a_block_in_inference_runs_its_gelu_inside_the_matmul(tmp_path):
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-direct-tensorflow-import

  if not _pywrap_util_port.IsMklEnabled():
    pytest.skip("the fusion is oneDNN's (TF_ENABLE_ONEDNN_OPTS=0 here)")
  # No dropout: the training graph then has no random state to save, and runs the same ops otherwise.
  block = layers.TransformerBlock(hidden_size=12, num_attention_heads=3, intermediate_size=37,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  feeds = {"x": np.random.default_rng(3).standard_normal([2, 5, 12]).astype(np.float32),
           "mask": np.array([[1] * 5, [1] * 3 + [0] * 2], np.int32)}
  block(feeds["x"], feeds["mask"])  # builds the variables
  specs = [tf.TensorSpec([None, None, 12], tf.float32, name="x"), tf.TensorSpec([None, None], tf.int32, name="mask")]
  ops = {}
  for training in (False, True):
    module = tf.Module()
    module.variables_ = [v.value for v in block.weights]
    module.call = tf.function(lambda x, mask, t=training: {"y": block(x, mask, training=t)}, input_signature=specs)
    tf.saved_model.save(module, str(tmp_path / str(training)), signatures=module.call)
    ops[training] = executed_op_types(str(tmp_path / str(training)), feeds)
  assert "Erf" not in ops[False] and "_MklNativeFusedMatMul" in ops[False], sorted(set(ops[False]))
  assert "Erf" in ops[True]  # training keeps gelu_exact, for its own gradient


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gelu_exact_half_precision(dtype):
  x32 = tf.constant(np.random.default_rng(1).standard_normal(SHAPE) * 2.0, tf.float32)
  x = tf.cast(x32, dtype)
  y, (dx,) = values_and_grads(layers.gelu_exact, x)
  assert y.dtype == dx.dtype == tf.as_dtype(dtype)
  ref, (dref,) = values_and_grads(lambda t: keras.activations.gelu(t, approximate=False), tf.cast(x, tf.float32))
  tolerance = 2e-2 if dtype == "bfloat16" else 3e-3
  np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), ref.numpy(), atol=tolerance * 4, rtol=tolerance)
  np.testing.assert_allclose(tf.cast(dx, tf.float32).numpy(), dref.numpy(), atol=tolerance * 4, rtol=tolerance)


def keras_layer_norm(epsilon, gamma, beta):
  ref = keras.layers.LayerNormalization(epsilon=epsilon)
  ref.build((None, SHAPE[-1]))
  ref.set_weights([gamma, beta])
  return ref


@pytest.mark.parametrize("epsilon", [1e-12, 1e-3])
def test_layer_norm_matches_keras_values_and_gradients(epsilon):
  rng = np.random.default_rng(2)
  gamma, beta = rng.standard_normal(SHAPE[-1]).astype(np.float32), rng.standard_normal(SHAPE[-1]).astype(np.float32)
  # Rows of very different scale and offset; one row constant (variance 0: only epsilon keeps it finite).
  x = rng.standard_normal(SHAPE) * rng.uniform(0.01, 30.0, SHAPE[:-1] + (1,)) + rng.uniform(-5, 5, SHAPE[:-1] + (1,))
  x[0, 0, :] = 2.0  # its mean is exact in float32
  x = tf.constant(x, tf.float32)
  ours = layers.LayerNorm(epsilon=epsilon)
  ours.build((None, SHAPE[-1]))
  ours.set_weights([gamma, beta])
  ref = keras_layer_norm(epsilon, gamma, beta)
  y, _ = values_and_grads(ours, x, [ours.gamma, ours.beta])
  # The constant row normalises to beta exactly. Keras' form x * inv - mean * inv cancels two terms of about
  # 2 / sqrt(epsilon) there and is off by up to 0.1 at epsilon 1e-12 (torch's (x - mean) * inv is exact too).
  np.testing.assert_array_equal(y.numpy()[0, 0], beta)
  # Elsewhere the same values and gradients as Keras'.
  x = x[1:]
  y, grads = values_and_grads(ours, x, [ours.gamma, ours.beta])
  y_ref, grads_ref = values_and_grads(ref, x, [ref.gamma, ref.beta])
  np.testing.assert_allclose(y.numpy(), y_ref.numpy(), rtol=1e-5, atol=1e-5)
  for g, g_ref, name in zip(grads, grads_ref, ("x", "gamma", "beta")):
    assert g.shape == g_ref.shape, name
    scale = np.abs(g_ref.numpy()).max()
    np.testing.assert_allclose(g.numpy(), g_ref.numpy(), atol=2e-5 * scale + 1e-6, err_msg=name)


def test_layer_norm_keeps_variable_names_and_config():
  norm = layers.LayerNorm(epsilon=1e-12, name="attention_layer_norm")
  norm.build((None, 7))
  assert [w.path for w in norm.weights] == ["attention_layer_norm/gamma", "attention_layer_norm/beta"]
  again = layers.LayerNorm.from_config(norm.get_config())
  assert again.epsilon == 1e-12 and again.axis in (-1, [-1])


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
def test_layer_norm_mixed_precision(policy):
  norm = layers.LayerNorm(epsilon=1e-12, dtype=policy)
  norm.build((None, SHAPE[-1]))
  compute = norm.compute_dtype
  x32 = tf.constant(np.random.default_rng(3).standard_normal(SHAPE) * 4 + 1, tf.float32)
  y, (dx, dgamma, dbeta) = values_and_grads(norm, tf.cast(x32, compute), [norm.gamma, norm.beta])
  assert y.dtype == dx.dtype == tf.as_dtype(compute)
  assert dgamma.dtype == dbeta.dtype == tf.float32  # the variables stay float32
  ref = keras_layer_norm(1e-12, *norm.get_weights())
  y_ref, (dx_ref, _, _) = values_and_grads(ref, tf.cast(tf.cast(x32, compute), tf.float32), [ref.gamma, ref.beta])
  tolerance = 5e-2 if compute == "bfloat16" else 5e-3
  np.testing.assert_allclose(tf.cast(y, tf.float32).numpy(), y_ref.numpy(), atol=tolerance)
  np.testing.assert_allclose(tf.cast(dx, tf.float32).numpy(), dx_ref.numpy(), atol=tolerance * 4)


def test_unknown_shapes_in_a_graph():
  norm = layers.LayerNorm(epsilon=1e-12)
  norm.build((None, SHAPE[-1]))

  @tf.function(input_signature=[tf.TensorSpec([None, None, SHAPE[-1]], tf.float32)])
  def both(x):
    with tf.GradientTape() as tape:
      tape.watch(x)
      loss = tf.reduce_sum(layers.gelu_exact(norm(x)) * tf.range(SHAPE[-1], dtype=tf.float32))
    return tape.gradient(loss, [x, norm.gamma])

  x = tf.constant(np.random.default_rng(4).standard_normal((2, 9, SHAPE[-1])), tf.float32)
  dx, dgamma = both(x)
  with tf.GradientTape() as tape:
    tape.watch(x)
    ref = keras_layer_norm(1e-12, *norm.get_weights())
    loss = tf.reduce_sum(keras.activations.gelu(ref(x), approximate=False) * tf.range(SHAPE[-1], dtype=tf.float32))
  dx_ref, dgamma_ref = tape.gradient(loss, [x, ref.gamma])
  np.testing.assert_allclose(dx.numpy(), dx_ref.numpy(), atol=1e-4)
  np.testing.assert_allclose(dgamma.numpy(), dgamma_ref.numpy(), atol=1e-4)


def test_scatter_rows_equals_scatter_nd_in_values_and_gradient():
  mask = tf.constant([[1, 1, 0, 0, 0], [1, 1, 1, 1, 1], [0, 1, 1, 0, 1]])  # the last row is not a prefix
  keep = layers.real_token_rows(mask)
  np.testing.assert_array_equal(keep.numpy()[:, 0], [0, 1, 5, 6, 7, 8, 9, 11, 12, 14])
  rows = tf.constant(np.random.default_rng(5).standard_normal((10, 7)), tf.float32)
  dy = tf.constant(np.random.default_rng(6).standard_normal((15, 7)), tf.float32)

  @tf.function(input_signature=[tf.TensorSpec([None, 7], tf.float32), tf.TensorSpec([None, 1], tf.int64)])
  def both(rows, keep):  # Unknown shapes, as in training.
    with tf.GradientTape(persistent=True) as tape:
      tape.watch(rows)
      ours = layers.scatter_rows(rows, keep, 15)
      ref = tf.scatter_nd(keep, rows, [15, 7])
      loss, ref_loss = tf.reduce_sum(ours * dy), tf.reduce_sum(ref * dy)
    return ours, ref, tape.gradient(loss, rows), tape.gradient(ref_loss, rows)

  ours, ref, grad, ref_grad = both(rows, keep)
  np.testing.assert_array_equal(ours.numpy(), ref.numpy())
  np.testing.assert_array_equal(ours.numpy()[[2, 3, 4, 10, 13]], 0.0)
  np.testing.assert_array_equal(grad.numpy(), ref_grad.numpy())
  np.testing.assert_array_equal(grad.numpy(), dy.numpy()[keep.numpy()[:, 0]])
