"""What every fine-tuning task shares: its run configuration, loading the pretrained encoder, training through
the shared `Trainer`, and prediction under any strategy. A task (GLUE classification, and later SQuAD, SWAG,
NER) adds its reader, features, head, metric and post-processing, nothing more.

The paper's protocol: the pretrained encoder is reloaded, a task head is added, and every parameter is trained
with AdamW, a linear warmup over `warmup_proportion` of the steps and a linear decay to zero.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
import weakref
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.training import distribute, optimization, run_identity, trainer
from bert_tf.training.evaluation import RESULT_KEYS, Evaluation
from bert_tf.training.run_options import RunOptions

# The keys evaluation while training adds to a run's results; every task's run copies them into eval_results.
EVALUATION_KEYS = RESULT_KEYS


@dataclasses.dataclass
class FinetuningConfig(RunOptions):
  """The settings every fine-tuning run shares; field names are the scripts' flags (google-research's where it
  had them). The run options (strategy, devices, precision, cadence: `RunOptions`) are keyword-only."""

  output_dir: str
  bert_config: BertConfig
  init_checkpoint: str | None = None
  train_batch_size: int = 32  # global, per optimizer update
  eval_batch_size: int = 8
  predict_batch_size: int = 8
  learning_rate: float = 5e-5
  num_train_epochs: float = 3.0
  warmup_proportion: float = 0.1
  # Fine-tuning keeps one training checkpoint (the model folder holds the result) and logs more often.
  keep_checkpoint_max: int = dataclasses.field(default=1, kw_only=True)
  steps_per_loop: int = dataclasses.field(default=50, kw_only=True)
  log_steps: int = dataclasses.field(default=50, kw_only=True)
  # Evaluation while training (bert_tf/training/evaluation.py): every this many steps and at the end; 0: off.
  eval_every_steps: int = 0
  keep_best_checkpoint: bool = False  # save and export the best evaluated weights, not the last
  metric_for_best: str | None = None  # None: the task's headline metric
  early_stopping_patience: int = 0  # stop after this many evaluations without improvement; 0: never

  def validate(self) -> None:
    """Checks that need no devices; raises ValueError naming the flag and the fix."""
    run_identity.check_output_dir(self.output_dir)
    for name in ("train_batch_size", "eval_batch_size", "predict_batch_size"):
      if getattr(self, name) < 1:
        raise ValueError(f"--{name}={getattr(self, name)}: must be >= 1")
    for name in ("eval_every_steps", "early_stopping_patience"):
      if getattr(self, name) < 0:
        raise ValueError(f"--{name}={getattr(self, name)}: must be >= 0 (0: off)")
    if not self.eval_every_steps:
      for name, on in (("keep_best_checkpoint", self.keep_best_checkpoint),
                       ("metric_for_best", self.metric_for_best),
                       ("early_stopping_patience", self.early_stopping_patience)):
        if on:
          raise ValueError(f"--{name} needs evaluation while training: add --eval_every_steps=N")
    if self.num_train_epochs <= 0:
      raise ValueError(f"--num_train_epochs={self.num_train_epochs}: must be > 0")
    if not 0 <= self.warmup_proportion <= 1:
      raise ValueError(f"--warmup_proportion={self.warmup_proportion}: must be in [0, 1]")
    if self.learning_rate <= 0:
      raise ValueError(f"--learning_rate={self.learning_rate}: must be > 0")
    self.check_run_options()

  def train_steps(self, num_train_examples: int) -> tuple[int, int]:
    """(optimizer steps, warmup steps) for `num_train_examples` examples: google-research's arithmetic,
    int(examples / batch * epochs), and at least one step."""
    steps = max(1, int(num_train_examples / self.train_batch_size * self.num_train_epochs))
    return steps, int(steps * self.warmup_proportion)

  def check_evaluation(self, do_train: bool, do_eval: bool, metric_names: tuple[str, ...]) -> None:
    """With --eval_every_steps: training and the dev split are asked for, and --metric_for_best is one of the
    task's `metric_names` (the headline first); raises ValueError naming the flag."""
    if not self.eval_every_steps:
      return
    if not (do_train and do_eval):
      raise ValueError("--eval_every_steps evaluates on the dev split while training: pass --do_train and --do_eval")
    if self.metric_for_best is not None and self.metric_for_best not in metric_names:
      raise ValueError(f"--metric_for_best={self.metric_for_best}: this task reports {', '.join(metric_names)}")


