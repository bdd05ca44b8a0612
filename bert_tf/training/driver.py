"""One driver for every task: `run_finetuning(task_run)` does a run's sequence once, and a task supplies only its
hooks (a `TaskRun`).

  validate --> read every input the --do_* flags ask for (before any work) --> strategy --> the output dir's lock
  (the task's: fine-tuning scripts hold it from the start, `cli.run_finetuning`) --> the init checkpoint checked
  against the BERT config --> with --do_train, what the output dir's run is (`run_identity`: a rerun that would
  change it is refused; a run refused later, before it saves weights, withdraws its record) --> tokenizer -->
  seed --> train (the task's trainer task through `TaskRun.fit`, resumable; the trained model's folder written by
  the chief) or load (a fine-tuned folder at --init_checkpoint) --> evaluate (--do_eval) --> predict
  (--do_predict) --> export (--export_dir, the chief).

Pretraining (bert_tf/tasks/pretraining/run.py) runs on it too: its hooks count steps instead of epochs, take the
run lock, start the encoder from --init_checkpoint, write the encoder hand-off as its model folder, and without
--do_train evaluate the output dir's newest checkpoint; it has no tokenizer, prediction or export.

With several runs to choose among (the paper's selection protocol: `TaskRun.selection_runs`), each run trains and
evaluates into its own folder, the best on dev is kept (`selection.json`) and predicts and exports.

Only the chief writes (eval_results, predictions, the model's folder, the export); every worker computes.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import time
from typing import Any, Callable

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.errors import UserError
from bert_tf.training import distribute, finetuning, run_identity, trainer
from bert_tf.training.run_options import RunOptions

Say = Callable[[str], None]


@dataclasses.dataclass
class Training:
  """What a task hands the driver to train (`TaskRun.training`)."""

  task: trainer.Task  # the trainer's task: model, input pipeline, loss
  # What an epoch counts (steps: int(num_examples / batch * epochs)): the training windows of a task that cuts its
  # examples into windows (SQuAD, NER; SQuAD's questions with --epoch_unit=questions); None for a run counted in
  # steps (pretraining's --num_train_steps).
  num_examples: int | None
  head: tuple[str, dict] | None = None  # `finetuning.init_encoder`'s: a fine-tuned folder of this task gives its head
  unit: str = "examples"  # what a batch's rows are, in the rate's name ("windows": train_windows_per_second)
  facts: dict = dataclasses.field(default_factory=dict)  # the task's own summary entries (train_examples, ...)


@dataclasses.dataclass
class Context:
  """What the driver made for a run and hands every hook after training: the strategy, tokenizer, whether this
  worker writes, and the run's summary (the hooks add what they did); `kept` holds what a hook's later calls
  reuse (a split's features, a compiled model) for the whole run."""

  strategy: tf.distribute.Strategy
  tokenizer: Any
  say: Say
  chief: bool
  summary: dict
  kept: dict = dataclasses.field(default_factory=dict)

  def training_facts(self) -> dict:
    """The training entries of the summary (train_steps, train_seconds, ... and evaluation while training's:
    `finetuning.EVALUATION_KEYS`) that a task's eval_results repeat, as google-research's did."""
    return {key: value for key, value in self.summary.items()
            if (key.startswith("train_") and key != "train_history") or key in finetuning.EVALUATION_KEYS}


class TaskRun:
  """One run of a task: its config (a fine-tuning task's `finetuning.TaskRunConfig`: `finetuning`, `vocab_file`,
  `do_lower_case`, `do_train`, `do_eval`, `do_predict`, `export_dir`; any config with `output_dir`, `do_train`
  and `do_eval` whose task overrides `options`) and the hooks `run_finetuning` calls.

  A task overrides what it does differently; the defaults are what the fine-tuning tasks do."""

  model_dir: str  # the fine-tuned model's folder under --output_dir (swag_model, ...)
  outputs: tuple[str, ...] = ()  # what a run writes in output_dir besides run_identity.COMMON_OUTPUTS
  saved_model_noun: str = "fine-tuned model"  # in the line "saved the <noun> to <model_dir>"

  def __init__(self, config):
    self.config = config
    self.inputs: dict = {}

  @property
  def ft(self) -> finetuning.FinetuningConfig:
    return self.config.finetuning

  @property
  def options(self) -> RunOptions:
    """The run options (strategy, seed, batch size, cadence): fine-tuning's `finetuning`."""
    return self.config.finetuning

  @property
  def do_predict(self) -> bool:
    return self.config.do_predict

  @property
  def export_dir(self) -> str | None:
    return self.config.export_dir

  # -- Before any work --------------------------------------------------------------------------------------

  def validate(self) -> None:
    """Checks the flags (no devices, no data); raises ValueError naming the flag and the fix."""
    self.config.validate()

  def read_inputs(self, say: Say) -> None:
    """Reads every file the --do_* flags ask for into `self.inputs` (split -> what was read), so that a missing
    or malformed file fails in seconds naming the file and line."""
    raise NotImplementedError

  def metric_names(self) -> tuple[str, ...]:
    """The metrics evaluation reports, the headline (--metric_for_best's default) first."""
    raise NotImplementedError

  def run_identity(self) -> run_identity.RunIdentity:
    """What defines this run's weights (`run_identity`), for --do_train."""
    raise NotImplementedError

  def input_files(self) -> dict[str, list[str | None]]:
    """The run's inputs by the flag that names them (`run_identity.check_inputs_kept` takes them): what
    --init_checkpoint reads (`checkpoints.read_paths`), the vocabulary, the BERT config and each data file read
    (`read_inputs`), under the config field that holds its path (fields are named after their flags), else
    --data_dir, where it was found."""
    from bert_tf.model import checkpoints

    init = self.options.init_checkpoint
    files = {"init_checkpoint": checkpoints.read_paths(init) if init else [], "vocab_file": [self.config.vocab_file],
             "bert_config_file": [self.config.config_source]}
    for read in self.inputs.values():
      files.setdefault(_field_holding(self.config, read.path) or "data_dir", []).append(read.path)
    return files

  def evaluation_outputs(self) -> tuple[str, ...]:
    """What a run without --do_train writes in --output_dir (names or globs): evaluation's results and the task's
    `outputs` (its predictions)."""
    return ("eval_results.txt", "eval_results.json", *self.outputs)

  def strategy(self) -> tf.distribute.Strategy:
    """The strategy the run options ask for (--distribution_strategy, --num_gpus, --tpu_name, ...)."""
    return self.options.strategy()

  def lock(self, chief: bool) -> contextlib.AbstractContextManager:
    """The output dir's run lock (`run_lock.RunLock`), held from here to the end of the run; none here: a
    fine-tuning script holds it from before its flags are read (`cli.run_finetuning`)."""
    del chief
    return contextlib.nullcontext()

  def start_runs(self, say: Say, chief: bool) -> list[run_identity.Recorded]:
    """--do_train: refuses a rerun that would change the output dir's run, before any work
    (`run_identity.start_run`); starts over with --overwrite_output_dir. Each of the selection protocol's runs
    (`selection_runs`) records its own in its folder. Only the chief (`chief`) writes the records; returns them
    (a refused run withdraws them: `run_finetuning`)."""
    written = [run_identity.start_run(self.config.output_dir, self.run_identity(), self.options.overwrite_output_dir,
                                      chief, outputs=self.outputs, model_dirs=(self.model_dir,),
                                      inputs=self.input_files(), say=say)]
    try:
      for run in self.selection_runs():
        written.append(run_identity.start_run(run.config.output_dir, run.run_identity(), chief=chief,
                                              outputs=self.outputs, model_dirs=(self.model_dir,), say=say))
    except BaseException:
      _withdraw(written)
      raise
    return [record for record in written if record is not None]

  def check_init_checkpoint(self) -> None:
    """With --do_train: --init_checkpoint fits the BERT config, before any feature file is written."""
    self.config.check_init_checkpoint()

  def tokenizer(self):
    from bert_tf.data.tokenization import FullTokenizer

    return FullTokenizer(self.config.vocab_file, do_lower_case=self.config.do_lower_case)

  def selection_runs(self) -> list[TaskRun]:
    """The runs to choose among on dev (each a TaskRun of its own output dir), or [] for a single run."""
    return []

  # -- Training or loading ----------------------------------------------------------------------------------

  def training(self, context: Context) -> Training:
    """The trainer's task on the training file's features (written on first use)."""
    raise NotImplementedError

  def fit(self, training: Training, evaluate: Callable[[Any], dict[str, float]],
          context: Context) -> tuple[trainer.Trainer, trainer.TrainResult]:
    """Trains `training.task` (resuming the output dir's checkpoints), the encoder started from
    --init_checkpoint: `finetuning.train`, --num_train_epochs over `training.num_examples`. `evaluate(model)` is
    the evaluation while training (--eval_every_steps, with --do_eval)."""
    return finetuning.train(training.task, self.ft, training.num_examples, context.strategy,
                            config_source=self.config.config_source,
                            evaluate=evaluate if self.config.do_eval else None,
                            headline_metric=self.metric_names()[0], head=training.head)

  def evaluate_while_training(self, model, context: Context) -> dict[str, float]:
    """--eval_every_steps: the dev metrics of `model` (`metric_names`, the loss among them)."""
    raise NotImplementedError

  def trained_dir(self) -> str:
    """Where `save` writes the trained model: `model_dir` under --output_dir."""
    return os.path.join(self.config.output_dir, self.model_dir)

  @property
  def saves(self) -> bool:
    """Whether a trained model is saved (`save`)."""
    return True

  def save(self, model, directory: str, context: Context) -> None:
    """Writes the fine-tuned model's folder (float32 weights, config, vocab, settings): on the chief only."""
    raise NotImplementedError

  def loaded_dir(self) -> str:
    """Without --do_train, the folder `load` reads: the fine-tuned model at --init_checkpoint."""
    return self.ft.init_checkpoint.rstrip("/")

  def load(self, directory: str, context: Context):
    """The fine-tuned model in `directory` (--init_checkpoint without --do_train), under the strategy's scope."""
    raise NotImplementedError

  # -- After ------------------------------------------------------------------------------------------------

  def evaluate(self, model, model_dir: str, context: Context) -> None:
    """--do_eval: scores the dev data, writes eval_results (chief) and adds them to `context.summary`."""
    raise NotImplementedError

  def predict(self, model, model_dir: str, context: Context) -> None:
    """--do_predict: writes the test predictions (chief) and adds them to `context.summary`."""
    raise NotImplementedError

  def score(self, summary: dict) -> float:
    """The selection protocol's score of a run's summary (higher is better)."""
    raise NotImplementedError

  def selection_metric(self) -> str:
    """What `score` is, in words, for selection.json."""
    raise NotImplementedError

  def write_eval_results(self, output_dir: str, results) -> None:
    """Writes a run's dev results (`context.summary["eval"]`) into `output_dir`: the selection's winner's."""
    write_results(output_dir, results)

  def export(self, model_dir: str, context: Context) -> str:
    """--export_dir: the SavedModel for TensorFlow Serving of the folder `model_dir`; returns its path."""
    raise NotImplementedError


def run_finetuning(run: TaskRun, strategy: tf.distribute.Strategy | None = None, say: Say = logging.info) -> dict:
  """Does what the --do_* flags of `run.config` ask (the module docstring's sequence); returns a summary: what
  was trained, evaluated, predicted and exported (a run stopped by a signal: {"interrupted": True,
  "exit_code": ...})."""
  config = run.config
  run.validate()
  run.read_inputs(say)
  if not config.do_train:  # a training run checks its inputs as it starts (`run_identity.start_run`)
    run_identity.check_inputs_kept(config.output_dir, run.evaluation_outputs(), run.input_files(), inside=False)
  strategy = strategy or run.strategy()
  chief = distribute.is_chief(strategy)
  with run.lock(chief):
    run.check_init_checkpoint()  # before the output dir is touched, and before any feature file is written
    # What the output dir's run is: a rerun that would change it is refused here.
    recorded = run.start_runs(say, chief) if config.do_train else []
    try:
      tokenizer = run.tokenizer()
      tf.io.gfile.makedirs(config.output_dir)
      runs = run.selection_runs()
      if runs:
        context, model, model_dir = _select(run, runs, strategy, tokenizer, say, chief)
      else:
        context = Context(strategy, tokenizer, say, chief, {"output_dir": config.output_dir})
        model, model_dir = train_and_evaluate(run, context)
    except (ValueError, OSError, UserError):
      _withdraw(recorded)  # refused before it saved weights (a bad input in its features): it leaves no record
      raise
    if model is None:  # interrupted: the summary says so
      return context.summary
    if run.do_predict:
      run.predict(model, model_dir, context)
    if run.export_dir and chief:
      context.summary["export"] = run.export(model_dir, context)
      say(f"the SavedModel for TensorFlow Serving: {context.summary['export']}")
    return context.summary


def _withdraw(recorded: list[run_identity.Recorded | None]) -> None:
  """Withdraws the run records a refused run wrote (`run_identity.Recorded.withdraw`: not those of a run that
  saved weights since)."""
  for record in recorded:
    if record is not None:
      record.withdraw()


def train_and_evaluate(run: TaskRun, context: Context) -> tuple[Any, str]:
  """One run into its output dir: trains (--do_train; the chief writes the model's folder) or loads the folder
  at --init_checkpoint, then evaluates (--do_eval). Returns (the model, its folder); (None, "") when training
  was interrupted (the summary says so)."""
  import keras

  config, options, summary = run.config, run.options, context.summary
  keras.utils.set_random_seed(options.seed)
  if config.do_train:
    training = run.training(context)

    def evaluate(model):
      return run.evaluate_while_training(model, context)

    start = time.perf_counter()
    trainer_run, result = run.fit(training, evaluate, context)
    seconds = finetuning.training_seconds(result, time.perf_counter() - start)
    if result.interrupted:
      summary.update(interrupted=True, exit_code=result.exit_code)
      return None, ""
    rate = finetuning.examples_per_second(result, seconds, options.train_batch_size)
    summary.update(training.facts)
    summary.update({"train_steps": result.step, "train_seconds": round(seconds, 2),
                    f"train_{training.unit}_per_second": round(rate, 3 if rate < 10 else 1),
                    "train_history": result.history, **(result.evaluation or {})})
    context.say(finetuning.training_line(result, seconds, options.train_batch_size, training.unit))
    model = trainer_run.model
    model_dir = run.trained_dir()
    if context.chief and run.saves:
      run.save(model, model_dir, context)
      context.say(f"saved the {run.saved_model_noun} to {model_dir}")
  else:
    model_dir = run.loaded_dir()
    with context.strategy.scope():
      model = run.load(model_dir, context)
  summary["model_dir"] = model_dir
  if config.do_eval:
    run.evaluate(model, model_dir, context)
  return model, model_dir


def _select(run: TaskRun, runs: list[TaskRun], strategy, tokenizer, say: Say, chief: bool):
  """The selection protocol: each of `runs` trained and evaluated into its own folder; the best on dev
  (`run.score`) is reported at `run`'s output dir (selection.json, eval_results, the model's folder).
  -> (the best run's context, model and folder), the model None when a run was interrupted."""
  results, best = [], None
  for each in runs:
    lr, seed, run_dir = each.ft.learning_rate, each.ft.seed, each.config.output_dir
    say(f"== selection run: learning rate {lr:g}, seed {seed} -> {run_dir}")
    context = Context(strategy, tokenizer, say, chief, {"learning_rate": lr, "seed": seed, "output_dir": run_dir})
    model, _ = train_and_evaluate(each, context)
    if model is None:
      return context, None, ""
    score = run.score(context.summary)
    context.summary["score"] = score
    results.append({"learning_rate": lr, "seed": seed, "output_dir": run_dir, "score": score,
                    "eval": context.summary["eval"]})
    if best is None or score > best[0].summary["score"]:
      best = (context, model)
  context, model = best
  selection = {"metric": run.selection_metric(),
               "best": {k: context.summary[k] for k in ("learning_rate", "seed", "output_dir", "score")},
               "runs": results}
  model_dir = run.trained_dir()
  if chief:
    fileio.write_text_atomic(os.path.join(run.config.output_dir, "selection.json"),
                             json.dumps(selection, indent=2) + "\n")
    run.write_eval_results(run.config.output_dir, context.summary["eval"])
    run.save(model, model_dir, context)
  say(f"best on dev: learning rate {context.summary['learning_rate']:g}, seed {context.summary['seed']} "
      f"(score {context.summary['score']:.4f})")
  context.summary.update(selection=selection, best_dir=context.summary["output_dir"])
  return context, model, model_dir


def _field_holding(config, path: str) -> str | None:
  """The name of the field of `config`, or of a dataclass in one of its fields, whose value is `path`."""
  for holder in (config, *(getattr(config, f.name) for f in dataclasses.fields(config))):
    if dataclasses.is_dataclass(holder) and not isinstance(holder, type):
      found = next((f.name for f in dataclasses.fields(holder) if getattr(holder, f.name) == path), None)
      if found:
        return found
  return None


def write_results(output_dir: str, values: dict, name: str = "eval_results") -> None:
  """<name>.txt ("key = value" lines, google-research's format; lists such as eval_history only in the json)
  and <name>.json: eval_results, or test_results."""
  fileio.write_text_atomic(os.path.join(output_dir, f"{name}.txt"), finetuning.results_text(values))
  fileio.write_text_atomic(os.path.join(output_dir, f"{name}.json"), json.dumps(values, indent=2) + "\n")
