"""The pretraining input pipeline: batching, sharding by file, determinism, and in-graph dynamic masking."""

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import records
from bert_tf.training import inputs

T, P = 11, 3  # odd sizes
PAD, CLS, SEP, MASK = 0, 1, 2, 3
VOCAB = 29


def write_records(directory, num_files=4, per_file=7, dynamic=False):
  """File f, record r: input_ids [CLS] (100*f + r + 10 repeated) [SEP], so every record is identifiable."""
  serializer = records.RecordSerializer(T, P, vocab_size=1000, dynamic_masking=dynamic)
  paths = []
  for f in range(num_files):
    path = str(directory / f"part-{f:02d}.tfrecord")
    writer = records.TFRecordFileWriter(path)
    for r in range(per_file):
      body = [100 * f + r + 10] * 5
      ids = [CLS] + body + [SEP]
      writer.write(serializer.serialize(ids, [0] * len(ids), [1, 3], [body[0], body[2]], r % 2))
    writer.close()
    paths.append(path)
  return paths


def _record_keys(batch):
  return [int(x) for x in batch["input_ids"][:, 1].numpy()]


def test_static_batches_have_the_feature_dict(tmp_path):
  write_records(tmp_path)
  d = inputs.pretraining_dataset(str(tmp_path / "part-*"), batch_size=5, max_seq_length=T,
                                 max_predictions_per_seq=P, seed=3)
  batch = next(iter(d))
  assert {k: (v.dtype, tuple(v.shape)) for k, v in batch.items()} == {
      "input_ids": (tf.int32, (5, T)), "input_mask": (tf.int32, (5, T)), "segment_ids": (tf.int32, (5, T)),
      "masked_lm_positions": (tf.int32, (5, P)), "masked_lm_ids": (tf.int32, (5, P)),
      "masked_lm_weights": (tf.float32, (5, P)), "next_sentence_labels": (tf.int32, (5, 1))}


