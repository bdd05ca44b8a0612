"""bert_tf.training.run_identity: what a run is, recorded in its --output_dir; a rerun that would change it is
refused, more epochs resume, --overwrite_output_dir starts over. The library alone here; each task's wiring in
the later tests (SQuAD, NER, SWAG, pretraining stopped right after the check), and scripts/run_classifier.py as a
user runs it (the issue's spam/ham rerun) at the end."""

import concurrent.futures
import hashlib
import json
import os
import re
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


def test_init_checkpoints_are_recorded_by_content_under_the_path_as_given(tmp_path, monkeypatch):
  """What --init_checkpoint resolves to, by content: the same weights named from another working directory, or
  copied elsewhere, are the same; other weights at the same path are not. Released names are kept as given."""
  import tensorflow as tf

  monkeypatch.chdir(tmp_path)
  tf.train.Checkpoint(v=tf.Variable([1.0, 2.0])).write(str(tmp_path / "pretrain" / "encoder_checkpoint" / "encoder"))
  entry = ri.checkpoint_entry("pretrain/")
  assert (entry["path"], entry["files"]) == ("pretrain", 2)
  shutil.copytree(tmp_path / "pretrain", tmp_path / "copy")
  monkeypatch.chdir(tmp_path / "copy")
  assert ri.differences(ri.RunIdentity("t", {"init_checkpoint": entry}).as_json(),
                        ri.RunIdentity("t", {"init_checkpoint": ri.checkpoint_entry(".")})) == []
  # A record written before content identity holds the absolute path: the same path is the same checkpoint.
  assert ri.differences({"settings": {"init_checkpoint": str(tmp_path / "pretrain")}},
                        ri.RunIdentity("t", {"init_checkpoint": ri.checkpoint_entry("../pretrain")})) == []
  tf.train.Checkpoint(v=tf.Variable([1.0, 3.0])).write(str(tmp_path / "copy" / "encoder_checkpoint" / "encoder"))
  changed = ri.checkpoint_entry(".")
  assert ri.differences(ri.RunIdentity("t", {"init_checkpoint": entry}).as_json(),
                        ri.RunIdentity("t", {"init_checkpoint": changed})) == [
      f"init_checkpoint: pretrain (2 files, {entry['bytes']} bytes, sha256 {entry['sha256'][:12]}) -> . (2 files, "
      f"{changed['bytes']} bytes, sha256 {changed['sha256'][:12]})"]
  (tmp_path / "hf").mkdir()  # another form (a Hugging Face folder): the files in it
  for name, text in (("config.json", "{}"), ("model.safetensors", "w")):
    (tmp_path / "hf" / name).write_text(text)
  assert ri.checkpoint_entry(str(tmp_path / "hf"))["files"] == 2
  assert ri.checkpoint_entry("hf:sentence-transformers/all-MiniLM-L6-v2") == "hf:sentence-transformers/all-MiniLM-L6-v2"
  assert ri.checkpoint_entry(str(tmp_path / "none")) == str(tmp_path / "none")
  assert ri.checkpoint_entry(None) is None


def test_paths_are_recorded_relative_to_the_output_dir_under_it_else_as_given(tmp_path, monkeypatch):
  """Issue 40 (8): no absolute path in run.json; a rerun from another working directory is the same run."""
  monkeypatch.chdir(tmp_path)
  os.makedirs("out/data")
  for name in ("out/data/train.csv", "vocab.txt"):
    (tmp_path / name).write_text("x\n")
  identity = _identity(train_file=ri.file_entry("out/data/train.csv"), vocab_file=ri.file_entry("vocab.txt"),
                       shards=ri.files_entry(f"{tmp_path}/out/data/*.csv,gs://b/*.rec", []))
  ri.start_run("out", identity, chief=True)
  settings = json.loads((tmp_path / "out" / ri.RECORD_NAME).read_text())["settings"]
  assert (settings["train_file"]["path"], settings["vocab_file"]["path"], settings["shards"]["path"]) == (
      "data/train.csv", "vocab.txt", "data/*.csv,gs://b/*.rec")
  assert str(tmp_path) not in (tmp_path / "out" / ri.RECORD_NAME).read_text()
  _trained("out")
  os.makedirs("elsewhere")
  monkeypatch.chdir(tmp_path / "elsewhere")
  said = []
  ri.start_run("../out", _identity(train_file=ri.file_entry("../out/data/train.csv"),
                                   vocab_file=ri.file_entry("../vocab.txt"), shards=identity.settings["shards"]),
               chief=True, say=said.append)
  assert said == [f"{tmp_path / 'out'}: vocab_file: vocab.txt -> ../vocab.txt (the same content)"]


