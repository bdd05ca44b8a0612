"""Reading the pretraining input format: plain or gzip text, local or `gs://`, one sentence a line.

Lines are split on b"\\n" only, every carriage return is dropped and the rest is decoded as strict UTF-8,
exactly as google-research's `tf.gfile.GFile(path, "r").readline()` does (TensorFlow's line reader skips each
"\\r" wherever it stands: measured with TF 2.20), so a corpus that the reference reads we read the same way, and
a corpus it cannot decode we reject too, but with the file and line named. Hence "\\r\\n" ends a line as "\\n"
does, and a lone "\\r" inside a line joins the text on its two sides: "ab\\rcd" reads as "abcd", one word, in
both modes of `create_pretraining_data` (a file with old Mac "\\r" line ends reads as a single line).
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import glob
import gzip
import io
import json
import os
import sys
import zlib
from typing import Any, Iterable, Iterator, Sequence

from bert_tf import fileio

_GZIP_MAGIC = b"\x1f\x8b"
# Python's csv reader refuses a field over 131,072 characters by default; a long document in a CSV or TSV file is
# read as JSON lines reads it (and cut to --max_seq_length later). The limit is a C long.
FIELD_SIZE_LIMIT = min(sys.maxsize, 2**31 - 1)


class CorpusDecodeError(ValueError):
  """A line of the input is not valid UTF-8."""


def expand_input_files(patterns: str, what: str = "--input_file") -> list[str]:
  """Comma-separated globs -> files (`fileio.expand_globs`), refusing directories with a message naming them.

  Raises FileNotFoundError naming a pattern that matches nothing, IsADirectoryError naming a directory.
  """
  files: list[str] = []
  for pattern in (p.strip() for p in patterns.split(",")):
    if not pattern:
      continue
    matched = fileio.expand_globs(pattern, what)  # Raises naming a pattern that matches nothing.
    is_glob = glob.has_magic(pattern)
    for path in matched:
      # A stat per file locally; remotely one request each, so only for a path given as it is.
      if (not is_glob or not fileio.is_remote(path)) and is_directory(path):
        example = os.path.join(path, "*.txt")
        if not is_glob:
          raise IsADirectoryError(f"{what}={pattern} is a directory: give files or globs, e.g. {example}")
        raise IsADirectoryError(f"{what}: {pattern!r} matches the directory {path}: give files or globs of "
                                f"files, e.g. {example}")
    files.extend(matched)
  return files or fileio.expand_globs(patterns, what)  # The latter raises its "no file given" message.


def is_directory(path: str) -> bool:
  if fileio.is_remote(path):
    import tensorflow as tf

    return tf.io.gfile.isdir(path)
  return os.path.isdir(path)


def name_files(paths: Sequence[str], most: int = 3) -> str:
  """"a.txt", "a.txt, b.txt" or "a.txt, b.txt, c.txt and 7 more files": for messages about a whole input."""
  shown = ", ".join(paths[:most])
  return shown if len(paths) <= most else f"{shown} and {len(paths) - most} more files"


def open_binary(path: str):
  """Opens `path` for reading bytes, decompressing gzip (detected by its magic number, not its name)."""
  if not fileio.exists(path):
    raise FileNotFoundError(f"input file {path} does not exist")
  raw = fileio.open_file(path, "rb")
  head = raw.read(2)
  raw.seek(0)
  if head == _GZIP_MAGIC:
    return _GzipFile(path, raw)
  if fileio.is_remote(path):
    return io.BufferedReader(_GFileRaw(raw), buffer_size=1 << 20)
  return raw


class _GzipFile(gzip.GzipFile):
  """A gzip file read whose damage is one ValueError naming the file, where gzip raises EOFError (a file cut short:
  "Compressed file ended before the end-of-stream marker was reached"), BadGzipFile (a CRC or length that does not
  match) or zlib.error (a corrupt block), none of which says which file."""

  def __init__(self, path: str, raw):
    super().__init__(fileobj=raw, mode="rb")
    self._path = path

  @contextlib.contextmanager
  def _named(self):
    try:
      yield
    except EOFError:
      raise ValueError(f"{self._path}: truncated (its gzip stream ends before the end marker: a copy or download "
                       "cut short); copy or download it again") from None
    except (gzip.BadGzipFile, zlib.error) as e:
      raise ValueError(f"{self._path}: a damaged gzip file ({e}); copy or download it again") from None

  # Every read goes through one of these: iterating calls readline, readinto calls read.
  def read(self, size=-1):
    with self._named():
      return super().read(size)

  def read1(self, size=-1):
    with self._named():
      return super().read1(size)

  def readline(self, size=-1):
    with self._named():
      return super().readline(size)

  def peek(self, n):
    with self._named():
      return super().peek(n)


class _GFileRaw(io.RawIOBase):
  """Adapts a GFile to io.RawIOBase so BufferedReader gives fast readline()."""

  def __init__(self, gfile):
    self._f = gfile

  def readable(self):
    return True

  def readinto(self, buffer):
    data = self._f.read(len(buffer))
    n = len(data)
    buffer[:n] = data
    return n

  def close(self):
    self._f.close()
    super().close()


def decoded_lines(path: str, advice: str) -> Iterator[str]:
  """The lines of a (plain or gzip, local or gs://) table file as text, line ends kept, for `csv.reader`; a byte
  order mark on line 1 is dropped. ValueError naming path:line for bytes that are not UTF-8 (`advice` says what
  to do), naming the path for a file that cannot be read; FileNotFoundError for a missing one."""
  try:
    f = open_binary(path)
  except FileNotFoundError:
    raise
  except OSError as e:  # Permission denied, a directory, ...
    raise ValueError(f"{path}: cannot be read ({e.strerror or e}); check that it is a readable file") from None
  with f:
    for number, raw in enumerate(f, start=1):
      try:
        # utf-8-sig drops a byte-order mark (MRPC's, an editor's re-save); on later lines it is plain UTF-8.
        yield raw.decode("utf-8-sig" if number == 1 else "utf-8")
      except UnicodeDecodeError as e:
        raise ValueError(f"{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start} of the line); "
                         f"{advice}") from None


def csv_records(path: str, advice: str, repair: str, delimiter: str = ",",
                quoting: int = csv.QUOTE_MINIMAL) -> Iterator[tuple[int, int, list[str]]]:
  """Yields (first line, last line, fields) per record of a CSV (or, by `delimiter`, TSV) file, 1-based line
  numbers (a quoted field may span lines); blank lines are skipped. A malformed record (or one whose quote is
  never closed) raises ValueError naming path:line and `repair`, what to do; bytes that are not UTF-8, naming
  path:line and `advice`."""
  consumed: list[str] = []  # the lines the reader took for the record being read

  def lines():
    for line in decoded_lines(path, advice):
      consumed.append(line)
      yield line

  csv.field_size_limit(FIELD_SIZE_LIMIT)
  reader = csv.reader(lines(), delimiter=delimiter, quoting=quoting)
  while True:
    first = reader.line_num + 1
    consumed.clear()
    try:
      row = next(reader)
    except StopIteration:
      return
    except csv.Error as e:
      raise ValueError(f"{path}:{first}: not a {'TSV' if delimiter == chr(9) else 'CSV'} row ({e}); "
                       f"{repair}") from None
    # A quote opened and never closed takes the rest of the file into one field, which Python's reader accepts
    # at the end of the file; its strict mode says so (a quote inside an unquoted field, `5" screen`, is text).
    if quoting != csv.QUOTE_NONE and sum(line.count('"') for line in consumed) % 2 and _quote_left_open(
        consumed, delimiter):
      raise ValueError(f"{path}:{first}: a quote (\") opened in this row is never closed; close it, or double "
                       f"each quote inside a quoted field (\"\"); {repair}")
    if row:
      yield first, reader.line_num, row


def _quote_left_open(lines: list[str], delimiter: str) -> bool:
  try:
    list(csv.reader(lines, delimiter=delimiter, strict=True))
  except csv.Error as e:
    return "unexpected end of data" in str(e)
  return False


def iter_lines_with_size(path: str) -> Iterator[tuple[int, str, int]]:
  """Yields (1-based line number, line stripped of surrounding whitespace, raw size in bytes) per line.

  Lines end at b"\\n"; carriage returns are dropped wherever they are, as in the reference (module docstring).
  """
  if is_directory(path):
    raise IsADirectoryError(f"{path} is a directory: give files or globs, e.g. {os.path.join(path, '*.txt')}")
  with open_binary(path) as f:
    for number, raw in enumerate(f, start=1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise CorpusDecodeError(
            f"{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start} of the line); "
            "re-encode the file as UTF-8") from None
      yield number, line.replace("\r", "").strip(), len(raw)


def iter_lines(path: str) -> Iterator[tuple[int, str]]:
  """Yields (1-based line number, line stripped of surrounding whitespace) for each line of `path`."""
  for number, line, _ in iter_lines_with_size(path):
    yield number, line


def uncompressed_size(path: str) -> int:
  """Bytes of text in `path` after decompression: a stat for plain files, a streaming count for gzip."""
  with open_binary(path) as f:
    if not isinstance(f, gzip.GzipFile):
      return fileio.size(path)
    total = 0
    while chunk := f.read(1 << 22):
      total += len(chunk)
    return total


# -- Tables: CSV, TSV and JSON lines files of named columns (your own data, predict.py's --input_file) --------

FORMATS = {".csv": "csv", ".tsv": "tsv", ".json": "jsonl", ".jsonl": "jsonl"}
UTF8_ADVICE = "save the file as UTF-8"
REPAIR = "repair or delete that row"


def file_format(path: str, flag: str = "the file") -> str:
  """"csv", "tsv" or "jsonl", from `path`'s extension (before a `.gz`)."""
  name = path.lower()[:-3] if path.lower().endswith(".gz") else path.lower()
  ext = os.path.splitext(name)[1]
  if ext not in FORMATS:
    raise ValueError(f"{flag}={path}: name a .csv, .tsv, .json or .jsonl file (JSON lines: one object a line); "
                     "the extension says how to read it")
  return FORMATS[ext]


@dataclasses.dataclass
class Table:
  """A CSV, TSV or JSON lines file being read: its header's column names and line (None and 0 for JSON lines,
  whose columns are each record's keys), then (first line, column -> value) per row."""
  header: list[str] | None
  header_line: int
  rows: Iterator[tuple[int, dict[str, Any]]]


def read_table(path: str, fmt: str, repair: str = REPAIR, empty: str = "it needs a header row naming the "
               "columns, then the rows") -> Table:
  """Opens `path` in format `fmt` ("csv", "tsv" or "jsonl"). ValueError naming path:line for an empty CSV or
  TSV file (`empty` says what to do), a column named twice (in the header, or as a key of a JSON object), a row
  with more or fewer fields than the header (`repair` says what to do), a line that is not a JSON object, or bytes
  that are not UTF-8; FileNotFoundError for a missing file. Fields of any length are read."""
  if not fileio.exists(path):
    raise FileNotFoundError(f"{path} does not exist")
  if fmt == "jsonl":
    return Table(None, 0, json_rows(path))
  records = csv_records(path, UTF8_ADVICE, repair, delimiter="," if fmt == "csv" else "\t",
                                quoting=csv.QUOTE_MINIMAL if fmt == "csv" else csv.QUOTE_NONE)
  first = next(records, None)
  if first is None:
    raise ValueError(f"{path}:1: the file is empty; {empty}")
  header_line, _, header = first
  seen: dict[str, int] = {}
  for number, name in enumerate(header, start=1):
    # Unnamed columns (a spreadsheet's trailing empty ones) cannot be chosen by a flag, so they may repeat.
    if name in seen and name:
      raise ValueError(f"{path}:{header_line}: the header names the column {name!r} twice (columns {seen[name]} "
                       f"and {number}); give each column its own name")
    seen.setdefault(name, number)

  def rows():
    for line, last, row in records:
      if len(row) != len(header):
        runs_on = f" (the row runs on to line {last}: is a quote left open?)" if last > line else ""
        raise ValueError(f"{path}:{line}: {len(row)} {'comma' if fmt == 'csv' else 'tab'}-separated fields, "
                         f"expected {len(header)} as in the header{runs_on}; {repair}")
      yield line, dict(zip(header, row))

  return Table(header, header_line, rows())


def json_rows(path: str) -> Iterator[tuple[int, dict[str, Any]]]:
  """(line, object) per non-blank line of a JSON lines file; ValueError naming path:line for one that is not
  a JSON object."""
  return json_objects(decoded_lines(path, UTF8_ADVICE), path, '{"sentence1": "...", "label": "..."}')


def json_objects(lines: Iterable[str], path: str, example: str) -> Iterator[tuple[int, dict[str, Any]]]:
  """(line, object) per non-blank line of JSON lines text (`lines`, 1-based numbers); ValueError naming
  path:line for a line that is not JSON or not an object, with `example`, a line of the kind expected, or for an
  object with a key twice (json.loads would keep the last value, as a CSV header's repeated column would)."""
  for number, text in enumerate(lines, start=1):
    if not text.strip():
      continue
    try:
      value = json.loads(text, object_pairs_hook=_object_of_distinct_keys)
    except json.JSONDecodeError as e:
      raise ValueError(f"{path}:{number}: not JSON ({e.msg} at column {e.colno}); JSON lines hold one object "
                       f"a line, e.g. {example}") from None
    except _RepeatedKey as e:
      raise ValueError(f"{path}:{number}: the object has the key {e.key!r} twice; give each column once") from None
    if not isinstance(value, dict):
      raise ValueError(f"{path}:{number}: a JSON {type(value).__name__}, not an object; JSON lines hold one "
                       f"object a line, e.g. {example}")
    yield number, value


class _RepeatedKey(Exception):
  def __init__(self, key: str):
    super().__init__(key)
    self.key = key


def _object_of_distinct_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
  value = dict(pairs)
  if len(value) != len(pairs):
    seen: set[str] = set()
    raise _RepeatedKey(next(key for key, _ in pairs if key in seen or seen.add(key)))
  return value
