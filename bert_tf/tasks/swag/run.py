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
import json
import os
import time
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.tasks.swag import data as swag
from bert_tf.tasks.swag import model as sf
from bert_tf.tasks.swag.folder import MODEL_DIR, SETTINGS_NAME, is_model_dir, load_model, save_model
from bert_tf.training import distribute, finetuning, run_identity

PREDICTIONS_FILE = "test_predictions.csv"
METRIC_NAMES = ("accuracy", finetuning.LOSS)  # `evaluate`'s, headline (--metric_for_best's default) first
PREDICTIONS_HEADER = ("id", "label", "ending", *(f"probability_{i}" for i in range(swag.NUM_CHOICES)))


@dataclasses.dataclass
class SwagConfig(finetuning.TaskRunConfig):
  """One SWAG run: run_classifier.py's flags (same names) with the paper's SWAG settings as defaults (learning
  rate 2e-5, batch 16, 3 epochs, set by the script) and the shared fine-tuning ones (`finetuning`)."""

  data_dir: str
  vocab_file: str
  finetuning: finetuning.FinetuningConfig
  do_lower_case: bool = True
  do_train: bool = False
  do_eval: bool = False
  do_predict: bool = False
  max_seq_length: int = 128
  features_dir: str | None = None  # None: finetuning.default_features_dir(output_dir)
  dynamic_padding: bool = True
  max_train_examples: int = 0  # 0: all; for quick trials
  export_dir: str | None = None  # also export the model for TF Serving (swag.serving) at the end
  model_name: str = "swag"
  bert_config_file: str | None = None  # where finetuning.bert_config came from, named in messages

  @property
  def output_dir(self) -> str:
    return self.finetuning.output_dir

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
                 say: Callable[[str], None] = logging.info) -> sf.SwagFeatureFile:
  """The split's feature file, written on first use under <features_dir>/swag/ and reused after."""
  path = sf.feature_file_path(config.features_dir, result.path, config.vocab_file, split, config.do_lower_case,
                              config.max_seq_length, len(result.examples))
  info = sf.read_feature_file_info(path)
  if info is not None:
    say(f"SWAG {split}: reusing {path} ({info.num_examples} examples)")
    return info
  start = time.perf_counter()
  info = sf.write_feature_file(result.examples, tokenizer, config.max_seq_length, path)
  say(f"SWAG {split}: wrote {path}: {info.num_examples} examples in {time.perf_counter() - start:.1f} s, "
      f"{info.num_truncated} of {info.num_examples * info.num_choices} sequences truncated to "
      f"{config.max_seq_length} tokens; tokens per sequence p50/p90/p99/max "
      f"{'/'.join(str(v) for v in info.token_length_percentiles.values())}")
  return info


# -- The fine-tuned model -------------------------------------------------------------------------------------


# -- Steps ----------------------------------------------------------------------------------------------------


def train(config: SwagConfig, result: swag.SwagReadResult, strategy, tokenizer, say,
          evaluate: Callable | None = None) -> tuple[object, dict]:
  """Fine-tunes on train.csv's examples, evaluating with `evaluate(model)` while training under
  --eval_every_steps; -> (the model, or None when interrupted, and a summary)."""
  ft = config.finetuning
  info = feature_file(config, "train", result, tokenizer, say)
  task = sf.MultipleChoiceTask(ft.bert_config, info.path, config.max_seq_length, seed=ft.seed, dtype=ft.dtype,
                               dynamic_padding=config.dynamic_padding_on, length_multiple=config.length_multiple)
  start = time.perf_counter()
  run, trained = finetuning.train(task, ft, info.num_examples, strategy, config_source=config.config_source,
                                  evaluate=evaluate, headline_metric=METRIC_NAMES[0], head=(SETTINGS_NAME, {}))
  seconds = finetuning.training_seconds(trained, time.perf_counter() - start)
  if trained.interrupted:
    return None, {"interrupted": True, "exit_code": trained.exit_code}
  rate = finetuning.examples_per_second(trained, seconds, ft.train_batch_size)
  say(finetuning.training_line(trained, seconds, ft.train_batch_size))
  return run.model, {"train_examples": info.num_examples, "train_steps": trained.step,
                     "train_seconds": round(seconds, 2), "train_examples_per_second": round(rate, 1),
                     **(trained.evaluation or {})}


def predict_logits(model, config: SwagConfig, split: str, result: swag.SwagReadResult, strategy, tokenizer,
                   batch_size: int, say) -> np.ndarray:
  """The model's float32 logits [N, 4] on the split's examples, in file order."""
  info = feature_file(config, split, result, tokenizer, say)
  dataset = sf.swag_dataset(info.path, finetuning.eval_batch_size_for(batch_size, strategy), config.max_seq_length,
                            is_training=False, dynamic_padding=config.dynamic_padding_on, pad_to_batch=True,
                            length_multiple=config.length_multiple)
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
  loss_task = sf.MultipleChoiceTask(config.finetuning.bert_config, None, config.max_seq_length)
  loss = finetuning.eval_loss(loss_task, {"label_ids": labels, "is_real_example": np.ones_like(labels)}, logits)
  return {"accuracy": float(np.mean(logits.argmax(axis=-1) == labels)), finetuning.LOSS: loss,
          f"{prefix}_examples": len(labels)}