@dataclasses.dataclass(kw_only=True)
class TaskRunConfig:
  """The fields every task's run configuration (ClassifierConfig, SquadConfig, NerConfig, SwagConfig) has,
  declared once (keyword-only, so each task's own required fields come first), and what is derived alike from
  them. Field names are the scripts' flags; a task redeclares a field for another default
  (`dataclasses.field(default=..., kw_only=True)`)."""

  vocab_file: str
  finetuning: FinetuningConfig  # the settings shared with every task's training
  do_lower_case: bool = True
  do_train: bool = False
  do_eval: bool = False
  do_predict: bool = False
  max_seq_length: int = 128
  features_dir: str | None = None  # None: default_features_dir(output_dir)
  dynamic_padding: bool = True  # batches padded to their longest example (not on TPUs: `dynamic_padding_on`)
  bert_config_file: str | None = None  # where finetuning.bert_config was read from, named in messages
  export_dir: str | None = None  # also export the fine-tuned model for TensorFlow Serving at the end
  model_name: str | None = None  # the exported model's name (None: the task's)
  max_request_chars: int | None = None  # the export's limit on a request's text (None: bert_tf.export.limits')

  @property
  def output_dir(self) -> str:
    return self.finetuning.output_dir

  def __post_init__(self):
    if self.features_dir is None:  # features/ beside the output directory, shared by the runs made there
      self.features_dir = default_features_dir(self.finetuning.output_dir)
    from bert_tf.model import released

    # A Hugging Face model with a task head (hf:<id>, or its folder) is used as the model folder of ours converted
    # from it, as a fine-tuned model: its head and labels for training, prediction and export alike.
    self.finetuning.init_checkpoint = released.task_model_dir(self.finetuning.init_checkpoint)

  @property
  def config_source(self) -> str | None:
    """The bert_config.json the BERT config came from, when known (for messages)."""
    return self.bert_config_file or checkpoints.describe_config(self.finetuning.bert_config,
                                                            self.finetuning.init_checkpoint)

  @property
  def dynamic_padding_on(self) -> bool:
    """--dynamic_padding, except on TPUs, which need static shapes."""
    return self.dynamic_padding and self.finetuning.distribution_strategy != "tpu"

  @property
  def length_multiple(self) -> int:
    return 8 if self.finetuning.jit_compile else 1  # fewer shapes for XLA to compile

  def check_init_checkpoint(self) -> None:
    """With --do_train and --init_checkpoint: the checkpoint fits the BERT config (`check_init_checkpoint`).
    Every task's run calls it once its strategy exists, before it writes features."""
    if self.do_train and self.finetuning.init_checkpoint:
      check_init_checkpoint(self.finetuning.init_checkpoint, self.finetuning.bert_config, self.config_source)

  def check_length_and_vocab(self) -> None:
    """--max_seq_length within the BERT config's positions, and --vocab_file present and fitting the config:
    the checks every task's `validate` makes (ValueError / FileNotFoundError naming the flag)."""
    bert = self.finetuning.bert_config
    if self.max_seq_length > bert.max_position_embeddings:
      raise ValueError(f"--max_seq_length={self.max_seq_length} exceeds max_position_embeddings="
                       f"{bert.max_position_embeddings} of the BERT config; lower it")
    if not fileio.exists(self.vocab_file):
      raise FileNotFoundError(f"--vocab_file={self.vocab_file}: no such file")
    checkpoints.check_vocab_fits(self.vocab_file, bert, self.config_source)


