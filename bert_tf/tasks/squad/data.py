"""SQuAD v1.1 and v2.0: the official JSON files -> examples -> windowed features, as google-research's
`run_squad.py` makes them (`read_squad_examples`, `convert_examples_to_features`), field for field.

Reading. A context is split into "doc tokens" at whitespace (space, \\t, \\r, \\n and U+202F only: the
reference's set, so a no-break space stays inside a word), and each character gets the index of the word it
belongs to (`char_to_word_offset`; a whitespace character gets the word before it). For training, an answer's
character span becomes word positions; when the words at those positions do not contain the answer text
(after collapsing its whitespace as `str.split()` does), the reference skips the question, and so do we,
counting it (`SquadReadResult.skipped`): the annotation cannot be recovered from the words we can predict.
In SQuAD v2.0 training (`version_2_with_negative`), `is_impossible` questions have positions -1 and no answer.
As in the reference, evaluation examples carry no positions and `is_impossible` is False; the gold answers
(and v2.0's `plausible_answers`) are kept as texts for scoring, and the first one's words as training would read
them (`SquadExample.gold_words`), for the evaluation loss: `with_gold_positions` makes copies of evaluation
examples that `convert_examples_to_features` labels as training windows are labelled.

Features (T = max_seq_length, Q = question tokens after truncation to max_query_length):

  input_ids    int [T]  [CLS] question [SEP] window of the context [SEP], zero-padded
  input_mask   int [T]  1 for real tokens, 0 for padding
  segment_ids  int [T]  0 for [CLS] question [SEP], 1 for the window and its [SEP], 0 for padding

A context longer than the T - Q - 3 tokens a window holds is cut into overlapping windows whose starts are
`doc_stride` tokens apart (the last window ends at the context's end). A token seen in several windows is
scored by the window where it has the most context on both sides (`token_is_max_context`), so prediction
takes each answer from the window that saw it best. For training, the answer's WordPiece span is labelled by
its positions in the input; a window that does not hold the whole answer, and an impossible question, are
labelled 0 (the [CLS] token), which the model learns as "no answer here".

Long documents. When a context makes many windows, most training windows hold no answer, and the model learns
mostly to point at [CLS]. `keep_unknowns` keeps every window that holds its answer and each other window with a
given probability (google-research's `--include_unknowns` of its Natural Questions and TyDi QA baselines), decided
by a hash of the question id and the window's index: the same windows on every run and every machine.

Differences from the reference: bad input fails up front with one line naming the file and question
(missing keys, an answer outside its context, bytes that are not UTF-8, no questions, repeated question ids)
where the reference raises a KeyError or IndexError deep inside, or silently uses a negative index.

Pure Python (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from bert_tf import fileio

# google-research's defaults (run_squad.py flags).
MAX_SEQ_LENGTH = 384
DOC_STRIDE = 128
MAX_QUERY_LENGTH = 64
# What --num_train_epochs counts: passes over the training windows (Hugging Face's scripts), or over the
# questions they are cut from (google-research's run_squad.py: int(questions / batch * epochs) steps).
EPOCH_UNITS = ("windows", "questions")
# --include_unknowns' default: keep every window (google-research's "if positive, the probability ...").
INCLUDE_ALL_UNKNOWNS = -1.0
# Feature ids start here so they never collide with small indices (the reference's choice, kept so that
# predictions and logs line up with it).
FIRST_UNIQUE_ID = 1000000000


@dataclasses.dataclass(frozen=True)
class SquadExample:
  """One question about one context.

  doc_tokens: the context split at whitespace (shared by the questions of a paragraph).
  orig_answer_text, start_position, end_position: training only (None otherwise): the answer as written, and
    the indices into doc_tokens of its first and last word (inclusive); "" and -1, -1 for an impossible
    question.
  is_impossible: v2.0 training only (False otherwise, as in the reference).
  answers: the gold answer texts, in file order ((): none, or an impossible question); for evaluation.
  plausible_answers: v2.0's answer-looking texts of an impossible question; for analysis only.
  gold_words: evaluation only: the first gold answer's first and last word (indices into doc_tokens), as
    training reads an answer; None without answers, or when those words do not hold its text (training would
    skip the question).
  """
  qas_id: str
  question_text: str
  doc_tokens: tuple[str, ...]
  orig_answer_text: str | None = None
  start_position: int | None = None
  end_position: int | None = None
  is_impossible: bool = False
  answers: tuple[str, ...] = ()
  plausible_answers: tuple[str, ...] = ()
  gold_words: tuple[int, int] | None = None


@dataclasses.dataclass(frozen=True)
class SquadReadResult:
  """The examples of one file, and how many training questions were skipped because their answer text is not
  in the words at their position (always 0 when not training)."""
  examples: list[SquadExample]
  skipped: int
  path: str


@dataclasses.dataclass(frozen=True)
class SquadFeatures:
  """One window of one example, the model's input (T = max_seq_length).

  unique_id: FIRST_UNIQUE_ID, FIRST_UNIQUE_ID + 1, ... over all windows of all examples, in order.
  example_index: index of the example in the list given to `convert_examples_to_features`.
  doc_span_index: the window's index among its example's windows.
  tokens: the real tokens ([CLS] question [SEP] window [SEP]), no padding.
  token_to_orig_map: input position of each window token -> index of its word in the example's doc_tokens.
  token_is_max_context: input position of each window token -> whether this window scores it.
  input_ids, input_mask, segment_ids: int [T] (see the module docstring).
  start_position, end_position: training only, and evaluation windows of examples with positions
    (`with_gold_positions`; None otherwise): input positions of the answer's first and last token (inclusive);
    0, 0 when the window does not hold the whole answer or there is none.
  is_impossible: the example's.
  """
  unique_id: int
  example_index: int
  doc_span_index: int
  tokens: list[str]
  token_to_orig_map: dict[int, int]
  token_is_max_context: dict[int, bool]
  input_ids: list[int]
  input_mask: list[int]
  segment_ids: list[int]
  start_position: int | None
  end_position: int | None
  is_impossible: bool


# -- Reading ----------------------------------------------------------------------------------------------------


def _is_whitespace(c: str) -> bool:
  # The reference's set; deliberately not str.isspace(): other spaces stay inside doc tokens.
  return c in " \t\r\n" or ord(c) == 0x202F


def split_context(context: str) -> tuple[list[str], list[int]]:
  """context -> (doc tokens, char_to_word_offset int [len(context)]): each character's word index; a
  whitespace character gets the previous word's (-1 before the first word)."""
  doc_tokens: list[str] = []
  char_to_word_offset: list[int] = []
  prev_is_whitespace = True
  for c in context:
    if _is_whitespace(c):
      prev_is_whitespace = True
    else:
      if prev_is_whitespace:
        doc_tokens.append(c)
      else:
        doc_tokens[-1] += c
      prev_is_whitespace = False
    char_to_word_offset.append(len(doc_tokens) - 1)
  return doc_tokens, char_to_word_offset


