"""bert_tf.training.pretraining's input checks: every record file before any work, and the damaged record named
after TensorFlow's DataLossError mid-run."""

import os
import subprocess
import sys

import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.data import records
from bert_tf.training import pretraining

CONFIG_FILE = "tiny/bert_config.json"  # only named in messages


def _write(path, ids=(2, 7, 3), t=th.T, masked_id=7) -> int:
  """Three records of `ids`; returns the size of one framed record."""
  serializer = records.RecordSerializer(t, th.P, vocab_size=max([*ids, masked_id]) + 1)
  serialized = [serializer.serialize(list(ids), [0] * len(ids), [1], [masked_id], 0)] * 3
  records.write_tfrecord_file(str(path), serialized)
  return len(records.frame_record(serialized[0]))


def _config(input_file, **overrides):
  fields = dict(input_file=str(input_file), output_dir="unused", bert_config=th.tiny_bert_config(),
                bert_config_file=CONFIG_FILE, max_seq_length=th.T, max_predictions_per_seq=th.P)
  return pretraining.PretrainingConfig(**{**fields, **overrides})


def test_good_records_pass(tmp_path):
  _write(tmp_path / "a.tfrecord", ids=(2, th.VOCAB - 1, 3), masked_id=th.VOCAB - 1)
  _write(tmp_path / "b.tfrecord")
  pretraining.check_records(_config(tmp_path / "*.tfrecord", vocab_file=th.write_vocab(tmp_path)))


@pytest.mark.parametrize("where", ["input_ids", "masked_lm_ids"])
def test_token_ids_past_vocab_size(tmp_path, where):
  _write(tmp_path / "a.tfrecord")
  bad = tmp_path / "b.tfrecord"
  _write(bad, ids=(2, 120, 3) if where == "input_ids" else (2, 7, 3), masked_id=130 if where == "masked_lm_ids" else 7)
  top = 120 if where == "input_ids" else 130
  with pytest.raises(ValueError) as error:
    pretraining.check_records(_config(tmp_path / "*.tfrecord"))
  assert str(error.value) == (
      f"{bad}: records hold token id {top} but {CONFIG_FILE} says vocab_size={th.VOCAB}: set \"vocab_size\" in "
      f"{CONFIG_FILE} to the vocabulary's size (the number of lines of vocab.txt), or remake the records with the "
      "model's vocabulary")


def test_vocab_file_larger_than_the_config(tmp_path):
  _write(tmp_path / "a.tfrecord")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"t{i}\n" for i in range(th.VOCAB + 4)))
  with pytest.raises(ValueError) as error:
    pretraining.check_records(_config(tmp_path / "*.tfrecord", vocab_file=str(vocab)))
  assert str(error.value) == (
      f"--vocab_file={vocab} has {th.VOCAB + 4} tokens (lines) but {CONFIG_FILE} says vocab_size={th.VOCAB}: set "
      f"\"vocab_size\": {th.VOCAB + 4} in {CONFIG_FILE}, or pass the vocabulary the model was made with")


def test_mixed_lengths_name_both_files(tmp_path):
  a, b = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
  _write(a)
  _write(b, t=th.T - 2)
  with pytest.raises(ValueError) as error:
    pretraining.check_records(_config(f"{a},{b}"))
  assert str(error.value).startswith(
      f"{b} holds records of max_seq_length {th.T - 2}, max_predictions_per_seq {th.P} but {a} holds records of "
      f"max_seq_length {th.T}, max_predictions_per_seq {th.P}: ")


def test_flag_mismatch_is_reported_for_the_records(tmp_path):
  path = tmp_path / "a.tfrecord"
  _write(path)
  with pytest.raises(ValueError) as error:
    pretraining.check_records(_config(path, max_predictions_per_seq=th.P + 1))
  assert str(error.value) == (f"{path}: records have max_predictions_per_seq {th.P}; pass "
                              f"--max_predictions_per_seq={th.P}")


def test_input_error_names_the_damaged_record(tmp_path):
  _write(tmp_path / "a.tfrecord")
  bad = tmp_path / "b.tfrecord"
  frame = _write(bad)
  data = bytearray(bad.read_bytes())
  data[2 * frame + 20] ^= 0x04
  bad.write_bytes(bytes(data))
  task = pretraining.PretrainingTask(_config(tmp_path / "*.tfrecord"))
  error = tf.errors.DataLossError(None, None, "{{function_node __wrapped__IteratorGetNext_output_types_1_device_/"
                                  "job:localhost/replica:0/task:0/device:CPU:0}} corrupted record at 120 "
                                  "[Op:IteratorGetNext]\n\t [[{{node IteratorGetNext}}]]")
  assert task.input_error(error) == f"{bad}: record 2 (byte {2 * frame}) is corrupt: its data fails its checksum"
  bad.write_bytes(bytes(data[:2 * frame]))  # now whole: TensorFlow's own first line is all there is to say
  assert task.input_error(error) == "corrupted record at 120 [Op:IteratorGetNext]"


