"""bert_tf.tasks.ner.model: feature records, the shared input pipeline with dynamic padding of the labels,
the token classifier, its loss over first pieces only, and training and prediction through the shared trainer,
on windows of test_ner_data's fixture (its 25-token vocabulary)."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.data.tokenization import FullTokenizer
from bert_tf.tasks.common.folder import float32_copy
from bert_tf.tasks.ner import data as ner
from bert_tf.tasks.ner import model as ner_model
from bert_tf.training import finetuning, optimization, trainer
from test_ner_data import IOB2, ORIGINAL, VOCAB, write

T = 11
STRATEGY = tf.distribute.OneDeviceStrategy("/cpu:0")
LABELS = ner.labels_for(("LOC", "MISC", "ORG", "PER"), "IOB2")
LABEL_IDS = {label: i for i, label in enumerate(LABELS)}


@pytest.fixture()
def sentences(tmp_path):
  return ner.read_conll(write(tmp_path / "eng.train", ORIGINAL)).sentences


def _windows(sentences, t=T, context=False):
  return ner.make_windows(sentences, FullTokenizer(VOCAB), t, context, LABEL_IDS)


def _config():
  return BertConfig.from_preset("tiny", vocab_size=len(VOCAB), num_hidden_layers=1, hidden_size=18,
                                num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 2,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def test_feature_files_round_trip_exactly_and_are_reused(sentences, tmp_path):
  windows = _windows(sentences, 7)  # 6 windows: the last two sentences are cut in two
  path = str(tmp_path / "f.tfrecord")
  info = ner_model.write_feature_file(windows, path)
  assert info == ner_model.NerFeatureFile(path, 6, 17, 7) == ner_model.read_feature_file_info(path)
  assert json.loads(open(path + ".json").read())["num_words"] == 17
  parsed = tf.io.parse_example(list(tf.data.TFRecordDataset([path]).as_numpy_iterator()), ner_model.feature_spec(7))
  assert sorted(parsed) == sorted(ner_model.NER_FEATURES)
  for name, field in (("unique_ids", "unique_id"), ("input_ids", "input_ids"), ("input_mask", "input_mask"),
                      ("segment_ids", "segment_ids"), ("label_ids", "label_ids"), ("label_mask", "label_mask")):
    assert parsed[name].numpy().tolist() == [getattr(w, field) for w in windows], name

  def fail():
    raise AssertionError("the windows were made again")

  assert ner_model.cached_feature_file(path, fail) == (info, True)
  fresh, reused = ner_model.cached_feature_file(str(tmp_path / "g.tfrecord"), lambda: iter(windows[:2]))
  assert not reused and fresh.num_windows == 2
  with pytest.raises(ValueError, match="window 0 has 11 ids, the first had 7"):
    ner_model.write_feature_file(windows[:1] + _windows(sentences), str(tmp_path / "bad.tfrecord"))
  assert not (tmp_path / "bad.tfrecord").exists()


def test_feature_file_path_changes_with_every_setting(tmp_path):
  data = write(tmp_path / "eng.train", ORIGINAL)
  vocab = write(tmp_path / "vocab.txt", "\n".join(VOCAB) + "\n")
  base = ner_model.feature_file_path(str(tmp_path / "f"), data, vocab, True, T, False, "IOB2", LABELS)
  assert base.startswith(f"{tmp_path}/f/ner/") and base.endswith(".tfrecord")
  assert ner_model.feature_file_path(str(tmp_path / "f"), data, vocab, True, T, False, "IOB2", LABELS) == base
  assert ner_model.feature_file_path(str(tmp_path / "f"), data, vocab, True, T, True, "IOB2", LABELS) != base
  write(tmp_path / "eng.train", ORIGINAL.replace("EU", "UE"))
  assert ner_model.feature_file_path(str(tmp_path / "f"), data, vocab, True, T, False, "IOB2", LABELS) != base


def test_dataset_cuts_labels_with_the_inputs_and_pads_the_last_batch(sentences, tmp_path):
  windows = _windows(sentences)
  path = str(tmp_path / "f.tfrecord")
  ner_model.write_feature_file(windows, path)
  batches = list(ner_model.ner_dataset(path, 3, T, is_training=False, pad_to_batch=True))
  lengths = [sum(w.input_mask) for w in windows]  # 7, 5, 8, 10
  assert [b["input_ids"].shape for b in batches] == [(3, 8), (3, 10)]
  for b in batches:
    assert {k: v.shape for k, v in b.items() if k not in ("unique_ids", "is_real_example")} == {
        k: b["input_ids"].shape for k in ("input_ids", "input_mask", "segment_ids", "label_ids", "label_mask")}
  assert batches[1]["is_real_example"].numpy().tolist() == [1, 0, 0]
  assert batches[0]["label_ids"].numpy().tolist() == [w.label_ids[:8] for w in windows[:3]]
  assert batches[0]["label_mask"].dtype == tf.int32 and batches[0]["unique_ids"].dtype == tf.int64
  full = list(ner_model.ner_dataset(path, 3, T, is_training=False, dynamic_padding=False))
  assert [b["label_mask"].shape for b in full] == [(3, T), (1, T)]
  assert lengths == [7, 5, 8, 10]
  train = list(ner_model.ner_dataset(path, 3, T, is_training=True, seed=3).take(4))
  assert all(b["input_ids"].shape[0] == 3 for b in train)
  ids = np.concatenate([b["unique_ids"].numpy() for b in train]).tolist()
  assert sorted(ids[:4]) == [0, 1, 2, 3]


def test_token_classifier_outputs_one_dense_layer_on_every_position():
  model = ner_model.BertTokenClassifier(_config(), len(LABELS))
  mask = (np.arange(7)[None] < np.array([[7], [3], [5]])).astype(np.int32)
  x = {"input_ids": tf.constant(np.arange(21).reshape(3, 7) % 20 * mask + 5 * mask, tf.int32),
       "input_mask": tf.constant(mask), "segment_ids": tf.zeros([3, 7], tf.int32)}
  out = model(x)
  assert out.shape == (3, 7, len(LABELS)) and out.dtype == tf.float32
  kernel, bias = model.tag_output.get_weights()
  np.testing.assert_allclose(out.numpy(), model.encoder(x)["sequence_output"].numpy() @ kernel + bias, atol=1e-5)
  clone = ner_model.BertTokenClassifier.from_config(model.get_config())
  clone(x)
  clone.set_weights(model.get_weights())
  np.testing.assert_array_equal(clone(x).numpy(), out.numpy())
  np.testing.assert_array_equal(float32_copy(model)(x).numpy(), out.numpy())
  assert ner_model.BertTokenClassifier(_config(), 3, dtype="mixed_bfloat16")(x).dtype == tf.float32
  with pytest.raises(ValueError, match="num_labels=1: a tagger needs at least O and one entity label"):
    ner_model.BertTokenClassifier(_config(), 1)


def test_loss_is_the_mean_cross_entropy_over_first_pieces_only():
  task = ner_model.NerTask(_config(), 5, "unused", T)
  rng = np.random.default_rng(2)
  label_mask = np.array([[0, 1, 1, 0, 0], [0, 1, 0, 1, 0], [0, 0, 0, 0, 0]], np.int32)
  label_ids = np.array([[0, 3, 4, 0, 0], [0, 0, 0, 2, 0], [0, 0, 0, 0, 0]], np.int32)
  logits = rng.normal(size=[3, 5, 5]).astype(np.float32)
  logits[0, 3] = [0, 0, 0, 0, 90]  # a later piece: its loss would be huge, and it does not count
  features = {"label_mask": tf.constant(label_mask), "label_ids": tf.constant(label_ids)}
  terms = task.loss_terms(features, tf.constant(logits))
  normalizers = task.normalizers(features)
  z = logits.astype(np.float64)
  log_p = z - np.log(np.exp(z).sum(-1, keepdims=True))
  picked = [(0, 1), (0, 2), (1, 1), (1, 3)]
  expected = np.mean([-log_p[b, t, label_ids[b, t]] for b, t in picked])
  assert float(normalizers["words"]) == 4.0
  assert float(task.loss(terms, normalizers)) == pytest.approx(expected, rel=1e-6)
  hits = sum(int(logits[b, t].argmax() == label_ids[b, t]) for b, t in picked)
  assert float(terms["correct_sum"]) == hits
  assert task.metrics({"correct_sum": float(hits), "words": 4.0}) == {"accuracy": hits / 4}


def test_training_fits_the_fixture_and_prediction_reads_first_pieces(sentences, tmp_path):
  windows = _windows(sentences)
  path = str(tmp_path / "train.tfrecord")
  ner_model.write_feature_file(windows, path)
  keras.utils.set_random_seed(5)
  steps = 40
  task = ner_model.NerTask(_config(), len(LABELS), path, T, seed=1)
  config = trainer.TrainerConfig(output_dir=str(tmp_path / "run"), global_batch_size=4, num_train_steps=steps,
                                 steps_per_loop=steps, save_checkpoints_steps=100, log_steps=10)
  run = trainer.Trainer(task, STRATEGY, lambda: optimization.create_optimizer("adamw", 1e-2, steps, 2), config)
  result = run.train()
  losses = [h["loss"] for h in run.history]
  assert losses[-1] < 0.3 * losses[0], losses
  assert result.metrics["accuracy"] == 1.0
  dataset = ner_model.ner_dataset(path, 3, T, is_training=False, pad_to_batch=True)
  predicted = finetuning.predict(ner_model.ner_predictions(run.model, T), dataset, STRATEGY)
  assert predicted.shape == (4, T)
  assert ner.predicted_tags(windows, predicted.astype(int), sentences, LABELS) == [list(t) for t in IOB2]
