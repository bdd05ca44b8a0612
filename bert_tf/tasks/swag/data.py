"""SWAG (Zellers et al., 2018): the official CSV files -> examples -> four encoded sequences per example.

The release (github.com/rowanz/swagaf, `data/`) is `train.csv`, `val.csv` and `test.csv`, written by pandas: a
header line, a leading unnamed index column, then `video-id`, `fold-ind`, `startphrase`, `sent1`, `sent2`,
`gold-source`, `ending0`..`ending3` and `label` (0-3, the true ending; `test.csv` has no label column). Fields
that hold a comma or a quote are quoted, `"` doubled inside them: standard CSV, which is how we read it (unlike
GLUE's unquoted TSVs). Columns are found by their names in the header, so a file with the columns in another
order still reads right, and a file that is not a SWAG file fails at line 1 naming what it lacks.

Your own data: any CSV with the columns `sent1`, `sent2`, `ending0`..`ending3` and (optional for test) `label`,
or JSON lines (`train.jsonl`, `val.jsonl`, `test.jsonl`, used where the .csv is absent) of objects with those keys
(a label an integer or its text). A test file with labels (the column in its header; JSON: a "label" in its
first record, then in every record) is read with them, and run_swag.py scores it as val; there an empty label,
or -1 (Hugging Face's test split), is none. The index column (JSON: an "id" key) is optional; without it an
example's id is its row's 0-based position.

An example's id is the index column's value (what test predictions are keyed by). The paper (section 4.4)
scores each of the four endings with the context: sequence i of an example is

  [CLS] sent1 [SEP] sent2 + " " + ending_i [SEP]

(`sent2` is the first words of the next sentence, which every ending continues), each truncated to
max_seq_length by google-research's `_truncate_seq_pair` (`common.features.truncate_lengths`), as a GLUE pair.

Bad input fails before any work, naming the file and line: a row with the wrong number of fields (an unclosed
quote shows as one that runs on over the following lines), an empty ending, a label that is not 0-3, bytes that
are not UTF-8, an empty file.

Pure Python (no TensorFlow), except that `encode_example` uses `common.features.encode`.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Iterator

from bert_tf import fileio
from bert_tf.data import text_io

NUM_CHOICES = 4
ENDING_COLUMNS = tuple(f"ending{i}" for i in range(NUM_CHOICES))
INDEX_COLUMN = ""  # pandas writes the index column's name as an empty field
LABEL_COLUMN = "label"
SPLITS = {"train": "train.csv", "val": "val.csv", "test": "test.csv"}
_TEXT_COLUMNS = ("sent1", "sent2", *ENDING_COLUMNS)


@dataclasses.dataclass(frozen=True)
class SwagExample:
  """One row of a SWAG file.

  guid: the leading index column's value, as written ("0", "1", ...).
  sent1: the context sentence; sent2: the opening words of the next one, which each ending completes.
  endings: the four candidate endings, in column order.
  label: the index of the true ending, 0-3; None for test.csv.
  """
  guid: str
  sent1: str
  sent2: str
  endings: tuple[str, ...]
  label: int | None

  def pairs(self) -> list[tuple[str, str]]:
    """The four (first, second) texts the model reads: (sent1, sent2 + " " + ending_i)."""
    return [(self.sent1, f"{self.sent2} {ending}") for ending in self.endings]


@dataclasses.dataclass
class SwagReadResult:
  examples: list[SwagExample]
  path: str


def split_path(data_dir: str, split: str) -> str:
  """`data_dir`/train.csv, val.csv or test.csv for split "train", "val" or "test"; `<split>.jsonl` (or .json)
  instead where only that exists."""
  if split not in SPLITS:
    raise ValueError(f"split {split!r} is not a SWAG split; choose one of {', '.join(SPLITS)}")
  path = os.path.join(data_dir, SPLITS[split])
  if not fileio.exists(path):
    return next((other for other in (os.path.join(data_dir, f"{split}{ext}") for ext in (".jsonl", ".json"))
                 if fileio.exists(other)), path)
  return path


def _rows(path: str, wanted: tuple[str, ...]) -> Iterator[tuple[int, dict]]:
  """(first line, column -> value) per example of a SWAG CSV or JSON lines file, its columns checked."""
  is_json = path.lower().endswith((".json", ".jsonl"))
  table = text_io.read_table(path, "jsonl" if is_json else "csv", "repair or delete that row, or download the "
                               "file again", empty="download the SWAG data again")
  if table.header is not None:
    missing = [name for name in wanted if name not in table.header]
    if missing:
      kind = "train.csv or val.csv" if LABEL_COLUMN in wanted else "test.csv"
      raise ValueError(f"{path}:{table.header_line}: the header has no {', '.join(repr(m) for m in missing)} (it "
                       f"reads {','.join(table.header)!r}); is this a SWAG file ({kind}) of the official release, "
                       "or one with its columns?")
  for line, row in table.rows:
    missing = [name for name in wanted if name not in row]
    if missing:  # JSON lines: each record has its own keys.
      raise ValueError(f"{path}:{line}: no column {', '.join(repr(m) for m in missing)}; this record has "
                       f"{', '.join(repr(k) for k in row) or 'none'}")
    yield line, {**row, INDEX_COLUMN: row.get("id") if is_json else row.get(INDEX_COLUMN)}


# What stands for "no label" in an optional label column: empty, or Hugging Face's -1 (its SWAG test split's).
_NO_LABEL = ("", "-1", None)


def read_examples(path: str, has_labels: bool | None) -> SwagReadResult:
  """Reads a SWAG CSV file, or JSON lines (.json, .jsonl), local, gs:// or gzip: train and val with
  `has_labels`; test with None: labels when the file has them (the header's column; JSON: the first record's
  key, then every record's), else none.

  Raises FileNotFoundError for a missing file; ValueError naming path:line for an empty file, a header (or
  record) without SWAG's columns, a row whose field count differs from the header's, an empty text or ending,
  a label that is not 0-3, or bytes that are not UTF-8.
  """
  if not fileio.exists(path):
    raise FileNotFoundError(f"{path} does not exist: --data_dir should be a folder of the SWAG release (its "
                            f"data/ folder), which holds {', '.join(SPLITS.values())}")
  wanted = _TEXT_COLUMNS + ((LABEL_COLUMN,) if has_labels else ())
  optional = has_labels is None
  examples = []
  for first, row in _rows(path, wanted):
    if has_labels is None:  # an optional label column: the first row says whether the file has one
      has_labels = LABEL_COLUMN in row
    elif has_labels and LABEL_COLUMN not in row:  # JSON lines: a record without the label its first had
      raise ValueError(f"{path}:{first}: no {LABEL_COLUMN!r}, which the first record has: give every record its "
                       "label, or none")
    for name in _TEXT_COLUMNS:
      if not isinstance(row[name], str):
        raise ValueError(f"{path}:{first}: {name} is {json.dumps(row[name])}, not text; give a string")
    for name in ENDING_COLUMNS:
      if not row[name].strip():
        raise ValueError(f"{path}:{first}: {name} is empty; every SWAG example has four endings: repair or "
                         "delete that row")
    label = None
    if has_labels:
      text = row[LABEL_COLUMN]
      text = str(text) if isinstance(text, int) and not isinstance(text, bool) else text
      text = text.strip() if isinstance(text, str) else text  # " 1" is 1, in CSV and JSON lines alike
      if optional and text in _NO_LABEL:
        text = None
      elif text not in {str(i) for i in range(NUM_CHOICES)}:
        raise ValueError(f"{path}:{first}: label {text!r} is not one of 0-{NUM_CHOICES - 1} (the index of the "
                         "true ending); repair or delete that row")
      label = None if text is None else int(text)
    guid = row[INDEX_COLUMN]
    examples.append(SwagExample(guid=str(len(examples)) if guid is None else str(guid), sent1=row["sent1"],
                                sent2=row["sent2"], endings=tuple(row[name] for name in ENDING_COLUMNS),
                                label=label))
  if not examples:
    raise ValueError(f"{path}: holds {'a header but ' if not path.lower().endswith(('.json', '.jsonl')) else ''}"
                     "no examples; download the SWAG data again")
  return SwagReadResult(examples=examples, path=path)


def read_split(data_dir: str, split: str) -> SwagReadResult:
  """`read_examples` of `split` ("train", "val" or "test") in `data_dir`; test's labels are optional."""
  return read_examples(split_path(data_dir, split), has_labels=True if split != "test" else None)


def encode_example(tokenizer, example: SwagExample, max_seq_length: int) -> list:
  """The four sequences of `example` -> four `common.features.EncodedExample`s of `max_seq_length` ids.
  `tokenizer` is a `FullTokenizer`."""
  from bert_tf.tasks.common.features import encode

  return [encode(tokenizer, first, second, max_seq_length) for first, second in example.pairs()]

