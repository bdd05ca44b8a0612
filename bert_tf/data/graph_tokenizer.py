"""The in-graph BERT tokenizer (tensorflow-text ops): identical ids to `tokenization.FullTokenizer`.

See `bert_tf/data/tokenization.py` for the semantics both implement; this module holds only what needs TensorFlow.
"""

from __future__ import annotations

import functools
import logging
import sys
import unicodedata
from typing import NamedTuple, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.data import graph_text
from bert_tf.data.tokenization import (  # noqa: F401
  _CJK_RANGES,
  DEFAULT_MAX_CHARS_PER_WORD,
  SPECIAL_TOKENS,
  SUFFIX_INDICATOR,
  UNK_TOKEN,
  Ranges,
  _char_classes,
  _re2_class,
  _re2_literal_alternation,
  _split_ranges,
  _to_ranges,
  _vocab_tokens,
  check_special_tokens,
)

# A code point ICU must not see is replaced by three that it leaves alone: U+0001 (Cc, so never in cleaned
# text) and two private-use characters carrying its top and bottom 10 bits.
_MARK = 0x1
_PUA_BASE = 0xF0000
# Matches exactly the strings Python decodes as UTF-8 (no surrogates, nothing above U+10FFFF, no overlongs).
_RE_VALID_UTF8 = "(?s)[\\x{0}-\\x{D7FF}\\x{E000}-\\x{10FFFF}]*"


def _icu_fold(text: tf.Tensor, marks_class: str) -> tf.Tensor:
  """Step 4 with TensorFlow's ops: tf.string [N] -> tf.string [N]."""
  text = tf.strings.lower(text, encoding="utf-8")  # Full case mapping, final sigma included, like str.lower.
  text = tf_text.normalize_utf8(text, "NFD")
  return tf.strings.regex_replace(text, marks_class, "")


@functools.lru_cache(maxsize=None)
def _icu_fixups() -> tuple[Ranges, tuple[int, ...], tuple[int, ...]]:
  """Where TensorFlow's ICU and Python's unicodedata disagree on step 4, per code point.

  Returns (code points to route around ICU, sorted keys, their step-4 results as single code points). Routed
  around: every code point unassigned in Python's database (ICU may be newer and decompose or reorder it), and
  every assigned one whose lower/NFD/strip result differs. For Python 3.11 (Unicode 14) and TensorFlow 2.20 the
  latter are the 40 capitals added in Unicode 14 (Vithkuqi, U+2C2F, U+A7C0 ...) that TensorFlow does not
  lower-case.
  """
  classes = _char_classes()
  marks_table = {cp: None for lo, hi in classes.marks for cp in range(lo, hi + 1)}
  unassigned = {cp for lo, hi in classes.unassigned for cp in range(lo, hi + 1)}
  # Cleaning has removed or replaced controls and whitespace before step 4, and private use and surrogates have
  # no case or decomposition; skipping them all keeps this under a second.
  skipped = unassigned | {cp for lo, hi in classes.removed + classes.whitespace for cp in range(lo, hi + 1)}
  candidates = [cp for cp in range(sys.maxunicode + 1)
                if cp not in skipped and unicodedata.category(chr(cp)) not in ("Cs", "Co")]
  chars = [chr(cp) for cp in candidates]
  expected = [unicodedata.normalize("NFD", c.lower()).translate(marks_table) for c in chars]
  with tf.init_scope():  # Eager even when first called while tracing.
    folded = _icu_fold(tf.constant(chars), _re2_class(classes.marks)).numpy()
  fixes = {}
  for cp, want, got in zip(candidates, expected, folded):
    if got.decode("utf-8") != want:
      if len(want) == 1:
        fixes[cp] = ord(want)
      else:  # None with Python 3.11 and TensorFlow 2.20; the detour carries one code point only.
        logging.warning("GraphTokenizer: U+%04X lower-cases to %r in Python but %r in TensorFlow; words holding "
                        "it may differ from FullTokenizer", cp, want, got.decode("utf-8"))
  routed = sorted(unassigned | set(fixes))
  keys = tuple(sorted(fixes))
  return _to_ranges(routed), keys, tuple(fixes[k] for k in keys)


