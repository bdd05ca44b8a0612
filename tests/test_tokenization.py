"""Tests for bert_tf.data.tokenization.

Exact tokens and ids on a tiny odd-sized vocabulary; then identity, id for id, with google-research's
`tokenization.FullTokenizer` (PyPI bert-tensorflow, "the reference") on bert-base-uncased's vocabulary over a
varied corpus and the embedded one, and of the basic tokenization over every Unicode code point.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import tokenization as tk
from bert_tf.data.corpus import default_corpus_text
from bert_tf.data.graph_tokenizer import GraphTokenizer

# 25 tokens: an odd size, so an off-by-one in ids cannot hide.
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "un", "##happ", "##y",
              "##ily", ".", ",", "!", "a", "##a", "hello", "Hello", "mask", "##s", "é", "##é"]

# (text, do_lower_case, preserve_special_tokens, expected tokens, expected ids)
TINY_CASES = [
    ("The cat sat on the MAT.", True, False, "the cat sat on the mat .", [5, 6, 7, 8, 5, 9, 14]),
    ("The cat sat on the MAT.", False, False, "[UNK] cat sat on the [UNK] .", [1, 6, 7, 8, 5, 1, 14]),
    ("Unhappily, cats!", True, False, "un ##happ ##ily , cat ##s !", [10, 11, 13, 15, 6, 22, 16]),
    ("unhappy dog unhappyz", True, False, "un ##happ ##y [UNK] [UNK]", [10, 11, 12, 1, 1]),
    ("Héllo HELLO", True, False, "hello hello", [19, 19]),
    ("Hello hello HELLO Héllo", False, False, "Hello hello [UNK] [UNK]", [20, 19, 1, 1]),
    ("the,cat!!a.", True, False, "the , cat ! ! a .", [5, 15, 6, 16, 16, 17, 14]),
    ("aaa", True, False, "a ##a ##a", [17, 18, 18]),
    ("the\tcat\u00a0sat\u2028on\u3000mat\n", True, False, "the cat sat on mat", [5, 6, 7, 8, 9]),
    ("c\u200ba\u00adt\x00 \ufffd\x7f", True, False, "cat", [6]),
    ("the中cat", True, False, "the [UNK] cat", [5, 1, 6]),
    ("éé", False, False, "é ##é", [23, 24]),
    ("", True, False, "", []),
    ("the [MASK] sat", True, False, "the [UNK] mask [UNK] sat", [5, 1, 21, 1, 7]),
    ("the [MASK] sat", True, True, "the [MASK] sat", [5, 4, 7]),
    ("the[MASK].[CLS]", True, True, "the [MASK] . [CLS]", [5, 4, 14, 2]),
    ("the [mask] [MASK ]", True, True, "the [UNK] mask [UNK] [UNK] mask [UNK]", [5, 1, 21, 1, 1, 21, 1]),
    ("[MASK]Hello", False, True, "[MASK] Hello", [4, 20]),
]

ACCEPTANCE = [
    "Ångström measured the café's piñata; über-naïve façade.",
    "ÀÉÎÕÜ àéîõü Ñandú São Paulo Kraków Dvořák Øresund Þórr Œuvre",
    "中华人民共和国成立于1949年。我爱北京天安门！",
    "日本語のテキスト、ひらがなとカタカナ。東京タワー ｶﾀｶﾅ",
    "한국어 문장입니다. 서울특별시 ᄒᆞᆫ글",
    "Привет, мир! Ёжик в тумане. ПРИВЕТ",
    "مرحبا بالعالم، هذا اختبار. ١٢٣",
    "नमस्ते दुनिया। हिन्दी पाठ",
    "Emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flag 🇺🇸 heart ❤️ keycap 1️⃣ ok👌🏿",
    "tab\there\nnewline\rcarriage\x0bvtab\x0cformfeed\x1cfs\x85nel",
    "ctrl\x00nul\x01soh\x7fdel\u0080c1\ufffdreplacement\x1b[0m",
    "zero\u200bwidth\u200cnon\u200djoiner\ufeffbom\u2060wj\u00adsoft\u200emark",
    "line\u2028separator and paragraph\u2029separator",
    "nbsp\u00a0thin\u2009ideographic\u3000em\u2003figure\u2007narrow\u202fogham\u1680end",
    "x" * 150 + " " + "é" * 120 + " " + "日本" * 60 + " " + "ab" * 100 + " " + "a" * 200 + " " + "a" * 201,
    "ñ" * 199 + " " + "Ñ" * 200 + " " + "ü" * 201 + " " + "😀" * 201 + " " + "я" * 101,
    "Pneumonoultramicroscopicsilicovolcanoconiosis" * 3,
    "3.14 1,000,000 $5 10% -7 +8 1e-10 2^32 ½ ¼ ² ³ № 5° 100€ £3 ¥4 #1 @home ~x |y",
    "https://www.example.com/path/to?query=1&b=two#frag user@example.org C:\\Windows\\path",
    "The [MASK] sat on the [CLS] mat [SEP] with [PAD] and [UNK] [unused0] [mask]",
    "İstanbul ISTANBUL ıi İI Türkçe ŞĞÜÖÇ",
    "Straße STRASSE ß ẞ Maß",
    "ΟΔΟΣ ΣΟΦΟΣ. Σ ΌΣΟΣ'Α ὈΔΥΣΣΕΎΣ σς ΣΑΣ.Σ",
    "ＡＢＣ ｄｅｆ １２３ ！？ ＠＃ ｶﾀｶﾅ",
    "e\u0301 n\u0303 a\u0308 combining\u0301\u0302\u0303 \u0301lead \u0338 \u20dd",
    "ǅungla ǈ ǋ ﬁ ﬂ ﬃ Ⅻ ⅻ ㍿ ㎏ ℌ ℍ",
    "",
    "   ",
    "\u200b",
    "Ⱟ \U00010570\U00010597 Ꟁ, capitals that Unicode 14 added",
    "\U000105c9 \U00011383 \U0001e4ec, code points Python 3.11 does not know",
    "a\u1fefb a\u037eb a\u0387b ΣΑ\u037e",
    "mixed中文English混合text",
    "\u0130\u0307 stacked",
    "quotes “double” ‘single’ «guillemets» „low“ 「corner」 『white』 【lenticular】",
    "dashes – — ― ‐ … ・ · • ‰ ‱ ′ ″",
    "math ∑∫√∞≈≠≤≥ ± × ÷ ∂ ∇",
    "CJK 𠀀𠀁 𪜀 𫝀 𫠠 𬺰 compatibility 豈 更 丽 ⺀ ⼀",
]

INVALID_UTF8 = [b"caf\xc3\xa9 \xff\xfe ok", b"\xed\xa0\x80 surrogate", b"trunc\xe2\x82", b"over\xc0\xaflong",
                b"\xf4\x90\x80\x80big", b"\xe2\x28\xa1mixed", "fine".encode()]


def graph_ids(tokenizer: GraphTokenizer, texts) -> list[list[int]]:
  return tokenizer.tokenize(tf.constant(list(texts), tf.string)).to_list()


@pytest.fixture(scope="module")
def tiny():
  """(kind, do_lower_case, preserve_special_tokens, max_chars_per_word) -> tokenizer, built once each."""
  built = {}

  def get(kind, lower, preserve=False, max_chars=tk.DEFAULT_MAX_CHARS_PER_WORD):
    key = (kind, lower, preserve, max_chars)
    if key not in built:
      cls = tk.FullTokenizer if kind == "python" else GraphTokenizer
      built[key] = cls(TINY_VOCAB, do_lower_case=lower, preserve_special_tokens=preserve, max_chars_per_word=max_chars)
    return built[key]

  return get


def tiny_ids(tokenizer, text: str) -> list[int]:
  if isinstance(tokenizer, GraphTokenizer):
    return graph_ids(tokenizer, [text])[0]
  return tokenizer.convert_tokens_to_ids(tokenizer.tokenize(text))


@pytest.fixture(scope="module")
def reference():
  """google-research's tokenization module; its absl flag must count as parsed before use."""
  from absl import flags
  from bert import tokenization

  if not flags.FLAGS.is_parsed():
    flags.FLAGS.mark_as_parsed()
  return tokenization


