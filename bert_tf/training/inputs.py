"""The pretraining input pipeline over sharded TFRecords, and masking in-graph for dynamic-masking records.

Per input pipeline (one per worker; `tf.distribute.InputContext` says which):

  files (comma-separated globs, local or gs://) -> this pipeline's share of the files -> repeat -> shuffle
  files -> interleave records of `cycle_length` files -> shuffle records -> batch (per-replica batch,
  drop_remainder) -> parse (records.parse_pretraining_examples) -> [mask] -> prefetch

Everything random is seeded, and masking uses stateless ops keyed by (seed, batch number), so the stream is
a function of the seed alone and an iterator saved in a checkpoint resumes it exactly.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.data import records
from bert_tf.data.instances import check_masking_rates

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")
CONTINUATION_PREFIX = "##"  # WordPiece's mark of a piece that continues the word before it


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
  """What dynamic masking needs: the vocabulary's size and special ids, and google-research's rates."""

  vocab_size: int
  mask_id: int
  special_ids: tuple[int, ...]  # never masked: [CLS], [SEP], [PAD]
  masked_lm_prob: float = 0.15
  mask_token_rate: float = 0.8  # of the chosen positions, replaced by [MASK]
  random_token_rate: float = 0.1  # replaced by a uniformly random id; the rest keep their token
  whole_word_mask: bool = False  # google-research's --do_whole_word_mask: a word's pieces go together
  # The "##" pieces, which whole_word_mask joins to the word before them. A tuple keeps the config hashable;
  # left out of the repr, where a real vocabulary's thousands of ids would drown the rest.
  continuation_ids: tuple[int, ...] = dataclasses.field(default=(), repr=False)

  def __post_init__(self):
    check_masking_rates(self.mask_token_rate, self.random_token_rate)
    outside = [i for i in self.continuation_ids if not 0 <= i < self.vocab_size]
    if outside:
      raise ValueError(f"MaskingConfig: continuation_ids {outside[:5]} are outside the vocabulary "
                       f"[0, {self.vocab_size}); build it with MaskingConfig.from_vocab_file")

  @classmethod
  def from_vocab_file(cls, path: str, **options) -> "MaskingConfig":
    """Reads a WordPiece vocab (one token a line, id = line number) for its size, special ids and "##" pieces.

    Args:
      options: the other fields (rates, whole_word_mask).
    """
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"--vocab_file={path} does not exist")
    with tf.io.gfile.GFile(path, "r") as f:
      tokens = [line.rstrip("\n") for line in f]
    ids = {t: i for i, t in reversed(list(enumerate(tokens)))}
    missing = [t for t in SPECIAL_TOKENS if t not in ids]
    if missing:
      raise ValueError(f"--vocab_file={path}: lacks the special tokens {missing}; dynamic masking needs "
                       f"all of {SPECIAL_TOKENS}")
    # startswith, as google-research's create_pretraining_data.py tests it.
    continuation_ids = tuple(i for i, t in enumerate(tokens) if t.startswith(CONTINUATION_PREFIX))
    if options.get("whole_word_mask") and not continuation_ids:
      logging.warning("--vocab_file=%s has no %s pieces: whole-word masking masks single tokens", path,
                      CONTINUATION_PREFIX)
    return cls(vocab_size=len(tokens), mask_id=ids["[MASK]"], special_ids=(ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]),
               continuation_ids=continuation_ids, **options)


def mask_tokens(input_ids, input_mask, max_predictions_per_seq: int, masking: MaskingConfig, seed) -> dict:
  """google-research's masking rule on a batch, in-graph and stateless.

  Per row: a budget of n = min(P, max(1, round(num_tokens * masked_lm_prob))) positions among the real tokens
  other than the special ids (num_tokens counts [CLS] and [SEP], as the reference does). Without
  whole_word_mask, n of them are drawn uniformly (fewer if there are not that many). With it, the words (a
  piece and the "##" pieces after it) are visited in uniformly random order and each is taken whole if it
  fits what is left of the budget, else skipped. Each chosen position becomes [MASK] with probability
  mask_token_rate, a uniform random id with random_token_rate, else stays.

  Args:
    input_ids: int32 [B, T]; input_mask: int32 [B, T] (1 = real token). T may be unknown until run time.
    seed: int32 [2], the stateless seed; the same seed masks the same way.
  Returns: dict with input_ids int32 [B, T] (masked), masked_lm_positions int32 [B, P] (ascending; 0 in
    padding slots), masked_lm_ids int32 [B, P] (the original ids; 0 in padding slots), masked_lm_weights
    float32 [B, P] (1 for a prediction, 0 for padding).
  """
  p = max_predictions_per_seq
  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
  real = tf.cast(input_mask, tf.bool)
  candidate = real
  for special in masking.special_ids:
    candidate &= tf.not_equal(input_ids, special)
  num_to_predict = _num_to_predict(real, candidate, p, masking.masked_lm_prob)
  if masking.whole_word_mask:
    chosen = _choose_whole_words(input_ids, candidate, num_to_predict, masking, seeds[0])
    positions, valid = _ascending_positions(chosen, p)
  else:
    positions, valid = _choose_tokens(candidate, num_to_predict, p, seeds[0])
  return _replace(input_ids, positions, valid, masking, seeds[1], seeds[2])


def _num_to_predict(real, candidate, p: int, masked_lm_prob: float):
  """The budget per row: bool [B, T] x2 -> int32 [B]."""
  num_tokens = tf.reduce_sum(tf.cast(real, tf.float32), axis=1)  # the reference counts [CLS]/[SEP] too
  # tf.round rounds half to even, as Python 3's round() in the reference does.
  num_to_predict = tf.minimum(tf.cast(tf.maximum(1.0, tf.round(num_tokens * masked_lm_prob)), tf.int32), p)
  return tf.minimum(num_to_predict, tf.reduce_sum(tf.cast(candidate, tf.int32), axis=1))


def _choose_tokens(candidate, num_to_predict, p: int, seed):
  """A uniform random subset of each row's candidates: bool [B, T] -> positions int32 [B, P] (ascending, 0
  in padding slots), valid bool [B, P]."""
  # The candidates with the highest random scores.
  scores = tf.where(candidate, tf.random.stateless_uniform(tf.shape(candidate), seed), -1.0)
  _, chosen = tf.math.top_k(scores, k=p)  # [B, P], positions by decreasing score
  valid = tf.range(p)[None, :] < num_to_predict[:, None]  # [B, P]
  seq_len = tf.shape(candidate)[1]
  positions = tf.sort(tf.where(valid, chosen, seq_len), axis=1)  # chosen ones first, ascending
  valid = positions < seq_len
  return tf.where(valid, positions, 0), valid


def _choose_whole_words(input_ids, candidate, num_to_predict, masking: MaskingConfig, seed):
  """google-research's whole-word rule: int32 [B, T], bool [B, T], budget int32 [B] -> chosen bool [B, T].

  Words are visited in a uniformly random order; one is taken whole when it fits what is left of the budget,
  else skipped, and a shorter word later may still fit.
  """
  word, lengths = _words(input_ids, candidate, masking)  # [B, T] each
  num_words = tf.reduce_sum(tf.cast(lengths > 0, tf.int32), axis=1)  # words are numbered 0 .. num_words - 1
  slots = tf.range(tf.shape(lengths)[1])[None, :]
  # Random scores rank the words; the empty slots after a row's words come last.
  scores = tf.where(slots < num_words[:, None], tf.random.stateless_uniform(tf.shape(lengths), seed), -1.0)
  order = tf.argsort(scores, axis=1, direction="DESCENDING")  # [B, T]: word ids, in visiting order
  taken_in_order = _take_words_that_fit(tf.gather(lengths, order, batch_dims=1), num_to_predict)
  taken = tf.gather(taken_in_order, tf.argsort(order, axis=1), batch_dims=1)  # [B, T], by word id
  return candidate & tf.gather(taken, tf.maximum(word, 0), batch_dims=1)


def _words(input_ids, candidate, masking: MaskingConfig):
  """Splits each row's candidates into words: int32 [B, T], bool [B, T] -> word int32 [B, T] (the word id of
  each candidate, numbered from 0 in each row; meaningless elsewhere), lengths int32 [B, T] (pieces of word
  w at [b, w]; 0 beyond the row's words).

  As in the reference, a "##" piece joins the candidate before it even across a [SEP] between them, and only
  the row's first candidate starts a word whatever it is.
  """
  is_continuation = _continuation_table(masking)
  in_vocab = (input_ids >= 0) & (input_ids < masking.vocab_size)  # other ids start words rather than fail
  continues = candidate & in_vocab & tf.gather(is_continuation,
                                               tf.clip_by_value(input_ids, 0, masking.vocab_size - 1))
  candidates_before = tf.cumsum(tf.cast(candidate, tf.int32), axis=1, exclusive=True)
  starts = candidate & ~(continues & (candidates_before > 0))
  word = tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1  # [B, T]
  batch, seq_len = tf.shape(word)[0], tf.shape(word)[1]
  # One segment per (row, word slot), and a last one that collects the non-candidates and is dropped.
  segments = tf.where(candidate, word + seq_len * tf.range(batch)[:, None], batch * seq_len)
  lengths = tf.math.unsorted_segment_sum(tf.cast(candidate, tf.int32), segments, batch * seq_len + 1)
  return word, tf.reshape(lengths[:-1], [batch, seq_len])


def _continuation_table(masking: MaskingConfig):
  """bool [vocab_size]: True at the "##" pieces."""
  table = np.zeros([masking.vocab_size], bool)
  table[list(masking.continuation_ids)] = True
  return tf.constant(table)


def _take_words_that_fit(lengths, budget):
  """The reference's greedy pass: lengths int32 [B, K] of words in visiting order (0 = no word), budget
  int32 [B] -> taken bool [B, K]. A word is taken if it fits what is left of the budget, else skipped.

  Rather than visit the K words one by one, each iteration jumps to the next word that fits: the words
  jumped over did not fit and never will, as the budget left only shrinks. Every take spends at least 1, so
  this loops at most P + 1 times, not K.
  """
  slots = tf.range(tf.shape(lengths)[1])[None, :]

  def body(taken, last, left, more):
    fits = (lengths > 0) & (lengths <= left[:, None]) & (slots > last[:, None])
    found = tf.reduce_any(fits, axis=1)
    # The first slot that fits (min, not argmax: argmax picks among ties arbitrarily).
    first = tf.reduce_min(tf.where(fits, slots, tf.shape(lengths)[1]), axis=1)
    take = fits & tf.equal(slots, first[:, None])  # all False in rows where nothing fits
    left -= tf.reduce_sum(tf.where(take, lengths, 0), axis=1)
    return taken | take, tf.where(found, first, last), left, found

  start = (tf.zeros_like(lengths, tf.bool), -tf.ones_like(budget), budget, tf.ones_like(budget, tf.bool))
  taken, _, _, _ = tf.while_loop(lambda *state: tf.reduce_any(state[-1]), body, start)
  return taken


def _ascending_positions(chosen, p: int):
  """bool [B, T] with at most P True per row -> positions int32 [B, P] (ascending, 0 in padding slots),
  valid bool [B, P]."""
  seq_len = tf.shape(chosen)[1]
  # Distinct scores, highest at the first chosen position, so top_k lists the chosen in ascending order.
  scores = tf.where(chosen, seq_len - tf.range(seq_len)[None, :], 0)
  top, positions = tf.math.top_k(scores, k=p)
  valid = top > 0
  return tf.where(valid, positions, 0), valid


def _replace(input_ids, positions, valid, masking: MaskingConfig, draw_seed, random_id_seed) -> dict:
  """Replaces the chosen positions: [MASK] with probability mask_token_rate, a random id with
  random_token_rate, else kept (google-research's 80/10/10 by default): int32 [B, T], int32 [B, P], bool [B, P] -> the
  features of `mask_tokens`."""
  original = tf.where(valid, tf.gather(input_ids, positions, batch_dims=1), 0)
  draw = tf.random.stateless_uniform(tf.shape(positions), draw_seed)
  random_ids = tf.random.stateless_uniform(tf.shape(positions), random_id_seed, minval=0,
                                           maxval=masking.vocab_size, dtype=tf.int32)
  replacement = tf.where(draw < masking.mask_token_rate, masking.mask_id,
                         tf.where(draw < masking.mask_token_rate + masking.random_token_rate, random_ids,
                                  original))
  rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, None], tf.shape(positions))
  indices = tf.boolean_mask(tf.stack([rows, positions], axis=-1), valid)  # [N, 2]
  masked_ids = tf.tensor_scatter_nd_update(input_ids, indices, tf.boolean_mask(replacement, valid))
  return {"input_ids": masked_ids, "masked_lm_positions": positions, "masked_lm_ids": original,
          "masked_lm_weights": tf.cast(valid, tf.float32)}


def pretraining_dataset(input_file: str, batch_size: int, max_seq_length: int, max_predictions_per_seq: int,
                        input_context: tf.distribute.InputContext | None = None, is_training: bool = True,
                        seed: int = 12345, masking: MaskingConfig | None = None, cycle_length: int = 4,
                        shuffle_buffer: int = 1000, unmasked: bool = False) -> tf.data.Dataset:
  """Batches of pretraining features for one input pipeline.

  Args:
    input_file: comma-separated globs of TFRecord files (google-research's record format).
    batch_size: examples per batch of this pipeline - the per-replica batch under a strategy.
    input_context: from `strategy.distribute_datasets_from_function`; files are split among the pipelines
      (records are, when there are fewer files than pipelines).
    is_training: repeat and shuffle; else one pass in file order.
    masking: set for dynamic-masking records (which lack the masked_lm_* features); None reads static ones.
    unmasked: read dynamic-masking records as they are, unmasked (the left-to-right LM's input); not with
      `masking`.
  Returns: a dataset of dicts: input_ids, input_mask, segment_ids int32 [batch, T]; masked_lm_positions,
    masked_lm_ids int32 [batch, P]; masked_lm_weights float32 [batch, P] (not with `unmasked`);
    next_sentence_labels int32 [batch, 1].
  """
  files = fileio.expand_globs(input_file)
  if unmasked and masking is not None:
    raise ValueError("pretraining_dataset: `unmasked` reads records as they are; it takes no `masking`")
  dynamic = masking is not None
  if dynamic and max_predictions_per_seq > max_seq_length:
    raise ValueError(f"--max_predictions_per_seq={max_predictions_per_seq} exceeds "
                     f"--max_seq_length={max_seq_length}")
  shards, index = 1, 0
  if input_context is not None:
    shards, index = input_context.num_input_pipelines, input_context.input_pipeline_id
  shard_records = shards > 1 and len(files) < shards
  if shard_records:
    logging.warning("%d input files for %d input pipelines: every pipeline reads every file and keeps 1 record "
                    "in %d; write at least as many files as workers to read less", len(files), shards, shards)

  d = tf.data.Dataset.from_tensor_slices(files)
  if shards > 1 and not shard_records:
    d = d.shard(shards, index)
  if is_training:
    d = d.repeat().shuffle(len(files), seed=seed)
  d = d.interleave(tf.data.TFRecordDataset, cycle_length=min(cycle_length, len(files)),
                   num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if shard_records:
    d = d.shard(shards, index)
  if is_training:
    d = d.shuffle(shuffle_buffer, seed=seed + 1)
  d = d.batch(batch_size, drop_remainder=is_training)

  def parse(number, serialized):
    features = records.parse_pretraining_examples(serialized, max_seq_length, max_predictions_per_seq,
                                                  dynamic_masking=dynamic or unmasked)
    if dynamic:
      batch_seed = tf.stack([tf.constant(seed + 1000 * index, tf.int64), number])
      features.update(mask_tokens(features["input_ids"], features["input_mask"], max_predictions_per_seq,
                                  masking, batch_seed))
    return features

  d = d.enumerate().map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return d.prefetch(tf.data.AUTOTUNE)
