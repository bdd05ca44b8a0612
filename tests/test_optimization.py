"""AdamWeightDecay and LAMB against numpy transcriptions of their equations; the schedule; the decay rule."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.training import optimization

LR = 0.01
WD = 0.01


def _reference_adamw(params, grads_per_step, lrs, decay_flags, clip_norm=1.0, b1=0.9, b2=0.999, eps=1e-6,
                     bias_correction=False):
  """google-research AdamWeightDecayOptimizer in numpy: no bias correction, decay added before the lr. With
  `bias_correction`, torch.optim.AdamW's form: m_hat / (sqrt(v_hat) + eps)."""
  params = [p.astype(np.float64).copy() for p in params]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
    norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    grads = [g * clip_norm / max(norm, clip_norm) for g in grads]
    for i, g in enumerate(grads):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      if decay_flags[i]:
        params[i] = params[i] - lr * WD * params[i]
      if bias_correction:
        params[i] = params[i] - lr * (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
      else:
        params[i] = params[i] - lr * m[i] / (np.sqrt(v[i]) + eps)
  return params


def _reference_lamb(params, grads_per_step, lrs, decay_flags, b1=0.9, b2=0.999, eps=1e-6):
  params = [p.astype(np.float64).copy() for p in params]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
    norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads))
    grads = [g / max(norm, 1.0) for g in grads]
    for i, g in enumerate(grads):
      m[i] = b1 * m[i] + (1 - b1) * g
      v[i] = b2 * v[i] + (1 - b2) * g * g
      update = (m[i] / (1 - b1**t)) / (np.sqrt(v[i] / (1 - b2**t)) + eps)
      ratio = 1.0
      if decay_flags[i]:
        update = update + WD * params[i]
        w, u = np.linalg.norm(params[i]), np.linalg.norm(update)
        ratio = w / u if w > 0 and u > 0 else 1.0
      params[i] = params[i] - lr * ratio * update
  return params


def _variables(rng):
  # A kernel [3, 5] (decays), its bias [5] (does not), a LayerNorm-like gamma [5] (does not), an
  # EinsumDense-style bias [2, 5] (rank 2 but named bias: does not).
  shapes = {"kernel": (3, 5), "bias": (5,), "gamma": (5,), "attention_bias": (2, 5)}
  return [keras.Variable(rng.normal(size=s).astype(np.float32), name=n) for n, s in shapes.items()]


def _run(optimizer, variables, grads_per_step):
  for grads in grads_per_step:
    optimizer.apply([tf.constant(g) for g in grads], variables)
  return [v.numpy() for v in variables]


@pytest.mark.parametrize("name", ["adamw", "adamw_bias_corrected", "lamb"])
def test_update_matches_reference_equations(name):
  rng = np.random.default_rng(0)
  variables = _variables(rng)
  initial = [v.numpy() for v in variables]
  # Step 0 has a gradient of global norm > 1 so clipping is exercised; the others are small.
  grads_per_step = [[rng.normal(size=v.shape).astype(np.float32) * s for v in variables] for s in (3.0, 0.1, 0.2)]
  schedule = optimization.WarmupLinearDecay(LR, num_train_steps=10, num_warmup_steps=2)
  lrs = [float(schedule(t)) for t in range(3)]
  assert lrs == pytest.approx([0.0, 0.005, 0.008])
  opt = optimization.create_optimizer(name, LR, num_train_steps=10, num_warmup_steps=2, weight_decay_rate=WD)
  got = _run(opt, variables, grads_per_step)
  flags = [True, False, False, False]
  assert [bool(d) for d in opt._decays] == flags
  if name == "lamb":
    want = _reference_lamb(initial, grads_per_step, lrs, flags)
  else:
    want = _reference_adamw(initial, grads_per_step, lrs, flags, bias_correction=name == "adamw_bias_corrected")
  for g, w in zip(got, want):
    np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
  assert int(opt.iterations) == 3


