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
    positions (never [CLS]/[SEP]), 80% replaced by [MASK], 10% by a random vocabulary id, 10% kept; with
    whole-word masking a word's `##` pieces are masked together.
"""

from __future__ import annotations

import dataclasses
import random
from typing import Callable, Mapping, Sequence


class Draws:
  """The reference's random draws (`random`, `randint`, `shuffle` of a `random.Random`), with less overhead.

  CPython's `shuffle` and `randint` are Python code that calls `getrandbits` through two more Python
  functions; inlined here they cost about half as much, and they are about a third of the work per instance.
  The inlined versions are used only for a plain `random.Random` whose own methods they were checked to
  reproduce at import (`_INLINE_DRAWS_MATCH`); otherwise the methods themselves are called.
  """

  def __init__(self, rng: random.Random, inline: bool | None = None):
    self.random = rng.random
    if inline is None:
      inline = type(rng) is random.Random and _INLINE_DRAWS_MATCH
    if not inline:
      self.randint, self.shuffle = rng.randint, rng.shuffle
      return
    getrandbits = rng.getrandbits

    def randint(a: int, b: int) -> int:
      n = b - a + 1
      k = n.bit_length()
      r = getrandbits(k)
      while r >= n:
        r = getrandbits(k)
      return a + r

    def shuffle(x: list) -> None:
      for i in range(len(x) - 1, 0, -1):
        n = i + 1
        k = n.bit_length()
        r = getrandbits(k)
        while r >= n:
          r = getrandbits(k)
        x[i], x[r] = x[r], x[i]

    self.randint, self.shuffle = randint, shuffle


def _inline_draws_match() -> bool:
  """Whether `Draws` reproduces this Python's `random.Random` exactly (checked once, at import)."""
  for seed in range(3):
    draws, theirs = Draws(random.Random(seed), inline=True), random.Random(seed)
    for n in (1, 2, 3, 7, 64, 129, 1000):
      a, b = list(range(n)), list(range(n))
      draws.shuffle(a)
      theirs.shuffle(b)
      if a != b or [draws.randint(0, m) for m in range(1, 300)] != [theirs.randint(0, m) for m in range(1, 300)]:
        return False
      if draws.randint(5, 5) != theirs.randint(5, 5) or draws.random() != theirs.random():
        return False
  return True


_INLINE_DRAWS_MATCH = _inline_draws_match()


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
                     rng: random.Random, emit: Callable[[Instance], None]) -> None:
  """Makes every instance of `dupe_factor` passes over `documents`, in the reference's order, calling `emit`.

  `documents` must already be shuffled by the caller with the same `rng` (the reference shuffles them first);
  the caller also shuffles the emitted instances with `rng` afterwards.
  """
  draws = Draws(rng)
  for _ in range(config.dupe_factor):
    for document_index in range(len(documents)):
      create_instances_from_document(documents, document_index, config, vocab, draws, emit)


