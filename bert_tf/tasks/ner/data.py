"""CoNLL-2003 named-entity recognition: the column files -> sentences -> WordPiece windows with one label per
word, on its first piece (the BERT paper, section 5.3).

Your own data may also be JSON lines (a `.json` or `.jsonl` file: `train.jsonl`, `dev.jsonl`, `test.jsonl` in
--data_dir): one sentence a line, `{"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]}`, all one document;
its tags are read as a column file's are, and errors name the sentence's line.

Reading. The CoNLL-2003 release has one token a line, `word POS chunk NER` separated by spaces, a blank line
between sentences and a `-DOCSTART- -X- -X- O` line opening each document. Any number of columns (2 or more)
is read, the same on every line of a file: the word is the first, the tag the last. The tags are one of

  IOB1   the release's: I-X inside an entity, B-X only to open one right after another of the same type
  IOB2   many copies': B-X opens every entity, I-X continues it
  BIOES  B-X opens, I-X continues, E-X ends an entity of several words; S-X is a one-word entity

detected from the file (`scheme="auto"`) or given. A tag of the wrong form is an error naming the file and
line. Detection goes by how the file opens its entities: I-X after O (IOB1's way) or B-X after O (IOB2's);
where both occur, the majority wins and the others are read as conlleval reads them and counted
(`ConllFile.irregular`): the CoNLL-2003 release's eng.train is IOB1 with a few B-X after O. A broken BIOES
entity (unclosed, unopened) is an error naming the line. A given scheme is trusted likewise, except E-/S- tags
in an IOB1 or IOB2 file, which are an error. The scheme found is reported (`ConllFile.scheme`).

Plain tag sets. Tags that are not entities - part of speech (NN, VBZ, ...) or any label per word - are read
as they are (`PLAIN`, `--tag_scheme=plain`): found by auto when no tag is an entity tag (`plain_or_entities`;
a file that mixes both is an error naming the line, as is a tag that is not an entity tag under a given
entity scheme). The task is then word-level tagging: the model's labels are the training file's tags, sorted
(`plain_labels`), trained and predicted at each word's first piece as entity labels are, scored per word
(`ner_metrics.evaluate_tags`).

Labels. The model predicts in one scheme (`label_scheme`: IOB2 or BIOES) over the entity types of the training
file: labels `O`, then per type (sorted) B-, I- (and E-, S-). Tags of any scheme convert to any other through
their entities (`convert_tags`), which are read with conlleval's rules (`ner_metrics.entities`); predictions
are written back in the file's scheme.

Windows (T = max_seq_length). Every word becomes its WordPieces (`FullTokenizer.tokenize(word)`; a word that
tokenizes to nothing, such as a lone control character, becomes [UNK], so that every word has a first piece).
A sentence is cut into centres of at most T - 2 pieces (whole words; a word longer than that keeps its first
T - 2 pieces). Each centre makes one window:

  input_ids    [CLS] left context, centre, right context [SEP], zero-padded to T; segment_ids all 0
  label_ids    the label of each centre word at its first piece, 0 elsewhere
  label_mask   1 at the first piece of each centre word, 0 elsewhere: the positions the loss and the
               predictions use; other pieces, context and padding are ignored

The context is the pieces before and after the centre in its sentence (`document_context=False`: only a long
sentence has any), or in its document (`document_context=True`, the paper's "maximal document context": the
neighbouring sentences of the document fill the window). The room left, T - 2 - centre, is split evenly
between the two sides; a side with less to give leaves the rest to the other.

Pure Python (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Iterator, Sequence

from bert_tf import fileio
from bert_tf.data import text_io
from bert_tf.tasks.ner.metrics import OUTSIDE, entities, split_tag

SCHEMES = ("IOB1", "IOB2", "BIOES")
PLAIN = "plain"  # a tag set that is not entities (part of speech, any label per word): each tag is a label
TAG_SCHEMES = (*SCHEMES, PLAIN)
LABEL_SCHEMES = ("IOB2", "BIOES")
DOCSTART = "-DOCSTART-"
# The files of a data dir, by split: the CoNLL-2003 release's names first, then a common copy's.
SPLIT_FILES = {"train": ("eng.train", "train.txt", "train.jsonl", "train.json"),
               "dev": ("eng.testa", "valid.txt", "dev.txt", "dev.jsonl", "dev.json"),
               "test": ("eng.testb", "test.txt", "test.jsonl", "test.json")}
_COLUMN_SEPARATOR = re.compile(r"[ \t]+")  # not str.split(): a no-break space stays inside a word


@dataclasses.dataclass(frozen=True)
class NerSentence:
  """One sentence: its words and tags as in the file, the line of its first word, and its document's index.
  one_line: the whole sentence is on `line` (JSON lines), not a word a line."""

  words: tuple[str, ...]
  tags: tuple[str, ...]
  line: int
  document: int
  one_line: bool = False

  def word_line(self, i: int) -> int:
    """The line of word `i` (0-based): errors name it."""
    return self.line if self.one_line else self.line + i


@dataclasses.dataclass(frozen=True)
class ConllFile:
  """A read file: its sentences, the tag scheme found (or given), the entity types (sorted) and documents."""

  path: str
  sentences: list[NerSentence]
  scheme: str
  types: tuple[str, ...]
  num_documents: int
  num_columns: int
  irregular: int = 0  # tags the given scheme does not allow, read as conlleval reads them
  first_irregular: str = ""  # "line N: what" of the first of them

  @property
  def num_words(self) -> int:
    return sum(len(s.words) for s in self.sentences)


# -- Reading ----------------------------------------------------------------------------------------------------


def _decode(data: bytes, path: str) -> str:
  try:
    return data.decode("utf-8-sig")
  except UnicodeDecodeError as e:
    line = data[:e.start].count(b"\n") + 1
    raise ValueError(f"{path}:{line}: byte 0x{data[e.start]:02x} is not UTF-8 ({e.reason}); convert the file to "
                     "UTF-8 (e.g. iconv -f latin1 -t utf-8)") from None


def parse_conll(data: bytes, path: str, scheme: str = "auto") -> ConllFile:
  """The bytes of a CoNLL file -> its sentences (`read_conll` without the file; `path` names it in errors)."""
  _check_scheme_name(scheme)
  text = _decode(data, path)
  sentences: list[NerSentence] = []
  words: list[str] = []
  tags: list[str] = []
  lines: list[int] = []
  document, documents_seen, columns = 0, False, 0

  def close():
    if words:
      sentences.append(NerSentence(tuple(words), tuple(tags), lines[0], document))
      words.clear(), tags.clear(), lines.clear()

  for number, line in enumerate(text.split("\n"), 1):
    line = line.strip(" \t\r")
    if not line:
      close()
      continue
    fields = _COLUMN_SEPARATOR.split(line)
    if fields[0] == DOCSTART:
      close()
      document += documents_seen  # the first -DOCSTART- opens document 0
      documents_seen = True
      continue
    if not columns:
      columns = len(fields)
      if columns < 2:
        raise ValueError(f"{path}:{number}: 1 column ({line!r}); CoNLL lines hold a word and its tag, e.g. "
                         "'EU NNP B-NP I-ORG'")
    elif len(fields) != columns:
      raise ValueError(f"{path}:{number}: {len(fields)} columns, the file's first word line has {columns}; every "
                       "line holds the same columns (word ... tag)")
    words.append(fields[0])
    tags.append(fields[-1])
    lines.append(number)
  close()
  if not sentences:
    raise ValueError(f"{path}: holds no sentences; expected CoNLL lines 'word POS chunk NER' with a blank line "
                     "between sentences")
  return _conll_file(path, sentences, scheme, document + 1, columns)


def _check_scheme_name(scheme: str) -> None:
  if scheme != "auto" and scheme not in TAG_SCHEMES:
    raise ValueError(f"--tag_scheme={scheme}: choose auto or one of {', '.join(TAG_SCHEMES)}")


def _conll_file(path: str, sentences: list[NerSentence], scheme: str, num_documents: int,
                num_columns: int) -> ConllFile:
  if plain_or_entities(sentences, path, scheme) == PLAIN:
    return ConllFile(path, sentences, PLAIN, (), num_documents, num_columns)
  found, irregular, first_irregular = check_scheme(sentences, path, scheme)
  types = sorted({split_tag(t)[1] for s in sentences for t in s.tags} - {""})
  return ConllFile(path, sentences, found, tuple(types), num_documents, num_columns, irregular, first_irregular)


def _where(path: str, sentence: NerSentence, i: int) -> str:
  """"path:line: " of word `i`'s tag (JSON lines: "path:line: column 'tags': ")."""
  return f"{path}:{sentence.word_line(i)}: " + ("column 'tags': " if sentence.one_line else "")


