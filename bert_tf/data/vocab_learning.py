"""Learning a WordPiece vocabulary from text.

Words are counted with our own `BasicTokenizer` (the reference's cleaning, lower-casing, accent and punctuation
splitting), so every learned piece is one our tokenizer can produce. The counts go to tensorflow-text's
learner (`wordpiece_tokenizer_learner_lib.learn`, the algorithm behind `bert_vocab_from_dataset`), which
binary-searches a count threshold until the vocabulary is at most `vocab_size` and at least
`(1 - slack_ratio) * vocab_size` tokens long (5 % by default), given enough distinct text to reach it.
"""

from __future__ import annotations

import collections
import dataclasses
from typing import Callable, Iterable, Iterator, Sequence

from bert_tf.data.tokenization import SPECIAL_TOKENS, SUFFIX_INDICATOR, UNK_TOKEN, BasicTokenizer

# Fewer learned tokens than this leaves little beyond single characters; it is a typo, not a choice.
MIN_LEARNED_TOKENS = 100


class NoWordsError(ValueError):
  """The text has no word to learn from."""


def count_words(lines: Iterable[str], do_lower_case: bool) -> collections.Counter:
  """Word -> count over `lines`, words as `BasicTokenizer` splits them."""
  basic = BasicTokenizer(do_lower_case)
  # Text repeats at the chunk level, so chunks are counted first and split once each.
  chunks = collections.Counter(chunk for line in lines for chunk, _ in basic.chunks(line))
  words: collections.Counter = collections.Counter()
  for chunk, count in chunks.items():
    for word in basic.chunk_words(chunk):
      words[word] += count
  return words


def check_vocab_size(vocab_size: int, reserved_tokens: Sequence[str] = SPECIAL_TOKENS) -> None:
  least = len(reserved_tokens) + MIN_LEARNED_TOKENS
  if vocab_size < least:
    raise ValueError(f"--vocab_size={vocab_size} is too small: the {len(reserved_tokens)} reserved tokens plus at "
                     f"least {MIN_LEARNED_TOKENS} learned ones need {least}; BERT uses 30522, small models 8000")


def learn_wordpiece_vocab(lines: Iterable[str], vocab_size: int, do_lower_case: bool,
                          reserved_tokens: Sequence[str] = SPECIAL_TOKENS, *, max_token_length: int = 50,
                          max_unique_chars: int = 1000, min_count: int = 2, slack_ratio: float = 0.05,
                          num_iterations: int = 4) -> list[str]:
  """Learns a WordPiece vocabulary: tokens by id.

  Ids 0-4 are [PAD] [UNK] [CLS] [SEP] [MASK], then the other `reserved_tokens`, then every character kept (up
  to `max_unique_chars`, the most frequent) and its "##" form, then learned pieces by falling count. Pieces seen
  fewer than `min_count` times are never learned. The length is at most `vocab_size`.
  """
  check_vocab_size(vocab_size, list(SPECIAL_TOKENS) + [t for t in reserved_tokens if t not in SPECIAL_TOKENS])
  return vocab_from_counts(count_words(lines, do_lower_case), vocab_size, reserved_tokens,
                           max_token_length=max_token_length, max_unique_chars=max_unique_chars,
                           min_count=min_count, slack_ratio=slack_ratio, num_iterations=num_iterations)


def vocab_from_counts(counts: dict, vocab_size: int, reserved_tokens: Sequence[str] = SPECIAL_TOKENS, *,
                      max_token_length: int = 50, max_unique_chars: int = 1000, min_count: int = 2,
                      slack_ratio: float = 0.05, num_iterations: int = 4) -> list[str]:
  """`learn_wordpiece_vocab` from word counts already made (`count_words`, or the Beam word count of
  `bert_tf.data.beam_pipeline`): the same counts give the same vocabulary."""
  reserved = list(SPECIAL_TOKENS) + [t for t in reserved_tokens if t not in SPECIAL_TOKENS]
  check_vocab_size(vocab_size, reserved)
  if not counts:
    raise NoWordsError("no words to learn a vocabulary from: the input is empty or only whitespace")
  vocab = _learner().learn(
      counts, vocab_size, reserved, lower_thresh=min_count, max_token_length=max_token_length,
      max_unique_chars=max_unique_chars, slack_ratio=slack_ratio, num_iterations=num_iterations,
      include_joiner_token=True, joiner=SUFFIX_INDICATOR)
  return _trim(vocab, vocab_size, len(reserved))


