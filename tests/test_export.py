"""scripts/export.py (bert_tf/cli.py's `define_export_flags`, `task_of_model_dir`, `export_main`): any fine-tuned
folder exports as the task its settings file names; scripts/export_<task>.py are the same for one task."""

from __future__ import annotations

import json
import os

import pytest

import training_helpers as th
from bert_tf import cli, registry


def _fake_model_dir(directory, settings_name: str) -> str:
  """The files that say a folder is a task model's (`folder_kind`): weights (one variable), bert_config.json and the
  settings file."""
  import tensorflow as tf

  os.makedirs(directory)
  tf.train.Checkpoint(v=tf.Variable(1.0)).write(os.path.join(directory, "model"))
  for name in ("bert_config.json", settings_name):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as f:
      f.write("{}")
  return str(directory)


def test_the_folder_or_the_run_holding_it_says_the_task(tmp_path):
  for task in registry.tasks():
    folder = _fake_model_dir(tmp_path / task.name / task.model_dir, task.settings_name)
    assert cli.task_of_model_dir(folder) == (task, folder)
    assert cli.task_of_model_dir(str(tmp_path / task.name)) == (task, os.path.join(tmp_path, task.name,
                                                                                   task.model_dir))


def test_a_folder_of_no_task_or_of_several_is_refused_naming_the_flag(tmp_path):
  with pytest.raises(FileNotFoundError, match=f"^--model_dir={tmp_path}/none: no such folder"):
    cli.task_of_model_dir(str(tmp_path / "none"))
  (tmp_path / "empty").mkdir()
  with pytest.raises(ValueError, match=f"^--classifier_dir={tmp_path}/empty: not a fine-tuned model \\(no "
                     "classifier.json, ner.json, squad.json, swag.json beside"):
    cli.task_of_model_dir(str(tmp_path / "empty"), "classifier_dir")
  _fake_model_dir(tmp_path / "both" / "squad_model", "squad.json")
  _fake_model_dir(tmp_path / "both" / "ner_model", "ner.json")
  with pytest.raises(ValueError, match="holds the model folders of 2 tasks \\(ner_model, squad_model\\); give one"):
    cli.task_of_model_dir(str(tmp_path / "both"))


def test_export_py_exports_the_task_of_the_run_it_is_given_and_refuses_another_tasks_flags(swag_export, tmp_path):
  script = os.path.join(th.REPO, "scripts", "export.py")
  run = str(swag_export["directory"])  # a run's --output_dir: swag_model/ and export/ inside
  refused = th.run_python([script, f"--model_dir={run}", f"--export_dir={tmp_path}", "--n_best_size=5"])
  assert refused.returncode == 1 and refused.stderr.strip().splitlines()[-1] == (
      f"error: --n_best_size: for a SQuAD model only, and --model_dir={run} is a SWAG model; drop it")
  done = th.run_python([script, f"--model_dir={run}", f"--export_dir={tmp_path}", "--model_version=3"])
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "swag" / "3")
  with open(tmp_path / "swag" / "3" / "assets.extra" / "bert_tf_manifest.json", encoding="utf-8") as f:
    assert json.load(f)["task"] == "swag"


def test_exporting_one_folder_twice_publishes_one_version(swag_export, tmp_path):
  """Two export.py processes on the same run, each loading it afresh (dropout's seed states start from a new random
  seed every load): the second finds the first version serves this model and publishes none."""
  script = os.path.join(th.REPO, "scripts", "export.py")
  run = str(swag_export["directory"])
  first, second = (th.run_python([script, f"--model_dir={run}", f"--export_dir={tmp_path}"]) for _ in range(2))
  for done in (first, second):
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == str(tmp_path / "swag" / "1")
  assert "already serves this model" in second.stderr and os.listdir(tmp_path / "swag") == ["1"]


@pytest.mark.parametrize("task,flag", [("classifier", "classifier_dir"), ("squad", "squad_model_dir")])
def test_the_task_scripts_keep_their_flags(task, flag):
  shown = th.run_python([os.path.join(th.REPO, "scripts", f"export_{task}.py"), "--help"]).stdout
  assert f"  --{flag}: A fine-tuned" in shown and "  --model_dir" not in shown
  assert ("  --n_best_size" in shown) == (task == "squad")