def test_pipelines_read_disjoint_files_and_cover_all(tmp_path):
  write_records(tmp_path, num_files=4)
  seen = []
  for pipeline in range(2):
    context = tf.distribute.InputContext(num_input_pipelines=2, input_pipeline_id=pipeline,
                                         num_replicas_in_sync=2)
    d = inputs.pretraining_dataset(f"{tmp_path}/part-00*,{tmp_path}/part-01*,{tmp_path}/part-0[23]*", 4, T, P,
                                   input_context=context, is_training=False)
    keys = [k for b in d for k in _record_keys(b)]
    seen.append({k // 100 for k in keys})
    assert len(keys) == 2 * 7
  assert seen[0].isdisjoint(seen[1]) and seen[0] | seen[1] == {0, 1, 2, 3}


def test_fewer_files_than_pipelines_shards_records(tmp_path):
  write_records(tmp_path, num_files=1, per_file=8)
  keys = []
  for pipeline in range(2):
    context = tf.distribute.InputContext(2, pipeline, 2)
    d = inputs.pretraining_dataset(str(tmp_path / "*.tfrecord"), 4, T, P, input_context=context,
                                   is_training=False)
    keys.append([k for b in d for k in _record_keys(b)])
  assert sorted(keys[0] + keys[1]) == list(range(10, 18)) and not set(keys[0]) & set(keys[1])


def test_missing_files_name_the_pattern(tmp_path):
  with pytest.raises(FileNotFoundError, match="nothing"):
    inputs.pretraining_dataset(str(tmp_path / "nothing*"), 4, T, P)


def test_stream_is_a_function_of_the_seed_and_resumes_from_a_saved_iterator(tmp_path):
  write_records(tmp_path)
  make = lambda seed: inputs.pretraining_dataset(str(tmp_path / "part-*"), 3, T, P, seed=seed)
  first = [_record_keys(b) for b in make(7).take(12)]
  assert first == [_record_keys(b) for b in make(7).take(12)]
  assert first != [_record_keys(b) for b in make(8).take(12)]
  # Epochs follow one another without a gap (4 files x 7 = 28 records; 36 drawn).
  assert {k for b in first for k in b} <= {100 * f + r + 10 for f in range(4) for r in range(7)}

  it = iter(make(7))
  for _ in range(5):
    next(it)
  path = tf.train.Checkpoint(iterator=it).write(str(tmp_path / "ckpt" / "it"))
  resumed = iter(make(7))
  tf.train.Checkpoint(iterator=resumed).read(path).assert_consumed()
  assert [_record_keys(next(resumed)) for _ in range(7)] == first[5:]


def _masking(**rates):
  return inputs.MaskingConfig(vocab_size=VOCAB, mask_id=MASK, special_ids=(CLS, SEP, PAD), **rates)


def _rows(batch=13, seq=T, seed=0):
  """[CLS] tokens [SEP] pad: lengths vary per row; tokens in [4, VOCAB)."""
  rng = np.random.default_rng(seed)
  ids = np.zeros((batch, seq), np.int32)
  mask = np.zeros((batch, seq), np.int32)
  for b in range(batch):
    n = rng.integers(3, seq + 1)
    ids[b, :n] = np.concatenate([[CLS], rng.integers(4, VOCAB, n - 2), [SEP]])
    mask[b, :n] = 1
  return tf.constant(ids), tf.constant(mask)


def test_masking_rate_one_masks_every_non_special_token():
  ids, mask = _rows()
  out = inputs.mask_tokens(ids, mask, T, _masking(masked_lm_prob=1.0, mask_token_rate=1.0, random_token_rate=0.0),
                           seed=[1, 2])
  ids, mask = ids.numpy(), mask.numpy()
  maskable = (mask == 1) & (ids != CLS) & (ids != SEP)
  np.testing.assert_array_equal(out["input_ids"].numpy(), np.where(maskable, MASK, ids))
  for b in range(ids.shape[0]):
    n = maskable[b].sum()
    want = np.flatnonzero(maskable[b])
    np.testing.assert_array_equal(out["masked_lm_positions"][b, :n], want)
    np.testing.assert_array_equal(out["masked_lm_positions"][b, n:], 0)
    np.testing.assert_array_equal(out["masked_lm_ids"][b, :n], ids[b, want])
    np.testing.assert_array_equal(out["masked_lm_ids"][b, n:], 0)
    np.testing.assert_array_equal(out["masked_lm_weights"][b], [1.0] * n + [0.0] * (T - n))


def test_masking_keep_rate_leaves_ids_and_random_rate_draws_from_the_vocab():
  ids, mask = _rows()
  keep = inputs.mask_tokens(ids, mask, P, _masking(mask_token_rate=0.0, random_token_rate=0.0), seed=[3, 4])
  np.testing.assert_array_equal(keep["input_ids"], ids)
  np.testing.assert_array_equal(tf.gather(ids, keep["masked_lm_positions"], batch_dims=1).numpy()
                                * keep["masked_lm_weights"].numpy(), keep["masked_lm_ids"])
  rand = inputs.mask_tokens(ids, mask, P, _masking(mask_token_rate=0.0, random_token_rate=1.0), seed=[3, 4])
  # Same seed, same positions; only the replacement differs.
  np.testing.assert_array_equal(rand["masked_lm_positions"], keep["masked_lm_positions"])
  changed = rand["input_ids"].numpy() != ids.numpy()
  assert changed.any() and (rand["input_ids"].numpy() < VOCAB).all()


def test_masking_statistics_follow_the_reference_rule():
  ids, mask = _rows(batch=4000, seq=40, seed=1)
  out = inputs.mask_tokens(ids, mask, 6, _masking(), seed=[5, 6])
  ids, mask = ids.numpy(), mask.numpy()
  n_tokens = mask.sum(1)
  n_maskable = n_tokens - 2
  want = np.minimum(np.minimum(6, np.maximum(1, np.round(n_tokens * 0.15))), n_maskable)
  np.testing.assert_array_equal(out["masked_lm_weights"].numpy().sum(1), want)
  w = out["masked_lm_weights"].numpy() > 0
  pos = out["masked_lm_positions"].numpy()
  chosen = np.take_along_axis(ids, pos, 1)[w]
  assert not np.isin(chosen, [CLS, SEP, PAD]).any()
  new = np.take_along_axis(out["input_ids"].numpy(), pos, 1)[w]
  assert np.mean(new == MASK) == pytest.approx(0.8, abs=0.02)
  assert np.mean(new == chosen) == pytest.approx(0.1 + 0.1 / VOCAB, abs=0.02)
  # Positions are uniform over a row's maskable tokens: each is chosen with probability want / n_maskable.
  for position in (1, 2, 5):
    expected = np.sum((want / n_maskable)[n_maskable >= position])
    assert np.sum((pos == position) & w) == pytest.approx(expected, rel=0.1)
  # Unchosen tokens are untouched.
  untouched = np.ones_like(ids, bool)
  np.put_along_axis(untouched, pos, ~w, 1)
  np.testing.assert_array_equal(out["input_ids"].numpy()[untouched], ids[untouched])


def test_dynamic_masking_in_the_pipeline(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(VOCAB - 4)]) + "\n")
  masking = inputs.MaskingConfig.from_vocab_file(str(vocab))
  assert (masking.vocab_size, masking.mask_id, masking.special_ids) == (VOCAB, MASK, (CLS, SEP, PAD))
  write_records(tmp_path, num_files=2, dynamic=True)
  make = lambda: inputs.pretraining_dataset(str(tmp_path / "part-*"), 4, T, P, seed=1, masking=masking)
  batches = list(make().take(3))
  assert {k: tuple(v.shape) for k, v in batches[0].items()}["masked_lm_positions"] == (4, P)
  again = list(make().take(3))
  for a, b in zip(batches, again):
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  assert (batches[0]["masked_lm_weights"].numpy().sum(1) == 1).all()  # round(7 * 0.15) = 1
  bad = tmp_path / "bad_vocab.txt"
  bad.write_text("[PAD]\n[CLS]\n")
  with pytest.raises(ValueError, match=r"\[SEP\]"):
    inputs.MaskingConfig.from_vocab_file(str(bad))


