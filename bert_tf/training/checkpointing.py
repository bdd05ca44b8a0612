"""Training checkpoints that survive a kill, a SIGTERM and a rerun of the same command.

Layout under `<output_dir>/checkpoints/`:

  ckpt-<step>.index, ckpt-<step>.data-*    model, optimizer, step (and the input iterator, one worker)
  checkpoint                               the state file: newest checkpoint first, then the older kept ones
  input_pipeline-<w>/ckpt-<step>.*         worker w's input iterator, under MultiWorkerMirroredStrategy

Why a kill never leaves a half-written checkpoint that a rerun would load: TensorFlow writes the data shards
under `ckpt-<step>_temp/`, moves them into place, and writes `ckpt-<step>.index` last (MergeV2Checkpoints);
only then does CheckpointManager rewrite the state file, by write-to-temp-and-rename (atomic locally; a GCS
object appears whole when its upload ends). On restore we also take the newest listed checkpoint whose index
exists, so a state file that got ahead of its files cannot break a resume.

A checkpoint damaged after it was written (a copy cut short, a flipped bit) is found before a resume reads it
(`set_aside_damaged` reads the newest one whole): the chief renames its files to `<file>.damaged` (kept for a look,
never deleted), drops it from the state file, and the run resumes from the newest intact one.

Under MultiWorkerMirroredStrategy every worker must take part in a save (it may run collectives), but only the
chief's files are kept: the others write to `.tmp-worker-<w>/`, deleted right after. Each worker's input
iterator holds that worker's own file shard and position, so each saves it in its own `input_pipeline-<w>/`.

What a kill can leave behind (`ckpt-<step>_temp/`, data shards without their index, the state file's temporary,
`.tmp-worker-<w>/`, and the hidden `.<name>.tmp-*` of an interrupted export) is removed by the next run of the
same command (`remove_leftovers`), which holds the output directory's lock (run_lock.py), so no live run's
files are touched. A save that fails for lack of space removes its partial files, leaves the previous
checkpoint as it was, and raises `DiskFull` naming the path and the space needed.
"""

from __future__ import annotations

import os
import re
import signal
import sys
import threading
from typing import Callable

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.errors import DiskFull, UserError, first_line, is_disk_full
from bert_tf.model import checkpoints
from bert_tf.training import distribute

# Hidden temporaries of fileio.temp_path_for / model.checkpoints' directory writes:
# `.<name>.tmp-<8 hex>.owner-<machine>-<pid>`.
_TEMP_NAME = fileio.TEMP_NAME


