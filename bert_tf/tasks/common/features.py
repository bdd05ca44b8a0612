"""What every task's features share: the [CLS] A [SEP] (B [SEP]) encoding of a text or a text pair, the cache of
feature files (named by a hash of all that makes them, described by `<file>.json`), and the input pipeline that
reads them, with dynamic padding.

A pair longer than T - 3 tokens (T = max_seq_length) is truncated one token at a time from the end of the longer
side (B when they are equal), google-research's `_truncate_seq_pair`; a single text keeps its first T - 2 tokens.
The same rule runs in Python (`encode`, for the records) and in-graph (`encode_graph`, for exported SavedModels
that take raw text); the tests check that both give the same ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Callable, Sequence

import tensorflow as tf
import tensorflow_text as tf_text
from absl import logging

from bert_tf import fileio

# The entries of a batch that hold one value per token, which dynamic padding cuts (a task adds its labels).
PER_TOKEN_INPUTS = ("input_ids", "input_mask", "segment_ids")


# -- Python encoding ------------------------------------------------------------------------------------------


def truncate_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
  """Lengths after google-research's `_truncate_seq_pair` (pop from the longer, B on ties) to `budget` tokens,
  in closed form so that the in-graph version can compute it without a loop."""
  excess = len_a + len_b - budget
  if excess <= 0:
    return len_a, len_b
  if len_a > len_b and len_a - len_b >= excess:
    return len_a - excess, len_b
  if len_a <= len_b and len_b - len_a >= excess:
    return len_a, len_b - excess
  # Both sides shrink to half the budget; on an odd budget A keeps the extra token (B is popped on ties).
  return (budget + 1) // 2, budget // 2


@dataclasses.dataclass(frozen=True)
class EncodedExample:
  input_ids: list[int]
  input_mask: list[int]
  segment_ids: list[int]
  num_tokens: int  # real tokens, [CLS] and [SEP]s included
  truncated: bool


def encode(tokenizer, text_a: str, text_b: str | None, max_seq_length: int) -> EncodedExample:
  """One example -> padded features. `tokenizer` is a `FullTokenizer` (its vocab holds [CLS] and [SEP])."""
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  a = tokenizer.tokenize_to_ids(text_a)
  if text_b is None:
    keep = min(len(a), max_seq_length - 2)
    truncated = keep < len(a)
    ids = [cls_id, *a[:keep], sep_id]
    segments = [0] * len(ids)
  else:
    b = tokenizer.tokenize_to_ids(text_b)
    keep_a, keep_b = truncate_lengths(len(a), len(b), max_seq_length - 3)
    truncated = (keep_a, keep_b) != (len(a), len(b))
    ids = [cls_id, *a[:keep_a], sep_id, *b[:keep_b], sep_id]
    segments = [0] * (keep_a + 2) + [1] * (keep_b + 1)
  n = len(ids)
  pad = [0] * (max_seq_length - n)
  return EncodedExample(ids + pad, [1] * n + pad, segments + pad, n, truncated)


# -- Feature files --------------------------------------------------------------------------------------------


def feature_file_key(*parts: Any) -> str:
  """A short hash naming a feature file by everything that determines its contents."""
  return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:12]


file_fingerprint = fileio.fingerprint  # "<size>:<sha256>" of an input file: a changed file gets new features


def write_description(info) -> None:
  """Writes `<info.path>.json`, the description of the complete feature file at `info.path` (a dataclass of the
  task's: its counts and settings), with the file's size in bytes, by which `read_description` knows a damaged
  copy."""
  values = dict(dataclasses.asdict(info), bytes=fileio.size(info.path))
  fileio.write_text_atomic(info.path + ".json", json.dumps(values, indent=2) + "\n")


def read_description(path: str, description_class):
  """The `<path>.json` description (a dataclass of `description_class`) of a complete feature file at `path`, or
  None when there is none yet. Every task's feature files are described so.

  A damaged cache is None too, said in one warning line: a description that does not parse, or a file whose size
  is not the one its description records (a copy cut short, a disk that filled). Feature files are made from the
  task's data, so the caller writes it again rather than train on it."""
  if not (fileio.exists(path) and fileio.exists(path + ".json")):
    return None
  try:
    with fileio.open_file(path + ".json", "rb") as f:
      values = json.loads(f.read().decode("utf-8"))
    size = values.pop("bytes", None)  # None: described before sizes were recorded
    if "path" in values:  # Written as the writing run named it (maybe relative to another working directory).
      values["path"] = path
    info = description_class(**values)
  except (ValueError, TypeError, AttributeError) as e:
    logging.warning("%s.json: not a feature file description (%s); writing %s again", path, e, path)
    return None
  if size is not None and fileio.size(path) != size:
    logging.warning("%s: %d bytes, its description says %d: a damaged copy; writing it again", path,
                    fileio.size(path), size)
    return None
  return info


def feature_dataset(path: str, spec: dict, convert: Callable[[dict], dict], batch_size: int, max_seq_length: int,
                    is_training: bool, input_context=None, seed: int = 12345, dynamic_padding: bool = True,
                    pad_to_batch: bool = False, length_multiple: int = 8, shuffle_buffer: int = 100_000,
                    per_token: Sequence[str] = PER_TOKEN_INPUTS) -> tf.data.Dataset:
  """The input pipeline of every task's feature file (local or gs://): batches of `spec`'s features, each batch
  passed through `convert` (dtypes, extra entries) after parsing.

  Args:
    batch_size: examples per batch of this input pipeline (the per-replica batch under a strategy).
    is_training: shard by `input_context` (a `tf.distribute.InputContext`: each pipeline keeps 1 example in
      `num_input_pipelines`), shuffle (seeded) and repeat, full batches only; else one pass in file order.
    dynamic_padding: cut each batch's `per_token` entries to its longest example, rounded up to a multiple of
      `length_multiple` (`trim_padding`: padding computes nothing useful; under XLA each length is a
      compilation, hence the rounding). Off for TPUs, which need static shapes.
    pad_to_batch: (evaluation) append all-zero rows so every batch is full and shapes stay static; the tasks
      drop them from the predictions (is_real_example, a zero mask).
  """
  d = tf.data.TFRecordDataset([path])
  if input_context is not None and input_context.num_input_pipelines > 1:
    d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  if is_training:
    d = d.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
  d = d.batch(batch_size, drop_remainder=is_training)
  d = d.map(lambda serialized: convert(tf.io.parse_example(serialized, spec)), num_parallel_calls=tf.data.AUTOTUNE)
  if pad_to_batch and not is_training:
    def pad(batch):
      n = batch_size - tf.shape(batch["input_ids"])[0]
      return {k: tf.ensure_shape(tf.pad(v, [[0, n]] + [[0, 0]] * (v.shape.rank - 1)), [batch_size] + v.shape[1:])
              for k, v in batch.items()}

    d = d.map(pad)
  if dynamic_padding:
    d = d.map(lambda batch: trim_padding(batch, max_seq_length, length_multiple, per_token))
  return d.prefetch(tf.data.AUTOTUNE)


def trim_padding(batch: dict, max_seq_length: int, length_multiple: int = 1,
                 per_token: Sequence[str] = PER_TOKEN_INPUTS) -> dict:
  """A batch's `per_token` entries [..., T] ([B, T]; [B, C, T] for multiple choice; by default the encoder's
  three inputs, a task adds its token labels) cut on the last axis to its longest sequence, rounded up to a
  multiple of `length_multiple` (at most `max_seq_length`); other entries unchanged."""
  longest = tf.reduce_max(tf.reduce_sum(batch["input_mask"], axis=-1))
  length = tf.minimum((longest + length_multiple - 1) // length_multiple * length_multiple, max_seq_length)
  return {k: v[..., :length] if k in per_token else v for k, v in batch.items()}


# -- In-graph encoding (for SavedModels that take raw text) -------------------------------------------------


def encode_graph(tokenizer, text_a, text_b, max_seq_length: int) -> dict:
  """`encode` in-graph: tf.string [B] (and [B] or None) -> int32 [B, max_seq_length] input_ids, input_mask,
  segment_ids. `tokenizer` is a `GraphTokenizer` with [CLS] and [SEP] in its vocabulary."""
  vocab = tokenizer.vocab
  cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]

  def keep_first(ids, lengths):
    positions = tf.ragged.range(ids.row_lengths())
    return tf.ragged.boolean_mask(ids, positions < tf.expand_dims(lengths, 1))

  a = tokenizer.tokenize(text_a)
  len_a = a.row_lengths()
  if text_b is None:
    segments = [keep_first(a, tf.minimum(len_a, max_seq_length - 2))]
  else:
    b = tokenizer.tokenize(text_b)
    len_b = b.row_lengths()
    budget = tf.constant(max_seq_length - 3, tf.int64)
    excess = len_a + len_b - budget
    half_a, half_b = (budget + 1) // 2, budget // 2
    a_longer = len_a > len_b
    keep_a = tf.where(excess <= 0, len_a,
                      tf.where(a_longer, tf.where(len_a - len_b >= excess, len_a - excess, half_a),
                               tf.where(len_b - len_a >= excess, len_a, half_a)))
    keep_b = tf.where(excess <= 0, len_b,
                      tf.where(a_longer, tf.where(len_a - len_b >= excess, len_b, half_b),
                               tf.where(len_b - len_a >= excess, len_b - excess, half_b)))
    segments = [keep_first(a, keep_a), keep_first(b, keep_b)]
  ids, segment_ids = tf_text.combine_segments(segments, start_of_sequence_id=cls_id, end_of_segment_id=sep_id)
  input_ids, input_mask = tf_text.pad_model_inputs(ids, max_seq_length)
  segment_ids, _ = tf_text.pad_model_inputs(segment_ids, max_seq_length)
  return {"input_ids": tf.cast(input_ids, tf.int32), "input_mask": tf.cast(input_mask, tf.int32),
          "segment_ids": tf.cast(segment_ids, tf.int32)}