@pytest.fixture(scope="module")
def corpus_lines() -> list[str]:
  return [line for line in default_corpus_text().split("\n") if line]


# ------------------------------------------------------------------------------------------------ tiny vocab


@pytest.mark.parametrize("kind", ["python", "graph"])
@pytest.mark.parametrize("text,lower,preserve,tokens,ids", TINY_CASES)
def test_tiny_vocab_exact(tiny, kind, text, lower, preserve, tokens, ids):
  tokenizer = tiny(kind, lower, preserve)
  assert tiny_ids(tokenizer, text) == ids
  assert [TINY_VOCAB[i] for i in ids] == tokens.split()
  if kind == "python":
    assert tokenizer.tokenize(text) == tokens.split()


@pytest.mark.parametrize("kind", ["python", "graph"])
def test_max_chars_per_word_counts_code_points(tiny, kind):
  default = tiny(kind, True)  # google-research's limit: 200.
  assert tiny_ids(default, "a" * 200) == [17] + [18] * 199
  assert tiny_ids(default, "a" * 201 + " the") == [1, 5]
  short = tiny(kind, True, max_chars=100)  # Hugging Face's limit.
  assert tiny_ids(short, "a" * 100) == [17] + [18] * 99
  assert tiny_ids(short, "the " + "a" * 101) == [5, 1]
  cased = tiny(kind, False, max_chars=100)
  assert tiny_ids(cased, "é" * 100) == [23] + [24] * 99  # 200 bytes but 100 code points: kept.
  assert tiny_ids(cased, "é" * 101) == [1]


