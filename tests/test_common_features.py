"""bert_tf.tasks.common.features: the pair encoding every task uses, in Python and in-graph, dynamic padding, and the
feature caches' descriptions (a damaged cache is written again; one damaged mid-run is named, with what works)."""

import dataclasses
import json
import logging
import os
import random

import pytest
import tensorflow as tf

from bert_tf.data.graph_tokenizer import GraphTokenizer
from bert_tf.data.tokenization import FullTokenizer
from bert_tf.tasks.common import features

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "un", "##believ", "##able", ",", ".", "!", "a"]
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS  # ids: the=5, cat=6, ..., a=18


@pytest.fixture
def vocab_file(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(TOKENS) + "\n")
  return str(path)


def _reference_truncation(len_a, len_b, budget):
  """google-research's _truncate_seq_pair, on lengths."""
  while len_a + len_b > budget:
    if len_a > len_b:
      len_a -= 1
    else:
      len_b -= 1
  return len_a, len_b


def test_truncate_lengths_is_the_reference_loop_in_closed_form():
  for a in range(14):
    for b in range(14):
      for budget in range(27):
        assert features.truncate_lengths(a, b, budget) == _reference_truncation(a, b, budget), (a, b, budget)


def test_encode_pair_and_single_with_exact_ids(vocab_file):
  tok = FullTokenizer(vocab_file)
  e = features.encode(tok, "The cat sat", "on the mat!", 11)
  assert e.input_ids == [2, 5, 6, 7, 3, 8, 5, 9, 17, 3, 0]
  assert e.input_mask == [1] * 10 + [0]
  assert e.segment_ids == [0] * 5 + [1] * 5 + [0]
  assert (e.num_tokens, e.truncated) == (10, False)
  # 5 + 4 tokens into a budget of 9 - 3 = 6: the longer A is cut to B's length, then B on the tie, then A.
  e = features.encode(tok, "the cat sat on a", "dog ran the mat", 9)
  assert e.input_ids == [2, 5, 6, 7, 3, 10, 11, 5, 3]
  assert e.segment_ids == [0, 0, 0, 0, 0, 1, 1, 1, 1]
  assert e.truncated
  e = features.encode(tok, "unbelievable dog", None, 5)
  assert e.input_ids == [2, 12, 13, 14, 3]  # un ##believ ##able, then [SEP]: "dog" cut
  assert e.segment_ids == [0] * 5 and e.truncated
  e = features.encode(tok, "", "", 7)  # empty texts are [CLS] [SEP] [SEP]
  assert e.input_ids == [2, 3, 3, 0, 0, 0, 0] and e.segment_ids == [0, 0, 1, 0, 0, 0, 0]


def test_in_graph_encoding_equals_python_on_random_texts(vocab_file):
  full, graph = FullTokenizer(vocab_file), GraphTokenizer(vocab_file)
  rng = random.Random(3)
  pool = WORDS + ["Zebra", "CAT", "mat.", "東京", "unbelievable!"]
  for max_seq_length in (5, 6, 9, 17):
    a = [" ".join(rng.choice(pool) for _ in range(rng.randint(0, 11))) for _ in range(23)]
    b = [" ".join(rng.choice(pool) for _ in range(rng.randint(0, 11))) for _ in range(23)]
    pair = features.encode_graph(graph, tf.constant(a), tf.constant(b), max_seq_length)
    single = features.encode_graph(graph, tf.constant(a), None, max_seq_length)
    for i in range(23):
      e, s = features.encode(full, a[i], b[i], max_seq_length), features.encode(full, a[i], None, max_seq_length)
      assert pair["input_ids"][i].numpy().tolist() == e.input_ids
      assert pair["input_mask"][i].numpy().tolist() == e.input_mask
      assert pair["segment_ids"][i].numpy().tolist() == e.segment_ids
      assert single["input_ids"][i].numpy().tolist() == s.input_ids
      assert single["segment_ids"][i].numpy().tolist() == s.segment_ids


def test_trim_padding_cuts_the_last_axis_of_any_rank():
  mask = tf.constant([[[1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0]], [[1, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0]]])
  batch = {"input_ids": mask * 7, "input_mask": mask, "segment_ids": mask * 0, "label_ids": tf.constant([1, 0])}
  cut = features.trim_padding(batch, max_seq_length=7, length_multiple=2)  # longest 3 -> 4
  assert cut["input_ids"].shape == (2, 2, 4) and cut["input_mask"].numpy().sum() == mask.numpy().sum()
  assert cut["label_ids"].numpy().tolist() == [1, 0]
  assert features.trim_padding(batch, max_seq_length=7, length_multiple=8)["input_ids"].shape == (2, 2, 7)


# -- Feature caches -----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Described:
  path: str
  num_examples: int


