"""SWAG fine-tuning: what `scripts/run_swag.py` runs. Glue between the tested pieces:

  data_dir/{train,val,test}.csv --swag.read_examples (every file the --do_* flags ask for, before any work)-->
  examples --swag_finetuning.write_feature_file--> features (TFRecords, [4, T] per example, cached under
  <features_dir>/swag/) --finetuning.train(MultipleChoiceTask)--> BertMultipleChoice --> <output_dir>/swag_model/

  val.csv --finetuning.predict--> logits [N, 4] --> accuracy and loss (eval_results.txt / .json)
  test.csv --finetuning.predict--> softmax over the four endings --> test_predictions.csv (and, when every
  example has its label, accuracy and loss: test_results.txt / .json)

Outputs in --output_dir:
  checkpoints/, train/      training checkpoints and TensorBoard summaries (a rerun resumes)
  swag_model/               the fine-tuned model: float32 weights (`model`), bert_config.json, vocab.txt and
                            swag.json (max_seq_length, do_lower_case); --init_checkpoint for a later
                            --do_eval/--do_predict, and what the export reads
  eval_results.txt / .json  with --do_eval: accuracy and loss on val.csv ("key = value", google-research's format)
  test_predictions.csv      with --do_predict: per test example its id (test.csv's index column), the chosen
                            ending's index and text, and the four endings' probabilities
  test_results.txt / .json  with --do_predict on a test file with labels (the release's has none): as
                            eval_results, on the test file

With --export_dir, swag_model/ is also exported for TensorFlow Serving (`swag.serving`: raw text in) to
<export_dir>/<model_name>/<version>/.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import time
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.tasks.swag import data as swag
from bert_tf.tasks.swag import model as swag_model
from bert_tf.tasks.swag.folder import MODEL_DIR, SETTINGS_NAME, is_model_dir, load_model, save_model
from bert_tf.training import driver, finetuning, run_identity

PREDICTIONS_FILE = "test_predictions.csv"
METRIC_NAMES = ("accuracy", finetuning.LOSS)  # `evaluate`'s, headline (--metric_for_best's default) first
PREDICTIONS_HEADER = ("id", "label", "ending", *(f"probability_{i}" for i in range(swag.NUM_CHOICES)))


@dataclasses.dataclass
class SwagConfig(finetuning.TaskRunConfig):
  """One SWAG run: run_classifier.py's flags (same names) with the paper's SWAG settings as defaults (learning
  rate 2e-5, batch 16, 3 epochs, set by the script) and the shared fine-tuning ones (`finetuning`)."""

  data_dir: str
  max_train_examples: int = 0  # 0: all; for quick trials
  model_name: str | None = dataclasses.field(default="swag", kw_only=True)

  def validate(self) -> None:
    """Checks that need neither devices nor data; raises ValueError naming the flag and the fix."""
    self.finetuning.validate()
    if not (self.do_train or self.do_eval or self.do_predict):
      raise ValueError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict")
    if self.max_seq_length < 4:
      raise ValueError(f"--max_seq_length={self.max_seq_length}: too short to hold [CLS] a [SEP] b [SEP]")
    if self.max_train_examples < 0:
      raise ValueError(f"--max_train_examples={self.max_train_examples}: must be >= 0 (0: all)")
    self.check_length_and_vocab()
    self.finetuning.check_evaluation(self.do_train, self.do_eval, METRIC_NAMES)
    if not self.do_train and not is_model_dir(self.finetuning.init_checkpoint):
      raise ValueError("--do_eval/--do_predict without --do_train need a fine-tuned model: "
                       f"--init_checkpoint=<a run's output_dir>/{MODEL_DIR}")


# -- Inputs ---------------------------------------------------------------------------------------------------

Inputs = dict[str, swag.SwagReadResult]  # split -> its examples, read once


def read_inputs(config: SwagConfig) -> Inputs:
  """Reads every file the flags ask for (--do_train: train.csv, --do_eval: val.csv, --do_predict: test.csv)
  before any work, so that a missing or malformed file fails in seconds naming the file and line."""
  splits = [split for split, wanted in (("train", config.do_train), ("val", config.do_eval),
                                        ("test", config.do_predict)) if wanted]
  inputs = {split: swag.read_split(config.data_dir, split) for split in splits}
  if "train" in inputs and config.max_train_examples:
    inputs["train"].examples = inputs["train"].examples[:config.max_train_examples]
  return inputs


def feature_file(config: SwagConfig, split: str, result: swag.SwagReadResult, tokenizer,
                 say: Callable[[str], None] = logging.info) -> swag_model.SwagFeatureFile:
  """The split's feature file, written on first use under <features_dir>/swag/ and reused after."""
  path = swag_model.feature_file_path(config.features_dir, result.path, config.vocab_file, split, config.do_lower_case,
                              config.max_seq_length, len(result.examples))
  info = swag_model.read_feature_file_info(path)
  if info is not None:
    say(f"SWAG {split}: reusing {path} ({info.num_examples} examples)")
    return info
  start = time.perf_counter()
  info = swag_model.write_feature_file(result.examples, tokenizer, config.max_seq_length, path)
  say(f"SWAG {split}: wrote {path}: {info.num_examples} examples in {time.perf_counter() - start:.1f} s, "
      f"{info.num_truncated} of {info.num_examples * info.num_choices} sequences truncated to "
      f"{config.max_seq_length} tokens; tokens per sequence p50/p90/p99/max "
      f"{'/'.join(str(v) for v in info.token_length_percentiles.values())}")
  return info


