"""bert_tf.tasks.classification.user_data, and run_classifier on your own files: CSV, TSV and JSON lines read alike;
the task (labels, pairs, metrics) comes from the files; every bad input stops before any work, naming file, line and
column; a run fine-tunes, evaluates and predicts label strings (test_readme.py runs the script and exports)."""

import csv
import json
import os

import numpy as np
import pytest

from bert_tf.tasks.classification import classifier as classification
from bert_tf.tasks.classification import metrics
from bert_tf.tasks.classification import run as classification_run
from bert_tf.tasks.classification import user_data as ud
from bert_tf.training import finetuning
from test_classification_run import WORDS, pretrained  # noqa: F401 (pretrained: the tiny encoder fixture)

ROWS = [("the cat sat", "on the mat", "pos"), ('a "big" dog, ran', "the cat", "neg"),
        ("red mat", "small dog\nran", "pos"), ("the dog", "the cat sat .", "neutral")]


def write(path, rows, columns=("sentence1", "sentence2", "label")):
  """`rows` (tuples in `columns` order) as the file format `path` names."""
  path = str(path)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  with open(path, "w", encoding="utf-8", newline="") as f:
    if path.endswith((".json", ".jsonl")):
      f.writelines(json.dumps(dict(zip(columns, row))) + "\n" for row in rows)
    elif path.endswith(".csv"):
      csv.writer(f, lineterminator="\n").writerows([columns, *rows])
    else:  # TSV: no quoting, so no tab or line break inside a field.
      f.writelines("\t".join(str(v).replace("\n", " ") for v in row) + "\n" for row in [columns, *rows])
  return path


def read(tmp_path, splits=("train",), trained=None, **files):
  return ud.read_inputs(ud.DataFiles(**files), splits, trained)


@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl", "json"])
def test_each_format_reads_the_same_examples_and_task(tmp_path, ext):
  task, inputs = read(tmp_path, train_file=write(tmp_path / f"own/data.{ext}", ROWS))
  examples = inputs["train"].examples
  b = "small dog ran" if ext == "tsv" else "small dog\nran"
  assert [(e.text_a, e.text_b, e.label) for e in examples] == [ROWS[0], ROWS[1], ("red mat", b, "pos"), ROWS[3]]
  assert [e.guid for e in examples] == ["train-0", "train-1", "train-2", "train-3"]
  assert task.name == "data" and task.is_pair
  assert task.labels == ("neg", "neutral", "pos") and task.metric_names == ("accuracy", "macro_f1")


def test_labels_columns_and_names(tmp_path):
  rows = [("a b", 10), ("b a", 2), ("a", -1), ("b", 2)]
  path = write(tmp_path / "mine/train.jsonl", rows, ("text", "y"))
  task, inputs = read(tmp_path, train_file=path, text_a_column="text", label_column="y")
  assert task.labels == ("-1", "2", "10")  # integers sort as numbers
  assert not task.is_pair and task.name == "mine"  # "train" names nothing: the folder does
  assert [e.label for e in inputs["train"].examples] == ["10", "2", "-1", "2"]
  task, _ = read(tmp_path, train_file=path, text_a_column="text", label_column="y", labels=("10", "2", "-1", "7"))
  assert task.labels == ("10", "2", "-1", "7")  # --labels: that order, labels training lacks allowed
  two = write(tmp_path / "Movie Reviews.csv", [("a", "yes"), ("b", "no")], ("sentence1", "label"))
  task, _ = read(tmp_path, train_file=two)
  assert task.name == "movie_reviews" and task.labels == ("no", "yes") and task.metric_names == ("accuracy", "f1")
  numbers = write(tmp_path / "s.jsonl", [("a", "b", 0.5), ("b", "c", 3)])
  task, inputs = read(tmp_path, train_file=numbers, task_type="regression")
  assert task.is_regression and task.metric_names == ("pearson", "spearman")
  assert [e.label for e in inputs["train"].examples] == [0.5, 3.0]


