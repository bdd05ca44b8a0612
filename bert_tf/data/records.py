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
  """Reads the first record of `path` -> (max_seq_length, max_predictions_per_seq, dynamic_masking).

  Raises ValueError naming the file when it is empty, not TFRecord, or its first record is not the schema's.
  """
  return check_record_file(path, sample=1, walk=False).shape


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


# -- Checking files --------------------------------------------------------------------------------------------
# TensorFlow finds a damaged record only when the input pipeline reaches it, possibly hours into a run, and its
# DataLossError names neither the file nor the record. These checks find damage up front and name both.
# A TFRecord file is a sequence of frames (little-endian): uint64 length, uint32 masked CRC-32C of those 8 bytes,
# `length` bytes of data, uint32 masked CRC-32C of the data.

_HEADER_BYTES = 12  # the length and its CRC
_FOOTER_BYTES = 4  # the data's CRC
SAMPLE_RECORDS = 64  # records per file whose data the up-front check reads


class RecordFileError(ValueError):
  """A record file that cannot be read: `problem` says what and where, the message adds what to do."""

  def __init__(self, path: str, problem: str, fix: str):
    super().__init__(f"{path}: {problem}; {fix}")
    self.path = path
    self.problem = problem


@dataclasses.dataclass(frozen=True)
class RecordFileInfo:
  """What `check_record_file` learnt about one pretraining record file."""

  path: str
  num_records: int  # every record when the framing was walked, else the records sampled
  max_seq_length: int
  max_predictions_per_seq: int  # 0 for unmasked (dynamic masking) records
  dynamic_masking: bool
  max_token_id: int  # the largest input_ids or masked_lm_ids value of the records sampled

  @property
  def shape(self) -> tuple[int, int, bool]:
    return self.max_seq_length, self.max_predictions_per_seq, self.dynamic_masking

  def describe_shape(self) -> str:
    masking = "unmasked" if self.dynamic_masking else f"max_predictions_per_seq {self.max_predictions_per_seq}"
    return f"max_seq_length {self.max_seq_length}, {masking}"


def _plural(n: int, word: str) -> str:
  return f"{n} {word}{'' if n == 1 else 's'}"


def _frames(path: str, f, size: int, read_data):
  """Walks the framing of the open file `f` (`size` bytes): yields (index, offset, data) per record.

  Every length's CRC is checked and the file must end at a record boundary. Only records with
  `read_data(index)` true are read and their data CRC checked (data is None for the others, which are seeked
  over, so a walk reads about 12 of every record's bytes from disk blocks it skips). Raises RecordFileError.
  """
  offset = index = 0
  while offset < size:
    f.seek(offset)
    header = f.read(_HEADER_BYTES)
    length_bytes = header[:8]
    if index == 0 and (len(header) < _HEADER_BYTES or _masked_crc(length_bytes) != header[8:]):
      raise RecordFileError(path, f"not a TFRecord file (it starts with {header!r}, not a record header)",
                            "give the TFRecord files create_pretraining_data.py writes")
    if len(header) < _HEADER_BYTES:
      raise RecordFileError(path, f"truncated at byte {size} after {_plural(index, 'record')}: the writer was "
                            "interrupted", "recreate it")
    if _masked_crc(length_bytes) != header[8:]:
      raise RecordFileError(path, f"corrupt at byte {offset}: the header of record {index} fails its checksum",
                            "recreate the file")
    (length,) = struct.unpack("<Q", length_bytes)
    end = offset + _HEADER_BYTES + length + _FOOTER_BYTES
    if end > size:
      raise RecordFileError(path, f"truncated at byte {size} after {_plural(index, 'record')}: the writer was "
                            "interrupted", "recreate it")
    data = None
    if read_data(index):
      data = f.read(length)
      if _masked_crc(data) != f.read(_FOOTER_BYTES):
        raise RecordFileError(path, f"record {index} (byte {offset}) is corrupt: its data fails its checksum",
                              "recreate the file")
    yield index, offset, data
    offset = end
    index += 1


def _open_for_walk(path: str):
  """`path` opened for reading with a large buffer, so that seeks over small records stay inside it."""
  from bert_tf import fileio

  if fileio.is_remote(path):
    return fileio.open_file(path, "rb")  # GFile reads through its own buffer.
  return open(path, "rb", buffering=1 << 16)