def test_a_run_refused_before_it_saves_weights_withdraws_its_record(tmp_path):
  out = tmp_path / "out"
  recorded = ri.start_run(str(out), _identity(), chief=True)
  assert recorded.withdraw() and os.listdir(out) == []  # a fresh run: no record left
  ri.start_run(str(out), _identity(), chief=True)
  _trained(str(out))
  before = (out / ri.RECORD_NAME).read_text()
  longer = ri.RunIdentity("classifier", _identity().settings, {"num_train_epochs": 5.0})
  recorded = ri.start_run(str(out), longer, chief=True)
  assert ri.read(str(out))["resumable"] == {"num_train_epochs": 5.0}
  assert recorded.withdraw() and (out / ri.RECORD_NAME).read_text() == before  # the earlier record, as it was
  recorded = ri.start_run(str(out), longer, chief=True)
  (out / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-3"\n')  # it saved weights since
  assert not recorded.withdraw() and ri.read(str(out))["resumable"] == {"num_train_epochs": 5.0}
  assert ri.start_run(str(out), longer, chief=False) is None  # a worker writes nothing


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
                 inputs={"init_checkpoint": [str(out / "classifier/")], "vocab_file": [None],
                         "bert_config_file": ["hf:bert-base-uncased"]})
  assert str(error.value) == (f"--init_checkpoint's {out / 'classifier/'} is {out / 'classifier'}, which "
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


def test_an_input_is_never_among_what_a_run_writes_or_removes(tmp_path):
  """Issue 40 (1): a run's input that is, or lies in, an entry of --output_dir the run writes is refused before any
  work, however it is spelled; an input elsewhere in the folder (--data_dir or --init_checkpoint's folder given as
  --output_dir) stays, --overwrite_output_dir included."""
  out = tmp_path / "out"
  _trained(str(out))
  for name in ("checkpoints/ckpt-2.index", "train.tsv", "dev.tsv", "test_predictions.csv", "classifier/model.index"):
    (out / name).parent.mkdir(parents=True, exist_ok=True)
    (out / name).write_text(name)
  os.symlink(out, tmp_path / "link")
  names = (*ri.COMMON_OUTPUTS, "test_predictions.csv", "classifier")
  # A data file that a prediction would replace, without training.
  with pytest.raises(ValueError) as error:
    ri.check_inputs_kept(str(out), names, {"test_file": [str(tmp_path / "link" / "test_predictions.csv")]},
                         inside=False)
  assert str(error.value) == (f"--test_file's {tmp_path}/link/test_predictions.csv is {out}/test_predictions.csv, "
                              "which this run writes; copy it elsewhere first, or give another --output_dir")
  # Without training, the model folder a run evaluates is read only.
  ri.check_inputs_kept(str(out), ("eval_results.txt",), {"init_checkpoint": [str(out / "classifier")]}, inside=False)
  # Training from a checkpoint the run's own checkpoints/ holds (through a link): refused, and with
  # --overwrite_output_dir before anything is removed.
  for overwrite, what in ((False, "this run writes"), (True, "--overwrite_output_dir would remove")):
    with pytest.raises(ValueError) as error:
      ri.start_run(str(out), _identity(), overwrite=overwrite, chief=True, outputs=("test_predictions.csv",),
                   inputs={"init_checkpoint": [str(tmp_path / "link"), str(tmp_path / "link/checkpoints/ckpt-2.*")]})
    assert str(error.value) == (f"--init_checkpoint's {tmp_path}/link/checkpoints/ckpt-2.index lies in "
                                f"{out}/checkpoints, which {what}; copy it elsewhere first, or give another "
                                "--output_dir")
    assert (out / "checkpoints" / "ckpt-2.index").exists() and not (out / "run.json").exists()
  # --output_dir equal to --data_dir: starting over removes what runs wrote, never the data.
  ri.start_run(str(out), _identity(), overwrite=True, chief=True, model_dirs=("classifier",),
               inputs={"data_dir": [str(out / "train.tsv"), str(out / "dev.tsv")]})
  assert sorted(os.listdir(out)) == ["dev.tsv", "run.json", "test_predictions.csv", "train.tsv"]
  assert (out / "train.tsv").read_text() == "train.tsv"


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


# -- Each task's run checks before any work: stopped where it makes its tokenizer ----------------------------------


class _Stop(Exception):
  """Raised where the driver makes a run's tokenizer, just after its check of the output dir: nothing is read
  beyond the inputs' checks, and nothing is trained. Not a user error: the record stays."""


@pytest.fixture
def stopped(monkeypatch):
  from bert_tf.training import driver

  def stop(self):
    raise _Stop

  monkeypatch.setattr(driver.TaskRun, "tokenizer", stop)


def _finetuning(tmp_path, **changes):
  import dataclasses

  from bert_tf.training import finetuning

  fields = dict(output_dir=str(tmp_path / "out"), bert_config=dataclasses.replace(
      th.tiny_bert_config(), max_position_embeddings=48), train_batch_size=4, learning_rate=1e-3,
      num_train_epochs=1.0, distribution_strategy="one_device")
  return finetuning.FinetuningConfig(**{**fields, **changes})


def _refused_then_resumed(run, make, out, change, expected):
  """run(make()) records its run and stops at its tokenizer; as if it had saved a checkpoint, run(make(**change))
  is refused naming `expected`, and run(make(num_train_epochs=2.0)) passes the check and says it continues."""
  with pytest.raises(_Stop):
    run(make(), say=lambda line: None)
  _trained(str(out))
  with pytest.raises(ri.RunChanged) as error:
    run(make(**change), say=lambda line: None)
  assert f"{out} holds a run trained with other settings ({expected}); give another --output_dir" in str(error.value)
  said = []
  with pytest.raises(_Stop):
    run(make(num_train_epochs=2.0), say=said.append)
  assert f"num_train_epochs: 1.0 -> 2.0: the run in {out} continues from its last checkpoint" in said
  assert ri.read(str(out))["resumable"] == {"num_train_epochs": 2.0}


def test_glue_selection_records_the_selection_and_each_run(tmp_path, stopped):
  """A GLUE task under the selection protocol: <output_dir> records the learning rates and restarts, each run below
  runs/ its own learning rate and seed; another list of rates is refused before any run trains."""
  from bert_tf.tasks.classification import run as classifier_run
  from test_classification_run import write_mrpc

  data = write_mrpc(tmp_path / "MRPC")
  vocab = th.write_vocab(tmp_path)

  def make(rates=(3e-3, 1e-3), **changes):
    return classifier_run.ClassifierConfig(
        task_name="MRPC", data_dir=data, vocab_file=vocab, finetuning=_finetuning(tmp_path, seed=7, **changes),
        do_train=True, do_eval=True, max_seq_length=21, learning_rates=rates, num_restarts=2)

  _refused_then_resumed(classifier_run.run_classifier, make, tmp_path / "out", {"rates": (3e-3,)},
                        "learning_rates: 0.003,0.001 -> 0.003")
  top = ri.read(str(tmp_path / "out"))["settings"]
  assert (top["task_name"], top["labels"], top["learning_rates"], top["num_restarts"]) == (
      "MRPC", ["0", "1"], [3e-3, 1e-3], 2) and "learning_rate" not in top
  assert sorted(os.listdir(tmp_path / "out" / "runs")) == ["lr0.001-seed7", "lr0.001-seed8", "lr0.003-seed7",
                                                          "lr0.003-seed8"]
  run = ri.read(str(tmp_path / "out" / "runs" / "lr0.001-seed8"))
  assert (run["settings"]["learning_rate"], run["settings"]["seed"], run["resumable"]) == (
      1e-3, 8, {"num_train_epochs": 2.0})


def test_squad_refuses_another_doc_stride_and_another_epoch_unit(tmp_path, stopped):
  from bert_tf.tasks.squad import run as squad_run
  from test_squad_data import build_fixture, write_json

  train = write_json(tmp_path / "train.json", build_fixture(False))
  vocab = th.write_vocab(tmp_path)

  def make(doc_stride=11, epoch_unit="windows", **changes):
    return squad_run.SquadConfig(vocab_file=vocab, finetuning=_finetuning(tmp_path, **changes), train_file=train,
                                 do_train=True, max_seq_length=37, doc_stride=doc_stride, max_query_length=9,
                                 epoch_unit=epoch_unit)

  _refused_then_resumed(squad_run.run_squad, make, tmp_path / "out", {"doc_stride": 13}, "doc_stride: 11 -> 13")
  assert ri.read(str(tmp_path / "out"))["task"] == "squad"
  # What an epoch counts sets the number of steps: another unit is another run, even at the same epochs.
  with pytest.raises(ri.RunChanged, match=r"\(epoch_unit: windows -> questions\)"):
    squad_run.run_squad(make(epoch_unit="questions", num_train_epochs=2.0), say=lambda line: None)


@pytest.mark.parametrize("feature_based", [None, "last_hidden"])
def test_ner_refuses_another_label_scheme_and_another_feature_choice(tmp_path, stopped, feature_based):
  from bert_tf.tasks.ner import data as ner
  from bert_tf.tasks.ner import run as ner_run
  from test_ner_data import ORIGINAL, write

  os.makedirs(tmp_path / "conll")
  write(tmp_path / "conll" / "eng.train", ORIGINAL)
  vocab = th.write_vocab(tmp_path)

  if feature_based:  # a frozen encoder to read, which the driver checks against the config before the run's record
    from bert_tf.model import checkpoints
    from bert_tf.model.encoder import BertEncoder

    config = _finetuning(tmp_path).bert_config
    checkpoints.export_encoder(BertEncoder(config), config, str(tmp_path / "pretrained"))

  def make(label_scheme="IOB2", feature_based=feature_based, **changes):
    init = {"init_checkpoint": str(tmp_path / "pretrained")} if feature_based else {}
    return ner_run.NerConfig(data_dir=str(tmp_path / "conll"), vocab_file=vocab,
                             finetuning=_finetuning(tmp_path, **init, **changes), do_train=True, max_seq_length=19,
                             label_scheme=label_scheme, feature_based=feature_based)

  if feature_based is None:  # fine-tuned: BIOES labels are another head
    types = ("LOC", "MISC", "ORG", "PER")
    change = {"label_scheme": "BIOES"}
    expected = (f"label_scheme: IOB2 -> BIOES; labels: {','.join(ner.labels_for(types, 'IOB2'))} -> "
                f"{','.join(ner.labels_for(types, 'BIOES'))}")
  else:
    change, expected = {"feature_based": "embeddings"}, "feature_based: last_hidden -> embeddings"
  _refused_then_resumed(ner_run.run_ner, make, tmp_path / "out", change, expected)


def test_swag_refuses_another_number_of_training_examples(tmp_path, stopped):
  from bert_tf.tasks.swag import run as swag_run
  from test_run_swag import learnable, write_csv

  os.makedirs(tmp_path / "data")
  write_csv(tmp_path / "data" / "train.csv", learnable(5, seed=1))
  vocab = th.write_vocab(tmp_path)

  def make(max_train_examples=0, **changes):
    return swag_run.SwagConfig(data_dir=str(tmp_path / "data"), vocab_file=vocab,
                               finetuning=_finetuning(tmp_path, **changes), do_train=True, max_seq_length=19,
                               max_train_examples=max_train_examples)

  _refused_then_resumed(swag_run.run_swag, make, tmp_path / "out", {"max_train_examples": 3},
                        "max_train_examples: 0 -> 3")


def test_pretraining_refuses_another_learning_rate_and_other_records_and_resumes_more_steps(tmp_path):
  import tensorflow as tf

  from bert_tf.tasks.pretraining import run as pretraining
  from bert_tf.tasks.pretraining.config import PretrainingConfig

  data = th.write_records(tmp_path / "data", num_files=2, per_file=3)

  def make(**changes):
    fields = dict(input_file=data, output_dir=str(tmp_path / "out"), bert_config=th.tiny_bert_config(),
                  max_seq_length=th.T, max_predictions_per_seq=th.P, train_batch_size=2, num_train_steps=2,
                  num_warmup_steps=0, distribution_strategy="one_device")
    return PretrainingConfig(**{**fields, **changes})

  def stop(*args, **kwargs):
    raise _Stop

  def run(config):
    return pretraining.run_pretraining(config, tf.distribute.get_strategy(), trainer_cls=stop)

  with pytest.raises(_Stop):
    run(make())
  _trained(str(tmp_path / "out"))
  with pytest.raises(ri.RunChanged, match=r"other settings \(learning_rate: 0.0001 -> 0.0002\); give another"):
    run(make(learning_rate=2e-4))
  before = ri.files_entry(data, sorted(str(p) for p in (tmp_path / "data").iterdir()))
  th.write_records(tmp_path / "data", num_files=2, per_file=3, seed=1)  # other records under the same names
  with pytest.raises(ri.RunChanged, match=re.escape(f"other settings (input_file: {data} (2 files, {before['bytes']} "
                                                    f"bytes, sha256 {before['sha256'][:12]}) -> {data} (2 files, ")):
    run(make())
  th.write_records(tmp_path / "data", num_files=2, per_file=3)
  with pytest.raises(_Stop):
    run(make(num_train_steps=3))
  assert ri.read(str(tmp_path / "out"))["resumable"] == {"num_train_steps": 3}
  # The bert_config.json training writes into --output_dir is no input of it (issue 40 (1)).
  config_file = str(tmp_path / "out" / "bert_config.json")
  th.tiny_bert_config().to_json_file(config_file)
  with pytest.raises(ValueError, match=re.escape(f"--bert_config_file's {config_file} is {config_file}, which this "
                                                 "run writes; copy it elsewhere first, or give another --output_dir")):
    run(make(num_train_steps=3, bert_config_file=config_file))


# -- scripts/run_classifier.py as a user runs it: the SMS spam rerun -------------------------------------

WORDS = ["free", "money", "now", "win", "prize", "see", "you", "at", "lunch", "call", "me", "later", "ok"]
SPAM, HAM = ["free money now", "win a prize now", "free prize"], ["see you at lunch", "call me later", "ok see you"]


def _sms(directory, rows, name):
  lines = ["sentence1,label"] + [f"{text},{label}" for text, label in rows]
  (directory / name).write_text("\n".join(lines) + "\n")
  return name


def _script(script, args, cwd):
  import subprocess
  import sys

  return subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", f"{script}.py"), *args], cwd=cwd,
                        env=th.python_env(), capture_output=True, text=True, timeout=300)