def test_dev_and_test_follow_the_training_file(tmp_path):
  train = write(tmp_path / "train.csv", ROWS)
  dev = write(tmp_path / "dev.jsonl", [("x", "y", "neg", "extra")], ("sentence1", "sentence2", "label", "id"))
  test = write(tmp_path / "test.tsv", [("x", "y")], ("sentence1", "sentence2"))
  task, inputs = read(tmp_path, ("train", "dev", "test"), train_file=train, validation_file=dev, test_file=test)
  assert list(inputs) == ["train", "dev", "test"]
  assert inputs["dev"].examples[0].label == "neg" and inputs["test"].examples[0].label is None
  assert inputs["test"].examples[0].text_b == "y"
  # Without a training file, the task is the trained model's.
  spec = classification.ClassifierSpec("reviews", ("neg", "pos"), True, 16, True)
  task, inputs = read(tmp_path, ("dev",), trained=spec, validation_file=dev)
  assert (task.name, task.labels, task.is_pair) == ("reviews", ("neg", "pos"), True)
  with pytest.raises(ValueError, match=r"--labels=pos,neg, but the model at --init_checkpoint has the labels "
                     "neg,pos"):
    read(tmp_path, ("dev",), trained=spec, validation_file=dev, labels=("pos", "neg"))
  # A label the model never had: --labels cannot help there (it must equal the model's).
  odd = write(tmp_path / "odd.csv", [("x", "y", "meh")], ("sentence1", "sentence2", "label"))
  with pytest.raises(ValueError) as e:
    read(tmp_path, ("test",), trained=spec, test_file=odd)
  assert str(e.value) == (f"{odd}:2: column 'label': 'meh' is not a label of the model at --init_checkpoint "
                          "(neg, pos); fix the row (or drop its label: the test file's is optional), or fine-tune "
                          "a model that has that label")


def _error(tmp_path, name, rows, columns=("sentence1", "label"), splits=("train",), **files):
  path = write(tmp_path / name, rows, columns) if rows is not None else str(tmp_path / name)
  files.setdefault("train_file", path)
  with pytest.raises(ValueError) as caught:
    read(tmp_path, splits, **files)
  message = str(caught.value)
  assert "\n" not in message
  return message.replace(str(tmp_path) + os.sep, "")


