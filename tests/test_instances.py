"""Exact tests of the instance algorithm on a tiny vocabulary with scripted random draws."""

import random

import pytest

from bert_tf.data import instances as il

# A tiny odd-sized vocabulary: ids are positions.
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "un", "##able", "##ly", "dog",
          "ran", "far", "a"]
VOCAB = il.VocabIds.from_vocab({t: i for i, t in enumerate(TOKENS)})
CLS, SEP, MASK = 2, 3, 4


class Scripted(random.Random):
  """A Random whose random() returns a fixed value (so each 80/10/10 and 50/50 branch can be forced) and whose
  randint() returns its lower bound; shuffle() is left as Random's, seeded."""

  def __init__(self, value: float):
    super().__init__(0)
    self.value = value

  def random(self):
    return self.value

  def getrandbits(self, k):
    # Defining getrandbits makes shuffle() draw bits from the seeded generator rather than from random().
    return super().getrandbits(k)

  def randint(self, a, b):
    return a


def collect(documents, config, rng):
  out = []
  il.create_instances(documents, config, VOCAB, rng, out.append)
  return out


def test_vocab_ids_marks_continuations():
  assert VOCAB.size == 15 and (VOCAB.cls_id, VOCAB.sep_id, VOCAB.mask_id) == (2, 3, 4)
  assert [i for i in range(VOCAB.size) if VOCAB.is_continuation[i]] == [9, 10]


def test_every_candidate_masked_with_mask_token_when_draws_are_below_0_8():
  instance = il.Instance([CLS, 5, 6, SEP, 7, 11, SEP], [0, 0, 0, 0, 1, 1, 1], [], [], False)
  config = il.InstanceConfig(max_seq_length=7, max_predictions_per_seq=7, masked_lm_prob=1.0)
  il.mask_tokens(instance, config, VOCAB, Scripted(0.0))
  assert instance.masked_lm_positions == [1, 2, 4, 5]  # Never [CLS] or [SEP]; sorted.
  assert instance.masked_lm_ids == [5, 6, 7, 11]
  assert instance.input_ids == [CLS, MASK, MASK, SEP, MASK, MASK, SEP]
  assert (instance.num_replaced_by_mask, instance.num_kept, instance.num_random) == (4, 0, 0)


def test_draws_between_0_8_and_1_take_random_vocabulary_ids():
  instance = il.Instance([CLS, 5, 6, SEP, 7, SEP], [0, 0, 0, 0, 1, 1], [], [], False)
  config = il.InstanceConfig(max_seq_length=6, max_predictions_per_seq=5, masked_lm_prob=1.0)
  il.mask_tokens(instance, config, VOCAB, Scripted(0.9))  # 0.9 >= 0.8, then 0.9 >= 0.5: random id.
  # Scripted.randint returns its lower bound, id 0.
  assert instance.input_ids == [CLS, 0, 0, SEP, 0, SEP]
  assert instance.masked_lm_ids == [5, 6, 7]
  assert instance.num_random == 3


def test_draws_between_0_5_and_0_8_keep_the_original():
  instance = il.Instance([CLS, 5, 6, SEP, 7, SEP], [0, 0, 0, 0, 1, 1], [], [], False)
  config = il.InstanceConfig(max_seq_length=6, max_predictions_per_seq=5, masked_lm_prob=1.0)
  # First draw 0.85 >= 0.8 is not [MASK]; a constant random() cannot make the second draw < 0.5, so script it.
  draws = iter([0.85, 0.1] * 3)
  rng = Scripted(0)
  rng.random = lambda: next(draws)
  il.mask_tokens(instance, config, VOCAB, rng)
  assert instance.input_ids == [CLS, 5, 6, SEP, 7, SEP]
  assert instance.masked_lm_positions == [1, 2, 4] and instance.num_kept == 3