def default_features_dir(output_dir: str) -> str:
  """Where fine-tuning caches its feature files without --features_dir: features/ beside --output_dir, so
  --output_dir=out/mrpc caches under out/features/ with everything else under out/, and the runs beside it
  (out/mrpc_base, out/squad) reuse the files (their names hash all that makes them)."""
  return fileio.sibling(output_dir, "features")


# -- The pretrained encoder -----------------------------------------------------------------------------------


def init_encoder(encoder, path: str, config_source: str | None = None, model=None,
                 head: tuple[str, dict] | None = None) -> str:
  """Loads pretrained weights into `encoder` from any form users have; returns a description of the source.

  Accepts what `checkpoints.resolve_checkpoint` does (a pretraining checkpoint or output dir, encoder_checkpoint/,
  encoder_savedmodel/, a directory written by scripts/convert_checkpoint.py, any task's fine-tuned model folder),
  a released model by name (`hf:<model id>`, `keras_hub:<preset>`: bert_tf.model.released), and also, converted
  in memory: a google-research (TF1) checkpoint such as `uncased_L-12_H-768_A-12/bert_model.ckpt`, and a Hugging
  Face BERT directory (config.json with model.safetensors). `config_source`, the bert_config.json the encoder
  was built from, is named when the weights do not fit it.

  From a fine-tuned model's folder, `model` (whose `.encoder` is `encoder`) also takes the folder's task head when
  `head` = (the task's settings file name, settings that must match, e.g. {"labels": [...]}) fits it
  (`checkpoints.task_head_mismatch`): SQuAD v1.1 then v2.0, say.
  """
  from bert_tf.model import convert, released

  path = released.local_path(path)
  found = checkpoints.checkpoint_kind(path)
  kind = found.kind if found is not None else None
  if kind == checkpoints.HF_FOLDER:
    weights, _ = convert.hf_to_tf1_names(convert.read_hf_state(path))
    convert.set_tf1_weights({"encoder": convert.tf1_links(encoder)["encoder"]}, weights, source=path,
                            config_source=config_source)
    return f"{path} (Hugging Face, converted in memory)"
  if kind == checkpoints.TF1:
    weights = convert.read_tf1_checkpoint(found.prefix)
    convert.set_tf1_weights({"encoder": convert.tf1_links(encoder)["encoder"]}, weights, source=found.prefix,
                            config_source=config_source)
    return f"{found.prefix} (google-research checkpoint, converted in memory)"
  restored = checkpoints.restore_encoder(encoder, path, config_source=config_source)  # None: says what is taken
  if model is not None and head is not None and kind == checkpoints.TASK_MODEL:
    problem = checkpoints.task_head_mismatch(model, path, *head)
    if problem is None:
      checkpoints.restore_task_model(model, path, f"a fine-tuning run of this task ({head[0]})")
      return f"{path} (encoder and task head)"
    logging.info("%s: the encoder only, not the task head: %s", path, problem)
  return restored


def check_init_checkpoint(path: str, bert_config: BertConfig, config_source: str | None = None) -> None:
  """Raises ValueError (the message `init_encoder` gives) when the weights at `path` do not fit `bert_config`:
  run before any feature file is written, so that a wrong --init_checkpoint or --bert_config_file fails in
  seconds. Reads shapes only from bert_tf's own checkpoints; other forms are converted as training will.
  Needs TensorFlow's devices (under MultiWorkerMirroredStrategy, call it after the strategy is made)."""
  from bert_tf.model.encoder import BertEncoder

  with tf.device("/cpu:0"):  # a float32 copy that only its shapes are asked of
    encoder = BertEncoder(bert_config, dtype="float32")
    found = checkpoints.checkpoint_kind(path)
    prefix = found.prefix if found is not None and found.kind != checkpoints.TF1 else None
    if prefix is not None and any(name.startswith("encoder/") for name, _ in tf.train.list_variables(prefix)):
      problem = checkpoints.object_checkpoint_mismatch(encoder, prefix)
      if problem:
        raise ValueError(checkpoints.mismatch_message(
            prefix, problem, config_source or checkpoints.describe_config(bert_config, path), path))
      return
    init_encoder(encoder, path, config_source)