def _is_entity_tag(tag: str) -> bool:
  try:
    split_tag(tag)
  except ValueError:
    return False
  return True


def plain_or_entities(sentences: Sequence[NerSentence], path: str, scheme: str = "auto") -> str:
  """PLAIN when the tags are a plain tag set, else `scheme` (an entity scheme, or "auto" to detect which).

  auto: plain when no tag is an entity tag (B-, I-, E-, S- and a type; a lone O is both), entities when all
  are; a file with both is an error naming the first tag that is not an entity tag and the first that is (a
  typo in an entity file should not turn it into another task). A given entity scheme: every tag must be an
  entity tag. PLAIN: any tag."""
  _check_scheme_name(scheme)
  if scheme == PLAIN:
    return PLAIN
  other = entity = None  # (sentence, index) of the first tag that is not an entity tag, and of one that is
  for sentence in sentences:
    for i, tag in enumerate(sentence.tags):
      if not _is_entity_tag(tag):
        other = other or (sentence, i)
      elif tag != OUTSIDE:
        entity = entity or (sentence, i)
    if other and entity:
      break
  if other is None:
    return scheme
  if scheme == "auto" and entity is None:
    return PLAIN
  sentence, i = other
  tag = sentence.tags[i]
  if scheme == "auto":
    fix = (f"line {entity[0].word_line(entity[1])} has the entity tag {entity[0].tags[entity[1]]}: fix the tag, or "
           f"pass --tag_scheme={PLAIN} to learn every tag as a label of its own")
  else:
    fix = f"--tag_scheme={scheme} reads entity tags: fix the tag, or pass --tag_scheme={PLAIN} (or auto)"
  raise ValueError(f"{_where(path, sentence, i)}unknown tag {tag!r}: expected O or B-, I-, E-, S- followed by an "
                   f"entity type (e.g. B-PER); {fix}")


