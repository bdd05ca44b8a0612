"""bert_tf.tasks.squad.model: feature records, the span labeller, its loss, and training and prediction
through the shared trainer and `finetuning.predict`, on windows of the corner-case fixture of test_squad_data."""

import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.data import tokenization
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks.squad import data as squad
from bert_tf.tasks.squad import model as squad_model
from bert_tf.training import finetuning, optimization, trainer
from test_squad_data import build_fixture, write_json

T, STRIDE, QUERY = 37, 11, 9  # odd sizes: max_seq_length, doc_stride, max_query_length
STRATEGY = tf.distribute.OneDeviceStrategy("/cpu:0")


@pytest.fixture(scope="module")
def windows(bert_uncased_vocab_file, tmp_path_factory):
  """(training windows, evaluation windows) of the v2.0 fixture."""
  path = write_json(tmp_path_factory.mktemp("squad") / "v2.json", build_fixture(True))
  tokenizer = tokenization.FullTokenizer(bert_uncased_vocab_file, do_lower_case=True)
  out = []
  for is_training in (True, False):
    examples = squad.read_squad_examples(path, is_training, version_2_with_negative=True).examples
    out.append(list(squad.convert_examples_to_features(examples, tokenizer, is_training, T, STRIDE, QUERY)))
  return out


def _config(vocab_size=30522):
  return BertConfig.from_preset("tiny", vocab_size=vocab_size, num_hidden_layers=1, hidden_size=18,
                                num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 4,
                                hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)


def _read_all(path, is_training, batch=4, **kwargs):
  batches = list(squad_model.squad_dataset(path, batch, T, is_training=is_training, **kwargs))
  return batches, {k: np.concatenate([b[k].numpy() for b in batches]) for k in batches[0]}


def _mixed_lengths(features, n=11):
  """`n` windows in file order, most of them shorter than T (so dynamic padding cuts), two full ones last."""
  short, seen = [], {}
  for f in features:  # at most two of each length
    length = sum(f.input_mask)
    if length < T and seen.get(length, 0) < 2:
      seen[length] = seen.get(length, 0) + 1
      short.append(f)
  short = short[:n - 2]
  full = [f for f in features if sum(f.input_mask) == T][:2]
  assert len(short) == n - 2 and len({sum(f.input_mask) for f in short}) > 2
  return short + full


def test_feature_files_round_trip_exactly_and_are_reused(windows, tmp_path):
  train, evaluate = windows
  train = train[:23]  # answered and unanswered windows, and the impossible question's
  train.append(next(f for f in windows[0] if f.is_impossible))
  path = str(tmp_path / "train.tfrecord")
  info = squad_model.write_feature_file(train, path, is_training=True)
  assert (info.num_features, info.max_seq_length, info.is_training) == (24, T, True)
  assert info.num_examples == len({f.example_index for f in train})
  assert info.num_unanswered == sum(f.start_position == 0 for f in train) > 0
  assert squad_model.read_feature_file_info(path) == info
  assert json.loads(open(path + ".json").read())["num_features"] == 24

  # The training reader: its records, read once in order, hold every field.
  spec = squad_model.feature_spec(T, is_training=True)
  parsed = tf.io.parse_example(list(tf.data.TFRecordDataset([path]).as_numpy_iterator()), spec)
  assert sorted(spec) == ["end_positions", "input_ids", "input_mask", "segment_ids", "start_positions",
                          "unique_ids"]
  for name, field in (("unique_ids", "unique_id"), ("input_ids", "input_ids"), ("input_mask", "input_mask"),
                      ("segment_ids", "segment_ids"), ("start_positions", "start_position"),
                      ("end_positions", "end_position")):
    assert parsed[name].numpy().tolist() == [getattr(f, field) for f in train], name
  raw = tf.train.Example.FromString(next(tf.data.TFRecordDataset([path]).skip(23).as_numpy_iterator()))
  assert raw.features.feature["is_impossible"].int64_list.value == [1]
  assert set(raw.features.feature) == set(squad_model.SQUAD_FEATURES)

  # The evaluation records: unique ids, ids and masks, no positions; in order, the last batch short.
  eval_path = str(tmp_path / "eval.tfrecord")
  squad_model.write_feature_file(evaluate[:13], eval_path, is_training=False)
  batches, got = _read_all(eval_path, False, dynamic_padding=False)
  assert [b["input_ids"].shape[0] for b in batches] == [4, 4, 4, 1]
  assert sorted(got) == ["input_ids", "input_mask", "is_real_example", "segment_ids", "unique_ids"]
  assert got["unique_ids"].tolist() == list(range(squad.FIRST_UNIQUE_ID, squad.FIRST_UNIQUE_ID + 13))
  assert got["unique_ids"].dtype == np.int64 and got["input_ids"].dtype == np.int32
  for name in ("input_ids", "input_mask", "segment_ids"):
    assert got[name].tolist() == [getattr(f, name) for f in evaluate[:13]], name
  assert got["is_real_example"].tolist() == [1] * 13

  # Reused without making the windows again when the file is there; named by what determines it.
  def fail():
    raise AssertionError("the windows were made again")

  assert squad_model.cached_feature_file(path, fail, is_training=True) == (info, True)
  fresh, reused = squad_model.cached_feature_file(str(tmp_path / "new.tfrecord"), lambda: iter(train[:5]), True)
  assert not reused and fresh.num_features == 5
  with pytest.raises(ValueError, match="holds training features"):
    squad_model.cached_feature_file(path, fail, is_training=False)
  with pytest.raises(ValueError, match="has no answer position"):
    squad_model.write_feature_file(evaluate[:2], str(tmp_path / "bad.tfrecord"), is_training=True)
  assert not (tmp_path / "bad.tfrecord").exists()


