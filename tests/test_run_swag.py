"""scripts/run_swag.py (bert_tf.tasks.swag.run) end to end, as a user runs it: fresh processes in a working
directory, relative paths, a tiny random encoder, SWAG-format CSV files written here."""

import concurrent.futures
import csv
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.config import BertConfig
from bert_tf.tasks.swag import data as swag
from bert_tf.tasks.swag import run as swag_run
from test_swag_data import HEADER, TEST_HEADER
from test_swag_model import WORDS, make_examples

T = 19  # max_seq_length
FLAGS = ["--data_dir=data", "--vocab_file=model/vocab.txt", f"--max_seq_length={T}", "--features_dir=features",
         "--distribution_strategy=one_device", "--eval_batch_size=3", "--predict_batch_size=5"]
TRAIN = ["--do_train", "--do_eval", "--do_predict", "--init_checkpoint=model", "--train_batch_size=4",
         "--learning_rate=3e-3", "--num_train_epochs=2", "--save_checkpoints_steps=4", "--steps_per_loop=1",
         "--deterministic", "--eval_every_steps=4", "--metric_for_best=loss"]


def write_csv(path, examples, labelled=True):
  """`examples` as pandas writes SWAG's files: the index column, the official columns, no newline at the end."""
  rows = [(HEADER if labelled else TEST_HEADER).split(",")]
  for e in examples:
    rows.append([e.guid, "vid", "1", f"{e.sent1} {e.sent2}", e.sent1, e.sent2, "gold", *e.endings]
                + ([str(e.label)] if labelled else []))
  text = "\n".join(_csv_line(row) for row in rows)
  with open(path, "w", encoding="utf-8", newline="") as f:
    f.write(text)


def _csv_line(row):
  out = []
  for field in row:
    out.append(f'"{field}"' if "," in field else field)
  return ",".join(out)


def learnable(n, seed):
  """Examples whose true ending says "water" (and no other does), with a comma in some contexts (quoted)."""
  rng = np.random.default_rng(seed)
  out = []
  for e in make_examples(n, seed=seed, words=5):
    label = int(rng.integers(0, 4))
    endings = tuple("into water" if c == label else ending.replace("water", "park")
                    for c, ending in enumerate(e.endings))
    out.append(swag.SwagExample(e.guid, e.sent1.replace(" ", ", ", 1), e.sent2, endings, label))
  return out


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """model/ (a tiny random encoder in the pretraining hand-off layout, its vocab.txt) and data/ with train.csv
  (21 examples), val.csv (7) and test.csv (val's examples without labels)."""
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  directory = tmp_path_factory.mktemp("swag_run")
  tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
  config = BertConfig.from_preset("tiny", vocab_size=len(tokens), num_hidden_layers=1, hidden_size=18,
                                  num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 4,
                                  hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  checkpoints.export_encoder(BertEncoder(config), config, str(directory / "model"))
  (directory / "model" / "vocab.txt").write_text("\n".join(tokens) + "\n")
  (directory / "data").mkdir()
  write_csv(directory / "data" / "train.csv", learnable(21, seed=1))
  val = learnable(7, seed=2)
  write_csv(directory / "data" / "val.csv", val)
  write_csv(directory / "data" / "test.csv", val, labelled=False)
  return directory


def _run(cwd, *args, helper=False, **env):
  script = os.path.join(th.REPO, "scripts", "run_swag.py")
  command = [os.path.join(th.REPO, "tests", "interrupted_run.py")] if helper else [script]
  return subprocess.run([sys.executable, *command, *FLAGS, *args], cwd=cwd, capture_output=True, text=True,
                        timeout=300, env=th.python_env(INTERRUPT_SCRIPT="run_swag.py", **env))


def _read_predictions(path):
  with open(path, newline="", encoding="utf-8") as f:
    return list(csv.reader(f))


def _weights(directory):
  reader = tf.train.load_checkpoint(str(directory / "model"))
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.startswith("model/")}


