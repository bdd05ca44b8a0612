"""Readers for the official GLUE files, one table of formats, and the leaderboard's submission files.

The GLUE download (`download_glue_data.py`, one folder per task under `glue_data/`) is ten sets of TSV files
that look alike but are not: CoLA's train and dev files have no header while its test file has one; MRPC's
begin with a UTF-8 byte-order mark; MNLI keeps its sentences in columns 9 and 10 of 12 (train) or 16 (dev);
QQP's test file has 3 columns where its train file has 6. Reading them by position, as google-research's
`run_classifier.py` does, silently reads the wrong column when a file is not the one the code expected. We
find columns by the names in the header instead (fixed positions only for the headerless CoLA files), so a
wrong `--data_dir` or split fails at line 1 with the header it found.

None of the files is CSV-quoted: a `"` is text ("the witness" in MRPC, a sentence that opens with a quote in
MRPC's dev set). A CSV reader with the default quoting swallows tabs and line breaks up to the next quote and
merges rows, so we read with `csv.QUOTE_NONE`, where every line is exactly one row.

QQP's train and dev files hold rows broken by a line break inside a question (too few fields). google-research
and Hugging Face drop them; so do we, but we count them (`ReadResult.skipped`) so the caller can say how many.
Anywhere else a malformed row is an error naming the file and line.

Test predictions go to the leaderboard as `<submission name>.tsv` with `index\\tprediction` rows keyed by the
test file's own index column, which is why test examples keep it as their guid.

This module is pure Python (no TensorFlow), so the data scripts that use it start fast.
"""

from __future__ import annotations

import csv
import dataclasses
import math
import operator
import os
import sys
from collections.abc import Iterator, Sequence

from bert_tf import fileio
from bert_tf.data import text_io

# A QNLI paragraph or an MNLI parse may exceed csv's default 131,072-character field limit; no GLUE row is
# anywhere near 2 GiB. The limit is a C long, hence the min() for platforms where long is 32 bits.
_FIELD_SIZE_LIMIT = min(sys.maxsize, 2**31 - 1)


@dataclasses.dataclass(frozen=True)
class InputExample:
  """One row of a GLUE file.

  guid: "<split>-<n>" for train and dev, n the row's 0-based position among the file's data rows (so a
    skipped QQP row leaves a gap and n + 2 is the line number); for test, the file's own index/id column,
    which GLUE submissions are keyed by.
  text_a, text_b: the sentence(s), verbatim (an empty text is kept); text_b is None for CoLA and SST-2.
  label: the label's name for classification ("0", "1", "entailment", ...), the score for STS-B, None for test.
  """
  guid: str
  text_a: str
  text_b: str | None
  label: str | float | None


@dataclasses.dataclass(frozen=True)
class GlueTask:
  """A GLUE task: what the model predicts and how it is scored.

  labels: the label names in id order (google-research's `get_labels()` order); () for STS-B (regression).
  metric_names: the keys `metrics.glue_metrics` returns, the GLUE leaderboard's metrics for the task.
  """
  name: str
  labels: tuple[str, ...]
  is_pair: bool
  metric_names: tuple[str, ...]

  @property
  def is_regression(self) -> bool:
    return self.labels == ()

  @property
  def num_labels(self) -> int:
    """The classifier's output width: 1 (the score) for regression."""
    return 1 if self.is_regression else len(self.labels)

  def splits(self) -> tuple[str, ...]:
    return _SPLITS.get(self.name, ("train", "dev", "test"))

  def eval_splits(self) -> tuple[str, ...]:
    return tuple(s for s in self.splits() if s.startswith("dev"))

  def test_splits(self) -> tuple[str, ...]:
    return tuple(s for s in self.splits() if s.startswith("test"))

  def submission_name(self, split: str) -> str:
    """The file stem the GLUE leaderboard expects for this task's predictions on `split`."""
    split = _canonical_split(self, split)
    if self.name == "MNLI" and split != "train":
      return "MNLI-mm" if split.endswith("_mismatched") else "MNLI-m"
    return self.name


_BINARY = ("0", "1")
_NLI = ("contradiction", "entailment", "neutral")  # google-research's MnliProcessor order.
_QNLI = ("entailment", "not_entailment")