def test_every_bad_input_names_file_line_and_column(tmp_path):
  e = _error
  assert e(tmp_path, "a.csv", [("x", "p")], ("text", "label")) == (
      "a.csv:1: no column 'sentence1' (--text_a_column); the header has 'text', 'label'")
  assert e(tmp_path, "b.jsonl", [("x", "p"), ("y", "q")], ("sentence1", "label"), label_column="y") == (
      "b.jsonl:1: no column 'y' (--label_column); this record has 'sentence1', 'label'")
  (tmp_path / "c.jsonl").write_text('{"sentence1": "x", "sentence2": "y", "label": "p"}\n'
                                    '{"sentence1": "x", "label": "q"}\n')
  assert e(tmp_path, "c.jsonl", None) == (
      "c.jsonl:2: no column 'sentence2' (--text_b_column, default 'sentence2' as in the training file); this "
      "record has 'sentence1', 'label'")
  assert e(tmp_path, "d.csv", [("x", "p"), ("  ", "q")]) == (
      "d.csv:3: column 'sentence1': empty text; give every row its text, or delete the row")
  assert e(tmp_path, "e.jsonl", [("x", "p"), ("y", 1)]) == (
      "e.jsonl:2: column 'label': 1 is a number, but the label at line 1 is a string; give every label the "
      "same type")
  assert e(tmp_path, "f.jsonl", [("x", 0.5), ("y", 1)]).startswith(
      "f.jsonl:1: column 'label': 0.5 is not a class name or integer; to predict numbers pass --task_type=regression")
  assert e(tmp_path, "g.csv", [("x", "big")], task_type="regression").startswith(
      "g.csv:2: column 'label': \"big\" is not a finite number")
  assert e(tmp_path, "h.csv", []) == "h.csv: holds no rows (only a header); give one example a row"
  assert e(tmp_path, "i.jsonl", []) == "i.jsonl: holds no rows; give one example a row"
  assert e(tmp_path, "j.csv", [("x", "p"), ("y", "p")]).startswith(
      "j.csv: column 'label': every row has the label 'p'; a classifier needs two labels or more")
  assert e(tmp_path, "k.csv", [("x", "p"), ("y", "q")], labels=("p", "r")) == (
      "k.csv:3: column 'label': 'q' is not a label of --labels=p,r (p, r); fix the row, or list every label "
      "with --labels")
  dev = write(tmp_path / "dev.csv", [("x", "p"), ("y", "maybe")], ("sentence1", "label"))
  assert e(tmp_path, "l.csv", [("x", "p"), ("y", "q")], splits=("train", "dev"), validation_file=dev) == (
      "dev.csv:3: column 'label': 'maybe' is not a label of the training file l.csv (p, q); fix the row, or "
      "list every label with --labels")
  (tmp_path / "m.csv").write_text("sentence1,label\nx,p\ny,q,r\n")
  assert e(tmp_path, "m.csv", None) == (
      "m.csv:3: 3 comma-separated fields, expected 2 as in the header; repair or delete that row")
  (tmp_path / "n.jsonl").write_text('{"sentence1": "x", "label": "p"}\n["y", "q"]\n')
  assert e(tmp_path, "n.jsonl", None).startswith("n.jsonl:2: a JSON list, not an object")
  (tmp_path / "o.csv").write_text("")
  assert e(tmp_path, "o.csv", None).startswith("o.csv:1: the file is empty")
  # A quote left open on the last row swallows the rest of the file (Python's reader takes it as one field).
  (tmp_path / "p.csv").write_text('sentence1,label\n"good movie",p\n"bad movie,q\n')
  assert e(tmp_path, "p.csv", None) == (
      "p.csv:3: a quote (\") opened in this row is never closed; close it, or double each quote inside a quoted "
      "field (\"\"); repair or delete that row")


def _table(path, ext, rows):
  """`rows` (the header first) as CSV, TSV or JSON lines written by hand: repeated names kept as they are."""
  if ext == "jsonl":
    path.write_text("".join("{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in zip(rows[0], row))
                            + "}\n" for row in rows[1:]))
  else:
    path.write_text("".join(("," if ext == "csv" else "\t").join(row) + "\n" for row in rows))
  return str(path)


@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl"])
def test_a_column_named_twice_is_refused_naming_it(tmp_path, ext):
  """Issue 30 (2): `sentence1,sentence1,label` trained on the last of the two columns."""
  _table(tmp_path / f"twice.{ext}", ext, [("sentence1", "sentence1", "label"), ("good film", "x", "p")])
  expected = {"jsonl": "twice.jsonl:1: the object has the key 'sentence1' twice; give each column once"}.get(
      ext, f"twice.{ext}:1: the header names the column 'sentence1' twice (columns 1 and 2); give each column its "
      "own name")
  assert _error(tmp_path, f"twice.{ext}", None) == expected
  # Unnamed columns (a spreadsheet's trailing empty ones) are no column a flag can name: still read.
  if ext != "jsonl":
    _table(tmp_path / f"blank.{ext}", ext, [("sentence1", "label", "", ""), ("good film", "p", "", ""),
                                            ("bad film", "q", "", "")])
    _, inputs = read(tmp_path, train_file=str(tmp_path / f"blank.{ext}"))
    assert [e.label for e in inputs["train"].examples] == ["p", "q"]