def parse_json_lines(data: bytes, path: str, scheme: str = "auto") -> ConllFile:
  """The bytes of a JSON lines file, one `{"tokens": [...], "tags": [...]}` sentence a line (other keys are
  ignored) -> its sentences, one document (`parse_conll`'s result; `num_columns` 2: a word and its tag)."""
  _check_scheme_name(scheme)
  sentences: list[NerSentence] = []
  lines = _decode(data, path).split("\n")
  for number, record in text_io.json_objects(lines, path, '{"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]}'):
    for key in ("tokens", "tags"):
      value = record.get(key)
      if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        found = "it has " + ", ".join(repr(k) for k in record) if key not in record else "not a list of words"
        raise ValueError(f"{path}:{number}: column {key!r}: give a list of non-empty strings ({found})")
    # Tags without the spaces around them, as a CoNLL file's columns are ("B-PER " is B-PER).
    tokens, tags = record["tokens"], [tag.strip() for tag in record["tags"]]
    if not tokens or len(tokens) != len(tags):
      raise ValueError(f"{path}:{number}: {len(tokens)} tokens and {len(tags)} tags; give one tag per token, "
                       "and at least one token")
    sentences.append(NerSentence(tuple(tokens), tuple(tags), number, 0, one_line=True))
  if not sentences:
    raise ValueError(f"{path}: holds no sentences; give one JSON object a line, "
                     '{"tokens": [...], "tags": [...]}')
  return _conll_file(path, sentences, scheme, 1, 2)


def read_conll(path: str, scheme: str = "auto") -> ConllFile:
  """Reads a CoNLL-2003 style file, or JSON lines (a .json or .jsonl file), local or gs://; see the module
  docstring.

  Args:
    scheme: "auto" (detect plain tags, or IOB1, IOB2 or BIOES), or the file's scheme (see the module
      docstring).
  Raises FileNotFoundError for a missing file; ValueError naming the file and line for bytes that are not
  UTF-8, a line with another number of columns than the first, an unknown tag, tags that fit no one scheme
  (auto) or E-/S- tags in a given IOB1 or IOB2 file, and a file without sentences.
  """
  if not fileio.exists(path):
    raise FileNotFoundError(f"{path}: no such CoNLL file")
  with fileio.open_file(path, "rb") as f:
    data = f.read()
  if path.lower().endswith((".json", ".jsonl")):
    return parse_json_lines(data, path, scheme)
  return parse_conll(data, path, scheme)


