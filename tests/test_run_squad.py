"""scripts/run_squad.py (bert_tf.tasks.squad_run) end to end, as a user runs it: a fresh process in a working
directory, relative paths, a tiny encoder, the v2.0 corner-case fixture of test_squad as train and dev file."""

import json
import os
import shutil
import subprocess
import sys

import pytest

import training_helpers as th
from bert_tf.config import BertConfig
from bert_tf.tasks import squad_metrics
from bert_tf.tasks import squad_postprocess as post
from test_squad import _CONTEXTS, build_fixture, write_json

T, STRIDE, QUERY = 37, 11, 9  # odd sizes: max_seq_length, doc_stride, max_query_length
EVAL_KEYS = ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
             "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, bert_uncased_vocab_file):
  """A working directory with model/ (a tiny random encoder in the pretraining hand-off layout, with
  bert-base-uncased's vocab.txt) and the v2.0 fixture as train.json and dev.json."""
  from bert_tf.model.encoder import BertEncoder
  from bert_tf.training import handoff

  directory = tmp_path_factory.mktemp("squad_run")
  config = BertConfig.from_preset("tiny", vocab_size=30522, num_hidden_layers=1, hidden_size=18,
                                  num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 4,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  handoff.export_encoder(BertEncoder(config), config, str(directory / "model"))
  shutil.copy(bert_uncased_vocab_file, directory / "model" / "vocab.txt")
  fixture = build_fixture(True)
  write_json(directory / "train.json", fixture)
  write_json(directory / "dev.json", fixture)
  return directory


def _run(cwd, *args):
  script = os.path.join(th.REPO, "scripts", "run_squad.py")
  return subprocess.run([sys.executable, script, "--vocab_file=model/vocab.txt", "--predict_file=dev.json",
                         "--version_2_with_negative", f"--max_seq_length={T}", f"--doc_stride={STRIDE}",
                         f"--max_query_length={QUERY}", "--features_dir=features",
                         "--distribution_strategy=one_device", "--predict_batch_size=16", *args],
                        cwd=cwd, env=th.python_env(), capture_output=True, text=True, timeout=300)


def _read(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def test_trains_predicts_evaluates_and_later_predicts_at_the_stored_threshold(workdir):
  done = _run(workdir, "--do_train", "--do_predict", "--do_eval", "--train_file=train.json",
              "--init_checkpoint=model", "--output_dir=out", "--train_batch_size=16", "--learning_rate=1e-3",
              "--num_train_epochs=1", "--n_best_size=5", "--max_answer_length=7")
  assert done.returncode == 0, done.stderr[-3000:]
  out = workdir / "out"
  for name in (post.PREDICTIONS_FILE, post.NBEST_FILE, post.NULL_ODDS_FILE):
    assert (out / name).exists(), name
  results = _read(out / "eval_results.json")
  assert list(results)[:len(EVAL_KEYS)] == EVAL_KEYS
  assert results["NoAns_total"] == 1 and results["null_score_diff_threshold"] == 0.0
  text = (out / "eval_results.txt").read_text()
  assert f"best_f1_thresh = {results['best_f1_thresh']}\n" in text
  settings = _read(out / "squad_model" / "squad.json")
  assert settings["null_score_diff_threshold"] == results["best_f1_thresh"]
  assert settings["max_seq_length"] == T and settings["version_2_with_negative"] is True
  predictions = _read(out / post.PREDICTIONS_FILE)
  assert len(predictions) == results["total"] == len(_read(out / post.NULL_ODDS_FILE))
  # The plain scores are predictions.json's, as evaluate-v2.0.py gives them without --na-prob-file.
  plain = squad_metrics.evaluate_v2(_read(workdir / "dev.json"), predictions)
  assert {k: results[k] for k in plain} == dict(plain)

  # Prediction alone, from the saved model: answers at the stored threshold, features reused.
  again = _run(workdir, "--do_predict", "--init_checkpoint=out/squad_model", "--output_dir=out2",
               "--n_best_size=5", "--max_answer_length=7")
  assert again.returncode == 0, again.stderr[-3000:]
  assert "reusing evaluation features" in again.stderr
  null_odds = _read(workdir / "out2" / post.NULL_ODDS_FILE)
  assert null_odds == _read(out / post.NULL_ODDS_FILE)  # the same model, reloaded
  nbest = _read(workdir / "out2" / post.NBEST_FILE)
  best_non_null = {qid: next((e["text"] for e in entries if e["text"]), "") for qid, entries in nbest.items()}
  expected = post.apply_threshold(null_odds, best_non_null, settings["null_score_diff_threshold"])
  assert _read(workdir / "out2" / post.PREDICTIONS_FILE) == expected
  first_nbest = _read(out / post.NBEST_FILE)
  first_best = {qid: next((e["text"] for e in entries if e["text"]), "") for qid, entries in first_nbest.items()}
  assert predictions == post.apply_threshold(null_odds, first_best, 0.0)  # the first run's, at the default
  assert not (workdir / "out2" / "eval_results.json").exists()


def test_bad_predict_file_stops_before_training_with_one_line(workdir):
  bad = build_fixture(True)
  qa = bad["data"][0]["paragraphs"][0]["qas"][3]
  qa["answers"][0]["answer_start"] = len(_CONTEXTS[0])
  write_json(workdir / "bad.json", bad)
  result = _run(workdir, "--do_train", "--do_predict", "--train_file=train.json", "--predict_file=bad.json",
                "--init_checkpoint=model", "--output_dir=bad_out", "--features_dir=bad_features")
  assert result.returncode == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert errors == [f"error: bad.json: question '{qa['id']}': answer_start {len(_CONTEXTS[0])} with a text of "
                    f"{len(qa['answers'][0]['text'])} characters is outside the context of {len(_CONTEXTS[0])} "
                    "characters; fix answer_start"], result.stderr[-3000:]
  assert not (workdir / "bad_out" / "checkpoints").exists() and not (workdir / "bad_features").exists()