def test_schedule_at_key_steps():
  s = optimization.WarmupLinearDecay(1e-4, num_train_steps=1000, num_warmup_steps=100)
  values = {t: float(s(t)) for t in (0, 1, 50, 99, 100, 500, 999, 1000, 5000)}
  assert values[0] == 0.0
  assert values[1] == pytest.approx(1e-6)
  assert values[50] == pytest.approx(5e-5)
  assert values[99] == pytest.approx(9.9e-5)
  # Decay counts from step 0 (google-research's polynomial_decay over the whole run).
  assert values[100] == pytest.approx(9e-5)
  assert values[500] == pytest.approx(5e-5)
  assert values[999] == pytest.approx(1e-7, rel=1e-4)
  assert values[1000] == 0.0 and values[5000] == 0.0
  no_warmup = optimization.WarmupLinearDecay(2.0, num_train_steps=4)
  assert [float(no_warmup(t)) for t in range(5)] == pytest.approx([2.0, 1.5, 1.0, 0.5, 0.0])


def test_decay_rule_on_the_real_encoder():
  from bert_tf.config import BertConfig
  from bert_tf.model.encoder import BertEncoder

  encoder = BertEncoder(BertConfig.from_preset("tiny", vocab_size=99, num_hidden_layers=1, hidden_size=18,
                                               num_attention_heads=3, intermediate_size=37))
  decayed = {v.path for v in encoder.trainable_variables if optimization.decays(v)}
  excluded = {v.path for v in encoder.trainable_variables} - decayed
  # google-research's rule by name: everything but biases and LayerNorm parameters decays.
  assert all(p.endswith("/bias") or "norm" in p for p in excluded), excluded
  assert all(p.endswith(("/kernel", "/embeddings")) for p in decayed), decayed
  assert any("word_embeddings" in p for p in decayed)


def test_lamb_trust_ratio_scales_the_step_to_the_weight_norm():
  # One step, no decay: the Adam direction has |u| = 1 per element, so
  # ||u|| = sqrt(n) and the step is lr * ||w|| / sqrt(n) per element whatever the gradient's size.
  w0 = np.full((4, 4), 3.0, np.float32)
  var = keras.Variable(w0, name="kernel")
  opt = optimization.Lamb(learning_rate=0.1, weight_decay_rate=0.0)
  opt.apply([tf.fill((4, 4), 0.4)], [var])
  step = w0 - var.numpy()
  np.testing.assert_allclose(step, 0.1 * np.linalg.norm(w0) / 4.0, rtol=1e-4)
  # A bias gets no trust ratio: its step is lr * 1 (Adam direction) per element.
  bias = keras.Variable(np.full((4,), 3.0, np.float32), name="bias")
  opt = optimization.Lamb(learning_rate=0.1)
  opt.apply([tf.fill((4,), 0.4)], [bias])
  np.testing.assert_allclose(3.0 - bias.numpy(), 0.1, rtol=1e-4)


def test_create_optimizer_wraps_for_float16_and_checkpoints(tmp_path):
  opt = optimization.create_optimizer("lamb", 1e-3, num_train_steps=10, num_warmup_steps=0, dtype="mixed_float16")
  assert isinstance(opt, keras.optimizers.LossScaleOptimizer)
  assert isinstance(optimization.inner_optimizer(opt), optimization.Lamb)
  var = keras.Variable(np.ones((2, 3), np.float32), name="kernel")
  opt.apply([tf.ones((2, 3))], [var])
  path = tf.train.Checkpoint(optimizer=opt).write(str(tmp_path / "ckpt"))
  fresh = optimization.create_optimizer("lamb", 1e-3, num_train_steps=10, dtype="mixed_float16")
  fresh.build([keras.Variable(np.zeros((2, 3), np.float32), name="kernel")])
  tf.train.Checkpoint(optimizer=fresh).read(path).assert_consumed()
  assert int(fresh.iterations) == 1
  np.testing.assert_allclose(optimization.inner_optimizer(fresh)._m[0].numpy(),
                             optimization.inner_optimizer(opt)._m[0].numpy())
  with pytest.raises(ValueError, match="--optimizer"):
    optimization.create_optimizer("sgd")


