"""bert_tf.tasks.swag.model: feature records of four sequences per example, the [B, C, T] input pipeline with
dynamic padding, the multiple-choice head, its loss, and training and prediction through the shared trainer and
`finetuning.predict`. Tiny sizes, odd where they can be."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.data import tokenization
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks.common.folder import float32_copy
from bert_tf.tasks.swag import data as swag
from bert_tf.tasks.swag import model as swag_model
from bert_tf.training import finetuning, optimization, trainer

T = 13  # max_seq_length
STRATEGY = tf.distribute.OneDeviceStrategy("/cpu:0")
WORDS = ("the a man woman dog cat runs walks sits jumps falls sleeps . , then away over fence into water slowly "
         "quickly it he she they park ball red blue").split()


@pytest.fixture(scope="module")
def tokenizer():
  return tokenization.FullTokenizer({t: i for i, t in enumerate(tokenization.SPECIAL_TOKENS + tuple(WORDS))})


def make_examples(n, seed=0, labelled=True, words=7):
  """`n` examples of random words: contexts of 1-`words` words, endings of 1-(`words` - 1); with 7, some pairs
  exceed T and are cut."""
  rng = np.random.default_rng(seed)

  def text(low, high):
    return " ".join(rng.choice(WORDS, int(rng.integers(low, high))))

  return [swag.SwagExample(str(100 + i), text(1, words + 1), text(0, 2), tuple(text(1, words) for _ in range(4)),
                           int(rng.integers(0, 4)) if labelled else None) for i in range(n)]


def _config(dropout=0.0):
  return BertConfig.from_preset("tiny", vocab_size=len(WORDS) + 5, num_hidden_layers=1, hidden_size=18,
                                num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 4,
                                hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


def test_feature_file_round_trips_the_four_sequences_of_each_example(tmp_path, tokenizer):
  examples = make_examples(7)
  path = str(tmp_path / "f.tfrecord")
  info = swag_model.write_feature_file(examples, tokenizer, T, path)
  encoded = [swag.encode_example(tokenizer, e, T) for e in examples]
  lengths = [s.num_tokens for seqs in encoded for s in seqs]
  assert (info.num_examples, info.num_choices, info.max_seq_length) == (7, 4, T)
  assert info.num_truncated == sum(s.truncated for seqs in encoded for s in seqs) > 0
  assert info.token_length_percentiles == {"50": int(np.percentile(lengths, 50)),
                                           "90": int(np.percentile(lengths, 90)),
                                           "99": int(np.percentile(lengths, 99)), "max": T}
  assert swag_model.read_feature_file_info(path) == info
  assert json.loads(open(path + ".json").read())["num_examples"] == 7
  assert swag_model.read_feature_file_info(str(tmp_path / "none.tfrecord")) is None

  parsed = tf.io.parse_example(list(tf.data.TFRecordDataset([path]).as_numpy_iterator()), swag_model.feature_spec(T))
  assert sorted(parsed) == sorted(swag_model.SWAG_FEATURES)
  for name in ("input_ids", "input_mask", "segment_ids"):
    assert parsed[name].shape == (7, 4, T)
    assert parsed[name].numpy().tolist() == [[getattr(s, name) for s in seqs] for seqs in encoded], name
  assert parsed["label_ids"].numpy().tolist() == [e.label for e in examples]
  assert parsed["is_real_example"].numpy().tolist() == [1] * 7

  # Test examples have no label: written as 0.
  swag_model.write_feature_file(make_examples(3, labelled=False), tokenizer, T, str(tmp_path / "test.tfrecord"))
  labels = tf.io.parse_example(list(tf.data.TFRecordDataset([str(tmp_path / "test.tfrecord")]).as_numpy_iterator()),
                               swag_model.feature_spec(T))["label_ids"]
  assert labels.numpy().tolist() == [0, 0, 0]
  with pytest.raises(ValueError, match="--max_seq_length=3: must exceed 3"):
    swag_model.write_feature_file(examples, tokenizer, 3, str(tmp_path / "short.tfrecord"))
  assert not (tmp_path / "short.tfrecord").exists()


def test_feature_file_path_changes_with_every_setting(tmp_path):
  data, vocab = tmp_path / "train.csv", tmp_path / "vocab.txt"
  data.write_text("x")
  vocab.write_text("[UNK]\n")
  args = dict(split="train", do_lower_case=True, max_seq_length=T, num_examples=5)
  base = swag_model.feature_file_path("features/", str(data), str(vocab), **args)
  assert base.startswith("features/swag/train-") and base.endswith(".tfrecord")
  assert swag_model.feature_file_path("features", str(data), str(vocab), **args) == base
  for name, value in (("do_lower_case", False), ("max_seq_length", T + 2), ("num_examples", 4)):
    assert swag_model.feature_file_path("features", str(data), str(vocab), **dict(args, **{name: value})) != base, name
  data.write_text("y")
  assert swag_model.feature_file_path("features", str(data), str(vocab), **args) != base


def test_evaluation_batches_are_cut_to_the_longest_sequence_and_padded_to_full(tmp_path, tokenizer):
  examples = make_examples(3, seed=2) + make_examples(2, seed=3, words=3)
  path = str(tmp_path / "eval.tfrecord")
  swag_model.write_feature_file(examples, tokenizer, T, path)
  encoded = [swag.encode_example(tokenizer, e, T) for e in examples]
  batches = list(swag_model.swag_dataset(path, 2, T, is_training=False, pad_to_batch=True, length_multiple=1))
  longest = [max(s.num_tokens for seqs in encoded[i:i + 2] for s in seqs) for i in (0, 2, 4)]
  assert [b["input_ids"].shape for b in batches] == [(2, 4, n) for n in longest]
  assert min(longest) < T  # the cut had work to do
  assert [b["is_real_example"].numpy().tolist() for b in batches] == [[1, 1], [1, 1], [1, 0]]
  got = np.concatenate([np.pad(b["input_ids"].numpy(), [[0, 0], [0, 0], [0, T - b["input_ids"].shape[2]]])
                        for b in batches])
  assert got[:5].tolist() == [[s.input_ids for s in seqs] for seqs in encoded]
  assert (got[5] == 0).all()
  assert batches[0]["label_ids"].dtype == tf.int32
  # A multiple of 8 rounds the length up (XLA compiles fewer shapes), never past T.
  rounded = list(swag_model.swag_dataset(path, 2, T, is_training=False, length_multiple=8))
  assert [b["input_ids"].shape[2] for b in rounded] == [min(-(-n // 8) * 8, T) for n in longest]
  assert [b["input_ids"].shape[0] for b in rounded] == [2, 2, 1]
  full = list(swag_model.swag_dataset(path, 2, T, is_training=False, dynamic_padding=False))
  assert {b["input_ids"].shape[2] for b in full} == {T}

  training = list(swag_model.swag_dataset(path, 3, T, is_training=True, seed=5).take(4))
  assert all(b["input_ids"].shape[:2] == (3, 4) for b in training)  # repeats, full batches only
  first_ids = [tuple(b["input_ids"].numpy()[i, 0, :3]) for b in training[:2] for i in range(3)]
  assert len(set(first_ids[:5])) == 5  # each example once per epoch


def _batch(examples, tokenizer, length=T):
  encoded = [swag.encode_example(tokenizer, e, length) for e in examples]
  return {name: tf.constant([[getattr(s, name) for s in seqs] for seqs in encoded], tf.int32)
          for name in ("input_ids", "input_mask", "segment_ids")}


def test_the_head_scores_each_choice_alone_from_its_pooled_output(tokenizer):
  keras.utils.set_random_seed(1)
  model = swag_model.BertMultipleChoice(_config())
  x = _batch(make_examples(3, seed=4), tokenizer)
  logits = model(x)
  assert logits.shape == (3, 4) and logits.dtype == tf.float32
  kernel, bias = model.choice_score.get_weights()
  for c in range(4):  # each choice's score is its own sequence's, whatever the other choices hold
    alone = {k: v[:, c, :] for k, v in x.items()}
    expected = model.encoder.pooled_output(alone).numpy() @ kernel[:, 0] + bias[0]
    np.testing.assert_allclose(logits.numpy()[:, c], expected, atol=1e-5)
  order = [2, 0, 3, 1]
  permuted = model({k: tf.gather(v, order, axis=1) for k, v in x.items()})
  np.testing.assert_allclose(permuted.numpy(), tf.gather(logits, order, axis=1).numpy(), atol=1e-5)
  assert model.choice_score.kernel_initializer.get_config()["stddev"] == 0.02
  clone = swag_model.BertMultipleChoice.from_config(model.get_config())
  assert clone.config == model.config and clone.dropout_rate == 0.0
  copy = float32_copy(model, (1, swag.NUM_CHOICES, 2))
  np.testing.assert_array_equal(copy(x).numpy(), logits.numpy())
  mixed = swag_model.BertMultipleChoice(_config(), dtype="mixed_bfloat16")
  assert mixed(x).dtype == tf.bfloat16


def test_loss_is_the_mean_cross_entropy_over_the_choices_of_real_examples():
  task = swag_model.MultipleChoiceTask(_config(), "unused", T)
  logits = np.array([[0.1, 2.0, -1.0, 0.3], [1.0, 1.0, 1.0, 1.0], [5.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 9.0],
                     [-2.0, 0.5, 0.4, 0.0]], np.float32)
  labels = np.array([1, 2, 1, 3, 2])
  features = {"label_ids": tf.constant(labels, tf.int32), "is_real_example": tf.constant([1, 1, 1, 0, 1], tf.int32)}
  terms = task.loss_terms(features, tf.constant(logits))
  normalizers = task.normalizers(features)
  z = logits.astype(np.float64)
  log_p = z - z.max(1, keepdims=True) - np.log(np.exp(z - z.max(1, keepdims=True)).sum(1, keepdims=True))
  real = [0, 1, 2, 4]
  assert float(task.loss(terms, normalizers)) == pytest.approx(-np.mean(log_p[real, labels[real]]), rel=1e-6)
  assert float(terms["correct_sum"]) == 1.0  # example 0 only (1's tie argmaxes to 0, 3 is padding)
  assert task.metrics({k: float(v) for k, v in {**terms, **normalizers}.items()}) == {"accuracy": 0.25}
  np.testing.assert_allclose(swag_model.probabilities(logits), np.exp(log_p), rtol=1e-6)


def test_trainer_learns_the_choices_and_predict_returns_real_examples_in_order(tmp_path, tokenizer):
  # The true ending is always "water": learnable in a few steps by a one-layer encoder.
  rng = np.random.default_rng(6)
  examples = []
  for i, example in enumerate(make_examples(11, seed=6)):
    label = int(rng.integers(0, 4))
    endings = tuple("into water" if c == label else e.replace("water", "park")
                    for c, e in enumerate(example.endings))
    examples.append(swag.SwagExample(str(i), example.sent1, example.sent2, endings, label))
  path = str(tmp_path / "train.tfrecord")
  swag_model.write_feature_file(examples, tokenizer, T, path)
  keras.utils.set_random_seed(3)
  steps = 25
  task = swag_model.MultipleChoiceTask(_config(), path, T, seed=1, length_multiple=1)
  config = trainer.TrainerConfig(output_dir=str(tmp_path / "run"), global_batch_size=5, num_train_steps=steps,
                                 steps_per_loop=steps, save_checkpoints_steps=100, log_steps=1)
  run = trainer.Trainer(task, STRATEGY, lambda: optimization.create_optimizer("adamw", 3e-3, steps, 2), config)
  result = run.train()
  losses = [h["loss"] for h in run.history]
  assert len(losses) == steps and all(np.isfinite(losses))
  assert np.mean(losses[-3:]) < 0.5 * losses[0]
  assert set(result.metrics) >= {"loss", "accuracy"}
  reader = tf.train.load_checkpoint(str(tmp_path / "run" / "checkpoints"))
  assert any(name.startswith("encoder/") for name in reader.get_variable_to_shape_map())

  # Prediction over padded batches of 4: [N, 4] in file order, the padding example dropped.
  dataset = swag_model.swag_dataset(path, 4, T, is_training=False, pad_to_batch=True, length_multiple=1)
  predicted = finetuning.predict(run.model, dataset, STRATEGY)
  assert predicted.shape == (11, 4) and predicted.dtype == np.float32
  np.testing.assert_allclose(predicted, run.model(_batch(examples, tokenizer), training=False).numpy(), atol=1e-5)
  assert (predicted.argmax(1) == [e.label for e in examples]).mean() >= 0.9
  target = BertEncoder(_config())
  finetuning.init_encoder(target, str(tmp_path / "run"))
  for a, b in zip(target.weights, run.model.encoder.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
