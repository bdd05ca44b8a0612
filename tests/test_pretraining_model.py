"""BertPretrainer (MLM + NSP heads) and the pretraining loss terms, on hand-computed cases."""

import math

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.model.pretraining import BertPretrainer, pretraining_loss, pretraining_loss_terms
from test_encoder import randomize, tiny_config, tiny_inputs

B, T, P = 3, 7, 2


def numpy_lm_logits(model: BertPretrainer, rows: np.ndarray) -> np.ndarray:
  """The masked-LM head in numpy on encoder rows [..., H] -> [..., V]: dense, erf GELU, LayerNorm, then the tied
  word embeddings and the output bias."""
  head = model.mlm_head
  x = rows @ head.transform.kernel.numpy() + head.transform.bias.numpy()
  x = 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
  x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
  x = x * head.transform_layer_norm.gamma.numpy() + head.transform_layer_norm.beta.numpy()
  return x @ model.encoder.word_embeddings.embeddings.numpy().T + head.output_bias.numpy()


def tiny_features(seed=0):
  features = tiny_inputs(seed)
  features.update({
      "masked_lm_positions": np.array([[1, 5], [3, 0], [0, 0]], np.int32),
      "masked_lm_ids": np.array([[5, 6], [7, 0], [0, 0]], np.int32),
      "masked_lm_weights": np.array([[1, 1], [1, 0], [0, 0]], np.float32),
      "next_sentence_labels": np.array([[0], [1], [0]], np.int32),
  })
  return features


def test_outputs_and_heads_against_numpy():
  config = tiny_config()
  model = BertPretrainer(config)
  randomize(model)
  features = tiny_features()  # A whole record: the label features are ignored by the model.
  out = model(features)
  assert set(out) == {"mlm_logits", "nsp_logits"}
  assert out["mlm_logits"].shape == (B, P, 99) and out["mlm_logits"].dtype == tf.float32
  assert out["nsp_logits"].shape == (B, 2) and out["nsp_logits"].dtype == tf.float32

  enc = model.encoder(features)
  seq, pooled = enc["sequence_output"].numpy(), enc["pooled_output"].numpy()
  rows = np.stack([seq[b, features["masked_lm_positions"][b]] for b in range(B)])  # [B, P, H]
  np.testing.assert_allclose(out["mlm_logits"].numpy(), numpy_lm_logits(model, rows), atol=1e-4, rtol=1e-5)
  nsp = pooled @ model.nsp_head.kernel.numpy() + model.nsp_head.bias.numpy()
  np.testing.assert_allclose(out["nsp_logits"].numpy(), nsp, atol=1e-5)


def test_output_projection_is_tied_to_word_embeddings():
  model = BertPretrainer(tiny_config())
  head_vars = [v.path for v in model.mlm_head.weights if v is not model.encoder.word_embeddings.embeddings]
  assert head_vars == ["mlm_head/output_bias", "mlm_head/transform/kernel", "mlm_head/transform/bias",
                       "mlm_head/transform_layer_norm/gamma", "mlm_head/transform_layer_norm/beta"]
  assert len(model.trainable_variables) == len({id(v) for v in model.trainable_variables})
  features = tiny_features()
  with tf.GradientTape() as tape:
    out = model(features)
    loss = tf.reduce_sum(out["mlm_logits"][:, :, 42])  # Token 42 appears in no input: only the head uses it.
  grad = tape.gradient(loss, model.encoder.word_embeddings.embeddings)
  grad = tf.convert_to_tensor(grad).numpy()
  assert np.abs(grad[42]).max() > 0


def test_shares_the_given_encoder_and_rejects_another_config():
  from bert_tf.model.encoder import BertEncoder

  encoder = BertEncoder(tiny_config())
  model = BertPretrainer(tiny_config(), encoder=encoder)
  assert model.encoder is encoder
  with pytest.raises(ValueError, match="different BertConfig"):
    BertPretrainer(tiny_config(hidden_act="relu"), encoder=encoder)


def test_config_round_trip_and_keras_save(tmp_path):
  model = BertPretrainer(tiny_config(), name="pretrainer")
  randomize(model)
  clone = BertPretrainer.from_config(model.get_config())
  assert clone.get_config() == model.get_config()
  path = str(tmp_path / "pretrainer.keras")
  model.save(path)
  restored = keras.models.load_model(path)
  assert isinstance(restored, BertPretrainer)
  features = tiny_features()
  a, b = model(features), restored(features)
  np.testing.assert_array_equal(a["mlm_logits"], b["mlm_logits"])
  np.testing.assert_array_equal(a["nsp_logits"], b["nsp_logits"])


def test_mixed_precision_logits_are_float32():
  model = BertPretrainer(tiny_config(), dtype="mixed_float16")
  out = model(tiny_features())
  assert out["mlm_logits"].dtype == tf.float32 and out["nsp_logits"].dtype == tf.float32
  assert model.encoder.dtype_policy.name == "mixed_float16"
  assert np.isfinite(out["mlm_logits"].numpy()).all()


# Hand-computed cases. With logits (ln 2, 0, 0) the softmax is (1/2, 1/4, 1/4); with (0, 0) it is (1/2, 1/2);
# with (ln 3, 0) it is (3/4, 1/4).
LN2, LN3, LN4 = math.log(2), math.log(3), math.log(4)


