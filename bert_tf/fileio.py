"""File helpers shared by every writer: local paths and `gs://` through `tf.io.gfile`.

Outputs are written under a temporary name and renamed into place, so a run that fails or is killed never
leaves a file that looks complete.
"""

from __future__ import annotations

import os
import uuid


def temp_path_for(path: str) -> str:
  """A sibling of `path` that `commit` later renames onto it; unique per call."""
  head, tail = os.path.split(path)
  return os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:8]}")


def commit(temp: str, path: str) -> None:
  import tensorflow as tf

  tf.io.gfile.rename(temp, path, overwrite=True)


def discard(temp: str) -> None:
  import tensorflow as tf

  if tf.io.gfile.exists(temp):
    tf.io.gfile.remove(temp)


def makedirs_for(path: str) -> None:
  import tensorflow as tf

  head = os.path.dirname(path)
  if head:
    tf.io.gfile.makedirs(head)


def write_text_atomic(path: str, text: str) -> None:
  import tensorflow as tf

  makedirs_for(path)
  temp = temp_path_for(path)
  try:
    with tf.io.gfile.GFile(temp, "w") as f:
      f.write(text)
    commit(temp, path)
  except BaseException:
    discard(temp)
    raise


def expand_globs(patterns: str, what: str = "--input_file") -> list[str]:
  """Comma-separated globs -> the sorted files each matches, in pattern order.

  Raises FileNotFoundError naming the pattern that matched nothing.
  """
  import tensorflow as tf

  files: list[str] = []
  for pattern in (p.strip() for p in patterns.split(",")):
    if not pattern:
      continue
    matched = sorted(tf.io.gfile.glob(pattern))
    if not matched:
      raise FileNotFoundError(f"{what}: {pattern!r} matches no file")
    files.extend(matched)
  if not files:
    raise FileNotFoundError(f"{what} is empty; give one or more comma-separated files or globs")
  return files
