"""SQuAD v1.1 / v2.0 fine-tuning: what `scripts/run_squad.py` runs. Glue between the tested pieces:

  train_file --squad.read_squad_examples--> examples (shuffled as google-research does) --squad.convert_examples_
  to_features / squad_finetuning.write_feature_file--> training windows (TFRecords, cached under
  <features_dir>/squad/) --finetuning.train(SquadTask)--> BertSpanLabeler --> <output_dir>/squad_model/

  predict_file --> evaluation windows (cached likewise) --finetuning.predict--> start/end logits
  --squad_postprocess.postprocess--> predictions.json, nbest_predictions.json, null_odds.json (v2.0)
  --squad_metrics.evaluate_v1/v2 (--do_eval)--> eval_results.txt / .json, with the loss training minimises on
  the same logits (the windows labelled from each question's first gold answer as training labels its answer)

Outputs in --output_dir:
  checkpoints/, train/          training checkpoints and TensorBoard summaries (a rerun resumes)
  squad_model/                  the fine-tuned model: float32 weights (`model`), bert_config.json, vocab.txt and
                                squad.json (the window sizes, casing, version and the null_score_diff_threshold
                                that prediction uses when the flag is not given)
  predictions.json, nbest_predictions.json, null_odds.json   google-research's files, byte for byte its layout
  eval_results.txt / .json      with --do_eval: the official evaluation script's keys, then loss ("key = value")

SQuAD v2.0 threshold: with --do_eval, the official best-threshold search runs on the null odds
(`evaluate-v2.0.py --na-prob-file null_odds.json`, over every question's best non-null answer: see `evaluate`);
its best_f1_thresh is written into the evaluated model's squad.json, so a later --do_predict with that model
answers at it (an explicit --null_score_diff_threshold wins).
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import time
from typing import Callable

import numpy as np
import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.tasks.squad import data as squad
from bert_tf.tasks.squad import metrics as squad_metrics
from bert_tf.tasks.squad import model as sf
from bert_tf.tasks.squad import postprocess as squad_postprocess
from bert_tf.tasks.squad.folder import (
  MODEL_DIR,
  SETTINGS_NAME,
  is_model_dir,
  load_model,
  read_settings,
  save_model,
  write_threshold,
)
from bert_tf.training import distribute, finetuning, run_identity

# google-research's run_squad.py shuffles the training examples with this seed before making features.
SHUFFLE_SEED = 12345


@dataclasses.dataclass
class SquadConfig(finetuning.TaskRunConfig):
  """One SQuAD run: google-research's run_squad.py flags (same names and defaults) and the shared fine-tuning
  ones (`finetuning`: batch sizes, learning rate, epochs, warmup, strategy, precision...). New: --do_eval, the
  official metrics on predict_file (implies predicting it)."""

  train_file: str | None = None
  predict_file: str | None = None
  version_2_with_negative: bool = False
  # None: the threshold stored in the model's squad.json (best_f1_thresh after a --do_eval), else 0.0.
  null_score_diff_threshold: float | None = None
  n_best_size: int = squad_postprocess.N_BEST_SIZE
  max_answer_length: int = squad_postprocess.MAX_ANSWER_LENGTH
  max_seq_length: int = dataclasses.field(default=squad.MAX_SEQ_LENGTH, kw_only=True)
  doc_stride: int = squad.DOC_STRIDE
  max_query_length: int = squad.MAX_QUERY_LENGTH
  model_name: str | None = dataclasses.field(default="squad", kw_only=True)

  @property
  def predicting(self) -> bool:
    return self.do_predict or self.do_eval

  @property
  def metric_names(self) -> tuple[str, ...]:
    """The official script's metrics, headline first (--metric_for_best's default): v1.1 F1; v2.0 the best F1
    over null-score thresholds; then the loss."""
    if self.version_2_with_negative:
      return ("best_f1", "best_exact", "f1", "exact", "HasAns_f1", "NoAns_f1", finetuning.LOSS)
    return ("f1", "exact_match", finetuning.LOSS)

  def validate(self) -> None:
    """Checks that need neither devices nor data; raises ValueError naming the flag and the fix."""
    self.finetuning.validate()
    if not (self.do_train or self.predicting or self.export_dir):
      raise ValueError("nothing to do: pass at least one of --do_train, --do_predict, --do_eval, --export_dir")
    if self.do_train and not self.train_file:
      raise ValueError("--do_train needs --train_file (e.g. train-v1.1.json)")
    if self.predicting and not self.predict_file:
      raise ValueError("--do_predict/--do_eval need --predict_file (e.g. dev-v1.1.json)")
    self.finetuning.check_evaluation(self.do_train, self.do_eval, self.metric_names)
    squad.check_window_sizes(self.max_seq_length, self.doc_stride, self.max_query_length)
    squad_postprocess.check_sizes(self.n_best_size, self.max_answer_length)
    self.check_length_and_vocab()
    if not self.do_train and not is_model_dir(self.finetuning.init_checkpoint):
      raise ValueError("--do_predict/--do_eval/--export_dir without --do_train need a fine-tuned model: "
                       f"--init_checkpoint=<a run's output_dir>/{MODEL_DIR}")
    if not self.do_train:
      self._check_against_model(read_settings(self.finetuning.init_checkpoint))
    if self.export_dir:
      from bert_tf.export import serving

      serving.check_name_and_version(self.model_name, None)


  def _check_against_model(self, settings: dict) -> None:
    """A fine-tuned model predicts with the casing it was trained with (other ids otherwise); other sizes are
    allowed (windows of another length, a threshold given on purpose) and said."""
    where = os.path.join(self.finetuning.init_checkpoint, SETTINGS_NAME)
    if bool(settings["do_lower_case"]) != self.do_lower_case:
      raise ValueError(f"--do_lower_case={self.do_lower_case} but the model was trained with "
                       f"--do_lower_case={settings['do_lower_case']} ({where}); pass "
                       f"--do_lower_case={settings['do_lower_case']}")
    for name in ("max_seq_length", "doc_stride", "max_query_length", "version_2_with_negative"):
      if settings[name] != getattr(self, name):
        logging.warning("--%s=%s differs from the %s the model was trained with (%s)", name, getattr(self, name),
                        settings[name], where)


# -- Inputs ---------------------------------------------------------------------------------------------------


def read_inputs(config: SquadConfig, say: Callable[[str], None] = logging.info) -> dict[str, squad.SquadReadResult]:
  """Reads and checks every file the flags ask for before any work: {"train": ..., "predict": ...}. For
  --do_eval, the predict file must hold gold answers (every question in v1.1)."""
  inputs = {}
  if config.do_train:
    inputs["train"] = squad.read_squad_examples(config.train_file, True, config.version_2_with_negative)
    if inputs["train"].skipped:
      say(f"{config.train_file}: skipped {inputs['train'].skipped} question(s) whose answer text is not at its "
          "position (as google-research's run_squad.py does)")
    if not inputs["train"].examples:
      raise ValueError(f"{config.train_file}: no trainable question left")
  if config.predicting:
    inputs["predict"] = squad.read_squad_examples(config.predict_file, False, config.version_2_with_negative)
  if config.do_eval:
    examples = inputs["predict"].examples
    unanswered = [e.qas_id for e in examples if not e.answers]
    if len(unanswered) == len(examples) or (unanswered and not config.version_2_with_negative):
      raise ValueError(f"--do_eval: {config.predict_file}: question {unanswered[0]!r} has no gold answer; "
                       "evaluate on a file with answers (dev-v1.1.json; dev-v2.0.json with "
                       "--version_2_with_negative), or pass --do_predict alone")
  return inputs


def _feature_file(config: SquadConfig, path: str, examples, tokenizer, is_training: bool, say):
  """(the cached feature file of `examples`, the windows when made or `is_training` is False, else None)."""
  target = sf.feature_file_path(config.features_dir, path, config.vocab_file, is_training,
                                config.version_2_with_negative, config.do_lower_case, config.max_seq_length,
                                config.doc_stride, config.max_query_length)
  # Evaluation windows shortest first (stable): batches of similar lengths, so dynamic padding leaves little
  # padding to compute. Post-processing groups windows by question, so their order does not matter there. They
  # are labelled from the gold answers where the file has them (`with_gold_positions`): the evaluation loss.
  windows = None if is_training else sorted(squad.convert_examples_to_features(
      squad.with_gold_positions(examples, config.version_2_with_negative), tokenizer, False, config.max_seq_length,
      config.doc_stride, config.max_query_length), key=lambda window: sum(window.input_mask))
  start = time.perf_counter()
  info, reused = sf.cached_feature_file(
      target, lambda: windows if windows is not None else squad.convert_examples_to_features(
          examples, tokenizer, True, config.max_seq_length, config.doc_stride, config.max_query_length),
      is_training)
  kind = "training" if is_training else "evaluation"
  if reused:
    say(f"{path}: reusing {kind} features {target} ({info.num_features} windows of {info.num_examples} questions)")
  else:
    say(f"{path}: wrote {kind} features {target}: {info.num_features} windows of {info.num_examples} questions in "
        f"{time.perf_counter() - start:.1f} s")
  return info, windows


# -- The fine-tuned model -------------------------------------------------------------------------------------


def _settings(config: SquadConfig, threshold: float) -> dict:
  return {"max_seq_length": config.max_seq_length, "doc_stride": config.doc_stride,
          "max_query_length": config.max_query_length, "do_lower_case": config.do_lower_case,
          "version_2_with_negative": config.version_2_with_negative, "null_score_diff_threshold": threshold}


# -- Steps ----------------------------------------------------------------------------------------------------


def train(config: SquadConfig, examples: list, strategy, tokenizer, say,
          evaluate: Callable | None = None) -> tuple[object, dict]:
  """Fine-tunes on `examples` (shuffled with google-research's seed), evaluating with `evaluate(model)` while
  training under --eval_every_steps; -> (the model or None when interrupted, a summary)."""
  ft = config.finetuning
  examples = list(examples)
  random.Random(SHUFFLE_SEED).shuffle(examples)
  info, _ = _feature_file(config, config.train_file, examples, tokenizer, True, say)
  task = sf.SquadTask(ft.bert_config, info.path, config.max_seq_length, seed=ft.seed, dtype=ft.dtype,
                      dynamic_padding=config.dynamic_padding_on, length_multiple=config.length_multiple)
  start = time.perf_counter()
  # google-research's step arithmetic: examples (questions), not windows, per epoch.
  run, result = finetuning.train(task, ft, len(examples), strategy, config_source=config.config_source,
                                 evaluate=evaluate, headline_metric=config.metric_names[0], head=(SETTINGS_NAME, {}))
  seconds = finetuning.training_seconds(result, time.perf_counter() - start)
  if result.interrupted:
    return None, {"interrupted": True, "exit_code": result.exit_code}
  say(finetuning.training_line(result, seconds, ft.train_batch_size, "windows"))
  return run.model, {"train_examples": len(examples), "train_windows": info.num_features,
                     "train_steps": result.step, "train_seconds": round(seconds, 2), **(result.evaluation or {})}


def predict(model, config: SquadConfig, examples: list, strategy, tokenizer, threshold: float,
            say, kept: dict | None = None) -> tuple[squad_postprocess.Predictions, float | None]:
  """(the answers to `examples` (from predict_file) at `threshold`, the evaluation loss on their windows:
  `eval_loss`). `kept`: a run's dict for what its later calls reuse (evaluation while training): the windows and
  feature file, made or read once, and the prediction function of `model`, compiled once."""
  kept = {} if kept is None else kept
  if "features" not in kept:
    kept["features"] = _feature_file(config, config.predict_file, examples, tokenizer, False, say)
  if kept.get("model") is not model:
    kept.update(model=model, outputs=sf.squad_predictions(model, config.max_seq_length))
  info, windows = kept["features"]
  dataset = sf.squad_dataset(
      info.path, finetuning.eval_batch_size_for(config.finetuning.predict_batch_size, strategy),
      config.max_seq_length, is_training=False, dynamic_padding=config.dynamic_padding_on, pad_to_batch=True,
      length_multiple=config.length_multiple)
  logits = finetuning.predict(kept["outputs"], dataset, strategy, description=f"predicting {config.predict_file}",
                              num_examples=len(windows))  # [N, 2, T]
  if len(logits) != len(windows):
    raise ValueError(f"{info.path}: {len(logits)} windows predicted, {len(windows)} expected; remove the file "
                     "to have it written again")
  results = {w.unique_id: (logits[i, 0], logits[i, 1]) for i, w in enumerate(windows)}
  return squad_postprocess.postprocess(
      examples, windows, results, config.n_best_size, config.max_answer_length, config.do_lower_case,
      config.version_2_with_negative, threshold), eval_loss(config, windows, logits)


def eval_loss(config: SquadConfig, windows: list, logits) -> float | None:
  """`SquadTask`'s loss (the mean over windows of (CE(start) + CE(end)) / 2, each softmax over the window's real
  tokens) on the logits [N, 2, T] of the labelled `windows` (those of questions with gold answers, labelled as
  training labels its windows: `squad.with_gold_positions`); None when no window is labelled."""
  labelled = np.array([w.start_position is not None for w in windows], np.int32)
  if not labelled.any():
    return None
  task = sf.SquadTask(config.finetuning.bert_config, None, config.max_seq_length)
  features = {"is_real_example": labelled, "input_mask": np.array([w.input_mask for w in windows], np.int32)}
  for side in ("start", "end"):
    features[f"{side}_positions"] = np.array([getattr(w, f"{side}_position") or 0 for w in windows], np.int32)
  return finetuning.eval_loss(task, features, {"start_logits": logits[:, 0], "end_logits": logits[:, 1]})


def evaluate(config: SquadConfig, predictions: squad_postprocess.Predictions) -> dict:
  """The official scripts' results on predict_file: evaluate-v1.1.py's; or evaluate-v2.0.py's with
  --na-prob-file null_odds.json (best_exact, best_f1 and their thresholds too).

  v2.0: exact, f1, HasAns_* and NoAns_* score predictions.json as it is (evaluate-v2.0.py without
  --na-prob-file). best_* come from evaluate-v2.0.py's threshold search with the null odds over every
  question's best non-null answer: run on predictions.json itself (google-research's README), it could only
  find thresholds below the one the predictions were made at."""
  with fileio.open_file(config.predict_file, "rb") as f:
    dataset = json.loads(f.read().decode("utf-8-sig"))
  if not config.version_2_with_negative:
    return dict(squad_metrics.evaluate_v1(dataset, predictions.predictions))
  values = dict(squad_metrics.evaluate_v2(dataset, predictions.predictions))
  search = squad_metrics.evaluate_v2(dataset, predictions.best_non_null_texts, predictions.null_odds)
  values.update((key, search[key]) for key in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"))
  return values


def write_eval_results(output_dir: str, values: dict) -> None:
  lines = finetuning.results_text(values)
  fileio.write_text_atomic(os.path.join(output_dir, "eval_results.txt"), lines)
  fileio.write_text_atomic(os.path.join(output_dir, "eval_results.json"), json.dumps(values, indent=2) + "\n")


# -- What a run is --------------------------------------------------------------------------------------------

# What a run writes in its output dir besides run_identity.COMMON_OUTPUTS and squad_model/.
_OUTPUTS = (squad_postprocess.PREDICTIONS_FILE, squad_postprocess.NBEST_FILE, squad_postprocess.NULL_ODDS_FILE)


def run_identity_of(config: SquadConfig) -> run_identity.RunIdentity:
  """What defines a training run (`run_identity`): the training file's content, SQuAD's version, the window
  sizes, casing, vocabulary and the fine-tuning settings that shape the weights (not the prediction settings:
  n_best_size, max_answer_length, the threshold)."""
  settings = {"train_file": run_identity.file_entry(config.train_file),
              "version_2_with_negative": config.version_2_with_negative, "max_seq_length": config.max_seq_length,
              "doc_stride": config.doc_stride, "max_query_length": config.max_query_length,
              "do_lower_case": config.do_lower_case, "vocab_file": run_identity.file_entry(config.vocab_file),
              **run_identity.finetuning_settings(config.finetuning)}
  return run_identity.RunIdentity("squad", settings, {"num_train_epochs": config.finetuning.num_train_epochs})


# -- The script's entry point ---------------------------------------------------------------------------------


def run_squad(config: SquadConfig, strategy: tf.distribute.Strategy | None = None,
              say: Callable[[str], None] = logging.info) -> dict:
  """Does what the --do_* flags ask (see the module docstring); returns a summary. Every input is checked before
  any work: the flags and the vocabulary against the BERT config, then the JSON files."""
  from bert_tf.data.tokenization import FullTokenizer

  config.validate()
  inputs = read_inputs(config, say)
  if config.do_train:  # what the output dir's run is: a rerun that would change it is refused here
    ft = config.finetuning
    run_identity.start_run(config.output_dir, run_identity_of(config), ft.overwrite_output_dir,
                           outputs=_OUTPUTS, model_dirs=(MODEL_DIR,),
                           inputs=(ft.init_checkpoint, config.vocab_file, config.train_file), say=say)
  strategy = strategy or config.finetuning.strategy()
  config.check_init_checkpoint()  # before any feature file is written
  tokenizer = FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
  tf.io.gfile.makedirs(config.output_dir)
  chief = distribute.is_chief(strategy)
  summary: dict = {"output_dir": config.output_dir}
  kept: dict = {}  # predict_file's features and the compiled model, for every prediction of this run
  if config.do_train:
    import keras

    keras.utils.set_random_seed(config.finetuning.seed)
    stored = squad_postprocess.NULL_SCORE_DIFF_THRESHOLD if config.null_score_diff_threshold is None \
        else config.null_score_diff_threshold

    def evaluate_dev(model):  # while training: the official metrics on predict_file, and the loss
      predictions, loss = predict(model, config, inputs["predict"].examples, strategy, tokenizer, stored, say, kept)
      return {**evaluate(config, predictions), finetuning.LOSS: loss}

    model, trained = train(config, inputs["train"].examples, strategy, tokenizer, say, evaluate_dev)
    summary.update(trained)
    if model is None:
      return summary
    model_dir = os.path.join(config.output_dir, MODEL_DIR)
    if chief:
      save_model(model, _settings(config, stored), config.vocab_file, model_dir)
      say(f"saved the fine-tuned model to {model_dir}")
  else:
    model_dir = config.finetuning.init_checkpoint.rstrip("/")
    with strategy.scope():
      model = load_model(model_dir)
    stored = float(read_settings(model_dir).get("null_score_diff_threshold",
                                                squad_postprocess.NULL_SCORE_DIFF_THRESHOLD))
  summary["model_dir"] = model_dir
  if config.predicting:
    _predict_and_evaluate(config, model, model_dir, stored, inputs, strategy, tokenizer, chief, summary, say, kept)
  if config.export_dir and chief:
    from bert_tf.tasks.squad import serving as squad_serving

    summary["export"] = squad_serving.export_squad(model_dir, config.export_dir, config.model_name,
                                                   n_best_size=config.n_best_size,
                                                   max_answer_length=config.max_answer_length,
                                                   null_score_diff_threshold=config.null_score_diff_threshold)
    say(f"the SavedModel for TensorFlow Serving: {summary['export']}")
  return summary


def _predict_and_evaluate(config: SquadConfig, model, model_dir: str, stored: float, inputs: dict, strategy,
                          tokenizer, chief: bool, summary: dict, say, kept: dict) -> None:
  """--do_predict / --do_eval: the answers, their files, the official metrics and the stored threshold; adds
  what it did to `summary`."""
  threshold = stored if config.null_score_diff_threshold is None else config.null_score_diff_threshold
  start = time.perf_counter()
  predictions, loss = predict(model, config, inputs["predict"].examples, strategy, tokenizer, threshold, say, kept)
  seconds = time.perf_counter() - start
  summary.update(predict_examples=len(predictions.predictions), predict_seconds=round(seconds, 2))
  if config.version_2_with_negative:
    summary["null_score_diff_threshold"] = threshold
  if chief:
    summary["predictions"] = squad_postprocess.write_predictions(predictions, config.output_dir)
    say(f"{len(predictions.predictions)} answers -> {summary['predictions'][squad_postprocess.PREDICTIONS_FILE]}"
        + (f" (null_score_diff_threshold {threshold:g})" if config.version_2_with_negative else ""))
  if config.do_eval:
    values = evaluate(config, predictions)
    if config.version_2_with_negative:
      values["null_score_diff_threshold"] = threshold
      if chief:
        write_threshold(model_dir, values["best_f1_thresh"])
        say(f"stored best_f1_thresh {values['best_f1_thresh']:g} in {os.path.join(model_dir, SETTINGS_NAME)}: "
            "later predictions with this model use it")
    if loss is not None:  # None: no question's gold answer is at its words
      values[finetuning.LOSS] = loss
    for key in ("train_examples", "train_steps", "train_seconds", "predict_seconds", *finetuning.EVALUATION_KEYS):
      if key in summary:
        values[key] = summary[key]
    if chief:
      write_eval_results(config.output_dir, values)
    say(f"{config.predict_file}: " + "  ".join(f"{k} {v:.4f}" for k, v in values.items()
                                              if k in ("exact_match", "exact", "f1", "best_exact", "best_f1", "loss")))
    summary["eval"] = values