def test_feature_file_path_changes_with_every_setting(tmp_path, bert_uncased_vocab_file):
  data = write_json(tmp_path / "v1.json", build_fixture(False))
  args = dict(is_training=True, version_2_with_negative=False, do_lower_case=True, max_seq_length=T,
              doc_stride=STRIDE, max_query_length=QUERY)
  base = squad_model.feature_file_path(str(tmp_path / "features"), data, bert_uncased_vocab_file, **args)
  assert base.startswith(f"{tmp_path}/features/squad/train-") and base.endswith(".tfrecord")
  assert squad_model.feature_file_path(str(tmp_path / "features"), data, bert_uncased_vocab_file, **args) == base
  for name, value in (("doc_stride", STRIDE + 2), ("max_query_length", QUERY + 2), ("do_lower_case", False),
                      ("version_2_with_negative", True), ("max_seq_length", T + 2)):
    assert squad_model.feature_file_path(str(tmp_path / "features"), data, bert_uncased_vocab_file,
                                         **dict(args, **{name: value})) != base, name
  assert "/eval-" in squad_model.feature_file_path(str(tmp_path), data, bert_uncased_vocab_file,
                                         **dict(args, is_training=False))


def test_training_dataset_shuffles_repeats_and_keeps_full_batches(windows, tmp_path):
  path = str(tmp_path / "train.tfrecord")
  squad_model.write_feature_file(windows[0][:7], path, is_training=True)
  batches = list(squad_model.squad_dataset(path, 3, T, is_training=True, seed=5).take(5))
  assert all(b["input_ids"].shape[0] == 3 for b in batches)
  ids = np.concatenate([b["unique_ids"].numpy() for b in batches]).tolist()
  assert sorted(ids[:7]) == sorted(ids[7:14]) == list(range(squad.FIRST_UNIQUE_ID, squad.FIRST_UNIQUE_ID + 7))
  assert ids[:7] != ids[7:14]  # reshuffled each epoch
  again = list(squad_model.squad_dataset(path, 3, T, is_training=True, seed=5).take(5))
  assert np.concatenate([b["unique_ids"].numpy() for b in again]).tolist() == ids  # seeded
  assert batches[0]["start_positions"].dtype == tf.int32


