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

Under MultiWorkerMirroredStrategy every worker must take part in a save (it may run collectives), but only the
chief's files are kept: the others write to `.tmp-worker-<w>/`, deleted right after. Each worker's input
iterator holds that worker's own file shard and position, so each saves it in its own `input_pipeline-<w>/`.
"""

from __future__ import annotations

import os
import signal
import threading

import tensorflow as tf
from absl import logging

from bert_tf.training import distribute


class Checkpointer:
  """Saves and restores `items` (trackables: model, optimizer, step variable) and an input iterator."""

  def __init__(self, directory: str, strategy: tf.distribute.Strategy, max_to_keep: int = 5,
               iterator=None, **items):
    self.directory = directory
    self.chief = distribute.is_chief(strategy)
    self.worker = distribute.worker_index(strategy)
    multi_worker = distribute.num_workers(strategy) > 1
    if iterator is not None and not multi_worker:
      items["iterator"] = iterator
    self.checkpoint = tf.train.Checkpoint(**items)
    write_dir = directory if self.chief else os.path.join(directory, f".tmp-worker-{self.worker}")
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
      if not os.path.isabs(path) and "://" not in path:
        path = os.path.join(self.directory, path)
      if path not in paths:
        paths.append(path)
    for path in paths:
      if tf.io.gfile.exists(path + ".index"):
        if path != paths[0]:
          logging.warning("checkpoint %s is listed but incomplete; using %s", paths[0], path)
        return path
    return None

  def restore(self) -> str | None:
    """Restores the newest checkpoint, if any; returns its path."""
    path = self.latest()
    if path is None:
      return None
    self.checkpoint.restore(path).assert_existing_objects_matched()
    if self._input_manager is not None:
      step = path.rsplit("-", 1)[-1]
      input_path = os.path.join(self._input_manager.directory, f"ckpt-{step}")
      if tf.io.gfile.exists(input_path + ".index"):
        self._input_manager.checkpoint.restore(input_path).assert_existing_objects_matched()
      else:
        logging.warning("no saved input position for worker %d at step %s (%s): its input restarts from the "
                        "beginning of its files", self.worker, step, input_path)
    logging.info("restored %s", path)
    return path

  def save(self, step: int) -> str:
    """Writes checkpoint `step`; returns the path that was kept (the chief's)."""
    if self._input_manager is not None:
      self._input_manager.save(checkpoint_number=step)  # before the model: the state file is the commit
    path = self._manager.save(checkpoint_number=step)
    if not self.chief:
      tf.io.gfile.rmtree(self._manager.directory)
    return os.path.join(self.directory, os.path.basename(path))


class TerminationSignal:
  """Turns SIGTERM into a request to save and stop at the next host-loop boundary.

  Used as a context manager around the training loop (main thread only); restores the previous handler on
  exit. `requested(strategy)` agrees across workers, so every worker of a multi-worker job stops at the same
  step even if only one was signalled.

  Why not `tf.distribute.experimental.PreemptionCheckpointHandler`: on GCE TPU and CPU VMs it does nothing (by
  its source, TF 2.20), it counts its own `run` calls and adds them to the checkpoint, and it ends the process
  itself; this handler behaves the same under every strategy and leaves exit codes to the caller.
  """

  def __init__(self, signals=(signal.SIGTERM,)):
    self._signals = signals
    self._event = threading.Event()
    self._previous = {}
    self._agree_fn = None

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      for s in self._signals:
        self._previous[s] = signal.signal(s, self._handle)
    return self

  def __exit__(self, *exc):
    for s, handler in self._previous.items():
      signal.signal(s, handler)
    self._previous.clear()

  def _handle(self, signum, frame):
    del frame
    logging.warning("received signal %d: saving a checkpoint at the end of this loop, then stopping", signum)
    self._event.set()

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