_TASK_LIST = (
    GlueTask("CoLA", _BINARY, is_pair=False, metric_names=("matthews_corrcoef",)),
    GlueTask("SST-2", _BINARY, is_pair=False, metric_names=("accuracy",)),
    GlueTask("MRPC", _BINARY, is_pair=True, metric_names=("accuracy", "f1")),
    GlueTask("STS-B", (), is_pair=True, metric_names=("pearson", "spearman")),
    GlueTask("QQP", _BINARY, is_pair=True, metric_names=("accuracy", "f1")),
    GlueTask("MNLI", _NLI, is_pair=True, metric_names=("accuracy",)),
    GlueTask("QNLI", _QNLI, is_pair=True, metric_names=("accuracy",)),
    GlueTask("RTE", _QNLI, is_pair=True, metric_names=("accuracy",)),
    GlueTask("WNLI", _BINARY, is_pair=True, metric_names=("accuracy",)),
    # The diagnostic set is predicted by an MNLI model with MNLI's labels; the leaderboard scores it with
    # R3, a Matthews correlation over the three classes. Its labels are not public.
    GlueTask("AX", _NLI, is_pair=True, metric_names=("matthews_corrcoef",)),
)

TASKS: dict[str, GlueTask] = {task.name.lower(): task for task in _TASK_LIST}

_SPLITS = {
    "MNLI": ("train", "dev_matched", "dev_mismatched", "test_matched", "test_mismatched"),
    "AX": ("test",),
}
# What "dev" and "test" mean for the task with two of each.
_SPLIT_ALIASES = {"MNLI": {"dev": "dev_matched", "test": "test_matched"}}

# Names people write for a task, after lower-casing and dropping "-" and "_".
_ALIASES = {
    **{name.replace("-", ""): task for name, task in TASKS.items()},
    "sst": TASKS["sst-2"],
    "sts": TASKS["sts-b"],
    "diagnostic": TASKS["ax"],
}

# The task folder `download_glue_data.py` writes under glue_data/.
_FOLDERS = {"AX": "diagnostic"}
# AX is `diagnostic.tsv` in glue_data/diagnostic/, or `AX.tsv` when fetched on its own.
_AX_FILES = ("diagnostic.tsv", "AX.tsv")


def get_task(name: str) -> GlueTask:
  """The task called `name`, case-insensitive ("sst2", "STS-B", "mnli", ...); ValueError for an unknown name."""
  task = _ALIASES.get(name.lower().replace("-", "").replace("_", ""))
  if task is None:
    raise ValueError(
        f"--task_name={name!r} is not a GLUE task; choose one of {', '.join(t.name for t in _TASK_LIST)}")
  return task


def _resolve(task: GlueTask | str) -> GlueTask:
  return get_task(task) if isinstance(task, str) else task


def _canonical_split(task: GlueTask, split: str) -> str:
  split = _SPLIT_ALIASES.get(task.name, {}).get(split, split)
  if split not in task.splits():
    raise ValueError(f"split {split!r} is not one of {task.name}'s splits: {', '.join(task.splits())}")
  return split


# ----------------------------------------------------------------------------------------------------------
# File formats.


@dataclasses.dataclass(frozen=True)
class _Layout:
  """Where one kind of GLUE file keeps its fields.

  A str names a header column; an int is a 0-based position, used only for headerless files (`width` set).
  """
  text_a: str | int
  text_b: str | int | None = None
  label: str | int | None = None  # None in test files.
  guid: str | None = None  # The index column of test files.
  width: int | None = None  # Headerless files only: how many fields every row has.

  @property
  def has_header(self) -> bool:
    return self.width is None


def _pair(a: str, b: str, label: str) -> tuple[_Layout, _Layout]:
  """(train/dev layout, test layout) of a headed pair task whose test file is keyed by `index`."""
  return _Layout(a, b, label=label), _Layout(a, b, guid="index")


# Task name -> (layout of train and dev files, layout of test files).
_LAYOUTS: dict[str, tuple[_Layout | None, _Layout]] = {
    # train/dev: source code, label, the original author's mark ("*" or empty), sentence; no header.
    "CoLA": (_Layout(3, label=1, width=4), _Layout("sentence", guid="index")),
    "SST-2": (_Layout("sentence", label="label"), _Layout("sentence", guid="index")),
    "MRPC": _pair("#1 String", "#2 String", "Quality"),
    "STS-B": _pair("sentence1", "sentence2", "score"),
    "QQP": (_Layout("question1", "question2", label="is_duplicate"),
            _Layout("question1", "question2", guid="id")),
    # The parse columns precede the sentences; label1..label5 the annotators', gold_label the last column.
    "MNLI": _pair("sentence1", "sentence2", "gold_label"),
    "QNLI": _pair("question", "sentence", "label"),
    "RTE": _pair("sentence1", "sentence2", "label"),
    "WNLI": _pair("sentence1", "sentence2", "label"),
    "AX": (None, _Layout("sentence1", "sentence2", guid="index")),
}