class _Checker:
  """Raises one-line ValueErrors naming the file and where in it."""

  def __init__(self, path: str):
    self.path = path

  def fail(self, where: str, problem: str):
    raise ValueError(f"{self.path}: {where}: {problem}")

  def get(self, obj: Any, key: str, kind: type | tuple[type, ...], where: str):
    if not isinstance(obj, dict):
      self.fail(where, f"expected a JSON object, found {type(obj).__name__}; is this a SQuAD file?")
    if key not in obj:
      self.fail(where, f"no {key!r} key; is this a SQuAD file (v2.0 for version_2_with_negative)?")
    value = obj[key]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
      names = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
      self.fail(where, f"{key!r} is {type(value).__name__}, expected {names}")
    return value


def _answer(check: _Checker, answer: Any, context: str, where: str) -> tuple[str, int]:
  text = check.get(answer, "text", str, where)
  start = check.get(answer, "answer_start", int, where)
  if not text:
    check.fail(where, "empty answer text")
  if start < 0 or start + len(text) > len(context):
    check.fail(where, f"answer_start {start} with a text of {len(text)} characters is outside the context of "
               f"{len(context)} characters; fix answer_start")
  return text, start


def _answer_words(doc_tokens: list[str], char_to_word_offset: list[int], text: str,
                  offset: int) -> tuple[int, int] | None:
  """The first and last word of an answer (its text and character offset), or None when those words do not
  hold the text."""
  start, end = char_to_word_offset[offset], char_to_word_offset[offset + len(text) - 1]
  # The words can miss the text when it is annotated with other whitespace than the context (str.split()
  # collapses more kinds) or mid-word at an odd offset: there is then no span of words to learn, so the
  # reference drops the question.
  if " ".join(doc_tokens[start:end + 1]).find(" ".join(text.split())) == -1:
    return None
  return start, end


