"""bert_tf.tasks.classification.run and scripts/run_classifier.py: fine-tune a tiny encoder on GLUE-format fixtures,
evaluate, predict in the submission format, reuse features, select among learning rates, reload for eval."""

import concurrent.futures
import csv
import dataclasses
import json
import os
import random
import shutil
import subprocess
import sys

import numpy as np
import pytest

import training_helpers as th
from bert_tf.config import BertConfig
from bert_tf.tasks.classification import run as classification_run
from bert_tf.training import finetuning

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "ran", "big", "small", "red", ",", "."]
TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + WORDS


def _sentence(rng, n):
  return " ".join(rng.choice(WORDS) for _ in range(n))


def write_mrpc(directory, sizes=(37, 11, 7), seed=0):
  """MRPC in the GLUE download's format (BOM, header, 5 columns); label 1 iff sentence 2 mentions a dog."""
  rng = random.Random(seed)
  os.makedirs(directory, exist_ok=True)
  for split, n in zip(("train", "dev", "test"), sizes):
    head = "Quality" if split != "test" else "index"
    lines = [f"\ufeff{head}\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(n):
      b = _sentence(rng, rng.randint(1, 9))
      first = str(int("dog" in b.split())) if split != "test" else str(i)
      lines.append(f"{first}\t{1000 + i}\t{2000 + i}\t{_sentence(rng, rng.randint(1, 12))}\t{b}")
    with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("\n".join(lines) + "\n")
  return str(directory)


def write_stsb(directory, sizes=(19, 9, 5), seed=1):
  rng = random.Random(seed)
  os.makedirs(directory, exist_ok=True)
  for split, n in zip(("train", "dev", "test"), sizes):
    cols = ["index", "genre", "filename", "year", "old_index", "source1", "source2", "sentence1", "sentence2"]
    lines = ["\t".join(cols + (["score"] if split != "test" else []))]
    for i in range(n):
      row = [str(i), "main-captions", "MSRvid", "2012test", str(i), "none", "none", _sentence(rng, 5),
             _sentence(rng, 4)] + ([f"{rng.uniform(0, 5):.3f}"] if split != "test" else [])
      lines.append("\t".join(row))
    with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("\n".join(lines) + "\n")
  return str(directory)


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory):
  """A tiny random encoder in the pretraining hand-off layout, and its vocabulary."""
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  directory = tmp_path_factory.mktemp("pretrained")
  vocab = directory / "vocab.txt"
  vocab.write_text("\n".join(TOKENS) + "\n")
  config = BertConfig.from_preset("tiny", vocab_size=len(TOKENS), hidden_size=18, num_attention_heads=3,
                                  intermediate_size=37, num_hidden_layers=1, max_position_embeddings=40)
  checkpoints.export_encoder(BertEncoder(config), config, str(directory))
  return str(directory), str(vocab), config


def _config(tmp_path, pretrained, data_dir, task="MRPC", **kwargs):
  directory, vocab, bert_config = pretrained
  ft_fields = dict(output_dir=str(tmp_path / "out"), bert_config=bert_config, init_checkpoint=directory,
                   train_batch_size=8, eval_batch_size=3, predict_batch_size=3, learning_rate=3e-3,
                   num_train_epochs=4, distribution_strategy="one_device", log_steps=3, steps_per_loop=3, seed=7)
  ft_fields.update({k: kwargs.pop(k) for k in list(kwargs) if k in finetuning.FinetuningConfig.__dataclass_fields__})
  ft = finetuning.FinetuningConfig(**ft_fields)
  return classification_run.ClassifierConfig(task_name=task, data_dir=data_dir, vocab_file=vocab, finetuning=ft,
                                             max_seq_length=21, features_dir=str(tmp_path / "features"), **kwargs)