@pytest.mark.slow
def test_trains_evaluates_predicts_resumes_and_reloads(workdir, monkeypatch):
  # The whole run needs nothing of the stopped and resumed one: it runs beside them, on the second core.
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    uninterrupted = pool.submit(_run, workdir, *TRAIN, "--output_dir=whole")
    stopped = _run(workdir, *TRAIN, "--output_dir=out", helper=True, INTERRUPT_AT_STEP=3, INTERRUPT_SIGNAL="INT")
    stopped_left_a_model = (workdir / "out" / "swag_model").exists()
    resumed = _run(workdir, *TRAIN, "--output_dir=out")
    whole = uninterrupted.result()
  assert whole.returncode == 0, whole.stderr[-3000:]
  out = workdir / "whole"
  results = json.loads((out / "eval_results.json").read_text())
  assert list(results)[:3] == ["accuracy", "loss", "eval_examples"] and results["eval_examples"] == 7
  assert results["train_examples"] == 21 and results["train_steps"] == 21 * 2 // 4
  assert f"accuracy = {results['accuracy']}\n" in (out / "eval_results.txt").read_text()
  assert sorted(os.listdir(out / "swag_model")) == ["bert_config.json", "model.data-00000-of-00001",
                                                     "model.index", "swag.json", "vocab.txt"]
  assert json.loads((out / "swag_model" / "swag.json").read_text()) == {
      "max_seq_length": T, "do_lower_case": True, "num_choices": 4}

  # test.csv holds val's examples: its predictions, scored against val's labels, give the reported accuracy.
  rows = _read_predictions(out / "test_predictions.csv")
  assert rows[0] == ["id", "label", "ending", "probability_0", "probability_1", "probability_2", "probability_3"]
  val = swag.read_examples(str(workdir / "data" / "val.csv"), has_labels=True).examples
  assert [r[0] for r in rows[1:]] == [e.guid for e in val]
  probabilities = np.array([[float(p) for p in r[3:]] for r in rows[1:]])
  np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, atol=3e-6)
  chosen = [int(r[1]) for r in rows[1:]]
  assert chosen == probabilities.argmax(axis=1).tolist()
  assert [r[2] for r in rows[1:]] == [e.endings[c] for e, c in zip(val, chosen)]
  assert np.mean([c == e.label for c, e in zip(chosen, val)]) == pytest.approx(results["accuracy"])

  # Ctrl-C at step 3 (saved), then the same command: resumes and ends where the whole run did.
  assert stopped.returncode == 130, stopped.stderr[-3000:]
  assert not stopped_left_a_model
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "resuming at step 3" in resumed.stderr and "SWAG train: reusing features/swag/train-" in resumed.stderr
  # Evaluation while training (steps 4, 8 and the last, 10): the resumed run saw what the whole one saw. The best
  # by the loss (--metric_for_best=loss) is the lowest.
  history = results["eval_history"]
  assert [h["step"] for h in history] == [4, 8, 10] and results["metric_for_best"] == "loss"
  lowest = min(history, key=lambda h: h["loss"])
  assert (results["best_step"], results["best_metric"]) == (lowest["step"], lowest["loss"])
  assert len({h["loss"] for h in history}) == 3
  assert json.loads((workdir / "out" / "eval_results.json").read_text())["eval_history"] == history
  a, b = _weights(out / "swag_model"), _weights(workdir / "out" / "swag_model")
  assert a.keys() == b.keys() and len(a) > 10
  for name in a:
    np.testing.assert_array_equal(b[name], a[name], err_msg=name)
  assert _read_predictions(workdir / "out" / "test_predictions.csv") == rows

  # Evaluation and prediction alone, from the saved model, into another directory (in this process: the library
  # call the script makes); --export_dir hands the model folder to the export (tested in test_swag_serving).
  from bert_tf.tasks.swag import serving as swag_serving

  exports = []
  monkeypatch.setattr(swag_serving, "export_swag",
                      lambda *args, **kwargs: exports.append((args, kwargs)) or "exported")
  said = []
  config = _config(workdir, do_eval=True, do_predict=True, init_checkpoint=str(out / "swag_model"),
                   output_dir=str(workdir / "again"), export_dir=str(workdir / "export"), model_name="swag_tiny")
  summary = swag_run.run_swag(config, tf.distribute.OneDeviceStrategy("/cpu:0"), say=said.append)
  assert summary["model_dir"] == str(out / "swag_model")
  assert any(line.startswith(f"SWAG val: reusing {workdir}/features/swag/val-") for line in said), said
  again = json.loads((workdir / "again" / "eval_results.json").read_text())
  assert again["accuracy"] == results["accuracy"]
  # The loss is the one training minimises: the mean cross-entropy of the four endings' logits.
  from bert_tf.data.tokenization import FullTokenizer
  from bert_tf.tasks.swag.folder import load_model

  logits = swag_run.predict_logits(load_model(str(out / "swag_model")), config, "val", swag.read_split(
      str(workdir / "data"), "val"), tf.distribute.OneDeviceStrategy("/cpu:0"),
      FullTokenizer(str(workdir / "model" / "vocab.txt")), 3, lambda line: None)
  log_p = logits.astype(np.float64) - np.logaddexp.reduce(logits.astype(np.float64), axis=1, keepdims=True)
  assert again["loss"] == pytest.approx(-np.mean(log_p[np.arange(7), [e.label for e in val]]), abs=1e-5)
  assert again["loss"] == pytest.approx(results["loss"], abs=1e-6)
  assert _read_predictions(workdir / "again" / "test_predictions.csv") == rows
  assert not (workdir / "again" / "test_results.json").exists()  # test.csv has no labels

  # A test file with labels (val's, as test.csv) is scored as val is: test_results.txt / .json, logged as test.
  os.makedirs(workdir / "labelled", exist_ok=True)
  write_csv(workdir / "labelled" / "val.csv", val)
  write_csv(workdir / "labelled" / "test.csv", val)
  said.clear()
  config = _config(workdir, do_eval=True, do_predict=True, init_checkpoint=str(out / "swag_model"),
                   output_dir=str(workdir / "scored"))
  config.data_dir = str(workdir / "labelled")
  swag_run.run_swag(config, tf.distribute.OneDeviceStrategy("/cpu:0"), say=said.append)
  scored = json.loads((workdir / "scored" / "test_results.json").read_text())
  # The same examples in other batches (prediction's batch size, not evaluation's): the float32 sums differ in order.
  assert scored["accuracy"] == again["accuracy"] and scored["loss"] == pytest.approx(again["loss"], rel=1e-6)
  assert scored["test_examples"] == 7 and f"loss = {scored['loss']}\n" in (workdir / "scored" /
                                                                           "test_results.txt").read_text()
  assert f"SWAG test: accuracy {scored['accuracy']:.4f}  loss {scored['loss']:.4f} (7 examples)" in said
  assert _read_predictions(workdir / "scored" / "test_predictions.csv") == rows
  assert exports == [((str(out / "swag_model"), str(workdir / "export"), "swag_tiny"), {"max_request_chars": None})]
  assert summary["export"] == "exported"


