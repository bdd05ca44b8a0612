"""bert_tf.tasks.classification.classifier: feature files, the classifier model and task."""

import dataclasses
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.data.tokenization import FullTokenizer
from bert_tf.tasks.classification import classifier as c
from bert_tf.tasks.common.features import encode
from test_common_features import TOKENS, WORDS, vocab_file  # noqa: F401  The vocabulary and its fixture.


def _write(tmp_path, vocab_file, n=11, regression=False, max_seq_length=13):
  tok = FullTokenizer(vocab_file)
  rng = random.Random(n)
  rows = [(" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 14))), "the dog" if i % 2 else None,
           (i * 0.37 if regression else i % 3)) for i in range(n)]
  info = c.write_feature_file(rows, tok, max_seq_length, str(tmp_path / "f" / "train.tfrecord"),
                              is_regression=regression, is_pair=True)
  return rows, info


def test_feature_file_round_trip_and_description(tmp_path, vocab_file):
  rows, info = _write(tmp_path, vocab_file)
  assert info.num_examples == 11 and info.max_seq_length == 13
  described = json.loads(open(info.path + ".json").read())
  assert described["num_examples"] == 11 and set(described["token_length_percentiles"]) == {"50", "90", "99", "max"}
  assert c.read_feature_file_info(info.path) == info
  batches = list(c.classifier_dataset(info.path, 4, 13, False, is_training=False, dynamic_padding=False))
  assert [b["input_ids"].shape[0] for b in batches] == [4, 4, 3]
  features = {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}
  tok = FullTokenizer(vocab_file)
  for i, (a, b, label) in enumerate(rows):
    assert features["input_ids"][i].tolist() == encode(tok, a, b, 13).input_ids
  assert features["label_ids"].tolist() == [i % 3 for i in range(11)]
  assert features["is_real_example"].tolist() == [1] * 11
  assert features["input_ids"].dtype == np.int32


def test_a_moved_feature_file_is_described_at_its_new_path(tmp_path, vocab_file):
  """A description names the path its writer used (relative to that run's working directory); read at another
  path (another working directory, a moved folder), it names the file it was read from."""
  _, info = _write(tmp_path, vocab_file)
  moved = tmp_path / "moved"
  os.rename(tmp_path / "f", moved)
  again = c.read_feature_file_info(str(moved / "train.tfrecord"))
  assert again == dataclasses.replace(info, path=str(moved / "train.tfrecord"))


