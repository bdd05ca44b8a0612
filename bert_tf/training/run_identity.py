"""What a run is, recorded in its --output_dir, so that a rerun never silently changes what a finished run means.

A training run (any task's --do_train, and pretraining) writes `<output_dir>/run.json` before its first step:

  {"format": 1, "task": "classifier",
   "settings": {"train_file": {"path": "data/sms/train.csv", "bytes": 5120, "sha256": "9f86d0..."},
                "labels": ["ham", "spam"], "learning_rate": 5e-05, "bert_config": {...}, ...},
   "resumable": {"num_train_epochs": 3.0}}

`settings` are what shapes the weights: the task, the training data (path and content fingerprint), labels and
columns, task type, init checkpoint (the content of what it resolves to), model config, sequence length,
vocabulary (its content), and the optimisation settings (learning rate, schedule, batch size, seed, optimizer,
precision, accumulation). A rerun whose settings differ in any of them is refused before any work, by `start_run`,
in one line naming each difference (`name: old -> new`) and the two ways out: another --output_dir, or
--overwrite_output_dir, which starts over (`start_over`). An input found at another path with the same content is
the same input (said, not refused): inputs are compared by content, so a rerun from another working directory, or
of a run folder moved or shared, is the same run. Paths are recorded relative to the output dir where they lie
under it, else as the user spelled them: no absolute path (and no user name in it) travels with a shared folder.

`resumable` is the length of training (num_train_epochs, num_train_steps): a rerun asking for more resumes from
the run's checkpoint and says so (the trainer then logs the steps). What does not change the weights (logging,
checkpoint and evaluation cadence, batch sizes of evaluation and prediction, the export) is not recorded and may
change freely.

A run directory made before this record (checkpoints, no run.json) is taken as this run's, said, and recorded.
A record whose run saved no weights yet (no checkpoint, no model folder: it stopped before its first checkpoint)
binds nothing: a rerun with other settings replaces it, and says so. A run refused after its record was written
but before it saved weights (an input found bad while its features are written, an init checkpoint that does not
fit) withdraws it (`Recorded.withdraw`): a refused run leaves nothing. Only the chief of a multi-worker job writes;
every process checks, so all refuse alike. Without --do_train nothing is checked or written: evaluation and
prediction read a model, they do not make one.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import fnmatch
import json
import os
import time
from typing import Any, Callable, Mapping, Sequence

from absl import logging

from bert_tf import fileio

RECORD_NAME = "run.json"
FORMAT = 1
# Files up to this size are hashed whole; larger ones (pretraining shards) by their size and ends
# (`fileio.fingerprint`).
WHOLE_FILE_BYTES = 64 << 20
# What every training run may write in its output dir (`start_over` removes these and the task's own names).
COMMON_OUTPUTS = ("checkpoints", "train", "eval", "best", "eval_results.txt", "eval_results.json", RECORD_NAME)
_OVERWRITE = "--overwrite_output_dir"


class RunChanged(ValueError):
  """A rerun whose settings differ from those its --output_dir's run was trained with."""


@dataclasses.dataclass(frozen=True)
class RunIdentity:
  """What defines a run: `task` (the script: "classifier", "squad", "ner", "swag", "pretraining"), `settings`
  (name -> a JSON value, or a `file_entry` / `files_entry` for inputs; a dict is compared key by key) and
  `resumable` (the length of training, which a rerun may extend)."""

  task: str
  settings: Mapping[str, Any]
  resumable: Mapping[str, Any] = dataclasses.field(default_factory=dict)

  def as_json(self) -> dict:
    from bert_tf import __version__

    return _plain({"format": FORMAT, "task": self.task, "settings": dict(self.settings),
                   "resumable": dict(self.resumable), "bert_tf": __version__,
                   "written": time.strftime("%Y-%m-%dT%H:%M:%S")})


def _plain(value: Any) -> Any:
  """`value` as it reads back from JSON (tuples become lists), so a record and a new identity compare equal."""
  return json.loads(json.dumps(value))


# -- Building a record ----------------------------------------------------------------------------------------


def file_entry(path: str | None) -> dict | None:
  """The record of an input file: its path as given, size and SHA-256 (`fileio.fingerprint`); None for none."""
  if not path:
    return None
  size, *sampled, digest = fileio.fingerprint(path, WHOLE_FILE_BYTES).split(":")
  return {"path": path, "bytes": int(size), "sha256": digest, **({"sampled": True} if sampled else {})}