def test_train_eval_predict_writes_every_output(tmp_path, pretrained):
  data = write_mrpc(tmp_path / "MRPC")
  config = _config(tmp_path, pretrained, data, do_train=True, do_eval=True, do_predict=True)
  said = []
  summary = classification_run.run_classifier(config, say=said.append)
  out = tmp_path / "out"
  assert summary["train_steps"] == int(37 / 8 * 4) == 18
  history = summary["train_history"]
  assert history[-1]["loss"] < history[0]["loss"]
  results = json.loads((out / "eval_results.json").read_text())
  assert set(results) >= {"accuracy", "f1", "eval_examples", "train_examples_per_second"}
  assert results["eval_examples"] == 11 and 0 <= results["accuracy"] <= 1
  text = (out / "eval_results.txt").read_text()
  assert f"accuracy = {results['accuracy']}" in text
  with open(out / "MRPC.tsv") as f:
    rows = list(csv.reader(f, delimiter="\t"))
  assert rows[0] == ["index", "prediction"] and [r[0] for r in rows[1:]] == [str(i) for i in range(7)]
  assert {r[1] for r in rows[1:]} <= {"0", "1"}
  probabilities = np.loadtxt(out / "test_results.tsv")
  assert probabilities.shape == (7, 2)
  np.testing.assert_allclose(probabilities.sum(axis=1), 1, atol=1e-5)
  assert (out / "classifier" / "classifier.json").exists()
  assert any("wrote" in line and "train-" in line for line in said)
  # The loss training minimises, on dev: the mean cross-entropy of the saved classifier's logits.
  logits, labels = _outputs_and_labels(out / "classifier", tmp_path / "features", "dev", 21)
  log_p = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
  assert results["loss"] == pytest.approx(-np.mean(log_p[np.arange(11), labels]), abs=1e-5)
  assert f"loss = {results['loss']}" in text
  assert any(line.startswith("MRPC dev: accuracy ") and f"  loss {results['loss']:.4f}" in line for line in said)
  assert not (out / "test_results.json").exists()  # GLUE's test set has no labels

  # Evaluating the saved classifier alone reproduces the metrics; features are reused, not rewritten.
  said.clear()
  eval_only = _config(tmp_path, pretrained, data, do_eval=True, init_checkpoint=str(out / "classifier"),
                      output_dir=str(tmp_path / "eval_only"))
  again = classification_run.run_classifier(eval_only, say=said.append)
  assert again["eval"]["dev"]["accuracy"] == results["accuracy"]
  assert again["eval"]["dev"]["f1"] == results["f1"]
  assert any("reusing" in line for line in said) and not any("wrote" in line for line in said)


def _outputs_and_labels(classifier_dir, features_dir, split, max_seq_length):
  """The saved classifier's outputs on a split's feature file (the only one of that split under features_dir),
  and the file's labels: computed here, apart from the run's evaluation."""
  import glob

  from bert_tf.tasks.classification import classifier as classification

  model, spec, _ = classification.load_classifier(str(classifier_dir))
  [path] = glob.glob(str(features_dir / "glue" / "*" / f"{split}-*.tfrecord"))
  outputs, labels = [], []
  for batch in classification.classifier_dataset(path, 4, max_seq_length, spec.is_regression, is_training=False,
                                                 dynamic_padding=False):
    outputs.append(model(batch, training=False).numpy().astype(np.float64))
    labels.append(batch["label_ids"].numpy())
  return np.concatenate(outputs), np.concatenate(labels)


def test_regression_task_trains_and_writes_scores(tmp_path, pretrained):
  data = write_stsb(tmp_path / "STS-B")
  config = _config(tmp_path, pretrained, data, task="STS-B", do_train=True, do_eval=True, do_predict=True,
                   num_train_epochs=1)
  summary = classification_run.run_classifier(config, say=lambda line: None)
  assert set(summary["eval"]["dev"]) >= {"pearson", "spearman", "loss"}
  # The loss training minimises: the mean squared error of the scores.
  scores, labels = _outputs_and_labels(tmp_path / "out" / "classifier", tmp_path / "features", "dev", 21)
  assert summary["eval"]["dev"]["loss"] == pytest.approx(np.mean((scores - labels) ** 2), abs=1e-5)
  with open(tmp_path / "out" / "STS-B.tsv") as f:
    rows = list(csv.reader(f, delimiter="\t"))[1:]
  assert len(rows) == 5 and all(0 <= float(r[1]) <= 5 for r in rows)