def test_dynamic_padding_cuts_to_a_multiple_of_eight_and_pad_to_batch_fills(tmp_path, vocab_file):
  _, info = _write(tmp_path, vocab_file, n=5, max_seq_length=29)
  (batch,) = c.classifier_dataset(info.path, 7, 29, False, is_training=False, pad_to_batch=True)
  longest = int(batch["input_mask"].numpy().sum(axis=1).max())
  assert batch["input_ids"].shape == (7, min(29, -(-longest // 8) * 8))
  assert batch["is_real_example"].numpy().tolist() == [1] * 5 + [0] * 2
  assert batch["input_ids"].numpy()[5:].sum() == 0


def test_training_dataset_repeats_with_full_batches_and_regression_labels_are_float(tmp_path, vocab_file):
  _, info = _write(tmp_path, vocab_file, n=7, regression=True)
  batches = list(c.classifier_dataset(info.path, 3, 13, True, is_training=True).take(5))
  assert all(b["input_ids"].shape[0] == 3 for b in batches)
  assert batches[0]["label_ids"].dtype == tf.float32
  # Shuffled within each epoch, then repeated: the first 7 and the next 7 labels are each one full epoch.
  seen = np.round(np.concatenate([b["label_ids"].numpy() for b in batches]) / 0.37).astype(int).tolist()
  assert sorted(seen[:7]) == sorted(seen[7:14]) == list(range(7))
  assert seen[:7] != seen[7:14]  # reshuffled


def _config():
  return BertConfig.from_preset("tiny", vocab_size=len(TOKENS), hidden_size=18, num_attention_heads=3,
                                intermediate_size=37, num_hidden_layers=1, max_position_embeddings=17)


def _inputs(batch=5, length=7, seed=0):
  rng = np.random.default_rng(seed)
  mask = (np.arange(length)[None] < rng.integers(2, length + 1, [batch, 1])).astype(np.int32)
  return {"input_ids": tf.constant(rng.integers(5, len(TOKENS), [batch, length]) * mask, tf.int32),
          "input_mask": tf.constant(mask), "segment_ids": tf.constant(np.zeros([batch, length], np.int32)),
          "label_ids": tf.constant(np.arange(batch) % 3, tf.int32)}


def test_classifier_shapes_config_round_trip_and_save_load(tmp_path, vocab_file):
  model = c.BertClassifier(_config(), 3)
  x = _inputs()
  logits = model(x, training=False)
  assert logits.shape == (5, 3)
  regression = c.BertClassifier(_config(), 1)
  assert regression(x).shape == (5,)
  clone = c.BertClassifier.from_config(model.get_config())
  assert clone.num_labels == 3 and clone.config == model.config
  spec = c.ClassifierSpec("toy", ("x", "y", "z"), True, 13, True)
  c.save_classifier(model, spec, vocab_file, str(tmp_path / "classifier"))
  loaded, loaded_spec, vocab = c.load_classifier(str(tmp_path / "classifier"))
  assert loaded_spec == spec and open(vocab).read() == open(vocab_file).read()
  np.testing.assert_allclose(loaded(x).numpy(), logits.numpy(), atol=1e-6)
  with pytest.raises(FileNotFoundError, match="classifier.json"):
    c.load_classifier(str(tmp_path))


def test_mixed_precision_classifier_is_saved_in_float32(tmp_path, vocab_file):
  model = c.BertClassifier(_config(), 2, dtype="mixed_bfloat16")
  x = _inputs()
  assert model(x).dtype == tf.bfloat16
  spec = c.ClassifierSpec("toy", ("x", "y"), False, 13, True)
  c.save_classifier(model, spec, vocab_file, str(tmp_path / "cls"))
  loaded, _, _ = c.load_classifier(str(tmp_path / "cls"))
  out = loaded(x)
  assert out.dtype == tf.float32
  np.testing.assert_allclose(out.numpy(), tf.cast(model(x), tf.float32).numpy(), atol=0.05)


def test_a_classifier_folder_whose_config_does_not_fit_its_weights_is_one_line(tmp_path, vocab_file):
  directory = tmp_path / "cls"
  model = c.BertClassifier(_config(), 2)
  model(_inputs())
  c.save_classifier(model, c.ClassifierSpec("toy", ("x", "y"), False, 13, True), vocab_file, str(directory))
  values = json.loads((directory / "bert_config.json").read_text())
  (directory / "bert_config.json").write_text(json.dumps({**values, "hidden_size": 21}))
  with pytest.raises(ValueError) as caught:
    c.load_classifier(str(directory))
  assert str(caught.value) == (
      f"{directory}/model: does not match {directory}/bert_config.json: word_embeddings/embeddings: the checkpoint "
      f"has [{len(TOKENS)}, 18], the model needs [{len(TOKENS)}, 21]; the files of {directory} do not belong "
      "together: use a folder written by run_classifier.py (<output_dir>/classifier/)")


def test_task_loss_is_the_mean_cross_entropy_of_real_examples():
  task = c.ClassificationTask(_config(), 3, "unused", 13)
  x = _inputs()
  x["is_real_example"] = tf.constant([1, 1, 1, 0, 1], tf.int32)
  logits = tf.constant(np.random.default_rng(1).normal(size=[5, 3]), tf.float32)
  terms = task.loss_terms(x, logits)
  loss = task.loss(terms, task.normalizers(x))
  per = tf.keras.losses.sparse_categorical_crossentropy(x["label_ids"], logits, from_logits=True).numpy()
  assert float(loss) == pytest.approx(per[[0, 1, 2, 4]].mean(), rel=1e-6)
  correct = (logits.numpy().argmax(1) == np.arange(5) % 3)[[0, 1, 2, 4]].sum()
  assert float(terms["correct_sum"]) == correct
  regression = c.ClassificationTask(_config(), 1, "unused", 13)
  x["label_ids"] = tf.constant([0.5, 1.0, 2.0, 9.0, 3.0])
  scores = tf.constant([1.0, 1.0, 1.0, 1.0, 1.0])
  assert float(regression.loss(regression.loss_terms(x, scores), regression.normalizers(x))) == pytest.approx(
      (0.25 + 0 + 1 + 4) / 4)


def test_predictions_from_outputs():
  predictions, probabilities = c.predictions_from_outputs(np.array([[0.0, 1.0], [2.0, 0.0]], np.float32), False)
  assert predictions.tolist() == [1, 0]
  np.testing.assert_allclose(probabilities[0], [1 / (1 + np.e), np.e / (1 + np.e)], rtol=1e-6)
  scores, same = c.predictions_from_outputs(np.array([0.5, 4.0]), True)
  assert scores.tolist() == [0.5, 4.0] and same is scores