@pytest.mark.parametrize("mask_rate,random_rate", [(1.0, 0.0), (0.8, 0.0), (0.0, 0.0), (0.0, 1.0)])
def test_masking_rates_move_the_thresholds_of_the_same_draws(mask_rate, random_rate):
  """The paper's Table 8: each chosen position is [MASK] with mask_token_rate, a random id with
  random_token_rate, else kept; the draws per position stay the reference's (one, and a second when not [MASK])."""
  config = il.InstanceConfig(max_seq_length=64, max_predictions_per_seq=64, masked_lm_prob=1.0,
                             mask_token_rate=mask_rate, random_token_rate=random_rate)
  tokens = [CLS] + [5 + i % 10 for i in range(61)] + [SEP, SEP]
  counts = [0, 0, 0]
  for seed in range(20):
    instance = il.Instance(list(tokens), [0] * 64, [], [], False)
    il.mask_tokens(instance, config, VOCAB, random.Random(seed))
    new = [instance.input_ids[p] for p in instance.masked_lm_positions]
    assert len(new) == 61
    if random_rate == 0.0:  # (a random id may be [MASK] or the original: the tokens tell only without them)
      masked = sum(t == MASK for t in new)
      assert (instance.num_replaced_by_mask, instance.num_kept) == (masked, len(new) - masked)
      assert all(t in (MASK, o) for t, o in zip(new, instance.masked_lm_ids))
    counts = [counts[0] + instance.num_replaced_by_mask, counts[1] + instance.num_kept,
              counts[2] + instance.num_random]
  total = 20 * 61
  if mask_rate == 1.0:
    assert counts == [total, 0, 0]  # every chosen position is [MASK]
  elif (mask_rate, random_rate) == (0.8, 0.0):
    assert counts[2] == 0 and 0.76 < counts[0] / total < 0.84  # [MASK] or the original, never a random id
  elif random_rate == 1.0:
    assert counts[0] == 0 and counts[2] == total
  else:
    assert counts == [0, total, 0]


def test_default_rates_make_the_references_second_threshold_exactly():
  # (1 - 0.8 - 0.1) / (1 - 0.8) is 0.49999999999999994 in floating point; the reference compares with 0.5.
  assert (1 - 0.8 - 0.1) / (1 - 0.8) != 0.5
  assert il.InstanceConfig().keep_share == 0.5
  instance = il.Instance([CLS, 5, 6, SEP, 7, SEP], [0, 0, 0, 0, 1, 1], [], [], False)
  draws = iter([0.85, 0.49999999999999994] * 3)  # below 0.5: kept, as in the reference
  rng = Scripted(0)
  rng.random = lambda: next(draws)
  il.mask_tokens(instance, il.InstanceConfig(max_seq_length=6, max_predictions_per_seq=5, masked_lm_prob=1.0),
                 VOCAB, rng)
  assert instance.num_kept == 3


@pytest.mark.parametrize("length,prob,cap,expected", [
    (7, 0.15, 20, 1),  # round(1.05) = 1
    (7, 0.01, 20, 1),  # never fewer than one
    (13, 0.5, 20, 6),  # round(6.5) = 6: Python rounds half to even, as the reference does
    (128, 0.15, 20, 19),
    (128, 0.5, 20, 20),  # capped by max_predictions_per_seq
])
def test_masking_budget(length, prob, cap, expected):
  tokens = [CLS] + [5] * (length - 2) + [SEP]
  instance = il.Instance(tokens, [0] * length, [], [], False)
  il.mask_tokens(instance, il.InstanceConfig(max_seq_length=length, max_predictions_per_seq=cap,
                                             masked_lm_prob=prob), VOCAB, random.Random(3))
  assert len(instance.masked_lm_positions) == expected


def test_whole_word_masking_masks_pieces_together_and_skips_words_over_budget():
  # [CLS] un ##able ##ly cat [SEP] dog [SEP]: words {1,2,3}, {4}, {6}.
  tokens = [CLS, 8, 9, 10, 6, SEP, 11, SEP]
  config = il.InstanceConfig(max_seq_length=8, max_predictions_per_seq=2, masked_lm_prob=1.0,
                             do_whole_word_mask=True)
  for seed in range(20):
    instance = il.Instance(list(tokens), [0] * 8, [], [], False)
    il.mask_tokens(instance, config, VOCAB, random.Random(seed) if seed else Scripted(0.0))
    positions = instance.masked_lm_positions
    # The three-piece word never fits a budget of 2, so only the single-piece words can be masked.
    assert positions == [4, 6]
  config3 = il.InstanceConfig(max_seq_length=8, max_predictions_per_seq=3, masked_lm_prob=1.0,
                              do_whole_word_mask=True)
  for seed in range(20):
    instance = il.Instance(list(tokens), [0] * 8, [], [], False)
    il.mask_tokens(instance, config3, VOCAB, random.Random(seed))
    positions = set(instance.masked_lm_positions)
    assert {1, 2, 3} <= positions or not positions & {1, 2, 3}  # Whole or nothing.