class Checkpointer:
  """Saves and restores `items` (trackables: model, optimizer, step variable) and an input iterator."""

  def __init__(self, directory: str, strategy: tf.distribute.Strategy, max_to_keep: int = 5,
               iterator=None, **items):
    self.directory = fileio.absolute(directory)
    directory = self.directory
    self.chief = distribute.is_chief(strategy)
    self.worker = distribute.worker_index(strategy)
    multi_worker = distribute.num_workers(strategy) > 1
    if iterator is not None and not multi_worker:
      items["iterator"] = iterator
    self._items = items
    self.checkpoint = tf.train.Checkpoint(**items)
    self._damaged: set[str] = set()  # names (ckpt-<step>) of the checkpoints `set_aside_damaged` found damaged
    write_dir = directory if self.chief else os.path.join(directory, f".tmp-worker-{self.worker}")
    self._max_to_keep = max_to_keep
    self._manager = tf.train.CheckpointManager(self.checkpoint, write_dir, max_to_keep=max_to_keep)
    self._input_manager = None
    if iterator is not None and multi_worker:
      self._input_manager = tf.train.CheckpointManager(
          tf.train.Checkpoint(iterator=iterator), os.path.join(directory, f"input_pipeline-{self.worker}"),
          max_to_keep=max_to_keep)

  def latest(self) -> str | None:
    """The newest complete checkpoint in `directory` (whoever wrote it), or None."""
    state = tf.train.get_checkpoint_state(self.directory)
    if state is None:
      return None
    listed = [state.model_checkpoint_path] + list(reversed(state.all_model_checkpoint_paths))
    paths = []
    for path in listed:
      # get_checkpoint_state has already joined relative entries onto the directory. A state file written
      # with a relative directory by an older version may name `out/x/checkpoints/ckpt-N` relative to
      # its run's working directory: its basename in this directory is the file meant.
      for candidate in (path, os.path.join(self.directory, os.path.basename(path))):
        if candidate not in paths and os.path.basename(candidate) not in self._damaged:
          paths.append(candidate)
    for path in paths:
      if tf.io.gfile.exists(path + ".index"):
        if os.path.basename(path) != os.path.basename(paths[0]):
          logging.warning("checkpoint %s is listed but incomplete; using %s", paths[0], path)
        return path
    return None

  def set_aside_damaged(self) -> list[str]:
    """Reads the checkpoint a resume would take (`latest`) whole (`checkpoints.damage`), and the one before while it
    is damaged; returns the damaged ones, each said in one warning line naming the file and the reason. The chief
    renames their files to `<file>.damaged` and drops them from the state file; on other workers `latest` skips
    them. Call before anything reads the newest checkpoint.

    Raises UserError, naming the folder and the choices, when checkpoints are listed and none can be read: the
    files then stay as they are."""
    found = []
    while (path := self.latest()) is not None:
      fault = checkpoints.damage(path)
      if fault is None:
        break
      found.append((path, *fault))
      self._damaged.add(os.path.basename(path))
    if found and path is None:
      said = "; ".join(f"{os.path.basename(p)}: {os.path.basename(file)}: {reason}" for p, file, reason in found)
      raise UserError(f"{self.directory}: no checkpoint there can be read ({said}): start the run over with "
                      "--overwrite_output_dir, or give another --output_dir")
    for damaged, file, reason in found:
      if self.chief:
        renamed = ", ".join(os.path.basename(r) for r in self._rename_damaged(damaged))
        logging.warning("%s: damaged (%s); set %s aside (renamed to %s), resuming from %s", file, reason,
                        os.path.basename(damaged), renamed, path)
      else:
        logging.warning("%s: damaged (%s); resuming from %s", file, reason, path)
    if found and self.chief:
      self._forget(path)
    return [p for p, _, _ in found]

  @staticmethod
  def _rename_damaged(prefix: str) -> list[str]:
    """Renames the files of the checkpoint at `prefix` to `<file>.damaged` (`.damaged-2`, ... when a checkpoint of
    the same step was set aside before); returns the new names. The data files first: a data file without its
    index would be removed as a leftover by the next run if this one died before renaming the index."""
    files = checkpoints.checkpoint_files(prefix)
    files.sort(key=lambda f: f.endswith(".index"))
    suffix, n = checkpoints.DAMAGED_SUFFIX, 1
    while any(tf.io.gfile.exists(f + suffix) for f in files):
      n += 1
      suffix = f"{checkpoints.DAMAGED_SUFFIX}-{n}"
    for f in files:
      tf.io.gfile.rename(f, f + suffix)
    return [f + suffix for f in files]

  def _forget(self, newest: str) -> None:
    """Rewrites the state file without the damaged checkpoints, `newest` (intact) last, and makes the manager read
    it again: it keeps the list it read when made, and would write the damaged ones back with its next save."""
    state = tf.train.get_checkpoint_state(self.directory)
    listed = [os.path.basename(p) for p in state.all_model_checkpoint_paths]
    stamps = list(state.all_model_checkpoint_timestamps)
    kept = [(name, stamp) for name, stamp in zip(listed, stamps if len(stamps) == len(listed) else [None] * len(listed))
            if name not in self._damaged]
    newest = os.path.basename(newest)
    if not kept or kept[-1][0] != newest:
      kept = [(name, stamp) for name, stamp in kept if name != newest] + [(newest, None)]
    names, stamps = (list(column) for column in zip(*kept))
    # Whole paths, which it writes relative to the directory (a bare name it would take relative to the working
    # directory when the directory is a gs:// one).
    paths = [os.path.join(self.directory, name) for name in names]
    tf.__internal__.train.update_checkpoint_state(
        self.directory, paths[-1], paths, save_relative_paths=True,
        all_model_checkpoint_timestamps=None if None in stamps else stamps,
        last_preserved_timestamp=state.last_preserved_timestamp)
    self._manager = tf.train.CheckpointManager(self.checkpoint, self.directory, max_to_keep=self._max_to_keep)

  def restore(self, optional: tuple[str, ...] = ()) -> str | None:
    """Restores the newest checkpoint, if any; returns its path. The `optional` items may be missing from it (a
    run without them saved it): they then keep their values."""
    path = self.latest()
    if path is None:
      return None
    optional = [name for name in optional if name in self._items]
    saved = {name.split("/", 1)[0] for name, _ in tf.train.list_variables(path)} if optional else set()
    missing = [name for name in optional if name not in saved]
    checkpoint = self.checkpoint
    if missing:
      checkpoint = tf.train.Checkpoint(**{k: v for k, v in self._items.items() if k not in missing})
    checkpoint.restore(path).assert_existing_objects_matched()
    if self._input_manager is not None:
      step = path.rsplit("-", 1)[-1]
      input_path = os.path.join(self._input_manager.directory, f"ckpt-{step}")
      if tf.io.gfile.exists(input_path + ".index"):
        self._input_manager.checkpoint.restore(input_path).assert_existing_objects_matched()
      else:
        logging.warning("no saved input position for worker %d at step %s (%s): its input restarts from the "
                        "beginning of its files", self.worker, step, input_path)
    return path

  def save(self, step: int) -> str:
    """Writes checkpoint `step`; returns the path that was kept (the chief's).

    Raises DiskFull, with the partial files removed and the previous checkpoints intact, when the disk (or a
    file-size limit) has no room for it."""
    previous = self.latest()
    try:
      if self._input_manager is not None:
        self._input_manager.save(checkpoint_number=step)  # before the model: the state file is the commit
      path = self._manager.save(checkpoint_number=step)
    except (OSError, tf.errors.OpError) as e:
      if not is_disk_full(e):
        raise
      self._remove_partial(step)
      needed = self._size_estimate(previous)
      raise DiskFull(
          f"no room to write checkpoint {os.path.join(self._manager.directory, f'ckpt-{step}')} "
          f"({first_line(e)}): it needs about {needed / 2**20:.1f} MiB free in {self._manager.directory}; "
          + (f"the previous checkpoint {previous} is intact: free space and rerun the same command to resume"
             if previous else "free space and rerun the same command")) from None
    if not self.chief:
      tf.io.gfile.rmtree(self._manager.directory)
    self._damaged.discard(f"ckpt-{step}")  # written again, whole
    return os.path.join(self.directory, os.path.basename(path))

  def _remove_partial(self, step: int) -> None:
    for manager in (self._manager, self._input_manager):
      if manager is None:
        continue
      prefix = os.path.join(manager.directory, f"ckpt-{step}")
      for path in tf.io.gfile.glob(prefix + ".*") + tf.io.gfile.glob(prefix + "_temp*"):
        _remove(path)

  def _size_estimate(self, previous: str | None) -> int:
    """Bytes a checkpoint takes: the previous one's files, else the variables' sizes."""
    if previous:
      return sum(tf.io.gfile.stat(p).length for p in tf.io.gfile.glob(previous + ".*"))
    seen, total = set(), 0
    for item in self._items.values():
      variables = getattr(item, "variables", item if isinstance(item, (list, tuple)) else [item])
      for v in (variables() if callable(variables) else variables):
        if isinstance(v, (tf.Variable,)) or hasattr(v, "dtype") and hasattr(v, "shape"):
          if id(v) not in seen and v.shape.is_fully_defined():
            seen.add(id(v))
            total += v.shape.num_elements() * tf.as_dtype(v.dtype).size
    return total

  def remove_leftovers(self) -> list[str]:
    """Removes what an interrupted save left in `directory` (chief only); returns what was removed."""
    if not self.chief or not tf.io.gfile.isdir(self.directory):
      return []
    removed = []
    names = set(tf.io.gfile.listdir(self.directory))
    for name in sorted(names):
      name = name.rstrip("/")
      path = os.path.join(self.directory, name)
      data = re.match(r"^(.*)\.data-\d+-of-\d+$", name)
      if (re.match(r"^ckpt-\d+_temp", name) or name.startswith(("checkpoint.tmp", ".tmp-worker-"))
          or (data and data.group(1) + ".index" not in names)):
        _remove(path)
        removed.append(path)
    return removed


