"""The official SQuAD metrics: exact match and token F1, as `evaluate-v1.1.py` and `evaluate-v2.0.py` compute them.

Published SQuAD numbers come from those two scripts, so we reproduce them to the last bit rather than improve
on them: the same normalisation, the same arithmetic in the same order (float sums depend on it), the same
keys, and the same quirks, each noted where it is implemented. What the scripts do by crashing (a KeyError on
a missing prediction or null odds in v2.0) we do with a ValueError that names the question ids at fault.

An answer is normalised by lower-casing it, deleting ASCII punctuation (`string.punctuation`; "¿" or "–"
stay), replacing the whole words a, an and the by a space, and collapsing whitespace. Exact match compares
normalised strings; F1 compares the bags of their whitespace tokens. Each prediction is scored against every
gold answer of its question and keeps the best.

SQuAD 2.0 adds unanswerable questions: the gold answer of a question whose `answers` list is empty is "", and
only an empty prediction matches it. A model may also give each question its null odds (`na_probs`, the
probability that there is no answer); a question whose null odds exceed `na_prob_thresh` is scored as if the
model had answered "". With null odds, the best threshold is searched for too (`find_best_threshold`).

Data: a dataset is the SQuAD JSON object, {"data": [{"paragraphs": [{"qas": [{"id", "answers": [{"text",
"answer_start"}], "is_impossible"}]}]}]}; predictions map question id -> answer text (the official
`predictions.json`); null odds map question id -> float (`null_odds.json`). As in the official scripts,
whether a question has an answer is read from its `answers` list; `is_impossible` is not consulted.
"""

from __future__ import annotations

import collections
import re
import string
import sys
from collections.abc import Iterator, Mapping
from typing import Any

