"""The record schema: hand serializer == tf.train.Example, writer -> reader round trip, atomic files."""

import os

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import records

T, P = 11, 3  # Odd sizes so a swapped length cannot pass.

GOOGLE_RESEARCH_FEATURES = {
    "input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids", "masked_lm_weights",
    "next_sentence_labels"}


def reference_example(input_ids, segment_ids, positions, ids, label, dynamic=False):
  """The record as google-research builds it, through tf.train.Example."""
  def ints(v):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=v))

  n, k = len(input_ids), len(positions)
  feature = {
      "input_ids": ints(input_ids + [0] * (T - n)),
      "input_mask": ints([1] * n + [0] * (T - n)),
      "segment_ids": ints(segment_ids + [0] * (T - n)),
      "next_sentence_labels": ints([label]),
  }
  if not dynamic:
    feature.update(
        masked_lm_positions=ints(positions + [0] * (P - k)),
        masked_lm_ids=ints(ids + [0] * (P - k)),
        masked_lm_weights=tf.train.Feature(float_list=tf.train.FloatList(value=[1.0] * k + [0.0] * (P - k))))
  return tf.train.Example(features=tf.train.Features(feature=feature))


CASES = [
    # Ids above 127 and 16383 take 2 and 3 varint bytes.
    ([2, 127, 128, 3, 16383, 16384, 30521, 3], [0, 0, 0, 0, 1, 1, 1, 1], [1, 5], [127, 16384], 1),
    ([2, 5, 3, 6, 3], [0, 0, 0, 1, 1], [3], [6], 0),
    ([2] + [7] * 9 + [3], [0] * 11, [1, 2, 9], [7, 7, 7], 0),  # Full length, full predictions.
]


def test_schema_is_google_researchs():
  assert set(records.feature_names()) == GOOGLE_RESEARCH_FEATURES
  assert set(records.feature_names(dynamic_masking=True)) == GOOGLE_RESEARCH_FEATURES - {
      "masked_lm_positions", "masked_lm_ids", "masked_lm_weights"}
  spec = records.pretraining_feature_spec(T, P)
  assert spec["input_ids"].shape == [T] and spec["masked_lm_weights"].shape == [P]
  assert spec["masked_lm_weights"].dtype == tf.float32 and spec["next_sentence_labels"].shape == [1]