# Whole-word masking. The vocabulary's ids [FIRST_PIECE, VOCAB) are "##" pieces; [4, FIRST_PIECE) start words.
FIRST_PIECE = 17
PIECES = tuple(range(FIRST_PIECE, VOCAB))


def _wwm_masking(**rates):
  return inputs.MaskingConfig(vocab_size=VOCAB, mask_id=MASK, special_ids=(CLS, SEP, PAD), whole_word_mask=True,
                              continuation_ids=PIECES, **rates)


def _pair_rows(batch, seq, seed):
  """[CLS] A [SEP] B [SEP] pad with random ids, so "##" pieces also follow [CLS] and [SEP]."""
  rng = np.random.default_rng(seed)
  ids = np.zeros((batch, seq), np.int32)
  mask = np.zeros((batch, seq), np.int32)
  for b in range(batch):
    n = rng.integers(5, seq + 1)
    a = rng.integers(1, n - 3)
    ids[b, :n] = np.concatenate([[CLS], rng.integers(4, VOCAB, a), [SEP], rng.integers(4, VOCAB, n - 3 - a),
                                 [SEP]])
    mask[b, :n] = 1
  return ids, mask


def _reference_words(ids, mask):
  """google-research's cand_indexes for one row: lists of positions."""
  words = []
  for i, token in enumerate(ids[mask == 1]):
    if token in (CLS, SEP):
      continue
    if words and token in PIECES:
      words[-1].append(i)
    else:
      words.append([i])
  return words


def _budget(mask, p, prob):
  return min(p, max(1, round(int(mask.sum()) * prob)))


@pytest.mark.parametrize("prob", [0.15, 0.5])
def test_whole_word_masking_takes_whole_words_that_fit_the_budget(prob):
  seq, p = 24, 7
  ids, mask = _pair_rows(batch=64, seq=seq, seed=2)
  for seed in range(8):
    out = {k: v.numpy() for k, v in inputs.mask_tokens(ids, mask, p, _wwm_masking(masked_lm_prob=prob),
                                                       seed=[seed, 9]).items()}
    for b in range(ids.shape[0]):
      n = int(out["masked_lm_weights"][b].sum())
      np.testing.assert_array_equal(out["masked_lm_weights"][b], [1.0] * n + [0.0] * (p - n))
      positions = out["masked_lm_positions"][b, :n]
      assert (np.diff(positions) > 0).all() and (out["masked_lm_positions"][b, n:] == 0).all()
      np.testing.assert_array_equal(out["masked_lm_ids"][b], np.pad(ids[b, positions], (0, p - n)))
      budget = _budget(mask[b], p, prob)
      assert n <= budget
      chosen = set(positions.tolist())
      words = _reference_words(ids[b], mask[b])
      assert chosen <= {i for word in words for i in word}  # never a special token or padding
      for word in words:
        assert set(word) <= chosen or not set(word) & chosen, (b, word, chosen)  # whole or not at all
        if len(word) > budget:
          assert not set(word) & chosen
        if not set(word) & chosen:
          # Skipped words did not fit what was left: the budget left only shrinks.
          assert len(word) > budget - n, (b, word, chosen)
      untouched = np.ones(seq, bool)
      untouched[positions] = False
      np.testing.assert_array_equal(out["input_ids"][b, untouched], ids[b, untouched])


def test_whole_word_masking_skips_a_word_over_the_budget_and_orders_words_uniformly():
  # [CLS] un ##able ##ly cat [SEP] dog [SEP] pad: words {1, 2, 3}, {4}, {6}.
  row = [CLS, 5, FIRST_PIECE, FIRST_PIECE + 1, 6, SEP, 7, SEP, PAD]
  ids = tf.constant([row] * 3000)
  mask = tf.constant([[1] * 8 + [0]] * 3000)
  two = inputs.mask_tokens(ids, mask, 2, _wwm_masking(masked_lm_prob=1.0), seed=[1, 1])
  np.testing.assert_array_equal(two["masked_lm_positions"], [[4, 6]] * 3000)
  three = inputs.mask_tokens(ids, mask, 3, _wwm_masking(masked_lm_prob=1.0), seed=[1, 1])
  positions = {tuple(r) for r in three["masked_lm_positions"].numpy().tolist()}
  assert positions == {(1, 2, 3), (4, 6, 0)}
  # The long word fits only when visited first: 1 time in 3.
  first = np.mean(three["masked_lm_positions"].numpy()[:, 0] == 1)
  assert first == pytest.approx(1 / 3, abs=0.03)