# Tasks whose malformed rows are skipped and counted rather than raised.
_SKIPS_MALFORMED_ROWS = frozenset({"QQP"})


def _file_names(task: GlueTask) -> list[str]:
  if task.name == "AX":
    return list(_AX_FILES)
  return [f"{split}.tsv" for split in task.splits()]


def split_path(task: GlueTask | str, data_dir: str, split: str) -> str:
  """The file holding `split` of `task` in `data_dir` (the task's folder of the GLUE download).

  "dev" and "test" on MNLI mean the matched sets. For AX the first of diagnostic.tsv and AX.tsv that exists.
  """
  task = _resolve(task)
  split = _canonical_split(task, split)
  if task.name == "AX":
    candidates = [os.path.join(data_dir, name) for name in _AX_FILES]
    return next((path for path in candidates if fileio.exists(path)), candidates[0])
  return os.path.join(data_dir, f"{split}.tsv")


def _rows(path: str) -> Iterator[tuple[int, list[str] | None]]:
  """Yields (1-based line number, fields) per non-blank line; fields is None for a line csv cannot split."""

  csv.field_size_limit(_FIELD_SIZE_LIMIT)
  lines = text_io.decoded_lines(path, "the GLUE files are UTF-8: download the task again")
  reader = csv.reader(lines, delimiter="\t", quoting=csv.QUOTE_NONE)
  while True:
    try:
      row = next(reader)
    except StopIteration:
      return
    except csv.Error:
      # A carriage return inside a field: the row is broken, but the reader carries on with the next line.
      yield reader.line_num, None
      continue
    if row:  # A blank line (a trailing one, say) holds no example.
      yield reader.line_num, row


def _column_indexes(task: GlueTask, layout: _Layout, header: list[str], path: str) -> dict[str, int | None]:
  """Field name ("text_a", "label", ...) -> position in the row, found by the header's column names."""
  wanted = {field: getattr(layout, field) for field in ("text_a", "text_b", "label", "guid")}
  missing = [name for name in wanted.values() if name is not None and name not in header]
  if missing:
    found = " | ".join(header)
    raise ValueError(
        f"{path}:1: the header has no column {', '.join(repr(m) for m in missing)} (it reads {found!r}); "
        f"is this the {task.name} file of the GLUE download, and is --data_dir "
        f"the {_FOLDERS.get(task.name, task.name)} folder?")
  return {field: None if name is None else header.index(name) for field, name in wanted.items()}


def _parse_label(task: GlueTask, label: str, path: str, line: int) -> str | float:
  if task.is_regression:
    try:
      score = float(label)
    except ValueError:
      score = math.nan
    if not 0.0 <= score <= 5.0:  # Also false for NaN.
      raise ValueError(f"{path}:{line}: score {label!r} is not a number in [0, 5], as {task.name} scores are")
    return score
  if label not in task.labels:
    raise ValueError(
        f"{path}:{line}: label {label!r} is not a {task.name} label; expected one of "
        f"{', '.join(task.labels)}. Is --data_dir the {task.name} folder of the GLUE download?")
  return label


@dataclasses.dataclass
class ReadResult:
  """The examples of one file, and how many malformed rows were skipped (QQP only; 0 elsewhere)."""
  examples: list[InputExample]
  skipped: int
  path: str