def write_eval_results(output_dir: str, values: dict, name: str = "eval_results") -> None:
  """<name>.txt ("key = value") and <name>.json: eval_results, or test_results."""
  lines = finetuning.results_text(values)
  fileio.write_text_atomic(os.path.join(output_dir, f"{name}.txt"), lines)
  fileio.write_text_atomic(os.path.join(output_dir, f"{name}.json"), json.dumps(values, indent=2) + "\n")


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


# -- What a run is --------------------------------------------------------------------------------------------


def run_identity_of(config: SwagConfig, inputs: Inputs) -> run_identity.RunIdentity:
  """What defines a training run (`run_identity`): train.csv's content, the length, casing, the number of
  training examples taken, the vocabulary and the fine-tuning settings that shape the weights."""
  settings = {"train_file": run_identity.file_entry(inputs["train"].path), "max_seq_length": config.max_seq_length,
              "do_lower_case": config.do_lower_case, "max_train_examples": config.max_train_examples,
              "vocab_file": run_identity.file_entry(config.vocab_file),
              **run_identity.finetuning_settings(config.finetuning)}
  return run_identity.RunIdentity("swag", settings, {"num_train_epochs": config.finetuning.num_train_epochs})


# -- The script's entry point ---------------------------------------------------------------------------------


def run_swag(config: SwagConfig, strategy: tf.distribute.Strategy | None = None,
             say: Callable[[str], None] = logging.info) -> dict:
  """Does what the --do_* flags ask (see the module docstring); returns a summary. Every input is checked before
  any work: the flags and the vocabulary against the BERT config, then every CSV file the flags ask for."""
  from bert_tf.data.tokenization import FullTokenizer

  config.validate()
  inputs = read_inputs(config)
  if config.do_train:  # what the output dir's run is: a rerun that would change it is refused here
    ft = config.finetuning
    run_identity.start_run(config.output_dir, run_identity_of(config, inputs), ft.overwrite_output_dir,
                           outputs=(PREDICTIONS_FILE,), model_dirs=(MODEL_DIR,),
                           inputs=(ft.init_checkpoint, config.vocab_file, inputs["train"].path), say=say)
  strategy = strategy or config.finetuning.strategy()
  config.check_init_checkpoint()  # before any feature file is written
  tokenizer = FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
  tf.io.gfile.makedirs(config.output_dir)
  chief = distribute.is_chief(strategy)
  summary: dict = {"output_dir": config.output_dir}
  if config.do_train:
    import keras

    keras.utils.set_random_seed(config.finetuning.seed)

    def evaluate_val(model):  # while training: accuracy and loss on val.csv
      logits = predict_logits(model, config, "val", inputs["val"], strategy, tokenizer,
                              config.finetuning.eval_batch_size, say)
      return evaluate(config, logits, inputs["val"].examples)

    model, trained = train(config, inputs["train"], strategy, tokenizer, say, evaluate_val)
    summary.update(trained)
    if model is None:
      return summary
    model_dir = os.path.join(config.output_dir, MODEL_DIR)
    if chief:
      settings = {"max_seq_length": config.max_seq_length, "do_lower_case": config.do_lower_case,
                  "num_choices": swag.NUM_CHOICES}
      save_model(model, settings, config.vocab_file, model_dir)
      say(f"saved the fine-tuned model to {model_dir}")
  else:
    model_dir = config.finetuning.init_checkpoint.rstrip("/")
    with strategy.scope():
      model = load_model(model_dir)
  summary["model_dir"] = model_dir

  if config.do_eval:
    start = time.perf_counter()
    logits = predict_logits(model, config, "val", inputs["val"], strategy, tokenizer,
                            config.finetuning.eval_batch_size, say)
    values = evaluate(config, logits, inputs["val"].examples)
    values["eval_seconds"] = round(time.perf_counter() - start, 2)
    for key in ("train_examples", "train_steps", "train_seconds", "train_examples_per_second",
                *finetuning.EVALUATION_KEYS):
      if key in summary:
        values[key] = summary[key]
    if chief:
      write_eval_results(config.output_dir, values)
    say(f"SWAG val: accuracy {values['accuracy']:.4f}  loss {values['loss']:.4f} ({values['eval_examples']} "
        "examples)")
    summary["eval"] = values
  if config.do_predict:
    examples = inputs["test"].examples
    start = time.perf_counter()
    logits = predict_logits(model, config, "test", inputs["test"], strategy, tokenizer,
                            config.finetuning.predict_batch_size, say)
    seconds = time.perf_counter() - start
    if chief:
      summary["predictions"] = write_predictions(config.output_dir, examples, sf.probabilities(logits))
      say(f"SWAG test: {len(examples)} predictions -> {summary['predictions']}")
    labelled = sum(e.label is not None for e in examples)
    if labelled == len(examples):  # a test file with labels is scored as val (Hugging Face's --do_predict too)
      values = {**evaluate(config, logits, examples, "test"), "test_seconds": round(seconds, 2)}
      if chief:
        write_eval_results(config.output_dir, values, "test_results")
      say(f"SWAG test: accuracy {values['accuracy']:.4f}  loss {values['loss']:.4f} ({values['test_examples']} "
          "examples)")
      summary["test"] = values
    elif labelled:
      say(f"{inputs['test'].path}: {labelled} of {len(examples)} examples have a label: not scored (label them "
          "all to have the file scored)")
  if config.export_dir and chief:
    from bert_tf.tasks.swag import serving as swag_serving

    summary["export"] = swag_serving.export_swag(model_dir, config.export_dir, config.model_name)
    say(f"the SavedModel for TensorFlow Serving: {summary['export']}")
  return summary
