"""GLUE metrics: hand-computed values on tiny inputs, then agreement with scikit-learn and scipy."""

from __future__ import annotations

import numpy as np
import pytest

from bert_tf.tasks.classification import glue, metrics

# Five examples: TP = 2 (0, 2), FN = 1 (1), FP = 1 (3), TN = 1 (4).
PREDS = [1, 0, 1, 1, 0]
LABELS = [1, 1, 1, 0, 0]


def test_hand_computed_binary():
  assert metrics.accuracy(PREDS, LABELS) == pytest.approx(3 / 5)
  assert metrics.f1(PREDS, LABELS) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
  # (TP·TN − FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 − 1) / sqrt(3·3·2·2).
  assert metrics.matthews_corrcoef(PREDS, LABELS) == pytest.approx(1 / 6)


def test_hand_computed_multiclass_mcc():
  # 7 examples, 4 correct; true counts t = (2, 3, 2), predicted counts p = (2, 2, 3).
  # (4·7 − t·p) / sqrt((49 − p·p)(49 − t·t)) = (28 − 16) / sqrt(32 · 32) = 0.375.
  preds = [0, 1, 2, 2, 1, 0, 2]
  labels = [0, 1, 2, 1, 1, 2, 0]
  assert metrics.matthews_corrcoef(preds, labels) == pytest.approx(0.375)


def test_hand_computed_correlations():
  # Deviations (−1, 0, 1) and (−1, 1, 0): covariance 1, variances 2 and 2.
  assert metrics.pearson([1, 2, 3], [1, 3, 2]) == pytest.approx(0.5)
  # x's ranks with the tie averaged: (1, 2.5, 2.5, 4, 5); y's: (1, 3, 2, 5, 4). Pearson of those: 8.5 / sqrt(95).
  assert metrics.spearman([10, 20, 20, 30, 40], [1, 3, 2, 5, 4]) == pytest.approx(8.5 / np.sqrt(95))
  assert metrics.pearson([0.5, 1.5, 2.5], [-3, -1, 1]) == 1.0  # Exactly 1, not a hair above.
  assert metrics.spearman([1, 2, 3, 4, 5], [50, 40, 30, 20, 10]) == pytest.approx(-1.0)


def test_undefined_metrics_are_zero():
  assert metrics.matthews_corrcoef([1, 1, 1], [0, 1, 1]) == 0.0  # All-same predictions.
  assert metrics.matthews_corrcoef([0, 1, 1], [1, 1, 1]) == 0.0  # All-same labels.
  assert metrics.matthews_corrcoef([2, 2, 2], [2, 2, 2]) == 0.0
  assert metrics.f1([0, 0, 0], [0, 0, 0]) == 0.0  # No positive predicted and none true.
  assert metrics.f1([0, 0, 0], [1, 0, 0]) == 0.0
  assert metrics.pearson([2.0, 2.0, 2.0], [1.0, 2.0, 3.0]) == 0.0
  assert metrics.spearman([1.0, 2.0, 3.0], [4.0, 4.0, 4.0]) == 0.0
  assert np.isnan(metrics.pearson([1.0, np.nan, 3.0], [1.0, 2.0, 3.0]))


@pytest.mark.parametrize("fn", [metrics.accuracy, metrics.f1, metrics.matthews_corrcoef, metrics.pearson,
                                metrics.spearman])
def test_inputs_are_validated(fn):
  with pytest.raises(ValueError, match="3 predictions but 2 labels"):
    fn([1, 0, 1], [1, 0])
  with pytest.raises(ValueError, match="the evaluation set is empty"):
    fn([], [])
  with pytest.raises(ValueError, match="must be 1-D"):
    fn([[1, 0]], [[1, 0]])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_scikit_learn(seed):
  from sklearn import metrics as sk

  rng = np.random.default_rng(seed)
  n = 101
  labels = rng.integers(0, 2, n)
  preds = np.where(rng.random(n) < 0.7, labels, 1 - labels)
  assert metrics.accuracy(preds, labels) == pytest.approx(sk.accuracy_score(labels, preds), abs=1e-12)
  assert metrics.f1(preds, labels) == pytest.approx(sk.f1_score(labels, preds), abs=1e-12)
  assert metrics.matthews_corrcoef(preds, labels) == pytest.approx(sk.matthews_corrcoef(labels, preds), abs=1e-12)
  # Three classes, and classes that appear only on one side (4 in predictions, 5 in labels).
  labels3 = np.append(rng.integers(0, 3, n), 5)
  preds3 = np.append(np.where(rng.random(n) < 0.5, labels3[:n], rng.integers(0, 3, n)), 4)
  assert metrics.macro_f1(preds3, labels3) == pytest.approx(sk.f1_score(labels3, preds3, average="macro"),
                                                            abs=1e-12)
  assert metrics.macro_f1(preds, labels) == pytest.approx(sk.f1_score(labels, preds, average="macro"), abs=1e-12)
  assert metrics.matthews_corrcoef(preds3, labels3) == pytest.approx(
      sk.matthews_corrcoef(labels3, preds3), abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_agrees_with_scipy_with_ties(seed):
  from scipy import stats

  rng = np.random.default_rng(seed)
  n = 97
  x = np.round(rng.uniform(0, 5, n), 1)  # One decimal: many ties, as STS-B's scores have.
  y = np.round(0.6 * x + rng.normal(0, 1, n), 1)
  assert metrics.pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
  assert metrics.spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)
  ints = rng.integers(0, 4, n)  # Only four distinct values.
  assert metrics.spearman(ints, y) == pytest.approx(stats.spearmanr(ints, y)[0], abs=1e-12)


def test_glue_metrics_keys_are_the_tasks_metric_names():
  for task in glue.TASKS.values():
    if task.is_regression:
      result = metrics.glue_metrics(task, [0.1, 2.0, 4.5], [0.0, 2.5, 5.0])
    else:
      result = metrics.glue_metrics(task, [0, 1, 1], [0, 1, 0])
    assert tuple(result) == task.metric_names
    assert all(isinstance(v, float) for v in result.values())


def test_glue_metrics_values():
  assert metrics.glue_metrics("mrpc", PREDS, LABELS) == pytest.approx({"accuracy": 0.6, "f1": 2 / 3})
  assert metrics.glue_metrics("CoLA", np.array(PREDS), np.array(LABELS)) == pytest.approx(
      {"matthews_corrcoef": 1 / 6})
  assert metrics.glue_metrics("mnli", [0, 1, 2], [0, 2, 2]) == pytest.approx({"accuracy": 2 / 3})
  assert metrics.glue_metrics("stsb", [1, 2, 3], [1, 3, 2]) == pytest.approx({"pearson": 0.5, "spearman": 0.5})


def test_glue_metrics_rejects_what_is_not_a_label_id():
  with pytest.raises(ValueError, match="RTE predictions must be label ids \\(integers\\), got dtype float64"):
    metrics.glue_metrics("rte", [0.2, 0.9, 0.4], [0, 1, 0])
  with pytest.raises(ValueError, match="MNLI labels must be label ids in 0..2 .*found 0..3"):
    metrics.glue_metrics("mnli", [0, 1, 2], [0, 3, 2])
  with pytest.raises(ValueError, match="the evaluation set is empty"):
    metrics.glue_metrics("rte", [], [])
  with pytest.raises(ValueError, match="3 predictions but 2 labels"):
    metrics.glue_metrics("sts-b", [1.0, 2.0, 3.0], [1.0, 2.0])