def read_examples(task: GlueTask | str, data_dir: str, split: str) -> ReadResult:
  """Reads `split` of `task` from `data_dir`, the task's folder of the GLUE download (local or gs://).

  Raises FileNotFoundError for a missing file; ValueError, naming path:line, for a header without the task's
  columns, a row with the wrong number of fields (except in QQP, where it is skipped and counted), an
  unknown label or bytes that are not UTF-8; ValueError naming the path for a file that cannot be read.
  """
  task = _resolve(task)
  if task.name not in _LAYOUTS:
    raise ValueError(f"no GLUE file format is known for task {task.name!r}; use one of glue.TASKS")
  split = _canonical_split(task, split)
  path = split_path(task, data_dir, split)
  if not fileio.exists(path):
    folder = _FOLDERS.get(task.name, task.name)
    raise FileNotFoundError(
        f"{path} does not exist: --data_dir should be the {task.name} folder of the GLUE download "
        f"(glue_data/{folder}/), which holds {', '.join(_file_names(task))}"
        + (" (either one)" if task.name == "AX" else ""))

  is_test = split.startswith("test")
  layout = _LAYOUTS[task.name][1 if is_test else 0]
  rows = _rows(path)
  if layout.has_header:
    header = next((row for _, row in rows if row is not None), None)
    if header is None:
      raise ValueError(f"{path} is empty or has no readable header; download the {task.name} task again")
    width = len(header)
    columns = _column_indexes(task, layout, header, path)
  else:
    width = layout.width
    columns = {"text_a": layout.text_a, "text_b": layout.text_b, "label": layout.label, "guid": layout.guid}

  examples: list[InputExample] = []
  skipped = 0
  data_row = -1
  for line, row in rows:
    data_row += 1
    if row is None or len(row) != width:
      if task.name in _SKIPS_MALFORMED_ROWS:
        skipped += 1
        continue
      found = "a line break inside a field" if row is None else f"{len(row)} tab-separated fields"
      raise ValueError(
          f"{path}:{line}: {found}, expected {width}. GLUE files are not quoted, so a tab or line break "
          "inside a sentence breaks its row: repair or delete that line, or download the task again")
    label = None if columns["label"] is None else _parse_label(task, row[columns["label"]], path, line)
    guid = row[columns["guid"]] if columns["guid"] is not None else f"{split}-{data_row}"
    text_b = None if columns["text_b"] is None else row[columns["text_b"]]
    examples.append(InputExample(guid=guid, text_a=row[columns["text_a"]], text_b=text_b, label=label))
  return ReadResult(examples=examples, skipped=skipped, path=path)


def label_to_id(task: GlueTask | str, label: str | float) -> int | float:
  """A label name -> its id (its index in `task.labels`); an STS-B score -> itself as a float."""
  task = _resolve(task)
  if task.is_regression:
    return float(label)
  try:
    return task.labels.index(label)
  except ValueError:
    raise ValueError(
        f"label {label!r} is not a {task.name} label; expected one of {', '.join(task.labels)}") from None


def _format_prediction(task: GlueTask, prediction: int | float, number: int) -> str:
  if task.is_regression:
    score = float(prediction)
    if math.isnan(score):
      raise ValueError(f"prediction {number} for {task.name} is NaN; the model diverged")
    # Scores outside the gold range can only lose correlation points and the leaderboard expects [0, 5].
    return f"{min(max(score, 0.0), 5.0):.3f}"
  try:
    label_id = operator.index(prediction)  # An int or numpy integer; a float is a mistake, not a label id.
  except TypeError:
    raise ValueError(f"prediction {number} for {task.name} is {prediction!r}, not a label id (an int)") from None
  if not 0 <= label_id < len(task.labels):
    raise ValueError(
        f"prediction {number} for {task.name} is label id {label_id}, outside 0..{len(task.labels) - 1} "
        f"({', '.join(task.labels)})")
  return task.labels[label_id]


def write_submission(task: GlueTask | str, split: str, guids: Sequence[str],
                     predictions: Sequence[int | float], output_dir: str) -> str:
  """Writes `<output_dir>/<submission name>.tsv` in the GLUE leaderboard's format; returns its path.

  One `index\\tprediction` row per example after the header: the label name for classification, the score
  clipped to [0, 5] with 3 decimals for STS-B. `guids` are the test examples' guids (the file's index
  column). The file appears complete or not at all.
  """
  task = _resolve(task)
  if len(guids) != len(predictions):
    raise ValueError(f"{len(guids)} guids but {len(predictions)} predictions for {task.name} {split}")
  lines = ["index\tprediction"]
  for number, (guid, prediction) in enumerate(zip(guids, predictions)):
    if any(c in guid for c in "\t\r\n"):
      raise ValueError(f"guid {guid!r} (prediction {number}) contains a tab or line break")
    lines.append(f"{guid}\t{_format_prediction(task, prediction, number)}")
  path = os.path.join(output_dir, f"{task.submission_name(split)}.tsv")
  fileio.write_text_atomic(path, "\n".join(lines) + "\n")
  return path