def test_whole_word_masking_rate_one_masks_every_candidate():
  ids, mask = _pair_rows(batch=32, seq=T, seed=3)
  out = inputs.mask_tokens(ids, mask, T, _wwm_masking(masked_lm_prob=1.0, mask_token_rate=1.0,
                                                      random_token_rate=0.0), seed=[4, 4])
  maskable = (mask == 1) & (ids != CLS) & (ids != SEP)
  np.testing.assert_array_equal(out["input_ids"], np.where(maskable, MASK, ids))
  np.testing.assert_array_equal(out["masked_lm_weights"].numpy().sum(1), maskable.sum(1))


def test_whole_word_masking_statistics_and_determinism():
  ids, mask = _pair_rows(batch=4000, seq=40, seed=1)
  out = inputs.mask_tokens(ids, mask, 6, _wwm_masking(), seed=[5, 6])
  w = out["masked_lm_weights"].numpy() > 0
  pos = out["masked_lm_positions"].numpy()
  chosen = np.take_along_axis(ids, pos, 1)[w]
  new = np.take_along_axis(out["input_ids"].numpy(), pos, 1)[w]
  assert np.mean(new == MASK) == pytest.approx(0.8, abs=0.02)
  assert np.mean(new == chosen) == pytest.approx(0.1 + 0.1 / VOCAB, abs=0.02)
  # Continuation pieces are chosen (with their words), not only single-piece words.
  assert np.isin(chosen, PIECES).mean() > 0.1

  again = inputs.mask_tokens(ids, mask, 6, _wwm_masking(), seed=[5, 6])
  other = inputs.mask_tokens(ids, mask, 6, _wwm_masking(), seed=[5, 7])
  for k in out:
    np.testing.assert_array_equal(out[k], again[k])
  assert (out["masked_lm_positions"].numpy() != other["masked_lm_positions"].numpy()).any()


def test_whole_word_masking_in_a_tf_function_of_unknown_length_and_empty_rows():
  ids, mask = _pair_rows(batch=5, seq=T, seed=4)
  ids[0], mask[0] = 0, 0  # nothing to mask
  ids[1, :3], mask[1, :3] = [CLS, SEP, SEP], 1
  spec = tf.TensorSpec([None, None], tf.int32)
  masking = _wwm_masking()
  graph = tf.function(lambda i, m: inputs.mask_tokens(i, m, P, masking, seed=[8, 8]), input_signature=[spec, spec])
  eager = inputs.mask_tokens(ids, mask, P, masking, seed=[8, 8])
  out = graph(tf.constant(ids), tf.constant(mask))
  for k in eager:
    np.testing.assert_array_equal(out[k], eager[k])
  np.testing.assert_array_equal(out["masked_lm_weights"].numpy()[:2], 0)
  np.testing.assert_array_equal(out["input_ids"].numpy()[:2], ids[:2])


def test_whole_word_masking_in_the_pipeline(tmp_path):
  vocab = tmp_path / "vocab.txt"
  words = [f"w{i}" for i in range(4, FIRST_PIECE)] + [f"##p{i}" for i in PIECES]
  vocab.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[MASK]"] + words) + "\n")
  masking = inputs.MaskingConfig.from_vocab_file(str(vocab), whole_word_mask=True)
  assert masking == _wwm_masking() and hash(masking) == hash(_wwm_masking())
  assert inputs.MaskingConfig.from_vocab_file(str(vocab)).continuation_ids == PIECES
  write_records(tmp_path, num_files=2, dynamic=True)
  make = lambda: inputs.pretraining_dataset(str(tmp_path / "part-*"), 4, T, P, seed=1, masking=masking)
  batches, again = list(make().take(3)), list(make().take(3))
  for a, b in zip(batches, again):
    for k in a:
      np.testing.assert_array_equal(a[k], b[k])
  assert (batches[0]["masked_lm_weights"].numpy().sum(1) == 1).all()  # round(7 * 0.15) = 1
  with pytest.raises(ValueError, match="continuation_ids"):
    inputs.MaskingConfig(vocab_size=VOCAB, mask_id=MASK, special_ids=(CLS,), continuation_ids=(VOCAB,))