def _to_raw_offsets(normal: tf.Tensor, raw: tf.Tensor, row: tf.Tensor, offsets: tf.Tensor,
                    fallback: tf.Tensor) -> tf.Tensor:
  """Byte offsets into normalised strings -> byte offsets into the raw strings they came from: `offsets[i]`
  points into normal[row[i]], made from raw[row[i]] (normal, raw: tf.string [S]; row, offsets, fallback: int64
  [N]). Equal strings keep them; strings with as many characters match character for character ("Café" ->
  "cafe": one byte fewer); otherwise (a removed control character, "İ" -> "i" + a dot) `fallback`. Each string
  is read once, whatever N (`graph_text`)."""
  same_string = tf.gather(tf.equal(normal, raw), row)
  same_chars = tf.gather(tf.equal(tf.strings.length(normal, unit="UTF8_CHAR"),
                                  tf.strings.length(raw, unit="UTF8_CHAR")), row)
  by_chars = graph_text.byte_offsets(raw, row, graph_text.char_offsets(normal, row, offsets))
  return tf.where(same_string, offsets, tf.where(same_chars, by_chars, fallback))


def regex_split_with_offsets(strings: tf.Tensor, delim: str, keep: str = "") -> tuple[tf.RaggedTensor, ...]:
  """`tf_text.regex_split_with_offsets` over whole strings: tf.string [N] -> pieces, begin, end [N, (P)].

  The op ends a string at its first NUL byte (U+0000), so NULs are first replaced by U+0001: one byte for
  one byte, so the offsets stay those of `strings`, and both are control characters that cleaning removes and
  that neither split nor SQuAD's whitespace matches."""
  return tf_text.regex_split_with_offsets(tf.strings.regex_replace(strings, "\\x00", "\x01"), delim, keep)


class TokensWithOffsets(NamedTuple):
  """`GraphTokenizer.tokenize_with_offsets`'s result (B strings, W words, P pieces); see there."""
  ids: tf.RaggedTensor  # int64 [B, (W), (P)]
  words: tf.RaggedTensor  # tf.string [B, (W)]
  word_begin: tf.RaggedTensor  # int64 [B, (W)]
  word_end: tf.RaggedTensor
  piece_begin: tf.RaggedTensor  # int64 [B, (W), (P)]
  piece_end: tf.RaggedTensor


