"""The one training loop: pretraining and every fine-tuning task run through `Trainer`.

A `Task` supplies the model, its input, and its loss as *sums* over examples; the trainer owns the
distribution strategy, the optimizer, gradient accumulation, mixed precision, checkpoints, summaries and the
progress line.

Why sums: the loss of a global batch is a ratio such as sum(per-token loss) / sum(weights). Each replica and
micro-batch computes its numerator and divides by the denominator of the *whole* global batch (`normalizers`,
summed over micro-batches and all-reduced before the forward pass), so the gradients, summed across
micro-batches and replicas, are exactly those of the global batch: the loss and the update do not depend on
the number of replicas or of accumulation steps.

One optimizer step (`global_batch_size` examples):

  per replica: features [G / R, ...] -> N micro-batches [G / (R N), ...]
    normalizers(all N) --all-reduce--> global normalizers
    for each micro-batch: forward, loss(terms, global normalizers), backward; sum gradients and terms
  all-reduce the summed gradients and terms -> optimizer.apply (clip, update) on every replica alike

With --jit_compile, XLA compiles the whole replica step above (forward, backward, accumulation, the all-reduces,
clipping and the optimizer update) as one computation where TensorFlow allows it: one replica, or replicas that are
all GPUs (TensorFlow then all-reduces with its collective ops inside the compiled step). Across several CPU
devices it compiles the forward and backward passes with their accumulation only (`xla_coverage`). On a TPU,
TPUStrategy compiles the whole step whatever the flag says.

`steps_per_loop` such steps run inside one `tf.function` call, so the host is consulted once per loop. On one
worker (not TPU) the loop also reads a stop variable every step, so a Ctrl-C or SIGTERM is honoured after the
step in flight; and the host sizes loops from the measured step rate to last about `progress_seconds` (the first
loop is one step), so a progress line (step, loss, examples/s, ETA) shows from the first steps on, whatever
`steps_per_loop` is. Neither changes a result: the same steps run on the same batches, and checkpoints still
fall on the same steps.

With an `Evaluation` (--eval_every_steps, of pretraining and of every fine-tuning task), loops also end on the
evaluation steps, where the task's `evaluate(model)` runs between loops; its state (best step and value,
history) is saved with each checkpoint (bert_tf/training/evaluation.py).
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Any, Callable

import keras
import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.errors import UserError, first_line
from bert_tf.training import checkpointing, choices, distribute, optimization
from bert_tf.training.evaluation import EvalTracker, Evaluation


class Task:
  """What a training task supplies. Subclass and override; everything else is the trainer's."""

  def build_model(self) -> keras.Model:
    """The model, called as `model(features, training=True)`; built under the strategy's scope."""
    raise NotImplementedError

  def build_dataset(self, batch_size: int, input_context: tf.distribute.InputContext) -> tf.data.Dataset:
    """Batches of `batch_size` (the per-replica batch) for the input pipeline `input_context` names."""
    raise NotImplementedError

  def normalizers(self, features: dict) -> dict[str, tf.Tensor]:
    """Denominators of the loss that depend on the inputs only (counts, weight sums), as float32 sums."""
    return {}

  def loss_terms(self, features: dict, outputs: Any) -> dict[str, tf.Tensor]:
    """float32 scalar sums over the batch (loss sums, correct counts, ...); outputs are cast to float32."""
    raise NotImplementedError

  def loss(self, terms: dict, normalizers: dict) -> tf.Tensor:
    """The scalar to minimise, linear in `terms` and divided by the global `normalizers`."""
    raise NotImplementedError

  def metrics(self, sums: dict[str, float]) -> dict[str, float]:
    """Reported metrics from `terms` and `normalizers` summed over a window of steps (numpy on the host)."""
    return {}

  def checkpoint_items(self, model: keras.Model) -> dict[str, Any]:
    """What goes into training checkpoints beside the optimizer and step."""
    return {"model": model}

  def input_error(self, error: Exception) -> str:
    """One line saying which input is bad, for an error TensorFlow raised while reading it mid-training
    (a corrupt record, say); tasks that know their files name the file and record."""
    return first_line(error)

  def input_fix(self, latest: str | None) -> str:
    """What to do about the input `input_error` named, the end of that line; `latest`: the run's last checkpoint
    (None: no step was saved). A task whose input the run record binds by content (`run_identity`), or that
    caches it, says what works for it."""
    return (f"the last good checkpoint is {latest or 'none (no step was saved)'}: fix or remove the file and rerun "
            "the same command to resume")