def test_python_tokenizer_attributes_and_conversions(tiny):
  tokenizer = tiny("python", True)
  assert tokenizer.vocab["mat"] == 9 and tokenizer.inv_vocab[9] == "mat" and tokenizer.do_lower_case
  assert tokenizer.vocab_size == 25
  assert tokenizer.special_token_ids == {"[PAD]": 0, "[UNK]": 1, "[CLS]": 2, "[SEP]": 3, "[MASK]": 4}
  ids = tokenizer.convert_tokens_to_ids(["un", "##happ", "##ily"])
  assert ids == [10, 11, 13]
  assert tokenizer.convert_ids_to_tokens(np.array(ids)) == ["un", "##happ", "##ily"]
  assert tokenizer.tokenize("Unhappily".encode()) == ["un", "##happ", "##ily"]  # bytes, as the reference accepts.


def test_graph_tokenize_lines_chunks_and_splits(tiny):
  tokenizer = GraphTokenizer(TINY_VOCAB, lines_per_call=3)
  lines = ["the cat", "", "Unhappily, cats!", "a" * 300, "aaa", "mat.", "x"]
  ids, splits = tokenizer.tokenize_lines(lines)
  assert ids.dtype == np.int32 and splits.dtype == np.int64
  assert splits.tolist() == [0, 2, 2, 9, 10, 13, 15, 16]
  assert [ids[a:b].tolist() for a, b in zip(splits[:-1], splits[1:])] == graph_ids(tokenizer, lines)
  empty_ids, empty_splits = tokenizer.tokenize_lines([])
  assert empty_ids.shape == (0,) and empty_splits.tolist() == [0]
  assert tokenizer.vocab_size == 25 and tokenizer.special_token_ids["[MASK]"] == 4


def test_graph_tokenize_signature(tiny):
  tokenizer = tiny("graph", True)
  ids = tokenizer.tokenize(tf.constant(["the cat", ""]))
  assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int64 and ids.shape.rank == 2
  with pytest.raises((ValueError, TypeError)):
    tokenizer.tokenize(tf.constant([[b"the"]]))  # Only [B] is accepted.


# --------------------------------------------------------------------------------- reference, real vocabulary


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def real(request, reference, bert_uncased_vocab_file):
  """(reference, FullTokenizer, GraphTokenizer) on bert-base-uncased's vocab, uncased then cased."""
  lower = request.param
  return (reference.FullTokenizer(bert_uncased_vocab_file, do_lower_case=lower),
          tk.FullTokenizer(bert_uncased_vocab_file, do_lower_case=lower),
          GraphTokenizer(bert_uncased_vocab_file, do_lower_case=lower))