def test_float16_update_skipped_for_overflow_still_advances_the_schedule():
  # lr(t) = 1 - t / 4 (no warmup). A skipped update leaves the weights and halves the loss scale, but counts
  # as a step, so the next update uses lr(1) = 0.75 as an uninterrupted run's second update would.
  opt = optimization.create_optimizer("adamw", 1.0, num_train_steps=4, num_warmup_steps=0, clip_norm=None,
                                      weight_decay_rate=0.0, dtype="mixed_float16")
  var = keras.Variable(np.zeros((3,), np.float32), name="kernel")
  opt.build([var])
  scale = float(opt.dynamic_scale.numpy())
  opt.apply([tf.constant([1.0, np.inf, 0.0])], [var])
  np.testing.assert_array_equal(var.numpy(), 0.0)
  assert float(opt.dynamic_scale.numpy()) == scale / 2
  assert int(opt.iterations) == 1
  assert optimization.current_learning_rate(opt) == pytest.approx(0.75)
  opt.apply([tf.constant([1.0, -1.0, 0.0]) * opt.dynamic_scale], [var])
  assert int(opt.iterations) == 2
  # Adam without bias correction, first moments: m = 0.1 g, v = 0.001 g^2 -> step lr * 0.1 / (sqrt(0.001) + eps).
  expected = 0.75 * 0.1 / (np.sqrt(0.001) + 1e-6)
  np.testing.assert_allclose(var.numpy(), [-expected, expected, 0.0], rtol=1e-5)


def test_bias_corrected_adamw_adds_epsilon_as_torch_does():
  # A tiny gradient, where epsilon's placement matters: torch.optim.AdamW's first step is
  # lr g / (|g| + eps) = 1e-5 / 1.1e-5; adding eps before the correction (TF's Adam kernel alone) would give
  # 1e-5 / (1e-5 + 1e-6 / sqrt(0.001)) = 0.24.
  opt = optimization.AdamWeightDecay(learning_rate=1.0, weight_decay_rate=0.0, clip_norm=None,
                                     bias_correction=True)
  var = keras.Variable(np.zeros((2,), np.float32), name="kernel")
  opt.apply([tf.constant([1e-5, -1e-5])], [var])
  np.testing.assert_allclose(var.numpy(), [-1e-5 / 1.1e-5, 1e-5 / 1.1e-5], rtol=1e-5)
  opt.apply([tf.constant([1e-5, -1e-5])], [var])  # Same gradient: m_hat = g, v_hat = g^2 again.
  np.testing.assert_allclose(var.numpy(), [-2e-5 / 1.1e-5, 2e-5 / 1.1e-5], rtol=1e-5)


def test_float16_loss_scale_growth_steps_from_the_environment(monkeypatch):
  opt = optimization.create_optimizer("adamw", 1e-3, num_train_steps=10, dtype="mixed_float16")
  assert opt.dynamic_growth_steps == 2000  # Keras' default
  monkeypatch.setenv("BERT_TF_LOSS_SCALE_GROWTH_STEPS", "3")
  opt = optimization.create_optimizer("adamw", 1e-3, num_train_steps=10, dtype="mixed_float16")
  var = keras.Variable(np.zeros((2,), np.float32), name="kernel")
  opt.build([var])
  for _ in range(3):
    opt.apply([tf.ones((2,)) * opt.dynamic_scale], [var])
  assert opt.dynamic_growth_steps == 3 and float(opt.dynamic_scale.numpy()) == 2.0**16  # doubled after 3
  monkeypatch.setenv("BERT_TF_LOSS_SCALE_GROWTH_STEPS", "0")
  with pytest.raises(ValueError, match=r"^BERT_TF_LOSS_SCALE_GROWTH_STEPS='0': must be an integer >= 1"):
    optimization.create_optimizer("adamw", 1e-3, num_train_steps=10, dtype="mixed_float16")