def create_instances_from_document(documents: Sequence[Document], document_index: int,
                                   config: InstanceConfig, vocab: VocabIds, rng: random.Random | Draws,
                                   emit: Callable[[Instance], None]) -> None:
  """The instances of one document (see the module docstring)."""
  if not isinstance(rng, Draws):
    rng = Draws(rng)
  document = documents[document_index]
  max_num_tokens = config.max_seq_length - 3  # Room for [CLS], [SEP], [SEP].
  # Mostly fill the sequence (padding is wasted compute) but sometimes train on short ones, which are what
  # fine-tuning sees.
  target_seq_length = max_num_tokens
  if rng.random() < config.short_seq_prob:
    target_seq_length = rng.randint(2, max_num_tokens)

  current_chunk: list[Sequence[int]] = []
  current_length = 0
  i = 0
  while i < len(document):
    segment = document[i]
    current_chunk.append(segment)
    current_length += len(segment)
    if i == len(document) - 1 or current_length >= target_seq_length:
      if current_chunk:
        a_end = 1  # How many sentences of the chunk go into A.
        if len(current_chunk) >= 2:
          a_end = rng.randint(1, len(current_chunk) - 1)
        tokens_a = [t for sentence in current_chunk[:a_end] for t in sentence]
        tokens_b: list[int] = []
        if len(current_chunk) == 1 or rng.random() < 0.5:
          is_random_next = True
          target_b_length = target_seq_length - len(tokens_a)
          # Ten tries to avoid this document; with a one-document corpus the last draw stands.
          for _ in range(10):
            random_document_index = rng.randint(0, len(documents) - 1)
            if random_document_index != document_index:
              break
          random_document = documents[random_document_index]
          random_start = rng.randint(0, len(random_document) - 1)
          for j in range(random_start, len(random_document)):
            tokens_b.extend(random_document[j])
            if len(tokens_b) >= target_b_length:
              break
          # The chunk's sentences after A were not used: put them back for the next chunk.
          i -= len(current_chunk) - a_end
        else:
          is_random_next = False
          for sentence in current_chunk[a_end:]:
            tokens_b.extend(sentence)
        tokens_a, tokens_b = truncate_seq_pair(tokens_a, tokens_b, max_num_tokens, rng)

        input_ids = [vocab.cls_id, *tokens_a, vocab.sep_id, *tokens_b, vocab.sep_id]
        segment_ids = [0] * (len(tokens_a) + 2) + [1] * (len(tokens_b) + 1)
        instance = Instance(input_ids, segment_ids, [], [], is_random_next,
                            forced_random_next=len(current_chunk) == 1)
        if not config.dynamic_masking:
          mask_tokens(instance, config, vocab, rng)
        emit(instance)
      current_chunk = []
      current_length = 0
    i += 1


def truncate_seq_pair(tokens_a: list[int], tokens_b: list[int], max_num_tokens: int,
                      rng: random.Random | Draws) -> tuple[list[int], list[int]]:
  """Trims the longer side one token at a time, from the front or the back at random, until the pair fits.

  Keeps [start, end) bounds instead of deleting from the list front, so a very long line costs O(n), not
  O(n^2); the draws are the reference's, one per removed token.
  """
  a_start, a_end, b_start, b_end = 0, len(tokens_a), 0, len(tokens_b)
  while (a_end - a_start) + (b_end - b_start) > max_num_tokens:
    if (a_end - a_start) > (b_end - b_start):
      if rng.random() < 0.5:
        a_start += 1
      else:
        a_end -= 1
    else:
      if rng.random() < 0.5:
        b_start += 1
      else:
        b_end -= 1
  return tokens_a[a_start:a_end], tokens_b[b_start:b_end]


def mask_tokens(instance: Instance, config: InstanceConfig, vocab: VocabIds,
                rng: random.Random | Draws) -> None:
  """Chooses and applies the masked-LM predictions of `instance` in place."""
  if not isinstance(rng, Draws):
    rng = Draws(rng)
  tokens = instance.input_ids
  special = (vocab.cls_id, vocab.sep_id)
  output = list(tokens)
  num_to_predict = min(config.max_predictions_per_seq,
                       max(1, int(round(len(tokens) * config.masked_lm_prob))))
  masked: list[int] = []

  def mask(index: int) -> None:
    if rng.random() < 0.8:
      output[index] = vocab.mask_id
      instance.num_replaced_by_mask += 1
    elif rng.random() < 0.5:
      instance.num_kept += 1
    else:
      output[index] = rng.randint(0, vocab.size - 1)
      instance.num_random += 1
    masked.append(index)

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
    covered: set[int] = set()
    for index_set in cand_indexes:
      if len(masked) >= num_to_predict:
        break
      # A whole word that would overflow the budget is skipped; a shorter one later may still fit.
      if len(masked) + len(index_set) > num_to_predict:
        continue
      if any(index in covered for index in index_set):
        continue
      for index in index_set:
        covered.add(index)
        mask(index)
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
    for index in candidates[:num_to_predict]:
      mask(index)
  masked.sort()
  instance.masked_lm_positions = masked
  instance.masked_lm_ids = [tokens[index] for index in masked]
  instance.input_ids = output