def bert_config_for(bert_config_file: str | None, init_checkpoint: str | None) -> BertConfig:
  """--bert_config_file, else the bert_config.json (or a Hugging Face config.json) beside --init_checkpoint.

  --init_checkpoint is checked first (`checkpoints.check_checkpoint_path`: a path that does not exist, an empty
  folder, a file that is not a checkpoint), whichever gives the config; then ValueError when neither flag gives
  one, naming what to pass."""
  from bert_tf.model import convert, released

  if init_checkpoint:
    checkpoints.check_checkpoint_path(init_checkpoint)
  if bert_config_file:
    return BertConfig.from_json_file(bert_config_file)
  if not init_checkpoint:
    raise ValueError("--init_checkpoint is required: the pretrained model to fine-tune (its bert_config.json comes "
                     "with it), or a fine-tuned model's folder; or pass --bert_config_file to start from random "
                     "weights")
  local = released.local_path(init_checkpoint)
  found = checkpoints.find_config(local)
  if found:
    return BertConfig.from_json_file(found)
  hf = os.path.join(local.rstrip("/"), "config.json")
  if tf.io.gfile.exists(hf):
    import json

    with tf.io.gfile.GFile(hf) as f:
      return convert.hf_config_to_bert_config(json.load(f), source=hf)
  raise ValueError(f"--bert_config_file is required: no bert_config.json (or Hugging Face config.json) in or beside "
                   f"--init_checkpoint={init_checkpoint}; pass the one the model was trained with")


def vocab_file_for(vocab_file: str | None, init_checkpoint: str | None) -> str:
  """--vocab_file, else the vocab.txt that comes with --init_checkpoint (`checkpoints.find_vocab`: a converted,
  Hugging Face or fine-tuned model's folder, hf:<id>, ...), logged; ValueError when there is neither. A given
  --vocab_file is used as it is (the tasks check that it fits the model)."""
  if vocab_file:
    return vocab_file
  from bert_tf.model import released

  found = checkpoints.find_vocab(released.local_path(init_checkpoint)) if init_checkpoint else None
  if found is None:
    where = f" (no vocab.txt in or beside --init_checkpoint={init_checkpoint})" if init_checkpoint else ""
    raise ValueError(f"--vocab_file is required: the pretrained model's vocab.txt{where}")
  logging.info("--vocab_file: using %s (from --init_checkpoint)", found)
  return found


# -- Training -------------------------------------------------------------------------------------------------


