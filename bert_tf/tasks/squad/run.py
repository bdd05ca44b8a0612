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

The run's sequence is the shared driver's (`driver.run_finetuning`); `SquadRun` gives SQuAD's hooks.
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
from bert_tf.tasks.squad import model as squad_model
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
from bert_tf.training import driver, finetuning, run_identity

# google-research's run_squad.py shuffles the training examples with this seed before making features.
SHUFFLE_SEED = 12345
# Below this share of training windows holding an answer, the run warns: the model learns mostly to point at [CLS]
# (no answer) and F1 can stay 0. SQuAD sits far above it (docs/squad.md); long documents cut into windows below.
FEW_ANSWER_WINDOWS = 0.10


@dataclasses.dataclass
class SquadConfig(finetuning.TaskRunConfig):
  """One SQuAD run: google-research's run_squad.py flags (same names and defaults) and the shared fine-tuning
  ones (`finetuning`: batch sizes, learning rate, epochs, warmup, strategy, precision...). New: --do_eval, the
  official metrics on predict_file (implies predicting it); --epoch_unit, what --num_train_epochs counts;
  --include_unknowns, the share of training windows without an answer kept (google-research's flag of its Natural
  Questions and TyDi QA baselines)."""

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
  # "windows": an epoch is a pass over the training windows; "questions": google-research's arithmetic, an epoch
  # is as many windows as there are questions (a fraction of a pass where contexts make several windows each).
  epoch_unit: str = "windows"
  # In (0, 1): keep each training window without an answer with this probability (long documents, where most
  # windows hold none); negative: keep every window. google-research's Natural Questions / TyDi QA flag.
  include_unknowns: float = squad.INCLUDE_ALL_UNKNOWNS
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
    if self.epoch_unit not in squad.EPOCH_UNITS:
      raise ValueError(f"--epoch_unit={self.epoch_unit}: must be one of {', '.join(squad.EPOCH_UNITS)}")
    squad.check_include_unknowns(self.include_unknowns)
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
  if config.export_dir:
    for result in inputs.values():
      _say_contexts_over_the_limit(result, config.max_request_chars, say)
  return inputs


def _say_contexts_over_the_limit(result: squad.SquadReadResult, limit: int, say: Callable[[str], None]) -> None:
  """Says how many of the file's contexts the export (--export_dir) will refuse as a request: more characters
  than --max_request_chars (counted with each run of whitespace as one, so a lower bound)."""
  lengths = {id(e.doc_tokens): sum(map(len, e.doc_tokens)) + len(e.doc_tokens) - 1 for e in result.examples}
  over = sum(length > limit for length in lengths.values())
  if over:
    say(f"{result.path}: {over} of its {len(lengths)} contexts hold more than --max_request_chars={limit:,} "
        "characters: the export refuses a request with one of them; pass a larger --max_request_chars to serve "
        "them")


def _feature_file(config: SquadConfig, path: str, examples, tokenizer, is_training: bool, say):
  """(the cached feature file of `examples`, the windows when made or `is_training` is False, else None)."""
  target = squad_model.feature_file_path(config.features_dir, path, config.vocab_file, is_training,
                                         config.version_2_with_negative, config.do_lower_case,
                                         config.max_seq_length, config.doc_stride, config.max_query_length,
                                         include_unknowns=config.include_unknowns if is_training
                                         else squad.INCLUDE_ALL_UNKNOWNS)
  # Evaluation windows shortest first (stable): batches of similar lengths, so dynamic padding leaves little
  # padding to compute. Post-processing groups windows by question, so their order does not matter there. They
  # are labelled from the gold answers where the file has them (`with_gold_positions`): the evaluation loss.
  windows = None if is_training else sorted(squad.convert_examples_to_features(
      squad.with_gold_positions(examples, config.version_2_with_negative), tokenizer, False, config.max_seq_length,
      config.doc_stride, config.max_query_length), key=lambda window: sum(window.input_mask))
  start = time.perf_counter()
  info, reused = squad_model.cached_feature_file(
      target, lambda: windows if windows is not None else squad.keep_unknowns(squad.convert_examples_to_features(
          examples, tokenizer, True, config.max_seq_length, config.doc_stride, config.max_query_length),
          examples, config.include_unknowns),
      is_training)
  kind = "training" if is_training else "evaluation"
  if reused:
    say(f"{path}: reusing {kind} features {target} ({info.num_features} windows of {info.num_examples} questions)")
  else:
    say(f"{path}: wrote {kind} features {target}: {info.num_features} windows of {info.num_examples} questions in "
        f"{time.perf_counter() - start:.1f} s")
  return info, windows