@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl"])
def test_labels_lose_surrounding_spaces_and_fractions_are_refused_in_every_format(tmp_path, ext):
  """Issue 30 (3): `"spam "` made a third class, and CSV labels 0.0, 0.5, ... 2.0 five classes."""
  rows = [("sentence1", "label"), ("win a prize", "spam "), ("see you at six", "ham"), ("free entry", " spam"),
          ("call me", "  ham  ")]
  task, inputs = read(tmp_path, train_file=_table(tmp_path / f"sms.{ext}", ext, rows),
                      validation_file=_table(tmp_path / f"dev.{ext}", ext, [rows[0], ("ok", "ham "), ("win", "spam")]),
                      splits=("train", "dev"))
  assert task.labels == ("ham", "spam")
  assert [e.label for e in inputs["train"].examples] == ["spam", "ham", "spam", "ham"]
  assert [e.label for e in inputs["dev"].examples] == ["ham", "spam"]
  scores = [("sentence1", "label"), ("a", "0.0"), ("b", "2.0"), ("c", "0.5"), ("d", "1.0")]
  line = 3 if ext == "jsonl" else 4
  assert _error(tmp_path, f"sts.{ext}", None, train_file=_table(tmp_path / f"sts.{ext}", ext, scores)) == (
      f"sts.{ext}:{line}: column 'label': 0.5 is not a class name or integer; to predict numbers pass "
      "--task_type=regression")
  for fraction in ("1e-3", ".25", "-2.5"):
    assert f"column 'label': {fraction} is not a class name or integer" in _error(
        tmp_path, f"more.{ext}", None, train_file=_table(tmp_path / f"more.{ext}", ext, [scores[0], ("a", fraction)]))
  # A number that is an integer stays the name it is written as; names that are no number are names.
  kept = [scores[0], ("a", "1.0"), ("b", "2.0"), ("c", "v1.5"), ("d", "3")]
  task, _ = read(tmp_path, train_file=_table(tmp_path / f"kept.{ext}", ext, kept))
  assert task.labels == ("1.0", "2.0", "3", "v1.5")


@pytest.mark.parametrize("ext", ["csv", "tsv", "jsonl"])
def test_a_field_longer_than_pythons_csv_limit_is_read_in_every_format(tmp_path, ext):
  """Issue 30 (7): a CSV or TSV field over 131,072 characters (csv's default limit) was refused."""
  import csv as csv_module

  text = "word " * 40_000 + "end"  # 200,003 characters
  default = csv_module.field_size_limit(131_072)  # as a new process has it (another reader may have raised it)
  try:
    rows = [("sentence1", "label"), (text, "p"), ("short", "q")]
    _, inputs = read(tmp_path, train_file=_table(tmp_path / f"long.{ext}", ext, rows))
  finally:
    csv_module.field_size_limit(default)
  assert [e.text_a for e in inputs["train"].examples] == [text, "short"]


def test_a_quote_inside_an_unquoted_field_is_text_even_on_the_last_row(tmp_path):
  path = tmp_path / "q.csv"
  path.write_text('sentence1,label\n"a ""big"" one",p\nthe 5" screen,q\n')
  _, inputs = read(tmp_path, train_file=str(path))
  assert [(e.text_a, e.label) for e in inputs["train"].examples] == [('a "big" one', "p"), ('the 5" screen', "q")]


def test_flags_are_checked_before_any_file_is_read(tmp_path):
  def refused(match, do=(True, False, False), **fields):
    with pytest.raises(ValueError, match=match):
      ud.DataFiles(**fields).validate(*do)

  refused("--do_eval with your own files needs --validation_file", (True, True, False), train_file="t.csv")
  refused(r"--train_file=t.txt: name a .csv, .tsv, .json or .jsonl", train_file="t.txt")
  refused("--labels names classes", train_file="t.csv", task_type="regression", labels=("a", "b"))
  refused("two or more distinct", train_file="t.csv", labels=("a", "a"))
  refused("each column once", train_file="t.csv", text_a_column="label")
  refused("--task_type=ordinal", train_file="t.csv", task_type="ordinal")
  ud.DataFiles(train_file="gs://b/t.jsonl.gz").validate(True, False, False)