def _errors(result):
  return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.fixture(scope="module")
def sms(tmp_path_factory):
  """A tiny pretrained encoder, SMS-like CSV files labelled ham/spam, and the results of scripts/run_classifier.py
  run on them as the issue did: a run that trains (1 epoch, 2 steps) and exports version 1 (beside it, every
  run_*.py given an --output_dir that is a file); then, each on its own copy of that run, the reruns: with the
  labels reversed (on the run itself), with another training file, learning rate and --init_checkpoint, the
  same run with other logging and evaluation flags and --export_dir, --overwrite_output_dir, and one more epoch."""
  from bert_tf.config import BertConfig
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  root = tmp_path_factory.mktemp("sms")
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a"] + WORDS
  (root / "vocab.txt").write_text("\n".join(tokens) + "\n")
  config = BertConfig.from_preset("tiny", vocab_size=len(tokens), hidden_size=18, num_attention_heads=3,
                                  intermediate_size=37, num_hidden_layers=1, max_position_embeddings=24)
  checkpoints.export_encoder(BertEncoder(config), config, str(root / "pretrained"))
  checkpoints.export_encoder(BertEncoder(config), config, str(root / "pretrained2"))  # other weights
  rows = [(SPAM[i % 3], "spam") if i % 2 else (HAM[i % 3], "ham") for i in range(17)]
  _sms(root, rows, "train.csv")
  _sms(root, rows[:-1], "train2.csv")
  _sms(root, rows[:5], "dev.csv")
  (root / "a_file").write_text("x")
  common = ["--train_file=train.csv", "--vocab_file=vocab.txt", "--do_train", "--max_seq_length=16",
            "--train_batch_size=8", "--num_train_epochs=1", "--num_gpus=0", "--learning_rate=1e-3", "--log_steps=1",
            "--steps_per_loop=1"]
  results = {}
  file_dir = {  # each script given an --output_dir that is a file, with the flags that reach its checks
      "run_classifier": common + ["--init_checkpoint=pretrained"],
      "run_squad": ["--init_checkpoint=pretrained", "--train_file=train.csv", "--do_train"],
      "run_ner": ["--init_checkpoint=pretrained", "--data_dir=.", "--do_train"],
      "run_swag": ["--init_checkpoint=pretrained", "--data_dir=.", "--do_train"],
      "run_pretraining": ["--input_file=train.csv", "--bert_config_file=pretrained/bert_config.json",
                          "--max_seq_length=16"]}
  with concurrent.futures.ThreadPoolExecutor(3) as pool:
    first = pool.submit(_script, "run_classifier", common + ["--init_checkpoint=pretrained", "--output_dir=out",
                                                            "--export_dir=export"], root)
    files = {name: pool.submit(_script, name, args + ["--output_dir=a_file"], root) for name, args in file_dir.items()}
    results["first"] = first.result()
    results["file"] = {name: future.result() for name, future in files.items()}
    if results["first"].returncode != 0:
      return root, results
    results["classifier.json"] = (root / "out" / "classifier" / "classifier.json").read_bytes()
    for copy in ("out_many", "out_same", "out_over", "out_more"):
      shutil.copytree(root / "out", root / copy)
    (root / "out_over" / "notes.txt").write_text("mine")
    reruns = {
        "labels": common + ["--init_checkpoint=pretrained", "--output_dir=out", "--labels=spam,ham",
                            "--export_dir=export"],
        "many": [a for a in common if a not in ("--train_file=train.csv", "--learning_rate=1e-3")]
                + ["--train_file=train2.csv", "--learning_rate=3e-3", "--init_checkpoint=pretrained2/",
                   "--output_dir=out_many"],
        "same": common + ["--init_checkpoint=pretrained", "--output_dir=out_same", "--log_steps=2",
                          "--steps_per_loop=2", "--save_checkpoints_steps=5", "--validation_file=dev.csv",
                          "--do_eval", "--eval_every_steps=1", "--eval_batch_size=3", "--export_dir=export"],
        "over": [a for a in common if a != "--learning_rate=1e-3"]
                + ["--init_checkpoint=pretrained", "--output_dir=out_over", "--learning_rate=2e-3",
                   "--overwrite_output_dir"],
        "more": [a for a in common if a != "--num_train_epochs=1"]
                + ["--init_checkpoint=pretrained", "--output_dir=out_more", "--num_train_epochs=2"]}
    futures = {name: pool.submit(_script, "run_classifier", args, root) for name, args in reruns.items()}
    results.update({name: future.result() for name, future in futures.items()})
  return root, results


