"""The pretraining record schema, declared once: the writer, the reader and training all use it.

The format is google-research/bert's `create_pretraining_data.py` output, unchanged: one `tf.train.Example` per
instance with these features (P = max_predictions_per_seq, T = max_seq_length):

  input_ids             int64 [T]  token ids, zero-padded
  input_mask            int64 [T]  1 for real tokens, 0 for padding
  segment_ids           int64 [T]  0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding
  masked_lm_positions   int64 [P]  sorted positions of the masked tokens, zero-padded
  masked_lm_ids         int64 [P]  original ids at those positions, zero-padded
  masked_lm_weights     float [P]  1.0 per real prediction, 0.0 for padding
  next_sentence_labels  int64 [1]  1 when B is a random sentence, 0 when B really follows A

Records written for dynamic masking (masking happens in the input pipeline) omit the three masked_lm_* features.
The reader returns ids as int32 (what the model and TPUs want) and weights as float32.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Sequence


@dataclasses.dataclass(frozen=True)
class FeatureDef:
  name: str
  kind: str  # "int64" or "float", the tf.train.Feature list type.
  length: str  # "max_seq_length", "max_predictions_per_seq" or "1".
  masking: bool  # Present only in statically masked records.


PRETRAINING_FEATURES: tuple[FeatureDef, ...] = (
    FeatureDef("input_ids", "int64", "max_seq_length", False),
    FeatureDef("input_mask", "int64", "max_seq_length", False),
    FeatureDef("segment_ids", "int64", "max_seq_length", False),
    FeatureDef("masked_lm_positions", "int64", "max_predictions_per_seq", True),
    FeatureDef("masked_lm_ids", "int64", "max_predictions_per_seq", True),
    FeatureDef("masked_lm_weights", "float", "max_predictions_per_seq", True),
    FeatureDef("next_sentence_labels", "int64", "1", False),
)


def feature_names(dynamic_masking: bool = False) -> list[str]:
  return [f.name for f in PRETRAINING_FEATURES if not (dynamic_masking and f.masking)]


def _length(feature: FeatureDef, max_seq_length: int, max_predictions_per_seq: int) -> int:
  return {"max_seq_length": max_seq_length, "max_predictions_per_seq": max_predictions_per_seq,
          "1": 1}[feature.length]


def pretraining_feature_spec(max_seq_length: int, max_predictions_per_seq: int,
                             dynamic_masking: bool = False) -> dict:
  """The `tf.io.parse_example` spec of a pretraining record: name -> FixedLenFeature."""
  import tensorflow as tf

  return {
      f.name: tf.io.FixedLenFeature([_length(f, max_seq_length, max_predictions_per_seq)],
                                    tf.int64 if f.kind == "int64" else tf.float32)
      for f in PRETRAINING_FEATURES if not (dynamic_masking and f.masking)
  }


def parse_pretraining_examples(serialized, max_seq_length: int, max_predictions_per_seq: int,
                               dynamic_masking: bool = False) -> dict:
  """Parses serialized records (tf.string `[]` or `[B]`) into a dict of int32 / float32 tensors.

  Returns tensors of shape `[T]`, `[P]`, `[1]` for a scalar input, with a leading `[B]` for a batch.
  """
  import tensorflow as tf

  spec = pretraining_feature_spec(max_seq_length, max_predictions_per_seq, dynamic_masking)
  serialized = tf.convert_to_tensor(serialized, tf.string)
  if serialized.shape.rank == 0:
    parsed = tf.io.parse_single_example(serialized, spec)
  else:
    parsed = tf.io.parse_example(serialized, spec)
  return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}


def read_pretraining_dataset(file_patterns: str | Sequence[str], max_seq_length: int,
                             max_predictions_per_seq: int, dynamic_masking: bool = False):
  """TFRecord files (comma-separated globs or a list; local or gs://) -> unbatched `tf.data.Dataset` of dicts.

  Files are read in the order given (sorted within each glob); no shuffling, no repetition: the training input
  pipeline adds those.
  """
  import tensorflow as tf

  from bert_tf import fileio

  if isinstance(file_patterns, str):
    files = fileio.expand_globs(file_patterns)
  else:
    files = fileio.expand_globs(",".join(file_patterns))
  return tf.data.TFRecordDataset(files).map(
      lambda s: parse_pretraining_examples(s, max_seq_length, max_predictions_per_seq, dynamic_masking),
      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def infer_record_shape(path: str) -> tuple[int, int, bool]:
  """Reads the first record of `path` -> (max_seq_length, max_predictions_per_seq, dynamic_masking)."""
  import tensorflow as tf

  for raw in tf.data.TFRecordDataset([path]).take(1):
    example = tf.train.Example.FromString(raw.numpy())
    features = example.features.feature
    missing = [n for n in feature_names(dynamic_masking=True) if n not in features]
    if missing:
      raise ValueError(f"{path}: not a BERT pretraining record file (first record lacks {missing})")
    max_seq_length = len(features["input_ids"].int64_list.value)
    dynamic = "masked_lm_positions" not in features
    max_predictions = 0 if dynamic else len(features["masked_lm_positions"].int64_list.value)
    return max_seq_length, max_predictions, dynamic
  raise ValueError(f"{path}: holds no records")


# -- Writing ---------------------------------------------------------------------------------------------------
# Records are serialized by hand rather than through tf.train.Example: building the protobuf objects costs about
# 60 µs per record here, a quarter of the whole per-instance budget; the byte layout below is the one protobuf
# writes (Example.features -> map entries {key, Feature{int64_list|float_list{packed value}}}) and parses back
# to equal Examples (tested against tf.train.Example).


def _varint(n: int) -> bytes:
  out = bytearray()
  while True:
    byte = n & 0x7F
    n >>= 7
    if n:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


# Field headers (tag byte + varint length) for the payload lengths records have, computed once.
_HEADERS = {tag: [bytes((tag,)) + _varint(n) for n in range(1 << 14)] for tag in (0x0A, 0x12, 0x1A)}


def _field(tag: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field: tag byte, varint length, payload."""
  n = len(payload)
  if n < 1 << 14:
    return _HEADERS[tag][n] + payload
  return bytes((tag,)) + _varint(n) + payload


class RecordSerializer:
  """Serializes pretraining instances to `tf.train.Example` bytes in google-research's record format.

  Features whose encoded size never varies (masks, segment ids, weights, the label, and positions when they all
  fit one varint byte) are a precomputed header plus raw bytes; only token ids go through the varint table.
  """

  def __init__(self, max_seq_length: int, max_predictions_per_seq: int, vocab_size: int,
               dynamic_masking: bool = False):
    self.max_seq_length = max_seq_length
    self.max_predictions_per_seq = max_predictions_per_seq
    self.dynamic_masking = dynamic_masking
    # Every int we write is a token id, a 0/1 flag or a position, so one table of encodings covers them all.
    self._varints = [_varint(i) for i in range(max(vocab_size, max_seq_length, 2))]
    self._keys = {f.name: _field(0x0A, f.name.encode()) for f in PRETRAINING_FEATURES}
    # Positions below 128 are one varint byte each, so their feature has a fixed size when T <= 128.
    self._positions_fixed = max_seq_length <= 128
    self._headers = {
        name: self._int_feature(name, [0] * length)[:-length]
        for name, length in (("input_mask", max_seq_length), ("segment_ids", max_seq_length),
                             ("masked_lm_positions", max_predictions_per_seq))}
    self._labels = [self._int_feature("next_sentence_labels", [label]) for label in (0, 1)]
    self._weights = [self._float_feature("masked_lm_weights", [1.0] * k + [0.0] * (max_predictions_per_seq - k))
                     for k in range(max_predictions_per_seq + 1)]

  def _int_feature(self, name: str, values: Sequence[int]) -> bytes:
    return self._packed_feature(name, b"".join([self._varints[v] for v in values]))

  def _packed_feature(self, name: str, packed: bytes) -> bytes:
    """An int64 feature from its already varint-encoded values."""
    feature = _field(0x1A, _field(0x0A, packed))  # Feature.int64_list{value: packed}
    return _field(0x0A, self._keys[name] + _field(0x12, feature))  # Features.feature map entry

  def _float_feature(self, name: str, values: Sequence[float]) -> bytes:
    packed = struct.pack(f"<{len(values)}f", *values)
    feature = _field(0x12, _field(0x0A, packed))  # Feature.float_list{value: packed}
    return _field(0x0A, self._keys[name] + _field(0x12, feature))

  def serialize(self, input_ids: Sequence[int], segment_ids: Sequence[int],
                masked_lm_positions: Sequence[int], masked_lm_ids: Sequence[int],
                next_sentence_label: int) -> bytes:
    """One instance -> serialized Example. `input_ids`/`segment_ids` unpadded (segment ids 0 or 1);
    positions sorted."""
    n = len(input_ids)
    if n > self.max_seq_length:
      raise ValueError(f"instance has {n} tokens, more than max_seq_length={self.max_seq_length}")
    varint = self._varints.__getitem__  # map() with a C getter: no Python bytecode per token.
    zeros = b"\x00" * (self.max_seq_length - n)  # 0 and 1 encode as one byte each.
    parts = [
        self._packed_feature("input_ids", b"".join(map(varint, input_ids)) + zeros),
        self._headers["input_mask"] + b"\x01" * n + zeros,
        self._headers["segment_ids"] + bytes(segment_ids) + zeros,
    ]
    if not self.dynamic_masking:
      k = len(masked_lm_positions)
      if k > self.max_predictions_per_seq:
        raise ValueError(
            f"instance has {k} predictions, more than max_predictions_per_seq={self.max_predictions_per_seq}")
      mzeros = b"\x00" * (self.max_predictions_per_seq - k)
      if self._positions_fixed:
        parts.append(self._headers["masked_lm_positions"] + bytes(masked_lm_positions) + mzeros)
      else:
        parts.append(self._packed_feature(
            "masked_lm_positions", b"".join(map(varint, masked_lm_positions)) + mzeros))
      parts.append(self._packed_feature("masked_lm_ids", b"".join(map(varint, masked_lm_ids)) + mzeros))
      parts.append(self._weights[k])
    parts.append(self._labels[next_sentence_label])
    return _field(0x0A, b"".join(parts))  # Example.features


def _masked_crc(data: bytes) -> bytes:
  import google_crc32c

  crc = google_crc32c.value(data)
  return struct.pack("<I", (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def frame_record(record: bytes) -> bytes:
  """One record in the TFRecord framing: length, masked CRC-32C of the length, data, masked CRC-32C of the data.

  Done here rather than by tf.io.TFRecordWriter so that record-creation workers need not import TensorFlow.
  """
  length = struct.pack("<Q", len(record))
  return length + _masked_crc(length) + record + _masked_crc(record)


def write_tfrecord_file(path: str, serialized: Sequence[bytes]) -> None:
  """Writes records to `path` (local or remote) in the TFRecord format."""
  from bert_tf import fileio

  with fileio.open_file(path, "wb") as f:
    for record in serialized:
      f.write(frame_record(record))


class TFRecordFileWriter:
  """Writes serialized records to `path` (local or gs://) under a temporary name; `close()` renames it into
  place, `abort()` deletes it, so an interrupted run never leaves a complete-looking file."""

  def __init__(self, path: str):
    from bert_tf import fileio

    fileio.makedirs_for(path)
    self.path = path
    self.temp_path = fileio.temp_path_for(path)
    self._writer = fileio.open_file(self.temp_path, "wb")

  def write(self, record: bytes) -> None:
    self._writer.write(frame_record(record))

  def write_framed(self, data: bytes) -> None:
    """Appends already framed records (e.g. the contents of another TFRecord file)."""
    self._writer.write(data)

  def close(self) -> None:
    from bert_tf import fileio

    self._writer.close()
    fileio.commit(self.temp_path, self.path)

  def abort(self) -> None:
    from bert_tf import fileio

    self._writer.close()
    fileio.discard(self.temp_path)
