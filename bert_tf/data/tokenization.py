"""WordPiece vocabulary files and the BERT tokenizer, in pure Python and in-graph.

Both tokenizers give exactly the ids of google-research/bert's `tokenization.FullTokenizer` (the reference):

1. Clean: drop U+0000, U+FFFD and control characters (Unicode Cc and Cf, except \\t \\n \\r); map whitespace
   (space, \\t \\n \\r, Zs) to a space.
2. Put spaces around every CJK ideograph (the reference's code-point ranges).
3. Split on whitespace as Python's `str.split()` does, which also splits on U+2028 and U+2029.
4. Uncased only, per whitespace-separated chunk: `str.lower()` (so Greek final sigma is context-sensitive and
   U+0130 becomes "i" plus U+0307), NFD, drop nonspacing marks (Mn).
5. Split off each punctuation character (ASCII 33-47, 58-64, 91-96, 123-126 and Unicode P*) as its own word.
6. WordPiece: greedy longest-match-first with "##" continuations; a word longer than `max_chars_per_word`
   code points (200, as in the reference), or one with no complete match, becomes [UNK] as a whole.

`preserve_special_tokens=True` additionally keeps the five special tokens typed literally in text (the exact,
case-sensitive strings, wherever they occur) as whole tokens; the text between them is tokenized as above.

The character classes are computed once from this Python's `unicodedata` and given to the in-graph tokenizer as
explicit RE2 code-point ranges, so both agree on every code point whatever Unicode version RE2 was built with.
Lower-casing and NFD in-graph use TensorFlow's ICU, whose Unicode version differs from Python's; code points
where that matters (see `_icu_fixups`) are routed around ICU, so the two tokenizers agree on all of Unicode.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
import sys
import unicodedata
from typing import Iterator, Mapping, Sequence

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
UNK_TOKEN = "[UNK]"
# The special tokens every use of a trained model reads: [UNK] for a word its vocabulary cannot spell, [CLS] and
# [SEP] around each input. [PAD] and [MASK] only pretraining reads (its records and its masking), so fine-tuning,
# feature extraction, export and conversion accept a vocabulary without them.
MODEL_TOKENS = ("[UNK]", "[CLS]", "[SEP]")
# A trained model's vocabulary that lacks them is not the one it was trained with (every BERT vocabulary holds
# them), and cannot be mended: the model's embedding rows follow its lines.
MODEL_VOCAB_FIX = "give the vocab.txt the model was trained with (every BERT vocabulary holds them)"
NEW_VOCAB_FIX = ("add them as lines of the file (by convention [PAD] is line 1, then [UNK] [CLS] [SEP] [MASK]) or "
                 "learn a new vocabulary with scripts/learn_vocab.py, which puts them first")
# google-research's WordpieceTokenizer(max_input_chars_per_word=200); Hugging Face's BertTokenizer uses 100.
DEFAULT_MAX_CHARS_PER_WORD = 200
SUFFIX_INDICATOR = "##"

# The reference's "CJK Unified Ideographs" ranges (not kana or hangul, which are written with spaces).
_CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F), (0x2B740, 0x2B81F),
               (0x2B820, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


# ------------------------------------------------------------------------------------------------ vocab files


def load_vocab(path: str) -> dict[str, int]:
  """Reads a google-research `vocab.txt` (local or gs://): one token a line, id = 0-based line number.

  Lines end at "\\n" only and are stripped, as the reference reads them. Raises FileNotFoundError if `path` is
  missing and ValueError if a token appears twice, since the reference then silently shifts every later id.
  """
  from bert_tf import fileio

  if not fileio.exists(path):
    raise FileNotFoundError(f"vocab file {path} does not exist")
  with fileio.open_file(path, "rb") as f:
    data = f.read()
  lines = data.split(b"\n")
  if lines[-1] == b"":  # The newline that ends the last line does not start another token.
    lines.pop()
  tokens = []
  for number, raw in enumerate(lines, start=1):
    try:
      tokens.append(raw.decode("utf-8").strip())
    except UnicodeDecodeError as e:
      raise ValueError(f"{path}:{number}: not valid UTF-8 ({e.reason}); re-encode the vocab file as UTF-8") from None
  return _index_tokens(tokens, f"vocab file {path}")


def _index_tokens(tokens: Sequence[str], source: str) -> dict[str, int]:
  vocab: dict[str, int] = {}
  for i, token in enumerate(tokens):
    first = vocab.setdefault(token, i)
    if first != i:
      raise ValueError(
          f"{source}: token {token!r} appears on line {first + 1} and again on line {i + 1}; ids are line "
          "numbers, so the vocabulary is ambiguous. Remove one of the two lines.")
  return vocab


def save_vocab(tokens: Sequence[str], path: str) -> None:
  """Writes `tokens` one a line (id = line number), atomically; rejects tokens `load_vocab` would not give back."""
  from bert_tf.fileio import write_text_atomic

  _index_tokens(tokens, f"vocabulary for {path}")
  for i, token in enumerate(tokens):
    if not token or token != token.strip() or "\n" in token:
      raise ValueError(f"vocabulary for {path}: token {i} ({token!r}) is empty or has surrounding whitespace or "
                       "a newline, so it would not read back as written")
  write_text_atomic(path, "".join(token + "\n" for token in tokens))


def check_special_tokens(vocab: Mapping[str, int], path: str, required: Sequence[str] = SPECIAL_TOKENS,
                         fix: str = NEW_VOCAB_FIX) -> None:
  """Raises ValueError, one line naming `path` (where `vocab` was read: a file, or a flag and its file) and the
  tokens of `required` that `vocab` lacks, then `fix`: what to do (by default, for a vocabulary of new records,
  how to add them; a trained model's vocabulary cannot gain tokens, so its readers say which file to give)."""
  missing = [token for token in required if token not in vocab]
  if missing:
    raise ValueError(f"{path}: has no {' '.join(missing)}, which BERT needs; {fix}")


def _vocab_tokens(vocab: str | Sequence[str] | Mapping[str, int]) -> tuple[list[str], dict[str, int], str]:
  """A path, a token list or a token->id mapping -> (tokens by id, token->id, a name for error messages)."""
  if isinstance(vocab, str):
    index = load_vocab(vocab)
    return list(index), index, vocab
  if isinstance(vocab, Mapping):
    index = dict(vocab)
    tokens = sorted(index, key=index.__getitem__)
    if [index[t] for t in tokens] != list(range(len(tokens))):
      raise ValueError("vocab mapping: ids must be exactly 0 .. len(vocab) - 1")
    return tokens, index, "(in-memory mapping)"
  tokens = list(vocab)
  return tokens, _index_tokens(tokens, "vocab list"), "(in-memory list)"


# ----------------------------------------------------------------------------------------- character classes

Ranges = tuple[tuple[int, int], ...]


@dataclasses.dataclass(frozen=True)
class _CharClasses:
  """Code-point ranges of each class the tokenizer distinguishes, from this Python's Unicode database."""

  removed: Ranges  # U+0000, U+FFFD, Cc and Cf other than \t \n \r.
  whitespace: Ranges  # Space, \t \n \r, Zs, and what str.split() also splits on (U+2028, U+2029).
  punctuation: Ranges  # ASCII 33-47, 58-64, 91-96, 123-126 and Unicode P*.
  marks: Ranges  # Mn: dropped after NFD when lower-casing.
  unassigned: Ranges  # Cn (and noncharacters): letters to the reference; ICU may know them as something else.


def _to_ranges(code_points: Sequence[int]) -> Ranges:
  ranges: list[tuple[int, int]] = []
  for cp in code_points:
    if ranges and ranges[-1][1] == cp - 1:
      ranges[-1] = (ranges[-1][0], cp)
    else:
      ranges.append((cp, cp))
  return tuple(ranges)


def _merge(ranges: list[tuple[int, int]]) -> Ranges:
  """Sorted, with overlapping or adjacent ranges joined."""
  out: list[list[int]] = []
  for lo, hi in sorted(ranges):
    if out and lo <= out[-1][1] + 1:
      out[-1][1] = max(out[-1][1], hi)
    else:
      out.append([lo, hi])
  return tuple((lo, hi) for lo, hi in out)


@functools.lru_cache(maxsize=None)
def _char_classes() -> _CharClasses:
  """The character classes of steps 1, 4 and 5 from this Python's `unicodedata`, as code-point ranges.

  Built from runs of equal category (the category of every code point is computed in C and grouped), a few
  times faster than a per-code-point Python loop, which matters because every worker process of record
  creation builds a tokenizer; `_char_classes_slow` is the plain definition, and a test checks they agree.
  """
  runs: dict[str, list[tuple[int, int]]] = {}
  start = 0
  for category, run in itertools.groupby(map(unicodedata.category, map(chr, range(sys.maxunicode + 1)))):
    end = start + sum(1 for _ in run)
    runs.setdefault(category, []).append((start, end - 1))
    start = end
  # \t \n \r are Cc but whitespace; U+FFFD is removed; Zl and Zp (U+2028, U+2029) split like spaces in
  # str.split(), so in the reference too; the ASCII symbols ($ + < = > ^ ` | ~ ...) count as punctuation.
  removed = runs["Cc"] + runs["Cf"] + [(0xFFFD, 0xFFFD)]
  for cp in (9, 10, 13):
    removed = [r for r in _split_ranges(tuple(removed), cp) if r != (cp, cp)]
  whitespace = runs["Zs"] + runs["Zl"] + runs["Zp"] + [(9, 9), (10, 10), (13, 13)]
  punctuation = [r for c, rs in runs.items() if c.startswith("P") for r in rs]
  punctuation += [(33, 47), (58, 64), (91, 96), (123, 126)]
  return _CharClasses(_merge(removed), _merge(whitespace), _merge(punctuation), _merge(runs["Mn"]),
                      _merge(runs["Cn"]))


def _char_classes_slow() -> _CharClasses:
  """The per-code-point definition of `_char_classes` (used by the tests)."""
  removed, whitespace, punctuation, marks, unassigned = [], [], [], [], []
  ascii_symbols = set(range(33, 48)) | set(range(58, 65)) | set(range(91, 97)) | set(range(123, 127))
  for cp in range(sys.maxunicode + 1):
    char = chr(cp)
    category = unicodedata.category(char)
    if char in "\t\n\r" or category == "Zs" or (char.isspace() and category not in ("Cc", "Cf")):
      whitespace.append(cp)
    elif cp in (0, 0xFFFD) or category in ("Cc", "Cf"):
      removed.append(cp)
    elif cp in ascii_symbols or category.startswith("P"):
      punctuation.append(cp)
    elif category == "Mn":
      marks.append(cp)
    elif category == "Cn":
      unassigned.append(cp)
  return _CharClasses(*map(_to_ranges, (removed, whitespace, punctuation, marks, unassigned)))


def _split_ranges(ranges: Ranges, cp: int) -> Ranges:
  """`ranges` with `cp` in a range of its own (if present)."""
  out = []
  for lo, hi in ranges:
    if lo <= cp <= hi:
      out.extend(r for r in ((lo, cp - 1), (cp, cp), (cp + 1, hi)) if r[0] <= r[1])
    else:
      out.append((lo, hi))
  return tuple(out)


def _re2_class(ranges: Ranges) -> str:
  """RE2 character class matching exactly `ranges` (every code point spelled \\x{..}, so nothing needs escaping)."""
  parts = (f"\\x{{{lo:X}}}" if lo == hi else f"\\x{{{lo:X}}}-\\x{{{hi:X}}}" for lo, hi in ranges)
  return "[" + "".join(parts) + "]"


def _py_class_body(ranges: Ranges) -> str:
  """Body of a Python `re` character class matching exactly `ranges`."""
  return "".join(f"\\U{lo:08x}" if lo == hi else f"\\U{lo:08x}-\\U{hi:08x}" for lo, hi in ranges)


def _re2_literal_alternation(tokens: Sequence[str]) -> str:
  return "|".join("".join(f"\\x{{{ord(c):X}}}" for c in token) for token in tokens)


# ----------------------------------------------------------------------------------------------- pure Python

_CJK_RE = re.compile("[" + _py_class_body(_CJK_RANGES) + "]")


# ASCII characters that step 1 removes or maps to a space (all below U+0020, and DEL).
_ASCII_CONTROL_RE = re.compile("[\x00-\x1f\x7f]")


class BasicTokenizer:
  """Steps 1-5 of the module docstring: text -> words (no vocabulary needed). Pure Python."""

  def __init__(self, do_lower_case: bool = True, preserve_special_tokens: bool = False,
               special_tokens: Sequence[str] = SPECIAL_TOKENS):
    classes = _char_classes()
    self.do_lower_case = do_lower_case
    self._clean_table = {cp: None for lo, hi in classes.removed for cp in range(lo, hi + 1)}
    self._clean_table.update({cp: " " for lo, hi in classes.whitespace for cp in range(lo, hi + 1)})
    self._marks_table = {cp: None for lo, hi in classes.marks for cp in range(lo, hi + 1)}
    punctuation = _py_class_body(classes.punctuation)
    self._words_re = re.compile(f"[{punctuation}]|[^{punctuation}\\s]+")
    self._special_re = None
    if preserve_special_tokens and special_tokens:
      self._special_re = re.compile("(" + "|".join(map(re.escape, special_tokens)) + ")")

  def tokenize(self, text: str | bytes) -> list[str]:
    words: list[str] = []
    for chunk, is_special in self.chunks(text):
      if is_special:
        words.append(chunk)
      else:
        words.extend(self.chunk_words(chunk))
    return words

  def chunks(self, text: str | bytes) -> Iterator[tuple[str, bool]]:
    """Yields (whitespace-separated chunk after steps 1-3, whether it is a preserved special token)."""
    if isinstance(text, bytes):
      text = text.decode("utf-8", "ignore")  # As the reference does.
    if self._special_re is None:
      if text.isascii() and not _ASCII_CONTROL_RE.search(text):
        # Most lines of most corpora: nothing to clean, no CJK, and str.split() splits on the space only.
        for chunk in text.split():
          yield chunk, False
        return
      for chunk in _CJK_RE.sub(" \\g<0> ", text.translate(self._clean_table)).split():
        yield chunk, False
      return
    for i, piece in enumerate(self._special_re.split(text)):
      if i % 2:
        yield piece, True
      else:
        for chunk in _CJK_RE.sub(" \\g<0> ", piece.translate(self._clean_table)).split():
          yield chunk, False

  def chunk_words(self, chunk: str) -> list[str]:
    """Steps 4-5 on one chunk. Lower-casing needs the whole chunk: final sigma depends on its neighbours."""
    if self.do_lower_case:
      chunk = unicodedata.normalize("NFD", chunk.lower()).translate(self._marks_table)
    return self._words_re.findall(chunk)


class FullTokenizer:
  """Text -> WordPiece tokens and ids, exactly as the reference; pure Python, for scripts.

  Results are cached per whitespace-separated chunk, which makes real text several times faster than the
  reference.
  """

  _CACHE_LIMIT = 1 << 20

  def __init__(self, vocab: str | Mapping[str, int], do_lower_case: bool = True,
               preserve_special_tokens: bool = False, max_chars_per_word: int = DEFAULT_MAX_CHARS_PER_WORD):
    tokens, self.vocab, source = _vocab_tokens(vocab)
    check_special_tokens(self.vocab, source, SPECIAL_TOKENS if preserve_special_tokens else (UNK_TOKEN,))
    self.inv_vocab = dict(enumerate(tokens))
    self.do_lower_case = do_lower_case
    self.preserve_special_tokens = preserve_special_tokens
    self.max_chars_per_word = max_chars_per_word
    self.basic_tokenizer = BasicTokenizer(do_lower_case, preserve_special_tokens)
    # No vocabulary entry is longer than this, so longer candidate pieces need not be looked up.
    self._longest_token = max(map(len, tokens), default=0)
    self._cache: dict[str, list[str]] = {}
    self._id_cache: dict[str, list[int]] = {}

  @property
  def vocab_size(self) -> int:
    return len(self.vocab)

  @property
  def special_token_ids(self) -> dict[str, int]:
    return {token: self.vocab[token] for token in SPECIAL_TOKENS if token in self.vocab}

  def tokenize(self, text: str | bytes) -> list[str]:
    pieces: list[str] = []
    for chunk, is_special in self.basic_tokenizer.chunks(text):
      if is_special:
        pieces.append(chunk)
        continue
      cached = self._cache.get(chunk)
      if cached is None:
        cached = [p for word in self.basic_tokenizer.chunk_words(chunk) for p in self.wordpiece(word)]
        if len(self._cache) >= self._CACHE_LIMIT:
          self._cache.clear()
        self._cache[chunk] = cached
      pieces.extend(cached)
    return pieces

  def wordpiece(self, word: str) -> list[str]:
    """One word -> its pieces, greedy longest-match-first; [UNK] if too long or not fully covered."""
    if len(word) > self.max_chars_per_word:
      return [UNK_TOKEN]
    pieces = []
    start = 0
    while start < len(word):
      for end in range(min(len(word), start + self._longest_token), start, -1):
        piece = word[start:end] if start == 0 else SUFFIX_INDICATOR + word[start:end]
        if piece in self.vocab:
          pieces.append(piece)
          start = end
          break
      else:
        return [UNK_TOKEN]
    return pieces

  def tokenize_to_ids(self, text: str | bytes) -> list[int]:
    """`convert_tokens_to_ids(tokenize(text))`, with the ids of each chunk cached: the fast path of record
    creation."""
    ids: list[int] = []
    cache = self._id_cache
    for chunk, is_special in self.basic_tokenizer.chunks(text):
      if is_special:
        ids.append(self.vocab[chunk])
        continue
      cached = cache.get(chunk)
      if cached is None:
        cached = [self.vocab[p] for word in self.basic_tokenizer.chunk_words(chunk) for p in self.wordpiece(word)]
        if len(cache) >= self._CACHE_LIMIT:
          cache.clear()
        cache[chunk] = cached
      ids.extend(cached)
    return ids

  def convert_tokens_to_ids(self, tokens: Sequence[str]) -> list[int]:
    return [self.vocab[token] for token in tokens]

  def convert_ids_to_tokens(self, ids: Sequence[int]) -> list[str]:
    return [self.inv_vocab[int(i)] for i in ids]