def describe_epoch(config: SquadConfig, num_questions: int,
                   info: squad_model.SquadFeatureFile) -> tuple[str, list[str]]:
  """(the line that says what an epoch is, the warnings) for training on `num_questions` questions whose windows
  are the feature file `info`:

    an epoch is 30,475 windows of 383 questions (952.3 steps of 32); 2.0 % of the windows hold an answer

  With --epoch_unit=questions the line says how much of a pass over the windows an epoch is, and a warning comes
  when the whole run takes less than one pass. A warning also comes when under `FEW_ANSWER_WINDOWS` of the
  windows hold an answer (start_position past [CLS])."""
  windows, batch = info.num_features, config.finetuning.train_batch_size
  share = (windows - info.num_unanswered) / max(windows, 1)
  answers = f"{100 * share:.1f} % of the windows hold an answer"
  if squad.samples_unknowns(config.include_unknowns):
    answers += (f" (--include_unknowns={config.include_unknowns:g}: each window without one kept with that "
                "probability)")
  warnings = []
  if config.epoch_unit == "windows":
    line = f"{finetuning.epoch_line(windows, num_questions, 'questions', batch)}; {answers}"
  else:
    line = (f"an epoch is {num_questions:,} questions (--epoch_unit=questions: {num_questions / batch:.4g} steps of "
            f"{batch} windows), {num_questions / max(windows, 1):.3g} of a pass over the {windows:,} windows; "
            f"{answers}")
    steps, _ = config.finetuning.train_steps(num_questions)
    passes = steps * batch / max(windows, 1)
    if passes < 1:
      warnings.append(f"--epoch_unit=questions: {steps} steps of {batch} windows are {passes:.3g} of a pass over "
                      f"the {windows:,} training windows, so most windows are never trained on; drop "
                      "--epoch_unit=questions (an epoch is then a pass over the windows) or raise --num_train_epochs")
  if share < FEW_ANSWER_WINDOWS:
    no_answer = ("; the windows of SQuAD 2.0's unanswerable questions, which hold none by design, count too"
                 if config.version_2_with_negative else "")
    warnings.append(
        f"only {100 * share:.1f} % of the training windows hold an answer (under {100 * FEW_ANSWER_WINDOWS:.0f} %"
        f"{no_answer}): the model learns mostly to point at [CLS] (no answer) and F1 can stay at 0. The contexts are "
        f"long for --max_seq_length={config.max_seq_length} ({windows / max(num_questions, 1):.3g} windows a question "
        f"at --doc_stride={config.doc_stride}). A longer --max_seq_length (up to the model's "
        f"{config.finetuning.bert_config.max_position_embeddings} positions) raises the share; a larger --doc_stride "
        "makes fewer, less overlapping windows (a shorter epoch); more --num_train_epochs trains on each answer more "
        "often, and --include_unknowns=0.1 keeps a tenth of the windows without one (docs/squad.md, long "
        "documents)")
  return line, warnings


# -- Prediction and evaluation --------------------------------------------------------------------------------


