"""Pretraining-data creation end to end: reference equality, statistics, sharding determinism, errors."""

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from bert_tf import fileio
from bert_tf.data import corpus, instances, pretraining_data, records, tokenization

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "scripts")


def parsed_records(paths):
  """Every record of `paths`, in order, as {feature: tuple of values}: equal features, not equal bytes."""
  out = []
  for raw in tf.data.TFRecordDataset(list(paths)):
    example = tf.train.Example.FromString(raw.numpy())
    out.append({k: tuple(f.int64_list.value) or tuple(f.float_list.value)
                for k, f in example.features.feature.items()})
  return out


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
  """Eleven real documents plus the awkward cases: empty documents, a one-sentence document, a line of
  control characters only, a very long line, CJK and accents."""
  documents = corpus.default_corpus_documents()[:11]
  text = "\n\n".join("\n".join(d) for d in documents)
  text += "\n\n\n\nA lonely one-sentence document.\n\n\x00\x01\n\n"
  text += "Ein Wort über Ångström, 東京 と 大阪, и кириллица.\nSecond sentence here.\n"
  text += " ".join(["supercalifragilistic"] * 400) + "\nThe end of a long document.\n"
  path = tmp_path_factory.mktemp("corpus") / "small.txt"
  path.write_text(text, encoding="utf-8")
  return str(path)


def run_ours(tmp_path, input_file, vocab_file, name="ours", config=None, **run_kwargs):
  config = config or instances.InstanceConfig(dupe_factor=2)
  n_out = run_kwargs.pop("n_out", 1)
  outputs = tuple(str(tmp_path / f"{name}-{k}.tfrecord") for k in range(n_out))
  run = pretraining_data.RunConfig(
      input_files=(input_file,), output_files=outputs,
      tokenizer=pretraining_data.TokenizerSpec(vocab_file, do_lower_case=True), **run_kwargs)
  stats = pretraining_data.create_pretraining_data(run, config, progress=lambda message: None)
  return outputs, stats


