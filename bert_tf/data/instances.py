"""Pretraining instances: sentence pairs with next-sentence labels and masked-LM predictions.

This is google-research/bert's algorithm (`create_pretraining_data.py`), re-implemented on token ids. The order in
which it draws from its `random.Random` is part of the output format: with the same seed, vocabulary, input and
settings, `create_instances` makes the very instances the reference makes, in the same order. Every `rng` call
below therefore mirrors one of the reference's, and none may be added, removed or reordered.

Per document (a list of sentences, each a list of token ids):
  * a target length: max_seq_length - 3, or with probability short_seq_prob a random length in [2, that];
  * sentences are gathered into a chunk until it reaches the target; the chunk is split at a random sentence
    boundary into A and B; with probability 0.5 (always, for a one-sentence chunk) B is instead taken from a
    random other document and the unused sentences of the chunk are put back for the next chunk;
  * the pair is truncated to fit, one token at a time from the longer side, front or back at random;
  * `[CLS] A [SEP] B [SEP]` is masked: min(max_predictions_per_seq, max(1, round(len * masked_lm_prob)))
    positions (never [CLS]/[SEP]), 80% replaced by [MASK], 10% by a random vocabulary id, 10% kept (the
    shares are `mask_token_rate` and `random_token_rate`); with whole-word masking a word's `##` pieces are
    masked together.
"""

from __future__ import annotations

import dataclasses
import random
from itertools import chain
from typing import Callable, Mapping, Sequence

try:  # The compiled draws (setup.py builds them at `pip install`); optional, same output either way.
  from bert_tf.data import _draws as _compiled
except ImportError:  # Not compiled here: the pure-Python draws below are used.
  _compiled = None


class Draws:
  """The reference's random draws (`random`, `randint`, `shuffle` of a `random.Random`), with less overhead.

  Three ways to draw the same numbers, the fastest that was checked at import to reproduce this interpreter's
  `random.Random` exactly (`BACKEND`):
    * "compiled": `bert_tf.data._draws` (C) continues the generator's stream from `rng.getstate()`; the advanced
      state goes back into `rng` at `release()` (or at the end of a `with` block);
    * "inline": CPython's `shuffle` and `randint` are Python code calling `getrandbits` through two more Python
      functions; inlined here they cost about half as much;
    * "methods": the generator's own methods (any other `random.Random` subclass, or no match).
  Draw only through this object until it is released: `rng` does not advance before that.
  """

  def __init__(self, rng: random.Random, backend: str | None = None):
    self._rng = rng
    self._compiled = None
    if backend is None:
      backend = BACKEND if type(rng) is random.Random else "methods"
    if backend == "compiled":
      self._version, state, self._gauss_next = rng.getstate()
      self._compiled = _compiled.Draws(state)
      self.random, self.randint = self._compiled.random, self._compiled.randint
      self.shuffle, self.truncate_pair = self._compiled.shuffle, self._compiled.truncate_pair
    elif backend == "inline":
      self._bind_inline(rng)
    elif backend == "methods":
      self.random, self.randint, self.shuffle = rng.random, rng.randint, rng.shuffle
    else:
      raise ValueError(f"unknown draws backend {backend!r}")

  def release(self) -> None:
    """Hands the stream back to `rng`: after this, `rng` and this object continue it alike."""
    if self._compiled is not None:
      self._rng.setstate((self._version, self._compiled.state(), self._gauss_next))
      self._compiled = None
      self._bind_inline(self._rng)

  def __enter__(self) -> "Draws":
    return self

  def __exit__(self, *exc) -> None:
    self.release()

  def truncate_pair(self, len_a: int, len_b: int, max_num_tokens: int) -> tuple[int, int, int, int]:
    """google-research's `truncate_seq_pair` on lengths: trims the longer side one token at a time, from the
    front or the back at random, until the pair fits; returns (a_start, a_end, b_start, b_end)."""
    draw = self.random
    a_start, a_end, b_start, b_end = 0, len_a, 0, len_b
    while (a_end - a_start) + (b_end - b_start) > max_num_tokens:
      if (a_end - a_start) > (b_end - b_start):
        if draw() < 0.5:
          a_start += 1
        else:
          a_end -= 1
      else:
        if draw() < 0.5:
          b_start += 1
        else:
          b_end -= 1
    return a_start, a_end, b_start, b_end

  def _bind_inline(self, rng: random.Random) -> None:
    getrandbits = rng.getrandbits
    bits = _BIT_LENGTHS  # n -> n.bit_length(): a list index is cheaper than the method call.

    def randint(a: int, b: int) -> int:
      n = b - a + 1
      k = bits[n] if n < _TABLE_SIZE else n.bit_length()
      r = getrandbits(k)
      while r >= n:
        r = getrandbits(k)
      return a + r

    def shuffle(x: list) -> None:
      # CPython's Fisher-Yates: for i = len-1 .. 1, swap x[i] with x[r], r uniform in [0, i], drawn as
      # getrandbits(bit_length(i + 1)) until below i + 1.
      i = len(x)
      # Long lists (documents, instances) are shuffled rarely; the table is for candidate positions.
      while i >= _TABLE_SIZE:
        i -= 1
        k = (i + 1).bit_length()
        r = getrandbits(k)
        while r > i:
          r = getrandbits(k)
        x[i], x[r] = x[r], x[i]
      for k in bits[i:1:-1]:  # bit_length(i + 1) for each i below, highest first.
        i -= 1
        r = getrandbits(k)
        while r > i:
          r = getrandbits(k)
        x[i], x[r] = x[r], x[i]

    self.random, self.randint, self.shuffle = rng.random, randint, shuffle