def _record_features(path: str, index: int, data: bytes) -> tuple[tuple[int, int, bool], int]:
  """One record's data -> ((max_seq_length, max_predictions_per_seq, dynamic), largest token id).

  Raises RecordFileError when the record is not the pretraining schema.
  """
  import tensorflow as tf
  from google.protobuf.message import DecodeError

  fix = "give the records create_pretraining_data.py writes"
  try:
    features = tf.train.Example.FromString(data).features.feature
  except DecodeError:
    raise RecordFileError(path, f"record {index} is not a tf.train.Example", fix) from None
  dynamic = not any(f.masking and f.name in features for f in PRETRAINING_FEATURES)
  missing = [n for n in feature_names(dynamic) if n not in features]
  if missing:
    has = sorted(features)
    raise RecordFileError(path, f"record {index} is not a BERT pretraining record: it lacks {missing} (it has "
                          f"{has[:10]}{' ...' if len(has) > 10 else ''})", fix)

  def values(name):
    return features[name].int64_list.value

  seq = len(values("input_ids"))
  predictions = 0 if dynamic else len(values("masked_lm_positions"))
  for f in PRETRAINING_FEATURES:
    if dynamic and f.masking:
      continue
    feature = features[f.name]
    kind = feature.WhichOneof("kind")
    got = len(getattr(feature, kind).value) if kind else 0
    want = _length(f, seq, predictions)
    if kind != f"{f.kind}_list" or got != want:
      raise RecordFileError(path, f"record {index} is not a BERT pretraining record: {f.name} holds {got} "
                            f"{kind or 'no'} values where {want} {f.kind}_list values belong", fix)
  ids = list(values("input_ids")) + ([] if dynamic else list(values("masked_lm_ids")))
  return (seq, predictions, dynamic), max(ids, default=0)


def check_record_file(path: str, sample: int = SAMPLE_RECORDS, walk: bool = True) -> RecordFileInfo:
  """Checks one pretraining record file cheaply: the framing of every record (lengths and their CRCs, the end
  of the file; `walk`), and the data CRC and schema of the first `sample` records, which must share a shape.

  Raises RecordFileError (a ValueError) naming the file, the record or byte at fault, and what to do.
  """
  from bert_tf import fileio

  size = fileio.size(path)
  if size == 0:
    raise RecordFileError(path, "empty file (0 bytes): it holds no records",
                          "recreate it, or leave it out of the input files")
  first = None
  max_id = -1
  count = 0
  with _open_for_walk(path) as f:
    for index, _, data in _frames(path, f, size, lambda i: i < sample):
      count = index + 1
      if data is not None:
        shape, top = _record_features(path, index, data)
        max_id = max(max_id, top)
        if first is None:
          first = shape
        elif shape != first:
          raise RecordFileError(
              path, f"record {index} has max_seq_length {shape[0]}, max_predictions_per_seq {shape[1]} but "
              f"record 0 has {first[0]}, {first[1]}", "recreate the file with one create_pretraining_data.py run")
      if not walk and index + 1 >= sample:
        break
  return RecordFileInfo(path, count, first[0], first[1], first[2], max_id)


def check_record_files(files: Sequence[str], sample: int = SAMPLE_RECORDS) -> list[RecordFileInfo]:
  """`check_record_file` for each file, and all files must hold records of one shape (max_seq_length,
  max_predictions_per_seq, masking). Returns one RecordFileInfo per file, in order; raises ValueError naming the
  file (for mixed shapes, both files and both shapes)."""
  from bert_tf import fileio

  if any(fileio.is_remote(p) for p in files) and len(files) > 1:
    # Each remote open and read is a round trip: overlap them. Results (and the first error) keep file order.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(min(16, len(files))) as pool:
      infos = list(pool.map(lambda p: check_record_file(p, sample), files))
  else:
    infos = [check_record_file(p, sample) for p in files]
  first = infos[0]
  for info in infos[1:]:
    if info.shape != first.shape:
      raise ValueError(f"{info.path} holds records of {info.describe_shape()} but {first.path} holds records of "
                       f"{first.describe_shape()}: files read together must hold records of one shape; remake "
                       "one set with the other's create_pretraining_data.py flags, or train on them separately")
  return infos


def find_corrupt_record(files: Sequence[str]) -> str | None:
  """Reads every record of `files` and checks every CRC: the first damaged record as one line ("<file>: record
  <k> (byte <n>) is corrupt: ..." or "<file>: truncated at byte <n> ..."), or None when all are whole.

  For after TensorFlow raised DataLossError, whose message names no file. Reads all the data; empty files pass
  (TensorFlow reads them as holding no records).
  """
  from bert_tf import fileio

  for path in files:
    size = fileio.size(path)
    try:
      with _open_for_walk(path) as f:
        for _ in _frames(path, f, size, lambda i: True):
          pass
    except RecordFileError as e:
      return f"{e.path}: {e.problem}"
  return None