def _trained_first(sms):
  root, results = sms
  assert results["first"].returncode == 0, results["first"].stderr[-3000:]
  return root, results


def test_a_rerun_with_the_labels_reversed_is_refused_and_changes_nothing(sms):
  """The issue's case: trained as ham,spam, rerun with --labels=spam,ham; it trained nothing and wrote the new
  label order over the head (dev accuracy 0.833 -> 0.167). Now: refused in one line, exit 1, nothing written."""
  root, results = _trained_first(sms)
  result = results["labels"]
  assert result.returncode == 1, result.stderr[-3000:]
  assert _errors(result) == [
      f"error: {root / 'out'} holds a run trained with other settings (labels: ham,spam -> spam,ham); give another "
      "--output_dir to keep that run, or pass --overwrite_output_dir to start over there"]
  assert "Traceback" not in result.stderr
  assert (root / "out" / "classifier" / "classifier.json").read_bytes() == results["classifier.json"]
  assert json.loads((root / "out" / "classifier" / "classifier.json").read_text())["labels"] == ["ham", "spam"]
  assert ri.read(str(root / "out"))["settings"]["labels"] == ["ham", "spam"]
  assert sorted(os.listdir(root / "export" / "train")) == ["1"]


def test_another_training_file_learning_rate_and_init_checkpoint_are_refused(sms):
  root, results = _trained_first(sms)
  result = results["many"]
  assert result.returncode == 1, result.stderr[-3000:]
  before, after = (ri.file_entry(str(root / name)) for name in ("train.csv", "train2.csv"))
  init, init2 = (ri.checkpoint_entry(str(root / name)) for name in ("pretrained", "pretrained2"))
  assert _errors(result) == [
      f"error: {root / 'out_many'} holds a run trained with other settings (train_file: train.csv "
      f"({before['bytes']} bytes, sha256 {before['sha256'][:12]}) -> train2.csv ({after['bytes']} bytes, "
      f"sha256 {after['sha256'][:12]}); init_checkpoint: pretrained (2 files, {init['bytes']} bytes, sha256 "
      f"{init['sha256'][:12]}) -> pretrained2 (2 files, {init2['bytes']} bytes, sha256 {init2['sha256'][:12]}); "
      "learning_rate: 0.001 -> 0.003); give another --output_dir to keep that run, or pass --overwrite_output_dir "
      "to start over there"]


