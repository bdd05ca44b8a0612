"""Entity-level precision, recall and F1 of named-entity tags, as `conlleval` (the CoNLL-2000/2003 scorer)
computes them, per entity type and overall; equal to `seqeval`'s default (conlleval-compatible) mode.

Chunks. A tag is "O" or "<prefix>-<TYPE>" with prefix B, I, E or S. Reading left to right (prev = the previous
token's prefix and type, "O" before the first token and after the last), an entity

  ends before a token   when prev is E or S; or prev is B or I and the token is B, S or O; or prev is not O and
                        the types differ;
  starts at a token     when it is B or S; or it is I or E and prev is O, E or S; or it is not O and the types
                        differ.

For IOB1 and IOB2 tags these are conlleval's rules word for word (so an I-X after O or after another type opens
an entity, as IOB1 means it, and a stray I-X in a predicted IOB2 sequence is read the same way); E and S
follow seqeval's extension of them to BIOES. Sentences never share an entity: each is read on its own.

An entity is correct when the gold and the predicted sequence both hold one of the same type over exactly the
same tokens. For each type and overall (micro):

  precision = correct / predicted,  recall = correct / gold,  F1 = 2 P R / (P + R)   (0 where a denominator is 0)

and, as seqeval's classification_report, the macro average (the mean over types) and the support-weighted
average of the per-type values. `accuracy` is conlleval's token accuracy: tags equal, over all tokens.

A plain tag set (part of speech, or any label per word; `ner.PLAIN`) has no entities: `evaluate_tags` scores
each word as one classification, as scikit-learn does: accuracy, and per-tag, macro and weighted precision,
recall and F1.

Pure Python (no TensorFlow).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

PREFIXES = ("B", "I", "E", "S")
OUTSIDE = "O"


def split_tag(tag: str) -> tuple[str, str]:
  """"B-PER" -> ("B", "PER"); "O" -> ("O", ""). Only the first "-" separates: "I-MISC-X" -> ("I", "MISC-X")."""
  if tag == OUTSIDE:
    return OUTSIDE, ""
  prefix, sep, kind = tag.partition("-")
  if not sep or prefix not in PREFIXES or not kind:
    raise ValueError(f"tag {tag!r}: expected O or B-, I-, E-, S- followed by an entity type (e.g. B-PER)")
  return prefix, kind


def entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
  """One sentence's tags -> its entities (type, first token, last token inclusive), left to right, by the rules
  of the module docstring."""
  found = []
  prev, prev_type = OUTSIDE, ""
  start = None
  for i, tag in enumerate([*tags, OUTSIDE]):
    prefix, kind = split_tag(tag)
    different = prefix != OUTSIDE and kind != prev_type
    ends = prev != OUTSIDE and (prev in ("E", "S") or prefix in ("B", "S", OUTSIDE) or kind != prev_type)
    starts = prefix in ("B", "S") or (prefix in ("I", "E") and prev in (OUTSIDE, "E", "S")) or different
    if ends and start is not None:
      found.append((prev_type, start, i - 1))
      start = None
    if starts:
      start = i
    prev, prev_type = prefix, kind
  return found


@dataclasses.dataclass(frozen=True)
class Scores:
  """precision, recall, f1 in [0, 1]; gold (seqeval's support) and predicted are entity counts."""

  precision: float
  recall: float
  f1: float
  gold: int
  predicted: int
  correct: int

  def as_dict(self, name: str) -> dict[str, float | int]:
    """<name>_precision, <name>_recall, <name>_f1 and <name>_support (gold) for eval_results."""
    return {f"{name}_precision": self.precision, f"{name}_recall": self.recall, f"{name}_f1": self.f1,
            f"{name}_support": self.gold}


def _scores(correct: int, gold: int, predicted: int) -> Scores:
  precision = correct / predicted if predicted else 0.0
  recall = correct / gold if gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return Scores(precision, recall, f1, gold, predicted, correct)


@dataclasses.dataclass(frozen=True)
class NerEvaluation:
  """Everything conlleval reports: tokens, overall (micro) scores, token accuracy, and per-type scores (types
  sorted, every type seen in gold or predictions); plus seqeval's macro and weighted averages."""

  tokens: int
  accuracy: float
  overall: Scores
  per_type: dict[str, Scores]
  macro: tuple[float, float, float]  # precision, recall, f1
  weighted: tuple[float, float, float]

  def as_dict(self) -> dict[str, float | int]:
    """Flat "key": value pairs for eval_results (precision, recall, f1, accuracy, <TYPE>_f1, ...)."""
    values: dict[str, float | int] = {
        "precision": self.overall.precision, "recall": self.overall.recall, "f1": self.overall.f1,
        "accuracy": self.accuracy, "tokens": self.tokens, "gold_entities": self.overall.gold,
        "predicted_entities": self.overall.predicted, "correct_entities": self.overall.correct}
    for kind, s in self.per_type.items():
      values.update(s.as_dict(kind))
    values.update(macro_f1=self.macro[2], weighted_f1=self.weighted[2])
    return values


def evaluate(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> NerEvaluation:
  """Sentences of gold and predicted tags (the same lengths) -> their `NerEvaluation`."""
  _check_lengths(gold, predicted)
  counts: dict[str, list[int]] = {}  # type -> [correct, gold, predicted]
  tokens = same = 0
  for g, p in zip(gold, predicted):
    tokens += len(g)
    same += sum(a == b for a, b in zip(g, p))
    gold_entities, predicted_entities = set(entities(g)), set(entities(p))
    for entity in gold_entities:
      counts.setdefault(entity[0], [0, 0, 0])[1] += 1
      if entity in predicted_entities:
        counts[entity[0]][0] += 1
    for entity in predicted_entities:
      counts.setdefault(entity[0], [0, 0, 0])[2] += 1
  per_type = {kind: _scores(*counts[kind]) for kind in sorted(counts)}
  overall = _scores(*(sum(c[j] for c in counts.values()) for j in range(3)))
  return NerEvaluation(tokens, same / tokens if tokens else 0.0, overall, per_type, *_averages(per_type))


def _averages(per_class: dict[str, Scores]) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
  """(macro, support-weighted) averages of the classes' (precision, recall, f1), as seqeval's and scikit-learn's
  classification reports compute them; 0.0 without classes or support."""
  n = len(per_class)
  macro = tuple(sum(getattr(s, k) for s in per_class.values()) / n if n else 0.0
                for k in ("precision", "recall", "f1"))
  support = sum(s.gold for s in per_class.values())
  weighted = tuple(sum(getattr(s, k) * s.gold for s in per_class.values()) / support if support else 0.0
                   for k in ("precision", "recall", "f1"))
  return macro, weighted  # type: ignore[return-value]


def _check_lengths(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> None:
  if len(gold) != len(predicted):
    raise ValueError(f"{len(gold)} gold sentences but {len(predicted)} predicted ones")
  for i, (g, p) in enumerate(zip(gold, predicted)):
    if len(g) != len(p):
      raise ValueError(f"sentence {i}: {len(g)} gold tags but {len(p)} predicted ones")


def conlleval_report(evaluation: NerEvaluation) -> str:
  """conlleval's own summary lines (percentages with two decimals), for logs and `*_results.txt` readers who
  know that format."""
  o = evaluation.overall
  lines = [f"processed {evaluation.tokens} tokens with {o.gold} phrases; found: {o.predicted} phrases; "
           f"correct: {o.correct}.",
           f"accuracy: {100 * evaluation.accuracy:6.2f}%; precision: {100 * o.precision:6.2f}%; "
           f"recall: {100 * o.recall:6.2f}%; FB1: {100 * o.f1:6.2f}"]
  for kind, s in evaluation.per_type.items():
    lines.append(f"{kind:>17}: precision: {100 * s.precision:6.2f}%; recall: {100 * s.recall:6.2f}%; "
                 f"FB1: {100 * s.f1:6.2f}  {s.predicted}")
  return "\n".join(lines) + "\n"


# -- Plain tag sets -----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class TagEvaluation:
  """Word-level scores of a plain tag set (part of speech, any label per word: no entities). Every word is one
  classification: `accuracy` is the share of words whose tag is right; per tag (sorted, every tag seen in gold
  or predictions) precision, recall and F1 with `Scores.gold` the tag's support, and their macro and
  support-weighted averages: scikit-learn's `precision_recall_fscore_support` over the flattened words (a tag
  never predicted scores 0)."""

  words: int
  accuracy: float
  per_tag: dict[str, Scores]
  macro: tuple[float, float, float]  # precision, recall, f1
  weighted: tuple[float, float, float]

  def as_dict(self) -> dict[str, float | int]:
    """Flat "key": value pairs for eval_results (accuracy, macro_f1, weighted_f1, <TAG>_f1, ...)."""
    values: dict[str, float | int] = {}
    for tag, s in self.per_tag.items():
      values.update(s.as_dict(tag))
    # After the per-tag keys: a tag named "macro" cannot hide the headline averages.
    values.update(accuracy=self.accuracy, macro_precision=self.macro[0], macro_recall=self.macro[1],
                  macro_f1=self.macro[2], weighted_f1=self.weighted[2], words=self.words)
    return values


def evaluate_tags(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]) -> TagEvaluation:
  """Sentences of gold and predicted plain tags (the same lengths) -> their `TagEvaluation`."""
  _check_lengths(gold, predicted)
  counts: dict[str, list[int]] = {}  # tag -> [correct, gold, predicted]
  words = same = 0
  for g, p in zip(gold, predicted):
    for a, b in zip(g, p):
      words += 1
      same += a == b
      counts.setdefault(a, [0, 0, 0])[1] += 1
      counts.setdefault(b, [0, 0, 0])[2] += 1
      counts[a][0] += a == b
  per_tag = {tag: _scores(*counts[tag]) for tag in sorted(counts)}
  return TagEvaluation(words, same / words if words else 0.0, per_tag, *_averages(per_tag))


def tag_report(evaluation: TagEvaluation) -> str:
  """The scores in conlleval's layout (percentages with two decimals), one line per tag with its support."""
  lines = [f"processed {evaluation.words} words; accuracy: {100 * evaluation.accuracy:6.2f}%; "
           f"macro F1: {100 * evaluation.macro[2]:6.2f}; weighted F1: {100 * evaluation.weighted[2]:6.2f}"]
  for tag, s in evaluation.per_tag.items():
    lines.append(f"{tag:>17}: precision: {100 * s.precision:6.2f}%; recall: {100 * s.recall:6.2f}%; "
                 f"FB1: {100 * s.f1:6.2f}  {s.gold}")
  return "\n".join(lines) + "\n"