def test_span_labeller_outputs_config_round_trip_and_encoder():
  model = squad_model.BertSpanLabeler(_config(50))
  rng = np.random.default_rng(0)
  mask = (np.arange(7)[None] < np.array([[7], [3], [5], [1], [6]])).astype(np.int32)
  x = {"input_ids": tf.constant(rng.integers(5, 50, [5, 7]) * mask, tf.int32), "input_mask": tf.constant(mask),
       "segment_ids": tf.zeros([5, 7], tf.int32), "unique_ids": tf.zeros([5], tf.int64)}
  out = model(x)
  assert sorted(out) == ["end_logits", "start_logits"]
  assert out["start_logits"].shape == out["end_logits"].shape == (5, 7)
  assert out["start_logits"].dtype == tf.float32
  # One dense layer on the sequence output, padded positions included (the reference does not mask them).
  sequence = model.encoder(x)["sequence_output"].numpy()
  kernel, bias = model.span_output.get_weights()
  np.testing.assert_allclose(out["start_logits"].numpy(), sequence @ kernel[:, 0] + bias[0], atol=1e-5)
  np.testing.assert_allclose(out["end_logits"].numpy(), sequence @ kernel[:, 1] + bias[1], atol=1e-5)
  assert model.span_output.kernel_initializer.get_config()["stddev"] == 0.02
  assert isinstance(model.encoder, BertEncoder)
  clone = squad_model.BertSpanLabeler.from_config(model.get_config())
  assert clone.config == model.config
  clone(x)
  clone.set_weights(model.get_weights())
  np.testing.assert_array_equal(clone(x)["end_logits"].numpy(), out["end_logits"].numpy())
  mixed = squad_model.BertSpanLabeler(_config(50), dtype="mixed_bfloat16")
  assert mixed(x)["start_logits"].dtype == tf.float32


def _log_softmax(z):
  z = z - z.max(axis=-1, keepdims=True)
  return z - np.log(np.exp(z).sum(axis=-1, keepdims=True))


def test_loss_is_the_mean_of_start_and_end_cross_entropies_over_real_tokens():
  task = squad_model.SquadTask(_config(50), "unused", T)
  rng = np.random.default_rng(1)
  b, t = 5, 7
  lengths = np.array([7, 3, 5, 2, 6])
  mask = (np.arange(t)[None] < lengths[:, None]).astype(np.int32)
  start, end = np.array([0, 2, 4, 1, 3]), np.array([0, 2, 4, 1, 5])
  features = {"input_mask": tf.constant(mask), "start_positions": tf.constant(start, tf.int32),
              "end_positions": tf.constant(end, tf.int32),
              "is_real_example": tf.constant([1, 1, 1, 0, 1], tf.int32)}
  logits = {"start_logits": rng.normal(size=[b, t]).astype(np.float32),
            "end_logits": rng.normal(size=[b, t]).astype(np.float32)}
  logits["start_logits"][2, 4] = 5.0  # a sure hit
  logits["end_logits"][1, 5] = 50.0  # the argmax of the row, but a padded position: ignored
  terms = task.loss_terms(features, {k: tf.constant(v) for k, v in logits.items()})
  normalizers = task.normalizers(features)
  loss = float(task.loss(terms, normalizers))

  real = [0, 1, 2, 4]
  expected, correct = {}, {}
  for side, positions in (("start", start), ("end", end)):
    ce, hits = [], 0
    for i in real:
      z = logits[f"{side}_logits"][i, :lengths[i]]
      ce.append(-_log_softmax(z.astype(np.float64))[positions[i]])
      hits += int(z.argmax() == positions[i])
    expected[side], correct[side] = np.mean(ce), hits
  assert float(normalizers["examples"]) == 4.0
  assert loss == pytest.approx((expected["start"] + expected["end"]) / 2, rel=1e-6)
  assert float(terms["start_correct_sum"]) == correct["start"] and float(terms["end_correct_sum"]) == correct["end"]
  metrics = task.metrics({k: float(v) for k, v in {**terms, **normalizers}.items()})
  assert metrics == {"start_accuracy": correct["start"] / 4, "end_accuracy": correct["end"] / 4}