DTYPES = choices.DTYPES  # the Keras dtype policies a model may have (--dtype)


@dataclasses.dataclass
class TrainerConfig:
  output_dir: str
  global_batch_size: int  # examples per optimizer update, over all replicas and accumulation steps
  num_train_steps: int
  gradient_accumulation_steps: int = 1
  steps_per_loop: int = 100  # optimizer steps per host call
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5
  log_steps: int = 100  # a progress line and summaries every this many steps (rounded to loop ends)
  jit_compile: bool = False  # XLA-compile each replica's step (see `xla_coverage`)
  progress_seconds: float = 10.0  # a short progress line at least this often (one worker, not TPU)

  def validate(self, num_replicas: int) -> None:
    """Raises ValueError naming the flag at fault and what to change."""
    for name in ("global_batch_size", "num_train_steps", "gradient_accumulation_steps", "steps_per_loop",
                 "save_checkpoints_steps", "keep_checkpoint_max", "log_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"--{name}={getattr(self, name)}: must be >= 1")
    parts = num_replicas * self.gradient_accumulation_steps
    if self.global_batch_size % parts:
      raise ValueError(
          f"--train_batch_size={self.global_batch_size} is not divisible by replicas ({num_replicas}) x "
          f"--gradient_accumulation_steps ({self.gradient_accumulation_steps}) = {parts}; "
          f"pick a multiple of {parts}")


@dataclasses.dataclass
class TrainResult:
  step: int
  metrics: dict[str, float]
  interrupted: bool  # stopped early by SIGTERM or SIGINT, after saving a checkpoint
  history: list[dict[str, float]] = dataclasses.field(default_factory=list)  # the logged values, in order
  signal: int | None = None  # the signal that stopped it
  # The steps this process ran: `step` less those a resumed run took over from its checkpoint. Rates are
  # these steps over this process's time.
  steps_run: int = 0
  eval_seconds: float = 0.0  # this process's time evaluating while training
  # With evaluation while training: EvalTracker.finish's summary (best step and value, every evaluation).
  evaluation: dict | None = None
  # Under mixed_float16's dynamic loss scaling: the updates skipped for non-finite gradients over the whole run
  # (resumed runs included, from the checkpoint), and the loss scale at the end. None without loss scaling.
  skipped_updates: int | None = None
  loss_scale: float | None = None

  @property
  def exit_code(self) -> int:
    """What a script exits with: 0, or 128 + the signal (130 for Ctrl-C, 143 for SIGTERM) when stopped."""
    if not self.interrupted:
      return 0
    return 128 + (self.signal or 15)


# What --jit_compile compiles (`xla_coverage`).
XLA_OFF = "off"
XLA_WHOLE_STEP = "the whole replica step"
XLA_GRADIENTS = "forward and backward passes with their accumulation"
XLA_TPU = "the whole replica step, by TPUStrategy"


def xla_coverage(strategy: tf.distribute.Strategy, jit_compile: bool) -> str:
  """What XLA compiles of a replica's step under `strategy`: one of the XLA_* values above.

  The whole step where TensorFlow allows it: with one replica, or when every replica is a GPU (MirroredStrategy
  and MultiWorkerMirroredStrategy then all-reduce with collective ops inside the compiled step, and Keras'
  optimizers update each replica's variables without a merge_call). Across several CPU devices TensorFlow compiles
  a `jit_compile` function given to `strategy.run` around all replicas at once, where the merge_calls of the
  all-reduces and of the optimizer cannot be compiled: there the forward and backward passes (with gradient
  accumulation) are compiled per replica, and the all-reduces, clipping and update run uncompiled. A TPU compiles
  the whole step itself; a nested jit_compile adds nothing there.
  """
  if isinstance(strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy)):
    return XLA_TPU
  if not jit_compile:
    return XLA_OFF
  devices = getattr(strategy.extended, "worker_devices", None) or ()
  if strategy.num_replicas_in_sync == 1 or (devices and all("GPU" in d.upper() for d in devices)):
    return XLA_WHOLE_STEP
  return XLA_GRADIENTS