_TABLE_SIZE = 1 << 12  # Covers every candidate list of a sequence (max_seq_length <= 4096).
_BIT_LENGTHS = [n.bit_length() for n in range(_TABLE_SIZE)]


def _backend_matches(backend: str) -> bool:
  """Whether `Draws(..., backend)` reproduces this Python's `random.Random` exactly, hand-back included."""
  try:
    for seed in (0, 1, "bert_tf-shard:12345:3"):
      ours, theirs = random.Random(seed), random.Random(seed)
      with Draws(ours, backend) as draws:
        for n in (0, 1, 2, 3, 7, 64, 129, 1000, _TABLE_SIZE - 1, _TABLE_SIZE, _TABLE_SIZE + 5):
          a, b = list(range(n)), list(range(n))
          draws.shuffle(a)
          theirs.shuffle(b)
          bounds = (*range(1, 300), 30521, (1 << 32) - 2)
          if a != b or [draws.randint(0, m) for m in bounds] != [theirs.randint(0, m) for m in bounds]:
            return False
          if draws.randint(5, 5) != theirs.randint(5, 5) or draws.random() != theirs.random():
            return False
      if [ours.random() for _ in range(700)] != [theirs.random() for _ in range(700)]:
        return False
  except Exception:  # A compiled module that misbehaves is not used.
    return False
  return True


BACKEND = next(b for b in ("compiled", "inline", "methods")
               if b == "methods" or ((b != "compiled" or _compiled is not None) and _backend_matches(b)))


# google-research's shares of the chosen positions: [MASK], then a random id; the rest keep their token.
DEFAULT_MASKING_RATES = (0.8, 0.1)


def check_masking_rates(mask_token_rate: float, random_token_rate: float) -> None:
  """Raises ValueError naming the flags unless both rates are in [0, 1] and their sum is at most 1. Shared by
  record creation, dynamic masking and the pretraining script."""
  for name, value in (("mask_token_rate", mask_token_rate), ("random_token_rate", random_token_rate)):
    if not 0.0 <= value <= 1.0:
      raise ValueError(f"--{name}={value}: must be in [0, 1]")
  if mask_token_rate + random_token_rate > 1.0:
    raise ValueError(f"--mask_token_rate={mask_token_rate} + --random_token_rate={random_token_rate} = "
                     f"{mask_token_rate + random_token_rate:g} exceeds 1: they are shares of the chosen "
                     "positions (the rest keep their token)")