def test_export_py_on_a_damaged_model_folder_is_one_line_naming_the_file(tmp_path):
  """Issue 40 (6): a model folder whose model.index is corrupt or whose model.data-* is cut short was a traceback."""
  import concurrent.futures

  script = os.path.join(th.REPO, "scripts", "export.py")
  for how in ("index", "data"):
    th.damage_checkpoint(os.path.join(_fake_model_dir(tmp_path / how, "classifier.json"), "model"), how)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    index, data = pool.map(lambda how: th.run_python([script, f"--model_dir={tmp_path / how}",
                                                      f"--export_dir={tmp_path / 'export'}"]), ("index", "data"))
  fix = "copy it again, or write it again with the command that made it, or give another checkpoint"
  for result, line in ((index, f"error: {tmp_path}/index/model.index: damaged (block checksum mismatch); {fix}"),
                       (data, f"error: {tmp_path}/data/model.data-00000-of-00001: damaged (truncated: Read less bytes "
                              f"than requested); {fix}")):
    assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (1, line), result.stderr[-3000:]
    assert "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "export")


def test_an_export_to_a_model_folder_in_use_is_refused_naming_export_pys_flags(swag_export, tmp_path):
  """Issue 40 (7): the message said `pass another --output_dir`, a flag export.py does not have."""
  import socket
  import subprocess
  import sys
  import time

  from bert_tf import fileio

  model = tmp_path / "swag"  # <export_dir>/<model_name>, held by a live export
  model.mkdir()
  holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
  try:
    (model / ".lock").write_text(json.dumps({
        "host": socket.gethostname(), "pid": holder.pid, "process_start": fileio.process_start(holder.pid),
        "started": "2026-11-23T10:00:00", "heartbeat": time.time()}))
    refused = th.run_python([os.path.join(th.REPO, "scripts", "export.py"), f"--model_dir={swag_export['directory']}",
                             f"--export_dir={tmp_path}"])
  finally:
    holder.kill()
    holder.wait()
  assert (refused.returncode, refused.stderr.strip().splitlines()[-1]) == (
      1, f"error: {model} is in use by another run (host {socket.gethostname()}, pid {holder.pid}, started "
         f"2026-11-23T10:00:00); wait for it to end or give another --model_name or --export_dir. If that run is "
         f"dead, delete {model / '.lock'}"), refused.stderr[-3000:]
  assert os.listdir(model) == [".lock"]


def test_export_py_of_a_hugging_face_head_whose_vocabulary_lacks_cls_and_sep_is_one_line(tmp_path):
  """Issue 40 (6): a Hugging Face classifier whose vocab.txt has no [CLS] or [SEP] was KeyError: '[CLS]' while the
  serving function was traced, after the conversion had been cached."""
  from bert_tf.model import convert_tasks
  from bert_tf.tasks.classification import classifier as classification

  settings = {"task_name": "MRPC", "labels": ["0", "1"], "is_pair": True, "max_seq_length": th.T,
              "do_lower_case": True}
  kind = next(k for k in convert_tasks.task_kinds() if k.name == "classification")
  model = convert_tasks.build_model(kind, th.tiny_bert_config(), settings)
  spec = classification.ClassifierSpec("MRPC", ("0", "1"), True, th.T, True)
  classification.save_classifier(model, spec, th.write_vocab(tmp_path), str(tmp_path / "ours"))
  hf = tmp_path / "hf"
  convert_tasks.save_hf(convert_tasks.load_ours(str(tmp_path / "ours")), str(hf))
  tokens = (hf / "vocab.txt").read_text().splitlines()
  (hf / "vocab.txt").write_text("\n".join(t.lower() if t in ("[CLS]", "[SEP]") else t for t in tokens) + "\n")
  result = th.run_python([os.path.join(th.REPO, "scripts", "export.py"), f"--model_dir={hf}",
                          f"--export_dir={tmp_path / 'export'}"], BERT_TF_CACHE=tmp_path / "cache")
  assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (
      1, f"error: {hf}/vocab.txt: has no [CLS] [SEP], which BERT needs; give the vocab.txt the model was trained with "
         "(every BERT vocabulary holds them)"), result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  assert sorted(os.listdir(tmp_path)) == ["hf", "ours", "vocab.txt"]  # no export, and no conversion in the cache