def remove_export_leftovers(output_dir: str) -> list[str]:
  """Removes the hidden temporaries (`.<name>.tmp-<hex>`) an interrupted export or write left in
  `output_dir`; returns them. Call only while holding the directory's lock."""
  output_dir = fileio.absolute(output_dir)
  if not tf.io.gfile.isdir(output_dir):
    return []
  removed = []
  for name in sorted(tf.io.gfile.listdir(output_dir)):
    if _TEMP_NAME.match(name.rstrip("/")):
      path = os.path.join(output_dir, name.rstrip("/"))
      _remove(path)
      removed.append(path)
  return removed


def _remove(path: str) -> None:
  if tf.io.gfile.isdir(path):
    tf.io.gfile.rmtree(path)
  elif tf.io.gfile.exists(path):
    tf.io.gfile.remove(path)


class TerminationSignal:
  """Turns SIGTERM and SIGINT (Ctrl-C) into a request to save and stop; a second one exits at once.

  Used as a context manager around the training loop (main thread only); restores the previous handlers on
  exit. `requested(strategy)` agrees across workers, so every worker of a multi-worker job stops at the same
  step even if only one was signalled.

  Why a watcher thread: Python runs signal handlers in the main thread between bytecodes, and during a long
  TensorFlow call (a host loop of many steps) the main thread is inside C++, so a handler would run only when
  the loop ends (minutes for a long loop). The C-level handler also writes the signal's number to a wakeup fd
  (`signal.set_wakeup_fd`); a thread blocked on it acts at once: it sets the event and calls `on_request`,
  which the trainer uses to set a variable its in-graph loop reads every step.

  Why not `tf.distribute.experimental.PreemptionCheckpointHandler`: on GCE TPU and CPU VMs it does nothing (by
  its source, TF 2.20), it counts its own `run` calls and adds them to the checkpoint, and it ends the process
  itself; this handler behaves the same under every strategy and leaves exit codes to the caller.
  """

  def __init__(self, signals=(signal.SIGTERM, signal.SIGINT), on_request: Callable[[], None] | None = None):
    self._signals = signals
    self._on_request = on_request
    self._event = threading.Event()
    self._previous = {}
    self._agree_fn = None
    self._pipe = None
    self._previous_fd = None
    self._count = 0
    self._lock = threading.Lock()
    self.signum: int | None = None  # the first signal received

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      read_fd, write_fd = os.pipe()
      os.set_blocking(write_fd, False)
      self._pipe = (read_fd, write_fd)
      self._previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
      for s in self._signals:
        self._previous[s] = signal.signal(s, self._handle)
      threading.Thread(target=self._watch, args=(read_fd,), name="termination-signal", daemon=True).start()
    return self

  def __exit__(self, *exc):
    for s, handler in self._previous.items():
      signal.signal(s, handler)
    self._previous.clear()
    if self._pipe is not None:
      signal.set_wakeup_fd(self._previous_fd if self._previous_fd is not None else -1)
      os.close(self._pipe[1])  # the watcher's read returns b"" and it ends; it closes the read end
      self._pipe = None

  def _handle(self, signum, frame):
    """Python-level handler, run in the main thread when it next runs Python: records the request too (the
    watcher may not have run yet when the main thread checks `requested`); counting is the watcher's."""
    del frame
    self._request(signum)

  def _watch(self, read_fd: int) -> None:
    try:
      while True:
        data = os.read(read_fd, 64)
        if not data:
          return
        for signum in data:
          if signum in self._signals:
            self._received(signum)
    finally:
      os.close(read_fd)

  def _received(self, signum: int) -> None:
    """The watcher's view: every signal, counted."""
    self._count += 1
    if self._count > 1:
      sys.stderr.write(f"\n{signal.Signals(signum).name} again: exiting now without saving; rerun the same "
                       "command to resume from the last checkpoint\n")
      sys.stderr.flush()
      os._exit(128 + signum)  # pylint: disable=protected-access
    self._request(signum)

  def _request(self, signum: int) -> None:
    """The first signal asks to save and stop (once, from whichever thread sees it first)."""
    with self._lock:
      if self.signum is not None:
        return
      self.signum = signum
    name = signal.Signals(signum).name
    logging.warning("received %s: stopping after the current step and saving a checkpoint (%s again exits at "
                    "once, without saving)", name, "Ctrl-C" if signum == signal.SIGINT else name)
    self._event.set()
    if self._on_request is not None:
      self._on_request()

  def set(self):
    self._event.set()

  def requested(self, strategy: tf.distribute.Strategy) -> bool:
    local = self._event.is_set()
    if distribute.num_workers(strategy) <= 1:
      return local
    if self._agree_fn is None:

      @tf.function
      def agree(flag):
        per_replica = strategy.experimental_distribute_values_from_function(lambda ctx: tf.identity(flag))
        # > 0 iff some worker was signalled.
        return strategy.reduce(tf.distribute.ReduceOp.SUM, per_replica, axis=None)

      self._agree_fn = agree
    return bool(self._agree_fn(tf.constant(1.0 if local else 0.0)).numpy() > 0)