def test_selection_protocol_keeps_the_best_run_on_dev(tmp_path, pretrained):
  data = write_mrpc(tmp_path / "MRPC", sizes=(17, 9, 3))
  config = _config(tmp_path, pretrained, data, do_train=True, do_eval=True, learning_rates=(1e-3, 1e-4),
                   num_restarts=2, num_train_epochs=1)
  summary = classification_run.run_classifier(config, say=lambda line: None)
  selection = json.loads((tmp_path / "out" / "selection.json").read_text())
  runs = selection["runs"]
  assert [(r["learning_rate"], r["seed"]) for r in runs] == [(1e-3, 7), (1e-3, 8), (1e-4, 7), (1e-4, 8)]
  best = max(runs, key=lambda r: r["score"])
  assert selection["best"]["score"] == best["score"] == summary["score"]
  for r in runs:
    assert r["score"] == pytest.approx((r["eval"]["dev"]["accuracy"] + r["eval"]["dev"]["f1"]) / 2)
    assert os.path.exists(os.path.join(r["output_dir"], "eval_results.json"))
  top = json.loads((tmp_path / "out" / "eval_results.json").read_text())
  assert top["accuracy"] == best["eval"]["dev"]["accuracy"]


def test_flags_are_checked_before_any_work(tmp_path, pretrained):
  data = write_mrpc(tmp_path / "MRPC")
  with pytest.raises(ValueError, match="nothing to do"):
    _config(tmp_path, pretrained, data).validate()
  with pytest.raises(ValueError, match="--task_name"):
    _config(tmp_path, pretrained, data, task="MRCP", do_train=True).validate()
  with pytest.raises(ValueError, match="max_position_embeddings"):
    c = _config(tmp_path, pretrained, data, do_train=True)
    c.max_seq_length = 41
    c.validate()
  with pytest.raises(ValueError, match="select on dev"):
    _config(tmp_path, pretrained, data, do_train=True, learning_rates=(1e-3, 2e-3)).validate()
  # One value in --learning_rates is the selection protocol over that one rate, not a flag silently dropped.
  with pytest.raises(ValueError, match="select on dev"):
    _config(tmp_path, pretrained, data, do_train=True, learning_rates=(2e-3,)).validate()
  assert _config(tmp_path, pretrained, data, learning_rates=(2e-3,)).searching
  with pytest.raises(ValueError, match="classifier"):
    classification_run.run_classifier(_config(tmp_path, pretrained, data, do_eval=True), say=lambda line: None)
  with pytest.raises(ValueError, match="--warmup_proportion"):
    _config(tmp_path, pretrained, data, do_train=True, warmup_proportion=1.5).validate()


def _arrays(prefix):
  """The float variables of a checkpoint but the optimizer's own (its slots), as sorted bytes: the same weights
  saved under other names compare equal."""
  import tensorflow as tf

  reader = tf.train.load_checkpoint(prefix)
  return sorted(reader.get_tensor(name).tobytes() for name, dtype in reader.get_variable_to_dtype_map().items()
                if dtype.is_floating and not name.startswith("optimizer/_variables/"))


