"""bert_tf.data.describe: records checked against the vocabulary they are decoded with."""

import os
import struct
import subprocess
import sys

import pytest

import training_helpers as th
from bert_tf import fileio
from bert_tf.data import describe, tokenization


def _vocab(tmp_path, tokens):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(tokens) + "\n")
  return str(path), tokenization.load_vocab(str(path))


def test_records_are_checked_against_the_vocabulary(tmp_path):
  files = fileio.expand_globs(th.write_records(tmp_path / "data", num_files=2, per_file=3))  # ids < 99, [CLS] = 2
  path, vocab = _vocab(tmp_path, th.SPECIAL + [f"w{i}" for i in range(th.VOCAB - len(th.SPECIAL))])
  describe.check_vocabulary(files, vocab, path)  # the records' own vocabulary
  path, vocab = _vocab(tmp_path, th.SPECIAL + [f"w{i}" for i in range(40)])
  with pytest.raises(ValueError, match=r"records hold token id 9\d but --vocab_file=.*vocab.txt has 45 tokens; "
                                       "pass the vocabulary the records were made with"):
    describe.check_vocabulary(files, vocab, path)
  # As many tokens, other ids: BERT's vocabularies start [PAD], [unused0], ...
  path, vocab = _vocab(tmp_path, ["[PAD]", "[unused0]", "[unused1]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
                       + [f"w{i}" for i in range(th.VOCAB - 7)])
  with pytest.raises(ValueError, match=r"the first record starts with id 2, which is '\[unused1\]' in "
                                       r"--vocab_file=.*, not \[CLS\] \(id 4\); pass the vocabulary"):
    describe.check_vocabulary(files, vocab, path)


def test_inspect_tfrecords_statistics_name_the_file_and_record_that_is_corrupt(tmp_path):
  """Issue 40 (6): a record past those the up-front check samples (the first 64 of each file), damaged, was
  TensorFlow's DataLossError ("corrupted record at 16986"), naming neither file nor record."""
  pieces = fileio.expand_globs(th.write_records(tmp_path / "parts", num_files=4, per_file=17))
  data = bytearray(b"".join(open(p, "rb").read() for p in pieces))  # TFRecord files concatenate: 68 records
  offset = 0
  for _ in range(66):  # to record 66: 8 bytes of length, 4 of its CRC, the data, 4 of the data's CRC
    offset += 16 + struct.unpack("<Q", data[offset:offset + 8])[0]
  data[offset + 14] ^= 0xFF  # in record 66's data
  path = tmp_path / "records.tfrecord"
  path.write_bytes(bytes(data))
  vocab = th.write_vocab(tmp_path)
  run = subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", "inspect_tfrecords.py"),
                        f"--input_file={path}", f"--vocab_file={vocab}", "--max_examples=1"],
                       capture_output=True, text=True, env=th.python_env(), timeout=300)
  assert (run.returncode, run.stderr.strip().splitlines()[-1]) == (
      1, f"error: {path}: record 66 (byte {offset}) is corrupt: its data fails its checksum; recreate the file with "
         "create_pretraining_data.py, or leave it out of --input_file"), run.stderr[-3000:]
  assert "Traceback" not in run.stderr