def test_a_cache_cut_short_or_an_unreadable_description_is_written_again_said_in_one_line(tmp_path, caplog):
  path = str(tmp_path / "train.tfrecord")
  with open(path, "wb") as f:
    f.write(b"x" * 100)
  features.write_description(_Described(path, 3))
  assert json.loads(open(path + ".json").read()) == {"path": path, "num_examples": 3, "bytes": 100}
  assert features.read_description(path, _Described) == _Described(path, 3)
  caplog.set_level(logging.WARNING)
  with open(path, "wb") as f:
    f.write(b"x" * 60)  # cut short: a disk that filled, a copy interrupted
  assert features.read_description(path, _Described) is None
  assert [r.getMessage() for r in caplog.records] == [
      f"{path}: 60 bytes, its description says 100: a damaged copy; writing it again"]
  caplog.clear()
  for text, why in (('{"path": ', "Expecting value: line 1 column 10 (char 9)"),
                    ('{"path": "x", "num_examples": 3, "other": 1}', "_Described.__init__() got an unexpected keyword "
                                                                    "argument 'other'")):
    with open(path + ".json", "w") as f:
      f.write(text)
    assert features.read_description(path, _Described) is None
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}.json: not a feature file description ({why}); writing {path} again"]
    caplog.clear()
  with open(path + ".json", "w") as f:  # described before sizes were recorded: taken as it is
    f.write('{"path": "elsewhere", "num_examples": 3}')
  assert features.read_description(path, _Described) == _Described(path, 3) and not caplog.records


def _examples(path) -> list:
  return [tf.train.Example.FromString(record.numpy()) for record in tf.data.TFRecordDataset(str(path))]


def test_run_classifier_rewrites_a_truncated_cache_and_names_one_damaged_mid_run_with_what_works(tmp_path):
  """Issue 40 (7): a truncated cached feature file failed as `Graph execution error ... fix or remove the file`,
  naming no file. Cut short, it is now found before training and written again (one line); a byte flipped inside,
  found mid-run, is named with its record and the advice (remove it: a missing cache is written, as in the first
  run; the run record binds the data, not the cache, so the same command goes on)."""
  import concurrent.futures
  import shutil
  import subprocess
  import sys

  import training_helpers as th
  from bert_tf.config import BertConfig
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  words = ["free", "money", "now", "see", "you", "at", "lunch"]
  (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]) + "\n")
  config = BertConfig.from_preset("tiny", vocab_size=len(words) + 5, hidden_size=18, num_attention_heads=3,
                                  intermediate_size=37, num_hidden_layers=1, max_position_embeddings=24)
  checkpoints.export_encoder(BertEncoder(config), config, str(tmp_path / "pretrained"))
  rows = [("free money now", "spam") if i % 2 else ("see you at lunch", "ham") for i in range(17)]
  (tmp_path / "train.csv").write_text("sentence1,label\n" + "".join(f"{t},{label}\n" for t, label in rows))

  def run(name):
    args = ["--train_file=train.csv", "--vocab_file=vocab.txt", "--init_checkpoint=pretrained", "--do_train",
            "--max_seq_length=16", "--train_batch_size=8", "--num_train_epochs=1", "--num_gpus=0",
            f"--output_dir=out_{name}", f"--features_dir=features_{name}"]
    return subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", "run_classifier.py"), *args],
                          cwd=tmp_path, env=th.python_env(), capture_output=True, text=True, timeout=300)

  first = run("a")
  assert first.returncode == 0, first.stderr[-3000:]
  (cache,) = [os.path.relpath(p, tmp_path / "features_a") for p in
              (str(p) for p in (tmp_path / "features_a").rglob("*.tfrecord"))]
  whole = (tmp_path / "features_a" / cache).read_bytes()
  for name in ("cut", "flipped"):
    shutil.copytree(tmp_path / "features_a", tmp_path / f"features_{name}")
  (tmp_path / "features_cut" / cache).write_bytes(whole[:-7])
  flipped = bytearray(whole)
  flipped[12 + 5] ^= 0xFF  # the first record's data: its checksum fails
  (tmp_path / "features_flipped" / cache).write_bytes(bytes(flipped))
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    cut, damaged = pool.map(run, ("cut", "flipped"))
  assert cut.returncode == 0, cut.stderr[-3000:]
  cut_path = os.path.join("features_cut", cache)
  assert [line.split(" ", 1)[1] for line in cut.stderr.splitlines() if "damaged" in line] == [
      f"warning: {cut_path}: {len(whole) - 7} bytes, its description says {len(whole)}: a damaged copy; writing it "
      "again"], cut.stderr[-3000:]
  # The same records (a tf.train.Example's features are a map, serialized in no fixed order: bytes may differ).
  assert _examples(tmp_path / "features_cut" / cache) == _examples(tmp_path / "features_a" / cache)
  assert damaged.returncode == 1 and "Traceback" not in damaged.stderr, damaged.stderr[-3000:]
  flipped_path = os.path.join("features_flipped", cache)
  assert [line for line in damaged.stderr.splitlines() if line.startswith("error:")] == [
      f"error: {flipped_path}: record 0 (byte 0) is corrupt: its data fails its checksum; it is a cache made from the "
      "training data: remove it and rerun the same command, which writes it again and starts the run (no step was "
      "saved)"]
  assert not (tmp_path / "out_flipped" / "run.json").exists()  # a run refused before a step binds nothing