def run_reference(tmp_path, input_file, vocab_file, seq, preds, seed, n_out):
  """google-research's create_pretraining_data.py (as published on PyPI in bert-tensorflow 1.0.4) on
  `input_file`: the records of each of its `n_out` output files."""
  ref_outputs = [str(tmp_path / f"ref-{k}.tfrecord") for k in range(n_out)]
  flags = [f"--input_file={input_file}", f"--vocab_file={vocab_file}", "--do_lower_case=True",
           f"--max_seq_length={seq}", f"--max_predictions_per_seq={preds}", f"--random_seed={seed}",
           "--dupe_factor=2", "--masked_lm_prob=0.15", "--short_seq_prob=0.1"]
  subprocess.run([sys.executable, "-m", "bert.create_pretraining_data", *flags,
                  "--output_file=" + ",".join(ref_outputs)], check=True, capture_output=True,
                 env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  return [parsed_records([f]) for f in ref_outputs]


def assert_equals_reference(tmp_path, input_file, vocab_file, seq=128, preds=20, seed=12345, n_out=1):
  """Runs the reference and our reference-compatible mode on the same input: the records must be equal one for
  one, in order, over every output file."""
  expected = run_reference(tmp_path, input_file, vocab_file, seq, preds, seed, n_out)
  config = instances.InstanceConfig(max_seq_length=seq, max_predictions_per_seq=preds, dupe_factor=2)
  ours, stats = run_ours(tmp_path, input_file, vocab_file, config=config, random_seed=seed,
                         reference_compatible=True, n_out=n_out)
  for records_of_file, our_file in zip(expected, ours):
    assert len(records_of_file) > 50
    assert parsed_records([our_file]) == records_of_file
  assert stats["instances"] == sum(len(r) for r in expected)


@pytest.mark.slow
@pytest.mark.parametrize("seq,preds,seed,n_out", [(128, 20, 12345, 1), (37, 5, 7, 2)])
def test_reference_compatible_mode_equals_google_research(tmp_path, small_corpus, bert_uncased_vocab_file,
                                                          seq, preds, seed, n_out):
  assert_equals_reference(tmp_path, small_corpus, bert_uncased_vocab_file, seq, preds, seed, n_out)


@pytest.mark.slow
def test_carriage_returns_read_as_google_research_reads_them(tmp_path, small_corpus, bert_uncased_vocab_file):
  """Windows line ends throughout, and lone "\r" inside lines: the reference's reader (TensorFlow's GFile
  readline) drops every "\r", so "Ein\rWort" is the one word "einwort", not two; our records must be its."""
  text = open(small_corpus, encoding="utf-8").read()
  assert "Ein Wort" in text and text.count(" the ") > 20
  text = text.replace("Ein Wort", "Ein\rWort").replace(" the ", " the\r", 20).replace("\n", "\r\n")
  path = tmp_path / "crlf.txt"
  path.write_bytes(text.encode("utf-8"))
  assert_equals_reference(tmp_path, str(path), bert_uncased_vocab_file, seq=37, preds=5, seed=7)
  # The case is a real one: read as whitespace, the lone "\r" would give other tokens.
  tokenizer = tokenization.FullTokenizer(bert_uncased_vocab_file)
  lines = [line for _, document in pretraining_data.iter_document_lines([str(path)]) for line in document]
  assert any(line.startswith("EinWort über") for line in lines) and not any("\r" in line for line in lines)
  assert tokenizer.tokenize("Ein\rWort") != tokenizer.tokenize("EinWort")


@pytest.fixture(scope="module")
def embedded_corpus_file(tmp_path_factory):
  return corpus.write_default_corpus(str(tmp_path_factory.mktemp("embedded") / "corpus.txt"))


@pytest.mark.slow
@pytest.mark.parametrize("whole_word", [False, True])
def test_statistics_over_the_embedded_corpus(tmp_path, embedded_corpus_file, bert_uncased_vocab_file,
                                             whole_word):
  config = instances.InstanceConfig(dupe_factor=3, do_whole_word_mask=whole_word)
  outputs, stats = run_ours(tmp_path, embedded_corpus_file, bert_uncased_vocab_file, config=config,
                            num_shards=2)
  vocab = tokenization.load_vocab(bert_uncased_vocab_file)
  cls_id, sep_id, mask_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[MASK]"]
  is_piece = np.zeros(len(vocab), bool)
  is_piece[[i for t, i in vocab.items() if t.startswith("##")]] = True

  n = masked = tokens = replaced = kept = 0
  for example in records.read_pretraining_dataset(outputs[0], 128, 20).as_numpy_iterator():
    n += 1
    length = int(example["input_mask"].sum())
    ids, seg = example["input_ids"][:length], example["segment_ids"][:length]
    k = int(example["masked_lm_weights"].sum())
    positions, labels = example["masked_lm_positions"][:k], example["masked_lm_ids"][:k]
    # Layout: [CLS] A [SEP] B [SEP], segment 0 through the first [SEP], 1 after; padding all zeros.
    first_sep = int(np.argmax(seg))  # First position of B.
    assert ids[0] == cls_id and ids[first_sep - 1] == sep_id and ids[-1] == sep_id
    assert not seg[:first_sep].any() and seg[first_sep:].all() and first_sep >= 2 and length - first_sep >= 2
    assert not example["input_ids"][length:].any() and not example["segment_ids"][length:].any()
    # Positions sorted, inside the sequence, never a special token; weights 1 then 0.
    assert list(positions) == sorted(set(positions)) and positions.max() < length and positions.min() > 0
    assert not np.isin(labels, [cls_id, sep_id]).any()
    assert (positions != first_sep - 1).all()
    assert not example["masked_lm_weights"][k:].any()
    original = ids.copy()
    original[positions] = labels
    replaced += int((ids[positions] == mask_id).sum())
    kept += int((ids[positions] == labels).sum())
    unmasked = np.ones(length, bool)
    unmasked[positions] = False
    assert (ids[unmasked] == original[unmasked]).all()
    if whole_word:
      # A "##" piece is masked exactly when the token before it is (unless that one is [SEP]/[CLS]).
      for p in range(2, length):
        if is_piece[original[p]] and original[p - 1] not in (cls_id, sep_id):
          assert unmasked[p] == unmasked[p - 1]
    masked += k
    tokens += length
  assert n == stats["instances"] > 3000
  assert abs(masked / tokens - 0.15) < 0.02
  # kept counts random draws that hit the same id too, at most about 0.1 * 1/30522 extra.
  assert abs(replaced / masked - 0.8) < 0.02 and abs(kept / masked - 0.1) < 0.02
  assert abs(stats["masked_replaced_by_mask_fraction"] - 0.8) < 0.02
  assert abs(stats["masked_random_token_fraction"] - 0.1) < 0.02
  # Among pairs where the 50% coin decided, B is random half the time; one-sentence chunks add more (the
  # reference's behaviour), which the stats file reports separately.
  assert abs(stats["next_sentence_random_fraction_of_coin_flips"] - 0.5) < 0.03
  assert stats["next_sentence_random_fraction"] >= stats["next_sentence_random_fraction_of_coin_flips"]
  written = json.loads(open(outputs[0] + ".stats.json").read())
  assert written["instances"] == n and written["num_shards"] == 2 and written["mode"] == "sharded"
  assert sum(written["length_histogram"].values()) == n


@pytest.mark.slow
def test_output_is_the_same_whatever_the_number_of_workers(tmp_path, small_corpus, bert_uncased_vocab_file):
  one, stats1 = run_ours(tmp_path, small_corpus, bert_uncased_vocab_file, name="w1", num_shards=3,
                         num_workers=1, n_out=2)
  two, stats2 = run_ours(tmp_path, small_corpus, bert_uncased_vocab_file, name="w2", num_shards=3,
                         num_workers=2, n_out=2)
  for a, b in zip(one, two):
    assert open(a, "rb").read() == open(b, "rb").read()
  assert stats1["instances"] == stats2["instances"] > 0
  assert stats1["draws"] == stats2["draws"] == instances.BACKEND  # Workers draw as this process does.
  # Another shard count is another (equally valid) output.
  four, _ = run_ours(tmp_path, small_corpus, bert_uncased_vocab_file, name="s4", num_shards=4, n_out=2)
  assert parsed_records(four) != parsed_records(one)
  assert sorted(os.listdir(tmp_path)) == sorted(
      [os.path.basename(p) for p in one + two + four] + [os.path.basename(p) + ".stats.json"
                                                         for p in (one[0], two[0], four[0])])


def test_gzip_input_gives_the_same_records(tmp_path, small_corpus, bert_uncased_vocab_file):
  zipped = tmp_path / "small.txt.gz"
  zipped.write_bytes(gzip.compress(open(small_corpus, "rb").read()))
  config = instances.InstanceConfig(dupe_factor=1)
  plain, _ = run_ours(tmp_path, small_corpus, bert_uncased_vocab_file, name="plain", config=config,
                      num_shards=2)
  packed, _ = run_ours(tmp_path, str(zipped), bert_uncased_vocab_file, name="gz", config=config, num_shards=2)
  assert parsed_records(plain) == parsed_records(packed)


def test_dynamic_masking_writes_unmasked_instances(tmp_path, small_corpus, bert_uncased_vocab_file):
  config = instances.InstanceConfig(dupe_factor=1, dynamic_masking=True)
  outputs, stats = run_ours(tmp_path, small_corpus, bert_uncased_vocab_file, config=config)
  mask_id = tokenization.load_vocab(bert_uncased_vocab_file)["[MASK]"]
  found = parsed_records(outputs)
  assert len(found) == stats["instances"] > 0 and stats["masked_lm_predictions"] == 0
  assert set(found[0]) == set(records.feature_names(dynamic_masking=True))
  assert all(mask_id not in r["input_ids"] for r in found)


@pytest.mark.parametrize("mode", ["sharded", "reference_compatible", "beam"])
def test_masking_rates_in_record_creation_and_its_statistics(tmp_path, small_corpus, bert_uncased_vocab_file, mode):
  """100/0/0 (every prediction [MASK]) and 80/0/20 (no random token), the paper's Table 8 rows, through the
  sharded worker processes, the one-process mode and the Beam pipeline (DirectRunner); the rates are in the
  statistics' settings."""
  mask_id = tokenization.load_vocab(bert_uncased_vocab_file)["[MASK]"]
  for rates in ((1.0, 0.0), (0.8, 0.0))[:1 if mode == "beam" else 2]:  # Beam runs the sharded mode's code: one
    config = instances.InstanceConfig(dupe_factor=1, mask_token_rate=rates[0], random_token_rate=rates[1])
    name = f"r{int(rates[0] * 100)}-{mode}"
    if mode == "beam":
      pytest.importorskip("apache_beam")
      from bert_tf.data import beam_pipeline

      outputs = (str(tmp_path / f"{name}-0.tfrecord"),)
      run = pretraining_data.RunConfig(
          input_files=(small_corpus,), output_files=outputs, num_shards=2,
          tokenizer=pretraining_data.TokenizerSpec(bert_uncased_vocab_file, do_lower_case=True))
      stats = beam_pipeline.create_pretraining_data_beam(run, config, "DirectRunner", progress=lambda message: None)
    else:
      options = dict(reference_compatible=True) if mode == "reference_compatible" else dict(num_shards=2,
                                                                                              num_workers=2)
      outputs, stats = run_ours(tmp_path, small_corpus, bert_uncased_vocab_file, name=name, config=config,
                                **options)
    found = parsed_records(outputs)
    chosen = [(r["input_ids"][p], label) for r in found for p, label, w in
              zip(r["masked_lm_positions"], r["masked_lm_ids"], r["masked_lm_weights"]) if w > 0]
    assert len(chosen) == stats["masked_lm_predictions"] > 100
    masked = sum(new == mask_id for new, _ in chosen)
    if rates[0] == 1.0:
      assert masked == len(chosen)
    else:
      assert all(new in (mask_id, label) for new, label in chosen) and 0.7 < masked / len(chosen) < 0.9
    assert stats["masked_random_token_fraction"] == 0.0
    written = json.loads(open(outputs[0] + ".stats.json").read())["settings"]
    assert (written["mask_token_rate"], written["random_token_rate"]) == rates


def run_script(*args):
  return subprocess.run([sys.executable, os.path.join(SCRIPTS, "create_pretraining_data.py"), *args],
                        capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))