def with_gold_positions(examples: Sequence[SquadExample], version_2_with_negative: bool) -> list[SquadExample]:
  """Evaluation examples as training would label them, for the evaluation loss: the first gold answer's text and
  words as the answer (`gold_words`), or, in v2.0, a question without answers as impossible; the others (no
  answers in v1.1, an answer whose words miss its text) unchanged. `convert_examples_to_features(...,
  is_training=False)` labels the windows of those with positions, and gives every window the inputs and ids it
  gives the examples as read."""
  labelled = []
  for example in examples:
    if example.gold_words is not None:
      example = dataclasses.replace(example, orig_answer_text=example.answers[0],
                                    start_position=example.gold_words[0], end_position=example.gold_words[1])
    elif version_2_with_negative and not example.answers:
      example = dataclasses.replace(example, orig_answer_text="", start_position=-1, end_position=-1,
                                    is_impossible=True)
    labelled.append(example)
  return labelled


def parse_squad(data: bytes, path: str, is_training: bool,
                version_2_with_negative: bool = False) -> SquadReadResult:
  """The bytes of a SQuAD JSON file -> its examples (`read_squad_examples` without the file; `path` names it in
  errors)."""
  check = _Checker(path)
  try:
    text = data.decode("utf-8-sig")  # A byte-order mark is harmless; the reference's json.load rejects it.
  except UnicodeDecodeError as e:
    raise ValueError(f"{path}: byte {e.start} is not valid UTF-8 ({e.reason}); SQuAD files are UTF-8: "
                     "re-encode the file") from None
  try:
    root = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}:{e.lineno}:{e.colno}: not valid JSON ({e.msg})") from None

  examples: list[SquadExample] = []
  seen_ids: set[str] = set()
  questions = skipped = 0
  for i, article in enumerate(check.get(root, "data", list, "top level")):
    for j, paragraph in enumerate(check.get(article, "paragraphs", list, f"data[{i}]")):
      where = f"data[{i}].paragraphs[{j}]"
      context = check.get(paragraph, "context", str, where)
      qas = check.get(paragraph, "qas", list, where)
      doc_tokens, char_to_word_offset = split_context(context)
      doc_tuple = tuple(doc_tokens)
      for k, qa in enumerate(qas):
        qas_id = check.get(qa, "id", str, f"{where}.qas[{k}]")
        where_q = f"question {qas_id!r}"
        if qas_id in seen_ids:
          check.fail(where_q, "the id appears twice; predictions are keyed by id, so ids must be unique")
        seen_ids.add(qas_id)
        questions += 1
        question_text = check.get(qa, "question", str, where_q)
        # Answers are needed to train; evaluation files may lack them (a hidden test set).
        raw_answers = check.get(qa, "answers", list, where_q) if is_training or "answers" in qa else []
        answers = tuple(_answer(check, a, context, where_q)[0] for a in raw_answers)
        plausible = tuple(check.get(a, "text", str, where_q)
                          for a in (check.get(qa, "plausible_answers", list, where_q)
                                    if "plausible_answers" in qa else []))
        example = SquadExample(qas_id, question_text, doc_tuple, answers=answers, plausible_answers=plausible)
        if not is_training and raw_answers:
          example = dataclasses.replace(example, gold_words=_answer_words(
              doc_tokens, char_to_word_offset, *_answer(check, raw_answers[0], context, where_q)))
        if is_training:
          is_impossible = (check.get(qa, "is_impossible", bool, where_q)
                           if version_2_with_negative else False)
          if is_impossible:
            example = dataclasses.replace(example, orig_answer_text="", start_position=-1, end_position=-1,
                                          is_impossible=True)
          else:
            if len(raw_answers) != 1:
              check.fail(where_q, f"{len(raw_answers)} answers; training needs exactly one per question "
                         "(an unanswerable one needs version_2_with_negative and is_impossible)")
            answer_text, answer_offset = _answer(check, raw_answers[0], context, where_q)
            words = _answer_words(doc_tokens, char_to_word_offset, answer_text, answer_offset)
            if words is None:
              skipped += 1
              continue
            start_position, end_position = words
            example = dataclasses.replace(example, orig_answer_text=answer_text,
                                          start_position=start_position, end_position=end_position)
        examples.append(example)
  if questions == 0:
    raise ValueError(f"{path}: no questions; give a SQuAD file with data[].paragraphs[].qas[]")
  return SquadReadResult(examples, skipped, path)


