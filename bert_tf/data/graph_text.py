"""String ops for many pieces of a few long strings, in memory linear in the text.

TensorFlow's string ops work element by element: taking N substrings of one string with `tf.strings.substr`
needs the string N times (`tf.gather(strings, row)`), so the words of a 200,000-character text cost 40,000
copies of it, gigabytes. These take each string apart once (its bytes, or its characters' byte offsets) and
index into that, so their memory grows with the total length of the strings and of the pieces asked for.

Shapes: S strings; N pieces, each given by `row` (int64 [N], its string) and byte offsets into that string.
"""

from __future__ import annotations

import tensorflow as tf


def substrings(strings: tf.Tensor, row: tf.Tensor, begin: tf.Tensor, end: tf.Tensor) -> tf.Tensor:
  """strings[row[i]][begin[i]:end[i]] for every i, in bytes: tf.string [S]; int64 [N] x 3 -> tf.string [N].

  Memory: the strings' bytes once, one element each, and the pieces' bytes (not N copies of a string)."""
  row, begin, end = (tf.cast(x, tf.int64) for x in (row, begin, end))
  split = tf.strings.bytes_split(strings)  # [S, (bytes)]
  start = tf.gather(split.row_starts(), row)
  pieces = tf.gather(split.flat_values, tf.ragged.range(start + begin, start + tf.maximum(end, begin)))
  return tf.strings.reduce_join(pieces, axis=-1)


def char_offsets(strings: tf.Tensor, row: tf.Tensor, byte_offsets: tf.Tensor) -> tf.Tensor:
  """Byte offsets into valid UTF-8 strings -> character offsets (Python string indices): the characters of
  strings[row[i]] that begin before byte_offsets[i]. tf.string [S]; int64 [N] x 2 -> int32 [N]."""
  row, byte_offsets = tf.cast(row, tf.int64), tf.cast(byte_offsets, tf.int64)
  starts = _char_starts(strings)  # [S, (C)]
  # Keys (string << 32) + byte sort every character of every string: one search finds them all.
  keys = tf.bitwise.left_shift(starts.value_rowids(), 32) + starts.flat_values
  found = tf.searchsorted(keys, tf.bitwise.left_shift(row, 32) + byte_offsets, side="left", out_type=tf.int64)
  return tf.cast(found - tf.gather(starts.row_starts(), row), tf.int32)


def byte_offsets(strings: tf.Tensor, row: tf.Tensor, char_index: tf.Tensor) -> tf.Tensor:
  """The inverse of `char_offsets`: the byte at which character char_index[i] of strings[row[i]] begins (the
  string's length in bytes at or past its last character). tf.string [S]; int64 [N] x 2 -> int64 [N]."""
  row, char_index = tf.cast(row, tf.int64), tf.cast(char_index, tf.int64)
  starts = _char_starts(strings)
  count = tf.gather(starts.row_lengths(), row)
  size = tf.gather(tf.cast(tf.strings.length(strings), tf.int64), row)
  flat = tf.concat([starts.flat_values, tf.zeros([1], tf.int64)], 0)  # a last slot: never out of range
  inside = (char_index >= 0) & (char_index < count)
  at = tf.gather(flat, tf.where(inside, tf.gather(starts.row_starts(), row) + char_index, tf.size(flat, tf.int64) - 1))
  return tf.where(inside, at, tf.where(char_index < 0, tf.zeros_like(size), size))


def _char_starts(strings: tf.Tensor) -> tf.RaggedTensor:
  """int64 [S, (C)]: the byte at which each character of each string begins."""
  _, starts = tf.strings.unicode_decode_with_offsets(strings, "UTF-8", errors="replace")
  return starts