def test_script_end_to_end_and_inspect(tmp_path, small_corpus, bert_uncased_vocab_file):
  out = str(tmp_path / "records" / "pretrain.tfrecord")
  result = run_script(f"--input_file={small_corpus}", f"--output_file={out}",
                      f"--vocab_file={bert_uncased_vocab_file}", "--dupe_factor=1", "--num_shards=2")
  assert result.returncode == 0, result.stderr
  assert "instances/s" in result.stderr and "shard 2/2" in result.stderr
  inspect = subprocess.run(
      [sys.executable, os.path.join(SCRIPTS, "inspect_tfrecords.py"), f"--input_file={out}",
       f"--vocab_file={bert_uncased_vocab_file}", "--max_examples=2"],
      capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert inspect.returncode == 0, inspect.stderr
  assert inspect.stdout.count("--- instance") == 2 and "[CLS]" in inspect.stdout and "[MASK](" in inspect.stdout
  stats = json.loads(inspect.stdout[inspect.stdout.index("{"):])
  assert stats["records"] == json.load(open(out + ".stats.json"))["instances"]
  assert stats["max_seq_length"] == 128 and stats["max_predictions_per_seq"] == 20


@pytest.mark.parametrize("flag,message", [
    ("--max_seq_length=4", "--max_seq_length=4: must be at least 5"),
    ("--max_predictions_per_seq=0", "--max_predictions_per_seq=0: must be at least 1"),
    ("--masked_lm_prob=0", "--masked_lm_prob=0.0: must be in (0, 1]"),
    ("--masked_lm_prob=1.01", "--masked_lm_prob=1.01: must be in (0, 1]"),
    ("--mask_token_rate=0.95", "--mask_token_rate=0.95 + --random_token_rate=0.1 = 1.05 exceeds 1"),
])
def test_script_rejects_bad_flags(tmp_path, small_corpus, bert_uncased_vocab_file, flag, message):
  out = tmp_path / "out.tfrecord"
  result = run_script(f"--input_file={small_corpus}", f"--output_file={out}",
                      f"--vocab_file={bert_uncased_vocab_file}", flag)
  assert result.returncode == 1 and message in result.stderr
  assert os.listdir(tmp_path) == []


def test_script_errors_name_the_file(tmp_path, small_corpus, bert_uncased_vocab_file):
  out = tmp_path / "out" / "x.tfrecord"
  missing = run_script(f"--input_file={tmp_path}/nope.txt", f"--output_file={out}",
                       f"--vocab_file={bert_uncased_vocab_file}")
  assert missing.returncode == 1 and "nope.txt" in missing.stderr and "matches no file" in missing.stderr

  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(t for t in open(bert_uncased_vocab_file, encoding="utf-8").read().split("\n")
                             if t != "[MASK]"), encoding="utf-8")
  no_mask = run_script(f"--input_file={small_corpus}", f"--output_file={out}", f"--vocab_file={vocab}")
  assert no_mask.returncode == 1 and "[MASK]" in no_mask.stderr and str(vocab) in no_mask.stderr
  assert not out.parent.exists() or os.listdir(out.parent) == []