@dataclasses.dataclass(frozen=True)
class InstanceConfig:
  """The settings of instance creation; flag names are google-research's."""

  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  masked_lm_prob: float = 0.15
  short_seq_prob: float = 0.1
  dupe_factor: int = 10  # Passes over the corpus, each with fresh pairings and masks.
  do_whole_word_mask: bool = False
  dynamic_masking: bool = False  # Write unmasked instances; the input pipeline masks them on the fly.
  # Shares of the chosen positions replaced by [MASK] and by a random id; the rest keep their token. The
  # defaults are google-research's (and make its very draws); the paper's Table 8 varies them.
  mask_token_rate: float = 0.8
  random_token_rate: float = 0.1

  def validate(self) -> None:
    """Raises ValueError naming the flag at fault and what to change."""
    if self.max_seq_length < 5:
      # [CLS] A [SEP] B [SEP] needs at least one token of A and one of B.
      raise ValueError(f"--max_seq_length={self.max_seq_length}: must be at least 5 "
                       "([CLS], [SEP], [SEP] and one token each of A and B)")
    if not self.dynamic_masking and self.max_predictions_per_seq < 1:
      raise ValueError(f"--max_predictions_per_seq={self.max_predictions_per_seq}: must be at least 1")
    if not self.dynamic_masking and not 0.0 < self.masked_lm_prob <= 1.0:
      raise ValueError(f"--masked_lm_prob={self.masked_lm_prob}: must be in (0, 1]")
    if not 0.0 <= self.short_seq_prob <= 1.0:
      raise ValueError(f"--short_seq_prob={self.short_seq_prob}: must be in [0, 1]")
    if self.dupe_factor < 1:
      raise ValueError(f"--dupe_factor={self.dupe_factor}: must be at least 1")
    check_masking_rates(self.mask_token_rate, self.random_token_rate)
    if self.dynamic_masking and (self.mask_token_rate, self.random_token_rate) != DEFAULT_MASKING_RATES:
      raise ValueError("--mask_token_rate / --random_token_rate choose how records are masked, and "
                       "--dynamic_masking writes them unmasked: pass the rates to run_pretraining.py "
                       "--dynamic_masking instead")

  @property
  def keep_share(self) -> float:
    """Of the chosen positions not replaced by [MASK], the share that keeps its token: the threshold of the
    reference's second draw. 0.5 for the default rates: rounded to 12 digits, as (1 - 0.8 - 0.1) / (1 - 0.8)
    is 0.49999999999999994 in floating point, and the default must draw exactly as the reference does."""
    if self.mask_token_rate >= 1.0:
      return 0.0  # never consulted: every first draw (< 1) picks [MASK]
    return round((1.0 - self.mask_token_rate - self.random_token_rate) / (1.0 - self.mask_token_rate), 12)


@dataclasses.dataclass(frozen=True)
class VocabIds:
  """What instance creation needs to know of the vocabulary."""

  size: int
  cls_id: int
  sep_id: int
  mask_id: int
  is_continuation: bytes  # [size]; 1 where the token starts with "##" (a word-piece continuation).

  @classmethod
  def from_vocab(cls, vocab: Mapping[str, int]) -> "VocabIds":
    is_continuation = bytearray(len(vocab))
    for token, index in vocab.items():
      if token.startswith("##"):
        is_continuation[index] = 1
    return cls(size=len(vocab), cls_id=vocab["[CLS]"], sep_id=vocab["[SEP]"], mask_id=vocab["[MASK]"],
               is_continuation=bytes(is_continuation))


@dataclasses.dataclass
class Instance:
  """One pretraining example before padding."""

  input_ids: list[int]  # [CLS] A [SEP] B [SEP], after masking.
  segment_ids: list[int]  # 0 for [CLS] A [SEP], 1 for B [SEP].
  masked_lm_positions: list[int]  # Sorted.
  masked_lm_ids: list[int]  # The original ids at those positions.
  is_random_next: bool
  # A one-sentence chunk cannot be split, so its B is random without a coin flip; this is why the reference's
  # output has somewhat more than 50% random B. Recorded so statistics can show both.
  forced_random_next: bool = False
  num_replaced_by_mask: int = 0  # How the masked positions were filled: [MASK], kept, random id.
  num_kept: int = 0
  num_random: int = 0


