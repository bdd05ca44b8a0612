"""Your own files for `run_classifier.py`: CSV, TSV or JSON lines -> a task that the GLUE path runs unchanged.

Files: `--train_file`, `--validation_file`, `--test_file` (Hugging Face's names; they are the splits train, dev
and test), each in the format its extension names (a further `.gz` is allowed):

  .csv           comma-separated, a header row, standard CSV quoting ("" inside quotes; a quoted field may hold
                 commas and line breaks)
  .tsv           tab-separated, a header row, no quoting: a `"` is text, as in GLUE's files
  .json, .jsonl  JSON lines: one object per line, columns are its keys

UTF-8 (a byte-order mark is dropped), plain or gzip, local or gs://. Columns: `sentence1`, optionally
`sentence2`, and `label` (renamed with --text_a_column, --text_b_column, --label_column); other columns are
ignored. The task is a sentence pair task when the training file has the text_b column (or --text_b_column is
given). The test file's label column is optional; when present its labels are checked like dev's.

Labels. Classification (--task_type=classification, the default): a label is a name (CSV/TSV: the field's text;
JSON: a string, an integer or a boolean, one type per file), without the spaces around it ("spam " is "spam"); a
number that is not an integer ("0.5", in any format) is refused: --task_type=regression predicts numbers. The
model's labels, in id order, are --labels when given, else the sorted set of the training file's labels
(numerically when every label is an integer, so "2" comes before "10"). They are stored with the model
(`classifier/classifier.json`) and in the export's manifest, so evaluation, test predictions and the exported
model speak the user's label strings. Regression (--task_type=regression): every label a number; one output
trained with mean squared error.

Metrics (`metric_names`): accuracy, and F1 of the positive class (the second label) when there are two labels,
else macro F1; Pearson and Spearman correlation for regression. As scikit-learn computes them (the tests
compare), in numpy (`metrics`).

Everything is read and checked before any work; a problem raises ValueError as `path:line: column 'label':
...` (JSON lines: the record's line), naming what to fix: an unknown column (listing the ones there), an empty
text, a label missing or of another type than the file's others, a dev or test label that training never saw,
a file with no rows.

Pure Python (no TensorFlow).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import math
import os
import re
from collections.abc import Sequence
from typing import Any

from bert_tf import fileio
from bert_tf.data import text_io
from bert_tf.tasks.classification import glue
from bert_tf.tasks.common.labels import sorted_labels

TASK_TYPES = ("classification", "regression")
# The split each file is, and its flag; the GLUE path's split names, so the task runs as a GLUE task does.
SPLIT_FLAGS = {"train": "train_file", "dev": "validation_file", "test": "test_file"}
DEFAULT_TEXT_B = "sentence2"
# What the test predictions are written as, by the test file's format.
PREDICTIONS = {"csv": "test_predictions.csv", "tsv": "test_predictions.tsv", "jsonl": "test_predictions.jsonl"}
# A number written with a fraction or an exponent ("0.5", "2.0", "1e-3"): a class label only when it is an integer.
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+|\d+(?=[eE]))([eE][+-]?\d+)?")


@dataclasses.dataclass(frozen=True)
class DataFiles:
  """The files and columns of your own data; the fields are run_classifier.py's flags of the same names.

  text_b_column: None takes `sentence2` when the training file has that column (else single sentences).
  labels: the model's labels in id order; () takes the training file's, sorted.
  """
  train_file: str | None = None
  validation_file: str | None = None
  test_file: str | None = None
  text_a_column: str = "sentence1"
  text_b_column: str | None = None
  label_column: str = "label"
  labels: tuple[str, ...] = ()
  task_type: str = "classification"

  def path(self, split: str) -> str | None:
    return getattr(self, SPLIT_FLAGS[split])

  @property
  def is_regression(self) -> bool:
    return self.task_type == "regression"

  def validate(self, do_train: bool, do_eval: bool, do_predict: bool) -> None:
    """The flags, before any file is read."""
    for split, wanted, flag in (("train", do_train, "--do_train"), ("dev", do_eval, "--do_eval"),
                                ("test", do_predict, "--do_predict")):
      if wanted and not self.path(split):
        raise ValueError(f"{flag} with your own files needs --{SPLIT_FLAGS[split]}")
    for split, flag in SPLIT_FLAGS.items():
      if self.path(split):
        text_io.file_format(self.path(split), f"--{flag}")
    if self.task_type not in TASK_TYPES:
      raise ValueError(f"--task_type={self.task_type}: choose {' or '.join(TASK_TYPES)}")
    if self.is_regression and self.labels:
      raise ValueError("--labels names classes; --task_type=regression predicts numbers: drop one of them")
    if self.labels and (len(self.labels) < 2 or len(set(self.labels)) != len(self.labels)
                        or not all(self.labels)):
      raise ValueError(f"--labels={','.join(self.labels)}: give two or more distinct, non-empty labels")
    columns = [("--text_a_column", self.text_a_column), ("--text_b_column", self.text_b_column),
               ("--label_column", self.label_column)]
    named = [(flag, name) for flag, name in columns if name is not None]
    if any(not name for _, name in named):
      raise ValueError(f"{', '.join(flag for flag, name in named if not name)}: give a column name")
    names = [name for _, name in named]
    if len(set(names)) != len(names):
      raise ValueError(f"{', '.join(f'{flag}={name}' for flag, name in named)}: each column once")

  def cache_parts(self) -> tuple:
    """What the feature files depend on besides the data, vocabulary and length: the columns and task type
    (the labels are the task's)."""
    return (self.text_a_column, self.text_b_column, self.label_column, self.task_type)

  def task_name(self) -> str:
    """The task's name (the model's, the export's default --model_name): the training file's name without its
    extension, or its folder's when that name is just "train"; lower case, letters, digits, - and _."""
    path = (self.train_file or "").rstrip("/")
    stem = os.path.basename(path)
    for ext in (".gz", *text_io.FORMATS):
      stem = stem[:-len(ext)] if stem.lower().endswith(ext) else stem
    if stem.lower() in ("train", "training") and os.path.basename(os.path.dirname(path)):
      stem = os.path.basename(os.path.dirname(path))
    return re.sub(r"[^a-z0-9_-]+", "_", stem.lower()).strip("_") or "classifier"


def metric_names(labels: Sequence[str]) -> tuple[str, ...]:
  """The metrics of a task with these labels (() for regression)."""
  if not labels:
    return ("pearson", "spearman")
  return ("accuracy", "f1") if len(labels) == 2 else ("accuracy", "macro_f1")


# -- Reading --------------------------------------------------------------------------------------------------


def _columns_there(header: Sequence[str] | None, row: dict) -> str:
  return ", ".join(repr(name) for name in (header if header is not None else row)) or "none"


def _missing(path: str, line: int, column: str, flag: str, header: Sequence[str] | None, row: dict) -> ValueError:
  where = "the header has" if header is not None else "this record has"
  return ValueError(f"{path}:{line}: no column {column!r} ({flag}); {where} {_columns_there(header, row)}")


def _text(path: str, line: int, column: str, value: Any) -> str:
  if not isinstance(value, str):
    raise ValueError(f"{path}:{line}: column {column!r}: {json.dumps(value)} is not text; give a string")
  if not value.strip():
    raise ValueError(f"{path}:{line}: column {column!r}: empty text; give every row its text, or delete the row")
  return value


def _kind(value: Any) -> str:
  if isinstance(value, bool):
    return "a boolean"
  if isinstance(value, (int, float)):
    return "a number"
  return "a string" if isinstance(value, str) else f"a JSON {type(value).__name__}"


@dataclasses.dataclass
class _Labels:
  """Parses one file's labels, remembering the first label's type so that a mix is refused."""
  path: str
  column: str
  is_regression: bool
  first: tuple[int, str] | None = None  # (line, kind) of the file's first label

  def parse(self, line: int, value: Any) -> str | float:
    where = f"{self.path}:{line}: column {self.column!r}"
    if value is None:
      raise ValueError(f"{where}: no label (null); give every row its label, or delete the row")
    kind = _kind(value)
    if self.first is None:
      self.first = (line, kind)
    elif kind != self.first[1]:
      raise ValueError(f"{where}: {json.dumps(value)} is {kind}, but the label at line {self.first[0]} is "
                       f"{self.first[1]}; give every label the same type")
    if self.is_regression:
      number = value if kind == "a number" else _number(value) if isinstance(value, str) else None
      if number is None or not math.isfinite(number):
        raise ValueError(f"{where}: {json.dumps(value)} is not a finite number; --task_type=regression "
                         "predicts numbers")
      return float(number)
    if kind == "a boolean":
      return json.dumps(value)
    if kind == "a number":
      if not float(value).is_integer():
        raise ValueError(f"{where}: {value} is not a class name or integer; to predict numbers pass "
                         "--task_type=regression")
      return str(int(value))
    if kind != "a string":
      raise ValueError(f"{where}: {kind} is not a label; give a string or an integer")
    label = value.strip()  # "spam " is spam: a stray space (CSV, TSV or JSON) makes no class of its own
    if not label:
      raise ValueError(f"{where}: empty label; give every row its label, or delete the row")
    if _DECIMAL.fullmatch(label) and not float(label).is_integer():
      # CSV and TSV have no number type: "0.5" is the number a JSON 0.5 is, refused alike.
      raise ValueError(f"{where}: {label} is not a class name or integer; to predict numbers pass "
                       "--task_type=regression")
    return label


def _number(text: str) -> float | None:
  try:
    return float(text)
  except ValueError:
    return None


@dataclasses.dataclass
class UserFile:
  """One file's examples, where each starts (its line), and whether it held texts B and labels."""
  result: glue.ReadResult
  lines: list[int]
  is_pair: bool
  has_labels: bool


def read_file(files: DataFiles, split: str, is_pair: bool | None = None) -> UserFile:
  """Reads the file of `split` ("train", "dev" or "test") as `glue.InputExample`s (guid "<split>-<row>", the
  row's 0-based position among the file's rows; labels as strings, floats for regression, None where the test
  file has no label column). `is_pair`: whether the task takes pairs; None (the training file) decides it from
  the columns. Raises as the module docstring says."""
  path = files.path(split)
  fmt = text_io.file_format(path, f"--{SPLIT_FLAGS[split]}")
  table = text_io.read_table(path, fmt)
  header, rows = table.header, table.rows
  text_b = files.text_b_column or DEFAULT_TEXT_B
  b_flag = "--text_b_column" + ("" if files.text_b_column else f", default {DEFAULT_TEXT_B!r} as in the training file")
  label_required = split != "test"
  labels = _Labels(path, files.label_column, files.is_regression)
  examples, lines, has_labels = [], [], None
  for line, row in rows:
    if is_pair is None:  # The training file: text B when its header (or first record) has the column.
      is_pair = files.text_b_column is not None or text_b in row
    if has_labels is None:
      has_labels = label_required or files.label_column in row
    for column, flag, wanted in ((files.text_a_column, "--text_a_column", True), (text_b, b_flag, is_pair),
                                 (files.label_column, "--label_column", has_labels)):
      if wanted and column not in row:
        raise _missing(path, table.header_line if header is not None else line, column, flag, header, row)
    text_a = _text(path, line, files.text_a_column, row[files.text_a_column])
    b = _text(path, line, text_b, row[text_b]) if is_pair else None
    label = labels.parse(line, row[files.label_column]) if has_labels else None
    examples.append(glue.InputExample(guid=f"{split}-{len(examples)}", text_a=text_a, text_b=b, label=label))
    lines.append(line)
  if not examples:
    raise ValueError(f"{path}: holds no rows{' (only a header)' if header is not None else ''}; give one "
                     "example a row")
  return UserFile(glue.ReadResult(examples=examples, skipped=0, path=path), lines, bool(is_pair), bool(has_labels))


def _check_labels(file: UserFile, labels: tuple[str, ...], column: str, source: str,
                  fix: str = "fix the row, or list every label with --labels") -> None:
  known = set(labels)
  for example, line in zip(file.result.examples, file.lines):
    if example.label is not None and example.label not in known:
      raise ValueError(f"{file.result.path}:{line}: column {column!r}: {example.label!r} is not a label of "
                       f"{source} ({', '.join(labels)}); {fix}")


def read_inputs(files: DataFiles, splits: Sequence[str], trained=None) -> tuple[glue.GlueTask, dict]:
  """Reads and checks the files of `splits` (train first) -> (the task, split -> `glue.ReadResult`).

  trained: the `classification.ClassifierSpec` of the model evaluated or predicted with when there is no
    training file: the task (name, labels, pair or not) is that model's, and the files must fit it.
  """
  if "train" in splits:
    train = read_file(files, "train")
    is_pair, name = train.is_pair, files.task_name()
    if files.is_regression:
      labels = ()
    else:
      if files.labels:
        _check_labels(train, files.labels, files.label_column, f"--labels={','.join(files.labels)}")
      labels = files.labels or sorted_labels([e.label for e in train.result.examples])
      if len(labels) < 2:
        raise ValueError(f"{train.result.path}: column {files.label_column!r}: every row has the label "
                         f"{labels[0]!r}; a classifier needs two labels or more (or give them all with --labels)")
    read = {"train": train}
    source = f"the training file {train.result.path}" if not files.labels else f"--labels={','.join(labels)}"
  else:
    if trained is None:
      raise ValueError("without --train_file, give --init_checkpoint=<a run's output_dir>/classifier, the model "
                       "whose labels the files must use")
    is_pair, name, labels = trained.is_pair, trained.task_name, tuple(trained.labels)
    if files.is_regression != trained.is_regression:
      raise ValueError(f"--task_type={files.task_type}, but the model at --init_checkpoint is "
                       f"{'a regression' if trained.is_regression else 'a classification'} model")
    if files.labels and tuple(files.labels) != labels:
      raise ValueError(f"--labels={','.join(files.labels)}, but the model at --init_checkpoint has the labels "
                       f"{','.join(labels)} (in that order)")
    read = {}
    source = "the model at --init_checkpoint"
  # A trained model's labels are fixed: --labels cannot add one.
  fix = {} if "train" in splits else {"fix": "fix the row (or drop its label: the test file's is optional), or "
                                             "fine-tune a model that has that label"}
  for split in splits:
    if split != "train":
      read[split] = read_file(files, split, is_pair)
      if labels:
        _check_labels(read[split], labels, files.label_column, source, **fix)
  task = glue.GlueTask(name, tuple(labels), is_pair=is_pair, metric_names=metric_names(labels))
  return task, {split: file.result for split, file in read.items()}


# -- Writing --------------------------------------------------------------------------------------------------


def write_predictions(files: DataFiles, task: glue.GlueTask, predictions: Sequence, output_dir: str) -> str:
  """Writes `<output_dir>/test_predictions.{csv,tsv,jsonl}` (the test file's format): one row per test row, in
  its order, with `index` (the row's 0-based position in the test file) and `prediction` (the label, or the
  score with 6 decimals); returns its path. The file appears complete or not at all."""
  fmt = text_io.file_format(files.test_file, "--test_file")
  values = [f"{float(p):.6f}" if task.is_regression else task.labels[int(p)] for p in predictions]
  path = os.path.join(output_dir, PREDICTIONS[fmt])
  if fmt == "jsonl":
    text = "".join(json.dumps({"index": i, "prediction": float(v) if task.is_regression else v},
                              ensure_ascii=False) + "\n" for i, v in enumerate(values))
  else:
    if fmt == "tsv" and any(c in v for v in values for c in "\t\r\n"):
      raise ValueError("a label holds a tab or line break and cannot be written as TSV; use a .csv test file")
    text = _csv_text([["index", "prediction"]] + [[str(i), v] for i, v in enumerate(values)],
                     "," if fmt == "csv" else "\t")
  fileio.write_text_atomic(path, text)
  return path


def _csv_text(rows: Sequence[Sequence[str]], delimiter: str = ",") -> str:
  out = io.StringIO()
  csv.writer(out, delimiter=delimiter, lineterminator="\n",
             quoting=csv.QUOTE_MINIMAL if delimiter == "," else csv.QUOTE_NONE).writerows(rows)
  return out.getvalue()


def write_document_task(directory: str) -> list[str]:
  """The README's sample of your own data: `corpus.document_classification_split` (which of four documents of
  the embedded corpus a sentence comes from) as `<directory>/train.csv` and `dev.csv` (sentence1, label) and
  `test.csv` (the dev sentences, sentence1 only). Returns the three paths."""
  from bert_tf.data import corpus

  train, dev = corpus.document_classification_split()
  paths = []
  for name, rows, labelled in (("train", train, True), ("dev", dev, True), ("test", dev, False)):
    table = [["sentence1", "label"] if labelled else ["sentence1"]]
    table += [[text, label] if labelled else [text] for text, label in rows]
    path = os.path.join(directory, f"{name}.csv")
    fileio.write_text_atomic(path, _csv_text(table))
    paths.append(path)
  return paths