def split_file(data_dir: str, split: str) -> str:
  """The file of `split` ("train", "dev", "test") in `data_dir`: the release's name (eng.train, eng.testa,
  eng.testb) or a copy's (train.txt, valid.txt or dev.txt, test.txt). Raises FileNotFoundError when there is
  none and ValueError when several are there."""
  names = SPLIT_FILES[split]
  found = [name for name in names if fileio.exists(os.path.join(data_dir, name))]
  if not found:
    raise FileNotFoundError(f"--data_dir={data_dir}: no {split} file ({' or '.join(names)})")
  if len(found) > 1:
    raise ValueError(f"--data_dir={data_dir}: holds {' and '.join(found)} for the {split} split; keep one")
  return os.path.join(data_dir, found[0])


# -- Tag schemes ------------------------------------------------------------------------------------------------


def _sequence_problems(tags: Sequence[str]) -> Iterator[tuple[int, str, str]]:
  """(index, kind, message) of each place where `tags` breaks a scheme. Kinds: "iob1" (I-X opens an entity:
  IOB1 only), "iob2" (B-X opens an entity after O, another type or the start: IOB2 only), "bioes" (E-/S-),
  "unclosed" (a BIOES B-/I- not followed by I-/E- of its type), "unopened" (a BIOES I-/E- without B-/I- of its
  type before)."""
  prev, prev_type = OUTSIDE, ""
  for i, tag in enumerate([*tags, OUTSIDE]):
    prefix, kind = split_tag(tag)
    continues = prev in ("B", "I") and prev_type == kind
    if i < len(tags):
      if prefix in ("E", "S"):
        yield i, "bioes", f"{tag} is a BIOES tag"
      if prefix == "I" and not continues:
        yield i, "iob1", f"{tag} opens an entity (after {_describe(prev, prev_type, i)})"
      if prefix == "B" and not continues:
        yield i, "iob2", f"{tag} opens an entity after {_describe(prev, prev_type, i)}"
      if prefix == "E" and not continues:
        yield i, "unopened", f"{tag} ends an entity that no B-{kind} opened"
    if prev in ("B", "I") and not (prefix in ("I", "E") and continues):
      yield i - 1, "unclosed", f"{prev}-{prev_type} is not followed by I-{prev_type} or E-{prev_type}"
    prev, prev_type = prefix, kind


def _describe(prefix: str, kind: str, index: int) -> str:
  if index == 0:
    return "the sentence start"
  return OUTSIDE if prefix == OUTSIDE else f"{prefix}-{kind}"


# Which problems each scheme forbids.
_FORBIDDEN = {"IOB1": ("bioes", "iob2"), "IOB2": ("bioes", "iob1"), "BIOES": ("iob1", "unclosed", "unopened")}


def check_scheme(sentences: Sequence[NerSentence], path: str, scheme: str = "auto") -> tuple[str, int, str]:
  """-> (the scheme of `sentences`' tags, how many tags it does not allow, "line N: what" of the first).

  "auto": the scheme detected: BIOES when E- or S- tags occur; IOB1 when I- tags open entities, IOB2 when B-
  tags open them after O (or neither: a file without entities, which all schemes read alike); where both
  occur, the one that opens more entities, the others counted as irregular (the CoNLL-2003 release itself is
  IOB1 with a few B- tags after O, e.g. eng.train's "the Atlanta Games"). A BIOES file with an unclosed or
  unopened entity raises ValueError naming the file and line. A given scheme is trusted: the tags it does not
  allow are counted (conlleval's reading gives them a meaning), except E-/S- tags in IOB1 or IOB2, which
  raise."""
  first: dict[str, tuple[int, str]] = {}  # kind -> (line, message) of its first occurrence
  counts: dict[str, int] = {}
  for sentence in sentences:
    for i, kind, message in _sequence_problems(sentence.tags):
      # Sentences are blank-line separated, so a sentence's tags sit on consecutive lines: line + i is exact.
      first.setdefault(kind, (sentence.word_line(i), message))
      counts[kind] = counts.get(kind, 0) + 1
  given = scheme != "auto"
  if not given:
    if "bioes" in first:
      scheme = "BIOES"
    else:  # The scheme that opens more entities its own way; IOB2 for a file that has no entities.
      scheme = "IOB1" if counts.get("iob1", 0) > counts.get("iob2", 0) else "IOB2"
  bad = sorted(first[kind] for kind in _FORBIDDEN[scheme] if kind in first)
  # Irregular IOB tags have conlleval's reading; a broken BIOES entity (auto) or E-/S- in IOB (given) has none.
  if bad and (not given and scheme == "BIOES" or given and "bioes" in first and scheme != "BIOES"):
    line, message = first["bioes"] if given else bad[0]
    fix = "pass --tag_scheme=BIOES or auto" if given else \
        f"fix the tags, or pass --tag_scheme={scheme} to read them as conlleval does"
    raise ValueError(f"{path}:{line}: {message}: not {scheme}; {fix}")
  irregular = sum(counts[kind] for kind in _FORBIDDEN[scheme] if kind in counts)
  return scheme, irregular, (f"line {bad[0][0]}: {bad[0][1]}" if bad else "")


