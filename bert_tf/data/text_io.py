"""Reading the pretraining input format: plain or gzip text, local or `gs://`, one sentence a line.

Lines are split on b"\\n" only and decoded as strict UTF-8, exactly as google-research's
`tf.gfile.GFile(path, "r").readline()` does, so a corpus that the reference reads we read the same way, and a
corpus it cannot decode we reject too, but with the file and line named.
"""

from __future__ import annotations

import gzip
import io
from typing import Iterator

from bert_tf import fileio

_GZIP_MAGIC = b"\x1f\x8b"


class CorpusDecodeError(ValueError):
  """A line of the input is not valid UTF-8."""


def open_binary(path: str):
  """Opens `path` for reading bytes, decompressing gzip (detected by its magic number, not its name)."""
  if not fileio.exists(path):
    raise FileNotFoundError(f"input file {path} does not exist")
  raw = fileio.open_file(path, "rb")
  head = raw.read(2)
  raw.seek(0)
  if head == _GZIP_MAGIC:
    return gzip.GzipFile(fileobj=raw, mode="rb")
  if fileio.is_remote(path):
    return io.BufferedReader(_GFileRaw(raw), buffer_size=1 << 20)
  return raw


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


def iter_lines_with_size(path: str) -> Iterator[tuple[int, str, int]]:
  """Yields (1-based line number, line stripped of surrounding whitespace, raw size in bytes) per line."""
  with open_binary(path) as f:
    for number, raw in enumerate(f, start=1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise CorpusDecodeError(
            f"{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start} of the line); "
            "re-encode the file as UTF-8") from None
      yield number, line.strip(), len(raw)


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