def test_script_runs_end_to_end_and_reports_bad_flags(tmp_path, pretrained):
  directory, vocab, _ = pretrained
  data = write_mrpc(tmp_path / "MRPC", sizes=(13, 5, 3))
  common = ["scripts/run_classifier.py", "--task_name=mrpc", f"--data_dir={data}", f"--vocab_file={vocab}",
            f"--init_checkpoint={directory}", "--max_seq_length=21", "--train_batch_size=4",
            "--distribution_strategy=one_device", f"--features_dir={tmp_path / 'features'}"]
  # With evaluation while training: every step of 3, the best kept, stopping after 1 evaluation without a
  # better F1 (MRPC's headline metric). Beside it (two cores), a run on a missing --data_dir.
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    refused = pool.submit(th.run_python, common + ["--do_train", f"--output_dir={tmp_path / 'bad'}",
                                                   "--data_dir=/nonexistent"])
    done = th.run_python(common + ["--do_train", "--do_eval", "--num_train_epochs=1", "--eval_every_steps=1",
                                   "--keep_best_checkpoint", "--early_stopping_patience=1",
                                   f"--output_dir={tmp_path / 'out'}"])
    bad = refused.result()
  assert done.returncode == 0, done.stderr[-3000:]
  results = json.loads((tmp_path / "out" / "eval_results.json").read_text())
  assert results["eval_examples"] == 5
  assert "MRPC dev: accuracy" in done.stderr
  # The dev features written once and kept for every evaluation (while training and at the end).
  assert done.stderr.count("MRPC dev: wrote") == 1 and "MRPC dev: reusing" not in done.stderr
  history = results["eval_history"]
  assert results["metric_for_best"] == "f1" and [h["step"] for h in history] == [1, 2]
  assert (results["best_step"], results["stopped_early"], results["train_steps"]) == (1, True, 2)
  assert history[1]["f1"] <= history[0]["f1"] == results["best_metric"] == results["f1"]
  assert all(h["loss"] > 0 for h in history)  # each evaluation's loss too (--metric_for_best=loss: test_run_swag)
  assert "best_step = 1\n" in (tmp_path / "out" / "eval_results.txt").read_text()
  # The saved classifier holds step 1's weights (the best), not step 2's (the last checkpoint's).
  best = _arrays(str(tmp_path / "out" / "best" / "ckpt-1"))
  assert _arrays(str(tmp_path / "out" / "classifier" / "model")) == best
  last = _arrays(str(tmp_path / "out" / "checkpoints" / "ckpt-2"))
  assert len(last) == len(best) > 10 and last != best
  assert bad.returncode == 1
  assert "error:" in bad.stderr and "/nonexistent" in bad.stderr and "Traceback" not in bad.stderr
  assert not os.path.exists(tmp_path / "bad" / "eval_results.json")


def test_script_names_what_is_wrong_with_init_checkpoint_first_and_takes_its_vocab(tmp_path, pretrained):
  """Issue 30 (5): a missing, empty or file --init_checkpoint, or none, all said "--bert_config_file is required";
  (9): --vocab_file was required beside a model folder that holds vocab.txt."""
  directory, vocab, _ = pretrained
  data = write_mrpc(tmp_path / "MRPC", sizes=(9, 5, 3))
  (tmp_path / "empty").mkdir()
  (tmp_path / "notes.txt").write_text("no weights\n")
  shutil.copytree(directory, tmp_path / "no_vocab", ignore=shutil.ignore_patterns("vocab.txt"))
  common = ["scripts/run_classifier.py", "--task_name=MRPC", f"--data_dir={data}", "--max_seq_length=21",
            "--train_batch_size=4", "--num_train_epochs=1", "--distribution_strategy=one_device", "--do_train",
            f"--features_dir={tmp_path / 'features'}"]
  refused = {
      (f"--init_checkpoint={tmp_path / 'nothing'}", f"--bert_config_file={directory}/bert_config.json"):
          f"--init_checkpoint={tmp_path}/nothing does not exist (nor nothing.index, a checkpoint prefix); check the "
          "path",
      (f"--init_checkpoint={tmp_path / 'empty'}",):
          f"--init_checkpoint={tmp_path}/empty is an empty folder; give the pretrained model's folder (a pretraining "
          "--output_dir, a converted or Hugging Face model, a fine-tuned model) or a checkpoint prefix",
      (f"--init_checkpoint={tmp_path / 'notes.txt'}",):
          f"--init_checkpoint={tmp_path}/notes.txt is a file that is not a checkpoint; give a checkpoint prefix (the "
          "name before .index) or the model's folder",
      (f"--vocab_file={vocab}",):
          "--init_checkpoint is required: the pretrained model to fine-tune (its bert_config.json comes with it), or "
          "a fine-tuned model's folder; or pass --bert_config_file to start from random weights",
      (f"--init_checkpoint={tmp_path / 'no_vocab'}",):
          f"--vocab_file is required: the pretrained model's vocab.txt (no vocab.txt in or beside "
          f"--init_checkpoint={tmp_path}/no_vocab)",
  }
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    runs = {flags: pool.submit(th.run_python, common + [*flags, f"--output_dir={tmp_path / 'bad'}"])
            for flags in refused}
    done = th.run_python(common + [f"--init_checkpoint={directory}", f"--output_dir={tmp_path / 'out'}"])
    for flags, message in refused.items():
      result = runs[flags].result()
      assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (1, f"error: {message}"), flags
      assert "Traceback" not in result.stderr
  assert done.returncode == 0, done.stderr[-3000:]
  assert f"--vocab_file: using {vocab} (from --init_checkpoint)" in done.stderr
  with open(vocab) as given, open(tmp_path / "out" / "classifier" / "vocab.txt") as saved:
    assert saved.read() == given.read()