def test_truncation_trims_the_longer_side_front_or_back():
  a, b = list(range(10, 20)), [30, 31]
  ta, tb = il.truncate_seq_pair(a, b, 6, Scripted(0.0))  # < 0.5: always from the front
  assert (ta, tb) == ([16, 17, 18, 19], [30, 31])
  ta, tb = il.truncate_seq_pair(a, b, 6, Scripted(0.9))  # from the back
  assert (ta, tb) == ([10, 11, 12, 13], [30, 31])
  ta, tb = il.truncate_seq_pair([1, 2, 3], [4, 5, 6], 4, Scripted(0.9))  # equal: B is trimmed first
  assert (ta, tb) == ([1, 2], [4, 5])


def test_truncation_of_a_very_long_line_is_linear():
  ta, tb = il.truncate_seq_pair(list(range(300_000)), [1], 125, random.Random(0))
  assert len(ta) + len(tb) == 125 and tb == [1]


def test_actual_next_pair_layout_and_segments():
  # Two documents; short_seq_prob 0 and draws of 0.9 mean: full target, B really follows A.
  documents = [[[5, 6], [7], [11, 12]], [[13, 14]]]
  config = il.InstanceConfig(max_seq_length=16, max_predictions_per_seq=1, short_seq_prob=0.0,
                             dupe_factor=1, dynamic_masking=True)
  out = []
  il.create_instances_from_document(documents, 0, config, VOCAB, Scripted(0.9), out.append)
  assert len(out) == 1
  (instance,) = out
  # a_end = randint(1, 2) = 1 (Scripted's lower bound): A = [5, 6], B = [7] + [11, 12].
  assert instance.input_ids == [CLS, 5, 6, SEP, 7, 11, 12, SEP]
  assert instance.segment_ids == [0, 0, 0, 0, 1, 1, 1, 1]
  assert not instance.is_random_next and instance.masked_lm_positions == []


def test_random_next_takes_another_document_and_puts_unused_sentences_back():
  documents = [[[13, 14]], [[5, 6], [7], [11, 12]]]
  config = il.InstanceConfig(max_seq_length=16, short_seq_prob=0.0, dupe_factor=1, dynamic_masking=True)
  out = []
  # Draws of 0.0 choose "random next" each time; randint's lower bound makes A one sentence and picks
  # document 0, the only other one.
  il.create_instances_from_document(documents, 1, config, VOCAB, Scripted(0.0), out.append)
  # The chunk's unused sentences [7] and [11, 12] are put back, so each later starts a pair of its own.
  assert [i.input_ids for i in out] == [
      [CLS, 5, 6, SEP, 13, 14, SEP],
      [CLS, 7, SEP, 13, 14, SEP],
      [CLS, 11, 12, SEP, 13, 14, SEP],
  ]
  assert [i.is_random_next for i in out] == [True, True, True]
  assert [i.forced_random_next for i in out] == [False, False, True]  # The last chunk has one sentence.


def test_one_sentence_document_is_always_random_next():
  documents = [[[5, 6, 7]], [[11, 12]]]
  config = il.InstanceConfig(max_seq_length=16, short_seq_prob=0.0, dupe_factor=1, dynamic_masking=True)
  out = collect(documents, config, random.Random(1))
  assert len(out) == 2 and all(i.is_random_next and i.forced_random_next for i in out)


def test_single_document_corpus_does_not_crash():
  documents = [[[5]]]
  config = il.InstanceConfig(max_seq_length=5, max_predictions_per_seq=1, dupe_factor=3)
  out = collect(documents, config, random.Random(1))
  assert [i.input_ids[0] for i in out] == [CLS] * 3
  assert all(len(i.input_ids) == 5 and i.input_ids[2] in (SEP, MASK) for i in out)