def train(task: trainer.Task, config: FinetuningConfig, num_train_examples: int,
          strategy: tf.distribute.Strategy, encoder_of: Callable = lambda model: model.encoder,
          output_dir: str | None = None, config_source: str | None = None,
          evaluate: Callable[[object], dict[str, float]] | None = None, headline_metric: str | None = None,
          head: tuple[str, dict] | None = None) -> tuple[trainer.Trainer, trainer.TrainResult]:
  """Trains `task` for `num_train_epochs` over `num_train_examples`, starting the encoder from
  `init_checkpoint` unless `<output_dir>/checkpoints` holds a run to resume; `head` (see `init_encoder`) lets
  a fine-tuned model of the same task and labels give its head too.

  With --eval_every_steps, `evaluate(model)` (the dev split's metrics) runs while training, and
  --metric_for_best defaults to `headline_metric` (see bert_tf/training/evaluation.py)."""
  output_dir = output_dir or config.output_dir
  steps, warmup = config.train_steps(num_train_examples)
  trainer_config = trainer.TrainerConfig(
      output_dir=output_dir, global_batch_size=config.train_batch_size, num_train_steps=steps,
      gradient_accumulation_steps=config.gradient_accumulation_steps,
      steps_per_loop=min(config.steps_per_loop, steps), save_checkpoints_steps=config.save_checkpoints_steps,
      keep_checkpoint_max=config.keep_checkpoint_max, log_steps=min(config.log_steps, steps),
      jit_compile=config.jit_compile)
  evaluation = None
  if config.eval_every_steps:
    if evaluate is None:
      raise ValueError("--eval_every_steps: this task cannot evaluate while training")
    evaluation = Evaluation(evaluate, config.metric_for_best or headline_metric, config.eval_every_steps,
                            config.keep_best_checkpoint, config.early_stopping_patience)
  run = trainer.Trainer(
      task, strategy,
      lambda: optimization.create_optimizer(config.optimizer, config.learning_rate, steps, warmup,
                                            dtype=config.dtype),
      trainer_config, evaluation)
  if run.checkpointer.latest() is None:
    if config.init_checkpoint:
      source = init_encoder(encoder_of(run.model), config.init_checkpoint, config_source, run.model, head)
      logging.info("initialised the encoder from %s", source)
    else:
      logging.warning("no --init_checkpoint: the encoder starts from random weights (not BERT fine-tuning)")
  logging.info("training %d steps (%d warmup) of %d examples, %.4g epochs over %d examples",
               steps, warmup, config.train_batch_size, config.num_train_epochs, num_train_examples)
  return run, run.train()


def epoch_line(num_windows: int, num_examples: int, noun: str, batch_size: int) -> str:
  """'an epoch is 30,475 windows of 383 questions (952.3 steps of 32)': what --num_train_epochs counts in a task
  that cuts its examples (`noun`: "questions", "sentences") into windows and takes a pass over the windows as an
  epoch; said once at the start of training."""
  return (f"an epoch is {num_windows:,} windows of {num_examples:,} {noun} "
          f"({num_windows / batch_size:.4g} steps of {batch_size})")


def training_seconds(result: trainer.TrainResult, seconds: float) -> float:
  """This process's training time: the `seconds` its call of `train` took less what evaluation while training
  took in it."""
  return max(seconds - result.eval_seconds, 1e-9)


def examples_per_second(result: trainer.TrainResult, seconds: float, batch_size: int) -> float:
  """This process's training rate: the steps it ran (after a resume, not those its checkpoint had done) times
  `batch_size`, over its `training_seconds` (`seconds`)."""
  return result.steps_run * batch_size / max(seconds, 1e-9)


def training_line(result: trainer.TrainResult, seconds: float, batch_size: int, unit: str = "examples") -> str:
  """'trained 84 steps (53 in this process, resumed at step 31) in 168.7 s (10.1 examples/s)', `seconds` being
  this process's `training_seconds`."""
  resumed = "" if result.steps_run == result.step else \
      f" ({result.steps_run} in this process, resumed at step {result.step - result.steps_run})"
  return (f"trained {result.step} steps{resumed} in {seconds:.1f} s "
          f"({examples_per_second(result, seconds, batch_size):.1f} {unit}/s)")


def results_text(values: dict) -> str:
  """eval_results.txt's "key = value" lines (google-research's format); lists (eval_history) are left to the
  json."""
  return "".join(f"{key} = {value}\n" for key, value in values.items() if not isinstance(value, list))


# -- Prediction -----------------------------------------------------------------------------------------------