def test_help_is_true_for_your_own_files():
  """Issue 30 (8): --do_train and --num_train_epochs named train.tsv, --do_predict only the GLUE submission."""
  result = th.run_python(["scripts/run_classifier.py", "--help"])
  text = " ".join(result.stdout.split())  # absl wraps the help at 80 columns
  for line in (
      "--[no]do_train: Fine-tune on the training set: --train_file, or a GLUE task's train.tsv.",
      "--[no]do_eval: Evaluate on the dev set: --validation_file, or a GLUE task's dev.tsv (MNLI: matched and "
      "mismatched).",
      "--[no]do_predict: Predict the test set: --test_file into test_predictions.csv/.tsv/.jsonl (label strings; "
      "scored too when it has labels), or a GLUE task's test.tsv in the GLUE submission format.",
      "--num_train_epochs: Epochs over the training set.",
      "--vocab_file: vocab.txt of the pretrained model (default: the one that comes with --init_checkpoint: in its "
      "folder or beside its bert_config.json).",
      "--metric_for_best: The metric of eval_results that picks the best evaluation (default: the task's headline: "
      "accuracy, F1, Matthews or Pearson correlation, entity F1); the highest wins, the lowest for a loss."):
    assert line in text, line


@pytest.mark.parametrize("dtype,jit", [("mixed_bfloat16", False), ("float32", True)])
def test_mixed_precision_and_xla_fine_tune_and_save_float32(tmp_path, pretrained, dtype, jit):
  data = write_mrpc(tmp_path / "MRPC", sizes=(16, 5, 3))
  config = _config(tmp_path, pretrained, data, do_train=True, do_eval=True, num_train_epochs=1, dtype=dtype,
                   jit_compile=jit)
  summary = classification_run.run_classifier(config, say=lambda line: None)
  assert summary["train_steps"] == 2 and np.isfinite(summary["train_history"][-1]["loss"])
  from bert_tf.tasks.classification import classifier as classification

  model, spec, _ = classification.load_classifier(str(tmp_path / "out" / "classifier"))
  assert model.dtype_policy.name == "float32" and spec.labels == ("0", "1")


# -- Bad inputs: stopped before any work, one line naming the file ---------------------------------------------


def _break(data, split, how):
  """Spoils `split`.tsv of a write_mrpc folder in one of the ways a download or an edit goes wrong."""
  path = os.path.join(data, f"{split}.tsv")
  with open(path, "rb") as f:
    lines = f.read().split(b"\n")
  if how == "columns":  # a tab inside a sentence: line 3 gets 6 fields
    lines[2] = lines[2] + b"\tand more"
  elif how == "label":
    lines[1] = b"2" + lines[1][1:]
  elif how == "utf8":
    lines[3] = lines[3] + b" caf\xe9"
  elif how == "header_only":
    lines = lines[:1] + [b""]
  if how == "missing":
    os.remove(path)
  elif how == "directory":  # unreadable: open() fails
    os.remove(path)
    os.mkdir(path)
  else:
    with open(path, "wb") as f:
      f.write(b"\n".join(lines))
  return path


