"""SQuAD answers from the model's start and end logits, as google-research's `run_squad.py` makes them
(`write_predictions`, `get_final_text`): the same candidates, order, texts, probabilities and files, to the bit.

For each question, over all windows (features) of its context:

1. Candidates. In each window, every pair of a start among the window's `n_best_size` highest start logits and
   an end among its `n_best_size` highest end logits (ranked over all T positions, padding included; equal
   logits keep position order) is a candidate span when both lie in the window's part of the context
   (`token_to_orig_map`), the start is in the window that scores it (`token_is_max_context`, so a span is
   proposed by one window only), start <= end, and it is at most `max_answer_length` tokens long. Its score
   is start logit + end logit; candidates are ranked by score (a stable sort: ties keep window, then start,
   then end order).
2. Texts. A span's WordPiece tokens, joined without "##", are found again in the whitespace words it came from
   (see `final_text`); candidates whose text repeats a better one are dropped, and the first `n_best_size`
   texts are the n-best, each with its softmax probability over the n-best scores.
3. SQuAD 2.0 (`version_2_with_negative`): the null score of a question is the lowest [CLS] score
   (start_logits[0] + end_logits[0]) over its windows, a candidate "" ranked with the others (and added after
   the n-best when it did not make it). Its null odds are the null score minus the score of the best non-empty
   answer; the prediction is "" when they exceed `null_score_diff_threshold`, else that answer.

Differences from the reference, none of which changes its output where it has one: a question left with the
null answer alone (every span invalid, e.g. all top starts in the question) makes the reference crash; here
it gets "" and null odds `NO_CANDIDATE_NULL_ODDS`. Missing, misshapen or non-finite logits are a ValueError
naming the feature, where the reference raises a KeyError or ranks NaNs arbitrarily. `apply_threshold`
re-decides the answers for another threshold without recomputing anything (the dev threshold search).

Pure Python and NumPy (no TensorFlow, except to write to gs://).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import math
import os
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from bert_tf import fileio
from bert_tf.data import tokenization
from bert_tf.tasks.squad import data as squad

# google-research's defaults (run_squad.py flags).
N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30
NULL_SCORE_DIFF_THRESHOLD = 0.0
# The null odds of a question with no non-empty candidate: above every real one, so it is "" at any threshold
# and last in the threshold search, yet valid JSON (json.dumps writes inf as Infinity, which strict readers
# reject).
NO_CANDIDATE_NULL_ODDS = sys.float_info.max

PREDICTIONS_FILE = "predictions.json"
NBEST_FILE = "nbest_predictions.json"
NULL_ODDS_FILE = "null_odds.json"


@dataclasses.dataclass(frozen=True)
class Predictions:
  """Every question's answer, keyed by question id in the order of the examples.

  predictions: the answer text ("" for no answer, SQuAD 2.0): `predictions.json`.
  nbest: the n-best list, best first, each entry {"text", "probability", "start_logit", "end_logit"}:
    `nbest_predictions.json`.
  null_odds: SQuAD 2.0 only ({} otherwise): null score - best non-empty score (NO_CANDIDATE_NULL_ODDS when
    there is none): `null_odds.json`, the official evaluation's --na-prob-file.
  best_non_null_texts: SQuAD 2.0 only: the best non-empty answer ("" when there is none), the answer at any
    threshold the null odds do not exceed (see `apply_threshold`).
  """
  predictions: dict[str, str]
  nbest: dict[str, list[dict[str, str | float]]]
  null_odds: dict[str, float]
  best_non_null_texts: dict[str, str]
  version_2_with_negative: bool


class _Candidate(NamedTuple):
  feature_index: int  # Among the example's features.
  start_index: int  # Input positions; 0, 0 for the null answer.
  end_index: int
  start_logit: float
  end_logit: float


def _without_spaces(text: str) -> tuple[str, list[int]]:
  """`text` without its " " characters, and the index in `text` of each character kept."""
  kept = [i for i, c in enumerate(text) if c != " "]
  return "".join(text[i] for i in kept), kept


def final_text(pred_text: str, orig_text: str, tokenizer: tokenization.BasicTokenizer) -> str:
  """The part of `orig_text` (the context's words, as written) that the tokenized `pred_text` spells.

  pred_text: the predicted WordPieces joined (lower-cased, accents stripped, punctuation split off when
    uncased), e.g. "steve smith"; orig_text: the whole words it came from, e.g. "Steve Smith's".
  Returns "Steve Smith". `orig_text` is basic-tokenized the same way; when it and the tokenized text have
  equal lengths without spaces, their characters are taken as aligned one to one and the prediction's
  characters are projected back. When that fails (the tokenizer changed the length, as when removing a
  decomposed accent or a control character, or the text is not found, as for an [UNK]), the whole
  `orig_text` is the answer: the reference's heuristic, kept for its output.
  """
  tok_text = " ".join(tokenizer.tokenize(orig_text))
  start = tok_text.find(pred_text)
  if start == -1:
    return orig_text
  end = start + len(pred_text) - 1
  orig_chars, orig_positions = _without_spaces(orig_text)
  tok_chars, tok_positions = _without_spaces(tok_text)
  if len(orig_chars) != len(tok_chars):
    return orig_text
  tok_to_char = {position: i for i, position in enumerate(tok_positions)}
  if start not in tok_to_char or end not in tok_to_char:  # Starts or ends on a space: cannot be aligned.
    return orig_text
  return orig_text[orig_positions[tok_to_char[start]]:orig_positions[tok_to_char[end]] + 1]


def _softmax(scores: Sequence[float]) -> list[float]:
  # In Python floats, summed in order, as the reference: the probabilities are written to the bit.
  top = max(scores)
  exps = [math.exp(score - top) for score in scores]
  total = 0.0
  for x in exps:
    total += x
  return [x / total for x in exps]


def _logits(results: Mapping[int, tuple[np.ndarray, np.ndarray]], feature: squad.SquadFeatures,
            qas_id: str) -> tuple[list[float], list[float], np.ndarray, np.ndarray]:
  """The feature's (start, end) logits as Python floats (the reference's RawResult), and their top order."""
  if feature.unique_id not in results:
    raise ValueError(f"no logits for feature {feature.unique_id} (question {qas_id!r}); predict every feature "
                     "made from the file, with the unique ids convert_examples_to_features gave them")
  out = []
  for name, logits in zip(("start_logits", "end_logits"), results[feature.unique_id]):
    logits = np.asarray(logits)
    if logits.shape != (len(feature.input_ids),):
      raise ValueError(f"feature {feature.unique_id} (question {qas_id!r}): {name} has shape {logits.shape}, "
                       f"expected ({len(feature.input_ids)},), one per input position; are the features made "
                       "with the model's --max_seq_length?")
    if not np.isfinite(logits).all():
      raise ValueError(f"feature {feature.unique_id} (question {qas_id!r}): {name} are not all finite; the "
                       "model diverged or its weights are broken")
    out.append(logits)
  start, end = out
  # Highest first; a stable sort of the negated logits keeps equal ones in position order, as the reference's
  # sorted(..., reverse=True) does.
  return start.tolist(), end.tolist(), np.argsort(-start, kind="stable"), np.argsort(-end, kind="stable")


def check_sizes(n_best_size: int, max_answer_length: int) -> None:
  if n_best_size < 1:
    raise ValueError(f"--n_best_size={n_best_size}: must be at least 1 (answers kept per question)")
  if max_answer_length < 1:
    raise ValueError(f"--max_answer_length={max_answer_length}: must be at least 1 (WordPiece tokens)")


def postprocess(examples: Sequence[squad.SquadExample], features: Iterable[squad.SquadFeatures],
                results: Mapping[int, tuple[np.ndarray, np.ndarray]], n_best_size: int = N_BEST_SIZE,
                max_answer_length: int = MAX_ANSWER_LENGTH, do_lower_case: bool = True,
                version_2_with_negative: bool = False,
                null_score_diff_threshold: float = NULL_SCORE_DIFF_THRESHOLD) -> Predictions:
  """Logits -> answers (the data of google-research's `write_predictions`, without writing it).

  examples, features: as read and made by `bert_tf.tasks.squad.data` (evaluation features; a generator is fine).
  results: feature unique_id -> (start_logits, end_logits), each float32 [T] (T = max_seq_length), the
    model's outputs for that feature.
  do_lower_case: the tokenizer's (used to align answer texts with the context, see `final_text`).
  Raises ValueError for bad sizes, and for missing, misshapen or non-finite logits (naming the feature).
  """
  check_sizes(n_best_size, max_answer_length)
  by_example: dict[int, list[squad.SquadFeatures]] = collections.defaultdict(list)
  for feature in features:
    by_example[feature.example_index].append(feature)
  tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)

  predictions: dict[str, str] = {}
  all_nbest: dict[str, list[dict[str, str | float]]] = {}
  null_odds: dict[str, float] = {}
  best_non_null_texts: dict[str, str] = {}
  for example_index, example in enumerate(examples):
    windows = by_example[example_index]
    candidates: list[_Candidate] = []
    # The reference's initial values; a question always has a window, so they are replaced.
    null_score, null_feature, null_start, null_end = 1000000.0, 0, 0.0, 0.0
    for feature_index, feature in enumerate(windows):
      start_logits, end_logits, start_order, end_order = _logits(results, feature, example.qas_id)
      if version_2_with_negative:
        score = start_logits[0] + end_logits[0]
        if score < null_score:  # Strict: the first window wins ties.
          null_score, null_feature, null_start, null_end = score, feature_index, start_logits[0], end_logits[0]
      # Positions past the real tokens have no entry in either map, so the maps alone rule them out.
      starts = [i for i in start_order[:n_best_size].tolist()
                if i in feature.token_to_orig_map and feature.token_is_max_context.get(i, False)]
      ends = [i for i in end_order[:n_best_size].tolist() if i in feature.token_to_orig_map]
      for start in starts:
        for end in ends:
          if start <= end < start + max_answer_length:
            candidates.append(_Candidate(feature_index, start, end, start_logits[start], end_logits[end]))
    if version_2_with_negative:
      candidates.append(_Candidate(null_feature, 0, 0, null_start, null_end))
    candidates.sort(key=lambda c: c.start_logit + c.end_logit, reverse=True)

    nbest: list[tuple[str, float, float]] = []  # (text, start_logit, end_logit)
    seen: set[str] = set()
    for c in candidates:
      if len(nbest) >= n_best_size:
        break
      if c.start_index > 0:
        feature = windows[c.feature_index]
        pieces = " ".join(feature.tokens[c.start_index:c.end_index + 1])
        pred_text = " ".join(pieces.replace(" ##", "").replace("##", "").split())
        words = example.doc_tokens[feature.token_to_orig_map[c.start_index]:
                                   feature.token_to_orig_map[c.end_index] + 1]
        text = final_text(pred_text, " ".join(words), tokenizer)
        if text in seen:
          continue
      else:
        text = ""
      seen.add(text)
      nbest.append((text, c.start_logit, c.end_logit))
    if version_2_with_negative and "" not in seen:
      nbest.append(("", null_start, null_end))
    if not nbest:  # SQuAD 1.1 with no valid span: the reference's placeholder answer.
      nbest.append(("empty", 0.0, 0.0))

    probabilities = _softmax([start + end for _, start, end in nbest])
    all_nbest[example.qas_id] = [{"text": text, "probability": p, "start_logit": start, "end_logit": end}
                                 for (text, start, end), p in zip(nbest, probabilities)]
    if not version_2_with_negative:
      predictions[example.qas_id] = nbest[0][0]
      continue
    best = next((entry for entry in nbest if entry[0]), None)
    if best is None:
      best_non_null_texts[example.qas_id], null_odds[example.qas_id] = "", NO_CANDIDATE_NULL_ODDS
    else:
      best_non_null_texts[example.qas_id] = best[0]
      null_odds[example.qas_id] = null_score - best[1] - best[2]  # In this order, as the reference.
    predictions[example.qas_id] = ("" if null_odds[example.qas_id] > null_score_diff_threshold
                                   else best_non_null_texts[example.qas_id])
  return Predictions(predictions, all_nbest, null_odds, best_non_null_texts, version_2_with_negative)


def apply_threshold(null_odds: Mapping[str, float], best_non_null_texts: Mapping[str, str],
                    threshold: float) -> dict[str, str]:
  """SQuAD 2.0 answers for another null_score_diff_threshold: "" where the null odds exceed it, else the best
  non-empty answer; equal to `postprocess(..., null_score_diff_threshold=threshold).predictions`."""
  if set(null_odds) != set(best_non_null_texts):
    missing = sorted(set(null_odds) ^ set(best_non_null_texts))
    raise ValueError(f"null_odds and best_non_null_texts are for different questions (e.g. "
                     f"{', '.join(map(repr, missing[:5]))}); pass both from the same Predictions")
  return {qid: "" if odds > threshold else best_non_null_texts[qid] for qid, odds in null_odds.items()}


def _json(value) -> str:
  return json.dumps(value, indent=4) + "\n"  # The reference's layout (ASCII, with \u escapes).


def write_predictions(predictions: Predictions, output_dir: str) -> dict[str, str]:
  """Writes predictions.json, nbest_predictions.json and (SQuAD 2.0) null_odds.json into `output_dir` (local
  or gs://), each atomically, in the reference's layout. Returns {file name: path}."""
  files = {PREDICTIONS_FILE: predictions.predictions, NBEST_FILE: predictions.nbest}
  if predictions.version_2_with_negative:
    files[NULL_ODDS_FILE] = predictions.null_odds
  paths = {}
  for name, value in files.items():
    paths[name] = os.path.join(output_dir, name)
    fileio.write_text_atomic(paths[name], _json(value))
  return paths
