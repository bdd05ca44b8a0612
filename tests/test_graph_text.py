"""bert_tf.data.graph_text: substrings and offsets of many pieces of a few strings, equal to Python's slicing."""

import numpy as np
import tensorflow as tf

from bert_tf.data import graph_text

STRINGS = ["Café — 東京 x", "", "ab\x00c", "Zürich é\u0301"]
# (string, begin byte, end byte) of every piece asked for, in no particular order; some empty.
PIECES = [(0, 0, 5), (3, 0, 0), (0, 6, 9), (2, 1, 4), (0, 10, 16), (3, 0, 7), (0, 17, 18), (3, 8, 12), (2, 0, 0)]


def test_substrings_are_the_bytes_python_slices():
  rows, begins, ends = (tf.constant([p[i] for p in PIECES], tf.int64) for i in range(3))
  got = graph_text.substrings(tf.constant(STRINGS), rows, begins, ends).numpy().tolist()
  assert got == [STRINGS[r].encode()[b:e] for r, b, e in PIECES]


def test_character_and_byte_offsets_invert_each_other():
  rows, offsets = [], []
  for r, text in enumerate(STRINGS):
    data = text.encode()
    starts = [len(text[:i].encode()) for i in range(len(text) + 1)]  # every character boundary, the end included
    rows += [r] * len(starts)
    offsets += starts
    assert starts[-1] == len(data)
  chars = graph_text.char_offsets(tf.constant(STRINGS), tf.constant(rows, tf.int64), tf.constant(offsets, tf.int64))
  expected = [i for text in STRINGS for i in range(len(text) + 1)]
  assert chars.numpy().tolist() == expected
  back = graph_text.byte_offsets(tf.constant(STRINGS), tf.constant(rows, tf.int64), chars)
  assert back.numpy().tolist() == offsets


def test_out_of_range_characters_give_the_ends_of_the_string():
  strings = tf.constant(["añb", ""])
  got = graph_text.byte_offsets(strings, tf.constant([0, 0, 1, 1], tf.int64), tf.constant([-1, 7, 0, 3], tf.int64))
  assert got.numpy().tolist() == [0, 4, 0, 0]


def test_no_piece_and_no_string():
  empty = tf.zeros([0], tf.int64)
  assert graph_text.substrings(tf.constant(["abc"]), empty, empty, empty).shape == (0,)
  assert graph_text.char_offsets(tf.zeros([0], tf.string), empty, empty).numpy().tolist() == []
  assert np.array_equal(graph_text.byte_offsets(tf.constant([""]), tf.constant([0], tf.int64),
                                                tf.constant([0], tf.int64)).numpy(), [0])
