"""bert_tf.tasks.common.layer_choice: each of the paper's feature choices (Table 7) on fixed layer outputs, exactly;
the weighted sums' start (the mean) and formula; the concatenation order; config round trips; bad choices."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks.common import layer_choice as fc

B, T, H, L = 3, 5, 7, 5  # odd sizes: a transposed axis cannot hide


def _outputs(layers=L, seed=0):
  """Distinct fixed values: embeddings [B, T, H] and `layers` layers, each offset by 10 x its index."""
  rng = np.random.RandomState(seed)
  values = [rng.normal(size=(B, T, H)).astype(np.float32) + 10 * i for i in range(layers + 1)]
  return {"embedding_output": tf.constant(values[0]), "encoder_outputs": [tf.constant(v) for v in values[1:]],
          "sequence_output": tf.constant(values[-1]), "pooled_output": tf.zeros([B, H])}, values


@pytest.mark.parametrize("choice, expected", [
    ("embeddings", lambda v: v[0]),
    ("second_to_last_hidden", lambda v: v[L - 1]),
    ("last_hidden", lambda v: v[L]),
    ("concat_last_four", lambda v: np.concatenate([v[L], v[L - 1], v[L - 2], v[L - 3]], axis=-1)),
])
def test_plain_choices_are_the_layers_exactly(choice, expected):
  outputs, values = _outputs()
  layer = fc.FeatureChoice(choice, L)
  got = layer(outputs).numpy()
  np.testing.assert_array_equal(got, expected(values))
  assert got.shape == (B, T, fc.feature_size(choice, H)) == layer.compute_output_shape(
      {"embedding_output": (B, T, H)})
  assert layer.weights == []


def test_concat_puts_the_last_layer_first():
  outputs, values = _outputs()
  got = fc.FeatureChoice("concat_last_four", L)(outputs).numpy()
  assert got.shape == (B, T, 4 * H)
  np.testing.assert_array_equal(got[..., :H], values[L])  # -1 first, as google-research's --layers=-1,-2,-3,-4
  np.testing.assert_array_equal(got[..., 3 * H:], values[L - 3])


@pytest.mark.parametrize("choice, read", [("weighted_sum_last_four", [2, 3, 4, 5]),
                                          ("weighted_sum_all", [0, 1, 2, 3, 4, 5])])
def test_weighted_sums_start_as_the_mean_and_learn_a_softmax_mix(choice, read):
  outputs, values = _outputs()
  layer = fc.FeatureChoice(choice, L)
  assert fc.layers_read(choice, L) == read
  np.testing.assert_array_equal(layer.layer_logits.numpy(), np.zeros(len(read)))
  assert float(layer.scale.numpy()) == 1.0
  np.testing.assert_allclose(layer(outputs).numpy(), np.mean([values[i] for i in read], axis=0), rtol=1e-6,
                             atol=1e-5)

  logits = np.arange(len(read), dtype=np.float32) * 0.7 - 1.0
  layer.layer_logits.assign(logits)
  layer.scale.assign(2.5)
  mix = np.exp(logits) / np.exp(logits).sum()
  expected = 2.5 * sum(w * values[i] for w, i in zip(mix, read))
  np.testing.assert_allclose(layer(outputs).numpy(), expected, rtol=1e-5, atol=1e-5)

  with tf.GradientTape() as tape:
    total = tf.reduce_sum(layer(outputs))
  grads = tape.gradient(total, [layer.layer_logits, layer.scale])
  assert all(g is not None and np.all(np.isfinite(g.numpy())) for g in grads)
  assert float(tf.reduce_max(tf.abs(grads[0]))) > 0  # the layers differ, so the mix matters


def test_config_round_trip_rebuilds_the_layer():
  outputs, _ = _outputs()
  for choice in fc.CHOICES:
    layer = fc.FeatureChoice(choice, L, name=f"f_{choice}")
    config = layer.get_config()
    assert config["choice"] == choice and config["num_hidden_layers"] == L
    json.dumps(config)
    copy = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert isinstance(copy, fc.FeatureChoice) and copy.choice == choice and copy.name == f"f_{choice}"
    if layer.weights:
      layer.layer_logits.assign(tf.range(len(layer.read), dtype=tf.float32))
      copy.set_weights(layer.get_weights())
    np.testing.assert_array_equal(copy(outputs).numpy(), layer(outputs).numpy())


def test_reads_a_real_encoders_outputs():
  config = BertConfig.from_preset("tiny", vocab_size=31, num_hidden_layers=4, hidden_size=14, num_attention_heads=2,
                                  intermediate_size=23, max_position_embeddings=11)
  encoder = BertEncoder(config)
  ids = tf.constant(np.random.RandomState(1).randint(1, 31, size=(B, T)), tf.int32)
  outputs = encoder({"input_ids": ids, "input_mask": tf.ones_like(ids), "segment_ids": tf.zeros_like(ids)})
  np.testing.assert_array_equal(fc.FeatureChoice("embeddings", 4)(outputs).numpy(),
                                outputs["embedding_output"].numpy())
  np.testing.assert_array_equal(fc.FeatureChoice("last_hidden", 4)(outputs).numpy(),
                                outputs["sequence_output"].numpy())
  assert fc.FeatureChoice("weighted_sum_all", 4)(outputs).shape == (B, T, 14)


def test_bad_choices_and_shallow_encoders_are_clear_errors():
  with pytest.raises(ValueError, match="'last_four'.*choose one of embeddings, second_to_last_hidden, last_hidden, "
                                       "weighted_sum_last_four, concat_last_four, weighted_sum_all"):
    fc.FeatureChoice("last_four", L)
  with pytest.raises(ValueError, match="--feature_based='x': unknown"):
    fc.check_choice("x", flag="--feature_based")
  with pytest.raises(ValueError, match="concat_last_four: needs at least 4 transformer layers; the encoder has 3"):
    fc.FeatureChoice("concat_last_four", 3)
  with pytest.raises(ValueError, match="second_to_last_hidden: needs at least 2"):
    fc.layers_read("second_to_last_hidden", 1)
  fc.check_choice("last_hidden", 1)
  outputs, _ = _outputs(layers=4)
  with pytest.raises(ValueError, match="built for 5 layers; the encoder gave 4"):
    fc.FeatureChoice("last_hidden", L)(outputs)
  with pytest.raises(KeyError, match="lack \\['embedding_output'\\]"):
    fc.FeatureChoice("last_hidden", L)({"encoder_outputs": outputs["encoder_outputs"]})