def test_dynamic_padding_gives_the_logits_of_full_padding_and_predict_returns_them_in_order(windows, tmp_path):
  chosen = _mixed_lengths(windows[1])
  path = str(tmp_path / "eval.tfrecord")
  squad_model.write_feature_file(chosen, path, is_training=False)
  keras.utils.set_random_seed(7)
  model = squad_model.BertSpanLabeler(_config())
  full_batches, _ = _read_all(path, False, dynamic_padding=False)
  cut_batches = list(squad_model.squad_dataset(path, 4, T, False, pad_to_batch=True, length_multiple=1))
  assert [b["input_ids"].shape for b in cut_batches][:2] == [
      (4, max(sum(f.input_mask) for f in chosen[i:i + 4])) for i in (0, 4)]
  assert cut_batches[0]["input_ids"].shape[1] < T
  assert cut_batches[-1]["is_real_example"].numpy().tolist() == [1, 1, 1, 0]
  assert cut_batches[-1]["unique_ids"].numpy()[-1] == 0
  for full, cut in zip(full_batches, cut_batches):
    n, length = full["input_ids"].shape[0], cut["input_ids"].shape[1]
    a, b = model(full), model(cut)
    for name in ("start_logits", "end_logits"):
      real = full["input_mask"].numpy().astype(bool)
      np.testing.assert_allclose(b[name].numpy()[:n][real[:, :length]], a[name].numpy()[real], atol=1e-5)

  # finetuning.predict over the padded evaluation batches: [N, 2, T] in file order, padding rows dropped.
  dataset = squad_model.squad_dataset(path, 4, T, False, pad_to_batch=True, length_multiple=1)
  predicted = finetuning.predict(squad_model.squad_predictions(model, T), dataset, STRATEGY)
  assert predicted.shape == (len(chosen), 2, T) and predicted.dtype == np.float32
  direct = model({k: tf.constant([getattr(f, k) for f in chosen], tf.int32)
                  for k in ("input_ids", "input_mask", "segment_ids")})
  mask = np.array([f.input_mask for f in chosen], bool)
  np.testing.assert_allclose(predicted[:, 0][mask], direct["start_logits"].numpy()[mask], atol=1e-5)
  np.testing.assert_allclose(predicted[:, 1][mask], direct["end_logits"].numpy()[mask], atol=1e-5)
  # Every padded position is masked, those inside a batch's longest window as well as those past it.
  assert (~mask).any() and (predicted[:, 0][~mask] == squad_model.PAD_LOGIT).all()
  assert (predicted[:, 1][~mask] == squad_model.PAD_LOGIT).all()
  inside = ~mask & (np.arange(T)[None] < np.array([[max(sum(f.input_mask) for f in chosen[i // 4 * 4:i // 4 * 4 + 4])]
                                                  for i in range(len(chosen))]))
  assert inside.any()  # The batches mix lengths, so the mask had work to do inside them.


def test_the_trainer_lowers_the_loss_and_checkpoints_the_encoder(windows, tmp_path):
  train = windows[0][:10] + [f for f in windows[0] if f.start_position > 0][:3]  # 13 windows, some answered
  path = str(tmp_path / "train.tfrecord")
  squad_model.write_feature_file(train, path, is_training=True)
  keras.utils.set_random_seed(3)
  steps = 8
  task = squad_model.SquadTask(_config(), path, T, seed=1, length_multiple=1)
  config = trainer.TrainerConfig(output_dir=str(tmp_path / "run"), global_batch_size=6, num_train_steps=steps,
                                 steps_per_loop=steps, save_checkpoints_steps=100, log_steps=1)
  run = trainer.Trainer(task, STRATEGY, lambda: optimization.create_optimizer("adamw", 1e-2, steps, 1), config)
  result = run.train()
  losses = [h["loss"] for h in run.history]
  assert len(losses) == steps and all(np.isfinite(losses))
  assert np.mean(losses[-2:]) < 0.7 * losses[0]
  assert set(result.metrics) >= {"loss", "start_accuracy", "end_accuracy"}
  # The encoder is reachable in the checkpoint as classification's, for hand-off and init_encoder.
  reader = tf.train.load_checkpoint(str(tmp_path / "run" / "checkpoints"))
  assert any(name.startswith("encoder/") for name in reader.get_variable_to_shape_map())
  target = BertEncoder(_config())
  finetuning.init_encoder(target, str(tmp_path / "run"))
  for a, b in zip(target.weights, run.model.encoder.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