# -- Steps ----------------------------------------------------------------------------------------------------


def predict_logits(model, config: SwagConfig, split: str, result: swag.SwagReadResult, strategy, tokenizer,
                   batch_size: int, say) -> np.ndarray:
  """The model's float32 logits [N, 4] on the split's examples, in file order."""
  info = feature_file(config, split, result, tokenizer, say)
  dataset = swag_model.swag_dataset(info.path, finetuning.eval_batch_size_for(batch_size, strategy),
                                    config.max_seq_length, is_training=False, dynamic_padding=config.dynamic_padding_on,
                                    pad_to_batch=True, length_multiple=config.length_multiple)
  logits = finetuning.predict(model, dataset, strategy, description=f"SWAG {split}",
                              num_examples=len(result.examples))
  if len(logits) != len(result.examples):
    raise ValueError(f"{info.path}: {len(logits)} examples predicted, {len(result.examples)} expected; remove the "
                     "file to have it written again")
  return logits


def evaluate(config: SwagConfig, logits: np.ndarray, examples: list[swag.SwagExample], prefix: str = "eval") -> dict:
  """Accuracy (the share of examples whose highest-scored ending is the true one), the loss training minimises
  (`MultipleChoiceTask`'s: the mean cross-entropy over the four endings) and the `prefix`ed count."""
  labels = np.array([e.label for e in examples], np.int32)
  loss_task = swag_model.MultipleChoiceTask(config.finetuning.bert_config, None, config.max_seq_length)
  loss = finetuning.eval_loss(loss_task, {"label_ids": labels, "is_real_example": np.ones_like(labels)}, logits)
  return {"accuracy": float(np.mean(logits.argmax(axis=-1) == labels)), finetuning.LOSS: loss,
          f"{prefix}_examples": len(labels)}


def write_predictions(output_dir: str, examples: list[swag.SwagExample], probabilities: np.ndarray) -> str:
  """Writes `<output_dir>/test_predictions.csv` (CSV quoted as SWAG's files): a header, then per example its id,
  the chosen ending's index and text, and the four probabilities (6 decimals). Returns its path."""
  text = io.StringIO()
  writer = csv.writer(text, lineterminator="\n")
  writer.writerow(PREDICTIONS_HEADER)
  for example, row in zip(examples, probabilities, strict=True):
    chosen = int(row.argmax())
    writer.writerow([example.guid, chosen, example.endings[chosen], *(f"{p:.6f}" for p in row)])
  path = os.path.join(output_dir, PREDICTIONS_FILE)
  fileio.write_text_atomic(path, text.getvalue())
  return path


# -- The task's hooks on the driver ---------------------------------------------------------------------------