def test_undecodable_input_fails_with_file_and_line_and_leaves_no_output(tmp_path, small_corpus,
                                                                           bert_uncased_vocab_file):
  # The bad line sits in the last of three shards, after the first shards have been appended to the output.
  bad = tmp_path / "bad.txt"
  good = open(small_corpus, "rb").read()
  bad.write_bytes(good + b"\n\nfine line\ncaf\xe9 in latin-1\n")
  line = good.count(b"\n") + 4
  out_dir = tmp_path / "out"
  result = run_script(f"--input_file={bad}", f"--output_file={out_dir}/a.tfrecord,{out_dir}/b.tfrecord",
                      f"--vocab_file={bert_uncased_vocab_file}", "--num_shards=3", "--dupe_factor=1")
  assert result.returncode == 1
  assert f"{bad}:{line}: not valid UTF-8" in result.stderr
  assert not out_dir.exists()  # Neither outputs nor temporaries, nor the folder made for them.


def test_empty_inputs_are_refused_and_tiny_ones_work(tmp_path, bert_uncased_vocab_file):
  empty = tmp_path / "empty.txt"
  empty.write_text("\n\n\n", encoding="utf-8")
  with pytest.raises(ValueError, match="empty.txt: no documents"):
    run_ours(tmp_path, str(empty), bert_uncased_vocab_file, name="empty")
  assert os.listdir(tmp_path) == ["empty.txt"]
  one = tmp_path / "one.txt"
  one.write_text("Just one sentence in one document.\n", encoding="utf-8")
  outputs, stats = run_ours(tmp_path, str(one), bert_uncased_vocab_file, name="one",
                            config=instances.InstanceConfig(dupe_factor=2), reference_compatible=True)
  found = parsed_records(outputs)
  assert len(found) == stats["instances"] == 2 and all(r["next_sentence_labels"] == (1,) for r in found)