def _learner():
  """tensorflow-text's WordPiece learner (`wordpiece_tokenizer_learner_lib`: plain Python and numpy), loaded from
  its file when TensorFlow is not loaded yet: importing it by its package name first runs tensorflow_text's
  `__init__`, which starts TensorFlow (about 3 s of CPU) for nothing."""
  import importlib
  import importlib.util
  import os
  import sys

  name = "tensorflow_text.tools.wordpiece_vocab.wordpiece_tokenizer_learner_lib"
  if "tensorflow_text" in sys.modules:
    return importlib.import_module(name)
  package = importlib.util.find_spec("tensorflow_text")  # finds the package without importing it
  path = os.path.join(os.path.dirname(package.origin), *name.split(".")[1:]) + ".py"
  spec = importlib.util.spec_from_file_location("bert_tf.data._wordpiece_learner", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _trim(vocab: list[str], vocab_size: int, num_reserved: int) -> list[str]:
  """Drops the rarest multi-character pieces when the learner's search ran out of room above `vocab_size`.

  Single characters and their "##" forms stay: without them some words could only become [UNK].
  """
  excess = len(vocab) - vocab_size
  if excess <= 0:
    return vocab
  drop = set()
  for i in range(len(vocab) - 1, num_reserved - 1, -1):
    token = vocab[i]
    if len(token.removeprefix(SUFFIX_INDICATOR)) > 1:
      drop.add(i)
      if len(drop) == excess:
        break
  return [token for i, token in enumerate(vocab) if i not in drop]


def unk_rate(tokenizer, lines: Iterable[str]) -> float:
  """Fraction of the WordPiece tokens of `lines` that are [UNK] (0 for no tokens).

  `tokenizer` is a `FullTokenizer` or a `GraphTokenizer`.
  """
  if hasattr(tokenizer, "tokenize_lines"):
    ids, _ = tokenizer.tokenize_lines(list(lines))
    total, unknown = len(ids), int((ids == tokenizer.special_token_ids[UNK_TOKEN]).sum())
  else:
    total = unknown = 0
    for line in lines:
      tokens = tokenizer.tokenize(line)
      total += len(tokens)
      unknown += tokens.count(UNK_TOKEN)
  return unknown / total if total else 0.0


def unk_rate_from_counts(tokenizer, counts: dict) -> float:
  """`unk_rate` over the text that `counts` (word -> count, as `count_words` makes them) came from, without reading
  it again: `FullTokenizer` splits text into the same words and each word into pieces on its own."""
  total = unknown = 0
  for word, count in counts.items():
    pieces = tokenizer.wordpiece(word)
    total += count * len(pieces)
    unknown += count * pieces.count(UNK_TOKEN)
  return unknown / total if total else 0.0


@dataclasses.dataclass
class LearnedVocab:
  tokens: list[str]
  unk_rate: float  # On the training text.
  num_lines: int  # Non-blank lines read.


def learn_vocab_file(input_file: str, vocab_file: str, vocab_size: int, do_lower_case: bool,
                     reserved_tokens: Sequence[str] = SPECIAL_TOKENS,
                     counter: Callable[[list[str], bool], tuple[dict, int]] | None = None) -> LearnedVocab:
  """`scripts/learn_vocab.py`: learns from comma-separated globs of text files (plain or gzip), writes `vocab_file`.

  `counter(files, do_lower_case)` -> (word counts, non-blank lines) replaces `count_words` in this process (the
  Beam word count); the text is then not read here at all: the [UNK] rate comes from the counts.

  Raises FileNotFoundError naming a pattern that matches nothing, IsADirectoryError naming a directory,
  ValueError for a bad size or empty input (naming the files) and for a line that is not UTF-8 (file and line).
  """
  from bert_tf.data.text_io import expand_input_files, iter_lines, name_files
  from bert_tf.data.tokenization import FullTokenizer, save_vocab

  check_vocab_size(vocab_size, list(SPECIAL_TOKENS) + [t for t in reserved_tokens if t not in SPECIAL_TOKENS])
  files = expand_input_files(input_file)

  def lines() -> Iterator[str]:
    for path in files:
      for _, line in iter_lines(path):
        yield line

  try:
    if counter is None:
      tokens = learn_wordpiece_vocab(lines(), vocab_size, do_lower_case, reserved_tokens)
    else:
      counts, num_lines = counter(files, do_lower_case)
      tokens = vocab_from_counts(counts, vocab_size, reserved_tokens)
  except NoWordsError:
    raise NoWordsError(f"{name_files(files)}: no words to learn a vocabulary from (the text is empty or blank); "
                       "nothing was written") from None
  save_vocab(tokens, vocab_file)
  tokenizer = FullTokenizer(dict(zip(tokens, range(len(tokens)))), do_lower_case=do_lower_case)
  if counter is not None:
    return LearnedVocab(tokens, unk_rate_from_counts(tokenizer, counts), num_lines)
  num_lines = sum(1 for line in lines() if line)
  return LearnedVocab(tokens, unk_rate(tokenizer, lines()), num_lines)
