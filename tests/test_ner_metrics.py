"""bert_tf.tasks.ner.metrics: conlleval's entity-level scores, checked by hand on small cases and against seqeval's
default (conlleval-compatible) mode on many random sentences of every scheme, including broken ones."""

import random
import warnings

import pytest
from seqeval import metrics as seqeval
from seqeval.metrics.sequence_labeling import get_entities

from bert_tf.tasks.ner import metrics as nm


def test_entities_of_each_scheme_by_hand():
  # IOB1: I- opens an entity; B- only separates two of the same type.
  assert nm.entities(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]) == [
      ("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 4), ("ORG", 5, 5)]
  # IOB2, and a stray I- read as opening an entity, as conlleval does.
  assert nm.entities(["B-PER", "I-PER", "B-PER", "O", "I-LOC", "I-LOC"]) == [
      ("PER", 0, 1), ("PER", 2, 2), ("LOC", 4, 5)]
  # BIOES.
  assert nm.entities(["S-PER", "B-LOC", "I-LOC", "E-LOC", "S-LOC", "O", "B-ORG", "E-ORG"]) == [
      ("PER", 0, 0), ("LOC", 1, 3), ("LOC", 4, 4), ("ORG", 6, 7)]
  assert nm.entities([]) == [] and nm.entities(["O", "O"]) == []
  assert nm.entities(["I-MISC-X", "I-MISC-X"]) == [("MISC-X", 0, 1)]  # only the first "-" separates


def test_bad_tags_are_rejected_with_the_tag():
  for tag in ("PER", "X-PER", "B-", "B_PER", ""):
    with pytest.raises(ValueError, match=f"tag {tag!r}: expected O or B-, I-, E-, S-"):
      nm.entities(["O", tag])


def test_scores_by_hand():
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "O", "B-PER"]]
  pred = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG", "B-PER"]]
  # Gold: PER(0-1), LOC(3), ORG(0), PER(2). Predicted: PER(0-1), ORG(3), ORG(0-1), PER(2). Correct: 2 PER.
  e = nm.evaluate(gold, pred)
  assert (e.overall.correct, e.overall.gold, e.overall.predicted) == (2, 4, 4)
  assert e.overall.precision == e.overall.recall == e.overall.f1 == 0.5
  assert e.tokens == 7 and e.accuracy == 5 / 7
  assert list(e.per_type) == ["LOC", "ORG", "PER"]
  assert e.per_type["PER"] == nm.Scores(1.0, 1.0, 1.0, 2, 2, 2)
  assert e.per_type["LOC"] == nm.Scores(0.0, 0.0, 0.0, 1, 0, 0)
  assert e.per_type["ORG"] == nm.Scores(0.0, 0.0, 0.0, 1, 2, 0)
  assert e.macro == (1 / 3, 1 / 3, 1 / 3)
  assert e.weighted == (0.5, 0.5, 0.5)
  flat = e.as_dict()
  assert flat["f1"] == 0.5 and flat["PER_f1"] == 1.0 and flat["ORG_support"] == 1
  report = nm.conlleval_report(e)
  assert report.splitlines()[:2] == [
      "processed 7 tokens with 4 phrases; found: 4 phrases; correct: 2.",
      "accuracy:  71.43%; precision:  50.00%; recall:  50.00%; FB1:  50.00"]
  assert report.splitlines()[4] == "              PER: precision: 100.00%; recall: 100.00%; FB1: 100.00  2"


def test_no_entities_scores_zero_and_lengths_must_match():
  e = nm.evaluate([["O"]], [["O"]])
  assert (e.overall.f1, e.accuracy, e.per_type) == (0.0, 1.0, {})
  with pytest.raises(ValueError, match="2 gold sentences but 1 predicted"):
    nm.evaluate([["O"], ["O"]], [["O"]])
  with pytest.raises(ValueError, match="sentence 0: 2 gold tags but 1 predicted"):
    nm.evaluate([["O", "O"]], [["O"]])


def _random_sentences(rng, n, prefixes, types=("PER", "LOC", "ORG", "MISC")):
  out = []
  for _ in range(n):
    length = rng.randint(0, 9)
    out.append([rng.choice(["O", "O"] + [f"{p}-{t}" for p in prefixes for t in types]) for _ in range(length)])
  return out


def _seqeval_report(gold, pred):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # seqeval warns on zero divisions, which both score 0
    return seqeval.classification_report(gold, pred, output_dict=True, zero_division=0)


