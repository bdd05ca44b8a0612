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

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.data import records

SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]")


@dataclasses.dataclass(frozen=True)
class MaskingConfig:
  """What dynamic masking needs: the vocabulary's size and special ids, and google-research's rates."""

  vocab_size: int
  mask_id: int
  special_ids: tuple[int, ...]  # never masked: [CLS], [SEP], [PAD]
  masked_lm_prob: float = 0.15
  mask_token_rate: float = 0.8  # of the chosen positions, replaced by [MASK]
  random_token_rate: float = 0.1  # replaced by a uniformly random id; the rest keep their token

  @classmethod
  def from_vocab_file(cls, path: str, **rates) -> "MaskingConfig":
    """Reads a WordPiece vocab (one token a line, id = line number) for its size and special ids."""
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"--vocab_file={path} does not exist")
    with tf.io.gfile.GFile(path, "r") as f:
      tokens = [line.rstrip("\n") for line in f]
    ids = {t: i for i, t in reversed(list(enumerate(tokens)))}
    missing = [t for t in SPECIAL_TOKENS if t not in ids]
    if missing:
      raise ValueError(f"--vocab_file={path}: lacks the special tokens {missing}; dynamic masking needs "
                       f"all of {SPECIAL_TOKENS}")
    return cls(vocab_size=len(tokens), mask_id=ids["[MASK]"],
               special_ids=(ids["[CLS]"], ids["[SEP]"], ids["[PAD]"]), **rates)


def mask_tokens(input_ids, input_mask, max_predictions_per_seq: int, masking: MaskingConfig, seed) -> dict:
  """google-research's masking rule on a batch, in-graph and stateless.

  Per row: n = min(P, max(1, round(num_tokens * masked_lm_prob))) positions, drawn uniformly from the real
  tokens other than the special ids (fewer if there are not that many), in ascending order; each becomes
  [MASK] with probability mask_token_rate, a uniform random id with random_token_rate, else stays.

  Args:
    input_ids: int32 [B, T]; input_mask: int32 [B, T] (1 = real token).
    seed: int32 [2], the stateless seed; the same seed masks the same way.
  Returns: dict with input_ids int32 [B, T] (masked), masked_lm_positions int32 [B, P], masked_lm_ids
    int32 [B, P] (the original ids; 0 in padding slots), masked_lm_weights float32 [B, P].
  """
  p = max_predictions_per_seq
  seeds = tf.random.experimental.stateless_split(tf.cast(seed, tf.int64), num=4)
  real = tf.cast(input_mask, tf.bool)
  candidate = real
  for special in masking.special_ids:
    candidate &= tf.not_equal(input_ids, special)
  num_tokens = tf.reduce_sum(tf.cast(real, tf.float32), axis=1)  # [B]; the reference counts [CLS]/[SEP] too
  # tf.round rounds half to even, as Python 3's round() in the reference does.
  num_to_predict = tf.minimum(tf.cast(tf.maximum(1.0, tf.round(num_tokens * masking.masked_lm_prob)), tf.int32), p)
  num_to_predict = tf.minimum(num_to_predict, tf.reduce_sum(tf.cast(candidate, tf.int32), axis=1))

  # A uniform random subset: the candidates with the highest random scores.
  scores = tf.where(candidate, tf.random.stateless_uniform(tf.shape(input_ids), seeds[0]), -1.0)
  _, chosen = tf.math.top_k(scores, k=p)  # [B, P], positions by decreasing score
  valid = tf.range(p)[None, :] < num_to_predict[:, None]  # [B, P]
  seq_len = tf.shape(input_ids)[1]
  positions = tf.sort(tf.where(valid, chosen, seq_len), axis=1)  # chosen ones first, ascending
  valid = positions < seq_len
  positions = tf.where(valid, positions, 0)
  original = tf.where(valid, tf.gather(input_ids, positions, batch_dims=1), 0)

  draw = tf.random.stateless_uniform(tf.shape(positions), seeds[1])
  random_ids = tf.random.stateless_uniform(tf.shape(positions), seeds[2], minval=0, maxval=masking.vocab_size,
                                           dtype=tf.int32)
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
                        shuffle_buffer: int = 1000) -> tf.data.Dataset:
  """Batches of pretraining features for one input pipeline.

  Args:
    input_file: comma-separated globs of TFRecord files (google-research's record format).
    batch_size: examples per batch of this pipeline - the per-replica batch under a strategy.
    input_context: from `strategy.distribute_datasets_from_function`; files are split among the pipelines
      (records are, when there are fewer files than pipelines).
    is_training: repeat and shuffle; else one pass in file order.
    masking: set for dynamic-masking records (which lack the masked_lm_* features); None reads static ones.
  Returns: a dataset of dicts: input_ids, input_mask, segment_ids int32 [batch, T]; masked_lm_positions,
    masked_lm_ids int32 [batch, P]; masked_lm_weights float32 [batch, P]; next_sentence_labels int32 [batch, 1].
  """
  files = fileio.expand_globs(input_file)
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
                                                  dynamic_masking=dynamic)
    if dynamic:
      batch_seed = tf.stack([tf.constant(seed + 1000 * index, tf.int64), number])
      features.update(mask_tokens(features["input_ids"], features["input_mask"], max_predictions_per_seq,
                                  masking, batch_seed))
    return features

  d = d.enumerate().map(parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  return d.prefetch(tf.data.AUTOTUNE)