def test_predictions_keep_the_test_files_order_and_format(tmp_path):
  task = ud.glue.GlueTask("own", ("no", "yes, \"sure\""), False, ("accuracy", "f1"))
  for ext, expected in (("csv", 'index,prediction\n0,"yes, ""sure"""\n1,no\n'),
                        ("jsonl", '{"index": 0, "prediction": "yes, \\"sure\\""}\n{"index": 1, "prediction": "no"}\n')):
    files = ud.DataFiles(test_file=f"t.{ext}")
    path = ud.write_predictions(files, task, [1, 0], str(tmp_path / ext))
    assert os.path.basename(path) == f"test_predictions.{ext}"
    assert open(path).read() == expected
  regression = ud.glue.GlueTask("own", (), False, ("pearson", "spearman"))
  path = ud.write_predictions(ud.DataFiles(test_file="t.tsv"), regression, [0.25, -1.5], str(tmp_path / "r"))
  assert open(path).read() == "index\tprediction\n0\t0.250000\n1\t-1.500000\n"


def _config(tmp_path, pretrained, files, **kwargs):
  directory, vocab, bert_config = pretrained
  ft = finetuning.FinetuningConfig(
      output_dir=str(tmp_path / kwargs.pop("out", "out")), bert_config=bert_config,
      init_checkpoint=kwargs.pop("init_checkpoint", directory), train_batch_size=4, eval_batch_size=3,
      predict_batch_size=3, learning_rate=3e-3, num_train_epochs=1, distribution_strategy="one_device",
      log_steps=3, steps_per_loop=3, seed=7)
  return classification_run.ClassifierConfig(task_name=None, data_dir=None, vocab_file=vocab, finetuning=ft,
                                             max_seq_length=13, features_dir=str(tmp_path / "features"),
                                             data_files=files, **kwargs)


def test_feature_files_are_keyed_by_columns_labels_and_task_type(tmp_path, pretrained):
  from bert_tf.data.tokenization import FullTokenizer

  train = write(tmp_path / "sst/train.csv", [("the cat", "0", "1"), ("a dog", "1", "0")], ("sentence1", "label", "y"))
  tokenizer = FullTokenizer(pretrained[1])
  paths = set()
  for fields in ({}, {"labels": ("1", "0")}, {"label_column": "y"}, {"task_type": "regression"}):
    config = _config(tmp_path, pretrained, ud.DataFiles(train_file=train, **fields), do_train=True)
    task, inputs = classification_run.task_and_inputs(config, say=lambda line: None)
    info, _ = classification_run.feature_file(config, task, "train", tokenizer, lambda line: None, inputs)
    paths.add(info.path)
    assert os.path.dirname(info.path) == str(tmp_path / "features" / "own" / "sst")
  assert len(paths) == 4
  with pytest.raises(ValueError, match="not both"):
    config = _config(tmp_path, pretrained, ud.DataFiles(train_file=train), do_train=True)
    config.task_name = "MRPC"
    config.validate()


def test_macro_f1_is_scikit_learns():
  from sklearn.metrics import f1_score

  labels, predictions = np.array([0, 1, 2, 2, 1, 0, 2]), np.array([0, 2, 2, 2, 1, 1, 0])
  assert metrics.macro_f1(predictions, labels) == pytest.approx(f1_score(labels, predictions, average="macro"))
  task = ud.glue.GlueTask("own", ("a", "b", "c"), False, ud.metric_names(("a", "b", "c")))
  assert set(metrics.glue_metrics(task, predictions, labels)) == {"accuracy", "macro_f1"}


