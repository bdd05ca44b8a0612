"""SQuAD metrics: hand-worked values for every rule of the official v1.1 and v2.0 scripts, then agreement on
random sets with the copy of the official v2.0 script in transformers 4.57.6 (`transformers/data/metrics/
squad_metrics.py`, the last 4.x release; fetched from PyPI by tests/assets.py)."""

from __future__ import annotations

import collections
import importlib.util
import logging
import random
import sys
import types
from unittest import mock

import pytest

import assets
from bert_tf.tasks.squad import metrics as sm


def _dataset(*questions: tuple[str, list[str]]) -> dict:
  """A SQuAD JSON object with one paragraph per question: (id, gold answer texts); [] is unanswerable."""
  paragraphs = []
  for qid, golds in questions:
    qa = {"id": qid, "question": "?", "answers": [{"text": t, "answer_start": 0} for t in golds],
          "is_impossible": not golds}
    if not golds:
      qa["plausible_answers"] = [{"text": "Santa Clara", "answer_start": 0}]  # As in dev-v2.0.json; unused.
    paragraphs.append({"context": "...", "qas": [qa]})
  # Two articles, so the walk over data -> paragraphs -> qas crosses an article boundary.
  return {"version": "v2.0", "data": [{"title": "A", "paragraphs": paragraphs[:2]},
                                      {"title": "B", "paragraphs": paragraphs[2:]}]}


@pytest.mark.parametrize("text, normalised", [
    ("The Theater", "theater"),  # The article goes; "the" inside a word stays.
    ("another anthem", "another anthem"),
    ("A  cat,   an apple and THE dog.", "cat apple and dog"),
    ("the-end", "theend"),  # Punctuation goes first, so "the" is no longer a word of its own.
    ("Levi's", "levis"),
    ("5.0%", "50"),
    ("a an the", ""),
    ("", ""),
    ("¿Qué pasa?", "¿qué pasa"),  # Only ASCII punctuation is removed.
    ("1990–1995", "1990–1995"),  # An en dash is not in string.punctuation.
    ("Éthe THÉ", "éthe thé"),  # Unicode \b: é is a word character, so neither "the" is a whole word.
    ("a\u00a0b", "b"),  # A no-break space ends the word "a", and splits like any whitespace.
    ("\u3000the\tend\n", "end"),
])
def test_normalize_answer(text, normalised):
  assert sm.normalize_answer(text) == normalised


def test_exact_and_f1_on_pairs():
  assert sm.exact_score("Denver Broncos", "the denver broncos!") == 1
  assert sm.exact_score("Denver Broncos", "Broncos") == 0
  assert sm.f1_score("Denver Broncos", "the denver broncos!") == 1.0
  # Common {carolina, panthers}: precision 2/3, recall 2/2, F1 = 2·(2/3)·1 / (2/3 + 1) = 0.8.
  assert sm.f1_score("Carolina Panthers", "Carolina Panthers team") == pytest.approx(0.8)
  # Bags, not sets: gold (x, y, y, z), prediction (y, y, y) share y twice. P = 2/3, R = 2/4, F1 = 4/7.
  assert sm.f1_score("x y y z", "y y y") == pytest.approx(4 / 7)
  assert sm.f1_score("x y y z", "y y y") == sm.f1_score("y y y", "x y y z")
  assert sm.f1_score("Denver", "Broncos") == 0
  # v2.0: an empty side scores 1 only against another empty side ("the" normalises to "").
  assert sm.f1_score("", "") == 1
  assert sm.f1_score("The", "") == 1
  assert sm.f1_score("", "Denver") == 0
  assert sm.f1_score("Denver", "an") == 0


def test_evaluate_v1(capsys):
  dataset = _dataset(
      ("q1", ["Denver Broncos", "Broncos", "the Denver Broncos"]),
      ("q2", ["Santa Clara, California", "Levi's Stadium"]),
      ("q3", ["The"]),
      ("q4", ["1990"]),
  )
  predictions = {"q1": "Denver", "q2": "Levis Stadium.", "q3": "an", "unknown": "ignored"}
  # q1: EM 0; F1 against "Denver Broncos" P 1, R 1/2 -> 2/3; against "Broncos" 0; "the Denver Broncos" 2/3.
  # q2: EM 1 and F1 1 against the second gold answer.
  # q3: "The" and "an" both normalise to "": EM 1, but v1.1's F1 of two empty answers is 0.
  # q4: no prediction: 0 and 0, and a message on stderr.
  result = sm.evaluate_v1(dataset, predictions)
  assert result == pytest.approx({"exact_match": 100 * 2 / 4, "f1": 100 * (2 / 3 + 1 + 0 + 0) / 4})
  assert list(result) == ["exact_match", "f1"]
  assert "Unanswered question q4 will receive score 0." in capsys.readouterr().err