_PUNCTUATION = frozenset(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(s: str) -> str:
  """Lower case, no ASCII punctuation, no articles a/an/the as whole words, single spaces: "The  U.S.!" -> "us"."""
  s = "".join(ch for ch in s.lower() if ch not in _PUNCTUATION)
  # Articles go after punctuation, so "the-ater" -> "theater" keeps its "the"; \b is Unicode-aware, so the
  # "the" in "thé" or "éthe" is part of a word and stays too.
  s = _ARTICLES.sub(" ", s)
  return " ".join(s.split())


def exact_score(gold: str, pred: str) -> int:
  """1 if the normalised answers are equal, else 0."""
  return int(normalize_answer(gold) == normalize_answer(pred))


def _overlap_f1(gold_tokens: list[str], pred_tokens: list[str]) -> float:
  """F1 of the two bags of tokens; 0 without a common token (v1.1's rule for empty answers too)."""
  num_same = sum((collections.Counter(gold_tokens) & collections.Counter(pred_tokens)).values())
  if num_same == 0:
    return 0
  # Precision and recall first, then their harmonic mean, exactly as the scripts do: the algebraically equal
  # 2·same / (len + len) can differ in the last bit, and the published numbers are means of these.
  precision = 1.0 * num_same / len(pred_tokens)
  recall = 1.0 * num_same / len(gold_tokens)
  return (2 * precision * recall) / (precision + recall)


def f1_score(gold: str, pred: str) -> float:
  """Token F1 of the normalised answers (v2.0's rule): when either is empty, 1 if both are, else 0."""
  gold_tokens, pred_tokens = normalize_answer(gold).split(), normalize_answer(pred).split()
  if not gold_tokens or not pred_tokens:
    return int(gold_tokens == pred_tokens)
  return _overlap_f1(gold_tokens, pred_tokens)


def _questions(dataset_json: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
  """Every question (`qas` entry) of a SQuAD JSON object, in file order."""
  if "data" not in dataset_json:
    raise ValueError("the dataset has no 'data' key: pass the whole SQuAD JSON object (json.load of "
                     "train-v1.1.json, dev-v2.0.json, ...), not its 'data' list")
  for article in dataset_json["data"]:
    for paragraph in article["paragraphs"]:
      yield from paragraph["qas"]


def _gold_texts(qa: Mapping[str, Any]) -> list[str]:
  return [answer["text"] for answer in qa["answers"]]


def evaluate_v1(dataset_json: Mapping[str, Any], predictions: Mapping[str, str]) -> dict[str, float]:
  """`evaluate-v1.1.py`: {"exact_match", "f1"}, each 100 × the mean over all questions of the best score.

  A question without a prediction scores 0 on both and is reported on stderr, as the script does. Predictions
  for ids not in the dataset are ignored. v1.1's F1 of two empty answers is 0, not 1.
  """
  exact_match = f1 = total = 0
  for qa in _questions(dataset_json):
    total += 1
    if qa["id"] not in predictions:
      print(f"Unanswered question {qa['id']} will receive score 0.", file=sys.stderr)
      continue
    golds = _gold_texts(qa)
    if not golds:
      raise ValueError(f"question {qa['id']} has no gold answers; SQuAD 1.1 has an answer for every question "
                       "(score SQuAD 2.0 data with evaluate_v2)")
    pred = predictions[qa["id"]]
    exact_match += max(exact_score(gold, pred) for gold in golds)
    f1 += max(_overlap_f1(normalize_answer(gold).split(), normalize_answer(pred).split()) for gold in golds)
  if total == 0:
    raise ValueError("no questions to score: the dataset is empty")
  return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def _raw_scores(dataset_json: Mapping[str, Any], predictions: Mapping[str, str]
                ) -> tuple[dict[str, int], dict[str, float], dict[str, bool]]:
  """Per question, in file order: best exact match, best F1, and whether it has an answer."""
  exact, f1, has_answer = {}, {}, {}
  missing = []
  for qa in _questions(dataset_json):
    qid = qa["id"]
    has_answer[qid] = bool(qa["answers"])
    # Gold answers that normalise to nothing are dropped; with none left, the only gold answer is "" (so a
    # question whose answers are all "the" counts as answerable yet is matched only by an empty prediction).
    golds = [text for text in _gold_texts(qa) if normalize_answer(text)] or [""]
    if qid not in predictions:
      missing.append(qid)
      continue
    pred = predictions[qid]
    exact[qid] = max(exact_score(gold, pred) for gold in golds)
    f1[qid] = max(f1_score(gold, pred) for gold in golds)
  if missing:
    raise ValueError(f"no prediction for {len(missing)} question(s), e.g. {', '.join(missing[:5])}; SQuAD 2.0 "
                     "needs one for every question (\"\" to predict no answer)")
  if not has_answer:
    raise ValueError("no questions to score: the dataset is empty")
  return exact, f1, has_answer


def _apply_threshold(scores: Mapping[str, float], na_probs: Mapping[str, float], has_answer: Mapping[str, bool],
                     na_prob_thresh: float) -> dict[str, float]:
  """A question with null odds above the threshold scores as the prediction "": 1.0 if it has no answer."""
  return {qid: float(not has_answer[qid]) if na_probs[qid] > na_prob_thresh else score
          for qid, score in scores.items()}


def _eval_dict(exact: Mapping[str, float], f1: Mapping[str, float], qids: list[str]) -> dict[str, float]:
  total = len(qids)
  return {"exact": 100.0 * sum(exact[qid] for qid in qids) / total,
          "f1": 100.0 * sum(f1[qid] for qid in qids) / total,
          "total": total}


def find_best_threshold(predictions: Mapping[str, str], scores: Mapping[str, float],
                        na_probs: Mapping[str, float], has_answer: Mapping[str, bool]) -> tuple[float, float]:
  """The best score over null-odds thresholds, and that threshold, as `find_best_thresh` finds them.

  predictions: question id -> answer text. scores: question id -> exact match or F1 of that answer, before any
  threshold. na_probs: question id -> null odds. has_answer: question id -> whether its gold has an answer.
  Returns (100 × best total score / number of scored questions, threshold).

  It starts from predicting "" everywhere (which scores 1 for each unanswerable question and 0 for the rest),
  with threshold 0.0, then walks the questions by increasing null odds, letting each answer in turn: an
  answerable question gains its score, an unanswerable one loses 1 if its raw prediction is non-empty. The
  threshold moves to a question's null odds only when the running total strictly beats the best so far, so
  the earliest of equal totals wins and 0.0 stays when nothing beats all-null. As in the script, questions
  with equal null odds are walked one at a time in `na_probs`'s own order (a stable sort), so the best total
  may be reached inside a tie, where no threshold could actually separate them; and "non-empty" means the raw
  text, so a prediction of "the" costs 1 although it normalises to "".
  """
  score = sum(1 for qid in has_answer if not has_answer[qid])
  best_score, best_threshold = score, 0.0
  for qid in sorted(na_probs, key=lambda k: na_probs[k]):
    if qid not in scores:
      continue
    if has_answer[qid]:
      score += scores[qid]
    elif predictions[qid]:
      score -= 1
    if score > best_score:
      best_score, best_threshold = score, na_probs[qid]
  return 100.0 * best_score / len(scores), best_threshold


def evaluate_v2(dataset_json: Mapping[str, Any], predictions: Mapping[str, str],
                na_probs: Mapping[str, float] | None = None,
                na_prob_thresh: float = 1.0) -> collections.OrderedDict[str, float]:
  """`evaluate-v2.0.py`: its JSON output, keys in its order.

  Always: exact, f1, total (all questions); HasAns_exact, HasAns_f1, HasAns_total when some question has an
  answer; NoAns_exact, NoAns_f1, NoAns_total when some has none. With `na_probs` (the script's
  --na-prob-file): best_exact, best_exact_thresh, best_f1, best_f1_thresh from `find_best_threshold`.
  Scores are percentages; totals are ints; a threshold is the null odds of some question (or 0.0).

  predictions: question id -> answer text, "" for no answer; every question needs one. na_probs: question
  id -> null odds, for every question; None means 0.0 for each. na_prob_thresh: a question whose null odds
  exceed it (strictly) scores as the prediction "" (the script's --na-prob-thresh).
  """
  exact_raw, f1_raw, has_answer = _raw_scores(dataset_json, predictions)
  odds = {qid: 0.0 for qid in predictions} if na_probs is None else na_probs
  without = [qid for qid in exact_raw if qid not in odds]
  if without:
    raise ValueError(f"no null odds for {len(without)} question(s), e.g. {', '.join(without[:5])}; na_probs "
                     "needs one for every question")
  exact = _apply_threshold(exact_raw, odds, has_answer, na_prob_thresh)
  f1 = _apply_threshold(f1_raw, odds, has_answer, na_prob_thresh)

  result = collections.OrderedDict(_eval_dict(exact, f1, list(exact)))
  for prefix, wanted in (("HasAns", True), ("NoAns", False)):
    qids = [qid for qid, has in has_answer.items() if has == wanted]
    if qids:
      result.update((f"{prefix}_{key}", value) for key, value in _eval_dict(exact, f1, qids).items())
  if na_probs is not None:
    result["best_exact"], result["best_exact_thresh"] = find_best_threshold(predictions, exact_raw, odds,
                                                                            has_answer)
    result["best_f1"], result["best_f1_thresh"] = find_best_threshold(predictions, f1_raw, odds, has_answer)
  return result
