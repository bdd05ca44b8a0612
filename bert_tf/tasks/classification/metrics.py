"""The GLUE metrics in numpy: accuracy, F1, Matthews correlation, Pearson and Spearman correlation; and macro F1
(for your own data with more than two labels, `user_data`).

The leaderboard computes these with scikit-learn and scipy; we compute the same numbers (the tests compare
against both) without either, so evaluation needs nothing beyond numpy and imports in milliseconds.

Where a metric is undefined (no positive class anywhere for F1, a constant prediction or label for the
correlations) we return 0.0, as scikit-learn does for F1 and MCC: a constant predictor carries no signal, and
a number, unlike NaN, still compares when checkpoints are ranked. Inputs that are not finite give NaN.

Every metric here is symmetric in its two arguments, so swapping predictions and labels cannot change it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from bert_tf.tasks.classification import glue

ArrayLike = Sequence[int] | Sequence[float] | np.ndarray


def _pair(predictions: ArrayLike, labels: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
  x, y = np.asarray(predictions), np.asarray(labels)
  if x.ndim != 1 or y.ndim != 1:
    raise ValueError(f"predictions and labels must be 1-D; got shapes {x.shape} and {y.shape}")
  if len(x) != len(y):
    raise ValueError(f"{len(x)} predictions but {len(y)} labels; they must pair up one to one")
  if len(x) == 0:
    raise ValueError("no predictions to score: the evaluation set is empty")
  return x, y


def accuracy(predictions: ArrayLike, labels: ArrayLike) -> float:
  """The fraction of predictions equal to their labels."""
  x, y = _pair(predictions, labels)
  return float(np.mean(x == y))


def _class_f1(x: np.ndarray, y: np.ndarray, positive) -> float:
  """F1 of class `positive`: 2·TP / (2·TP + FP + FN); 0.0 when it is in neither input."""
  predicted, true = x == positive, y == positive
  tp = np.sum(predicted & true)
  wrong = np.sum(predicted != true)  # FP + FN.
  denominator = 2 * tp + wrong
  return float(2 * tp / denominator) if denominator else 0.0


def f1(predictions: ArrayLike, labels: ArrayLike) -> float:
  """Binary F1 of the positive class 1: 2·TP / (2·TP + FP + FN); 0.0 when there is no 1 in either input."""
  x, y = _pair(predictions, labels)
  return _class_f1(x, y, 1)


def macro_f1(predictions: ArrayLike, labels: ArrayLike) -> float:
  """The unweighted mean of each class's F1 over the classes found in either input (scikit-learn's
  `f1_score(average="macro")` without `labels=`): a class the model never predicts counts as 0."""
  x, y = _pair(predictions, labels)
  return float(np.mean([_class_f1(x, y, c) for c in np.unique(np.concatenate([x, y]))]))


def matthews_corrcoef(predictions: ArrayLike, labels: ArrayLike) -> float:
  """Matthews correlation for any number of classes (Gorodkin's R_K, scikit-learn's formula).

  From the confusion matrix C (n samples, c = trace C correct, t_k and p_k the true and predicted counts of
  class k): (c·n − t·p) / sqrt((n² − p·p)(n² − t·t)). 0.0 when either input has a single class.
  """
  x, y = _pair(predictions, labels)
  _, codes = np.unique(np.concatenate([x, y]), return_inverse=True)
  num_classes = int(codes.max()) + 1
  predicted, true = codes[:len(x)], codes[len(x):]
  # Floats: n² · n² overflows int64 once n passes about 55,000 (QQP's dev set has 40,430).
  p = np.bincount(predicted, minlength=num_classes).astype(np.float64)
  t = np.bincount(true, minlength=num_classes).astype(np.float64)
  n, correct = float(len(x)), float(np.sum(predicted == true))
  covariance = correct * n - t @ p
  variances = (n * n - p @ p) * (n * n - t @ t)
  return float(covariance / np.sqrt(variances)) if variances else 0.0


def pearson(x: ArrayLike, y: ArrayLike) -> float:
  """Pearson's correlation coefficient; 0.0 when either input is constant."""
  a, b = _pair(x, y)
  a, b = a.astype(np.float64), b.astype(np.float64)
  if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
    return float("nan")
  a, b = a - a.mean(), b - b.mean()
  scale = np.sqrt((a @ a) * (b @ b))
  # Clipped: rounding can put a perfect correlation a hair outside [-1, 1].
  return float(np.clip(a @ b / scale, -1.0, 1.0)) if scale else 0.0


def _average_ranks(values: np.ndarray) -> np.ndarray:
  """1-based ranks; tied values share the mean of the ranks they span ([10, 20, 20] -> [1, 2.5, 2.5])."""
  _, group, counts = np.unique(values, return_inverse=True, return_counts=True)
  first = np.cumsum(counts) - counts  # 0-based position of each distinct value's first occurrence in order.
  return (first + (counts + 1) / 2.0)[group]


def spearman(x: ArrayLike, y: ArrayLike) -> float:
  """Spearman's rank correlation: Pearson's on the ranks, ties given their average rank."""
  a, b = _pair(x, y)
  a, b = a.astype(np.float64), b.astype(np.float64)
  if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
    return float("nan")
  return pearson(_average_ranks(a), _average_ranks(b))


_METRICS = {
    "accuracy": accuracy,
    "f1": f1,
    "macro_f1": macro_f1,
    "matthews_corrcoef": matthews_corrcoef,
    "pearson": pearson,
    "spearman": spearman,
}


def _label_ids(task: glue.GlueTask, values: ArrayLike, what: str) -> np.ndarray:
  array = np.asarray(values)
  if array.dtype.kind not in "iu":
    raise ValueError(f"{task.name} {what} must be label ids (integers), got dtype {array.dtype}; take the "
                     "argmax of the logits, and map label names with glue.label_to_id")
  if array.min() < 0 or array.max() >= task.num_labels:
    raise ValueError(f"{task.name} {what} must be label ids in 0..{task.num_labels - 1} "
                     f"({', '.join(task.labels)}); found {array.min()}..{array.max()}")
  return array.astype(np.int64)


def glue_metrics(task: glue.GlueTask | str, predictions: ArrayLike, labels: ArrayLike) -> dict[str, float]:
  """The task's GLUE metrics, keyed by `task.metric_names`.

  predictions, labels: [N] label ids (int) for classification, [N] scores (float) for STS-B.
  """
  task = glue.get_task(task) if isinstance(task, str) else task
  x, y = _pair(predictions, labels)
  if task.is_regression:
    x, y = x.astype(np.float64), y.astype(np.float64)
  else:
    x, y = _label_ids(task, x, "predictions"), _label_ids(task, y, "labels")
  return {name: _METRICS[name](x, y) for name in task.metric_names}