class GraphTokenizer(tf.Module):
  """The same tokenizer as `FullTokenizer`, built from TensorFlow and tensorflow-text ops.

  `tokenize` is a `tf.function` with an input signature, so a module holding this one is savable with
  `tf.saved_model.save` and runs after `tf.saved_model.load` wherever tensorflow_text is imported.
  """

  def __init__(self, vocab: str | Sequence[str], do_lower_case: bool = True, preserve_special_tokens: bool = False,
               max_chars_per_word: int = DEFAULT_MAX_CHARS_PER_WORD, lines_per_call: int = 4096):
    super().__init__(name="bert_tokenizer")
    tokens, index, source = _vocab_tokens(vocab)
    check_special_tokens(index, source, SPECIAL_TOKENS if preserve_special_tokens else (UNK_TOKEN,))
    self._tokens = tuple(tokens)
    self.do_lower_case = do_lower_case
    self.preserve_special_tokens = preserve_special_tokens
    self.max_chars_per_word = max_chars_per_word
    self.lines_per_call = lines_per_call
    self._unk_id = index[UNK_TOKEN]
    self._special_ids = tuple((t, index[t]) for t in SPECIAL_TOKENS if t in index)

    classes = _char_classes()
    self._re_removed = _re2_class(classes.removed)
    # " " itself is left out: replacing every space by a space would only cost time.
    self._re_whitespace = _re2_class(tuple(r for r in _split_ranges(classes.whitespace, 0x20) if r != (0x20, 0x20)))
    self._re_cjk = _re2_class(_CJK_RANGES)
    self._re_marks = _re2_class(classes.marks)
    self._re_punctuation = _re2_class(classes.punctuation)
    self._re_split = " +|" + self._re_punctuation  # Cleaning left " " as the only whitespace.
    # For `tokenize_with_offsets`, which splits the text as given (so offsets point into it) into chunks: any
    # whitespace separates, CJK characters stand alone.
    self._re_split_raw = _re2_class(classes.whitespace) + "+|" + self._re_cjk
    self._re_keep_raw = self._re_cjk
    self._re_special = _re2_literal_alternation(SPECIAL_TOKENS)
    if do_lower_case:
      routed, keys, values = _icu_fixups()
      self._re_routed = "(?s).*" + _re2_class(routed) + ".*"
      self._routed_ranges = tf.constant(np.array(routed, np.int32).reshape([-1, 2]))
      self._fix_keys = tf.constant(np.array(keys + (0x7FFFFFFF,), np.int32))
      self._fix_values = tf.constant(np.array(values + (0,), np.int32))

    # "" and "##" can never match a word; FastWordpieceTokenizer would warn about them, so it gets stand-ins
    # that cannot match either (words never contain U+0000) and the ids stay line numbers.
    wordpiece_vocab = [t if t not in ("", SUFFIX_INDICATOR) else f"\0unmatchable{i}" for i, t in enumerate(tokens)]
    self._wordpiece = tf_text.FastWordpieceTokenizer(
        vocab=wordpiece_vocab, suffix_indicator=SUFFIX_INDICATOR, unknown_token=UNK_TOKEN,
        max_bytes_per_word=4 * max_chars_per_word,  # Never binding: our own rule counts code points.
        token_out_type=tf.int64, no_pretokenization=True, support_detokenization=False)

  @property
  def vocab_size(self) -> int:
    return len(self._tokens)

  @property
  def vocab(self) -> dict[str, int]:
    """Token -> id, as `FullTokenizer.vocab`."""
    return {token: i for i, token in enumerate(self._tokens)}

  @property
  def special_token_ids(self) -> dict[str, int]:
    return dict(self._special_ids)

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="strings")])
  def tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
    """tf.string [B] (UTF-8; invalid bytes are dropped) -> int64 RaggedTensor [B, (T)] of WordPiece ids."""
    words = self.basic_tokenize(strings)  # [B, (W)]
    return words.with_flat_values(self._word_ids(words.flat_values)).merge_dims(1, 2)

  def tokenize_lines(self, lines: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Many lines -> (int32 [total] ids of all lines concatenated, int64 [len(lines) + 1] row splits).

    Runs `lines_per_call` lines per call to bound memory.
    """
    values, splits, total = [], [np.zeros([1], np.int64)], 0
    for start in range(0, len(lines), self.lines_per_call):
      ids = self.tokenize(tf.constant(list(lines[start:start + self.lines_per_call]), tf.string))
      values.append(ids.flat_values.numpy().astype(np.int32))
      splits.append(ids.row_splits.numpy()[1:] + total)
      total += len(values[-1])
    return (np.concatenate(values) if values else np.zeros([0], np.int32)), np.concatenate(splits)

  def tokenize_with_offsets(self, strings: tf.Tensor) -> TokensWithOffsets:
    """The ids of `tokenize`, with where each word and each WordPiece came from in the input.

    strings: tf.string [B], valid UTF-8 (an InvalidArgument error otherwise: offsets into bytes that
      `tokenize` would have replaced could point anywhere).
    Returns a `TokensWithOffsets`:
      ids          int64 RaggedTensor [B, (W), (P)]: the WordPiece ids of each basic-tokenizer word; a word
                   that cleaning empties (only control characters) has no pieces. `ids.merge_dims(1, 2)`
                   equals `tokenize(strings)`.
      words        tf.string RaggedTensor [B, (W)]: the words as WordPiece sees them (cleaned, and folded when
                   lower-casing).
      word_begin, word_end     int64 [B, (W)]: byte offsets [begin, end) of each word in its string.
      piece_begin, piece_end   int64 [B, (W), (P)]: byte offsets of each piece in its string: the bytes of
                   the text it was made of. Where normalising a word changed its bytes but not its number of
                   characters ("Café" -> "cafe"), characters are matched one to one; where it changed that
                   too (a removed control character, "İ" -> "i" + a dot), every piece spans the whole word.
    The words are the basic tokenizer's: chunks split at whitespace and CJK characters on the text as given,
    each cleaned and folded, then split at punctuation; offsets map back through characters where a chunk kept
    its characters one for one, else through each raw character normalised alone, so each word has its own
    text and offsets ("수도입니다." -> "수도입니다" and ".").
    Special tokens are not preserved (`preserve_special_tokens=False` only).
    """
    if self.preserve_special_tokens:
      raise ValueError("tokenize_with_offsets needs preserve_special_tokens=False")
    check = tf.debugging.assert_equal(
        tf.reduce_all(tf.strings.regex_full_match(strings, _RE_VALID_UTF8)), True,
        message="text must be valid UTF-8")
    with tf.control_dependencies([check]):
      strings = tf.identity(strings)
    # Chunks as the reference's whitespace split finds them (CJK characters stand alone); each is cleaned and
    # folded whole, so case context (a final sigma) is the reference's, then split at punctuation, which
    # folding can create ("≠" -> "=").
    chunks, chunk_begin, chunk_end = regex_split_with_offsets(strings, self._re_split_raw,
                                                              self._re_keep_raw)  # [B, (C)]
    raw_chunks = chunks.flat_values
    cleaned_chunks = tf.strings.regex_replace(raw_chunks, self._re_removed, "")
    normal_chunks = self._fold(cleaned_chunks) if self.do_lower_case else cleaned_chunks
    split, local_begin, local_end = tf_text.regex_split_with_offsets(
        normal_chunks, self._re_punctuation, self._re_punctuation)  # [C, (W)] offsets in the normalised chunk
    chunk_of = split.value_rowids()
    words = split.flat_values
    begin_in_chunk = _to_raw_offsets(normal_chunks, raw_chunks, chunk_of, local_begin.flat_values,
                                     tf.zeros_like(local_begin.flat_values))
    end_in_chunk = _to_raw_offsets(normal_chunks, raw_chunks, chunk_of, local_end.flat_values,
                                   tf.gather(tf.cast(tf.strings.length(raw_chunks), tf.int64), chunk_of))
    # Chunks that lost a character or changed their number of characters ("수도입니다." -> 12 jamo and ".")
    # are mapped back character by character instead.
    changed = (tf.not_equal(cleaned_chunks, raw_chunks)
               | tf.not_equal(tf.strings.length(normal_chunks, unit="UTF8_CHAR"),
                              tf.strings.length(raw_chunks, unit="UTF8_CHAR")))
    begin_in_chunk, end_in_chunk = self._words_of_changed_chunks(raw_chunks, normal_chunks, changed, chunk_of,
                                                                 local_begin.flat_values, local_end.flat_values,
                                                                 begin_in_chunk, end_in_chunk)
    chunk_start = tf.gather(chunk_begin.flat_values, chunk_of)
    raw = chunks.with_flat_values(split).merge_dims(1, 2)  # [B, (W)]
    word_begin = raw.with_flat_values(chunk_start + begin_in_chunk)
    word_end = raw.with_flat_values(chunk_start + end_in_chunk)
    # Each word's raw text, cut from its chunk's bytes (a chunk can be long: text without spaces).
    raw_words = graph_text.substrings(raw_chunks, chunk_of, begin_in_chunk, end_in_chunk)

    ids, begin, end = self._word_ids_with_offsets(words)  # [W, (P)], offsets into the normalised words
    rows = ids.value_rowids()  # [P] the word of each piece
    starts = tf.gather(word_begin.flat_values, rows)
    word_length = tf.gather(tf.cast(tf.strings.length(raw_words), tf.int64), rows)
    piece_begin = starts + _to_raw_offsets(words, raw_words, rows, begin.flat_values, tf.zeros_like(word_length))
    piece_end = starts + _to_raw_offsets(words, raw_words, rows, end.flat_values, word_length)
    nest = raw.with_flat_values
    return TokensWithOffsets(nest(ids), nest(words), word_begin, word_end,
                             nest(ids.with_flat_values(piece_begin)), nest(ids.with_flat_values(piece_end)))

  def _words_of_changed_chunks(self, raw_chunks, normal_chunks, changed, chunk_of, local_begin, local_end,
                               begin, end) -> tuple[tf.Tensor, tf.Tensor]:
    """Each word's own [begin, end) bytes in its raw chunk, for the words of `changed` chunks, where
    `_to_raw_offsets` cannot match characters one to one: each raw character is normalised alone, and a word
    spans the raw characters that make its normalised ones (a combining mark that folding removed goes with
    the character before it, "e" + U+0301).

    raw_chunks, normal_chunks: tf.string [C], changed: bool [C]; chunk_of: int64 [W] each word's chunk;
    local_begin, local_end: int64 [W] its bytes in the normalised chunk; begin, end: int64 [W] the offsets of
    the words of unchanged chunks (returned as they are). Returns begin, end int64 [W].
    """
    word_changed = tf.gather(changed, chunk_of)

    def per_character():
      chunks = tf.where(changed)[:, 0]  # [D] sorted
      words = tf.where(word_changed)[:, 0]  # [V]
      chars = tf.strings.unicode_split(tf.gather(raw_chunks, chunks), "UTF-8")  # [D, (K)]
      flat = chars.flat_values
      normal = tf.strings.regex_replace(flat, self._re_removed, "")
      if self.do_lower_case:
        normal = self._fold(normal)
      count = tf.cast(tf.strings.length(normal, unit="UTF8_CHAR"), tf.int64)  # [K] normalised characters
      size = tf.cast(tf.strings.length(flat), tf.int64)  # [K] bytes
      row = chars.value_rowids()
      index = tf.range(tf.size(flat, out_type=tf.int64))
      row_start = tf.gather(chars.row_starts(), row)

      def within_row(values):  # exclusive cumulative sum, restarting at each chunk
        total = tf.cumsum(values, exclusive=True)
        return total - tf.gather(total, row_start)

      made_before = within_row(count)
      byte_start = within_row(size)
      attached = (tf.equal(count, 0) & tf.strings.regex_full_match(flat, self._re_marks)
                  & tf.not_equal(index, row_start))
      group = tf.cumsum(tf.cast(~attached, tf.int64)) - 1
      group_end = tf.math.unsorted_segment_max(byte_start + size, group, tf.size(flat, out_type=tf.int64))
      # Keys (chunk << 32) + normalised characters made up to and including each raw character: the raw
      # character making normalised character k is the first whose key exceeds (chunk << 32) + k.
      keys = tf.bitwise.left_shift(row, 32) + made_before + count
      chunk = tf.searchsorted(chunks, tf.gather(chunk_of, words), out_type=tf.int64)  # [V] its row of `chars`
      word_chunk = tf.gather(chunk_of, words)

      def chars_before(byte_offsets):
        return tf.cast(graph_text.char_offsets(normal_chunks, word_chunk, byte_offsets), tf.int64)

      last_char = tf.maximum(tf.size(flat, out_type=tf.int64) - 1, 0)

      def making(k):
        found = tf.searchsorted(keys, tf.bitwise.left_shift(chunk, 32) + k, side="right", out_type=tf.int64)
        return tf.minimum(found, last_char)

      first = making(chars_before(tf.gather(local_begin, words)))
      last = making(chars_before(tf.gather(local_end, words)) - 1)
      new_begin = tf.gather(byte_start, first)
      new_end = tf.gather(group_end, tf.gather(group, last))
      # Normalising characters one by one makes as many as normalising the chunk (it does with Python 3.11 and
      # TensorFlow 2.20: lower-casing, NFD and mark stripping act per character); where it would not, the
      # fallback (the whole chunk) stays.
      counts = tf.math.unsorted_segment_sum(count, row, tf.size(chunks, out_type=tf.int64))
      adds_up = tf.gather(tf.equal(counts, tf.cast(tf.strings.length(tf.gather(normal_chunks, chunks),
                                                                     unit="UTF8_CHAR"), tf.int64)), chunk)
      at = words[:, tf.newaxis]
      return (tf.tensor_scatter_nd_update(begin, at, tf.where(adds_up, new_begin, tf.gather(begin, words))),
              tf.tensor_scatter_nd_update(end, at, tf.where(adds_up, new_end, tf.gather(end, words))))

    return tf.cond(tf.reduce_any(word_changed), per_character, lambda: (begin, end))

  def basic_tokenize(self, strings: tf.Tensor) -> tf.RaggedTensor:
    """Steps 1-5: tf.string [B] -> tf.string RaggedTensor [B, (W)] of words (preserved special tokens included)."""
    # Invalid bytes become U+FFFD, which cleaning drops: the reference's decode(errors="ignore"). Transcoding
    # costs more than the rest of cleaning, so it runs only when some line is not valid UTF-8.
    valid = tf.reduce_all(tf.strings.regex_full_match(strings, _RE_VALID_UTF8))
    text = tf.cond(valid, lambda: strings, lambda: tf.strings.unicode_transcode(
        strings, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD))
    if not self.preserve_special_tokens:
      return self._basic(text)
    pieces = tf_text.regex_split(text, self._re_special, self._re_special)  # [B, (P)]
    flat = pieces.flat_values
    is_special = tf.strings.regex_full_match(flat, self._re_special)
    words = self._basic(tf.where(is_special, "", flat))  # [P, (W)]; empty rows for special pieces.
    specials = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(flat, is_special), tf.cast(is_special, tf.int64))
    return pieces.with_flat_values(tf.concat([words, specials], axis=1)).merge_dims(1, 2)

  def _basic(self, text: tf.Tensor) -> tf.RaggedTensor:
    text = tf.strings.regex_replace(text, self._re_removed, "")
    text = tf.strings.regex_replace(text, self._re_whitespace, " ")
    text = tf.strings.regex_replace(text, self._re_cjk, " \\0 ")
    if self.do_lower_case:
      text = self._fold(text)
    return tf_text.regex_split(text, self._re_split, self._re_punctuation)

  def _fold(self, text: tf.Tensor) -> tf.Tensor:
    """Step 4 on whole lines (spaces already separate the chunks, and break final-sigma context as chunk ends do).

    Lines holding a code point listed by `_icu_fixups` (rare) take a detour around ICU for those code points.
    """
    routed = tf.strings.regex_full_match(text, self._re_routed)

    def detour():
      parts = tf.cast(routed, tf.int32)
      positions = tf.dynamic_partition(tf.range(tf.shape(text)[0]), parts, 2)
      plain, rare = tf.dynamic_partition(text, parts, 2)
      rare = self._unhide(_icu_fold(self._hide(rare), self._re_marks))
      return tf.dynamic_stitch(positions, [_icu_fold(plain, self._re_marks), rare])

    return tf.cond(tf.reduce_any(routed), detour, lambda: _icu_fold(text, self._re_marks))

  def _hide(self, text: tf.Tensor) -> tf.Tensor:
    """Each routed code point c -> U+0001, U+F0000 + (c >> 10), U+F0000 + (c & 1023)."""
    chars = tf.strings.unicode_decode(text, "UTF-8")  # int32 [N, (C)]
    c = chars.flat_values
    row = tf.searchsorted(self._routed_ranges[:, 0], c, side="right") - 1
    hidden = (row >= 0) & (c <= tf.gather(self._routed_ranges[:, 1], tf.maximum(row, 0)))
    high = _PUA_BASE + tf.bitwise.right_shift(c, 10)
    low = _PUA_BASE + tf.bitwise.bitwise_and(c, 1023)
    triples = tf.stack([tf.where(hidden, _MARK, c), high, low], axis=1)  # [C, 3]
    lengths = tf.where(hidden, 3, 1)
    values = tf.RaggedTensor.from_tensor(triples, lengths=lengths).flat_values
    row_lengths = tf.math.unsorted_segment_sum(lengths, chars.value_rowids(), chars.nrows())
    return tf.strings.unicode_encode(tf.RaggedTensor.from_row_lengths(values, row_lengths), "UTF-8")

  def _unhide(self, text: tf.Tensor) -> tf.Tensor:
    """Inverse of `_hide`, giving each code point its step-4 result as Python computes it."""
    chars = tf.strings.unicode_decode(text, "UTF-8")
    c = chars.flat_values
    n = tf.size(c)
    mark = tf.equal(c, _MARK)
    after1 = tf.concat([[False], mark], axis=0)[:n]  # The high half.
    after2 = tf.concat([[False, False], mark], axis=0)[:n]  # The low half: replaced by the result.
    previous = tf.concat([[0], c], axis=0)[:n]
    original = tf.bitwise.bitwise_or(tf.bitwise.left_shift(previous - _PUA_BASE, 10), c - _PUA_BASE)
    # The keys end with a sentinel above every code point, so the search always lands on a real slot.
    slot = tf.minimum(tf.searchsorted(self._fix_keys, original), tf.size(self._fix_keys) - 1)
    is_fixed = tf.equal(tf.gather(self._fix_keys, slot), original)
    c = tf.where(after2, tf.where(is_fixed, tf.gather(self._fix_values, slot), original), c)
    keep = ~(mark | after1)
    row_lengths = tf.math.unsorted_segment_sum(tf.cast(keep, tf.int32), chars.value_rowids(), chars.nrows())
    kept = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(c, keep), row_lengths)
    return tf.strings.unicode_encode(kept, "UTF-8")

  def _word_ids_with_offsets(self, words: tf.Tensor) -> tuple[tf.RaggedTensor, tf.RaggedTensor, tf.RaggedTensor]:
    """`_word_ids` with byte offsets of each piece in its word: 3 x int64 RaggedTensor [W, (P)]. A word too long
    for WordPiece is one [UNK] spanning the whole word."""
    is_long = tf.strings.length(words, unit="UTF8_CHAR") > self.max_chars_per_word
    ids, begin, end = self._wordpiece.tokenize_with_offsets(tf.where(is_long, "", words))
    single = tf.cast(is_long, tf.int64)
    unk = tf.RaggedTensor.from_row_lengths(tf.fill([tf.reduce_sum(single)], tf.constant(self._unk_id, tf.int64)),
                                           single)
    zero = tf.RaggedTensor.from_row_lengths(tf.zeros([tf.reduce_sum(single)], tf.int64), single)
    length = tf.RaggedTensor.from_row_lengths(tf.cast(tf.boolean_mask(tf.strings.length(words), is_long), tf.int64),
                                              single)
    return (tf.concat([ids, unk], axis=1), tf.concat([begin, zero], axis=1), tf.concat([end, length], axis=1))

  def _word_ids(self, words: tf.Tensor) -> tf.RaggedTensor:
    """Step 6: tf.string [W] -> int64 RaggedTensor [W, (P)]."""
    # A word has at most as many code points as bytes, so most words need no counting.
    maybe_long = tf.strings.length(words) > self.max_chars_per_word
    is_special = tf.zeros_like(maybe_long)
    special_id = tf.fill(tf.shape(words), tf.constant(self._unk_id, tf.int64))
    if self.preserve_special_tokens:
      for token, token_id in self._special_ids:
        is_token = tf.equal(words, token)  # A normal word cannot be one: brackets are split off.
        special_id = tf.where(is_token, tf.constant(token_id, tf.int64), special_id)
        is_special |= is_token

    def with_singles():
      is_single = is_special | (maybe_long & (tf.strings.length(words, unit="UTF8_CHAR") > self.max_chars_per_word))
      pieces = self._wordpiece.tokenize(tf.where(is_single, "", words))  # "" gives no pieces.
      singles = tf.RaggedTensor.from_row_lengths(tf.boolean_mask(special_id, is_single), tf.cast(is_single, tf.int64))
      return tf.concat([pieces, singles], axis=1)

    return tf.cond(tf.reduce_any(maybe_long | is_special), with_singles, lambda: self._wordpiece.tokenize(words))