def predict(model, config: SquadConfig, examples: list, strategy, tokenizer, threshold: float,
            say, kept: dict | None = None) -> tuple[squad_postprocess.Predictions, float | None]:
  """(the answers to `examples` (from predict_file) at `threshold`, the evaluation loss on their windows:
  `eval_loss`). `kept`: a run's dict for what its later calls reuse (evaluation while training): the windows and
  feature file, made or read once, and the prediction function of `model`, compiled once."""
  kept = {} if kept is None else kept
  if "features" not in kept:
    kept["features"] = _feature_file(config, config.predict_file, examples, tokenizer, False, say)
  if kept.get("model") is not model:
    kept.update(model=model, outputs=squad_model.squad_predictions(model, config.max_seq_length))
  info, windows = kept["features"]
  dataset = squad_model.squad_dataset(
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
  task = squad_model.SquadTask(config.finetuning.bert_config, None, config.max_seq_length)
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


# -- The task's hooks on the driver ---------------------------------------------------------------------------


class SquadRun(driver.TaskRun):
  """SQuAD's hooks on `driver.run_finetuning` (see the module docstring). `stored` is the null_score_diff_threshold
  of the model's squad.json: --null_score_diff_threshold (else 0.0) when training, the loaded folder's otherwise;
  predictions use it unless the flag is given."""

  model_dir = MODEL_DIR
  outputs = (squad_postprocess.PREDICTIONS_FILE, squad_postprocess.NBEST_FILE, squad_postprocess.NULL_ODDS_FILE)

  def __init__(self, config: SquadConfig):
    super().__init__(config)
    self.stored = squad_postprocess.NULL_SCORE_DIFF_THRESHOLD

  def read_inputs(self, say) -> None:
    self.inputs = read_inputs(self.config, say)

  def metric_names(self) -> tuple[str, ...]:
    return self.config.metric_names

  def run_identity(self) -> run_identity.RunIdentity:
    """The training file's content, SQuAD's version, the window sizes, casing, vocabulary, what an epoch counts
    (it sets the number of steps) and the fine-tuning settings that shape the weights (not the prediction
    settings: n_best_size, max_answer_length, the threshold)."""
    config = self.config
    settings = {"train_file": run_identity.file_entry(config.train_file),
                "version_2_with_negative": config.version_2_with_negative, "max_seq_length": config.max_seq_length,
                "doc_stride": config.doc_stride, "max_query_length": config.max_query_length,
                "epoch_unit": config.epoch_unit,
                # Only when it drops windows: a run from before the flag keeps its identity.
                **({"include_unknowns": config.include_unknowns}
                   if squad.samples_unknowns(config.include_unknowns) else {}),
                "do_lower_case": config.do_lower_case, "vocab_file": run_identity.file_entry(config.vocab_file),
                **run_identity.finetuning_settings(config.finetuning)}
    return run_identity.RunIdentity("squad", settings, {"num_train_epochs": config.finetuning.num_train_epochs})

  def training(self, context) -> driver.Training:
    """The training windows of the examples shuffled with google-research's seed; an epoch is a pass over the
    windows, or (--epoch_unit=questions) as many windows as there are questions. Says what an epoch is, and warns
    when few windows hold an answer (`describe_epoch`)."""
    config, ft = self.config, self.ft
    if config.null_score_diff_threshold is not None:
      self.stored = config.null_score_diff_threshold
    examples = list(self.inputs["train"].examples)
    random.Random(SHUFFLE_SEED).shuffle(examples)
    info, _ = _feature_file(config, config.train_file, examples, context.tokenizer, True, context.say)
    task = squad_model.SquadTask(ft.bert_config, info.path, config.max_seq_length, seed=ft.seed, dtype=ft.dtype,
                                 dynamic_padding=config.dynamic_padding_on, length_multiple=config.length_multiple)
    line, warnings = describe_epoch(config, len(examples), info)
    context.say(line)
    for warning in warnings:
      logging.warning("%s", warning)
    per_epoch = info.num_features if config.epoch_unit == "windows" else len(examples)
    return driver.Training(task, per_epoch, head=(SETTINGS_NAME, {}), unit="windows",
                           facts={"train_examples": len(examples), "train_windows": info.num_features,
                                  "train_answer_windows": info.num_features - info.num_unanswered})

  def _predict(self, model, threshold: float, context) -> tuple[squad_postprocess.Predictions, float | None]:
    # context.kept: predict_file's features and the compiled model, for every prediction of this run
    return predict(model, self.config, self.inputs["predict"].examples, context.strategy, context.tokenizer,
                   threshold, context.say, context.kept)

  def evaluate_while_training(self, model, context) -> dict:  # the official metrics on predict_file, and the loss
    predictions, loss = self._predict(model, self.stored, context)
    return {**evaluate(self.config, predictions), finetuning.LOSS: loss}

  def save(self, model, directory: str, context) -> None:
    config = self.config
    settings = {"max_seq_length": config.max_seq_length, "doc_stride": config.doc_stride,
                "max_query_length": config.max_query_length, "do_lower_case": config.do_lower_case,
                "version_2_with_negative": config.version_2_with_negative, "null_score_diff_threshold": self.stored}
    save_model(model, settings, config.vocab_file, directory)

  def load(self, directory: str, context):
    self.stored = float(read_settings(directory).get("null_score_diff_threshold",
                                                     squad_postprocess.NULL_SCORE_DIFF_THRESHOLD))
    return load_model(directory)

  def evaluate(self, model, model_dir: str, context) -> None:  # --do_eval predicts predict_file, in the same pass
    self._predict_and_evaluate(model, model_dir, context)

  def predict(self, model, model_dir: str, context) -> None:
    if not self.config.do_eval:  # with --do_eval, `evaluate` wrote the predictions already
      self._predict_and_evaluate(model, model_dir, context)

  def _predict_and_evaluate(self, model, model_dir: str, context) -> None:
    """--do_predict / --do_eval: the answers, their files, the official metrics and the stored threshold; adds
    what it did to `context.summary`."""
    config, summary, say, chief = self.config, context.summary, context.say, context.chief
    threshold = self.stored if config.null_score_diff_threshold is None else config.null_score_diff_threshold
    start = time.perf_counter()
    predictions, loss = self._predict(model, threshold, context)
    seconds = time.perf_counter() - start
    summary.update(predict_examples=len(predictions.predictions), predict_seconds=round(seconds, 2))
    if config.version_2_with_negative:
      summary["null_score_diff_threshold"] = threshold
    if chief:
      summary["predictions"] = squad_postprocess.write_predictions(predictions, config.output_dir)
      say(f"{len(predictions.predictions)} answers -> {summary['predictions'][squad_postprocess.PREDICTIONS_FILE]}"
          + (f" (null_score_diff_threshold {threshold:g})" if config.version_2_with_negative else ""))
    if not config.do_eval:
      return
    values = evaluate(config, predictions)
    if config.version_2_with_negative:
      values["null_score_diff_threshold"] = threshold
      if chief:
        write_threshold(model_dir, values["best_f1_thresh"])
        say(f"stored best_f1_thresh {values['best_f1_thresh']:g} in {os.path.join(model_dir, SETTINGS_NAME)}: "
            "later predictions with this model use it")
    if loss is not None:  # None: no question's gold answer is at its words
      values[finetuning.LOSS] = loss
    facts = context.training_facts()
    values.update((key, value) for key, value in facts.items() if key.startswith("train_"))
    values["predict_seconds"] = summary["predict_seconds"]
    values.update(facts)  # then evaluation while training's keys
    if chief:
      driver.write_results(config.output_dir, values)
    say(f"{config.predict_file}: " + "  ".join(f"{k} {v:.4f}" for k, v in values.items()
                                              if k in ("exact_match", "exact", "f1", "best_exact", "best_f1", "loss")))
    summary["eval"] = values

  def export(self, model_dir: str, context) -> str:
    from bert_tf.tasks.squad import serving as squad_serving

    config = self.config
    return squad_serving.export_squad(model_dir, config.export_dir, config.model_name,
                                      n_best_size=config.n_best_size, max_answer_length=config.max_answer_length,
                                      null_score_diff_threshold=config.null_score_diff_threshold,
                                      max_request_chars=config.max_request_chars)


def run_squad(config: SquadConfig, strategy: tf.distribute.Strategy | None = None,
              say: Callable[[str], None] = logging.info) -> dict:
  """Does what the --do_* flags ask (see the module docstring); returns a summary. Every input is checked before
  any work: the flags and the vocabulary against the BERT config, then the JSON files."""
  return driver.run_finetuning(SquadRun(config), strategy, say)