@pytest.mark.slow  # a subprocess that imports TensorFlow: about 12 s here
def test_run_pretraining_script_stops_on_a_truncated_relative_input_file(tmp_path):
  os.makedirs(tmp_path / "data")
  path = tmp_path / "data" / "cut.tfrecord"
  _write(path)
  data = path.read_bytes()
  path.write_bytes(data[:-5])
  th.tiny_bert_config().to_json_file(str(tmp_path / "bert_config.json"))
  script = os.path.join(th.REPO, "scripts", "run_pretraining.py")
  flags = ["--input_file=data/cut.tfrecord", "--output_dir=out", "--bert_config_file=bert_config.json",
           f"--max_seq_length={th.T}", f"--max_predictions_per_seq={th.P}", "--distribution_strategy=one_device"]
  result = subprocess.run([sys.executable, script, *flags], cwd=tmp_path, env=th.python_env(), capture_output=True,
                          text=True, timeout=240)
  assert result.returncode == 1, result.stderr[-2000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
  assert errors == [f"error: data/cut.tfrecord: truncated at byte {len(data) - 5} after 2 records: the writer was "
                    "interrupted; recreate it"], result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "out")


@pytest.mark.slow
def test_a_record_corrupted_past_the_checked_sample_stops_training_naming_the_file_and_the_last_checkpoint(
    tmp_path):
  th.write_records(tmp_path / "data", num_files=1, per_file=90)
  path = tmp_path / "data" / "records-000.tfrecord"
  data = bytearray(path.read_bytes())
  offset, index = 0, 0
  while index < 80:  # record 80: past the 64 records the up-front check reads
    length = int.from_bytes(data[offset:offset + 8], "little")
    offset += 16 + length
    index += 1
  data[offset + 12 + 5] ^= 0xFF  # a byte of record 80's data: its data checksum fails
  path.write_bytes(bytes(data))
  th.tiny_bert_config().to_json_file(str(tmp_path / "bert_config.json"))
  flags = ["--input_file=data/records-*.tfrecord", "--output_dir=out", "--bert_config_file=bert_config.json",
           f"--max_seq_length={th.T}", f"--max_predictions_per_seq={th.P}", "--train_batch_size=6",
           "--num_train_steps=40", "--num_warmup_steps=0", "--save_checkpoints_steps=2",
           "--distribution_strategy=one_device"]
  result = subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", "run_pretraining.py"), *flags],
                          cwd=tmp_path, env=th.python_env(), capture_output=True, text=True, timeout=300)
  assert result.returncode == 1, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
  # The file as the user named it; the shuffle buffer reads ahead, so the error may come before any checkpoint.
  assert errors[0].startswith(f"error: data/records-000.tfrecord: record 80 (byte {offset}) is corrupt: its data "
                              "fails its checksum; the last good checkpoint is "), errors[0]
  assert errors[0].endswith(": fix or remove the file and rerun the same command to resume")
  assert not os.path.exists(tmp_path / "out" / ".lock")


def test_a_full_disk_at_the_encoder_export_says_training_is_saved_and_what_to_free(tmp_path, monkeypatch):
  import errno

  from bert_tf.errors import DiskFull
  from bert_tf.training import handoff

  data = th.write_records(tmp_path / "data", num_files=1, per_file=5)

  def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(handoff, "export_encoder", no_space)
  config = pretraining.PretrainingConfig(
      input_file=data, output_dir=str(tmp_path / "out"), bert_config=th.tiny_bert_config(), max_seq_length=th.T,
      max_predictions_per_seq=th.P, train_batch_size=2, num_train_steps=2, num_warmup_steps=0,
      distribution_strategy="one_device")
  with pytest.raises(DiskFull) as error:
    pretraining.run_pretraining(config)
  message = str(error.value)
  assert message.startswith(f"no room to write the encoder under {tmp_path / 'out'} (OSError: [Errno 28] No space "
                            "left on device): it needs about ")
  assert message.endswith(f"training finished and is saved in {tmp_path / 'out' / 'checkpoints' / 'ckpt-2'}: "
                          "free space and rerun the same command, which only writes the encoder")
  assert not os.path.exists(tmp_path / "out" / ".lock")
