"""scripts/run_ner.py (bert_tf.tasks.ner.run) end to end, as a user runs it: fresh processes in a working
directory, relative paths, a tiny encoder with bert-base-uncased's vocabulary, test_ner_data's fixture in the
release's format (eng.train, eng.testa, eng.testb) and in a copy's (IOB2, test.txt)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import training_helpers as th
from bert_tf.config import BertConfig
from bert_tf.tasks.ner import data as ner
from bert_tf.tasks.ner import metrics as ner_metrics
from test_ner_data import ORIGINAL, conll_text, write

T = 19


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, bert_uncased_vocab_file):
  """model/ (a tiny random encoder in the pretraining hand-off layout, with bert-base-uncased's vocab.txt),
  conll/ (the fixture as the release's three files) and copy/ (its IOB2 form as test.txt)."""
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  directory = tmp_path_factory.mktemp("ner_run")
  config = BertConfig.from_preset("tiny", vocab_size=30522, num_hidden_layers=1, hidden_size=18,
                                  num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 4,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  checkpoints.export_encoder(BertEncoder(config), config, str(directory / "model"))
  shutil.copy(bert_uncased_vocab_file, directory / "model" / "vocab.txt")
  for name in ("conll", "copy"):
    os.makedirs(directory / name)
  for name in ("eng.train", "eng.testa", "eng.testb"):
    write(directory / "conll" / name, ORIGINAL)
  write(directory / "copy" / "test.txt", conll_text("IOB2", columns=2, docstart=False))
  return directory


def _run(cwd, *args):
  script = os.path.join(th.REPO, "scripts", "run_ner.py")
  return subprocess.run([sys.executable, script, "--vocab_file=model/vocab.txt", f"--max_seq_length={T}",
                         "--features_dir=features", "--distribution_strategy=one_device", "--predict_batch_size=3",
                         *args], cwd=cwd, env=th.python_env(), capture_output=True, text=True, timeout=300)


def _read_predictions(path):
  """word gold predicted lines -> (gold sentences, predicted sentences, words)."""
  gold, predicted, words = [[]], [[]], [[]]
  for line in open(path, encoding="utf-8").read().split("\n"):
    if line:
      w, g, p = line.split(" ")
      words[-1].append(w), gold[-1].append(g), predicted[-1].append(p)
    elif gold[-1]:
      gold.append([]), predicted.append([]), words.append([])
  return gold[:-1], predicted[:-1], words[:-1]


def _loss(model_dir, sentences, document_context, vocab):
  """The mean cross-entropy over the labelled words of `sentences`' windows (labels in the model's scheme),
  computed here from the saved model's logits: what training minimises, apart from the run's evaluation."""
  import numpy as np

  from bert_tf.data.tokenization import FullTokenizer
  from bert_tf.tasks.ner.folder import load_model

  model, settings = load_model(str(model_dir))
  label_ids = {label: i for i, label in enumerate(settings["labels"])}
  windows = ner.make_windows(sentences, FullTokenizer(str(vocab)), T, document_context, label_ids,
                             settings["label_scheme"])
  inputs = {k: np.array([getattr(w, k) for w in windows], np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
  logits = model(inputs, training=False).numpy().astype(np.float64)  # [N, T, K]
  log_p = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)
  labels, mask = (np.array([getattr(w, k) for w in windows]) for k in ("label_ids", "label_mask"))
  picked = np.take_along_axis(log_p, labels[..., None], axis=-1)[..., 0]
  return -np.sum(picked * mask) / np.sum(mask)


TRAIN = ("--do_train", "--do_eval", "--do_predict", "--data_dir=conll", "--init_checkpoint=model",
         "--output_dir=out", "--train_batch_size=2", "--learning_rate=1e-2", "--num_train_epochs=3",
         "--document_context", "--save_checkpoints_steps=2", "--eval_every_steps=4", "--keep_best_checkpoint")


@pytest.mark.slow  # three runs of the script (each a process that imports TensorFlow) and an export: about a minute
def test_trains_evaluates_predicts_reruns_and_predicts_a_copy(workdir):
  done = _run(workdir, *TRAIN)
  assert done.returncode == 0, done.stderr[-3000:]
  assert "IOB1 tags, types LOC, MISC, ORG, PER" in done.stderr
  # Each file's features made or read once, the dev file's for all its evaluations (while training and at the
  # end); eng.testa and eng.testb, copies of eng.train, reuse its features (every file's windows are labelled).
  reused = [line for line in done.stderr.splitlines() if "reusing features" in line]
  assert done.stderr.count(": wrote features") == 1 and "eng.train: wrote" in done.stderr
  assert [line.split("conll/")[1].split(":")[0] for line in reused] == ["eng.testa", "eng.testb"]
  out = workdir / "out"
  settings = json.loads((out / "ner_model" / "ner.json").read_text())
  assert settings["labels"] == list(ner.labels_for(("LOC", "MISC", "ORG", "PER"), "IOB2"))
  assert (settings["train_tag_scheme"], settings["document_context"], settings["max_seq_length"]) == (
      "IOB1", True, T)
  conll = ner.parse_conll(ORIGINAL.encode(), "fixture")
  for split in ("eval", "test"):
    gold, predicted, words = _read_predictions(out / f"{split}_predictions.txt")
    assert words == [list(s.words) for s in conll.sentences] and gold == [list(s.tags) for s in conll.sentences]
    # Predictions are written in the file's scheme (IOB1): the reader takes them as such.
    sentences = [ner.NerSentence(tuple(w), tuple(p), 1, 0) for w, p in zip(words, predicted)]
    assert ner.check_scheme(sentences, "predictions", "IOB1") == ("IOB1", 0, "")
    results = json.loads((out / f"{split}_results.json").read_text())
    expected = ner_metrics.evaluate(gold, predicted)
    assert {k: results[k] for k in ("precision", "recall", "f1", "accuracy")} == {
        "precision": expected.overall.precision, "recall": expected.overall.recall, "f1": expected.overall.f1,
        "accuracy": expected.accuracy}
    assert results["train_steps"] == 6 and results[f"{split}_sentences"] == 4
    # The loss training minimises (mean cross-entropy over the labelled words), from the same pass.
    assert results["loss"] == pytest.approx(_loss(out / "ner_model", conll.sentences, True,
                                                  workdir / "model" / "vocab.txt"), abs=1e-5)
    assert f"{os.path.join('conll', 'eng.testa' if split == 'eval' else 'eng.testb')} "\
           f"({'dev' if split == 'eval' else 'test'}): loss {results['loss']:.4f}" in done.stderr
    assert results["train_windows"] >= results["train_sentences"] and results["train_windows_per_second"] > 0
    assert f"f1 = {results['f1']}\n" in (out / f"{split}_results.txt").read_text()
    assert (out / f"{split}_conlleval.txt").read_text().startswith("processed 17 tokens with 7 phrases;")
    # Evaluated on the dev file at steps 4 and 6; the model kept and scored at the end is the best one.
    assert [h["step"] for h in results["eval_history"]] == [4, 6] and results["metric_for_best"] == "f1"
    assert all(h["loss"] > 0 for h in results["eval_history"])
    assert results["best_metric"] == max(h["f1"] for h in results["eval_history"])
    if split == "eval":
      assert results["f1"] == results["best_metric"]
  first = (out / "test_predictions.txt").read_text()

  # The same command again: the finished run resumes from its checkpoint, trains nothing and predicts alike.
  again = _run(workdir, *TRAIN)
  assert again.returncode == 0, again.stderr[-3000:]
  assert "reusing features" in again.stderr and "nothing left to train" in again.stderr
  assert (out / "test_predictions.txt").read_text() == first

  # Prediction alone from the saved model, on a copy's layout and scheme (IOB2, 2 columns, test.txt).
  # It also exports the model (--export_dir), as a run that trained does at its end.
  alone = _run(workdir, "--do_predict", "--data_dir=copy", "--init_checkpoint=out/ner_model", "--output_dir=out2",
               "--document_context", "--export_dir=export", "--model_name=tagger")
  assert alone.returncode == 0, alone.stderr[-3000:]
  manifest = json.loads((workdir / "export" / "tagger" / "1" / "assets.extra" / "bert_tf_manifest.json").read_text())
  assert (manifest["task_kind"], manifest["labels"]) == ("ner", settings["labels"])
  assert "copy/test.txt: 4 sentences, 17 words, 1 document(s), IOB2 tags" in alone.stderr
  gold, predicted, _ = _read_predictions(workdir / "out2" / "test_predictions.txt")
  first_gold, first_predicted, _ = _read_predictions(out / "test_predictions.txt")
  # The copy's gold is the release's in IOB2; its predictions are written in IOB2. (The copy has no
  # -DOCSTART-, so its windows see other context than the release's: the predictions may differ.)
  assert [ner.convert_tags(s, "IOB2") for s in first_gold] == gold
  assert len(predicted) == len(first_predicted) == 4
  sentences = [ner.NerSentence(tuple(p), tuple(p), 1, 0) for p in predicted]
  assert ner.check_scheme(sentences, "predictions", "IOB2") == ("IOB2", 0, "")
  assert not (workdir / "out2" / "eval_results.json").exists()


def test_bad_input_stops_before_training_naming_file_and_line(workdir):
  os.makedirs(workdir / "bad", exist_ok=True)
  write(workdir / "bad" / "eng.train", ORIGINAL)
  write(workdir / "bad" / "eng.testa", ORIGINAL.replace("German JJ B-NP I-MISC", "German JJ I-MISC"))
  result = _run(workdir, "--do_train", "--do_eval", "--data_dir=bad", "--init_checkpoint=model",
                "--output_dir=bad_out", "--features_dir=bad_features")
  assert result.returncode == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert errors == ["error: bad/eng.testa:5: 3 columns, the file's first word line has 4; every line holds the "
                    "same columns (word ... tag)"], result.stderr[-3000:]
  assert not (workdir / "bad_out").exists() and not (workdir / "bad_features").exists()  # not even empty



def test_a_plain_tag_set_trains_and_scores_per_word(workdir, tmp_path):
  """In this process: part-of-speech tags (no entities) train as word-level tagging, are scored per word and kept
  with the model (test_ner_serving serves such a model); files that do not fit its tags are refused up front."""
  import tensorflow as tf

  from bert_tf.tasks.ner import run as ner_run
  from bert_tf.training import finetuning
  from test_ner_data import POS, WORDS, pos_text

  os.makedirs(tmp_path / "pos")
  write(tmp_path / "pos" / "train.txt", pos_text())
  write(tmp_path / "pos" / "dev.jsonl", "".join(json.dumps({"tokens": list(w), "tags": list(t)}) + "\n"
                                                for w, t in zip(WORDS, POS)))

  def config(data=str(tmp_path / "pos"), init=str(workdir / "model"), **kwargs):
    ft = finetuning.FinetuningConfig(
        output_dir=str(tmp_path / "out"), bert_config=BertConfig.from_json_file(str(workdir / "model" /
                                                                                    "bert_config.json")),
        init_checkpoint=init, train_batch_size=2, predict_batch_size=3, learning_rate=1e-2, num_train_epochs=2,
        warmup_proportion=0.0, distribution_strategy="one_device", steps_per_loop=2, log_steps=2,
        **{k: kwargs.pop(k) for k in ("eval_every_steps", "metric_for_best") if k in kwargs})
    return ner_run.NerConfig(data_dir=data, vocab_file=str(workdir / "model" / "vocab.txt"),
                             finetuning=ft, max_seq_length=T, features_dir=str(tmp_path / "features"), **kwargs)

  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  lines = []
  summary = ner_run.run_ner(config(do_train=True, do_eval=True, eval_every_steps=2), strategy, say=lines.append)
  labels = [".", "CC", "CD", "JJ", "NN", "NNP", "PRP", "VBD", "VBZ"]
  assert any("plain tags (not entities): 9 tags ., CC, CD" in line for line in lines), lines
  # An epoch is a pass over the windows (one a sentence here), said as SQuAD says it.
  windows, sentences = summary["train_windows"], summary["train_sentences"]
  assert f"an epoch is {windows} windows of {sentences} sentences ({windows / 2:.4g} steps of 2)" in lines, lines
  assert summary["train_steps"] == int(windows / 2 * 2) > 0
  settings = ner_run.read_settings(str(tmp_path / "out" / "ner_model"))
  assert (settings["labels"], settings["label_scheme"], settings["types"], settings["train_tag_scheme"]) == (
      labels, "plain", [], "plain")
  out = tmp_path / "out"
  gold, predicted, words = _read_predictions(out / "eval_predictions.txt")
  assert words == [list(w) for w in WORDS] and gold == [list(t) for t in POS]
  assert all(t in labels for row in predicted for t in row)
  results = json.loads((out / "eval_results.json").read_text())
  expected = ner_metrics.evaluate_tags(gold, predicted)
  assert (results["accuracy"], results["macro_f1"], results["words"]) == (expected.accuracy, expected.macro[2], 17)
  dev = ner.read_conll(str(tmp_path / "pos" / "dev.jsonl"), ner.PLAIN)
  assert results["loss"] == pytest.approx(_loss(out / "ner_model", dev.sentences, False,
                                                workdir / "model" / "vocab.txt"), abs=1e-5)
  assert results["metric_for_best"] == "accuracy" and [h["step"] for h in results["eval_history"]] == [2, 4]
  assert summary["eval"]["accuracy"] == expected.accuracy and "f1" not in results
  assert (out / "eval_report.txt").read_text() == ner_metrics.tag_report(expected)
  assert not (out / "eval_conlleval.txt").exists()

  # Refused before any work: an entity file for the plain model (its files are read as plain tags) and plain
  # tags for an entity model, a tag training never saw, a metric the task lacks.
  model = str(out / "ner_model")
  with pytest.raises(ValueError, match=r"eng.testa:3: unknown tag 'I-ORG': the model \(.*\) has the tags \., CC"):
    ner_run.run_ner(config(data=str(workdir / "conll"), init=model, do_eval=True), strategy)
  entity_model = {"label_scheme": "IOB2", "labels": list(ner.labels_for(["PER"], "IOB2")), "types": ["PER"]}
  with pytest.raises(ValueError) as info:
    ner_run.read_inputs(config(init=model, do_eval=True), entity_model)
  assert str(info.value) == (f"{tmp_path / 'pos' / 'dev.jsonl'}: holds plain tags (not entities), but the model "
                             f"({model}) has entity tags; give every file the same kind of tags")
  with pytest.raises(ValueError, match="--metric_for_best=f1: evaluating on .*dev.jsonl gives accuracy, macro_f1, "
                     "weighted_f1, macro_precision, macro_recall, loss$"):
    ner_run.run_ner(config(do_train=True, do_eval=True, eval_every_steps=2, metric_for_best="f1"), strategy)
  write(tmp_path / "pos" / "dev.jsonl", '{"tokens": ["a", "dog"], "tags": ["DT", "NN"]}\n')
  with pytest.raises(ValueError, match=r"dev.jsonl:1: column 'tags': unknown tag 'DT': the model \(.*\) has the "
                     r"tags \., CC, CD"):
    ner_run.run_ner(config(init=model, do_eval=True), strategy)


def test_a_type_metric_for_best_is_checked_against_the_dev_file_before_training(workdir):
  from bert_tf.tasks.ner import run as ner_run
  from bert_tf.training import finetuning

  def config(metric):
    ft = finetuning.FinetuningConfig(output_dir=str(workdir / "metric_out"), init_checkpoint=str(workdir / "model"),
                                     bert_config=finetuning.bert_config_for(None, str(workdir / "model")),
                                     eval_every_steps=2, metric_for_best=metric)
    return ner_run.NerConfig(data_dir=str(workdir / "conll"), vocab_file=str(workdir / "model" / "vocab.txt"),
                             finetuning=ft, do_train=True, do_eval=True, max_seq_length=T)

  config("PER_f1").validate()  # a type's score waits for the dev file
  config("loss").validate()  # every task's evaluation loss (the lowest is best)
  ner_run.check_metric_for_best(config("loss"), ner.parse_conll(ORIGINAL.encode(), "fixture"))
  with pytest.raises(ValueError, match=r"^--metric_for_best=PER_support: this task reports f1, precision, recall, "):
    config("PER_support").validate()
  with pytest.raises(ValueError) as error:
    ner_run.run_ner(config("DATE_f1"))
  names = ("f1, precision, recall, accuracy, macro_f1, weighted_f1, "
           + ", ".join(f"{kind}_{m}" for kind in ("LOC", "MISC", "ORG", "PER") for m in ("f1", "precision", "recall"))
           + ", loss")
  assert str(error.value) == f"--metric_for_best=DATE_f1: evaluating on {workdir / 'conll' / 'eng.testa'} gives {names}"
  assert not (workdir / "metric_out").exists()  # stopped before any work
  # Every name offered is a score the evaluation gives, whatever was predicted (here: nothing), or its loss.
  conll = ner.parse_conll(ORIGINAL.encode(), "fixture")
  values = ner_metrics.evaluate([s.tags for s in conll.sentences], [["O"] * len(s.tags) for s in conll.sentences])
  names = ner_run.metric_names("IOB2", conll.types)
  assert names[-1] == "loss" and set(names[:-1]) <= set(values.as_dict())


@pytest.mark.slow  # a prediction run that exports, and predict.py on the export: two processes, about 30 s
def test_the_export_tags_as_the_runs_predictions_file_writes(workdir, bert_uncased_vocab_file):
  """A tagger whose labels often break IOB2 (test_ner_serving's decisive random head), predicting the release's
  files (IOB1) and exported in the same run: predict.py on the export gives each sentence's words the tags
  test_predictions.txt holds, in the training file's scheme, not the model's raw labels."""
  import test_ner_serving
  from bert_tf.tasks.ner import run as ner_run

  model_dir = workdir / "decisive" / "ner_model"
  ner_run.save_model(test_ner_serving._model(), test_ner_serving._settings(), bert_uncased_vocab_file,
                     str(model_dir))
  size = test_ner_serving.T
  done = subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", "run_ner.py"), "--do_predict",
                         "--data_dir=conll", f"--init_checkpoint={model_dir}", "--output_dir=decisive/out",
                         f"--max_seq_length={size}", "--features_dir=features", "--distribution_strategy=one_device",
                         "--export_dir=decisive/export", "--model_name=tags"],
                        cwd=workdir, env=th.python_env(), capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  _, predicted, words = _read_predictions(workdir / "decisive" / "out" / "test_predictions.txt")
  # Sentences whose words the basic tokenizer keeps as they are ("1996-08-22" would be five words).
  kept = [i for i, sentence in enumerate(words) if all(w.isalpha() or w == "." for w in sentence)]
  requests = workdir / "decisive" / "requests.jsonl"
  requests.write_text("".join(json.dumps({"text": " ".join(words[i])}) + "\n" for i in kept))
  served = subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", "predict.py"),
                           "--saved_model_dir=decisive/export/tags", f"--input_file={requests}"],
                          cwd=workdir, env=th.python_env(), capture_output=True, text=True, timeout=300)
  assert served.returncode == 0, served.stderr[-3000:]
  rows = [json.loads(line) for line in served.stdout.splitlines() if line.startswith("{")]
  assert [row["words"][:row["num_words"]] for row in rows] == [words[i] for i in kept]
  assert [row["tags"][:row["num_words"]] for row in rows] == [predicted[i] for i in kept]
  sentences = [ner.NerSentence(tuple(predicted[i]), tuple(predicted[i]), 1, 0) for i in kept]
  assert ner.check_scheme(sentences, "served tags", "IOB1") == ("IOB1", 0, "")
  assert sum(tag != "O" for i in kept for tag in predicted[i]) >= 3  # entities to compare, not only O