Document = Sequence[Sequence[int]]  # Sentences of token ids.


def create_instances(documents: Sequence[Document], config: InstanceConfig, vocab: VocabIds,
                     rng: random.Random | Draws, emit: Callable[[Instance], None]) -> None:
  """Makes every instance of `dupe_factor` passes over `documents`, in the reference's order, calling `emit`.

  `documents` must already be shuffled by the caller with the same `rng` (the reference shuffles them first);
  the caller also shuffles the emitted instances with `rng` afterwards.
  """
  if not isinstance(rng, Draws):
    with Draws(rng) as draws:
      create_instances(documents, config, vocab, draws, emit)
    return
  for _ in range(config.dupe_factor):
    for document_index in range(len(documents)):
      _create_instances_from_document(documents, document_index, config, vocab, rng, emit)


def create_instances_from_document(documents: Sequence[Document], document_index: int,
                                   config: InstanceConfig, vocab: VocabIds, rng: random.Random | Draws,
                                   emit: Callable[[Instance], None]) -> None:
  """The instances of one document (see the module docstring)."""
  if isinstance(rng, Draws):
    _create_instances_from_document(documents, document_index, config, vocab, rng, emit)
  else:
    with Draws(rng) as draws:
      _create_instances_from_document(documents, document_index, config, vocab, draws, emit)


def _create_instances_from_document(documents: Sequence[Document], document_index: int,
                                    config: InstanceConfig, vocab: VocabIds, rng: Draws,
                                    emit: Callable[[Instance], None]) -> None:
  document = documents[document_index]
  max_num_tokens = config.max_seq_length - 3  # Room for [CLS], [SEP], [SEP].
  # Mostly fill the sequence (padding is wasted compute) but sometimes train on short ones, which are what
  # fine-tuning sees.
  target_seq_length = max_num_tokens
  if rng.random() < config.short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)

  current_chunk: list[Sequence[int]] = []
  current_length = 0
  num_sentences = len(document)
  last_document = len(documents) - 1
  draw, randint = rng.random, rng.randint
  cls_id, sep_id = vocab.cls_id, vocab.sep_id
  i = 0
  while i < num_sentences:
    segment = document[i]
    current_chunk.append(segment)
    current_length += len(segment)
    if i == num_sentences - 1 or current_length >= target_seq_length:
      chunk_size = len(current_chunk)
      a_end = 1  # How many sentences of the chunk go into A.
      if chunk_size >= 2:
        a_end = randint(1, chunk_size - 1)
      tokens_a = list(chain.from_iterable(current_chunk[:a_end]))
      if chunk_size == 1 or draw() < 0.5:
        is_random_next = True
        target_b_length = target_seq_length - len(tokens_a)
        # Ten tries to avoid this document; with a one-document corpus the last draw stands.
        for _ in range(10):
          random_document_index = randint(0, last_document)
          if random_document_index != document_index:
            break
        random_document = documents[random_document_index]
        tokens_b: list[int] = []
        for j in range(randint(0, len(random_document) - 1), len(random_document)):
          tokens_b += random_document[j]
          if len(tokens_b) >= target_b_length:
            break
        # The chunk's sentences after A were not used: put them back for the next chunk.
        i -= chunk_size - a_end
      else:
        is_random_next = False
        tokens_b = list(chain.from_iterable(current_chunk[a_end:]))
      if len(tokens_a) + len(tokens_b) > max_num_tokens:
        a0, a1, b0, b1 = rng.truncate_pair(len(tokens_a), len(tokens_b), max_num_tokens)
        tokens_a, tokens_b = tokens_a[a0:a1], tokens_b[b0:b1]

      instance = Instance([cls_id, *tokens_a, sep_id, *tokens_b, sep_id],
                          [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1), [], [], is_random_next,
                          forced_random_next=chunk_size == 1)
      if not config.dynamic_masking:
        _mask_tokens(instance, config, vocab, rng)
      emit(instance)
      current_chunk = []
      current_length = 0
    i += 1


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int,
                      rng: random.Random | Draws) -> tuple[list[int], list[int]]:
  """Trims the longer side one token at a time, from the front or the back at random, until the pair fits.

  Works on [start, end) bounds instead of deleting from the list front, so a very long line costs O(n), not
  O(n^2); the draws are the reference's, one per removed token.
  """
  if isinstance(rng, Draws):
    a_start, a_end, b_start, b_end = rng.truncate_pair(len(tokens_a), len(tokens_b), max_num_tokens)
  else:
    with Draws(rng) as draws:
      a_start, a_end, b_start, b_end = draws.truncate_pair(len(tokens_a), len(tokens_b), max_num_tokens)
  return tokens_a[a_start:a_end], tokens_b[b_start:b_end]