@pytest.mark.parametrize("kwargs,flag", [
    (dict(max_seq_length=4), "--max_seq_length"),
    (dict(max_predictions_per_seq=0), "--max_predictions_per_seq"),
    (dict(masked_lm_prob=0.0), "--masked_lm_prob"),
    (dict(masked_lm_prob=1.5), "--masked_lm_prob"),
    (dict(dupe_factor=0), "--dupe_factor"),
    (dict(short_seq_prob=-0.1), "--short_seq_prob"),
    (dict(mask_token_rate=1.5), "--mask_token_rate=1.5: must be in \\[0, 1\\]"),
    (dict(random_token_rate=-0.5), "--random_token_rate=-0.5: must be in \\[0, 1\\]"),
    (dict(mask_token_rate=0.9, random_token_rate=0.2), "--mask_token_rate=0.9 \\+ --random_token_rate=0.2 = 1.1 "
                                                        "exceeds 1"),
    (dict(dynamic_masking=True, mask_token_rate=1.0, random_token_rate=0.0), "run_pretraining.py --dynamic_masking"),
])
def test_config_validation_names_the_flag(kwargs, flag):
  with pytest.raises(ValueError, match=flag):
    il.InstanceConfig(**kwargs).validate()


# -- The three ways of drawing (compiled C, inline Python, the generator's methods) -----------------------------

BACKENDS = ["inline", "methods"] + (["compiled"] if il._compiled is not None else [])


def test_compiled_draws_are_built_and_chosen():
  # `pip install -e .` compiles bert_tf/data/_draws.c (setup.py); this suite runs on such an install.
  assert il._compiled is not None, "bert_tf.data._draws is not compiled: run pip install -e ."
  assert il.BACKEND == "compiled"


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_backend_continues_the_generator_stream(backend):
  ours, theirs = random.Random("odd seed"), random.Random("odd seed")
  with il.Draws(ours, backend) as draws:
    for n in (0, 1, 2, 5, 127, 4099):
      a, b = list(range(n)), list(range(n))
      draws.shuffle(a)
      theirs.shuffle(b)
      assert a == b
    bounds = [(0, 0), (2, 125), (0, 30521), (-7, 7), (0, (1 << 32) - 2)]
    assert [draws.randint(*ab) for ab in bounds] == [theirs.randint(*ab) for ab in bounds]
    assert [draws.random() for _ in range(11)] == [theirs.random() for _ in range(11)]
    # truncate_pair draws one random() per removed token: 10 + 4 - 5 = 9 of them.
    bounds = draws.truncate_pair(10, 4, 5)
    assert bounds[1] - bounds[0] + bounds[3] - bounds[2] == 5
    for _ in range(9):
      theirs.random()
  # Released: the generator itself goes on from where the draws stopped.
  assert [ours.random() for _ in range(700)] == [theirs.random() for _ in range(700)]


@pytest.mark.parametrize("whole_word", [False, True])
def test_every_backend_makes_the_same_instances(monkeypatch, whole_word):
  rng = random.Random(3)
  documents = [[[rng.randint(5, 14) for _ in range(rng.randint(1, 9))] for _ in range(rng.randint(1, 7))]
               for _ in range(13)]
  config = il.InstanceConfig(max_seq_length=17, max_predictions_per_seq=4, dupe_factor=3, short_seq_prob=0.3,
                             do_whole_word_mask=whole_word)
  made = {}
  for backend in BACKENDS:
    monkeypatch.setattr(il, "BACKEND", backend)
    seeded = random.Random(11)
    made[backend] = (collect(documents, config, seeded), seeded.random())
  expected = made.pop("methods")
  assert len(expected[0]) > 40
  for backend, got in made.items():
    assert got == expected, backend


@pytest.mark.skipif(il._compiled is None, reason="bert_tf.data._draws not compiled")
def test_compiled_draws_reject_bad_arguments():
  draws = il._compiled.Draws(random.Random(0).getstate()[1])
  with pytest.raises(ValueError, match="empty range"):
    draws.randint(3, 2)
  with pytest.raises(OverflowError):
    draws.randint(0, 1 << 32)
  with pytest.raises(TypeError):
    draws.shuffle((1, 2))
  with pytest.raises(ValueError, match="625"):
    il._compiled.Draws((1, 2, 3))
