"""bert_tf.tasks.common.features: the pair encoding every task uses, in Python and in-graph, and dynamic padding."""

import random

import pytest
import tensorflow as tf

from bert_tf.data.graph_tokenizer import GraphTokenizer
from bert_tf.data.tokenization import FullTokenizer
from bert_tf.tasks.common import features

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "un", "##believ", "##able", ",", ".", "!", "a"]
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS  # ids: the=5, cat=6, ..., a=18


@pytest.fixture
def vocab_file(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(TOKENS) + "\n")
  return str(path)


def _reference_truncation(len_a, len_b, budget):
  """google-research's _truncate_seq_pair, on lengths."""
  while len_a + len_b > budget:
    if len_a > len_b:
      len_a -= 1
    else:
      len_b -= 1
  return len_a, len_b


def test_truncate_lengths_is_the_reference_loop_in_closed_form():
  for a in range(14):
    for b in range(14):
      for budget in range(27):
        assert features.truncate_lengths(a, b, budget) == _reference_truncation(a, b, budget), (a, b, budget)


def test_encode_pair_and_single_with_exact_ids(vocab_file):
  tok = FullTokenizer(vocab_file)
  e = features.encode(tok, "The cat sat", "on the mat!", 11)
  assert e.input_ids == [2, 5, 6, 7, 3, 8, 5, 9, 17, 3, 0]
  assert e.input_mask == [1] * 10 + [0]
  assert e.segment_ids == [0] * 5 + [1] * 5 + [0]
  assert (e.num_tokens, e.truncated) == (10, False)
  # 5 + 4 tokens into a budget of 9 - 3 = 6: the longer A is cut to B's length, then B on the tie, then A.
  e = features.encode(tok, "the cat sat on a", "dog ran the mat", 9)
  assert e.input_ids == [2, 5, 6, 7, 3, 10, 11, 5, 3]
  assert e.segment_ids == [0, 0, 0, 0, 0, 1, 1, 1, 1]
  assert e.truncated
  e = features.encode(tok, "unbelievable dog", None, 5)
  assert e.input_ids == [2, 12, 13, 14, 3]  # un ##believ ##able, then [SEP]: "dog" cut
  assert e.segment_ids == [0] * 5 and e.truncated
  e = features.encode(tok, "", "", 7)  # empty texts are [CLS] [SEP] [SEP]
  assert e.input_ids == [2, 3, 3, 0, 0, 0, 0] and e.segment_ids == [0, 0, 1, 0, 0, 0, 0]


def test_in_graph_encoding_equals_python_on_random_texts(vocab_file):
  full, graph = FullTokenizer(vocab_file), GraphTokenizer(vocab_file)
  rng = random.Random(3)
  pool = WORDS + ["Zebra", "CAT", "mat.", "東京", "unbelievable!"]
  for max_seq_length in (5, 6, 9, 17):
    a = [" ".join(rng.choice(pool) for _ in range(rng.randint(0, 11))) for _ in range(23)]
    b = [" ".join(rng.choice(pool) for _ in range(rng.randint(0, 11))) for _ in range(23)]
    pair = features.encode_graph(graph, tf.constant(a), tf.constant(b), max_seq_length)
    single = features.encode_graph(graph, tf.constant(a), None, max_seq_length)
    for i in range(23):
      e, s = features.encode(full, a[i], b[i], max_seq_length), features.encode(full, a[i], None, max_seq_length)
      assert pair["input_ids"][i].numpy().tolist() == e.input_ids
      assert pair["input_mask"][i].numpy().tolist() == e.input_mask
      assert pair["segment_ids"][i].numpy().tolist() == e.segment_ids
      assert single["input_ids"][i].numpy().tolist() == s.input_ids
      assert single["segment_ids"][i].numpy().tolist() == s.segment_ids


def test_trim_padding_cuts_the_last_axis_of_any_rank():
  mask = tf.constant([[[1, 1, 0, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0, 0]], [[1, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0, 0, 0, 0]]])
  batch = {"input_ids": mask * 7, "input_mask": mask, "segment_ids": mask * 0, "label_ids": tf.constant([1, 0])}
  cut = features.trim_padding(batch, max_seq_length=7, length_multiple=2)  # longest 3 -> 4
  assert cut["input_ids"].shape == (2, 2, 4) and cut["input_mask"].numpy().sum() == mask.numpy().sum()
  assert cut["label_ids"].numpy().tolist() == [1, 0]
  assert features.trim_padding(batch, max_seq_length=7, length_multiple=8)["input_ids"].shape == (2, 2, 7)