def read_squad_examples(path: str, is_training: bool, version_2_with_negative: bool = False) -> SquadReadResult:
  """Reads a SQuAD v1.1 or v2.0 JSON file (local or gs://), google-research's `read_squad_examples`.

  Args:
    is_training: read the one answer of each question into positions (skipping, and counting, those whose
      text is not at its position); else read questions and gold answer texts only.
    version_2_with_negative: (training) read `is_impossible`; a v2.0 file has questions with no answer.
  Raises FileNotFoundError for a missing file; ValueError naming the file (and the question) for bytes that
  are not UTF-8, invalid JSON, a missing key, an answer outside its context, a training question without
  exactly one answer, a repeated id, or no questions at all.
  """
  if not fileio.exists(path):
    raise FileNotFoundError(f"{path}: no such SQuAD file")
  with fileio.open_file(path, "rb") as f:
    data = f.read()
  return parse_squad(data, path, is_training, version_2_with_negative)


# -- Features ---------------------------------------------------------------------------------------------------


def _improve_answer_span(doc_tokens: Sequence[str], input_start: int, input_end: int, tokenizer,
                         orig_answer_text: str) -> tuple[int, int]:
  """The word-level span narrowed to the WordPiece tokens that spell the answer, when some sub-span does.

  Annotations are character spans, projected onto whitespace words: "1895" in "(1895-1943)." first becomes
  the whole word, which WordPiece splits into "( 1895 - 1943 ) ."; the first (outermost-first) sub-span equal
  to the tokenized answer is the better label. When none is ("Japan" inside "japanese"), keep the words."""
  tok_answer_text = " ".join(tokenizer.tokenize(orig_answer_text))
  for new_start in range(input_start, input_end + 1):
    for new_end in range(input_end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == tok_answer_text:
        return new_start, new_end
  return input_start, input_end


def _doc_spans(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[tuple[int, int]]:
  """(start, length) of each window over `num_tokens` context tokens: starts `doc_stride` apart (or less when
  a window is shorter), the last window ending at the last token."""
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append((start, length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def _is_max_context(spans: Sequence[tuple[int, int]], span_index: int, position: int) -> bool:
  """Whether window `span_index` is the one that scores context token `position`.

  A token in several windows has a left and a right context in each; the best window maximizes the smaller of
  the two (plus 0.01 x the window's length to break ties toward longer windows; the first wins exact ties)."""
  best_score = None
  best_index = None
  for index, (start, length) in enumerate(spans):
    end = start + length - 1
    if position < start or position > end:
      continue
    score = min(position - start, end - position) + 0.01 * length
    if best_score is None or score > best_score:
      best_score, best_index = score, index
  return span_index == best_index


def check_window_sizes(max_seq_length: int, doc_stride: int, max_query_length: int) -> None:
  """ValueError naming the flag when the sizes leave no room for the context or never advance."""
  if max_seq_length <= max_query_length + 3:
    raise ValueError(f"--max_seq_length={max_seq_length} must exceed --max_query_length={max_query_length} + 3 "
                     "([CLS] and two [SEP]s), or no context token fits")
  if max_query_length < 1:
    raise ValueError(f"--max_query_length={max_query_length}: must be at least 1")
  if doc_stride < 1:
    raise ValueError(f"--doc_stride={doc_stride}: must be at least 1 (the step between window starts)")


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer, is_training: bool,
                                 max_seq_length: int = MAX_SEQ_LENGTH, doc_stride: int = DOC_STRIDE,
                                 max_query_length: int = MAX_QUERY_LENGTH) -> Iterator[SquadFeatures]:
  """Examples -> the features of each window of each, in order (google-research's
  `convert_examples_to_features`). A generator: SQuAD's training set gives ~88,000 features of 3 x 384 ids.

  `tokenizer` is a `FullTokenizer` (with [CLS] and [SEP]); `is_training` labels start/end positions (the
  examples must have been read with is_training=True). Without it, the windows of examples that have positions
  (`with_gold_positions`) are labelled too, the others not. The sizes are checked before the first feature.
  """
  check_window_sizes(max_seq_length, doc_stride, max_query_length)
  if is_training:
    for index, example in enumerate(examples):
      if example.start_position is None:
        raise ValueError(f"example {index} (question {example.qas_id!r}) has no answer position; read the file "
                         "with is_training=True to make training features")
  return _features(examples, tokenizer, is_training, max_seq_length, doc_stride, max_query_length)


def _features(examples, tokenizer, is_training, max_seq_length, doc_stride, max_query_length):
  unique_id = FIRST_UNIQUE_ID
  for example_index, example in enumerate(examples):
    query_tokens = tokenizer.tokenize(example.question_text)[:max_query_length]

    # WordPiece the words one by one, so that every token maps back to its word (for the answer text).
    tok_to_orig_index: list[int] = []
    orig_to_tok_index: list[int] = []
    all_doc_tokens: list[str] = []
    for i, token in enumerate(example.doc_tokens):
      orig_to_tok_index.append(len(all_doc_tokens))
      for sub_token in tokenizer.tokenize(token):
        tok_to_orig_index.append(i)
        all_doc_tokens.append(sub_token)

    labelled = is_training or example.start_position is not None
    tok_start_position = tok_end_position = None
    if labelled and example.is_impossible:
      tok_start_position = tok_end_position = -1
    if labelled and not example.is_impossible:
      tok_start_position = orig_to_tok_index[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
      else:
        tok_end_position = len(all_doc_tokens) - 1
      tok_start_position, tok_end_position = _improve_answer_span(
          all_doc_tokens, tok_start_position, tok_end_position, tokenizer, example.orig_answer_text)

    max_tokens_for_doc = max_seq_length - len(query_tokens) - 3  # [CLS], [SEP], [SEP]
    spans = _doc_spans(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
    doc_offset = len(query_tokens) + 2  # Input position of the window's first token.

    for doc_span_index, (span_start, span_length) in enumerate(spans):
      tokens = ["[CLS]", *query_tokens, "[SEP]"]
      segment_ids = [0] * len(tokens)
      token_to_orig_map: dict[int, int] = {}
      token_is_max_context: dict[int, bool] = {}
      for i in range(span_length):
        split_token_index = span_start + i
        token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
        token_is_max_context[len(tokens)] = _is_max_context(spans, doc_span_index, split_token_index)
        tokens.append(all_doc_tokens[split_token_index])
      tokens.append("[SEP]")
      segment_ids += [1] * (span_length + 1)

      input_ids = tokenizer.convert_tokens_to_ids(tokens)
      pad = [0] * (max_seq_length - len(input_ids))
      input_mask = [1] * len(input_ids) + pad
      input_ids = input_ids + pad
      segment_ids = segment_ids + pad

      start_position = end_position = None
      if labelled and example.is_impossible:
        start_position = end_position = 0
      elif labelled:
        span_end = span_start + span_length - 1
        if span_start <= tok_start_position and tok_end_position <= span_end:
          start_position = tok_start_position - span_start + doc_offset
          end_position = tok_end_position - span_start + doc_offset
        else:  # Part of the answer is outside: nothing to point at here but [CLS].
          start_position = end_position = 0

      yield SquadFeatures(unique_id, example_index, doc_span_index, tokens, token_to_orig_map,
                          token_is_max_context, input_ids, input_mask, segment_ids, start_position, end_position,
                          example.is_impossible)
      unique_id += 1


def check_include_unknowns(include_unknowns: float) -> None:
  """Raises ValueError unless `include_unknowns` is negative (keep every window) or in (0, 1]."""
  if include_unknowns == 0 or include_unknowns > 1:
    raise ValueError(f"--include_unknowns={include_unknowns:g}: must be a probability in (0, 1] (the share of the "
                     "training windows without an answer that are kept, e.g. 0.1 for long documents), or negative "
                     "to keep every window (the default)")


def samples_unknowns(include_unknowns: float) -> bool:
  """Whether `include_unknowns` drops some windows (it is in (0, 1))."""
  return 0 < include_unknowns < 1


def _unit_hash(qas_id: str, doc_span_index: int) -> float:
  """A number in [0, 1) fixed by the question id and the window's index (no random state: reproducible)."""
  digest = hashlib.sha256(f"{qas_id}\0{doc_span_index}".encode("utf-8")).digest()
  return int.from_bytes(digest[:8], "big") / 2.0**64


def keep_unknowns(features: Iterator[SquadFeatures], examples: Sequence[SquadExample],
                  include_unknowns: float) -> Iterator[SquadFeatures]:
  """Training windows -> those that hold their answer (start_position > 0), and each other one (no answer in it,
  or an impossible question) with probability `include_unknowns` (every one when it is negative or 1). Which
  windows are kept depends only on the question's id and the window's index."""
  check_include_unknowns(include_unknowns)
  for feature in features:
    if (not samples_unknowns(include_unknowns) or feature.start_position
        or _unit_hash(examples[feature.example_index].qas_id, feature.doc_span_index) < include_unknowns):
      yield feature