def render(spans: Sequence[tuple[str, int, int]], length: int, scheme: str) -> list[str]:
  """Entities (type, first, last inclusive; in order, not overlapping) of a sentence of `length` words -> its
  tags in `scheme`."""
  tags = [OUTSIDE] * length
  previous_end, previous_type = -2, None
  for kind, first, last in spans:
    if scheme == "IOB1":
      tags[first:last + 1] = [f"I-{kind}"] * (last + 1 - first)
      if previous_end == first - 1 and previous_type == kind:
        tags[first] = f"B-{kind}"
    elif scheme == "IOB2" or first < last:
      tags[first:last + 1] = [f"B-{kind}"] + [f"I-{kind}"] * (last - first)
      if scheme == "BIOES":
        tags[last] = f"E-{kind}"
    else:
      tags[first] = f"S-{kind}"
    previous_end, previous_type = last, kind
  return tags


def convert_tags(tags: Sequence[str], scheme: str) -> list[str]:
  """A sentence's tags (any scheme, or none: predicted tags may break every scheme) -> the same entities,
  read by conlleval's rules, written in `scheme`."""
  if scheme not in SCHEMES:
    raise ValueError(f"scheme {scheme!r}: choose one of {', '.join(SCHEMES)}")
  return render(entities(tags), len(tags), scheme)


def labels_for(types: Sequence[str], label_scheme: str) -> tuple[str, ...]:
  """The model's labels: O (id 0), then for each type (sorted) its B-, I- (and for BIOES E-, S-) tags."""
  if label_scheme not in LABEL_SCHEMES:
    raise ValueError(f"--label_scheme={label_scheme}: choose one of {', '.join(LABEL_SCHEMES)}")
  prefixes = ("B", "I") if label_scheme == "IOB2" else ("B", "I", "E", "S")
  return (OUTSIDE, *(f"{p}-{kind}" for kind in sorted(types) for p in prefixes))


def plain_labels(conlls: Sequence[ConllFile]) -> tuple[str, ...]:
  """The model's labels for a plain tag set: the tags of `conlls` (the training file), sorted (numerically when
  every tag is an integer, as run_classifier.py sorts labels)."""
  from bert_tf.tasks.common.labels import sorted_labels

  return sorted_labels([t for conll in conlls for s in conll.sentences for t in s.tags])


def check_tags(conll: ConllFile, labels: Sequence[str], what: str) -> None:
  """Raises ValueError naming the file and line of the first tag that is not among `labels` (a plain tag set's:
  the training file's tags) - a tag the model never learnt."""
  known = set(labels)
  for sentence in conll.sentences:
    for i, tag in enumerate(sentence.tags):
      if tag not in known:
        raise ValueError(f"{_where(conll.path, sentence, i)}unknown tag {tag!r}: {what} has the tags "
                         f"{', '.join(labels)}; fix the tag, or train on a file that has it")


def check_types(conll: ConllFile, types: Sequence[str], what: str) -> None:
  """Raises ValueError naming the file and line of the first tag whose type is not among `types` (the
  model's, from its training file)."""
  known = set(types)
  for sentence in conll.sentences:
    for i, tag in enumerate(sentence.tags):
      kind = split_tag(tag)[1]
      if kind and kind not in known:
        raise ValueError(f"{conll.path}:{sentence.word_line(i)}: unknown tag {tag}: {what} knows the types "
                         f"{', '.join(sorted(known))}")