@pytest.mark.parametrize("dynamic", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_serializer_equals_tf_train_example(case, dynamic):
  serializer = records.RecordSerializer(T, P, vocab_size=30522, dynamic_masking=dynamic)
  ours = tf.train.Example.FromString(serializer.serialize(*case))
  assert ours == reference_example(*case, dynamic=dynamic)


def test_serializer_rejects_oversized_instances():
  serializer = records.RecordSerializer(T, P, vocab_size=99)
  with pytest.raises(ValueError, match="max_seq_length=11"):
    serializer.serialize([2] * 12, [0] * 12, [1], [5], 0)
  with pytest.raises(ValueError, match="max_predictions_per_seq=3"):
    serializer.serialize([2] * 6, [0] * 6, [1, 2, 3, 4], [5] * 4, 0)


def test_writer_reader_round_trip(tmp_path):
  path = str(tmp_path / "shard.tfrecord")
  serializer = records.RecordSerializer(T, P, vocab_size=30522)
  writer = records.TFRecordFileWriter(path)
  for case in CASES:
    writer.write(serializer.serialize(*case))
  assert not os.path.exists(path)  # Only the temporary file exists until close().
  writer.close()
  assert os.listdir(tmp_path) == ["shard.tfrecord"]
  assert records.infer_record_shape(path) == (T, P, False)

  parsed = list(records.read_pretraining_dataset(path, T, P).as_numpy_iterator())
  assert len(parsed) == 3
  first = parsed[0]
  assert all(first[k].dtype == np.int32 for k in GOOGLE_RESEARCH_FEATURES - {"masked_lm_weights"})
  assert first["masked_lm_weights"].dtype == np.float32
  np.testing.assert_array_equal(first["input_ids"], [2, 127, 128, 3, 16383, 16384, 30521, 3, 0, 0, 0])
  np.testing.assert_array_equal(first["input_mask"], [1] * 8 + [0] * 3)
  np.testing.assert_array_equal(first["segment_ids"], [0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0])
  np.testing.assert_array_equal(first["masked_lm_positions"], [1, 5, 0])
  np.testing.assert_array_equal(first["masked_lm_ids"], [127, 16384, 0])
  np.testing.assert_array_equal(first["masked_lm_weights"], [1.0, 1.0, 0.0])
  np.testing.assert_array_equal(first["next_sentence_labels"], [1])

  batch = records.parse_pretraining_examples(
      tf.constant([r.numpy() for r in tf.data.TFRecordDataset([path])]), T, P)
  assert batch["input_ids"].shape == (3, T) and batch["masked_lm_ids"].shape == (3, P)


def test_dynamic_masking_records_round_trip(tmp_path):
  path = str(tmp_path / "dyn.tfrecord")
  writer = records.TFRecordFileWriter(path)
  writer.write(records.RecordSerializer(T, P, 99, dynamic_masking=True).serialize(*CASES[1]))
  writer.close()
  assert records.infer_record_shape(path) == (T, 0, True)
  (parsed,) = list(records.read_pretraining_dataset(path, T, P, dynamic_masking=True).as_numpy_iterator())
  assert set(parsed) == set(records.feature_names(dynamic_masking=True))


def test_aborted_writer_leaves_nothing(tmp_path):
  writer = records.TFRecordFileWriter(str(tmp_path / "out.tfrecord"))
  writer.write(b"partial")
  writer.abort()
  assert os.listdir(tmp_path) == []


def test_reader_errors_name_the_pattern(tmp_path):
  with pytest.raises(FileNotFoundError, match="nothing-here"):
    records.read_pretraining_dataset(str(tmp_path / "nothing-here*"), T, P)
  empty = tmp_path / "empty.tfrecord"
  tf.io.TFRecordWriter(str(empty)).close()
  with pytest.raises(ValueError, match="holds no records"):
    records.infer_record_shape(str(empty))


def test_serializer_long_sequences_with_multibyte_positions():
  t, p = 301, 4  # Positions of 128 and more take two varint bytes.
  ids = [2] + [5] * 200 + [3] + [7] * 97 + [3]
  segments = [0] * 202 + [1] * 98
  serializer = records.RecordSerializer(t, p, vocab_size=99)
  ours = tf.train.Example.FromString(serializer.serialize(ids, segments, [1, 127, 128, 299], [5, 5, 5, 7], 0))
  parsed = records.parse_pretraining_examples(ours.SerializeToString(), t, p)
  np.testing.assert_array_equal(parsed["masked_lm_positions"], [1, 127, 128, 299])
  np.testing.assert_array_equal(parsed["input_ids"], ids + [0])
  np.testing.assert_array_equal(parsed["segment_ids"], segments + [0])
  assert int(parsed["input_mask"].numpy().sum()) == 300 and parsed["masked_lm_weights"].numpy().tolist() == [1.0] * 4


# -- Checking record files: every check names the file, the record or byte, and what to do. ----------------------


def write_shard(path, num_records=5, t=T, p=P, dynamic=False, top_id=50):
  """`num_records` records of equal size (so record k starts at k * frame bytes); returns the frame size."""
  serializer = records.RecordSerializer(t, p, vocab_size=top_id + 1, dynamic_masking=dynamic)
  serialized = [serializer.serialize([2, 5, top_id, 3], [0] * 4, [2], [7], i % 2) for i in range(num_records)]
  records.write_tfrecord_file(str(path), serialized)
  return len(records.frame_record(serialized[0]))


def test_whole_files_pass_the_check_and_the_full_scan(tmp_path):
  paths = [str(tmp_path / f"shard-{i}.tfrecord") for i in range(3)]
  for i, path in enumerate(paths):
    write_shard(path, num_records=2 + i, top_id=60 + i)
  infos = records.check_record_files(paths)
  assert [(i.path, i.num_records, i.shape, i.max_token_id) for i in infos] == [
      (paths[0], 2, (T, P, False), 60), (paths[1], 3, (T, P, False), 61), (paths[2], 4, (T, P, False), 62)]
  assert records.find_corrupt_record(paths) is None
  dynamic = str(tmp_path / "dynamic.tfrecord")
  write_shard(dynamic, dynamic=True)
  assert records.check_record_file(dynamic).shape == records.infer_record_shape(dynamic) == (T, 0, True)


def test_truncated_file(tmp_path):
  path = tmp_path / "cut.tfrecord"
  frame = write_shard(path)
  data = path.read_bytes()
  for size, whole in [(len(data) - 7, 4), (2 * frame + 5, 2)]:  # cut in a record's data, in its header
    path.write_bytes(data[:size])
    problem = f"{path}: truncated at byte {size} after {whole} records: the writer was interrupted"
    with pytest.raises(ValueError) as error:
      records.check_record_files([str(path)])
    assert str(error.value) == problem + "; recreate it"
    assert records.find_corrupt_record([str(path)]) == problem


def test_text_file_named_tfrecord(tmp_path):
  path = tmp_path / "notes.tfrecord"
  path.write_text("the quick brown fox\njumps\n")
  expected = (f"{path}: not a TFRecord file (it starts with b'the quick br', not a record header); give the "
              "TFRecord files create_pretraining_data.py writes")
  with pytest.raises(ValueError) as error:
    records.check_record_files([str(path)])
  assert str(error.value) == expected
  assert records.find_corrupt_record([str(path)]) == expected.split("; ")[0]


def test_empty_file(tmp_path):
  path = tmp_path / "empty.tfrecord"
  path.write_bytes(b"")
  with pytest.raises(ValueError) as error:
    records.check_record_files([str(path)])
  assert str(error.value) == (f"{path}: empty file (0 bytes): it holds no records; recreate it, or leave it out "
                              "of the input files")
  assert records.find_corrupt_record([str(path)]) is None  # TensorFlow reads it as no records, without error


def test_flipped_byte_in_a_records_data(tmp_path):
  path = tmp_path / "flipped.tfrecord"
  good = tmp_path / "good.tfrecord"
  write_shard(good)
  frame = write_shard(path)
  data = bytearray(path.read_bytes())
  data[3 * frame + 12 + 9] ^= 0x10  # in record 3's data
  path.write_bytes(bytes(data))
  problem = f"{path}: record 3 (byte {3 * frame}) is corrupt: its data fails its checksum"
  # The cheap check reads the data of the first `sample` records only.
  assert records.check_record_file(str(path), sample=3).num_records == 5
  with pytest.raises(ValueError) as error:
    records.check_record_file(str(path))
  assert str(error.value) == problem + "; recreate the file"
  assert records.find_corrupt_record([str(good), str(path)]) == problem


def test_flipped_byte_in_a_records_length(tmp_path):
  path = tmp_path / "flipped.tfrecord"
  frame = write_shard(path)
  data = bytearray(path.read_bytes())
  data[2 * frame] ^= 0x01
  path.write_bytes(bytes(data))
  problem = f"{path}: corrupt at byte {2 * frame}: the header of record 2 fails its checksum"
  with pytest.raises(ValueError) as error:
    records.check_record_file(str(path), sample=1)
  assert str(error.value) == problem + "; recreate the file"
  assert records.find_corrupt_record([str(path)]) == problem


def test_records_of_another_schema(tmp_path):
  fix = "give the records create_pretraining_data.py writes"
  classifier = tmp_path / "classifier.tfrecord"
  example = tf.train.Example(features=tf.train.Features(feature={
      name: tf.train.Feature(int64_list=tf.train.Int64List(value=[1] * 7))
      for name in ("input_ids", "input_mask", "segment_ids", "label_ids")}))
  records.write_tfrecord_file(str(classifier), [example.SerializeToString()])
  not_example = tmp_path / "bytes.tfrecord"
  records.write_tfrecord_file(str(not_example), [b"\xff\xff\xff"])
  short_mask = tmp_path / "short_mask.tfrecord"
  bad = reference_example(*CASES[1])
  del bad.features.feature["input_mask"].int64_list.value[-1]
  records.write_tfrecord_file(str(short_mask), [bad.SerializeToString()])
  expected = {
      classifier: "record 0 is not a BERT pretraining record: it lacks ['next_sentence_labels'] (it has "
                  "['input_ids', 'input_mask', 'label_ids', 'segment_ids'])",
      not_example: "record 0 is not a tf.train.Example",
      short_mask: f"record 0 is not a BERT pretraining record: input_mask holds {T - 1} int64_list values where "
                  f"{T} int64_list values belong"}
  for path, problem in expected.items():
    with pytest.raises(ValueError) as error:
      records.check_record_files([str(path)])
    assert str(error.value) == f"{path}: {problem}; {fix}"


def test_mixed_shapes_name_both_files(tmp_path):
  a, b, c = (str(tmp_path / f"{name}.tfrecord") for name in ("a", "b", "c"))
  write_shard(a)
  write_shard(b, t=T + 2)
  write_shard(c, dynamic=True)
  fix = ("files read together must hold records of one shape; remake one set with the other's "
         "create_pretraining_data.py flags, or train on them separately")
  with pytest.raises(ValueError) as error:
    records.check_record_files([a, b])
  assert str(error.value) == (f"{b} holds records of max_seq_length {T + 2}, max_predictions_per_seq {P} but {a} "
                              f"holds records of max_seq_length {T}, max_predictions_per_seq {P}: {fix}")
  with pytest.raises(ValueError) as error:
    records.check_record_files([a, c])
  assert str(error.value) == (f"{c} holds records of max_seq_length {T}, unmasked but {a} holds records of "
                              f"max_seq_length {T}, max_predictions_per_seq {P}: {fix}")


def test_remote_paths_are_read_through_gfile(tmp_path):
  root = f"ram://{tmp_path.name}"  # TensorFlow's in-memory file system stands in for gs://
  write_shard(f"{root}/a.tfrecord")
  frame = write_shard(f"{root}/b.tfrecord")
  with tf.io.gfile.GFile(f"{root}/b.tfrecord", "rb") as f:
    data = f.read()
  with tf.io.gfile.GFile(f"{root}/cut.tfrecord", "wb") as f:
    f.write(data[:3 * frame + 1])
  assert [i.num_records for i in records.check_record_files([f"{root}/a.tfrecord", f"{root}/b.tfrecord"])] == [5, 5]
  with pytest.raises(ValueError) as error:
    records.check_record_files([f"{root}/a.tfrecord", f"{root}/cut.tfrecord"])
  assert str(error.value) == (f"{root}/cut.tfrecord: truncated at byte {3 * frame + 1} after 3 records: the writer "
                              "was interrupted; recreate it")