class SwagRun(driver.TaskRun):
  """SWAG's hooks on `driver.run_finetuning` (see the module docstring)."""

  model_dir = MODEL_DIR
  outputs = (PREDICTIONS_FILE,)

  def read_inputs(self, say) -> None:
    self.inputs = read_inputs(self.config)

  def metric_names(self) -> tuple[str, ...]:
    return METRIC_NAMES

  def run_identity(self) -> run_identity.RunIdentity:
    """train.csv's content, the length, casing, the number of training examples taken, the vocabulary and the
    fine-tuning settings that shape the weights."""
    config = self.config
    settings = {"train_file": run_identity.file_entry(self.inputs["train"].path),
                "max_seq_length": config.max_seq_length, "do_lower_case": config.do_lower_case,
                "max_train_examples": config.max_train_examples,
                "vocab_file": run_identity.file_entry(config.vocab_file),
                **run_identity.finetuning_settings(config.finetuning)}
    return run_identity.RunIdentity("swag", settings, {"num_train_epochs": config.finetuning.num_train_epochs})

  def training(self, context) -> driver.Training:
    config, ft = self.config, self.ft
    info = feature_file(config, "train", self.inputs["train"], context.tokenizer, context.say)
    task = swag_model.MultipleChoiceTask(ft.bert_config, info.path, config.max_seq_length, seed=ft.seed,
                                         dtype=ft.dtype, dynamic_padding=config.dynamic_padding_on,
                                         length_multiple=config.length_multiple)
    return driver.Training(task, info.num_examples, head=(SETTINGS_NAME, {}),
                           facts={"train_examples": info.num_examples})

  def _logits(self, model, split: str, batch_size: int, context) -> np.ndarray:
    return predict_logits(model, self.config, split, self.inputs[split], context.strategy, context.tokenizer,
                          batch_size, context.say)

  def evaluate_while_training(self, model, context) -> dict:  # accuracy and loss on val.csv
    return evaluate(self.config, self._logits(model, "val", self.ft.eval_batch_size, context),
                    self.inputs["val"].examples)

  def save(self, model, directory: str, context) -> None:
    settings = {"max_seq_length": self.config.max_seq_length, "do_lower_case": self.config.do_lower_case,
                "num_choices": swag.NUM_CHOICES}
    save_model(model, settings, self.config.vocab_file, directory)

  def load(self, directory: str, context):
    return load_model(directory)

  def evaluate(self, model, model_dir: str, context) -> None:
    start = time.perf_counter()
    values = evaluate(self.config, self._logits(model, "val", self.ft.eval_batch_size, context),
                      self.inputs["val"].examples)
    values["eval_seconds"] = round(time.perf_counter() - start, 2)
    values.update(context.training_facts())
    if context.chief:
      driver.write_results(self.config.output_dir, values)
    context.say(f"SWAG val: accuracy {values['accuracy']:.4f}  loss {values['loss']:.4f} "
                f"({values['eval_examples']} examples)")
    context.summary["eval"] = values

  def predict(self, model, model_dir: str, context) -> None:
    config, summary, say = self.config, context.summary, context.say
    examples = self.inputs["test"].examples
    start = time.perf_counter()
    logits = self._logits(model, "test", self.ft.predict_batch_size, context)
    seconds = time.perf_counter() - start
    if context.chief:
      summary["predictions"] = write_predictions(config.output_dir, examples, swag_model.probabilities(logits))
      say(f"SWAG test: {len(examples)} predictions -> {summary['predictions']}")
    labelled = sum(e.label is not None for e in examples)
    if labelled == len(examples):  # a test file with labels is scored as val (Hugging Face's --do_predict too)
      values = {**evaluate(config, logits, examples, "test"), "test_seconds": round(seconds, 2)}
      if context.chief:
        driver.write_results(config.output_dir, values, "test_results")
      say(f"SWAG test: accuracy {values['accuracy']:.4f}  loss {values['loss']:.4f} ({values['test_examples']} "
          "examples)")
      summary["test"] = values
    elif labelled:
      say(f"{self.inputs['test'].path}: {labelled} of {len(examples)} examples have a label: not scored (label "
          "them all to have the file scored)")

  def export(self, model_dir: str, context) -> str:
    from bert_tf.tasks.swag import serving as swag_serving

    return swag_serving.export_swag(model_dir, self.config.export_dir, self.config.model_name,
                                    max_request_chars=self.config.max_request_chars)


def run_swag(config: SwagConfig, strategy: tf.distribute.Strategy | None = None,
             say: Callable[[str], None] = logging.info) -> dict:
  """Does what the --do_* flags ask (see the module docstring); returns a summary. Every input is checked before
  any work: the flags and the vocabulary against the BERT config, then every CSV file the flags ask for."""
  return driver.run_finetuning(SwagRun(config), strategy, say)