def files_entry(pattern: str, paths: Sequence[str]) -> dict:
  """The record of the files a comma-separated glob `pattern` matched (pretraining's --input_file): the pattern,
  their number, total size and one SHA-256 over each file's name and fingerprint (sampled above
  WHOLE_FILE_BYTES), read 16 files at a time (object stores answer each read in tens of milliseconds)."""
  import hashlib

  with concurrent.futures.ThreadPoolExecutor(16) as pool:
    prints = list(pool.map(lambda path: fileio.fingerprint(path, WHOLE_FILE_BYTES), paths))
  digest = hashlib.sha256()
  for path, print_ in zip(paths, prints):
    digest.update(f"{os.path.basename(path)}\t{print_}\n".encode())
  return {"path": pattern, "files": len(paths), "bytes": sum(int(p.split(":")[0]) for p in prints),
          "sha256": digest.hexdigest()}


def checkpoint_entry(path: str | None) -> str | dict | None:
  """--init_checkpoint as recorded: a released name (`hf:...`, `keras_hub:...`) as given; else what it reads, by
  content (`files_entry` under the path as given, without a trailing "/"): the .index and .data files of the
  checkpoint it resolves to (`checkpoints.resolve_checkpoint`), or the files of a folder in another form (a Hugging
  Face model). The same weights named from another working directory, or copied elsewhere, are the same; a path
  that holds nothing stays as given (the run refuses it later)."""
  if not path:
    return None
  if ":" in path.split("/")[0] and not fileio.is_remote(path):
    return path
  import tensorflow as tf

  from bert_tf.model import checkpoints

  given = path.rstrip("/") or path
  try:
    files = checkpoints.checkpoint_files(checkpoints.resolve_checkpoint(given))
  except (FileNotFoundError, tf.errors.OpError):
    files = []
  if not files and fileio.isdir(given):
    files = [fileio.join(given, name) for name in fileio.listdir(given)
             if not name.startswith(".") and not fileio.isdir(fileio.join(given, name))]
  return files_entry(given, files) if files else given


def finetuning_settings(ft) -> dict:
  """The settings of a `finetuning.FinetuningConfig` that shape the weights (the task adds its data, labels,
  lengths and vocabulary); num_train_epochs is resumable, the rest of it (cadences, evaluation, devices) is
  not part of what the run is."""
  return {"init_checkpoint": checkpoint_entry(ft.init_checkpoint), "bert_config": ft.bert_config.to_dict(),
          "train_batch_size": ft.train_batch_size, "learning_rate": ft.learning_rate,
          "warmup_proportion": ft.warmup_proportion, "optimizer": ft.optimizer, "dtype": ft.dtype,
          "gradient_accumulation_steps": ft.gradient_accumulation_steps, "seed": ft.seed}


# -- Reading and comparing ------------------------------------------------------------------------------------


def record_path(output_dir: str) -> str:
  return fileio.join(fileio.absolute(output_dir), RECORD_NAME)


def read(output_dir: str) -> dict | None:
  """The run record of `output_dir`, or None where there is none; ValueError naming the file when it is not
  one (a damaged file: the user decides, as for a changed run)."""
  path = record_path(output_dir)
  if not fileio.exists(path):
    return None
  try:
    with fileio.open_file(path, "r") as f:
      record = json.loads(f.read())
  except ValueError as e:
    record = e
  if not isinstance(record, dict) or not isinstance(record.get("settings"), dict):
    raise ValueError(f"{path}: not a run record bert_tf wrote (unreadable JSON, or no \"settings\"); pass "
                     f"{_OVERWRITE} to start the run over, or another --output_dir")
  return record


def write(output_dir: str, identity: RunIdentity) -> str:
  """Writes `<output_dir>/run.json` whole or not at all; returns its path."""
  path = record_path(output_dir)
  fileio.write_text_atomic(path, json.dumps(identity.as_json(), indent=2) + "\n")
  return path


def _is_file(value: Any) -> bool:
  return isinstance(value, dict) and "sha256" in value