@pytest.mark.parametrize("split,how,error", [
    ("dev", "columns", r"dev.tsv:3: 6 tab-separated fields, expected 5"),
    ("dev", "label", r"dev.tsv:2: label '2' is not a MRPC label; expected one of 0, 1"),
    ("test", "utf8", r"test.tsv:4: not valid UTF-8"),
    ("test", "missing", r"test.tsv does not exist: --data_dir should be the MRPC folder"),
    ("dev", "directory", r"dev.tsv: cannot be read \(Is a directory\)"),
    ("dev", "header_only", r"dev.tsv: holds no examples"),
])
def test_every_split_the_flags_ask_for_is_checked_before_any_work(tmp_path, pretrained, split, how, error):
  data = write_mrpc(tmp_path / "MRPC", sizes=(13, 5, 7))
  _break(data, split, how)
  config = _config(tmp_path, pretrained, data, do_train=True, do_eval=True, do_predict=True)
  with pytest.raises((ValueError, FileNotFoundError), match=error) as caught:
    classification_run.run_classifier(config, say=lambda line: None)
  assert str(tmp_path / "MRPC" / f"{split}.tsv") in str(caught.value) and "\n" not in str(caught.value)
  assert not (tmp_path / "out" / "checkpoints").exists() and not (tmp_path / "features").exists()


def test_only_the_splits_the_flags_ask_for_are_read(tmp_path, pretrained):
  data = write_mrpc(tmp_path / "MRPC", sizes=(13, 5, 7))
  _break(data, "dev", "columns")
  _break(data, "test", "missing")
  task = classification_run.glue.get_task("MRPC")
  inputs = classification_run.read_inputs(_config(tmp_path, pretrained, data, do_train=True), task)
  assert list(inputs) == ["train"] and len(inputs["train"].examples) == 13
  with pytest.raises(ValueError, match="dev.tsv:3"):
    classification_run.read_inputs(_config(tmp_path, pretrained, data, do_train=True, do_eval=True), task)


def test_a_vocabulary_that_does_not_fit_the_bert_config_is_refused(tmp_path, pretrained):
  data = write_mrpc(tmp_path / "MRPC", sizes=(13, 5, 7))
  _, vocab, bert_config = pretrained  # 17 tokens, vocab_size 17
  _config(tmp_path, pretrained, data, do_train=True).validate()
  larger = dataclasses.replace(bert_config, vocab_size=1042)
  with pytest.raises(ValueError, match=f"--vocab_file={vocab} has 17 tokens but big/bert_config.json says "
                     "vocab_size=1,042: it is probably not the vocabulary the model was pretrained with"):
    _config(tmp_path, pretrained, data, do_train=True, bert_config=larger,
            bert_config_file="big/bert_config.json").validate()
  smaller = dataclasses.replace(bert_config, vocab_size=11)
  with pytest.raises(ValueError, match="has 17 tokens but the BERT config says vocab_size=11: ids from 11 up"):
    _config(tmp_path, pretrained, data, do_train=True, bert_config=smaller).validate()


def _run_script(cwd, *args):
  """scripts/run_classifier.py as a user runs it: a fresh process in `cwd`, relative paths."""
  script = os.path.join(th.REPO, "scripts", "run_classifier.py")
  return subprocess.run([sys.executable, script, "--task_name=MRPC", "--data_dir=MRPC", "--output_dir=out",
                         "--features_dir=features", "--max_seq_length=21", "--train_batch_size=4",
                         "--distribution_strategy=one_device", "--do_train", "--do_eval", "--do_predict", *args],
                        cwd=cwd, env=th.python_env(), capture_output=True, text=True, timeout=300)