def test_fine_tunes_evaluates_and_predicts_label_strings(tmp_path, pretrained):
  """A run on CSV files: the user's labels in the metrics' task, the predictions and the saved model; then the
  saved classifier evaluates a JSON lines copy of dev to the same numbers. (From the command line, through export
  and predict.py: test_readme.py's chain.) And a regression run on JSON lines."""
  import random

  rng = random.Random(5)
  topic = {"cat": "feline", "dog": "canine", "mat": "rug"}

  def rows(n):
    out = []
    for _ in range(n):
      key = rng.choice(sorted(topic))
      out.append((" ".join(rng.choice(WORDS[:4]) for _ in range(3)) + f" {key}", topic[key]))
    return out

  dev_rows = rows(7)
  files = ud.DataFiles(train_file=write(tmp_path / "data/train.csv", rows(13), ("sentence1", "label")),
                       validation_file=write(tmp_path / "data/dev.csv", dev_rows, ("sentence1", "label")),
                       test_file=write(tmp_path / "data/test.csv", [(r[0],) for r in rows(5)], ("sentence1",)))
  summary = classification_run.run_classifier(
      _config(tmp_path, pretrained, files, do_train=True, do_eval=True, do_predict=True), say=lambda line: None)
  results = json.loads((tmp_path / "out/eval_results.json").read_text())
  assert results["eval_examples"] == 7 and {"accuracy", "macro_f1"} <= set(results)
  assert summary["score"] == pytest.approx((results["accuracy"] + results["macro_f1"]) / 2)
  with open(tmp_path / "out/test_predictions.csv") as f:
    predicted = list(csv.reader(f))
  assert predicted[0] == ["index", "prediction"] and [r[0] for r in predicted[1:]] == ["0", "1", "2", "3", "4"]
  assert {r[1] for r in predicted[1:]} <= {"canine", "feline", "rug"}
  assert np.loadtxt(tmp_path / "out/test_results.tsv").shape == (5, 3)
  spec = classification.read_spec(str(tmp_path / "out/classifier"))
  assert (spec.task_name, spec.labels, spec.is_pair) == ("data", ("canine", "feline", "rug"), False)

  assert not (tmp_path / "out/test_results.json").exists()  # an unlabelled test file is not scored

  # The saved classifier evaluates a JSON lines copy of dev to the same numbers; dev given as a labelled
  # --test_file is scored alike, into test_results.txt / .json (beside its predictions), the log naming "test".
  dev = write(tmp_path / "dev.jsonl", dev_rows, ("sentence1", "label"))
  config = _config(tmp_path, pretrained, ud.DataFiles(validation_file=dev, test_file=dev), do_eval=True,
                   do_predict=True, out="eval_only", init_checkpoint=str(tmp_path / "out/classifier"))
  said = []
  again = classification_run.run_classifier(config, say=said.append)
  assert again["eval"]["dev"]["accuracy"] == results["accuracy"]
  assert again["eval"]["dev"]["macro_f1"] == results["macro_f1"]
  assert again["eval"]["dev"]["loss"] == pytest.approx(results["loss"], abs=1e-6)
  scored = json.loads((tmp_path / "eval_only/test_results.json").read_text())
  names = ("accuracy", "macro_f1", "loss")
  assert {k: scored[k] for k in names} == {k: again["eval"]["dev"][k] for k in names} == {
      k: again["test"]["test"][k] for k in names}
  assert scored["test_examples"] == 7 and "eval_examples" not in scored
  text = (tmp_path / "eval_only/test_results.txt").read_text()
  assert all(f"{k} = {scored[k]}\n" in text for k in names)
  shown = "  ".join(f"{k} {scored[k]:.4f}" for k in names)
  assert f"data test: {shown}" in said and f"data dev: {shown}" in said
  assert np.loadtxt(tmp_path / "eval_only/test_results.tsv").shape == (7, 3)  # the probabilities, as before
  assert (tmp_path / "eval_only/test_predictions.jsonl").exists()

  scores = [(text, b, i % 5 + 0.5) for i, (text, b) in enumerate(rows(9))]
  files = ud.DataFiles(train_file=write(tmp_path / "sts/train.jsonl", scores), task_type="regression",
                       text_b_column="sentence2", validation_file=write(tmp_path / "sts/dev.jsonl", scores[:4]),
                       test_file=write(tmp_path / "sts/test.jsonl", [r[:2] for r in scores[:3]]))
  summary = classification_run.run_classifier(
      _config(tmp_path, pretrained, files, do_train=True, do_eval=True, do_predict=True, out="sts"),
      say=lambda line: None)
  assert set(summary["eval"]["dev"]) >= {"pearson", "spearman"}
  lines = (tmp_path / "sts/test_predictions.jsonl").read_text().splitlines()
  assert [json.loads(line)["index"] for line in lines] == [0, 1, 2]
  assert all(isinstance(json.loads(line)["prediction"], float) for line in lines)
  assert classification.read_spec(str(tmp_path / "sts/classifier")).labels == ()