def _same(old: Any, new: Any) -> bool:
  if _is_file(old) and _is_file(new):  # the content decides, not where it lies
    return all(old.get(k) == new.get(k) for k in ("bytes", "sha256", "files"))
  if isinstance(old, str) and _is_file(new) and (os.path.isabs(old) or fileio.is_remote(old)):
    # --init_checkpoint as records before content identity wrote it: an absolute path, which the rerun resolves.
    return fileio.resolved(old) == fileio.resolved(new["path"])
  return old == new


def _show(value: Any) -> str:
  """A recorded value as a difference shows it: lists comma-joined, None as none, files with their size and
  hash's first 12 digits."""
  if value is None:
    return "none"
  if isinstance(value, bool):
    return str(value).lower()
  if isinstance(value, float):
    return repr(value)
  if isinstance(value, (list, tuple)):
    return ",".join(_show(v) for v in value) or "none"
  if _is_file(value):
    count = f"{value['files']} files, " if "files" in value else ""
    return f"{value.get('path')} ({count}{value.get('bytes')} bytes, sha256 {str(value.get('sha256'))[:12]})"
  return str(value)


def _leaves(settings: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
  """Nested dicts (bert_config) flattened to dotted names; files stay whole."""
  out = {}
  for name, value in settings.items():
    if isinstance(value, dict) and not _is_file(value):
      out.update(_leaves(value, f"{prefix}{name}."))
    else:
      out[f"{prefix}{name}"] = value
  return out


def differences(recorded: Mapping[str, Any], identity: RunIdentity) -> list[str]:
  """`name: old -> new` for each recorded setting (and the task) that `identity` changes. A name only one side
  has is left out: a record written by another version of bert_tf holds other names."""
  found = []
  if recorded.get("task") not in (None, identity.task):
    found.append(f"task: {recorded['task']} -> {identity.task}")
  old, new = _leaves(recorded.get("settings", {})), _leaves(_plain(dict(identity.settings)))
  for name in old:
    if name in new and not _same(old[name], new[name]):
      found.append(f"{name}: {_show(old[name])} -> {_show(new[name])}")
  return found


def _moved(recorded: Mapping[str, Any], identity: RunIdentity) -> list[str]:
  """The inputs found at another path with the recorded content."""
  old, new = _leaves(recorded.get("settings", {})), _leaves(_plain(dict(identity.settings)))
  return [f"{name}: {old[name]['path']} -> {new[name]['path']} (the same content)" for name in old
          if name in new and _is_file(old[name]) and _is_file(new[name]) and _same(old[name], new[name])
          and old[name].get("path") != new[name].get("path")]


# -- The check every training run makes -----------------------------------------------------------------------


def has_weights(output_dir: str, model_dirs: Sequence[str] = ()) -> bool:
  """Whether `output_dir` holds trained weights: a training checkpoint (checkpoints/checkpoint, TensorFlow's
  state file) or one of the task's model folders (`model_dirs`: classifier, squad_model, encoder_checkpoint)."""
  output_dir = fileio.absolute(output_dir)
  return fileio.exists(fileio.join(output_dir, "checkpoints", "checkpoint")) or any(
      fileio.exists(fileio.join(output_dir, name)) for name in model_dirs)


def _weights_state(output_dir: str, model_dirs: Sequence[str]) -> tuple:
  """What says which weights `output_dir` holds: TensorFlow's checkpoint state file (its text names the newest
  checkpoint) and which of `model_dirs` exist. Equal before and after a step of a run: it saved no weights."""
  state = fileio.join(output_dir, "checkpoints", "checkpoint")
  text = None
  if fileio.exists(state):
    with fileio.open_file(state, "r") as f:
      text = f.read()
  return text, tuple(fileio.exists(fileio.join(output_dir, name)) for name in model_dirs)


@dataclasses.dataclass
class Recorded:
  """The record `start_run` wrote: `path`, the record it replaced (`before`, its text; None: there was none) and
  the output dir's weights then (`_weights_state`)."""

  path: str
  before: str | None
  weights: tuple
  model_dirs: tuple[str, ...] = ()

  def withdraw(self) -> bool:
    """For a run refused after `start_run` (a bad input found while its features are written, an init checkpoint
    that does not fit): puts back what was there, the earlier record or none, unless the run saved weights since
    (the record then describes them, and stays). Returns whether it did."""
    if _weights_state(os.path.dirname(self.path), self.model_dirs) != self.weights:
      return False
    if self.before is None:
      if fileio.exists(self.path):
        fileio.remove(self.path)
    else:
      fileio.write_text_atomic(self.path, self.before)
    return True


def _relative_to(path: str, folder: str) -> str:
  """Each of comma-separated `path` (files or globs) relative to resolved `folder` where it lies under it, else as
  given."""
  spelled = []
  for part in path.split(","):
    item = part.strip()
    if item and fileio.is_remote(item) == fileio.is_remote(folder) and not item.startswith(("hf:", "keras_hub:")):
      full, root = fileio.resolved(item), fileio.resolved(folder).rstrip("/")
      if full.startswith(root + "/"):
        part = full[len(root) + 1:]
    spelled.append(part)
  return ",".join(spelled)


def as_recorded(identity: RunIdentity, output_dir: str) -> RunIdentity:
  """`identity` with each input's path as a record spells it: relative to `output_dir` where it lies under it (the
  folder moves or is shared with its inputs), else as the user gave it."""
  def spell(value):
    if _is_file(value) and isinstance(value.get("path"), str):
      return dict(value, path=_relative_to(value["path"], output_dir))
    if isinstance(value, dict):
      return {name: spell(item) for name, item in value.items()}
    return value

  return dataclasses.replace(identity, settings=spell(dict(identity.settings)))


def start_run(output_dir: str, identity: RunIdentity, overwrite: bool = False, chief: bool | None = None,
              outputs: Sequence[str] = (), model_dirs: Sequence[str] = (),
              inputs: Mapping[str, str | Sequence[str] | None] | None = None,
              say: Callable[[str], None] = logging.info) -> Recorded | None:
  """What a training run does with its --output_dir before any feature file or training step.

  First refuses `inputs` (the run's, flag -> paths: `check_inputs_kept`) that are or lie in what the run writes
  there: COMMON_OUTPUTS and the task's `outputs` (names or globs) and `model_dirs`. With `overwrite`
  (--overwrite_output_dir), then removes what earlier runs wrote there (`start_over`). Then compares `identity`
  (`as_recorded`) with the recorded run: raises RunChanged (one line: each difference and the two ways out) when
  the recorded run saved weights (`has_weights` with the task's `model_dirs`) and any setting differs; says which
  inputs moved (same content) and which resumable lengths changed. Finally the chief (`chief`; None: from
  TF_CONFIG) writes the record (`write`) and gets it back as a `Recorded`, to withdraw if the run is refused
  before it saves weights; None for the other workers.

  Call it holding the run's lock (`run_lock.RunLock`), which the scripts take before the run starts.
  """
  from bert_tf.training import run_lock

  output_dir = fileio.absolute(output_dir)
  chief = run_lock.is_chief_from_env() if chief is None else chief
  check_output_dir(output_dir)
  names = (*COMMON_OUTPUTS, *outputs, *model_dirs)
  check_inputs_kept(output_dir, names, inputs or {}, removes=overwrite)
  if overwrite:
    start_over(output_dir, names, chief, say)
  identity = as_recorded(identity, output_dir)
  recorded = read(output_dir)
  if recorded is None:
    if has_weights(output_dir, model_dirs):
      say(f"{output_dir}: a run from before run records (no {RECORD_NAME}): taken as this run and resumed; its "
          f"settings are recorded now")
  else:
    changed, trained = differences(recorded, identity), has_weights(output_dir, model_dirs)
    if changed and trained:
      raise RunChanged(
          f"{output_dir} holds a run trained with other settings ({'; '.join(changed)}); give another "
          f"--output_dir to keep that run, or pass {_OVERWRITE} to start over there")
    if changed:
      say(f"{output_dir}: the run recorded there saved no weights yet; starting over with other settings "
          f"({'; '.join(changed)})")
    for line in _moved(recorded, identity):
      say(f"{output_dir}: {line}")
    before = recorded.get("resumable") or {}
    for name, value in _plain(dict(identity.resumable)).items():
      if name in before and before[name] != value and trained and not changed:
        say(f"{name}: {_show(before[name])} -> {_show(value)}: the run in {output_dir} continues from its last "
            "checkpoint")
  if not chief:
    return None
  path = record_path(output_dir)
  before_text = None
  if recorded is not None:
    with fileio.open_file(path, "r") as f:
      before_text = f.read()
  weights = _weights_state(output_dir, model_dirs)
  write(output_dir, identity)
  return Recorded(path, before_text, weights, tuple(model_dirs))


def check_output_dir(output_dir: str, flag: str = "--output_dir") -> None:
  """ValueError when local `output_dir`, or a folder on its way, is a file: one line instead of the traceback
  that creating a folder there would end in."""
  if not output_dir or fileio.is_remote(output_dir):
    return
  path = os.path.abspath(output_dir)
  while not os.path.isdir(path):
    if os.path.exists(path):
      what = "is a file" if path == os.path.abspath(output_dir) else f"lies under {path}, which is a file"
      raise ValueError(f"{flag}={output_dir} {what}, not a folder; give a folder (created if missing)")
    if os.path.dirname(path) == path:
      return
    path = os.path.dirname(path)


# -- Starting over --------------------------------------------------------------------------------------------


def check_inputs_kept(output_dir: str, names: Sequence[str], inputs: Mapping[str, str | Sequence[str] | None],
                      inside: bool = True, removes: bool = False) -> None:
  """Before any work: ValueError (one line naming the input's flag) when one of a run's `inputs` (flag -> its
  paths, as `fileio.find_input` takes them) is, or with `inside` lies in, an entry of `output_dir` that `names`
  (names or globs) match: the run writes those (a training run its checkpoints and model folder, any run its
  results and predictions) and, `removes` (--overwrite_output_dir), first removes them. An input elsewhere in
  `output_dir` (--data_dir or --init_checkpoint's folder given as --output_dir) is not the run's to touch."""
  output_dir = fileio.absolute(output_dir)
  if not fileio.isdir(output_dir):
    return
  what = f"{_OVERWRITE} would remove" if removes else "this run writes"
  for name in fileio.listdir(output_dir):
    if not any(fnmatch.fnmatchcase(name, pattern) for pattern in names):
      continue
    entry = fileio.join(output_dir, name)
    found = fileio.find_input(entry, inputs, inside)
    if found:
      flag, given, same = found
      raise ValueError(f"--{flag}'s {given} {'is' if same else 'lies in'} {entry}, which {what}; copy it elsewhere "
                       "first, or give another --output_dir")


def _several_workers() -> bool:
  """Whether TF_CONFIG describes a job of more than one process (multi-worker training)."""
  try:
    cluster = json.loads(os.environ.get("TF_CONFIG") or "{}").get("cluster", {})
    return sum(len(cluster.get(kind, ())) for kind in ("chief", "worker")) > 1
  except (ValueError, AttributeError, TypeError):
    return False


def start_over(output_dir: str, names: Sequence[str], chief: bool = True,
               say: Callable[[str], None] = logging.info) -> list[str]:
  """--overwrite_output_dir: removes the entries of `output_dir` that a run writes (`names`: names or globs),
  and nothing else (a file of the user's stays, and is named); returns the removed paths. Call it once
  `check_inputs_kept` has refused an input among them. Refuses (ValueError) under a multi-worker job (the workers
  share the folder and could read a checkpoint the chief is removing: clear it before starting them). The lock
  file and hidden temporaries are not the run's outputs."""
  output_dir = fileio.absolute(output_dir)
  if not fileio.isdir(output_dir):
    return []
  entries = fileio.listdir(output_dir)
  doomed = [name for name in entries if any(fnmatch.fnmatchcase(name, pattern) for pattern in names)]
  if not doomed:
    return []
  paths = [fileio.join(output_dir, name) for name in doomed]
  if _several_workers() and [name for name in doomed if name != RECORD_NAME]:
    raise ValueError(f"{_OVERWRITE} with several workers: they share {output_dir}; remove the earlier run's "
                     f"{', '.join(doomed)} there before starting the job, or give another --output_dir")
  if not chief:
    return []
  for path in paths:
    fileio.remove_tree(path)
  kept = [name for name in entries if name not in doomed and not name.startswith(".")]
  say(f"{_OVERWRITE}: removed {', '.join(doomed)} from {output_dir}"
      + (f"; kept {', '.join(kept)} (not written by a run)" if kept else ""))
  return paths