def test_evaluate_v1_rejects_what_the_script_crashes_on():
  with pytest.raises(ValueError, match="question q1 has no gold answers"):
    sm.evaluate_v1(_dataset(("q1", [])), {"q1": "x"})
  with pytest.raises(ValueError, match="the dataset is empty"):
    sm.evaluate_v1({"data": []}, {})
  with pytest.raises(ValueError, match="no 'data' key"):
    sm.evaluate_v1([], {})


# Five questions, in file order. Raw scores (EM, F1) of each prediction:
#   q1 gold "Denver Broncos" | "the Broncos", pred "Broncos"          -> (1, 1)   via "the Broncos".
#   q2 gold "Carolina Panthers", pred "Carolina Panthers team"       -> (0, 0.8).
#   q3 unanswerable, pred ""                                         -> (1, 1).
#   q4 unanswerable, pred "Santa Clara"                              -> (0, 0).
#   q5 gold "Levi's Stadium", pred "Levis Stadium"                   -> (1, 1).
V2_DATASET = _dataset(("q1", ["Denver Broncos", "the Broncos"]), ("q2", ["Carolina Panthers"]), ("q3", []),
                      ("q4", []), ("q5", ["Levi's Stadium"]))
V2_PREDICTIONS = {"q1": "Broncos", "q2": "Carolina Panthers team", "q3": "", "q4": "Santa Clara",
                  "q5": "Levis Stadium"}
V2_NA_PROBS = {"q1": 0.2, "q2": 0.4, "q3": 0.9, "q4": 0.7, "q5": 0.1}


def test_evaluate_v2_without_null_odds():
  result = sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS)
  # EM 1+0+1+0+1 = 3 of 5; F1 1+0.8+1+0+1 = 3.8. HasAns q1, q2, q5; NoAns q3, q4. No best_* keys.
  assert list(result) == ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact",
                          "NoAns_f1", "NoAns_total"]
  assert result == pytest.approx({
      "exact": 60.0, "f1": 76.0, "total": 5,
      "HasAns_exact": 100 * 2 / 3, "HasAns_f1": 100 * 2.8 / 3, "HasAns_total": 3,
      "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2})
  assert isinstance(result["total"], int) and isinstance(result["HasAns_total"], int)


def test_evaluate_v2_with_null_odds_and_best_thresholds():
  result = sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS, V2_NA_PROBS, na_prob_thresh=0.5)
  # Null odds above 0.5: q3 (0.9) and q4 (0.7) are scored as "", and both are unanswerable: 1 and 1.
  # EM 1+0+1+1+1 = 4 of 5; F1 1+0.8+1+1+1 = 4.8.
  # Best threshold: start from all-null, 2 (q3, q4); walk by null odds, letting each question answer:
  #   q5 (0.1) +1 -> 3, q1 (0.2) +1 -> 4, q2 (0.4) +0 EM / +0.8 F1 -> 4 / 4.8, q4 (0.7) -1 (it answers
  #   "Santa Clara") -> 3 / 3.8, q3 (0.9) answers "" -> +0.
  #   EM: the best 4 is first reached at q1 (q2's equal 4 does not beat it): 80.0 at 0.2. F1: 4.8 at 0.4 -> 96.0.
  assert result == pytest.approx({
      "exact": 80.0, "f1": 96.0, "total": 5,
      "HasAns_exact": 100 * 2 / 3, "HasAns_f1": 100 * 2.8 / 3, "HasAns_total": 3,
      "NoAns_exact": 100.0, "NoAns_f1": 100.0, "NoAns_total": 2,
      "best_exact": 80.0, "best_exact_thresh": 0.2, "best_f1": 96.0, "best_f1_thresh": 0.4})
  assert list(result)[-4:] == ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
  # The default threshold 1.0 nulls nothing: the scores of test_evaluate_v2_without_null_odds.
  default = sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS, V2_NA_PROBS)
  assert (default["exact"], default["f1"], default["best_f1"]) == pytest.approx((60.0, 76.0, 96.0))


