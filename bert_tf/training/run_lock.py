"""One run per output directory: a lock file, `<output_dir>/.lock`, held while a training script runs (and while an
export writes a model's versions); one writer per output file: `.<name>.lock` beside it (`RunLock.for_file`).

Two runs on one --output_dir would overwrite each other's checkpoints and encoder while both exit 0, so the
second is refused with a message naming the holder; so would two commands writing one file. The lock is a small
JSON file:

  {"host": ..., "pid": ..., "started": "2026-11-23T21:10:28", "process_start": <clock ticks>, "heartbeat": <unix>}

A lock whose holder is dead is taken over with a warning, so a run killed with SIGKILL (or a lost machine) never
blocks its own rerun. Dead means: on the same host, no process with that pid and start time (a reused pid has a
different start time); on another host, no heartbeat for `STALE_SECONDS` (a live holder rewrites its heartbeat
every `HEARTBEAT_SECONDS` from a background thread).

The file is created exclusively (`fileio.create_new`), so of two runs starting together exactly one gets it:
locally with O_CREAT | O_EXCL, on gs:// with an upload Cloud Storage accepts only while no object has the name
(precondition ifGenerationMatch=0). Other remote schemes are checked, then written: two runs started within the
same second could both proceed there.

Under MultiWorkerMirroredStrategy only the chief takes the lock (the workers share the output directory).
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time

from absl import logging

from bert_tf import fileio
from bert_tf.errors import OutputDirInUse

LOCK_NAME = ".lock"
HEARTBEAT_SECONDS = 60.0
STALE_SECONDS = 600.0


def is_chief_from_env() -> bool:
  """Whether this process is the chief of its job, from TF_CONFIG (no TF_CONFIG: a single process, the chief).

  The same rule as `distribute.is_chief`, read before any strategy exists: the `chief` task, else worker 0."""
  raw = os.environ.get("TF_CONFIG")
  if not raw:
    return True
  try:
    config = json.loads(raw)
    task = config.get("task", {})
    task_type, index = task.get("type"), int(task.get("index", 0))
    has_chief = "chief" in config.get("cluster", {})
  except (ValueError, AttributeError, TypeError):
    return True  # The strategy reports a malformed TF_CONFIG, with a better message.
  if task_type == "chief":
    return True
  return task_type == "worker" and index == 0 and not has_chief


def _first_missing(folder: str) -> str | None:
  """The outermost folder on the way to local `folder` that does not exist yet (None if all do, or remote)."""
  if fileio.is_remote(folder) or os.path.isdir(folder):
    return None
  while not os.path.isdir(os.path.dirname(folder)):
    folder = os.path.dirname(folder)
  return folder


class RunLock:
  """`with RunLock(output_dir):` holds `<output_dir>/.lock` for the block; raises OutputDirInUse if a live run
  holds it. Reentrant within a process is not needed: one script takes one lock.

  `instead`: what the refused command can do besides waiting, in the words of its flags (the folder's lock of an
  export is not an --output_dir's); `for_file` locks an output file instead of a folder."""

  def __init__(self, output_dir: str, enabled: bool = True, instead: str = "pass another --output_dir"):
    self.path = os.path.join(fileio.absolute(output_dir), LOCK_NAME)
    self.target = os.path.dirname(self.path)  # what the lock holds: the folder, or `for_file`'s file
    self.enabled = enabled
    self.instead = instead
    self.sweep = True  # the holder of a run folder removes what an interrupted export left there
    self._record: dict | None = None
    self._stop = threading.Event()
    self._thread: threading.Thread | None = None
    self._created: str | None = None  # the top folder acquire() made, removed again by release() if left empty

  # -- Reading the holder --------------------------------------------------------------------------------

  def holder(self) -> dict | None:
    """The lock file's record, or None if there is none (an unreadable file counts as a dead holder's)."""
    try:
      with fileio.open_file(self.path, "r") as f:
        return json.loads(f.read())
    except FileNotFoundError:
      return None
    except (OSError, ValueError):
      return {}
    except Exception as e:  # tf.errors.NotFoundError for remote paths
      if type(e).__name__ == "NotFoundError":
        return None
      raise

  def _holder_alive(self, record: dict) -> bool:
    if not record or "pid" not in record:
      return False
    if record.get("host") == socket.gethostname():
      return fileio.process_alive(int(record["pid"]), record.get("process_start"))
    return time.time() - float(record.get("heartbeat", 0)) < STALE_SECONDS

  @staticmethod
  def describe(record: dict) -> str:
    return (f"host {record.get('host', '?')}, pid {record.get('pid', '?')}, started {record.get('started', '?')}"
            + (f", command: {record['command']}" if record.get("command") else ""))

  # -- Taking and releasing ------------------------------------------------------------------------------

  def _new_record(self) -> dict:
    now = time.time()
    return {"host": socket.gethostname(), "pid": os.getpid(), "process_start": fileio.process_start(os.getpid()),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(now)), "heartbeat": now,
            "command": " ".join(sys.argv)[:500]}

  @classmethod
  def for_file(cls, path: str, flag: str, enabled: bool = True) -> RunLock:
    """The lock of one output file `path` (--`flag`'s, without "--"): `.<name>.lock` beside it, so that two commands
    writing the same file (the last rename would win, both exiting 0) run one at a time."""
    lock = cls(os.path.dirname(fileio.absolute(path)), enabled, instead=f"give another --{flag}")
    lock.path = fileio.join(os.path.dirname(lock.path), f".{os.path.basename(path)}{LOCK_NAME}")
    lock.target, lock.sweep = fileio.absolute(path), False
    return lock

  def _refuse(self, record: dict):
    raise OutputDirInUse(
        f"{self.target} is in use by another run ({self.describe(record)}); wait for it to end or {self.instead}. "
        f"If that run is dead, delete {self.path}")

  def acquire(self) -> None:
    if not self.enabled:
      return
    self._created = _first_missing(os.path.dirname(self.path))
    fileio.makedirs_for(self.path)
    for _ in range(3):
      record = self.holder()
      if record is not None:
        if self._holder_alive(record):
          self._refuse(record)
        logging.warning("taking over the lock of a run that is no longer alive (%s): %s",
                        self.describe(record) if record else "unreadable lock file", self.path)
        try:
          fileio.remove(self.path)
        except FileNotFoundError:
          pass
      mine = self._new_record()
      if self._create(json.dumps(mine)):
        self._record = mine
        break
    else:
      self._refuse(self.holder() or {})
    if self.sweep:  # Holding the lock, no live run writes here: what an interrupted export left can go.
      from bert_tf.training import checkpointing

      for path in checkpointing.remove_export_leftovers(os.path.dirname(self.path)):
        logging.warning("removed %s, left by an interrupted run", path)
    if fileio.is_remote(self.path):  # Another host cannot see our pid: keep the heartbeat fresh.
      self._thread = threading.Thread(target=self._beat, name="run-lock-heartbeat", daemon=True)
      self._thread.start()

  def _create(self, text: str) -> bool:
    """Writes the lock file if none exists; False if another process created it first."""
    return fileio.create_new(self.path, text)

  def _beat(self) -> None:
    while not self._stop.wait(HEARTBEAT_SECONDS):
      record = dict(self._record, heartbeat=time.time())
      try:
        fileio.write_text_atomic(self.path, json.dumps(record))
      except Exception as e:  # pylint: disable=broad-except
        logging.warning("could not refresh the lock %s: %s", self.path, e)

  def release(self) -> None:
    if self._record is None:
      return
    self._stop.set()
    try:
      current = self.holder()
      if current and current.get("pid") == self._record["pid"] and current.get("host") == self._record["host"]:
        fileio.remove(self.path)
    except Exception as e:  # pylint: disable=broad-except
      logging.warning("could not remove the lock %s: %s", self.path, e)
    self._record = None
    # A run that failed before writing anything (bad flags or input) leaves no empty --output_dir behind.
    folder = os.path.dirname(self.path)
    while self._created and folder.startswith(self._created):
      try:
        os.rmdir(folder)  # only when empty
      except OSError:
        break
      folder = os.path.dirname(folder)
    self._created = None

  def __enter__(self):
    self.acquire()
    return self

  def __exit__(self, *exc):
    self.release()