def test_the_same_rerun_with_other_logging_and_evaluation_flags_resumes_and_exports_nothing_new(sms):
  root, results = _trained_first(sms)
  result = results["same"]
  assert result.returncode == 0, result.stderr[-3000:]
  assert "nothing left to train" in result.stderr
  assert f"{os.path.join('export', 'train', '1')} already serves this model" in result.stderr
  assert sorted(os.listdir(root / "export" / "train")) == ["1"]
  assert json.loads(result.stdout[result.stdout.index("{"):])["export"] == os.path.join("export", "train", "1")


def test_more_epochs_resume_the_run_and_say_so(sms):
  root, results = _trained_first(sms)
  result = results["more"]
  assert result.returncode == 0, result.stderr[-3000:]
  out = root / "out_more"
  assert f"num_train_epochs: 1.0 -> 2.0: the run in {out} continues from its last checkpoint" in result.stderr
  assert f"resuming at step 2 from {out / 'checkpoints' / 'ckpt-2'}, training to step 4" in result.stderr
  assert json.loads(result.stdout[result.stdout.index("{"):])["train_steps"] == 4
  assert ri.read(str(out))["resumable"] == {"num_train_epochs": 2.0}


def test_overwrite_output_dir_starts_over_and_keeps_the_users_files(sms):
  root, results = _trained_first(sms)
  result = results["over"]
  assert result.returncode == 0, result.stderr[-3000:]
  out = root / "out_over"
  assert (f"--overwrite_output_dir: removed checkpoints, classifier, run.json, train from {out}; kept notes.txt "
          "(not written by a run)") in result.stderr
  assert f"starting fresh in {out / 'checkpoints'}" in result.stderr
  assert (out / "notes.txt").read_text() == "mine"
  assert ri.read(str(out))["settings"]["learning_rate"] == 2e-3


@pytest.mark.parametrize("script", ["run_classifier", "run_squad", "run_ner", "run_swag", "run_pretraining"])
def test_an_output_dir_that_is_a_file_is_one_line(sms, script):
  root, results = sms
  result = results["file"][script]
  assert result.returncode == 1, result.stderr[-3000:]
  assert _errors(result) == ["error: --output_dir=a_file is a file, not a folder; give a folder (created if "
                             "missing)"], result.stderr[-3000:]
  assert "Traceback" not in result.stderr
