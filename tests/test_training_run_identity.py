"""bert_tf.training.run_identity: what a run is, recorded in its --output_dir; a rerun that would change it is
refused, more epochs resume, --overwrite_output_dir starts over. The library alone here; each task's wiring in
the later tests (SQuAD, NER, SWAG, pretraining stopped right after the check), and scripts/run_classifier.py as a
user runs it (the issue's spam/ham rerun) at the end."""

import concurrent.futures
import hashlib
import json
import os
import shutil

import pytest

import training_helpers as th
from bert_tf.training import run_identity as ri


def _identity(**changes):
  settings = {"train_file": None, "labels": ["ham", "spam"], "learning_rate": 5e-05, "seed": 7,
              "bert_config": {"hidden_size": 18, "num_hidden_layers": 1}, "do_lower_case": True}
  settings.update(changes)
  return ri.RunIdentity("classifier", settings, {"num_train_epochs": 3.0})


def _trained(output_dir):
  """Gives `output_dir` the mark of saved weights: TensorFlow's checkpoint state file."""
  os.makedirs(os.path.join(output_dir, "checkpoints"), exist_ok=True)
  with open(os.path.join(output_dir, "checkpoints", "checkpoint"), "w") as f:
    f.write('model_checkpoint_path: "ckpt-2"\n')


def test_file_entries_name_the_content(tmp_path, monkeypatch):
  data = tmp_path / "train.csv"
  data.write_bytes(b"sentence1,label\nfree money,spam\n")
  entry = ri.file_entry(str(data))
  assert entry == {"path": str(data), "bytes": 32, "sha256": hashlib.sha256(data.read_bytes()).hexdigest()}
  assert ri.file_entry(None) is None
  # Above WHOLE_FILE_BYTES only the size and the first and last MiB are read.
  big = tmp_path / "big.tfrecord"
  big.write_bytes(b"a" * (3 << 20))
  assert "sampled" not in ri.file_entry(str(big))
  monkeypatch.setattr(ri, "WHOLE_FILE_BYTES", 1 << 20)
  assert ri.file_entry(str(big)) == {"path": str(big), "bytes": 3 << 20, "sampled": True,
                                     "sha256": hashlib.sha256(b"a" * (2 << 20)).hexdigest()}
  shards = [str(tmp_path / name) for name in ("a.rec", "b.rec")]
  for i, path in enumerate(shards):
    with open(path, "wb") as f:
      f.write(b"x" * (i + 1))
  entry = ri.files_entry(str(tmp_path / "*.rec"), shards)
  expected = hashlib.sha256(b"a.rec\t1:" + hashlib.sha256(b"x").hexdigest().encode() + b"\nb.rec\t2:"
                            + hashlib.sha256(b"xx").hexdigest().encode() + b"\n").hexdigest()
  assert entry == {"path": str(tmp_path / "*.rec"), "files": 2, "bytes": 3, "sha256": expected}