def test_identical_to_reference(real, corpus_lines):
  ref, python, graph = real
  texts = ACCEPTANCE + corpus_lines
  want = [ref.convert_tokens_to_ids(ref.tokenize(t)) for t in texts]
  got_python = [python.convert_tokens_to_ids(python.tokenize(t)) for t in texts]
  got_ids = [python.tokenize_to_ids(t) for t in texts]  # Record creation's path, with its id cache.
  values, splits = graph.tokenize_lines(texts)
  got_graph = [values[a:b].tolist() for a, b in zip(splits[:-1], splits[1:])]
  for name, got in (("FullTokenizer", got_python), ("FullTokenizer.tokenize_to_ids", got_ids),
                    ("GraphTokenizer", got_graph)):
    wrong = [i for i in range(len(texts)) if got[i] != want[i]]
    assert not wrong, "\n".join(
        f"{name} differs on {texts[i]!r}:\n  reference {ref.tokenize(texts[i])}\n  ours      "
        f"{python.convert_ids_to_tokens(got[i])}" for i in wrong[:3])
  assert sum(map(len, want)) > 100_000  # The comparison covered real text, not only empty lines.


def test_invalid_utf8_dropped_like_reference(real):
  ref, python, graph = real
  want = [ref.convert_tokens_to_ids(ref.tokenize(b)) for b in INVALID_UTF8]
  assert [python.convert_tokens_to_ids(python.tokenize(b)) for b in INVALID_UTF8] == want
  assert graph_ids(graph, INVALID_UTF8) == want


def test_preserve_special_tokens_real_vocab(reference, bert_uncased_vocab_file):
  ref = reference.FullTokenizer(bert_uncased_vocab_file, do_lower_case=True)
  python = tk.FullTokenizer(bert_uncased_vocab_file, preserve_special_tokens=True)
  graph = GraphTokenizer(bert_uncased_vocab_file, preserve_special_tokens=True)
  text = "Le Café [MASK] ΟΔΟΣ[SEP]straße [CLS] [mask] [UNK]."
  pieces = ["Le Café ", "[MASK]", " ΟΔΟΣ", "[SEP]", "straße ", "[CLS]", " [mask] ", "[UNK]", "."]
  want = [t for i, p in enumerate(pieces) for t in ([p] if i % 2 else ref.tokenize(p))]
  assert python.tokenize(text) == want
  assert graph_ids(graph, [text, "no specials here"]) == [
      python.convert_tokens_to_ids(want), ref.convert_tokens_to_ids(ref.tokenize("no specials here"))]


@pytest.mark.parametrize("lower", [True, False], ids=["uncased", "cased"])
def test_basic_tokenization_of_every_code_point(reference, lower):
  """Runs of 64 consecutive code points (surrogates excepted), so neighbours interact as in real text."""
  code_points = [cp for cp in range(sys.maxunicode + 1) if not 0xD800 <= cp <= 0xDFFF]
  texts = ["".join(map(chr, code_points[i:i + 64])) for i in range(0, len(code_points), 64)]
  want = [reference.BasicTokenizer(do_lower_case=lower).tokenize(t) for t in texts]
  python = tk.BasicTokenizer(do_lower_case=lower)
  graph = GraphTokenizer(["[UNK]"], do_lower_case=lower)
  got_graph = []
  for start in range(0, len(texts), 4096):
    words = graph.basic_tokenize(tf.constant(texts[start:start + 4096]))
    got_graph.extend([[w.decode("utf-8") for w in row] for row in words.to_list()])
  for name, got in (("BasicTokenizer", [python.tokenize(t) for t in texts]), ("GraphTokenizer", got_graph)):
    wrong = [i for i in range(len(texts)) if got[i] != want[i]]
    assert not wrong, f"{name} differs from the reference from U+{ord(texts[wrong[0]][0]):04X} on"


# ------------------------------------------------------------------------------------------------- SavedModel

_LOAD_AND_TOKENIZE = textwrap.dedent("""
    import json, sys
    import tensorflow as tf
    import tensorflow_text  # Registers the ops the graph uses.
    texts = json.load(open(sys.argv[2], encoding="utf-8"))
    ids = tf.saved_model.load(sys.argv[1]).tokenize(tf.constant(texts)).to_list()
    assert not [m for m in sys.modules if m.split(".")[0] in ("bert_tf", "bert")], "imported more than TF"
    print(json.dumps(ids))
""")