def _one_error_line(result) -> str:
  assert result.returncode == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert len(errors) == 1, result.stderr[-3000:]
  return errors[0]


def test_script_stops_bad_inputs_before_training_with_one_line(tmp_path, pretrained):
  directory, _, bert_config = pretrained
  # Three runs that need nothing of each other, each in its own copy of the folder, two at a time (two cores).
  folders = {}
  for name in ("columns", "vocab", "wide"):
    folders[name] = tmp_path / name
    shutil.copytree(directory, folders[name] / "model")
    write_mrpc(folders[name] / "MRPC", sizes=(13, 5, 7))
  _break(str(folders["columns"] / "MRPC"), "dev", "columns")  # found before training, not after it
  (folders["vocab"] / "vocab.txt").write_text("\n".join(TOKENS[:9]) + "\n")
  dataclasses.replace(bert_config, hidden_size=21).to_json_file(str(folders["wide"] / "wide.json"))
  common = ("--vocab_file=model/vocab.txt", "--init_checkpoint=model")
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    columns, vocab, wide = pool.map(lambda run: _run_script(*run), [
        (folders["columns"], *common), (folders["vocab"], "--vocab_file=vocab.txt", "--init_checkpoint=model"),
        (folders["wide"], *common, "--bert_config_file=wide.json")])

  line = _one_error_line(columns)
  assert line.startswith("error: MRPC/dev.tsv:3: 6 tab-separated fields, expected 5"), line
  assert not (folders["columns"] / "out" / "checkpoints").exists() and not (folders["columns"] / "features").exists()

  line = _one_error_line(vocab)
  assert line == ("error: --vocab_file=vocab.txt has 9 tokens but model/bert_config.json says vocab_size=17: it "
                  "is probably not the vocabulary the model was pretrained with; pass --vocab_file=model/vocab.txt "
                  "(beside bert_config.json)"), line

  line = _one_error_line(wide)
  assert line == ("error: model/encoder_checkpoint/encoder: does not match this encoder's bert_config.json "
                  "(wide.json): word_embeddings/embeddings: the checkpoint has [17, 18], the model needs "
                  "[17, 21]; pass the bert_config.json the checkpoint was trained with (probably "
                  "model/bert_config.json, beside it)"), line


def test_a_damaged_init_checkpoint_is_one_line_naming_the_file_before_any_work(tmp_path, pretrained):
  """Issue 40 (6): --init_checkpoint with a corrupt .index ("block checksum mismatch") or its .data cut short was a
  traceback."""
  directory, _, _ = pretrained
  for how in ("index", "data"):
    shutil.copytree(directory, tmp_path / how / "model")
    write_mrpc(tmp_path / how / "MRPC", sizes=(9, 5, 3))
    th.damage_checkpoint(tmp_path / how / "model" / "encoder_checkpoint" / "encoder", how)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    index, data = pool.map(lambda how: _run_script(tmp_path / how, "--init_checkpoint=model"), ("index", "data"))
  fix = "copy it again, or write it again with the command that made it, or give another checkpoint"
  assert _one_error_line(index) == ("error: model/encoder_checkpoint/encoder.index: damaged (block checksum mismatch); "
                                    f"{fix}")
  assert _one_error_line(data) == ("error: model/encoder_checkpoint/encoder.data-00000-of-00001: damaged (truncated: "
                                   f"Read less bytes than requested); {fix}")
  assert sorted(os.listdir(tmp_path / "index")) == ["MRPC", "model"]  # nothing written


def test_a_vocabulary_without_cls_and_sep_is_one_line_before_any_work(tmp_path, pretrained):
  """Issue 40 (6): was KeyError: '[CLS]' while writing the features, after run.json and the features folder."""
  shutil.copytree(pretrained[0], tmp_path / "model")
  write_mrpc(tmp_path / "MRPC", sizes=(9, 5, 3))
  (tmp_path / "vocab.txt").write_text("\n".join(t.lower() if t in ("[CLS]", "[SEP]") else t for t in TOKENS) + "\n")
  line = _one_error_line(_run_script(tmp_path, "--vocab_file=vocab.txt", "--init_checkpoint=model"))
  assert line == ("error: --vocab_file=vocab.txt: has no [CLS] [SEP], which BERT needs; give the vocab.txt the model "
                  "was trained with (every BERT vocabulary holds them)")
  assert sorted(os.listdir(tmp_path)) == ["MRPC", "model", "vocab.txt"]  # nothing written