def test_script_scores_a_labelled_test_file_as_it_scores_dev(tmp_path, pretrained):
  """Issue 30 (6): a labelled --test_file was never scored (the only way was --validation_file, logged as "dev").
  As a user runs it: the same CSV as --validation_file and --test_file gives test_results.txt / .json equal to
  eval_results', beside the predictions and test_results.tsv, logged as test; the loss reported on dev is the one
  --metric_for_best=loss ranks by (the lowest)."""
  import training_helpers as th

  directory, vocab, _ = pretrained
  rows = [("the cat sat", "pos"), ("a dog ran", "neg"), ("red mat", "pos"), ("the big dog", "neg"),
          ("small cat", "pos"), ("dog ran on the mat", "neg"), ("cat , cat", "pos")]
  train = write(tmp_path / "train.csv", rows * 2, ("sentence1", "label"))
  dev = write(tmp_path / "dev.csv", rows[:5], ("sentence1", "label"))
  done = th.run_python(["scripts/run_classifier.py", f"--train_file={train}", f"--validation_file={dev}",
                        f"--test_file={dev}", f"--init_checkpoint={directory}", f"--vocab_file={vocab}",
                        "--do_train", "--do_eval", "--do_predict", "--max_seq_length=13", "--train_batch_size=4",
                        "--num_train_epochs=2", "--learning_rate=3e-3", "--distribution_strategy=one_device",
                        "--eval_every_steps=2", "--metric_for_best=loss", f"--output_dir={tmp_path / 'out'}",
                        f"--features_dir={tmp_path / 'features'}"])
  assert done.returncode == 0, done.stderr[-3000:]
  out = tmp_path / "out"
  dev_results = json.loads((out / "eval_results.json").read_text())
  test_results = json.loads((out / "test_results.json").read_text())
  names = ("accuracy", "f1", "loss")
  assert {k: test_results[k] for k in names} == {k: dev_results[k] for k in names}
  assert test_results["test_examples"] == dev_results["eval_examples"] == 5
  assert all(f"{k} = {test_results[k]}\n" in (out / "test_results.txt").read_text() for k in names)
  shown = "  ".join(f"{k} {test_results[k]:.4f}" for k in names)
  task = classification.read_spec(str(out / "classifier")).task_name  # named after the files' folder
  assert f"{task} test: {shown}" in done.stderr and f"{task} dev: {shown}" in done.stderr
  assert np.loadtxt(out / "test_results.tsv").shape == (5, 2) and (out / "test_predictions.csv").exists()
  history = dev_results["eval_history"]
  lowest = min(history, key=lambda h: h["loss"])
  assert dev_results["metric_for_best"] == "loss" and [h["step"] for h in history] == [2, 4, 6, 7]
  assert (dev_results["best_step"], dev_results["best_metric"]) == (lowest["step"], lowest["loss"])


def test_a_glue_task_as_csv_reads_as_the_glue_reader_reads_it(tmp_path):
  """MRPC's TSVs rewritten as CSV with the default column names: the same texts and labels, label ids and
  metrics as --task_name=MRPC (so the same features and training)."""
  from test_classification_run import write_mrpc

  mrpc = ud.glue.get_task("MRPC")
  data = write_mrpc(tmp_path / "MRPC", sizes=(9, 5, 3))
  files = {}
  for split in ("train", "dev"):
    glue_examples = ud.glue.read_examples(mrpc, data, split).examples
    files[split] = write(tmp_path / f"csv/{split}.csv", [(e.text_a, e.text_b, e.label) for e in glue_examples])
  task, inputs = ud.read_inputs(ud.DataFiles(train_file=files["train"], validation_file=files["dev"]),
                                ("train", "dev"))
  assert (task.labels, task.is_pair, task.metric_names) == (mrpc.labels, mrpc.is_pair, mrpc.metric_names)
  for split in ("train", "dev"):
    assert inputs[split].examples == ud.glue.read_examples(mrpc, data, split).examples
