"""GLUE fine-tuning, and fine-tuning on your own files: what `scripts/run_classifier.py` runs.

  data_dir/*.tsv --glue.read_examples (every split the --do_* flags ask for, before any work)--> examples
  --classification.write_feature_file--> features (TFRecords, cached under <features_dir>/glue/<task>/)
  --finetuning.train--> BertClassifier --> eval_results, GLUE submission files, and <output_dir>/classifier/ (what
  export and prediction load)

`ClassifierRun` holds the task's hooks; `driver.run_finetuning` does the run's sequence (and, with
--learning_rates / --num_restarts, the selection protocol).

Your own files (--train_file, --validation_file, --test_file: CSV, TSV or JSON lines) take the same path:
`user_data.read_inputs` reads them into the same examples and a `glue.GlueTask` whose labels, pairing and
metrics come from the files; features are cached under <features_dir>/own/<task>/.

Outputs in --output_dir:
  checkpoints/, train/          training checkpoints and TensorBoard summaries (a rerun resumes)
  eval_results.txt / .json      dev metrics and loss per evaluation split ("key = value", google-research's
                                format)
  <TASK>.tsv                    test predictions in the GLUE submission format (index, prediction)
  test_results.tsv              per-class probabilities of the test examples (google-research's file)
  test_predictions.{csv,tsv,jsonl}  your own test file's predictions, as label strings (instead of <TASK>.tsv)
  test_results.txt / .json      your own test file's metrics and loss, as dev's, when every row has its label
  classifier/                   the fine-tuned model, its vocab, config and label names (export reads it)
  selection.json                with --learning_rates / --num_restarts: every run's dev score and the winner
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.tasks.classification import classifier as classification
from bert_tf.tasks.classification import glue, metrics, user_data
from bert_tf.tasks.common.features import feature_file_key, file_fingerprint
from bert_tf.training import driver, finetuning, run_identity


@dataclasses.dataclass
class ClassifierConfig(finetuning.TaskRunConfig):
  """One GLUE run, or one on your own files (`data_files`, instead of task_name and data_dir): the task's flags
  and the shared fine-tuning ones (`finetuning`)."""

  task_name: str | None
  data_dir: str | None
  max_train_examples: int = 0  # 0: all; for quick trials
  learning_rates: tuple[float, ...] = ()  # the paper's selection protocol: try each ...
  num_restarts: int = 1  # ... with this many seeds, keep the best on dev
  data_files: user_data.DataFiles | None = None  # Your own files, instead of --task_name and --data_dir.

  def validate(self) -> glue.GlueTask | None:
    """Checks the flags; returns the GLUE task, or None for your own files (their task is read from them:
    `task_and_inputs`)."""
    if self.data_files is not None:
      if self.task_name or self.data_dir:
        raise ValueError("give --task_name and --data_dir (a GLUE task) or --train_file, --validation_file, "
                         "--test_file (your own files), not both")
      task = None
    else:
      task = glue.get_task(self.task_name)
    self.finetuning.validate()
    if not (self.do_train or self.do_eval or self.do_predict):
      raise ValueError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict")
    if self.data_files is not None:
      self.data_files.validate(self.do_train, self.do_eval, self.do_predict)
    elif task.name == "AX" and (self.do_train or self.do_eval):
      raise ValueError("--task_name=AX has a test set only: train and evaluate on MNLI, then --do_predict AX "
                       "with --init_checkpoint=<the MNLI --output_dir>/classifier")
    if task is not None:
      self.finetuning.check_evaluation(self.do_train, self.do_eval, metric_names(task))
    if self.max_seq_length < (4 if task is not None and task.is_pair else 3):
      raise ValueError(f"--max_seq_length={self.max_seq_length}: too short to hold [CLS] text [SEP]")
    self.check_length_and_vocab()
    if self.num_restarts < 1:
      raise ValueError(f"--num_restarts={self.num_restarts}: must be >= 1")
    if any(lr <= 0 for lr in self.learning_rates):
      raise ValueError(f"--learning_rates={','.join(map(str, self.learning_rates))}: all must be > 0")
    if self.searching and not (self.do_train and self.do_eval):
      raise ValueError("--learning_rates / --num_restarts select on dev: pass --do_train and --do_eval")
    if self.export_dir and not self.do_train and not _is_classifier_dir(self.finetuning.init_checkpoint):
      raise ValueError("--export_dir needs a trained classifier: pass --do_train, or --init_checkpoint=<a "
                       "run's output_dir>/classifier")
    if not self.do_train and not _is_classifier_dir(self.finetuning.init_checkpoint):
      raise ValueError(_NEEDS_CLASSIFIER)
    return task

  @property
  def searching(self) -> bool:
    # --learning_rates with one value is still the selection protocol (its run under runs/), never ignored.
    return bool(self.learning_rates) or self.num_restarts > 1


def _is_classifier_dir(path: str | None) -> bool:
  return bool(path) and fileio.exists(os.path.join(path, classification.SPEC_NAME))


_NEEDS_CLASSIFIER = ("--do_eval/--do_predict without --do_train need a fine-tuned model: "
                     "--init_checkpoint=<a run's output_dir>/classifier")


# -- Data -----------------------------------------------------------------------------------------------------

Inputs = dict[str, glue.ReadResult]  # split -> its examples, read once


def read_inputs(config: ClassifierConfig, task: glue.GlueTask,
                say: Callable[[str], None] = logging.info) -> Inputs:
  """Reads every split the flags ask for (--do_train: train; --do_eval: the dev split(s); --do_predict: the
  test split(s)) before any work, so that a missing, unreadable or malformed file fails in seconds, naming the
  file and line, rather than after training (glue.read_examples lists what it checks)."""
  splits = ((("train",) if config.do_train else ()) + (task.eval_splits() if config.do_eval else ())
            + (task.test_splits() if config.do_predict else ()))
  inputs = {}
  for split in splits:
    result = glue.read_examples(task, config.data_dir, split)
    if not result.examples:
      raise ValueError(f"{result.path}: holds no examples; download the {task.name} task again")
    if result.skipped:
      say(f"{result.path}: skipped {result.skipped} malformed row(s)")
    inputs[split] = result
  return inputs


def task_and_inputs(config: ClassifierConfig,
                    say: Callable[[str], None] = logging.info) -> tuple[glue.GlueTask, Inputs]:
  """The flags checked (`validate`), then the task and every split the flags ask for, read before any work:
  a GLUE task's files (`read_inputs`), or your own files, which also give the task (`user_data.read_inputs`;
  without --do_train, the task of the classifier at --init_checkpoint)."""
  task = config.validate()
  if config.data_files is None:
    return task, read_inputs(config, task, say)
  splits = ((("train",) if config.do_train else ()) + (("dev",) if config.do_eval else ())
            + (("test",) if config.do_predict else ()))
  trained = None if config.do_train else classification.read_spec(config.finetuning.init_checkpoint)
  task, inputs = user_data.read_inputs(config.data_files, splits, trained)
  config.finetuning.check_evaluation(config.do_train, config.do_eval, metric_names(task))
  if task.is_pair and config.max_seq_length < 4:
    raise ValueError(f"--max_seq_length={config.max_seq_length}: too short to hold [CLS] A [SEP] B [SEP]")
  for split, result in inputs.items():
    say(f"{result.path}: {len(result.examples)} {split} examples")
  kind = f"labels {', '.join(task.labels)}" if task.labels else "regression"
  say(f"task {task.name}: {'sentence pairs' if task.is_pair else 'single sentences'}, {kind}; "
      f"metrics {', '.join(task.metric_names)}")
  return task, inputs


# -- Features -------------------------------------------------------------------------------------------------


def feature_file(config: ClassifierConfig, task: glue.GlueTask, split: str, tokenizer,
                 say: Callable[[str], None] = logging.info,
                 inputs: Inputs | None = None) -> tuple[classification.FeatureFile, list]:
  """The split's feature file, written on first use under <features_dir>/glue/<task>/ (own files:
  <features_dir>/own/<task>/) and reused after; returns it and the split's examples (their guids name test
  predictions). The examples come from `inputs` (`read_inputs`) when it holds the split, else from the file (a
  GLUE task's; your own files are always read by `task_and_inputs`)."""
  result = inputs[split] if inputs and split in inputs else None
  if result is None and config.data_files is not None:
    raise ValueError(f"the {split} split of your own files was not read: pass the inputs of task_and_inputs")
  if result is None:
    result = glue.read_examples(task, config.data_dir, split)
    if result.skipped:
      say(f"{result.path}: skipped {result.skipped} malformed row(s)")
  examples = result.examples
  if split == "train" and config.max_train_examples:
    examples = examples[:config.max_train_examples]
  if not examples:
    raise ValueError(f"{result.path}: holds no examples")
  # Own files: the columns, labels (their ids) and task type decide the features too. GLUE keys are unchanged.
  own = () if config.data_files is None else (*config.data_files.cache_parts(), task.labels, task.is_pair)
  key = feature_file_key(
      file_fingerprint(result.path), file_fingerprint(config.vocab_file),
      config.do_lower_case, config.max_seq_length, len(examples), task.name, *own)
  path = os.path.join(config.features_dir, "glue" if config.data_files is None else "own", task.name,
                      f"{split}-{key}.tfrecord")
  info = classification.read_feature_file_info(path)
  if info is not None:
    say(f"{task.name} {split}: reusing {path} ({info.num_examples} examples)")
    return info, examples
  start = time.perf_counter()
  label_ids = None if task.is_regression else {label: i for i, label in enumerate(task.labels)}
  info = classification.write_feature_file(
      classification.examples_for_writing(examples, label_ids), tokenizer, config.max_seq_length, path,
      is_regression=task.is_regression, is_pair=task.is_pair)
  say(f"{task.name} {split}: wrote {path}: {info.num_examples} examples in {time.perf_counter() - start:.1f} s, "
      f"{info.num_truncated} truncated to {config.max_seq_length} tokens; tokens per example "
      f"p50/p90/p99/max {'/'.join(str(v) for v in info.token_length_percentiles.values())}")
  return info, examples


# -- One run --------------------------------------------------------------------------------------------------


def _spec(config: ClassifierConfig, task: glue.GlueTask) -> classification.ClassifierSpec:
  return classification.ClassifierSpec(task.name, task.labels, task.is_pair, config.max_seq_length,
                                       config.do_lower_case)


def _predict_split(model, config: ClassifierConfig, task: glue.GlueTask, strategy, tokenizer, split: str,
                   batch_size: int, say, inputs: Inputs | None = None,
                   kept: dict | None = None) -> tuple[list, np.ndarray, float]:
  """A split's examples, the model's float32 outputs on them (in order) and the seconds prediction took.
  `kept`: a run's dict for the split's feature file, looked up once for all its evaluations."""
  kept = {} if kept is None else kept
  if "features" not in kept:
    kept["features"] = feature_file(config, task, split, tokenizer, say, inputs)
  info, examples = kept["features"]
  dataset = classification.classifier_dataset(
      info.path, finetuning.eval_batch_size_for(batch_size, strategy), config.max_seq_length, task.is_regression,
      is_training=False, dynamic_padding=config.dynamic_padding_on, pad_to_batch=True)
  start = time.perf_counter()
  outputs = finetuning.predict(model, dataset, strategy, description=f"{task.name} {split}",
                               num_examples=info.num_examples)
  return examples, outputs, time.perf_counter() - start


def _evaluate(model, config: ClassifierConfig, task: glue.GlueTask, strategy, tokenizer, split: str,
              say, inputs: Inputs | None = None, kept: dict | None = None) -> tuple[dict[str, float], np.ndarray]:
  examples, outputs, seconds = _predict_split(model, config, task, strategy, tokenizer, split,
                                              config.finetuning.eval_batch_size, say, inputs, kept)
  return _scores(config, task, examples, outputs, seconds, "eval"), outputs


def _scores(config: ClassifierConfig, task: glue.GlueTask, examples: list, outputs: np.ndarray, seconds: float,
            prefix: str) -> dict[str, float]:
  """The metrics of `outputs` (the model's, [N, K] or [N]) against the labels of `examples`, the loss training
  minimises on them (`eval_loss`), and the `prefix`ed count and rate ("eval": a dev split; "test")."""
  predictions, _ = classification.predictions_from_outputs(outputs, task.is_regression)
  labels = np.asarray([glue.label_to_id(task, e.label) for e in examples],
                      np.float32 if task.is_regression else np.int32)
  values = metrics.glue_metrics(task, predictions, labels)
  values[finetuning.LOSS] = eval_loss(config, task, outputs, labels)
  values.update({f"{prefix}_examples": len(examples), f"{prefix}_seconds": round(seconds, 2),
                 f"{prefix}_examples_per_second": round(len(examples) / max(seconds, 1e-9), 1)})
  return values


def eval_loss(config: ClassifierConfig, task: glue.GlueTask, outputs: np.ndarray, labels: np.ndarray) -> float:
  """What `ClassificationTask` trains with, on the model's `outputs` for examples with these `labels` (ids, or
  scores for regression): the mean cross-entropy, or mean squared error."""
  loss_task = classification.ClassificationTask(config.finetuning.bert_config, task.num_labels, None,
                                                config.max_seq_length)
  features = {"label_ids": labels, "is_real_example": np.ones(len(labels), np.int32)}
  return finetuning.eval_loss(loss_task, features, outputs)


def metric_names(task: glue.GlueTask) -> tuple[str, ...]:
  """What an evaluation reports (--metric_for_best's choices): the task's metrics, headline first (the default):
  F1 for MRPC and QQP, as the GLUE leaderboard lists them, else the first (accuracy, Matthews correlation,
  Pearson); then the loss."""
  return (*sorted(task.metric_names, key=lambda name: name != "f1"), finetuning.LOSS)


def score(task: glue.GlueTask, values: dict[str, float]) -> float:
  """The number runs are selected on: the mean of the task's metrics (GLUE's convention for MRPC, QQP, STS-B)."""
  return float(np.mean([values[name] for name in task.metric_names]))


def _write_eval_results(output_dir: str, results: dict[str, dict[str, float]], name: str = "eval_results") -> None:
  """<name>.txt ("key = value"; several splits: "<split>_key = value") and <name>.json (the same, flat, and by
  split under "splits")."""
  lines = []
  for split, values in results.items():
    for key, value in values.items():
      if isinstance(value, list):  # eval_history: in the json only
        continue
      lines.append(f"{key} = {value}" if len(results) == 1 else f"{split}_{key} = {value}")
  fileio.write_text_atomic(os.path.join(output_dir, f"{name}.txt"), "\n".join(lines) + "\n")
  flat = next(iter(results.values())) if len(results) == 1 else {
      f"{split}_{k}": v for split, values in results.items() for k, v in values.items()}
  fileio.write_text_atomic(os.path.join(output_dir, f"{name}.json"), json.dumps(
      {**flat, "splits": results}, indent=2) + "\n")


def _shown(task: glue.GlueTask, values: dict[str, float]) -> str:
  """'accuracy 0.8333  f1 0.8000  loss 0.4012': an evaluation's metrics (the task's order) and loss, for the log."""
  return "  ".join(f"{k} {values[k]:.4f}" for k in (*task.metric_names, finetuning.LOSS))


# -- What a run is --------------------------------------------------------------------------------------------


def selection_runs(config: ClassifierConfig) -> list[ClassifierConfig]:
  """The selection protocol's runs (--learning_rates, --num_restarts): one config per learning rate and seed
  (seed, seed + 1, ...), each into <output_dir>/runs/lr<lr>-seed<seed>/."""
  rates = config.learning_rates or (config.finetuning.learning_rate,)
  runs = []
  for lr in rates:
    for restart in range(config.num_restarts):
      seed = config.finetuning.seed + restart
      run_dir = os.path.join(config.output_dir, "runs", f"lr{lr:g}-seed{seed}")
      runs.append(dataclasses.replace(config, learning_rates=(), num_restarts=1, finetuning=dataclasses.replace(
          config.finetuning, learning_rate=lr, seed=seed, output_dir=run_dir)))
  return runs


def run_identity_of(config: ClassifierConfig, task: glue.GlueTask, inputs: Inputs) -> run_identity.RunIdentity:
  """What defines a training run of `config` (`run_identity`): the task, the training file's content, the
  columns and labels, lengths, casing, vocabulary and the fine-tuning settings that shape the weights. With the
  selection protocol the output dir's run is the selection: its learning rates and restarts (each run below
  runs/ records its own)."""
  files = config.data_files
  settings = {
      "task_name": task.name if files is None else None,  # own files: the name is the file's, not the model's
      "train_file": run_identity.file_entry(inputs["train"].path),
      "text_a_column": files.text_a_column if files else None,
      "text_b_column": (files.text_b_column or ("sentence2" if task.is_pair else None)) if files else None,
      "label_column": files.label_column if files else None,
      "task_type": "regression" if task.is_regression else "classification",
      "labels": list(task.labels), "is_pair": task.is_pair, "max_seq_length": config.max_seq_length,
      "do_lower_case": config.do_lower_case, "max_train_examples": config.max_train_examples,
      "vocab_file": run_identity.file_entry(config.vocab_file),
      **run_identity.finetuning_settings(config.finetuning)}
  if config.searching:
    del settings["learning_rate"]
    settings.update(learning_rates=list(config.learning_rates or (config.finetuning.learning_rate,)),
                    num_restarts=config.num_restarts)
  return run_identity.RunIdentity("classifier", settings, {"num_train_epochs": config.finetuning.num_train_epochs})


def _outputs(config: ClassifierConfig, task: glue.GlueTask) -> tuple[str, ...]:
  """What a run writes in its output dir besides run_identity.COMMON_OUTPUTS (--overwrite_output_dir removes
  them): the selection's runs, test predictions and results."""
  predictions = ([f"{task.submission_name(split)}.tsv" for split in task.test_splits()] if config.data_files is None
                 else list(user_data.PREDICTIONS.values()))
  return ("runs", "selection.json", "test_results*", *predictions)


# -- The task's hooks on the driver ---------------------------------------------------------------------------


class ClassifierRun(driver.TaskRun):
  """The classifier's hooks on `driver.run_finetuning` (see the module docstring): a GLUE task or your own files
  (`task_and_inputs`), every dev split evaluated (MNLI: matched and mismatched; the first selects), AX predicted
  with an MNLI classifier."""

  model_dir = "classifier"

  def __init__(self, config: ClassifierConfig, task: glue.GlueTask | None = None, inputs: Inputs | None = None):
    super().__init__(config)
    self.task = task  # known once the flags are checked and the files read (`read_inputs`)
    self.inputs = inputs or {}

  def validate(self) -> None:
    """Nothing here: `read_inputs` checks the flags (`task_and_inputs`), as your own files' task is known only
    once they are read."""

  def read_inputs(self, say) -> None:
    self.task, self.inputs = task_and_inputs(self.config, say)

  def metric_names(self) -> tuple[str, ...]:
    return metric_names(self.task)

  def run_identity(self) -> run_identity.RunIdentity:
    return run_identity_of(self.config, self.task, self.inputs)

  @property
  def outputs(self) -> tuple[str, ...]:
    return _outputs(self.config, self.task)

  def selection_runs(self) -> list[ClassifierRun]:
    if not self.config.searching:
      return []
    return [ClassifierRun(config, self.task, self.inputs) for config in selection_runs(self.config)]

  def training(self, context) -> driver.Training:
    config, ft, task = self.config, self.ft, self.task
    info, _ = feature_file(config, task, "train", context.tokenizer, context.say, self.inputs)
    cls_task = classification.ClassificationTask(
        ft.bert_config, task.num_labels, info.path, config.max_seq_length, seed=ft.seed, dtype=ft.dtype,
        dynamic_padding=config.dynamic_padding_on, length_multiple=config.length_multiple)
    head = (classification.SPEC_NAME, {"task_name": task.name, "labels": list(task.labels)})
    return driver.Training(cls_task, info.num_examples, head=head, facts={"train_examples": info.num_examples})

  def _dev(self, model, split: str, context) -> dict[str, float]:
    """A dev split's metrics, loss and timings; its feature file looked up once for all of a run's evaluations."""
    values, _ = _evaluate(model, self.config, self.task, context.strategy, context.tokenizer, split, context.say,
                          self.inputs, context.kept.setdefault(split, {}))
    return values

  def evaluate_while_training(self, model, context) -> dict[str, float]:
    # The metrics and the loss (no timings), on the first dev split (MNLI: matched).
    values = self._dev(model, self.task.eval_splits()[0], context)
    return {name: values[name] for name in metric_names(self.task)}

  def save(self, model, directory: str, context) -> None:
    classification.save_classifier(model, _spec(self.config, self.task), self.config.vocab_file, directory)

  def load(self, directory: str, context):
    """A classifier/ folder written by a run, for this task (AX: an MNLI classifier's)."""
    path, task = self.ft.init_checkpoint, self.task
    if not _is_classifier_dir(path):
      raise ValueError(_NEEDS_CLASSIFIER)
    model, spec, _ = classification.load_classifier(path)
    if spec.labels != task.labels and not (task.name == "AX" and spec.task_name == "MNLI"):
      raise ValueError(f"--init_checkpoint={path} was trained for {spec.task_name} with labels {spec.labels}, "
                       f"not {task.name} ({task.labels})")
    return model

  def evaluate(self, model, model_dir: str, context) -> None:
    """Every dev split: eval_results (`_write_eval_results`), the summary's "eval" ({split: values}) and
    "score"."""
    task, summary = self.task, context.summary
    results = {}
    for split in task.eval_splits():
      results[split] = self._dev(model, split, context)
      context.say(f"{task.name} {split}: " + _shown(task, results[split]))
    facts = context.training_facts()
    for values in results.values():
      values.update(facts)
    if context.chief:
      _write_eval_results(self.config.output_dir, results)
    summary["eval"] = results
    summary["score"] = self.score(summary)

  def predict(self, model, model_dir: str, context) -> None:
    """Test predictions: <TASK>.tsv (GLUE submission format; own files: test_predictions.<csv, tsv or jsonl>,
    `user_data.write_predictions`) and test_results.tsv (probabilities) per split, into the summary's
    "predictions". A test file whose every row has its label (your own, with the label column) is also scored as
    dev is, into test_results.txt / .json and the summary's "test" (Hugging Face's --do_predict reports metrics
    when the test set has labels)."""
    config, task, say = self.config, self.task, context.say
    written, scored = [], {}
    for split in task.test_splits():
      examples, outputs, seconds = _predict_split(model, config, task, context.strategy, context.tokenizer, split,
                                                  self.ft.predict_batch_size, say, self.inputs)
      predictions, probabilities = classification.predictions_from_outputs(outputs, task.is_regression)
      if examples and all(e.label is not None for e in examples):
        scored[split] = _scores(config, task, examples, outputs, seconds, "test")
        say(f"{task.name} {split}: " + _shown(task, scored[split]))
      if not context.chief:
        continue
      if config.data_files is not None:
        path = user_data.write_predictions(config.data_files, task, predictions.tolist(), config.output_dir)
      else:
        path = glue.write_submission(task, split, [e.guid for e in examples], predictions.tolist(),
                                     config.output_dir)
      rows = probabilities.reshape(len(examples), -1)
      name = "test_results.tsv" if len(task.test_splits()) == 1 else f"test_results_{split}.tsv"
      fileio.write_text_atomic(os.path.join(config.output_dir, name),
                               "".join("\t".join(f"{p:.6f}" for p in row) + "\n" for row in rows))
      say(f"{task.name} {split}: {len(examples)} predictions -> {path}")
      written.append(path)
    if scored and context.chief:
      _write_eval_results(config.output_dir, scored, "test_results")
    context.summary["predictions"] = written
    if scored:
      context.summary["test"] = scored

  def score(self, summary: dict) -> float:
    return score(self.task, summary["eval"][self.task.eval_splits()[0]])

  def selection_metric(self) -> str:
    return f"mean of {', '.join(self.task.metric_names)} on {self.task.eval_splits()[0]}"

  def write_eval_results(self, output_dir: str, results) -> None:
    _write_eval_results(output_dir, results)

  def export(self, model_dir: str, context) -> str:
    from bert_tf.tasks.classification import serving as classifier_serving

    return classifier_serving.export_from_directory(model_dir, self.config.export_dir,
                                                    self.config.model_name or self.task.name.lower(),
                                                    max_request_chars=self.config.max_request_chars)


# -- The script's entry point ---------------------------------------------------------------------------------


def run_classifier(config: ClassifierConfig, strategy: tf.distribute.Strategy | None = None,
                   say: Callable[[str], None] = logging.info) -> dict:
  """Does what the --do_* flags ask (`ClassifierRun` on `driver.run_finetuning`); with several learning rates or
  restarts, runs each into <output_dir>/runs/lr<lr>-seed<seed>/, keeps the best on dev and reports it at
  <output_dir>. Returns a summary: the (best) run's learning rate, seed, training, "eval" ({split: values}),
  "score", "best_dir" (its output dir), predictions and export.

  Every input is checked before any work: the flags and the vocabulary against the BERT config (`validate`),
  then every data file the flags ask for (`task_and_inputs`); a bad one raises naming the file (and line).
  """
  summary = driver.run_finetuning(ClassifierRun(config), strategy, say)
  if not config.searching:  # a single run's summary names its learning rate and seed first, as a selection run's
    summary = {"learning_rate": config.finetuning.learning_rate, "seed": config.finetuning.seed, **summary}
  if not summary.get("interrupted"):
    summary.setdefault("best_dir", config.output_dir)
  return summary