# The sum a loss-scaled step adds for an update skipped for non-finite gradients (1 or 0).
SKIPPED = "skipped_updates"


def _as_float32(x):
  return tf.cast(x, tf.float32) if x.dtype.is_floating else x


def _zeros_like_spec(spec: tf.TensorSpec) -> tf.Tensor:
  return tf.zeros([1 if d is None else d for d in spec.shape], spec.dtype)


def _non_weight_variables(model: keras.Model) -> list:
  """Variables that `model.weights` (and so a checkpoint of the model) leaves out: the dropout layers' seed
  generator states. Saved so that a resumed run draws the dropout masks the uninterrupted one would."""
  weights = {id(w) for w in model.weights}
  return [v for v in model.variables if id(v) not in weights]


class Trainer:
  """Trains `task.build_model()` under `strategy`; resumes from `<output_dir>/checkpoints` if present. With
  `evaluation`, evaluates while training (bert_tf/training/evaluation.py)."""

  def __init__(self, task: Task, strategy: tf.distribute.Strategy,
               optimizer_fn: Callable[[], keras.optimizers.Optimizer], config: TrainerConfig,
               evaluation: Evaluation | None = None):
    self.task, self.strategy, self.config = task, strategy, config
    self.num_replicas = strategy.num_replicas_in_sync
    config.validate(self.num_replicas)
    self.chief = distribute.is_chief(strategy)
    # One input pipeline per worker, on its host, read through a plain tf.data iterator: unlike the
    # iterators of strategy.distribute_datasets_from_function (TF 2.20), it can be saved in a checkpoint, so
    # a resumed run continues the very stream it left. Each step's worker batch is split across the local
    # replicas in-graph (`_split`).
    self.num_workers = distribute.num_workers(strategy)
    self.local_replicas = self.num_replicas // self.num_workers
    context = tf.distribute.InputContext(self.num_workers, distribute.worker_index(strategy), self.num_replicas)
    dataset = task.build_dataset(config.global_batch_size // self.num_workers, context)
    with strategy.scope():
      self.model = task.build_model()
      # Subclassed models create variables on first call; the optimizer must see them all before tracing.
      # The same call on a 1-example zero batch tells the names of the loss terms the loop will sum.
      zeros = tf.nest.map_structure(_zeros_like_spec, dataset.element_spec)
      outputs = tf.nest.map_structure(_as_float32, self.model(zeros, training=False))
      self._term_names = sorted({*task.loss_terms(zeros, outputs), "loss"})
      self._sum_names = sorted({*self._term_names, *task.normalizers(zeros)})
      self.optimizer = optimizer_fn()
      self.optimizer.build(self.model.trainable_variables)
      self.step = tf.Variable(0, dtype=tf.int64, trainable=False, name="step",
                              aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
      # mixed_float16: the LossScaleOptimizer skips an update whose gradients are not finite (and halves the
      # loss scale). Each step returns whether it skipped (a sum like the loss terms); the run's total is saved
      # with each checkpoint, so a resumed run goes on counting where the killed one stood.
      self.loss_scaling = isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer)
      self.skipped_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="skipped_updates",
                                         aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
    if self.loss_scaling:
      self._sum_names = sorted({*self._sum_names, SKIPPED})
    self.iterator = iter(dataset)
    # The run's first lines say where and how it computes (distribute.get_strategy logged the devices).
    self.xla = xla_coverage(strategy, config.jit_compile)
    logging.info("training on %d replica(s), %d worker(s); dtype policy %s; XLA %s", self.num_replicas,
                 self.num_workers, getattr(getattr(self.model, "dtype_policy", None), "name", "float32"),
                 self.xla if self.xla in (XLA_OFF, XLA_TPU) else f"(--jit_compile) compiles {self.xla}")
    if self.xla == XLA_WHOLE_STEP and self.num_replicas > 1 and isinstance(
        getattr(strategy.extended, "_cross_device_ops", None), tf.distribute.HierarchicalCopyAllReduce):
      logging.warning("--all_reduce_alg=hierarchical_copy does not apply under --jit_compile on GPUs: TensorFlow "
                      "all-reduces with its collective ops (NCCL) inside the compiled step")
    self.output_dir = fileio.absolute(config.output_dir)
    self.evaluator = None if evaluation is None else EvalTracker(evaluation, self.model, strategy,
                                                                 self.output_dir)
    # The evaluation state joins the checkpoint only when evaluating, the skipped updates only under loss
    # scaling: other runs' checkpoints stay as they were.
    extra = {} if self.evaluator is None else {"evaluation": self.evaluator.variable}
    if self.loss_scaling:
      extra[SKIPPED] = self.skipped_updates
    self.checkpointer = checkpointing.Checkpointer(
        os.path.join(self.output_dir, "checkpoints"), strategy, config.keep_checkpoint_max,
        iterator=self.iterator, optimizer=self.optimizer, step=self.step,
        model_state=_non_weight_variables(self.model), **extra, **task.checkpoint_items(self.model))
    for path in self.checkpointer.remove_leftovers():
      logging.warning("removed %s, left by an interrupted save", path)
    self.checkpointer.set_aside_damaged()  # before anything reads the checkpoint a resume takes
    # Early loop ends need every worker to agree on them (collectives), and a TPU loop cannot read a host
    # variable cheaply: there loops end at their planned size.
    self._early_loop_end = self.num_workers == 1 and not isinstance(
        strategy, (tf.distribute.TPUStrategy, tf.distribute.experimental.TPUStrategy))
    self._stop = tf.Variable(False, trainable=False, name="stop_requested")
    # Without XLA both are the plain Python methods, traced into the loop's graph.
    self._replica_step_fn, self._accumulate_fn = self._replica_step, self._accumulate
    if self.xla == XLA_WHOLE_STEP:
      self._replica_step_fn = tf.function(self._replica_step, jit_compile=True)
    elif self.xla == XLA_GRADIENTS:
      self._accumulate_fn = tf.function(self._accumulate, jit_compile=True)
    self._loop_fn = tf.function(self._loop)
    self._writer = None
    self.history: list[dict[str, float]] = []  # one entry per progress line: {"step": ..., metrics...}

  # -- In-graph ------------------------------------------------------------------------------------------

  def _grads(self, features, normalizers):
    """One micro-batch on one replica -> (gradients, terms with "loss"); terms are float32 sums."""
    variables = self.model.trainable_variables
    with tf.GradientTape() as tape:
      outputs = self.model(features, training=True)
      outputs = tf.nest.map_structure(_as_float32, outputs)
      terms = {k: tf.cast(v, tf.float32) for k, v in self.task.loss_terms(features, outputs).items()}
      loss = self.task.loss(terms, normalizers)
      scaled = self.optimizer.scale_loss(loss)  # x dynamic loss scale under mixed_float16, else unchanged
    grads = tape.gradient(scaled, variables)
    grads = [tf.zeros_like(v) if g is None else tf.convert_to_tensor(g) for g, v in zip(grads, variables)]
    return grads, dict(terms, loss=loss)

  def _accumulate(self, features, normalizers):
    """A replica's batch [G/R, ...] as N micro-batches -> (their gradients and terms, each summed over them)."""
    n = self.config.gradient_accumulation_steps
    if n == 1:
      return self._grads(features, normalizers)
    # [G/R, ...] -> [N, G/(R N), ...]; micro-batch i is row i. One traced body, run N times.
    micro = tf.nest.map_structure(lambda x: tf.reshape(x, tf.concat([[n, -1], tf.shape(x)[1:]], 0)), features)
    grads = [tf.zeros_like(v) for v in self.model.trainable_variables]
    terms = {k: tf.constant(0.0) for k in self._term_names}
    for i in tf.range(n):
      batch = {k: v[i] for k, v in micro.items()}
      g, t = self._grads(batch, normalizers)
      grads = [a + b for a, b in zip(grads, g)]
      terms = {k: terms[k] + t[k] for k in self._term_names}
    return grads, terms

  def _replica_step(self, features):
    ctx = tf.distribute.get_replica_context()
    normalizers = {k: tf.cast(v, tf.float32) for k, v in self.task.normalizers(features).items()}
    normalizers = ctx.all_reduce(tf.distribute.ReduceOp.SUM, normalizers) if normalizers else {}
    grads, terms = self._accumulate_fn(features, normalizers)
    grads, terms = ctx.all_reduce(tf.distribute.ReduceOp.SUM, (grads, terms))
    self.optimizer.apply(grads, self.model.trainable_variables)  # clips the summed gradients, then updates
    sums = dict(terms, **normalizers)
    if self.loss_scaling:  # the very test LossScaleOptimizer.apply skips on, of the same all-reduced gradients
      sums[SKIPPED] = 1.0 - tf.cast(self.optimizer.check_finite(grads), tf.float32)
    return sums

  def _split(self, batch):
    """A worker's batch [G / workers, ...] -> per-replica values [G / replicas, ...], replica r taking the
    r-th contiguous slice (so one replica and several see the same global batch)."""
    if self.num_replicas == 1:
      return batch
    n = self.local_replicas

    def slice_for(ctx):
      i = ctx.replica_id_in_sync_group % n
      return tf.nest.map_structure(lambda x: tf.split(x, n, axis=0)[i], batch)

    return self.strategy.experimental_distribute_values_from_function(slice_for)

  def _loop(self, iterator, num_steps):
    """Up to `num_steps` optimizer steps -> (terms and normalizers summed over them (global sums), steps run).

    With early loop ends on, stops before a step once a stop was requested (at least one step runs)."""

    def step():
      sums = self.strategy.run(self._replica_step_fn, args=(self._split(next(iterator)),))
      return {k: self.strategy.experimental_local_results(v)[0] for k, v in sums.items()}

    sums = {k: tf.constant(0.0) for k in self._sum_names}
    done = tf.constant(0)
    for _ in tf.range(num_steps):
      if self._early_loop_end:
        if done > 0 and self._stop.read_value():
          break
      new = step()
      sums = {k: sums[k] + new[k] for k in self._sum_names}
      done += 1
    return sums, done

  # -- Host ----------------------------------------------------------------------------------------------

  def _summary_writer(self):
    if self._writer is None:
      self._writer = (tf.summary.create_file_writer(os.path.join(self.output_dir, "train"))
                      if self.chief else tf.summary.create_noop_writer())
    return self._writer

  def _loss_scale_values(self, skipped: float) -> dict[str, float]:
    """Under loss scaling: the loss scale, the updates skipped in a window and in the whole run; else {}."""
    if not self.loss_scaling:
      return {}
    return {"loss_scale": float(self.optimizer.dynamic_scale.numpy()), SKIPPED: skipped,
            "skipped_updates_total": float(self.skipped_updates.numpy())}

  @staticmethod
  def _shown(values: dict[str, float]) -> str:
    """Values for a progress line; the skipped updates only when some were skipped in its window."""
    hidden = {"steps_per_second"} | ({SKIPPED, "skipped_updates_total"} if not values.get(SKIPPED) else set())
    return "  ".join(f"{k} {v:.4g}" for k, v in values.items() if k not in hidden)

  def _report(self, step: int, sums: dict[str, float], steps: int, seconds: float) -> dict[str, float]:
    values = dict(self.task.metrics({k: v for k, v in sums.items() if k != SKIPPED}))
    values = {"loss": sums["loss"] / steps, **values}
    values["learning_rate"] = optimization.current_learning_rate(self.optimizer)
    values.update(self._loss_scale_values(sums.get(SKIPPED, 0.0)))
    values["sequences_per_second"] = steps * self.config.global_batch_size / max(seconds, 1e-9)
    values["steps_per_second"] = steps / max(seconds, 1e-9)
    with self._summary_writer().as_default(step=step):
      for name, value in values.items():
        tf.summary.scalar(name, value)
    shown = self._shown(values)
    logging.info("step %d/%d  %s%s", step, self.config.num_train_steps, shown, self._eta(step))
    self.history.append({"step": step, **values})
    return values

  def _eta(self, step: int) -> str:
    left = self.config.num_train_steps - step
    if left <= 0 or self._rate_steps <= 0:
      return ""
    return f"  ETA {_duration(left * self._rate_seconds / self._rate_steps)}"

  def _progress(self, step: int, sums: dict[str, float], steps: int, seconds: float) -> None:
    """The short line between full reports: step, loss, examples/s, (updates skipped since the last line,) ETA."""
    skipped = sums.get(SKIPPED, 0.0)
    logging.info("step %d/%d  loss %.4g  %.4g examples/s%s%s", step, self.config.num_train_steps,
                 sums["loss"] / max(steps, 1), steps * self.config.global_batch_size / max(seconds, 1e-9),
                 f"  {self._shown(self._loss_scale_values(skipped))}" if skipped else "", self._eta(step))

  def train(self) -> TrainResult:
    """Runs until `num_train_steps` (or a SIGTERM / SIGINT); saves checkpoints on the way and at the end."""
    cfg = self.config
    if self.evaluator is not None:
      self.evaluator.check_checkpoint(self.checkpointer.latest())
    # A run that did not evaluate saved no evaluation state: the evaluations then start with this run.
    restored = self.checkpointer.restore(optional=("evaluation", SKIPPED))
    step = int(self.step.numpy())
    if restored and self.loss_scaling and SKIPPED not in {
        name.split("/", 1)[0] for name, _ in tf.train.list_variables(restored)}:
      logging.info("%s predates the count of skipped updates: counting from step %d", restored, step)
    if restored:
      logging.info("resuming at step %d from %s%s", step, restored,
                   f", training to step {cfg.num_train_steps}" if step < cfg.num_train_steps else "")
      if step >= cfg.num_train_steps:
        logging.info("%s is at step %d, --num_train_steps=%d: nothing left to train", restored, step,
                     cfg.num_train_steps)
    else:
      logging.info("starting fresh in %s (no checkpoint there yet)", self.checkpointer.directory)
    evaluator = self.evaluator
    if evaluator is not None:
      evaluator.load()
      if evaluator.stopped_early:
        logging.info("%s stopped early at step %d: nothing left to train", restored,
                     evaluator.state["stopped_early_at"])
    first_step = step
    metrics: dict[str, float] = {}
    window: dict[str, float] = {}
    window_steps, window_seconds = 0, 0.0
    progress: dict[str, float] = {}
    progress_steps, progress_seconds, last_line = 0, 0.0, time.perf_counter()
    self._rate_steps, self._rate_seconds = 0, 0.0  # for the ETA, without the first loop (tracing)
    saved_at = step if restored else -1
    self._stop.assign(False)
    first_loop = True
    with checkpointing.TerminationSignal(on_request=lambda: self._stop.assign(True)) as termination:
      while step < cfg.num_train_steps and not (evaluator is not None and evaluator.stopped_early):
        boundaries = [cfg.num_train_steps, (step // cfg.steps_per_loop + 1) * cfg.steps_per_loop,
                      (step // cfg.log_steps + 1) * cfg.log_steps,
                      (step // cfg.save_checkpoints_steps + 1) * cfg.save_checkpoints_steps]
        if evaluator is not None:  # evaluations fall on loop ends, whatever the loop sizes
          every = evaluator.evaluation.every_steps
          boundaries.append((step // every + 1) * every)
        n = min(boundaries) - step
        if self._early_loop_end:  # about progress_seconds a loop; one step first (it includes tracing)
          n = 1 if first_loop else min(n, max(1, int(cfg.progress_seconds * self._rate_steps
                                                     / max(self._rate_seconds, 1e-9))))
        start = time.perf_counter()
        try:
          sums, done = self._loop_fn(self.iterator, tf.constant(n, tf.int32))
        except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
          if isinstance(e, tf.errors.InvalidArgumentError) and "record" not in str(e).lower():
            raise
          raise UserError(f"{self.task.input_error(e)}; {self.task.input_fix(self.checkpointer.latest())}") from None
        sums = {k: float(v.numpy()) for k, v in sums.items()}
        done = int(done.numpy())
        if SKIPPED in sums:  # before the checkpoint below, which saves the total with the step
          self.skipped_updates.assign_add(int(round(sums[SKIPPED])))
        seconds = time.perf_counter() - start
        window_seconds += seconds
        if not first_loop:  # the first loop includes tracing
          self._rate_steps, self._rate_seconds = self._rate_steps + done, self._rate_seconds + seconds
        if not np.isfinite(sums["loss"]):
          logging.warning("step %d: the loss is not finite (%s)", step + done, sums["loss"])
        step += done
        self.step.assign(step)
        window = {k: window.get(k, 0.0) + v for k, v in sums.items()}
        window_steps += done
        progress = {k: progress.get(k, 0.0) + v for k, v in sums.items()}
        progress_steps, progress_seconds = progress_steps + done, progress_seconds + seconds
        self._after_loop(step)
        if step % cfg.log_steps == 0 or step == cfg.num_train_steps:
          metrics = self._report(step, window, window_steps, window_seconds)
          window, window_steps, window_seconds = {}, 0, 0.0
          progress, progress_steps, progress_seconds, last_line = {}, 0, 0.0, time.perf_counter()
        elif first_loop:
          skipped = progress.get(SKIPPED, 0.0)
          logging.info("step %d/%d  loss %.4g  %s(the first step took %.1f s, tracing included)", step,
                       cfg.num_train_steps, progress["loss"] / max(progress_steps, 1),
                       f"{self._shown(self._loss_scale_values(skipped))}  " if skipped else "", seconds)
          progress, progress_steps, progress_seconds, last_line = {}, 0, 0.0, time.perf_counter()
        elif time.perf_counter() - last_line >= cfg.progress_seconds:
          self._progress(step, progress, progress_steps, progress_seconds)
          progress, progress_steps, progress_seconds, last_line = {}, 0, 0.0, time.perf_counter()
        first_loop = False
        stop_early = False
        if evaluator is not None and evaluator.due(step, last=step == cfg.num_train_steps):
          stop_early = evaluator.run(step, last=step == cfg.num_train_steps)
        if step % cfg.save_checkpoints_steps == 0 or step == cfg.num_train_steps or stop_early:
          self.checkpointer.save(step)  # with the evaluation state: a rerun of a stopped run stops too
          saved_at = step
          if evaluator is not None:
            evaluator.committed()
        if stop_early:
          if window_steps:  # the steps since the last report
            metrics = self._report(step, window, window_steps, window_seconds)
          break
        if step < cfg.num_train_steps and termination.requested(self.strategy):  # same test on every worker
          path = os.path.join(self.checkpointer.directory, f"ckpt-{saved_at}")
          if saved_at != step:
            path = self.checkpointer.save(step)
          logging.warning("stopped at step %d on request; saved %s. Rerun the same command to resume", step,
                          path)
          self._summary_writer().flush()
          return TrainResult(step, metrics, interrupted=True, history=list(self.history),
                             signal=termination.signum, steps_run=step - first_step,
                             eval_seconds=evaluator.seconds if evaluator else 0.0, **self._loss_scale_result())
    self._summary_writer().flush()
    if self.loss_scaling:
      logging.info("mixed_float16: %d of %d updates skipped for non-finite gradients; loss scale %g at step %d",
                   int(self.skipped_updates.numpy()), step, float(self.optimizer.dynamic_scale.numpy()), step)
    return TrainResult(step, metrics, interrupted=False, history=list(self.history), steps_run=step - first_step,
                       eval_seconds=evaluator.seconds if evaluator else 0.0,
                       evaluation=evaluator.finish() if evaluator else None, **self._loss_scale_result())

  def _loss_scale_result(self) -> dict:
    if not self.loss_scaling:
      return {}
    return {"skipped_updates": int(self.skipped_updates.numpy()),
            "loss_scale": float(self.optimizer.dynamic_scale.numpy())}

  def _after_loop(self, step: int) -> None:
    """Called after every host loop with the step reached, before its evaluation and checkpoint; a hook for
    tests (tests/interrupted_run.py stops a run there)."""


def _duration(seconds: float) -> str:
  """3725 -> '1h02m', 125 -> '2m05s', 7.2 -> '7s'."""
  seconds = int(round(seconds))
  if seconds >= 3600:
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
  if seconds >= 60:
    return f"{seconds // 60}m{seconds % 60:02d}s"
  return f"{seconds}s"