def _config(workdir, output_dir, init_checkpoint, **flags):
  from bert_tf.training import finetuning

  bert_config = BertConfig.from_json_file(str(workdir / "model" / "bert_config.json"))
  ft = finetuning.FinetuningConfig(output_dir=output_dir, init_checkpoint=init_checkpoint, bert_config=bert_config,
                                   distribution_strategy="one_device", eval_batch_size=3, predict_batch_size=5)
  return swag_run.SwagConfig(data_dir=str(workdir / "data"), vocab_file=str(workdir / "model" / "vocab.txt"),
                             finetuning=ft, max_seq_length=T, features_dir=str(workdir / "features"), **flags)


def test_bad_input_stops_before_training_with_one_line_naming_file_and_line(workdir):
  bad = workdir / "bad_data"
  bad.mkdir()
  write_csv(bad / "train.csv", learnable(5, seed=3))
  lines = (workdir / "data" / "val.csv").read_text().split("\n")
  lines[2] = lines[2][:-1] + "7"
  (bad / "val.csv").write_text("\n".join(lines))
  result = _run(workdir, "--do_train", "--do_eval", "--init_checkpoint=model", "--output_dir=bad_out",
                "--data_dir=bad_data", "--features_dir=bad_features")
  assert result.returncode == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert errors == [f"error: {os.path.join('bad_data', 'val.csv')}:3: label '7' is not one of 0-3 (the index of "
                    "the true ending); repair or delete that row"], result.stderr[-3000:]
  assert not (workdir / "bad_out").exists() and not (workdir / "bad_features").exists()  # not even empty

  # Flags checked before any data is read: prediction without a fine-tuned model, a sequence too long.
  with pytest.raises(ValueError, match=r"^--do_eval/--do_predict without --do_train need a fine-tuned model: "
                     r"--init_checkpoint=<a run's output_dir>/swag_model$"):
    _config(workdir, str(workdir / "bad_out"), str(workdir / "model"), do_predict=True).validate()
  with pytest.raises(ValueError, match=f"^--max_seq_length={T + 5} exceeds max_position_embeddings={T + 4} of the "
                     "BERT config; lower it"):
    config = _config(workdir, str(workdir / "bad_out"), str(workdir / "model"), do_train=True)
    config.max_seq_length = T + 5
    config.validate()
