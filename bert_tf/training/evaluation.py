"""Evaluation while training, for pretraining and every fine-tuning task: what `Trainer` does with an
`Evaluation`.

Every `every_steps` steps, and at the last step, the trainer calls the task's `evaluate(model)` (fine-tuning:
the dev split, the task's official metric; pretraining: the held-out records' masked-LM and next-sentence
metrics), logs the values and writes them to TensorBoard under `eval/` (<output_dir>/eval), through
`EvalReport`, which pretraining's final --do_eval uses too. With a `metric`, it tracks the best value of it (a
loss: the lowest; anything else: the highest), keeps that step's weights when `keep_best` is on (restored into
the model at the end, so the task saves and exports them), and ends training, as a normal finish, after
`early_stopping_patience` evaluations without improvement.

Why the state lives in the training checkpoint: a killed run resumes with the best step and value, the count
of evaluations without improvement and the history that the uninterrupted run had at that step, so it makes
the same decisions and ends the same. The state is small: one JSON string variable. A run that did not evaluate
saved none: resuming it with evaluation starts the history afresh, which is refused only where decisions depend
on the evaluations before (`keep_best`, `early_stopping_patience`).

The best weights: <output_dir>/best/ckpt-<step>, the model's variables only, written when a new best arrives
(TensorFlow writes the index last, so a half-written one has none and is never restored). An older one is
removed only once a training checkpoint that names a newer best is saved: whichever checkpoint a rerun
resumes from, the best it names is still on disk.
"""

from __future__ import annotations

import dataclasses
import json
import math
import numbers
import os
import re
import time
from typing import Callable

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf.training import distribute

# The keys of `EvalTracker.finish`'s summary, which eval_results record.
RESULT_KEYS = ("eval_every_steps", "metric_for_best", "best_step", "best_metric", "kept_best_checkpoint",
               "stopped_early", "eval_history")
BEST_DIR = "best"  # under the output dir
EVAL_DIR = "eval"  # TensorBoard summaries of the evaluations


@dataclasses.dataclass
class Evaluation:
  """What a task supplies to evaluate while training, and the flags that say how often and what to keep."""

  evaluate: Callable[[keras.Model], dict[str, float]]  # the dev split's metrics (numbers) for the model now
  metric: str | None  # --metric_for_best: a key of evaluate's result; None: no best (pretraining)
  every_steps: int  # --eval_every_steps (>= 1)
  keep_best: bool = False  # --keep_best_checkpoint
  early_stopping_patience: int = 0  # 0: never stop early

  def __post_init__(self):
    if self.metric is None and (self.keep_best or self.early_stopping_patience):
      raise ValueError("--keep_best_checkpoint and --early_stopping_patience need --metric_for_best")

  @property
  def greater_is_better(self) -> bool:
    return "loss" not in self.metric


def _numbers(values: dict) -> dict[str, float | int]:
  """The numeric entries of an evaluation, as plain Python numbers (they go into JSON and TensorBoard)."""
  out = {}
  for key, value in values.items():
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
      continue
    out[key] = int(value) if isinstance(value, numbers.Integral) else float(value)
  return out