def test_a_checkpoint_that_does_not_fit_the_config_fails_before_any_feature_file(tmp_path, pretrained):
  directory, vocab, bert_config = pretrained
  other = dataclasses.replace(bert_config, intermediate_size=bert_config.intermediate_size + 2)
  config = _config(tmp_path, (directory, vocab, other), write_mrpc(tmp_path / "MRPC"), do_train=True)
  with pytest.raises(ValueError, match=r"does not match this encoder's BERT config \(--bert_config_file\): "
                                       r"layer_0/intermediate/kernel: the checkpoint has \[18, 37\], the model "
                                       r"needs \[18, 39\]"):
    classification_run.run_classifier(config)
  assert not os.path.exists(tmp_path / "features")


def test_script_refuses_an_input_the_run_would_write_or_remove(tmp_path, pretrained):
  """Issue 40 (1), through the script before any work: an unfinished pretraining run as --init_checkpoint (a link
  to it) and as --output_dir with --overwrite_output_dir (starting over would remove the checkpoint it starts
  from); your own --test_file in --output_dir under the name the predictions take."""
  directory, _, _ = pretrained
  pre = tmp_path / "pre"
  (pre / "checkpoints").mkdir(parents=True)
  for name in os.listdir(os.path.join(directory, "encoder_checkpoint")):
    if name.startswith("encoder."):
      shutil.copy(os.path.join(directory, "encoder_checkpoint", name),
                  pre / "checkpoints" / name.replace("encoder.", "ckpt-1.", 1))
  (pre / "checkpoints" / "checkpoint").write_text('model_checkpoint_path: "ckpt-1"\n')
  for name in ("bert_config.json", "vocab.txt"):
    shutil.copy(os.path.join(directory, name), pre / name)
  os.symlink("pre", tmp_path / "pre_link")
  write_mrpc(tmp_path / "MRPC", sizes=(13, 5, 7))
  (tmp_path / "out").mkdir()
  for name in ("train.csv", "out/test_predictions.csv"):
    (tmp_path / name).write_text("sentence1,label\nthe cat sat,0\nthe dog ran,1\nthe red mat,0\n")
  before = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file()}
  script = os.path.join(th.REPO, "scripts", "run_classifier.py")
  common = ("--init_checkpoint=pre_link", "--max_seq_length=21", "--distribution_strategy=one_device", "--do_train")
  runs = [("--task_name=MRPC", "--data_dir=MRPC", "--output_dir=pre", "--overwrite_output_dir"),
          ("--train_file=train.csv", "--test_file=out/test_predictions.csv", "--output_dir=out", "--do_predict")]
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    starting_over, predicting = pool.map(lambda flags: subprocess.run(
        [sys.executable, script, *common, *flags], cwd=tmp_path, env=th.python_env(), capture_output=True,
        text=True, timeout=300), runs)
  assert _one_error_line(starting_over) == (
      f"error: --init_checkpoint's pre_link/checkpoints/ckpt-1.data-00000-of-00001 lies in {tmp_path}/pre/checkpoints, "
      "which --overwrite_output_dir would remove; copy it elsewhere first, or give another --output_dir")
  assert _one_error_line(predicting) == (
      f"error: --test_file's out/test_predictions.csv is {tmp_path}/out/test_predictions.csv, which this run writes; "
      "copy it elsewhere first, or give another --output_dir")
  # Every file as it was; nothing trained or written (the lock files aside).
  after = {path: path.read_bytes() for path in tmp_path.rglob("*") if path.is_file() and path.name != ".lock"}
  assert after == before