def hand_case():
  features = {
      "masked_lm_ids": np.array([[0, 1], [2, 0]], np.int32),
      "masked_lm_weights": np.array([[1.0, 0.5], [1.0, 0.0]], np.float32),
      "next_sentence_labels": np.array([[0], [1]], np.int32),
  }
  outputs = {
      "mlm_logits": np.array([[[LN2, 0, 0], [LN2, 0, 0]], [[0, 0, LN2], [7.0, 0, 0]]], np.float32),
      "nsp_logits": np.array([[LN3, 0], [LN3, 0]], np.float32),
  }
  return features, outputs


def test_loss_terms_hand_computed():
  features, outputs = hand_case()
  terms = {k: float(v) for k, v in pretraining_loss_terms(features, outputs).items()}
  # MLM: label 0 (p 1/2) weight 1, label 1 (p 1/4) weight 0.5, label 2 (p 1/2) weight 1, last slot weight 0.
  assert terms["mlm_loss_sum"] == pytest.approx(LN2 + 0.5 * LN4 + LN2, abs=1e-6)
  assert terms["mlm_weight_sum"] == 2.5
  assert terms["mlm_correct_sum"] == pytest.approx(1.0 + 0.0 + 1.0)
  # NSP: label 0 with p 3/4, label 1 with p 1/4.
  assert terms["nsp_loss_sum"] == pytest.approx(math.log(4 / 3) + LN4, abs=1e-6)
  assert terms["nsp_correct_sum"] == 1.0
  assert terms["nsp_count"] == 2.0
  expected = (2 * LN2 + 0.5 * LN4) / 2.5 + (math.log(4 / 3) + LN4) / 2
  assert float(pretraining_loss(features, outputs)) == pytest.approx(expected, abs=1e-6)


def test_nsp_labels_may_be_flat():
  features, outputs = hand_case()
  flat = dict(features, next_sentence_labels=features["next_sentence_labels"].reshape(-1))
  a, b = pretraining_loss_terms(features, outputs), pretraining_loss_terms(flat, outputs)
  assert {k: float(v) for k, v in a.items()} == {k: float(v) for k, v in b.items()}


def test_sums_do_not_depend_on_how_the_batch_is_split():
  features, outputs = hand_case()
  whole = pretraining_loss_terms(features, outputs)
  halves = [pretraining_loss_terms({k: v[i:i + 1] for k, v in features.items()},
                                   {k: v[i:i + 1] for k, v in outputs.items()}) for i in range(2)]
  for key, value in whole.items():
    assert float(value) == pytest.approx(float(halves[0][key]) + float(halves[1][key]), abs=1e-6)


def test_loss_without_predictions_is_finite():
  features, outputs = hand_case()
  features["masked_lm_weights"] = np.zeros((2, 2), np.float32)
  loss = float(pretraining_loss(features, outputs))
  assert loss == pytest.approx((math.log(4 / 3) + LN4) / 2, abs=1e-6)


def test_mixed_precision_config_round_trip():
  model = BertPretrainer(tiny_config(), dtype="mixed_bfloat16")
  clone = BertPretrainer.from_config(model.get_config())
  assert clone.dtype_policy.name == "mixed_bfloat16"
  assert clone.encoder.layer_1.intermediate.dtype_policy.name == "mixed_bfloat16"


def test_cross_entropy_and_its_gradient_match_tensorflow():
  from bert_tf.model.pretraining import cross_entropy

  rng = np.random.default_rng(0)
  logits = tf.constant(rng.normal(0, 3, (13, 99)).astype(np.float32))
  labels = tf.constant(rng.integers(0, 99, 13).astype(np.int32))
  weights = tf.constant(rng.uniform(0, 1, 13).astype(np.float32))
  results = []
  for fn in (cross_entropy, lambda l, y: tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=l)):
    with tf.GradientTape() as tape:
      tape.watch(logits)
      loss = fn(logits, labels)
      total = tf.reduce_sum(weights * loss)
    results.append((loss.numpy(), tape.gradient(total, logits).numpy()))
  np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-6, atol=1e-7)


def test_training_computes_only_real_prediction_slots_with_the_same_loss_and_gradients():
  # Slots at position 0 are google-research's padding (weight 0): in training their logits are 0, not computed.
  model = BertPretrainer(tiny_config(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0))
  randomize(model)
  features = {k: tf.constant(v) for k, v in tiny_features().items()}
  real = features["masked_lm_positions"].numpy() > 0  # [B, P]: 3 of the 6 slots

  def loss_and_grads(features):
    with tf.GradientTape() as tape:
      out = model(features, training=True)
      loss = pretraining_loss(features, out)
    return out["mlm_logits"], loss, tape.gradient(loss, model.trainable_variables)

  skipped, loss, grads = tf.function(loss_and_grads)(features)
  full, full_loss, full_grads = tf.function(loss_and_grads, jit_compile=True)(features)  # XLA: every slot
  skipped, full = skipped.numpy(), full.numpy()
  np.testing.assert_allclose(skipped[real], full[real], atol=1e-5)
  np.testing.assert_array_equal(skipped[~real], 0.0)
  assert np.abs(full[~real]).max() > 0.1  # the full computation does give padded slots logits
  np.testing.assert_allclose(skipped[real], model(features)["mlm_logits"].numpy()[real], atol=1e-5)
  np.testing.assert_allclose(loss.numpy(), full_loss.numpy(), rtol=1e-6)
  for g, x in zip(grads, full_grads):
    np.testing.assert_allclose(tf.convert_to_tensor(g).numpy(), tf.convert_to_tensor(x).numpy(), atol=1e-5)