# -- Bad inputs as a user meets them: the script run from its folder with relative paths ----------------------


def run_script_in(folder, *args):
  """The script in a fresh process, run from `folder`, with the environment a user has (no quieting)."""
  return subprocess.run([sys.executable, os.path.join(SCRIPTS, "create_pretraining_data.py"), *args],
                        cwd=folder, capture_output=True, text=True)


def assert_one_line_error(result, expected):
  assert result.returncode == 1, result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  assert [line for line in result.stderr.splitlines() if "error" in line.lower()] == [f"error: {expected}"]


@pytest.fixture
def user_folder(tmp_path, monkeypatch):
  """A folder with a tiny vocabulary, a text folder, and corpora that give no records."""
  (tmp_path / "vocab.txt").write_text("".join(f"{t}\n" for t in [*tokenization.SPECIAL_TOKENS, "a", "b"]))
  (tmp_path / "texts").mkdir()
  (tmp_path / "empty.txt").write_bytes(b"")
  (tmp_path / "blank.txt").write_bytes(b"\n \n\t\r\n\n")
  (tmp_path / "control.txt").write_bytes(b"\x00\x01\n\n\x02\n")  # Non-blank lines without a single token.
  (tmp_path / "tiny.txt").write_text("A b.\nB a.\n\nA a.\n")  # Two documents: 2 instances a pass.
  whole = gzip.compress("".join(f"A b {i}.\n" for i in range(5000)).encode(), mtime=0)
  (tmp_path / "cut.txt.gz").write_bytes(whole[:len(whole) // 2])  # a download cut short
  return tmp_path


@pytest.mark.parametrize("input_file,mode,expected", [
    ("empty.txt", "--noreference_compatible", "empty.txt: no documents (the corpus is empty or blank): give one "
     "sentence a line, a blank line between documents; nothing was written"),
    ("blank.txt", "--reference_compatible", "blank.txt: no documents (the corpus is empty or blank): give one "
     "sentence a line, a blank line between documents; nothing was written"),
    ("control.txt", "--noreference_compatible", "control.txt: no instances: no line of the corpus has a token (its "
     "non-blank lines hold only control or unprintable characters, which the tokenizer drops); nothing was "
     "written"),
    ("control.txt", "--reference_compatible", "control.txt: no instances: no line of the corpus has a token (its "
     "non-blank lines hold only control or unprintable characters, which the tokenizer drops); nothing was "
     "written"),
    ("texts", "--noreference_compatible", "--input_file=texts is a directory: give files or globs, e.g. "
     "texts/*.txt"),
    # Issue 40 (6): gzip's EOFError, naming no file, was a traceback.
    ("cut.txt.gz", "--noreference_compatible", "cut.txt.gz: truncated (its gzip stream ends before the end marker: a "
     "copy or download cut short); copy or download it again"),
    ("cut.txt.gz", "--reference_compatible", "cut.txt.gz: truncated (its gzip stream ends before the end marker: a "
     "copy or download cut short); copy or download it again"),
])
def test_inputs_without_records_are_refused_and_nothing_is_written(user_folder, input_file, mode, expected):
  result = run_script_in(user_folder, f"--input_file={input_file}", "--output_file=out/p.tfrecord",
                         "--vocab_file=vocab.txt", "--dupe_factor=1", mode)
  assert_one_line_error(result, expected)
  assert not (user_folder / "out").exists() or os.listdir(user_folder / "out") == []


def test_remote_paths_go_through_gfile(small_corpus, bert_uncased_vocab_file):
  """TensorFlow's in-memory `ram://` filesystem stands in for gs://: any path with a scheme is read and
  written through tf.io.gfile, input, vocabulary, outputs and statistics alike."""
  root = "ram://bert_tf_test"
  tf.io.gfile.makedirs(root)
  tf.io.gfile.copy(small_corpus, f"{root}/corpus.txt", overwrite=True)
  tf.io.gfile.copy(bert_uncased_vocab_file, f"{root}/vocab.txt", overwrite=True)
  run = pretraining_data.RunConfig(
      input_files=(f"{root}/corpus.txt",), output_files=(f"{root}/out/a.tfrecord", f"{root}/out/b.tfrecord"),
      tokenizer=pretraining_data.TokenizerSpec(f"{root}/vocab.txt"), num_shards=2)
  stats = pretraining_data.create_pretraining_data(run, instances.InstanceConfig(dupe_factor=1),
                                                   progress=lambda message: None)
  assert sorted(tf.io.gfile.listdir(f"{root}/out")) == ["a.tfrecord", "a.tfrecord.stats.json", "b.tfrecord"]
  assert len(parsed_records([f"{root}/out/a.tfrecord", f"{root}/out/b.tfrecord"])) == stats["instances"] > 0


def test_library_never_imports_the_comparison_peers():
  """tf-models-official (and its tf_keras) are development-only comparison peers."""
  import re

  offenders = []
  for folder, _, names in os.walk(os.path.join(REPO, "bert_tf")):
    for name in names:
      if name.endswith(".py"):
        text = open(os.path.join(folder, name), encoding="utf-8").read()
        if re.search(r"^\s*(import|from)\s+(official|tf_keras)\b", text, re.M):
          offenders.append(name)
  assert offenders == []


@pytest.mark.parametrize("mode,expected", [
    ("--noreference_compatible", "--output_file names 3 files but the input makes 1 shard(s) (0.00 MB of text at "
     "--shard_size_mb=0.5), and each file gets whole shards: give at most 1 output file(s), or --num_shards=3"),
    ("--reference_compatible", "--output_file: 1 of the 3 output files would hold no record (out/c.tfrecord): the "
     "corpus gives 2 instance(s), dealt round-robin; give at most 2 output file(s); nothing was written"),
])
def test_output_files_that_would_hold_no_record_are_refused(user_folder, mode, expected):
  result = run_script_in(user_folder, "--input_file=tiny.txt", "--vocab_file=vocab.txt", "--dupe_factor=1", mode,
                         "--output_file=out/a.tfrecord,out/b.tfrecord,out/c.tfrecord")
  assert_one_line_error(result, expected)
  assert not (user_folder / "out").exists() or os.listdir(user_folder / "out") == []


# -- A killed run: no process outlives it, and its rerun removes what it left -------------------------------------


def _stat(pid: int) -> list[str] | None:
  """/proc/<pid>/stat's fields after the command name (state, ppid, ...; start time at 19), or None."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      return f.read().decode("utf-8", "replace").rsplit(")", 1)[1].split()
  except OSError:
    return None


def _descendants(root: int) -> dict[int, str]:
  """Every process below `root` now: pid -> its start time."""
  children: dict[int, list[int]] = {}
  for entry in os.listdir("/proc"):
    fields = _stat(int(entry)) if entry.isdigit() else None
    if fields:
      children.setdefault(int(fields[1]), []).append(int(entry))
  found, todo = {}, [root]
  while todo:
    for pid in children.get(todo.pop(), []):
      if (fields := _stat(pid)) is not None:
        found[pid] = fields[19]
        todo.append(pid)
  return found


def _ended_pid() -> int:
  ended = subprocess.Popen(["true"])
  ended.wait()
  return ended.pid


def _running(pid: int, start: str) -> bool:
  fields = _stat(pid)
  return fields is not None and fields[19] == start and fields[0] != "Z"  # a zombie has ended


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_killed_run_leaves_no_process_and_its_rerun_removes_its_temporaries(tmp_path, bert_uncased_vocab_file):
  corpus_file = tmp_path / "corpus.txt"
  corpus_file.write_text(corpus.default_corpus_text(), encoding="utf-8")
  flags = [f"--input_file={corpus_file}", f"--vocab_file={bert_uncased_vocab_file}", "--num_shards=4",
           "--dupe_factor=3", "--num_workers=2"]
  out = tmp_path / "killed"
  command = [sys.executable, os.path.join(SCRIPTS, "create_pretraining_data.py"), *flags,
             f"--output_file={out}/pre.tfrecord"]
  script = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  tree = {}
  try:
    # Killed mid-run: the first shard is written, the workers are on the next ones.
    for line in script.stderr:
      if "shard 1/4" in line:
        break
    tree = _descendants(script.pid)
    workers = [pid for pid in tree if b"spawn_main" in open(f"/proc/{pid}/cmdline", "rb").read()]
    assert len(workers) == 2, (tree, script.poll())
    script.kill()
    # A caller reading the command's output sees its end at once: no process is left holding it.
    script.communicate(timeout=10)
    deadline = time.time() + 5
    while any(_running(pid, start) for pid, start in tree.items()) and time.time() < deadline:
      time.sleep(0.05)
    assert [pid for pid, start in tree.items() if _running(pid, start)] == []
  finally:
    script.kill()
    for pid, start in tree.items():
      if _running(pid, start):
        os.kill(pid, signal.SIGKILL)
  owner = f"{fileio.owner_tag().rsplit('-', 1)[0]}-{script.pid}"
  left = sorted(name for name in os.listdir(out) if not name.endswith(".lock"))
  assert [re.sub(r"tmp-[0-9a-f]{8}", "tmp-<hex>", name) for name in left] == [
      f".pre.tfrecord.shards.tmp-<hex>.{owner}", f".pre.tfrecord.tmp-<hex>.{owner}"]
  # Its output files' locks, which the rerun takes over (the holder is dead).
  assert sorted(name for name in os.listdir(out) if name.endswith(".lock")) == [
      ".pre.tfrecord.lock", ".pre.tfrecord.stats.json.lock"]

  rerun = run_script(*flags, f"--output_file={out}/pre.tfrecord")
  assert rerun.returncode == 0, rerun.stderr[-2000:]
  assert [line.split(" ", 2)[2] for line in rerun.stderr.splitlines() if " removed " in line] == [
      f"removed {out}/{name}, left by process {script.pid} that is no longer running" for name in left]
  assert sorted(os.listdir(out)) == ["pre.tfrecord", "pre.tfrecord.stats.json"]
  whole = run_script(*flags, f"--output_file={tmp_path}/whole/pre.tfrecord")
  assert whole.returncode == 0, whole.stderr[-2000:]
  assert (out / "pre.tfrecord").read_bytes() == (tmp_path / "whole" / "pre.tfrecord").read_bytes()


def test_a_worker_started_by_a_parent_that_is_already_gone_exits_at_once():
  # The kill can come before the worker asks to die with its parent; it then has another parent already.
  code = ("import sys; from bert_tf.data import pretraining_data; "
          "pretraining_data._die_with_parent(int(sys.argv[1])); print('working')")
  for parent, expected in ((os.getpid(), (0, "working\n")), (_ended_pid(), (1, ""))):
    done = subprocess.run([sys.executable, "-c", code, str(parent)], capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == expected, done.stderr[-2000:]


def test_a_second_run_writing_the_same_output_is_refused_naming_the_first_whose_lock_dies_with_it(
    tmp_path, bert_uncased_vocab_file):
  """Issue 40 (8): two runs to one --output_file both exited 0, the last rename winning. The first, stopped while it
  holds the output's lock, refuses the second in one line naming it; killed, its lock is taken over by the next."""
  import socket

  from bert_tf.training import run_lock

  corpus_file = tmp_path / "corpus.txt"
  corpus_file.write_text(corpus.default_corpus_text(), encoding="utf-8")
  flags = [f"--input_file={corpus_file}", f"--vocab_file={bert_uncased_vocab_file}", "--dupe_factor=3",
           "--output_file=out/pre.tfrecord"]
  lock = tmp_path / "out" / ".pre.tfrecord.lock"
  first = subprocess.Popen([sys.executable, os.path.join(SCRIPTS, "create_pretraining_data.py"), *flags],
                           cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    deadline = time.time() + 60
    while not lock.exists():  # taken before the work: the corpus takes seconds more
      assert first.poll() is None and time.time() < deadline, "the first run ended without holding the lock"
      time.sleep(0.005)
    os.kill(first.pid, signal.SIGSTOP)
    assert first.poll() is None and not (tmp_path / "out" / "pre.tfrecord").exists()
    holder = json.loads(lock.read_text())
    assert (holder["host"], holder["pid"]) == (socket.gethostname(), first.pid)
    second = run_script_in(tmp_path, *flags)
    assert_one_line_error(second, f"{tmp_path}/out/pre.tfrecord is in use by another run "
                                  f"({run_lock.RunLock.describe(holder)}); wait for it to end or give another "
                                  f"--output_file. If that run is dead, delete {lock}")
  finally:
    first.kill()
    first.wait()
  third = run_script_in(tmp_path, *flags)
  assert third.returncode == 0, third.stderr[-2000:]
  assert f"taking over the lock of a run that is no longer alive (host {socket.gethostname()}, pid {first.pid}, " \
         in third.stderr
  assert sorted(os.listdir(tmp_path / "out")) == ["pre.tfrecord", "pre.tfrecord.stats.json"]