def eval_batch_size_for(batch_size: int, strategy: tf.distribute.Strategy) -> int:
  """A worker's evaluation batch: `batch_size` rounded up to a multiple of its local replicas."""
  local = strategy.num_replicas_in_sync // distribute.num_workers(strategy)
  return -(-batch_size // local) * local


def predict(model, dataset: tf.data.Dataset, strategy: tf.distribute.Strategy, description: str = "predicting",
            progress_seconds: float = 10.0, num_examples: int | None = None,
            with_sums: bool = False) -> np.ndarray | tuple[np.ndarray, dict | None]:
  """Runs `model(features, training=False)` over every batch of `dataset` -> float32 outputs of the real
  examples, in order: [N, ...].

  `with_sums`: `model` returns (outputs, sums), sums a nest of float32 scalars summed over the batch's examples
  (padding rows weighing 0: `loss_sums`, a task's loss terms), and predict returns (outputs, the sums added up
  over every batch and replica, as Python floats; None for an empty dataset).

  Every worker reads the whole `dataset` (batches of `eval_batch_size_for(...)`, padded to full size with
  `is_real_example` = 0 so shapes are static) and splits each batch among its local replicas, so each worker
  ends with all the predictions. A progress line (`description`, batches done, examples/s, ETA) shows after the
  first batch and then every `progress_seconds`, and a last one with the whole pass's examples/s. The total and
  ETA need the number of batches: the dataset's cardinality, unknown for TFRecord files, else `num_examples`
  (the real examples) over the size of the first batch (every batch is padded to it).

  The compiled step is kept for the same `model` (the same object) and `strategy`, and traced for `dataset`'s
  element shapes (`element_spec`, where dynamic padding leaves lengths unknown): later calls (evaluation while
  training) and batches of other lengths trace nothing again.
  """
  step = _prediction_step(model, strategy).get_concrete_function(dataset.element_spec)
  outputs, real = [], []
  sums = None
  batches = int(dataset.cardinality().numpy())  # < 0 when unknown
  start = last_line = time.perf_counter()
  for batch in dataset:
    results = step(batch)
    if with_sums:
      for _, replica_sums in results:
        values = tf.nest.map_structure(lambda x: float(x.numpy()), replica_sums)
        sums = values if sums is None else tf.nest.map_structure(lambda a, b: a + b, sums, values)
      results = [replica_outputs for replica_outputs, _ in results]
    outputs.append(np.concatenate([o.numpy() for o in results], axis=0))
    real.append(batch["is_real_example"].numpy().astype(bool))
    if batches < 0 and num_examples:
      batches = -(-num_examples // len(real[0]))
    now = time.perf_counter()
    if len(outputs) == 1 or now - last_line >= progress_seconds:
      _progress(description, len(outputs), batches, int(sum(r.sum() for r in real)), now - start)
      last_line = now
  if not outputs:
    return (np.zeros([0], np.float32), None) if with_sums else np.zeros([0], np.float32)
  examples = int(sum(r.sum() for r in real))
  seconds = time.perf_counter() - start
  logging.info("%s: done, %d examples in %.1f s (%.4g examples/s)", description, examples, seconds,
               examples / max(seconds, 1e-9))
  kept = np.concatenate(outputs)[np.concatenate(real)]
  return (kept, sums) if with_sums else kept


# -- Evaluation loss ------------------------------------------------------------------------------------------
# Every task reports, beside its metrics, the loss it trains with on the evaluated examples: its own `loss_terms`
# and `normalizers` (padding rows weigh 0 in them) summed over the evaluation pass, then its `loss` of the sums:
# the mean over the real examples (SQuAD: windows; NER: labelled words), as one training batch holding them all
# would give it. Computed on the outputs of the pass that makes the predictions, never in a pass of its own.

LOSS = "loss"  # its name in eval_results, test_results, eval_history and --metric_for_best (lower is better)


def loss_sums(task: trainer.Task, features: dict, outputs) -> dict:
  """A batch's share of the evaluation loss: {"terms": task.loss_terms(...), "normalizers": task.normalizers(...)},
  float32 scalar sums over its examples (`mean_loss` turns the sums over every batch into the loss)."""
  outputs = tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), outputs)
  return {"terms": task.loss_terms(features, outputs), "normalizers": task.normalizers(features)}