def test_saved_model_round_trip_in_fresh_process(tmp_path, bert_uncased_vocab_file):
  tokenizer = GraphTokenizer(bert_uncased_vocab_file, do_lower_case=True, preserve_special_tokens=True)
  texts = ACCEPTANCE
  want = graph_ids(tokenizer, texts)
  tf.saved_model.save(tokenizer, str(tmp_path / "tokenizer"))
  (tmp_path / "texts.json").write_text(json.dumps(texts), encoding="utf-8")
  result = subprocess.run([sys.executable, "-c", _LOAD_AND_TOKENIZE, str(tmp_path / "tokenizer"),
                           str(tmp_path / "texts.json")], capture_output=True, text=True, cwd=tmp_path, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert json.loads(result.stdout.strip().splitlines()[-1]) == want


# -------------------------------------------------------------------------------------------- vocab files, errors


def test_save_and_load_vocab_round_trip(tmp_path):
  path = str(tmp_path / "sub" / "vocab.txt")
  tk.save_vocab(TINY_VOCAB, path)
  assert tk.load_vocab(path) == {t: i for i, t in enumerate(TINY_VOCAB)}
  assert not [p.name for p in (tmp_path / "sub").iterdir() if p.name != "vocab.txt"]  # No temporary left.


def test_load_vocab_strips_lines_like_the_reference(tmp_path, reference):
  path = tmp_path / "vocab.txt"
  path.write_bytes("[PAD]\n  [UNK] \r\nb\u2028c\n\nd\x0be".encode())  # Only \n ends a line; no final newline.
  assert tk.load_vocab(str(path)) == {"[PAD]": 0, "[UNK]": 1, "b\u2028c": 2, "": 3, "d\x0be": 4}
  assert tk.load_vocab(str(path)) == dict(reference.load_vocab(str(path)))


def test_load_vocab_missing_file(tmp_path):
  missing = str(tmp_path / "nope" / "vocab.txt")
  with pytest.raises(FileNotFoundError, match="nope/vocab.txt"):
    tk.load_vocab(missing)
  with pytest.raises(FileNotFoundError, match="nope/vocab.txt"):
    tk.FullTokenizer(missing)
  with pytest.raises(FileNotFoundError, match="nope/vocab.txt"):
    GraphTokenizer(missing)


def test_load_vocab_duplicate_names_both_lines(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("[PAD]\n[UNK]\nthe\ncat\nthe \nsat\n", encoding="utf-8")
  with pytest.raises(ValueError, match=r"vocab.txt.*'the'.*line 3.*line 5"):
    tk.load_vocab(str(path))
  with pytest.raises(ValueError, match="line 1 and again on line 2"):
    GraphTokenizer(["a", "a", "[UNK]"])


def test_missing_special_tokens(tmp_path):
  path = tmp_path / "vocab.txt"
  path.write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\nthe\n", encoding="utf-8")
  vocab = tk.load_vocab(str(path))
  with pytest.raises(ValueError) as caught:
    tk.check_special_tokens(vocab, str(path))
  assert str(caught.value) == (f"{path}: has no [MASK], which BERT needs; add them as lines of the file (by convention "
                               "[PAD] is line 1, then [UNK] [CLS] [SEP] [MASK]) or learn a new vocabulary with "
                               "scripts/learn_vocab.py, which puts them first")
  tk.check_special_tokens(vocab, str(path), required=("[UNK]",))
  tk.check_special_tokens(vocab, str(path), required=tk.MODEL_TOKENS)  # a trained model's needs no [MASK]
  with pytest.raises(ValueError, match=r"^vocab.txt: has no \[CLS\] \[SEP\], which BERT needs; give the vocab.txt"):
    tk.check_special_tokens({"[UNK]": 0, "the": 1}, "vocab.txt", tk.MODEL_TOKENS, tk.MODEL_VOCAB_FIX)
  tk.FullTokenizer(str(path))  # Without preserve_special_tokens only [UNK] is needed.
  with pytest.raises(ValueError, match=r"vocab.txt: has no \[MASK\]"):
    GraphTokenizer(str(path), preserve_special_tokens=True)
  with pytest.raises(ValueError, match=r"^\(in-memory list\): has no \[UNK\]"):
    tk.FullTokenizer(["[PAD]", "the"])


def test_save_vocab_rejects_tokens_that_would_not_read_back(tmp_path):
  for bad in (["a", ""], ["a", " b"], ["a\nb"]):
    with pytest.raises(ValueError, match="would not read back"):
      tk.save_vocab(bad, str(tmp_path / "vocab.txt"))
  with pytest.raises(ValueError, match="line 1 and again on line 3"):
    tk.save_vocab(["a", "b", "a"], str(tmp_path / "vocab.txt"))
  assert not list(tmp_path.iterdir())


def test_fast_character_classes_equal_the_per_code_point_definition():
  assert tk._char_classes() == tk._char_classes_slow()


# (text, expected (piece, its text in the input) pairs) on the tiny vocabulary, uncased.
OFFSET_CASES = [
    ("Unhappily, cats!", [("un", "Un"), ("##happ", "happ"), ("##ily", "ily"), (",", ","), ("cat", "cat"),
                          ("##s", "s"), ("!", "!")]),
    ("  Héllo\u00a0the\u200bcat", [("hello", "Héllo"), ("[UNK]", "the\u200bcat")]),  # "thecat": one word
    ("c\u200ba\u00adt", [("cat", "c\u200ba\u00adt")]),  # controls removed: pieces span the whole word
    ("the中cat", [("the", "the"), ("[UNK]", "中"), ("cat", "cat")]),
    ("", []),
]


@pytest.mark.parametrize("text,expected", OFFSET_CASES)
def test_tokenize_with_offsets_tiny_exact(tiny, text, expected):
  graph = GraphTokenizer(TINY_VOCAB, do_lower_case=True)
  out = graph.tokenize_with_offsets(tf.constant([text]))
  data = text.encode("utf-8")
  pieces = out.ids.merge_dims(1, 2)[0].numpy().tolist()
  begins = out.piece_begin.merge_dims(1, 2)[0].numpy()
  ends = out.piece_end.merge_dims(1, 2)[0].numpy()
  assert [(TINY_VOCAB[i], data[b:e].decode("utf-8")) for i, b, e in zip(pieces, begins, ends)] == expected


def test_tokenize_with_offsets_points_at_each_word_and_piece(real, corpus_lines):
  """On real and hostile text: the same ids as `tokenize`; each word's offsets hold text that basic-tokenizes
  to exactly that word; a word's pieces tile it in order (or all span it, where normalising changed its
  number of characters). NULs included, which tensorflow-text's regex split once took for the string's end."""
  ref, python, graph = real
  texts = ([t for t in ACCEPTANCE if "\ufffd" not in t] + [t.replace("\ufffd", "\x00") for t in ACCEPTANCE]
           + ["수도입니다.", "Cafe\u0301. x", "ab\x00cd ef\x00", "\x00", "\x00 \x01", "x\x01.y\u0301,\u0301z"]
           + corpus_lines[:1500])
  out = graph.tokenize_with_offsets(tf.constant(texts))
  values, splits = graph.tokenize_lines(texts)
  assert out.ids.merge_dims(1, 2).flat_values.numpy().tolist() == values.tolist()
  basic = tk.BasicTokenizer(do_lower_case=graph.do_lower_case)
  all_words, word_begin, word_end = out.words.to_list(), out.word_begin.to_list(), out.word_end.to_list()
  piece_begin, piece_end = out.piece_begin.to_list(), out.piece_end.to_list()
  checked = words_seen = 0
  for i, text in enumerate(texts):
    data = text.encode("utf-8")
    for w, word in enumerate(all_words[i]):
      word, b, e = word.decode("utf-8"), word_begin[i][w], word_end[i][w]
      # Exactly the word, also where folding changed a chunk's number of characters (Hangul decomposes) or
      # removed a character. (A final sigma depends on the letters around the span: compared as the plain
      # sigma.)
      found = [t.replace("ς", "σ") for t in basic.tokenize(data[b:e].decode("utf-8"))]
      word = word.replace("ς", "σ")
      assert found == [word], (text, word)
      words_seen += 1
      piece_b, piece_e = np.array(piece_begin[i][w]), np.array(piece_end[i][w])
      if not len(piece_b):
        continue
      tiled = piece_b[0] == b and piece_e[-1] == e and (piece_b[1:] == piece_e[:-1]).all()
      spanning = (piece_b == b).all() and (piece_e == e).all()
      assert tiled or spanning, (text, word)
      if len(word) == len(data[b:e].decode("utf-8")):
        assert tiled, (text, word)
      checked += 1
  assert checked > 20_000 and words_seen >= checked
  # Every word of the text, in order: nothing after a NUL is lost.
  for i, text in enumerate(texts):
    assert [w.decode("utf-8").replace("ς", "σ") for w in all_words[i]] == [
        t.replace("ς", "σ") for t in basic.tokenize(text)], text