# -- Windows ----------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NerWindow:
  """One model input: a centre (words [first_word, end_word) of sentence `sentence`) and its context.

  input_ids, input_mask, segment_ids, label_ids, label_mask: int [T] (see the module docstring).
  word_positions: the input position of each centre word's first piece, in word order.
  """

  unique_id: int
  sentence: int
  first_word: int
  end_word: int
  input_ids: list[int]
  input_mask: list[int]
  segment_ids: list[int]
  label_ids: list[int]
  label_mask: list[int]
  word_positions: list[int]


def word_pieces(tokenizer, word: str, budget: int) -> list[int]:
  """A word's WordPiece ids ([UNK] when it tokenizes to nothing), at most `budget` of them."""
  ids = tokenizer.tokenize_to_ids(word) or [tokenizer.vocab["[UNK]"]]
  return ids[:budget]


def _centres(lengths: Sequence[int], budget: int) -> Iterator[tuple[int, int]]:
  """Consecutive word ranges [first, end) of a sentence whose pieces (`lengths`) fit `budget`, greedily."""
  first, used = 0, 0
  for i, n in enumerate(lengths):
    if i > first and used + n > budget:
      yield first, i
      first, used = i, 0
    used += n
  if lengths:
    yield first, len(lengths)


def make_windows(sentences: Sequence[NerSentence], tokenizer, max_seq_length: int, document_context: bool,
                 label_ids: dict[str, int] | None = None, label_scheme: str = "IOB2") -> list[NerWindow]:
  """Sentences -> windows, in order (see the module docstring). `label_ids` maps the model's labels (in
  `label_scheme`, or PLAIN: the tags themselves) to ids; the sentences' tags are converted to that scheme. None:
  no labels (all 0)."""
  if max_seq_length < 3:
    raise ValueError(f"--max_seq_length={max_seq_length}: must be at least 3 ([CLS] word [SEP])")
  budget = max_seq_length - 2
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  windows: list[NerWindow] = []
  # The context a sentence sees: its document (consecutive sentences of one document) or itself.
  groups: list[list[int]] = []
  for index, sentence in enumerate(sentences):
    if document_context and groups and sentences[groups[-1][-1]].document == sentence.document:
      groups[-1].append(index)
    else:
      groups.append([index])
  for group in groups:
    pieces = [[word_pieces(tokenizer, w, budget) for w in sentences[s].words] for s in group]
    stream = [p for words in pieces for piece in words for p in piece]
    offset = 0  # of the current sentence's first piece in `stream`
    for s, words in zip(group, pieces):
      sentence = sentences[s]
      labels = None
      if label_ids is not None:
        tags = sentence.tags if label_scheme == PLAIN else convert_tags(sentence.tags, label_scheme)
        labels = [label_ids[t] for t in tags]
      starts = [0]
      for word in words:
        starts.append(starts[-1] + len(word))
      for first, end in _centres([len(w) for w in words], budget):
        lo, hi = offset + starts[first], offset + starts[end]
        room = budget - (hi - lo)
        left = min(lo, max(room // 2, room - (len(stream) - hi)))
        right = min(len(stream) - hi, room - left)
        ids = [cls_id, *stream[lo - left:hi + right], sep_id]
        positions = [1 + left + starts[w] - starts[first] for w in range(first, end)]
        label_row, mask_row = [0] * max_seq_length, [0] * max_seq_length
        for w, position in zip(range(first, end), positions):
          mask_row[position] = 1
          label_row[position] = labels[w] if labels is not None else 0
        pad = [0] * (max_seq_length - len(ids))
        windows.append(NerWindow(len(windows), s, first, end, ids + pad, [1] * len(ids) + pad,
                                 [0] * max_seq_length, label_row, mask_row, positions))
      offset += starts[-1]
  return windows


def predicted_tags(windows: Sequence[NerWindow], label_of_window: Sequence[Sequence[int]],
                   sentences: Sequence[NerSentence], labels: Sequence[str]) -> list[list[str]]:
  """Each sentence's predicted labels (in the model's scheme) from its windows: `label_of_window[i]` holds
  the predicted label id at every input position of window i (e.g. the argmax of its logits [T, K])."""
  tags: list[list[str | None]] = [[None] * len(s.words) for s in sentences]
  for window, predicted in zip(windows, label_of_window):
    for w, position in zip(range(window.first_word, window.end_word), window.word_positions):
      tags[window.sentence][w] = labels[int(predicted[position])]
  for i, row in enumerate(tags):
    if any(t is None for t in row):
      raise ValueError(f"sentence {i}: words without a window; give the windows made from these sentences")
  return tags  # type: ignore[return-value]