def mean_loss(task: trainer.Task, sums: dict) -> float:
  """`task.loss` of `loss_sums` added up over an evaluation pass -> the loss over all its examples."""
  return float(task.loss(*(tf.nest.map_structure(lambda v: tf.constant(v, tf.float64), sums[key])
                           for key in ("terms", "normalizers"))))


def eval_loss(task: trainer.Task, features: dict[str, np.ndarray], outputs, chunk: int = 512) -> float:
  """The loss `task` trains with over the examples of an evaluation pass, from the outputs `predict` returned
  ([N, ...] float32, or a dict of such) and the `features` its loss reads (labels, masks, is_real_example: arrays
  [N, ...]; is_real_example 0 leaves an example out), in chunks of `chunk` examples on the host."""
  count = len(next(iter(features.values())))
  total = None
  for begin in range(0, count, chunk):
    take = lambda x: tf.constant(x[begin:begin + chunk])  # noqa: E731
    with tf.device("/cpu:0"):
      sums = loss_sums(task, tf.nest.map_structure(take, features), tf.nest.map_structure(take, outputs))
    values = tf.nest.map_structure(lambda x: float(x.numpy()), sums)
    total = values if total is None else tf.nest.map_structure(lambda a, b: a + b, total, values)
  if total is None:
    raise ValueError("eval_loss: no examples")
  return mean_loss(task, total)


# The compiled prediction steps of the latest few (model, strategy) pairs: tracing a model again costs seconds at
# every evaluation while training. A step holds its model weakly, so a finished run's model object is not kept
# alive by it (its graph keeps the variables until the step is dropped, after _MAX_STEPS newer ones).
_STEPS: dict[tuple[int, int], tuple[weakref.ref, weakref.ref, Callable]] = {}
_MAX_STEPS = 4


def _prediction_step(model, strategy: tf.distribute.Strategy):
  """The `tf.function` running `model` on a batch under `strategy` -> a list of float32 outputs, one per local
  replica (in replica order); kept in `_STEPS`."""
  key = (id(model), id(strategy))
  kept = _STEPS.get(key)
  if kept is not None and kept[0]() is model and kept[1]() is strategy:
    return kept[2]
  for other in [k for k, (m, s, _) in _STEPS.items() if m() is None or s() is None] + [key]:
    _STEPS.pop(other, None)  # dead ones, and the step of another object that had the same id
  while len(_STEPS) >= _MAX_STEPS:
    _STEPS.pop(next(iter(_STEPS)))  # the oldest
  local = strategy.num_replicas_in_sync // distribute.num_workers(strategy)
  model_ref = weakref.ref(model)

  def replica_fn(batch):
    return tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), model_ref()(batch, training=False))

  @tf.function  # traced once per element_spec (`predict`)
  def step(batch):
    if strategy.num_replicas_in_sync == 1:
      return [strategy.run(replica_fn, args=(batch,))]

    def slice_for(ctx):
      i = ctx.replica_id_in_sync_group % local
      return tf.nest.map_structure(lambda x: tf.split(x, local, axis=0)[i], batch)

    values = strategy.experimental_distribute_values_from_function(slice_for)
    return list(strategy.experimental_local_results(strategy.run(replica_fn, args=(values,))))

  _STEPS[key] = (model_ref, weakref.ref(strategy), step)
  return step


def _progress(description: str, done: int, total: int, examples: int, seconds: float) -> None:
  from bert_tf.training.trainer import _duration  # pylint: disable=import-outside-toplevel

  of = f"/{total}" if total > 0 else ""
  eta = f"  ETA {_duration((total - done) * seconds / done)}" if total > done and done > 1 else ""
  logging.info("%s: batch %d%s  %d examples  %.4g examples/s%s", description, done, of, examples,
               examples / max(seconds, 1e-9), eta)


def steps_for(num_examples: int, batch_size: int) -> int:
  return math.ceil(num_examples / batch_size)