def test_init_checkpoint_names_are_absolute_and_released_names_kept(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  assert ri.checkpoint_name("out/pretrain/") == str(tmp_path / "out" / "pretrain")
  assert ri.checkpoint_name("hf:sentence-transformers/all-MiniLM-L6-v2") == "hf:sentence-transformers/all-MiniLM-L6-v2"
  assert ri.checkpoint_name("gs://bucket/model") == "gs://bucket/model"
  assert ri.checkpoint_name(None) is None


def test_differences_name_each_setting_old_and_new(tmp_path):
  old = _identity(train_file={"path": "/d/train.csv", "bytes": 33, "sha256": "ab" * 32}).as_json()
  new = _identity(labels=("spam", "ham"), learning_rate=3e-05, do_lower_case=False,
                  bert_config={"hidden_size": 24, "num_hidden_layers": 1},
                  train_file={"path": "/d/train.csv", "bytes": 31, "sha256": "cd" * 32}, added_later=1)
  assert ri.differences(old, new) == [
      f"train_file: /d/train.csv (33 bytes, sha256 {'ab' * 6}) -> /d/train.csv (31 bytes, sha256 {'cd' * 6})",
      "labels: ham,spam -> spam,ham", "learning_rate: 5e-05 -> 3e-05", "bert_config.hidden_size: 18 -> 24",
      "do_lower_case: true -> false"]
  # The same content elsewhere is the same input; a name only one side has (another bert_tf version) is not
  # compared; another task is named.
  moved = _identity(train_file={"path": "/e/train.csv", "bytes": 33, "sha256": "ab" * 32})
  assert ri.differences(old, moved) == []
  assert ri.differences(old, ri.RunIdentity("squad", moved.settings)) == ["task: classifier -> squad"]
  assert ri.differences(_identity(init_checkpoint=None).as_json(), _identity(init_checkpoint="/m")) == [
      "init_checkpoint: none -> /m"]


def test_a_fresh_run_is_recorded_and_the_same_rerun_passes(tmp_path):
  out = str(tmp_path / "out")
  said = []
  ri.start_run(out, _identity(), chief=True, say=said.append)
  record = json.loads((tmp_path / "out" / ri.RECORD_NAME).read_text())
  assert (record["format"], record["task"], record["resumable"]) == (1, "classifier", {"num_train_epochs": 3.0})
  assert record["settings"] == json.loads(json.dumps(dict(_identity().settings)))
  assert said == []
  _trained(out)
  ri.start_run(out, _identity(), chief=True, say=said.append)
  assert said == []
  # A worker of a multi-worker job checks and does not write.
  os.remove(tmp_path / "out" / ri.RECORD_NAME)
  ri.start_run(out, _identity(), chief=False, say=said.append)
  assert not (tmp_path / "out" / ri.RECORD_NAME).exists()


def test_a_rerun_with_other_settings_is_refused_in_one_line_and_changes_nothing(tmp_path):
  out = str(tmp_path / "out")
  ri.start_run(out, _identity(), chief=True)
  _trained(out)
  before = (tmp_path / "out" / ri.RECORD_NAME).read_bytes()
  with pytest.raises(ri.RunChanged) as error:
    ri.start_run(out, _identity(labels=["spam", "ham"], seed=8), chief=True)
  assert str(error.value) == (
      f"{out} holds a run trained with other settings (labels: ham,spam -> spam,ham; seed: 7 -> 8); give another "
      "--output_dir to keep that run, or pass --overwrite_output_dir to start over there")
  assert isinstance(error.value, ValueError) and "\n" not in str(error.value)
  assert (tmp_path / "out" / ri.RECORD_NAME).read_bytes() == before


def test_more_epochs_resume_and_say_so_and_moved_inputs_are_said(tmp_path):
  out = str(tmp_path / "out")
  first, moved = tmp_path / "a.csv", tmp_path / "b.csv"
  for path in (first, moved):
    path.write_text("sentence1,label\nhi,ham\n")
  ri.start_run(out, _identity(train_file=ri.file_entry(str(first))), chief=True)
  _trained(out)
  said = []
  longer = ri.RunIdentity("classifier", _identity(train_file=ri.file_entry(str(moved))).settings,
                          {"num_train_epochs": 5.0})
  ri.start_run(out, longer, chief=True, say=said.append)
  assert said == [f"{out}: train_file: {first} -> {moved} (the same content)",
                  f"num_train_epochs: 3.0 -> 5.0: the run in {out} continues from its last checkpoint"]
  assert json.loads((tmp_path / "out" / ri.RECORD_NAME).read_text())["resumable"] == {"num_train_epochs": 5.0}
  # Another content at the same path is another run.
  moved.write_text("sentence1,label\nhi,spam\n")
  with pytest.raises(ri.RunChanged, match=r"train_file: .*b\.csv \(23 bytes, sha256 [0-9a-f]{12}\) -> .*b\.csv \(24 "):
    ri.start_run(out, _identity(train_file=ri.file_entry(str(moved))), chief=True)


def test_a_record_without_weights_binds_nothing_and_an_old_run_is_adopted(tmp_path):
  out = str(tmp_path / "out")
  ri.start_run(out, _identity(), chief=True)  # stopped before its first checkpoint
  said = []
  ri.start_run(out, _identity(learning_rate=1e-4), chief=True, say=said.append)
  assert said == [f"{out}: the run recorded there saved no weights yet; starting over with other settings "
                  "(learning_rate: 5e-05 -> 0.0001)"]
  assert json.loads((tmp_path / "out" / ri.RECORD_NAME).read_text())["settings"]["learning_rate"] == 1e-4
  # A run directory from before run records: its checkpoints are taken as this run's, and it is recorded.
  old = str(tmp_path / "old")
  _trained(old)
  said.clear()
  ri.start_run(old, _identity(), chief=True, say=said.append)
  assert said == [f"{old}: a run from before run records (no run.json): taken as this run and resumed; its "
                  "settings are recorded now"]
  assert (tmp_path / "old" / ri.RECORD_NAME).exists()
  # A model folder counts as weights too.
  os.makedirs(tmp_path / "model_only" / "classifier")
  ri.start_run(str(tmp_path / "model_only"), _identity(), chief=True)
  with pytest.raises(ri.RunChanged, match="seed: 7 -> 9"):
    ri.start_run(str(tmp_path / "model_only"), _identity(seed=9), chief=True, model_dirs=("classifier",))


def test_a_damaged_record_is_named(tmp_path):
  (tmp_path / ri.RECORD_NAME).write_text("{not json")
  with pytest.raises(ValueError, match=rf"{tmp_path / ri.RECORD_NAME}: not a run record bert_tf wrote .*pass "
                                       "--overwrite_output_dir to start the run over, or another --output_dir"):
    ri.start_run(str(tmp_path), _identity(), chief=True)
  ri.start_run(str(tmp_path), _identity(), overwrite=True, chief=True)  # starting over replaces it
  assert ri.read(str(tmp_path))["task"] == "classifier"


def test_overwrite_removes_what_runs_wrote_and_keeps_the_rest(tmp_path):
  out = tmp_path / "out"
  ri.start_run(str(out), _identity(), chief=True)
  _trained(str(out))
  for name in ("classifier", "best", "train", "runs/lr1e-05-seed7"):
    os.makedirs(out / name)
  for name in ("eval_results.txt", "MRPC.tsv", "notes.txt", ".lock"):
    (out / name).write_text("x")
  said = []
  ri.start_run(str(out), _identity(seed=9), overwrite=True, chief=True, outputs=("runs", "MRPC.tsv"),
               model_dirs=("classifier",), say=said.append)
  assert said == [f"--overwrite_output_dir: removed MRPC.tsv, best, checkpoints, classifier, eval_results.txt, "
                  f"run.json, runs, train from {out}; kept notes.txt (not written by a run)"]
  assert sorted(os.listdir(out)) == [".lock", "notes.txt", "run.json"]
  assert ri.read(str(out))["settings"]["seed"] == 9
  # Nothing there to remove: nothing said.
  said.clear()
  ri.start_run(str(tmp_path / "new"), _identity(), overwrite=True, chief=True, say=said.append)
  assert said == []


def test_overwrite_refuses_to_remove_an_input_or_to_race_other_workers(tmp_path, monkeypatch):
  out = tmp_path / "out"
  os.makedirs(out / "classifier")
  with pytest.raises(ValueError) as error:
    ri.start_run(str(out), _identity(), overwrite=True, chief=True, model_dirs=("classifier",),
                 inputs=[str(out / "classifier/"), None, "hf:bert-base-uncased"])
  assert str(error.value) == (f"{out / 'classifier'} (an input of this run) lies in {out / 'classifier'}, which "
                              "--overwrite_output_dir would remove; copy it elsewhere first, or give another "
                              "--output_dir")
  assert os.path.isdir(out / "classifier")
  cluster = {"worker": ["a:1", "b:2"]}
  monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": cluster, "task": {"type": "worker", "index": 1}}))
  with pytest.raises(ValueError, match=rf"--overwrite_output_dir with several workers: they share {out}; remove the "
                                       "earlier run's classifier there before starting the job"):
    ri.start_run(str(out), _identity(), overwrite=True, model_dirs=("classifier",))
  # A worker removes nothing, and writes no record, where there is nothing but a record to remove.
  shutil.rmtree(out / "classifier")
  ri.write(str(out), _identity())
  ri.start_run(str(out), _identity(), overwrite=True)
  assert os.listdir(out) == ["run.json"]


def test_an_output_dir_that_is_a_file_is_named(tmp_path):
  (tmp_path / "file").write_text("x")
  with pytest.raises(ValueError) as error:
    ri.check_output_dir(str(tmp_path / "file"))
  assert str(error.value) == (f"--output_dir={tmp_path / 'file'} is a file, not a folder; give a folder (created if "
                              "missing)")
  with pytest.raises(ValueError, match=rf"--output_dir={tmp_path / 'file'}/out lies under {tmp_path / 'file'}, which "
                                       "is a file, not a folder"):
    ri.check_output_dir(str(tmp_path / "file" / "out"))
  ri.check_output_dir(str(tmp_path / "new" / "out"))  # missing folders are made later
  ri.check_output_dir("gs://bucket/out")