def test_evaluate_v2_split_keys_only_for_present_kinds():
  answerable = sm.evaluate_v2(_dataset(("q1", ["Broncos"]), ("q2", ["Panthers"])), {"q1": "Broncos", "q2": ""})
  assert answerable == pytest.approx({"exact": 50.0, "f1": 50.0, "total": 2, "HasAns_exact": 50.0,
                                      "HasAns_f1": 50.0, "HasAns_total": 2})
  # Gold answers that normalise to "" are dropped, leaving "" as the only gold, yet the question still counts
  # as answerable: here the empty prediction matches it.
  unanswerable = sm.evaluate_v2(_dataset(("q1", ["The"]), ("q2", [])), {"q1": "", "q2": "a"})
  assert unanswerable == pytest.approx({"exact": 100.0, "f1": 100.0, "total": 2, "HasAns_exact": 100.0,
                                        "HasAns_f1": 100.0, "HasAns_total": 1, "NoAns_exact": 100.0,
                                        "NoAns_f1": 100.0, "NoAns_total": 1})


def test_evaluate_v2_needs_every_prediction_and_null_odds():
  predictions = dict(V2_PREDICTIONS)
  del predictions["q4"]
  with pytest.raises(ValueError, match=r"no prediction for 1 question\(s\), e\.g\. q4"):
    sm.evaluate_v2(V2_DATASET, predictions)
  na_probs = dict(V2_NA_PROBS)
  del na_probs["q2"], na_probs["q5"]
  with pytest.raises(ValueError, match=r"no null odds for 2 question\(s\), e\.g\. q2, q5"):
    sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS, na_probs)
  # Extra predictions and null odds, for ids not in the dataset, are ignored.
  extra = sm.evaluate_v2(V2_DATASET, {**V2_PREDICTIONS, "zz": "x"}, {**V2_NA_PROBS, "zz": 0.0})
  assert extra == sm.evaluate_v2(V2_DATASET, V2_PREDICTIONS, V2_NA_PROBS)


def test_best_threshold_all_null_is_best():
  # Start: 2 unanswerable -> 2. a (0.3) answerable but scores 0 -> 2, b (0.5) answers -> 1, c (0.5) -> 0.
  # Nothing beats the start: 2 of 3, threshold 0.0 (the starting value, not any question's null odds).
  has_answer = {"a": True, "b": False, "c": False}
  predictions = {"a": "wrong", "b": "x", "c": "y"}
  assert sm.find_best_threshold(predictions, {"a": 0, "b": 0, "c": 0}, {"a": 0.3, "b": 0.5, "c": 0.5},
                                has_answer) == (pytest.approx(100 * 2 / 3), 0.0)


def test_best_threshold_ties_are_walked_in_na_probs_order():
  # x (answerable, score 1) and y (unanswerable, answers "ans") share null odds 0.5. Start: 1 (y).
  has_answer, scores, predictions = {"x": True, "y": False}, {"x": 1, "y": 0}, {"x": "ok", "y": "ans"}
  # x first: 1 + 1 = 2 beats 1 at 0.5, then y: 2 - 1 = 1. Best 2 of 2, though threshold 0.5 lets both answer
  # (which scores 1): the script reports a total from inside the tie.
  assert sm.find_best_threshold(predictions, scores, {"x": 0.5, "y": 0.5}, has_answer) == (100.0, 0.5)
  # y first: 1 - 1 = 0, then x: 0 + 1 = 1, which does not beat 1: the start stands.
  assert sm.find_best_threshold(predictions, scores, {"y": 0.5, "x": 0.5}, has_answer) == (50.0, 0.0)


def test_best_threshold_equal_totals_keep_the_first_and_raw_text_decides():
  has_answer = {"a": True, "b": False, "c": False, "d": True}
  scores = {"a": 1, "b": 1, "c": 1, "d": 0}
  # Start 2 (b, c). a (0.1) +1 -> 3 at 0.1; b (0.2) answers "" -> +0, 3 does not beat 3; c (0.3) answers "the",
  # which normalises to "" (its EM is 1) but is non-empty text: -1 -> 2; d (0.4) +0. Best 3 of 4 at 0.1.
  # "ignored" has null odds but no score: it is skipped, and the mean is over the 4 scored questions.
  predictions = {"a": "ok", "b": "", "c": "the", "d": "no"}
  na_probs = {"d": 0.4, "c": 0.3, "ignored": 0.0, "b": 0.2, "a": 0.1}
  assert sm.find_best_threshold(predictions, scores, na_probs, has_answer) == (75.0, 0.1)