@pytest.mark.parametrize("prefixes", [("I", "B"), ("B", "I"), ("B", "I", "E", "S"), ("I",), ("E", "S", "I")])
def test_equals_seqeval_on_random_sentences(prefixes):
  rng = random.Random(len(prefixes) * 7 + ord(prefixes[0]))
  for trial in range(60):
    gold = _random_sentences(rng, rng.randint(1, 7), prefixes)
    # Predictions: the gold ones with some tags changed, so many entities are right and some not.
    pred = [[t if rng.random() < 0.7 else rng.choice(["O"] + [f"{p}-{k}" for p in prefixes for k in ("PER", "LOC")])
             for t in s] for s in gold]
    for sentence in gold + pred:
      assert nm.entities(sentence) == get_entities(sentence), sentence
    e = nm.evaluate(gold, pred)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      assert e.overall.f1 == pytest.approx(seqeval.f1_score(gold, pred), abs=1e-12)
      assert e.overall.precision == pytest.approx(seqeval.precision_score(gold, pred), abs=1e-12)
      assert e.overall.recall == pytest.approx(seqeval.recall_score(gold, pred), abs=1e-12)
      if e.tokens:
        assert e.accuracy == pytest.approx(seqeval.accuracy_score(gold, pred), abs=1e-12)
    report = _seqeval_report(gold, pred)
    for kind, s in e.per_type.items():
      assert report[kind]["precision"] == pytest.approx(s.precision, abs=1e-12), (trial, kind)
      assert report[kind]["recall"] == pytest.approx(s.recall, abs=1e-12)
      assert report[kind]["f1-score"] == pytest.approx(s.f1, abs=1e-12)
      assert report[kind]["support"] == s.gold
    types_in_report = {k for k in report if not k.endswith(" avg")}
    assert types_in_report == set(e.per_type)
    if e.per_type:
      assert report["macro avg"]["f1-score"] == pytest.approx(e.macro[2], abs=1e-12)
      assert report["macro avg"]["precision"] == pytest.approx(e.macro[0], abs=1e-12)
      if e.overall.gold:
        assert report["weighted avg"]["f1-score"] == pytest.approx(e.weighted[2], abs=1e-12)
        assert report["weighted avg"]["recall"] == pytest.approx(e.weighted[1], abs=1e-12)


def test_sentences_never_share_an_entity():
  # Joined, I-PER would continue the entity; as two sentences there are two.
  gold = [["O", "I-PER"], ["I-PER", "O"]]
  e = nm.evaluate(gold, [["O", "I-PER"], ["I-PER", "O"]])
  assert e.overall.gold == 2 == e.overall.correct
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    assert seqeval.f1_score(gold, gold) == e.overall.f1


def test_plain_tags_score_per_word_by_hand():
  gold = [["DT", "NN", "VBZ"], ["NN", "."]]
  pred = [["DT", "VBZ", "VBZ"], ["NN", "NN"]]
  e = nm.evaluate_tags(gold, pred)
  assert (e.words, e.accuracy) == (5, 3 / 5)
  assert list(e.per_tag) == [".", "DT", "NN", "VBZ"]
  assert e.per_tag["NN"] == nm.Scores(0.5, 0.5, 0.5, 2, 2, 1)  # precision, recall, f1, support, predicted, right
  assert e.per_tag["."] == nm.Scores(0.0, 0.0, 0.0, 1, 0, 0)  # never predicted: 0, as scikit-learn
  assert e.per_tag["VBZ"].precision == 0.5 and e.per_tag["VBZ"].recall == 1.0
  flat = e.as_dict()
  assert (flat["accuracy"], flat["NN_f1"], flat["._support"], flat["words"]) == (0.6, 0.5, 1, 5)
  assert nm.tag_report(e).splitlines()[:2] == [
      "processed 5 words; accuracy:  60.00%; macro F1:  54.17; weighted F1:  53.33",
      "                .: precision:   0.00%; recall:   0.00%; FB1:   0.00  1"]
  # A tag named like an average cannot hide it.
  assert nm.evaluate_tags([["macro"]], [["x"]]).as_dict()["macro_f1"] == 0.0
  with pytest.raises(ValueError, match="sentence 1: 2 gold tags but 1 predicted"):
    nm.evaluate_tags(gold, [pred[0], ["NN"]])


def test_plain_tags_score_as_scikit_learn_on_random_sentences():
  from sklearn import metrics as sk

  rng = random.Random(7)
  tags = ["NN", "VBZ", "DT", ".", "JJ", "O", "B-X"]  # any strings: "O" and "B-X" are tags like the others
  for _ in range(50):
    gold = [[rng.choice(tags) for _ in range(rng.randrange(1, 7))] for _ in range(rng.randrange(1, 6))]
    pred = [[t if rng.random() < 0.6 else rng.choice(tags[:rng.randrange(1, 8)]) for t in row] for row in gold]
    e = nm.evaluate_tags(gold, pred)
    y_true, y_pred = [t for row in gold for t in row], [t for row in pred for t in row]
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")  # scikit-learn warns where a tag is never predicted (it scores 0, as we do)
      assert e.accuracy == sk.accuracy_score(y_true, y_pred)
      for average, ours in (("macro", e.macro), ("weighted", e.weighted)):
        theirs = sk.precision_recall_fscore_support(y_true, y_pred, average=average, zero_division=0)[:3]
        assert ours == pytest.approx(theirs, abs=1e-12), average
      labels = sorted(set(y_true) | set(y_pred))
      p, r, f, support = sk.precision_recall_fscore_support(y_true, y_pred, labels=labels, zero_division=0)
    assert list(e.per_tag) == labels
    ours = [value for s in e.per_tag.values() for value in (s.precision, s.recall, s.f1, s.gold)]
    assert ours == pytest.approx([v for row in zip(p, r, f, support) for v in row], abs=1e-12)
    assert e.as_dict()["macro_f1"] == pytest.approx(sk.f1_score(y_true, y_pred, average="macro"), abs=1e-12)