def mask_tokens(instance: Instance, config: InstanceConfig, vocab: VocabIds,
                rng: random.Random | Draws) -> None:
  """Chooses and applies the masked-LM predictions of `instance` in place."""
  if isinstance(rng, Draws):
    _mask_tokens(instance, config, vocab, rng)
  else:
    with Draws(rng) as draws:
      _mask_tokens(instance, config, vocab, draws)


def _mask_tokens(instance: Instance, config: InstanceConfig, vocab: VocabIds, rng: Draws) -> None:
  tokens = instance.input_ids
  special = (vocab.cls_id, vocab.sep_id)
  num_to_predict = min(config.max_predictions_per_seq,
                       max(1, int(round(len(tokens) * config.masked_lm_prob))))

  if config.do_whole_word_mask:
    # A "##" piece joins the word before it, so a word is masked whole or not at all.
    cand_indexes: list[list[int]] = []
    for index, token in enumerate(tokens):
      if token in special:
        continue
      if cand_indexes and vocab.is_continuation[token]:
        cand_indexes[-1].append(index)
      else:
        cand_indexes.append([index])
    rng.shuffle(cand_indexes)
    chosen: list[int] = []
    covered: set[int] = set()
    for index_set in cand_indexes:
      if len(chosen) >= num_to_predict:
        break
      # A whole word that would overflow the budget is skipped; a shorter one later may still fit.
      if len(chosen) + len(index_set) > num_to_predict:
        continue
      if any(index in covered for index in index_set):
        continue
      covered.update(index_set)
      chosen.extend(index_set)
  else:
    # One candidate per position: the same draws as the whole-word loop with one-element words, which can
    # neither overflow the budget nor overlap.
    n = len(tokens)
    if tokens.count(vocab.cls_id) == 1 and tokens.count(vocab.sep_id) == 2:
      # Only the pair's own [CLS] A [SEP] B [SEP]: every position but 0, the first [SEP] and the last.
      first_sep = tokens.index(vocab.sep_id)
      candidates = [*range(1, first_sep), *range(first_sep + 1, n - 1)]
    else:  # Special tokens typed in the text (preserve_special_tokens) are never masked either.
      candidates = [index for index, token in enumerate(tokens) if token not in special]
    rng.shuffle(candidates)
    chosen = candidates[:num_to_predict]

  # The draws per chosen position, in the order chosen: 80% [MASK], else 50/50 kept or a random id (with the
  # default rates; other rates move the two thresholds, never the order or number of draws).
  output = list(tokens)
  draw, randint = rng.random, rng.randint
  mask_id, last_id = vocab.mask_id, vocab.size - 1
  mask_rate, keep_share = config.mask_token_rate, config.keep_share
  kept = random_ids = 0
  for index in chosen:
    if draw() < mask_rate:
      output[index] = mask_id
    elif draw() < keep_share:
      kept += 1
    else:
      output[index] = randint(0, last_id)
      random_ids += 1
  instance.num_replaced_by_mask += len(chosen) - kept - random_ids
  instance.num_kept += kept
  instance.num_random += random_ids
  chosen.sort()
  instance.masked_lm_positions = chosen
  instance.masked_lm_ids = [tokens[index] for index in chosen]
  instance.input_ids = output
