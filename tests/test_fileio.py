"""Tests for bert_tf.fileio: checks of outputs against inputs (in process and through the data scripts), and the
temporaries of killed writers."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys

import pytest

import training_helpers as th
from bert_tf import fileio

DESTROYS = "writing it would destroy the input; give another"


def _corpus(tmp_path):
  """corpus/c.txt, a vocabulary, and links to both spellings a user may have: link.txt -> corpus/c.txt,
  linked/ -> corpus/."""
  (tmp_path / "corpus").mkdir()
  (tmp_path / "corpus" / "c.txt").write_text("the cat sat .\nit ran .\n\na dog .\n")
  (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
  os.symlink(tmp_path / "corpus" / "c.txt", tmp_path / "link.txt")
  os.symlink(tmp_path / "corpus", tmp_path / "linked")


def test_an_output_that_resolves_to_an_input_is_refused_naming_both_flags(tmp_path, monkeypatch):
  _corpus(tmp_path)
  monkeypatch.chdir(tmp_path)
  corpus = str(tmp_path / "corpus" / "c.txt")
  for output, inputs, flag, shown in [
      ("corpus/c.txt", {"input_file": corpus}, "input_file", corpus),  # relative against absolute
      ("link.txt", {"input_file": "corpus/c.txt"}, "input_file", "corpus/c.txt"),  # a link to the input
      ("linked/c.txt", {"input_file": "corpus/c.txt"}, "input_file", "corpus/c.txt"),  # through a linked folder
      ("corpus/../corpus/./c.txt", {"input_file": "a.txt,corpus/*.txt"}, "input_file", "corpus/c.txt"),
      ("vocab.txt", {"input_file": "corpus/c.txt", "vocab_file": [str(tmp_path / "vocab.txt")]}, "vocab_file",
       str(tmp_path / "vocab.txt")),
      ("gs://bucket/data//./x/../c.txt", {"input_file": "GS://bucket/data/c.txt"}, "input_file",
       "GS://bucket/data/c.txt"),
      ("gs://bucket/data/c.txt", {"input_file": "gs://bucket/other.txt,gs://bucket/data/*.txt"}, "input_file",
       "gs://bucket/data/*.txt")]:
    with pytest.raises(ValueError) as caught:
      fileio.check_not_input("output_file", output, inputs)
    assert str(caught.value) == f"--output_file={output} is --{flag}'s {shown}: {DESTROYS} --output_file"
  for output, inputs in [
      ("corpus/d.txt", {"input_file": "corpus/c.txt"}),
      ("gs://bucket/data/sub/c.txt", {"input_file": "gs://bucket/data/*.txt"}),  # a remote * stays in its folder
      ("corpus/c.txt", {"input_file": None, "init_checkpoint": ["hf:corpus/c.txt", None]}),  # nothing to read
      (None, {"input_file": "corpus/c.txt"})]:
    fileio.check_not_input("output_file", output, inputs)


def test_a_folder_replaced_whole_must_not_hold_an_input(tmp_path):
  _corpus(tmp_path)
  inputs = {"input": str(tmp_path / "linked" / "c.txt")}
  fileio.check_not_input("output_dir", str(tmp_path / "corpus"), inputs)  # added to, not replaced: not refused
  for output, verb in ((tmp_path / "corpus", "holds"), (tmp_path, "holds"), (tmp_path / "link.txt", "is")):
    with pytest.raises(ValueError) as caught:
      fileio.check_not_input("output_dir", str(output), inputs, replaces="--overwrite_output_dir")
    assert str(caught.value) == (f"--output_dir={output} {verb} --input's {tmp_path}/linked/c.txt, which "
                                 "--overwrite_output_dir would remove; give another --output_dir")
  assert fileio.find_input(str(tmp_path / "corpus"), inputs, inside=True) == ("input", inputs["input"], False)


def test_an_output_file_that_is_a_folder_or_under_a_file_is_refused_up_front(tmp_path):
  _corpus(tmp_path)
  with pytest.raises(IsADirectoryError, match=r"^--vocab_file=.*/corpus is a folder; give the name of a file to "
                                              r"write \(in it or elsewhere\)$"):
    fileio.check_output_file("vocab_file", str(tmp_path / "corpus"))
  with pytest.raises(NotADirectoryError) as caught:
    fileio.check_output_file("output_file", str(tmp_path / "vocab.txt" / "new" / "out.tfrecord"))
  assert str(caught.value) == (f"--output_file={tmp_path}/vocab.txt/new/out.tfrecord lies under "
                               f"{tmp_path}/vocab.txt, which is a file; give a path in a folder")
  for fine in (tmp_path / "new" / "deeper" / "out.tfrecord", tmp_path / "vocab.txt"):
    fileio.check_output_file("output_file", str(fine))
  # Of a remote path only that its store answers is checked (test_gcs.py): ram:// always does.
  fileio.check_output_file("output_file", "ram://bucket/folder/out.tfrecord")


# Each refused before any work, and before TensorFlow loads: the scripts run with a `tensorflow` that fails to import.
SCRIPT_CASES = [
    ("create_pretraining_data", ["--input_file=corpus/*.txt", "--output_file=corpus/../corpus/c.txt"],
     f"--output_file=corpus/../corpus/c.txt is --input_file's corpus/c.txt: {DESTROYS} --output_file"),
    ("create_pretraining_data", ["--input_file={tmp}/corpus/c.txt", "--output_file=out.tfrecord,link.txt"],
     f"--output_file=link.txt is --input_file's {{tmp}}/corpus/c.txt: {DESTROYS} --output_file"),
    ("create_pretraining_data", ["--input_file=corpus/c.txt", "--output_file=out.tfrecord", "--stats_file=vocab.txt"],
     f"--stats_file=vocab.txt is --vocab_file's vocab.txt: {DESTROYS} --stats_file"),
    ("create_pretraining_data", ["--input_file=corpus/c.txt", "--output_file=corpus"],
     "--output_file=corpus is a folder; give the name of a file to write (in it or elsewhere)"),
    ("learn_vocab", ["--input_file=other.txt,corpus/c.txt", "--vocab_file=linked/c.txt"],
     f"--vocab_file=linked/c.txt is --input_file's corpus/c.txt: {DESTROYS} --vocab_file"),
    ("learn_vocab", ["--input_file=corpus/c.txt", "--vocab_file=linked"],
     "--vocab_file=linked is a folder; give the name of a file to write (in it or elsewhere)"),
    ("extract_features", ["--input_file={tmp}/corpus/c.txt", "--output_file=./corpus/c.txt"],
     f"--output_file=./corpus/c.txt is --input_file's {{tmp}}/corpus/c.txt: {DESTROYS} --output_file"),
    ("extract_features", ["--input_file=corpus/c.txt", "--output_file=corpus"],
     "--output_file=corpus is a folder; give the name of a file to write (in it or elsewhere)"),
]


@pytest.mark.parametrize("script, flags, message", SCRIPT_CASES)
def test_data_scripts_refuse_an_output_that_is_an_input_before_any_work(tmp_path, script, flags, message):
  work = tmp_path / "work"
  work.mkdir()
  _corpus(work)
  fake = tmp_path / "no_tensorflow" / "tensorflow"
  fake.mkdir(parents=True)
  (fake / "__init__.py").write_text("raise ImportError('TensorFlow loaded before the check')\n")
  extra = {"create_pretraining_data": ["--vocab_file=vocab.txt"], "learn_vocab": [],
           "extract_features": ["--init_checkpoint=model"]}[script]
  before = {path: path.read_bytes() for path in work.rglob("*") if path.is_file()}
  env = th.python_env()
  env["PYTHONPATH"] = os.pathsep.join([str(tmp_path / "no_tensorflow"), env["PYTHONPATH"]])
  done = subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", f"{script}.py"),
                         *(flag.format(tmp=work) for flag in flags), *extra],
                        cwd=work, env=env, capture_output=True, text=True, timeout=120)
  assert (done.returncode, done.stderr.strip().splitlines()[-1]) == (1, f"error: {message.format(tmp=work)}"), \
      done.stderr[-3000:]
  # Every input byte for byte, and nothing written beside them (no output, no temporary).
  assert {path: path.read_bytes() for path in work.rglob("*") if path.is_file()} == before


# -- Temporaries of killed writers ------------------------------------------------------------------------------


def _ended_pid() -> int:
  """The pid of a process of this machine that has ended (and been reaped)."""
  ended = subprocess.Popen(["true"])
  ended.wait()
  return ended.pid


def test_remove_dead_temporaries_removes_a_dead_writers_only_and_logs_each(tmp_path, caplog):
  pid, machine = _ended_pid(), fileio.owner_tag().rsplit("-", 1)[0]
  dead = f"{machine}-{pid}"
  (tmp_path / f".a.tfrecord.tmp-01234567.{dead}").write_bytes(b"x" * 100)
  (tmp_path / f".a.tfrecord.shards.tmp-89abcdef.{dead}").mkdir()
  (tmp_path / f".a.tfrecord.shards.tmp-89abcdef.{dead}" / "shard00000.tfrecord").write_bytes(b"x")
  (tmp_path / f".train-0123456789ab.tfrecord.tmp-00ff00ff.{dead}").write_bytes(b"x")  # another output's
  kept = [f".a.tfrecord.tmp-0123abcd.{fileio.owner_tag()}",  # this live process's
          f".a.tfrecord.tmp-01234567.owner-00000000-{pid}",  # another machine's
          ".a.tfrecord.tmp-01234567",  # no owner: not known to be dead
          f"a.tfrecord.{dead}", "a.tfrecord"]  # not hidden: not a temporary
  for name in kept:
    (tmp_path / name).write_text("x")
  with caplog.at_level(logging.WARNING, logger="bert_tf.fileio"):
    removed = fileio.remove_dead_temporaries(str(tmp_path))
  assert removed == [str(tmp_path / name) for name in (
      f".a.tfrecord.shards.tmp-89abcdef.{dead}", f".a.tfrecord.tmp-01234567.{dead}",
      f".train-0123456789ab.tfrecord.tmp-00ff00ff.{dead}")]
  assert caplog.messages == [f"removed {path}, left by process {pid} that is no longer running" for path in removed]
  assert sorted(os.listdir(tmp_path)) == sorted(kept)
  assert fileio.remove_dead_temporaries(str(tmp_path / "absent")) == []


def test_temporary_names_carry_their_owner_and_making_one_removes_dead_ones(tmp_path):
  left = tmp_path / f".b.txt.tmp-01234567.{fileio.owner_tag().rsplit('-', 1)[0]}-{_ended_pid()}"
  left.write_text("x")
  temp = fileio.temp_path_for(str(tmp_path / "b.txt"))
  assert re.fullmatch(rf"{tmp_path}/\.b\.txt\.tmp-[0-9a-f]{{8}}\.{fileio.owner_tag()}", temp)
  assert fileio.TEMP_NAME.match(os.path.basename(temp)) and not left.exists()
  fileio.write_text_atomic(str(tmp_path / "b.txt"), "b\n")
  assert os.listdir(tmp_path) == ["b.txt"]
