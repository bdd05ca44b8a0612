"""scripts/run_squad.py (bert_tf.tasks.squad.run) end to end, as a user runs it: a fresh process in a working
directory, relative paths, a tiny encoder, the v2.0 corner-case fixture of test_squad_data as train and dev file."""

import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys

import pytest

import training_helpers as th
from bert_tf.config import BertConfig
from bert_tf.tasks.squad import metrics as squad_metrics
from bert_tf.tasks.squad import postprocess as post
from test_squad_data import _CONTEXTS, build_fixture, write_json

T, STRIDE, QUERY = 37, 11, 9  # odd sizes: max_seq_length, doc_stride, max_query_length
EVAL_KEYS = ["exact", "f1", "total", "HasAns_exact", "HasAns_f1", "HasAns_total", "NoAns_exact", "NoAns_f1",
             "NoAns_total", "best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory, bert_uncased_vocab_file):
  """A working directory with model/ (a tiny random encoder in the pretraining hand-off layout, with
  bert-base-uncased's vocab.txt) and the v2.0 fixture as train.json and dev.json."""
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  directory = tmp_path_factory.mktemp("squad_run")
  config = BertConfig.from_preset("tiny", vocab_size=30522, num_hidden_layers=1, hidden_size=18,
                                  num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 4,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  checkpoints.export_encoder(BertEncoder(config), config, str(directory / "model"))
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


def _training_loss(workdir, model_dir):
  """The mean over train.json's training windows of (CE(start) + CE(end)) / 2, each softmax over the window's
  real tokens, of the model's logits: computed here in float64."""
  import numpy as np

  from bert_tf.data.tokenization import FullTokenizer
  from bert_tf.tasks.squad import data as squad
  from bert_tf.tasks.squad.folder import load_model

  examples = squad.read_squad_examples(str(workdir / "train.json"), True, True).examples
  windows = list(squad.convert_examples_to_features(examples, FullTokenizer(str(workdir / "model" / "vocab.txt")),
                                                    True, T, STRIDE, QUERY))
  inputs = {k: np.array([getattr(w, k) for w in windows], np.int32) for k in ("input_ids", "input_mask", "segment_ids")}
  outputs = load_model(str(model_dir))(inputs, training=False)
  mask = inputs["input_mask"] > 0
  total = 0.0
  for side in ("start", "end"):
    logits = np.where(mask, outputs[f"{side}_logits"].numpy().astype(np.float64), -np.inf)
    log_p = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
    total += -np.mean(log_p[np.arange(len(windows)), [getattr(w, f"{side}_position") for w in windows]])
  return total / 2


def test_trains_predicts_evaluates_and_later_predicts_at_the_stored_threshold(workdir):
  done = _run(workdir, "--do_train", "--do_predict", "--do_eval", "--train_file=train.json",
              "--init_checkpoint=model", "--output_dir=out", "--train_batch_size=16", "--learning_rate=1e-3",
              "--num_train_epochs=0.2", "--n_best_size=5", "--max_answer_length=7", "--eval_every_steps=1",
              "--keep_best_checkpoint")
  assert done.returncode == 0, done.stderr[-3000:]
  # The dev features made once for every evaluation (while training and at the end): one line, no "reusing".
  assert done.stderr.count(": wrote evaluation features") == 1 and "reusing" not in done.stderr
  out = workdir / "out"
  for name in (post.PREDICTIONS_FILE, post.NBEST_FILE, post.NULL_ODDS_FILE):
    assert (out / name).exists(), name
  results = _read(out / "eval_results.json")
  assert list(results)[:len(EVAL_KEYS)] == EVAL_KEYS
  assert results["NoAns_total"] == 1 and results["null_score_diff_threshold"] == 0.0
  # Evaluated at every step (v2.0: best F1 over thresholds picks the best); the model saved is the best one.
  history = results["eval_history"]
  # An epoch is a pass over the windows: 0.2 of the 772 windows' passes at batch 16 is 9 steps.
  assert (results["train_windows"], results["train_steps"]) == (772, int(772 / 16 * 0.2))
  assert [h["step"] for h in history] == list(range(1, results["train_steps"] + 1))
  assert results["metric_for_best"] == "best_f1" and results["best_f1"] == results["best_metric"] == max(
      h["best_f1"] for h in history)
  text = (out / "eval_results.txt").read_text()
  assert f"best_f1_thresh = {results['best_f1_thresh']}\n" in text
  # The loss training minimises, on dev's windows (dev.json is train.json: its training windows, labelled by the
  # training reader, apart from the run's evaluation), from the saved (best) model's logits; each evaluation's.
  assert results["loss"] == pytest.approx(_training_loss(workdir, out / "squad_model"), abs=1e-5)
  assert f"loss = {results['loss']}\n" in text and f"  loss {results['loss']:.4f}" in done.stderr
  assert all(h["loss"] > 0 for h in history) and results["loss"] in [h["loss"] for h in history]
  settings = _read(out / "squad_model" / "squad.json")
  assert settings["null_score_diff_threshold"] == results["best_f1_thresh"]
  assert settings["max_seq_length"] == T and settings["version_2_with_negative"] is True
  predictions = _read(out / post.PREDICTIONS_FILE)
  assert len(predictions) == results["total"] == len(_read(out / post.NULL_ODDS_FILE))
  # The plain scores are predictions.json's, as evaluate-v2.0.py gives them without --na-prob-file.
  plain = squad_metrics.evaluate_v2(_read(workdir / "dev.json"), predictions)
  assert {k: results[k] for k in plain} == dict(plain)

  # Prediction alone, from the saved model: answers at the stored threshold, features reused. It also exports
  # (--export_dir) for test_export_answers_raw_questions_as_the_python_path_does, which compares the export with
  # out2: a second, otherwise identical prediction run just for the export would cost a process start.
  again = _run(workdir, "--do_predict", "--init_checkpoint=out/squad_model", "--output_dir=out2",
               "--n_best_size=5", "--max_answer_length=7", "--export_dir=export")
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


@pytest.fixture(scope="module")
def refused(workdir):
  """The runs that must stop with one line, side by side (two cores; each is a TensorFlow start-up that needs
  nothing of the other): {"bad_file": a run on a predict file with an answer outside its context, "unknowns":
  training with --include_unknowns=0,
  "casing": prediction with --do_lower_case=False from the model of the first test (None without it)}."""
  bad = build_fixture(True)
  bad["data"][0]["paragraphs"][0]["qas"][3]["answers"][0]["answer_start"] = len(_CONTEXTS[0])
  write_json(workdir / "bad.json", bad)
  runs = {"bad_file": ("--do_train", "--do_predict", "--train_file=train.json", "--predict_file=bad.json",
                       "--init_checkpoint=model", "--output_dir=bad_out", "--features_dir=bad_features"),
          "unknowns": ("--do_train", "--train_file=train.json", "--init_checkpoint=model", "--output_dir=zero_out",
                       "--include_unknowns=0")}
  if (workdir / "out" / "squad_model" / "squad.json").exists():
    runs["casing"] = ("--do_predict", "--init_checkpoint=out/squad_model", "--output_dir=out_cased",
                      "--do_lower_case=False")
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    started = {name: pool.submit(_run, workdir, *args) for name, args in runs.items()}
    return {"casing": None} | {name: run.result() for name, run in started.items()}


def test_bad_predict_file_stops_before_training_with_one_line(workdir, refused):
  qa = build_fixture(True)["data"][0]["paragraphs"][0]["qas"][3]
  result = refused["bad_file"]
  assert result.returncode == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert errors == [f"error: bad.json: question '{qa['id']}': answer_start {len(_CONTEXTS[0])} with a text of "
                    f"{len(qa['answers'][0]['text'])} characters is outside the context of {len(_CONTEXTS[0])} "
                    "characters; fix answer_start"], result.stderr[-3000:]
  assert not (workdir / "bad_out").exists() and not (workdir / "bad_features").exists()  # not even empty


# Answers every question of a SQuAD file with an exported SavedModel, in a process that imports only TensorFlow
# and tensorflow-text (`python -I`: not even the repository is on the path); prints JSON {id: outputs}.
_ANSWER_IN_FRESH_PROCESS = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
rows = [(qa["id"], qa["question"], p["context"]) for a in json.load(open(sys.argv[2], encoding="utf-8"))["data"]
        for p in a["paragraphs"] for qa in p["qas"]]
out = serve(question=tf.constant([r[1] for r in rows]), context=tf.constant([r[2] for r in rows]))
out = {k: v.numpy().tolist() for k, v in out.items()}
# (import tensorflow itself imports keras in TF 2.20; what matters is that nothing of ours is needed)
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("bert_tf", "keras_hub"))
print(json.dumps({"loaded": loaded, "answers": {r[0]: {k: (v[i].decode() if isinstance(v[i], bytes) else v[i])
                                                          for k, v in out.items()} for i, r in enumerate(rows)}}))
"""


def test_include_unknowns_of_zero_is_refused_with_one_line(workdir, refused):
  result = refused["unknowns"]
  assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert errors == ["error: --include_unknowns=0: must be a probability in (0, 1] (the share of the training "
                    "windows without an answer that are kept, e.g. 0.1 for long documents), or negative to keep "
                    "every window (the default)"], result.stderr[-3000:]
  assert not (workdir / "zero_out").exists()


def test_export_answers_raw_questions_as_the_python_path_does(workdir):
  """After the first test, whose prediction run into out2 had --export_dir: it wrote export/squad/1; a fresh
  process with only tensorflow and tensorflow_text answers the dev questions exactly as that run's
  predictions.json."""
  if not (workdir / "out2" / post.PREDICTIONS_FILE).exists():
    pytest.skip("needs the prediction run of test_trains_predicts_evaluates_and_later_predicts_at_the_stored_threshold")
  assert (workdir / "export" / "squad" / "1" / "saved_model.pb").exists()
  manifest = _read(workdir / "export" / "squad" / "1" / "assets.extra" / "bert_tf_manifest.json")
  settings = _read(workdir / "out" / "squad_model" / "squad.json")
  assert (manifest["task_kind"], manifest["version_2_with_negative"], manifest["n_best_size"]) == ("squad", True, 5)
  assert manifest["null_score_diff_threshold"] == settings["null_score_diff_threshold"]
  # The fresh process reads version 1, the export script (below) writes version 2 beside it: they run side by side,
  # on the two cores, rather than one after the other.
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    answering = pool.submit(subprocess.run, [sys.executable, "-I", "-c", _ANSWER_IN_FRESH_PROCESS, "export/squad/1",
                                             "dev.json"], cwd=workdir, capture_output=True, text=True, timeout=300)
    again, asked = _export_again_and_ask(workdir)
    fresh = answering.result()
  assert fresh.returncode == 0, fresh.stderr[-3000:]
  result = json.loads(fresh.stdout.strip().splitlines()[-1])
  assert result["loaded"] == []
  answers = {qid: row["answer"] for qid, row in result["answers"].items()}
  expected = _read(workdir / "out2" / post.PREDICTIONS_FILE)
  null_odds = _read(workdir / "out2" / post.NULL_ODDS_FILE)
  assert set(answers) == set(expected)
  # The stored threshold is the null odds of some dev question (the search picks among them), so that question
  # sits exactly on the boundary, where the last bits of a logit decide: the only difference allowed.
  differing = [qid for qid in expected if answers[qid] != expected[qid]]
  assert len(differing) <= 1, differing
  for qid in differing:
    assert abs(null_odds[qid] - settings["null_score_diff_threshold"]) < 1e-5 and "" in (answers[qid], expected[qid])
  for qid, row in result["answers"].items():
    if null_odds[qid] == post.NO_CANDIDATE_NULL_ODDS:  # no span at all: float32's largest value stands for it
      assert row["null_score_diff"] == pytest.approx(3.4028234663852886e38) and row["answer"] == ""
      continue
    assert row["null_score_diff"] == pytest.approx(null_odds[qid], rel=1e-4, abs=1e-3), qid
    context = next(p["context"] for a in _read(workdir / "dev.json")["data"] for p in a["paragraphs"]
                   for qa in p["qas"] if qa["id"] == qid)
    if row["answer"]:
      assert _as_answered(context[row["start_char"]:row["end_char"]]) == row["answer"]

  # The export script, as a user runs it after a run: the next version; predict.py answers through it.
  assert again.returncode == 0, again.stderr[-3000:]
  assert again.stdout.strip().splitlines()[-1].endswith(os.path.join("export", "squad", "2"))
  assert asked.returncode == 0, asked.stderr[-3000:]
  row = json.loads(asked.stdout.strip().splitlines()[-1])
  assert set(row) >= {"question", "context", "answer", "start_char", "end_char", "score", "null_score_diff"}
  start, end = row["start_char"], row["end_char"]
  context = _CONTEXTS[0]
  assert row["answer"] == ("" if start == -1 else _as_answered(context[start:end]))


def _as_answered(span: str) -> str:
  """A context's span as an answer reads it: its doc tokens joined by single spaces. SQuAD's reader splits at
  space, \\t, \\r, \\n and U+202F only, so a no-break space (the fixture's "Tokyo\\u00a0Tower") stays inside
  its word, where str.split() would split it."""
  return " ".join(word for word in re.split("[ \\t\\r\\n\\u202f]", span) if word)


def _export_again_and_ask(workdir):
  """export_squad.py into export/ (version 2), then predict.py on export/squad, which takes the newest version."""
  again = subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", "export_squad.py"),
                          "--squad_model_dir=out/squad_model", "--export_dir=export"],
                         cwd=workdir, env=th.python_env(), capture_output=True, text=True, timeout=300)
  asked = subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", "predict.py"),
                          "--saved_model_dir=export/squad", "--question=What is it?", f"--context={_CONTEXTS[0]}"],
                         cwd=workdir, env=th.python_env(), capture_output=True, text=True, timeout=300)
  return again, asked


def test_predicting_with_another_casing_than_the_model_is_refused(workdir, refused):
  result = refused["casing"]
  if result is None:
    pytest.skip("needs the trained model of test_trains_predicts_evaluates_and_later_predicts_at_the_stored_threshold")
  assert result.returncode == 1, result.stderr[-3000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
  assert errors == ["error: --do_lower_case=False but the model was trained with --do_lower_case=True "
                    f"({os.path.join('out', 'squad_model', 'squad.json')}); pass --do_lower_case=True"]
  assert not (workdir / "out_cased").exists()


# -- What an epoch is -------------------------------------------------------------------------------------------


def _long_document() -> dict:
  """A long-document set: 7 questions about one context of 29 sentences (290 WordPiece tokens), cut into 25
  windows each at max_seq_length T; each answer ("dock 38") lies whole in 2 of its question's windows."""
  context = " ".join(f"Crate {n} went to dock {n * 7 + 3} on day {n + 2}." for n in range(29))
  qas = []
  for n in (0, 5, 9, 14, 20, 23, 28):
    start = context.index(f"Crate {n} went to ") + len(f"Crate {n} went to ")
    qas.append({"id": f"crate{n}", "question": f"Where did crate {n} go?", "is_impossible": False,
                "answers": [{"text": f"dock {n * 7 + 3}", "answer_start": start}]})
  return {"version": "v2.0", "data": [{"title": "docks", "paragraphs": [{"context": context, "qas": qas}]}]}


def test_an_epoch_is_a_pass_over_the_windows_unless_epoch_unit_is_questions(workdir, bert_uncased_vocab_file):
  """Training on a long document: by default int(windows / batch * epochs) steps, with --epoch_unit=questions
  google-research's int(questions / batch * epochs); each run says what an epoch is and warns that few windows
  hold an answer (and, counted in questions, that the run sees a fraction of the windows). With
  --include_unknowns=0.25 the epoch is the 14 answer windows and 36 of the 161 others (`squad.keep_unknowns`)."""
  from bert_tf.data.tokenization import FullTokenizer
  from bert_tf.tasks.squad import data as squad
  from bert_tf.training import run_identity

  write_json(workdir / "long.json", _long_document())
  examples = squad.read_squad_examples(str(workdir / "long.json"), True, True).examples
  windows = list(squad.convert_examples_to_features(examples, FullTokenizer(bert_uncased_vocab_file), True, T,
                                                    STRIDE, QUERY))
  answered = sum(w.start_position != 0 for w in windows)
  assert (len(examples), len(windows), answered) == (7, 175, 14)  # 8 % of the windows hold an answer
  batch, epochs = 3, 1.5
  common = ("--do_train", "--train_file=long.json", "--init_checkpoint=model", f"--train_batch_size={batch}",
            f"--num_train_epochs={epochs}")
  runs = {unit: (*common, f"--output_dir=long_{unit}", f"--features_dir=long_features_{unit}",
                 *([f"--epoch_unit={unit}"] if unit == "questions" else []))
          for unit in ("windows", "questions")}  # windows: the default, no flag
  runs["unknowns"] = (*common, "--output_dir=long_unknowns", "--features_dir=long_features_unknowns",
                      "--include_unknowns=0.25")
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    done = {unit: run.result() for unit, run in {u: pool.submit(_run, workdir, *a) for u, a in runs.items()}.items()}

  few = ("warning: only 8.0 % of the training windows hold an answer (under 10 %; the windows of SQuAD 2.0's "
         "unanswerable questions, which hold none by design, count too): the model learns mostly to point at [CLS] "
         f"(no answer) and F1 can stay at 0. The contexts are long for --max_seq_length={T} (25 windows a question "
         f"at --doc_stride={STRIDE}).")
  expected = {
      "windows": (int(175 / batch * epochs), [
          f"an epoch is 175 windows of 7 questions (58.33 steps of {batch}); 8.0 % of the windows hold an answer"]),
      "questions": (int(7 / batch * epochs), [
          f"an epoch is 7 questions (--epoch_unit=questions: 2.333 steps of {batch} windows), 0.04 of a pass over "
          "the 175 windows; 8.0 % of the windows hold an answer",
          f"warning: --epoch_unit=questions: 3 steps of {batch} windows are 0.0514 of a pass over the 175 training "
          "windows, so most windows are never trained on"]),
      "unknowns": (int(50 / batch * epochs), [
          f"an epoch is 50 windows of 7 questions (16.67 steps of {batch}); 28.0 % of the windows hold an answer "
          "(--include_unknowns=0.25: each window without one kept with that probability)"])}
  for unit, (steps, lines) in expected.items():
    result = done[unit]
    assert result.returncode == 0, (unit, result.stderr[-3000:])
    summary = json.loads(result.stdout)
    assert (summary["train_steps"], summary["train_windows"], summary["train_examples"],
            summary["train_answer_windows"]) == (steps, 50 if unit == "unknowns" else 175, 7, 14), unit
    for line in [*lines, *([] if unit == "unknowns" else [few])]:
      assert line in result.stderr, (unit, line, result.stderr[-3000:])
    assert (few in result.stderr) == (unit != "unknowns")
    settings = run_identity.read(str(workdir / f"long_{unit}"))["settings"]
    assert (settings["epoch_unit"], settings.get("include_unknowns")) == (
        "questions" if unit == "questions" else "windows", 0.25 if unit == "unknowns" else None)
  assert (expected["windows"][0], expected["questions"][0], expected["unknowns"][0]) == (87, 3, 25)