class EvalTracker:
  """Runs the evaluations of one training run and keeps their state (see the module docstring)."""

  def __init__(self, evaluation: Evaluation, model: keras.Model, strategy: tf.distribute.Strategy,
               output_dir: str):
    self.evaluation, self.model, self.strategy = evaluation, model, strategy
    self.chief = distribute.is_chief(strategy)
    self.directory = os.path.join(output_dir, BEST_DIR)
    self._report = EvalReport(output_dir, self.chief)
    self.state = _fresh_state()
    # A host variable (strings do not live on accelerators), saved with the training checkpoint.
    with tf.device("/cpu:0"):
      self.variable = tf.Variable(json.dumps(self.state), dtype=tf.string, trainable=False,
                                  name="evaluation_state")
    self._best = tf.train.Checkpoint(model=model)
    self.seconds = 0.0  # spent evaluating in this process

  def check_checkpoint(self, path: str | None) -> None:
    """For the checkpoint a run would resume from: when it has no evaluation state (a run started without
    --eval_every_steps saved it), raises ValueError if this run keeps the best weights or stops early (both
    decide from every evaluation since the first step), else says that the evaluations start afresh."""
    if not path or any(name.startswith("evaluation/") for name, _ in tf.train.list_variables(path)):
      return
    needs = [flag for flag, on in (("--keep_best_checkpoint", self.evaluation.keep_best),
                                   ("--early_stopping_patience", self.evaluation.early_stopping_patience)) if on]
    if needs:
      raise ValueError(f"{path} was saved by a run without --eval_every_steps, and {' and '.join(needs)} "
                       "decide from every evaluation since the first step: resume it without "
                       f"{' and '.join(needs)}, or start over in a new --output_dir")
    logging.info("%s was saved by a run without --eval_every_steps: the evaluations start with this run", path)

  def load(self) -> None:
    """Takes the state from the variable (after a checkpoint restored it)."""
    self.state = json.loads(self.variable.numpy().decode("utf-8"))

  @property
  def stopped_early(self) -> bool:
    return self.state["stopped_early_at"] is not None

  def due(self, step: int, last: bool) -> bool:
    """An evaluation falls on `step` and has not run there yet (a resumed run may restart at an evaluated step)."""
    history = self.state["history"]
    return (step % self.evaluation.every_steps == 0 or last) and not (history and history[-1]["step"] == step)

  def run(self, step: int, last: bool = False) -> bool:
    """Evaluates at `step`, updates the state (and the best weights); returns True to stop early. At the `last`
    step there is nothing left to stop: the run finishes normally, whatever the patience count."""
    start = time.perf_counter()
    values = _numbers(self.evaluation.evaluate(self.model))
    state, metric = self.state, self.evaluation.metric
    if metric is not None:
      self._track_best(step, values)
    state["history"].append({"step": step, **values})
    patience = self.evaluation.early_stopping_patience
    if patience and state["evaluations_without_improvement"] >= patience and not last:
      state["stopped_early_at"] = step
    self.variable.assign(json.dumps(state))
    seconds = time.perf_counter() - start
    self.seconds += seconds
    best = "" if metric is None else f"best {metric} {state['best_value']:.4g} at step {state['best_step']}; "
    self._report.write(step, values, f"{best}{seconds:.1f} s")
    if self.stopped_early:
      logging.info("early stopping: %d evaluations without a better %s than at step %d", patience, metric,
                   state["best_step"])
    return self.stopped_early

  def _track_best(self, step: int, values: dict) -> None:
    metric, state = self.evaluation.metric, self.state
    if metric not in values:
      raise ValueError(f"--metric_for_best={metric}: the evaluation has no such metric; choose one of "
                       f"{', '.join(sorted(values))}")
    value = values[metric]
    if _improves(value, state["best_value"], state["best_step"] is None, self.evaluation.greater_is_better):
      state.update(best_step=step, best_value=value, evaluations_without_improvement=0)
      if self.evaluation.keep_best:
        self._save_best(step)
    else:
      state["evaluations_without_improvement"] += 1

  def _path(self, step: int) -> str:
    return os.path.join(self.directory, f"ckpt-{step}")

  def _save_best(self, step: int) -> None:
    # Every worker writes (the variables may need collectives to read); only the chief's files are kept.
    worker = distribute.worker_index(self.strategy)
    path = self._path(step) if self.chief else os.path.join(self.directory, f".tmp-worker-{worker}", f"ckpt-{step}")
    self._best.write(path)
    if not self.chief:
      tf.io.gfile.rmtree(os.path.dirname(path))

  def committed(self) -> None:
    """Called once a training checkpoint holding the current state is saved: removes the best weights no
    state can name any more."""
    if not (self.chief and self.evaluation.keep_best and tf.io.gfile.isdir(self.directory)):
      return
    keep = f"ckpt-{self.state['best_step']}."
    for name in tf.io.gfile.listdir(self.directory):
      if re.match(r"^ckpt-\d+[._]", name) and not name.startswith(keep):
        path = os.path.join(self.directory, name.rstrip("/"))
        (tf.io.gfile.rmtree if tf.io.gfile.isdir(path) else tf.io.gfile.remove)(path)

  def finish(self) -> dict:
    """At the end of training: the best weights into the model (with `keep_best`); returns the summary that
    eval_results record."""
    state = self.state
    if self.evaluation.keep_best and state["best_step"] is not None:
      self._best.restore(self._path(state["best_step"])).expect_partial()
      logging.info("kept the weights of step %d (best %s %.4g)", state["best_step"], self.evaluation.metric,
                   state["best_value"])
    return {"eval_every_steps": self.evaluation.every_steps, "metric_for_best": self.evaluation.metric,
            "best_step": state["best_step"], "best_metric": state["best_value"],
            "kept_best_checkpoint": self.evaluation.keep_best, "stopped_early": self.stopped_early,
            "eval_history": state["history"]}


_FLOAT32_MAX = float(np.finfo(np.float32).max)


class EvalReport:
  """The one way an evaluation is reported, during training (`EvalTracker`) and after it (pretraining's
  --do_eval): a line `eval at step N: name value  ...` and the values as TensorBoard scalars `eval/<name>` under
  <output_dir>/eval (the chief's; other workers write none)."""

  def __init__(self, output_dir: str, chief: bool = True):
    self._directory = os.path.join(output_dir, EVAL_DIR)
    self._chief = chief
    self._writer = None

  def write(self, step: int, values: dict[str, float], note: str = "") -> None:
    """Logs `values` (numbers) of the evaluation at `step`, with `note` in brackets, and writes their scalars."""
    shown = "  ".join(f"{k} {v:.4g}" for k, v in values.items())
    logging.info("eval at step %d: %s%s", step, shown, f"  ({note})" if note else "")
    if self._writer is None:
      self._writer = (tf.summary.create_file_writer(self._directory) if self._chief
                      else tf.summary.create_noop_writer())
    with self._writer.as_default(step=step):
      for name, value in values.items():
        # TensorBoard keeps float32: a value beyond it (SQuAD v2.0's best_*_thresh is the largest double when
        # no threshold beats answering everything) is in the log line and eval_results, not in a scalar.
        if not math.isfinite(value) or abs(value) <= _FLOAT32_MAX:
          tf.summary.scalar(f"eval/{name}", value)
    self._writer.flush()


def _fresh_state() -> dict:
  return {"best_step": None, "best_value": None, "evaluations_without_improvement": 0, "stopped_early_at": None,
          "history": []}


def _improves(value: float, best: float | None, first: bool, greater_is_better: bool) -> bool:
  """A NaN never improves on a number; any number improves on NaN."""
  if first:
    return True
  if math.isnan(value):
    return False
  if math.isnan(best):
    return True
  return value > best if greater_is_better else value < best