def test_v1_and_v2_agree_where_their_rules_do():
  # Every question answerable, no prediction empty after normalisation: the two scripts' rules coincide.
  dataset = _dataset(("q1", ["Denver Broncos", "Broncos"]), ("q2", ["Carolina Panthers"]), ("q3", ["1990"]))
  predictions = {"q1": "the Denver", "q2": "Panthers of Carolina", "q3": "1990."}
  v1, v2 = sm.evaluate_v1(dataset, predictions), sm.evaluate_v2(dataset, predictions)
  assert (v1["exact_match"], v1["f1"]) == (v2["exact"], v2["f1"])


def _random_answer(rng: random.Random) -> str:
  words = ["the", "a", "Denver", "broncos", "Broncos,", "1990", "an", "Levi's", "stadium", "x", "x", "—", "?"]
  return " ".join(rng.choice(words) for _ in range(rng.randint(0, 4)))


class _NotUnderTest:
  """Stands in for transformers' BasicTokenizer, which squad_metrics.py needs only in get_final_text."""

  def __init__(self, *args, **kwargs):
    raise NotImplementedError("transformers 4's get_final_text is not under test")


@pytest.fixture(scope="module")
def transformers4_squad_metrics() -> types.ModuleType:
  """transformers 4.57.6's `data/metrics/squad_metrics.py`, imported on its own as a module of a private package.

  Importing it as `transformers.data.metrics.squad_metrics` would run transformers 4's `__init__`, whose
  dependency check refuses the transformers 5 stack installed here, and would clash with transformers 5 in
  sys.modules. The file's only package imports, `...models.bert.BasicTokenizer` and `...utils.logging`, serve
  get_final_text and the prediction writers, not squad_evaluate: the private package gives them stand-ins, and is
  in sys.modules only while the file runs.
  """
  path = assets.transformers4_file("data/metrics/squad_metrics.py")
  packages = {name: types.ModuleType(name) for name in (
      "_transformers4", "_transformers4.data", "_transformers4.data.metrics", "_transformers4.models",
      "_transformers4.models.bert", "_transformers4.utils")}
  for package in packages.values():
    package.__path__ = []
  packages["_transformers4.models.bert"].BasicTokenizer = _NotUnderTest
  packages["_transformers4.utils"].logging = types.SimpleNamespace(get_logger=logging.getLogger)
  spec = importlib.util.spec_from_file_location("_transformers4.data.metrics.squad_metrics", path)
  module = importlib.util.module_from_spec(spec)
  with mock.patch.dict(sys.modules, packages):
    spec.loader.exec_module(module)
  return module


# squad_evaluate reads only `qas_id` and `answers` of transformers' SquadExample, which stores both as given
# (its constructor also splits the context into words, which the metric never reads).
_Example = collections.namedtuple("_Example", ["qas_id", "answers"])


@pytest.mark.parametrize("seed", [0, 1])
def test_agrees_with_transformers(seed, transformers4_squad_metrics):
  """Against transformers 4.57.6's squad_evaluate (its copy of the official v2.0 script, see
  transformers4_squad_metrics) on 60 random questions, at thresholds 1.0, 0.5 and 0.3, with and without null odds."""
  squad_metrics = transformers4_squad_metrics
  rng = random.Random(seed)
  questions = [(f"q{i}", [_random_answer(rng) for _ in range(rng.choice([0, 0, 1, 3]))]) for i in range(60)]
  predictions = {qid: _random_answer(rng) for qid, _ in questions}
  # Few distinct values, so ties among null odds are common.
  na_probs = {qid: rng.choice([0.0, 0.1, 0.25, 0.5, 0.5, 0.9]) for qid, _ in questions}
  examples = [_Example(qid, [{"text": t, "answer_start": 0} for t in golds]) for qid, golds in questions]
  assert any(not golds for _, golds in questions) and any(len(golds) == 3 for _, golds in questions)
  for thresh in (1.0, 0.5, 0.3):  # 0.5 is also a null odds value: "exceeds", not "reaches", nulls.
    theirs = squad_metrics.squad_evaluate(examples, predictions, na_probs, thresh)
    ours = sm.evaluate_v2(_dataset(*questions), predictions, na_probs, thresh)
    assert list(ours) == list(theirs)
    assert ours == theirs  # Bit for bit: the same arithmetic in the same order.
  # Without null odds the official script (and we) leave out best_*; transformers adds them regardless.
  ours = sm.evaluate_v2(_dataset(*questions), predictions)
  theirs = squad_metrics.squad_evaluate(examples, predictions)
  assert list(theirs)[len(ours):] == ["best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]
  assert ours == collections.OrderedDict(list(theirs.items())[:len(ours)])
