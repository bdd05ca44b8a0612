"""SQuAD post-processing: byte-for-byte equality of predictions.json, nbest_predictions.json and null_odds.json
with google-research's `run_squad.py` `write_predictions` (PyPI bert-tensorflow 1.0.4, "the reference") on the
corner-case fixture of test_squad_data.py and on real dev-v2.0 questions, with random logits plus crafted ones.

The reference runs in a subprocess (see test_squad_data.py) on its own examples and features of the same file, with
the same logits keyed by unique_id (its features equal ours field for field: test_squad_data.py). Logits travel as
JSON numbers, which carry a float32's value exactly, and both sides compute in Python floats, so every float
written (logits, probabilities, null odds) is compared exactly, as text.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.data import tokenization
from bert_tf.tasks.squad import data as squad
from bert_tf.tasks.squad import postprocess as post
from test_squad_data import DEV_V2, build_fixture, dev_subset, write_json

_REFERENCE_DRIVER = r"""
import json, os, sys, types
sys.modules["bert.modeling"] = types.ModuleType("bert.modeling")
sys.modules["bert.optimization"] = types.ModuleType("bert.optimization")
import tensorflow.compat.v1 as tf
tf.logging.set_verbosity(tf.logging.ERROR)
from bert import run_squad, tokenization
run_squad.FLAGS(["reference"])
errors = {}
for job in json.load(open(sys.argv[1])):
  tokenizer = tokenization.FullTokenizer(job["vocab_file"], do_lower_case=True)
  examples = run_squad.read_squad_examples(job["input_file"], False)
  features = []
  seq, stride, query = job["sizes"]
  run_squad.convert_examples_to_features(examples, tokenizer, seq, stride, query, False, features.append)
  logits = json.load(open(job["logits_file"]))
  results = [run_squad.RawResult(f.unique_id, *logits[str(f.unique_id)]) for f in features]
  run_squad.FLAGS.version_2_with_negative = job["v2"]
  for i, threshold in enumerate(job["thresholds"]):
    run_squad.FLAGS.null_score_diff_threshold = threshold
    out = os.path.join(job["output_dir"], str(i))
    os.makedirs(out)
    try:
      run_squad.write_predictions(examples, features, results, job["n_best_size"], job["max_answer_length"], True,
                                  *(os.path.join(out, n) for n in job["files"]))
    except Exception as e:
      errors[job["name"]] = f"{type(e).__name__}: {e}"
json.dump(errors, open(sys.argv[2], "w"))
"""

FILES = [post.PREDICTIONS_FILE, post.NBEST_FILE, post.NULL_ODDS_FILE]
ALL_INVALID = "long-question"  # Its 9 question tokens fill every window's first 11 positions.

# name: input, v2, (max_seq_length, doc_stride, max_query_length), n_best_size, max_answer_length, thresholds.
JOBS = [
    dict(name="v1", input="fixture", v2=False, sizes=(37, 11, 9), n_best_size=20, max_answer_length=30,
         thresholds=[0.0]),
    dict(name="v2", input="fixture", v2=True, sizes=(37, 11, 9), n_best_size=20, max_answer_length=30,
         thresholds=[0.0, -1.5, 2.0]),
    dict(name="v2-61", input="fixture", v2=True, sizes=(61, 17, 12), n_best_size=20, max_answer_length=30,
         thresholds=[0.0]),
    dict(name="v2-small", input="fixture", v2=True, sizes=(37, 11, 9), n_best_size=10, max_answer_length=4,
         thresholds=[1.0]),
    # Every span of ALL_INVALID invalid: the placeholder "empty" (v1.1), a crash in the reference (v2.0).
    dict(name="v1-all-invalid", input="fixture", v2=False, sizes=(37, 11, 9), n_best_size=10, max_answer_length=4,
         thresholds=[0.0], all_invalid=True),
    dict(name="v2-all-invalid", input="fixture", v2=True, sizes=(37, 11, 9), n_best_size=10, max_answer_length=4,
         thresholds=[1.0], all_invalid=True),
    dict(name="dev", input="dev", v2=True, sizes=(384, 128, 64), n_best_size=20, max_answer_length=30,
         thresholds=[0.0, -3.0]),
    dict(name="dev-v1", input="dev", v2=False, sizes=(61, 17, 12), n_best_size=20, max_answer_length=30,
         thresholds=[0.0]),
]

# Question id -> WordPieces (joined, "##" removed) made the best span, and the text the reference gives it:
# accents, punctuation split off and glued on, CJK, and an [UNK] and a no-break space that defeat the alignment
# (the whole word comes back).
CRAFTED_TEXTS = {
    "a0-w0": ("1895", "1895"),
    "a0-w1": ("cafe angstrom", "Café Ångström"),
    "a0-w2": ("naive", "naïve"),
    "a0-w3": ("12 . 5 %", "12.5%"),
    "a0-w4": ("zurich", "Zürich"),
    "a0-w5": ("emile durand", "Émile Durand"),
    "a0-w6": ("firm ' s archive", "firm's archive"),
    "a0-w7": ("—", "—"),
    "a1-w0": ("東 京", "東京"),
    "a1-w2": ("大 [UNK]", "東京と大阪は日本の大都市です。"),  # [UNK] is not in the text: the whole word.
    "a1-w1": ("tokyo", "Tokyo\u00a0Tower"),
    "a2-w0": ("rhone", "Rhône"),
    "a2-w1": ("london", "London"),
}
TIES_ZERO, TIES_FEW = "a0-w10", "a2-w10"  # All logits 0; logits in {0, 1, 2}.
ACROSS_WINDOWS = "a0-w20"
TOO_LONG = "a2-w20"


def _pieces(tokens):
  return " ".join(" ".join(tokens).replace(" ##", "").replace("##", "").split())


def _find_span(windows, wanted, max_answer_length):
  """(start logits, end logits, s, e) of the first valid span whose WordPieces spell `wanted`."""
  for f, start, end in windows:
    for s in (s for s in f.token_to_orig_map if f.token_is_max_context[s]):
      for e in range(s, s + max_answer_length):
        if e in f.token_to_orig_map and _pieces(f.tokens[s:e + 1]) == wanted:
          return start, end, s, e
  return None


def _craft(name_to_windows, job, rng):
  """Overrides the random logits of the crafted questions in place."""
  for qid, (wanted, _) in CRAFTED_TEXTS.items():
    span = _find_span(name_to_windows[qid], wanted, job["max_answer_length"])
    assert span or job["max_answer_length"] < 30, (qid, job["name"])
    if span:
      start, end, s, e = span
      start[s], end[e] = 12.0, 12.0
  if job["n_best_size"] >= 20:  # Fewer all-zero top starts would all be [CLS] or question tokens.
    for f, start, end in name_to_windows[TIES_ZERO]:
      start[:], end[:] = 0.0, 0.0
  for f, start, end in name_to_windows[TIES_FEW]:
    start[:], end[:] = rng.integers(0, 3, start.shape), rng.integers(0, 3, end.shape)
  # A span whose start is seen best by one window and whose end lies beyond it: only the next window, which
  # holds both, can propose it; the first can only pair the start with its [SEP] (invalid).
  (f0, start0, end0), (f1, start1, end1) = name_to_windows[ACROSS_WINDOWS][:2]
  last = len(f0.tokens) - 2
  word = f0.token_to_orig_map[last]
  s1 = max(p for p, w in f1.token_to_orig_map.items() if w == word)
  start0[last], end0[last + 1] = 11.0, 11.0
  start1[s1], end1[s1 + 2] = 10.0, 10.0
  # A start with two ends: the better one a token too far.
  for f, start, end in name_to_windows[TOO_LONG]:
    s = min(p for p in f.token_to_orig_map if f.token_is_max_context[p])
    if s + job["max_answer_length"] in f.token_to_orig_map:
      start[s], end[s + job["max_answer_length"]], end[s + job["max_answer_length"] - 1] = 10.0, 10.0, 9.0
  if job.get("all_invalid"):
    for f, start, end in name_to_windows[ALL_INVALID]:
      first_doc = f.tokens.index("[SEP]") + 1
      start[:first_doc] += 20.0  # The top n_best_size (10) starts are all [CLS] or question tokens.


def make_logits(examples, features, job):
  """unique_id -> (start, end) float32 [T]: random (seeded by the job's name), crafted for the fixture."""
  # An -all-invalid job draws the logits of its -small twin.
  rng = np.random.default_rng(sum(map(ord, job["name"].replace("-all-invalid", "-small"))))
  logits = {}
  name_to_windows = {}
  for f in features:
    start, end = (rng.normal(0.0, 2.0, len(f.input_ids)).astype(np.float32) for _ in range(2))
    start[0] += 6.0  # [CLS]: so that the null answer competes with the best span (null odds around 0).
    end[0] += 6.0
    logits[f.unique_id] = (start, end)
    name_to_windows.setdefault(examples[f.example_index].qas_id, []).append((f, start, end))
  if job["input"] == "fixture":
    _craft(name_to_windows, job, rng)
  return logits


def run_ours(job, tokenizer):
  examples = squad.read_squad_examples(job["input_file"], False, job["v2"]).examples
  seq, stride, query = job["sizes"]
  features = list(squad.convert_examples_to_features(examples, tokenizer, False, max_seq_length=seq,
                                                     doc_stride=stride, max_query_length=query))
  return examples, features


@pytest.fixture(scope="module")
def tokenizer(bert_uncased_vocab_file):
  return tokenization.FullTokenizer(bert_uncased_vocab_file, do_lower_case=True)


@pytest.fixture(scope="module")
def runs(tmp_path_factory, bert_uncased_vocab_file, tokenizer):
  """[(job, examples, features, logits, the reference's output dir)], and the reference's errors by job."""
  d = tmp_path_factory.mktemp("postprocess")
  inputs = {"fixture": write_json(d / "fixture.json", build_fixture(True))}
  if os.path.exists(DEV_V2):
    inputs["dev"] = write_json(d / "dev.json", dev_subset(DEV_V2, 40, training=False))
  out, jobs = [], []
  for job in JOBS:
    if job["input"] not in inputs:
      continue
    job = dict(job, input_file=inputs[job["input"]], vocab_file=bert_uncased_vocab_file,
               output_dir=str(d / job["name"]), logits_file=str(d / f"{job['name']}-logits.json"), files=FILES)
    examples, features = run_ours(job, tokenizer)
    logits = make_logits(examples, features, job)
    with open(job["logits_file"], "w") as f:
      json.dump({uid: [s.tolist(), e.tolist()] for uid, (s, e) in logits.items()}, f)
    jobs.append(job)
    out.append((job, examples, features, logits))
  (d / "jobs.json").write_text(json.dumps(jobs))
  run = subprocess.run([sys.executable, "-c", _REFERENCE_DRIVER, str(d / "jobs.json"), str(d / "errors.json")],
                       text=True, capture_output=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES=""))
  assert run.returncode == 0, f"the reference failed:\n{run.stderr[-3000:]}"
  return out, json.loads((d / "errors.json").read_text())


def _postprocess(job, examples, features, logits, threshold=None):
  return post.postprocess(examples, features, logits, n_best_size=job["n_best_size"],
                          max_answer_length=job["max_answer_length"], do_lower_case=True,
                          version_2_with_negative=job["v2"],
                          null_score_diff_threshold=job["thresholds"][0] if threshold is None else threshold)


def _read(path):
  with open(path, encoding="utf-8") as f:
    return f.read()


def test_equals_reference(runs, tmp_path):
  """All three files, byte for byte, for every job and threshold; other thresholds by `apply_threshold`."""
  compared = 0
  for job, examples, features, logits in runs[0]:
    if job["name"] in runs[1]:
      continue
    ours = _postprocess(job, examples, features, logits)
    paths = post.write_predictions(ours, str(tmp_path / job["name"]))
    assert sorted(paths) == sorted(FILES if job["v2"] else FILES[:2])
    for i, threshold in enumerate(job["thresholds"]):
      reference = os.path.join(job["output_dir"], str(i))
      for name in FILES:
        if not job["v2"] and name == post.NULL_ODDS_FILE:
          assert not os.path.exists(os.path.join(reference, name)) and not os.path.exists(
              os.path.join(tmp_path, job["name"], name))
          continue
        theirs = _read(os.path.join(reference, name))
        if name == post.PREDICTIONS_FILE and i > 0:  # The same questions in the same order, other answers.
          answers = post.apply_threshold(ours.null_odds, ours.best_non_null_texts, threshold)
          assert list(answers.items()) == list(json.loads(theirs).items()), f"{job['name']} threshold={threshold}"
        else:
          assert _read(paths[name]) == theirs, f"{job['name']} threshold={threshold}: {name}"
      compared += 1
  assert compared == sum(len(j["thresholds"]) for j, *_ in runs[0]) - 1


def test_reference_crashes_on_a_lone_null_answer(runs, tmp_path):
  """v2-all-invalid: the reference fails; we answer "" with null odds NO_CANDIDATE_NULL_ODDS, and every other
  question exactly as the reference does in v2-small (the same logits but for ALL_INVALID's)."""
  assert runs[1] == {"v2-all-invalid": "AttributeError: 'NoneType' object has no attribute 'start_logit'"}
  job, examples, features, logits = next(r for r in runs[0] if r[0]["name"] == "v2-all-invalid")
  ours = _postprocess(job, examples, features, logits)
  assert ours.predictions[ALL_INVALID] == "" and ours.best_non_null_texts[ALL_INVALID] == ""
  assert ours.null_odds[ALL_INVALID] == post.NO_CANDIDATE_NULL_ODDS
  null = min(((float(s[0]) + float(e[0])), float(s[0]), float(e[0]))
             for f in features if examples[f.example_index].qas_id == ALL_INVALID for s, e in [logits[f.unique_id]])
  assert ours.nbest[ALL_INVALID] == [{"text": "", "probability": 1.0, "start_logit": null[1], "end_logit": null[2]}]
  assert post.apply_threshold(ours.null_odds, ours.best_non_null_texts, 1e300)[ALL_INVALID] == ""
  small = next(r for r in runs[0] if r[0]["name"] == "v2-small")[0]
  for name, value in ((post.PREDICTIONS_FILE, ours.predictions), (post.NBEST_FILE, ours.nbest),
                      (post.NULL_ODDS_FILE, ours.null_odds)):
    theirs = json.loads(_read(os.path.join(small["output_dir"], "0", name)))
    assert {k: v for k, v in value.items() if k != ALL_INVALID} == {k: v for k, v in theirs.items()
                                                                     if k != ALL_INVALID}
  written = _read(post.write_predictions(ours, str(tmp_path))[post.NULL_ODDS_FILE])
  assert json.loads(written)[ALL_INVALID] == post.NO_CANDIDATE_NULL_ODDS
  assert "Infinity" not in written and "NaN" not in written  # Strict JSON.


def test_fixture_reaches_the_corner_cases(runs):
  """The comparison is worth making: the crafted answers come out, ties and the window edge are hit, the
  length limit bites, "empty" is written, and thresholds move answers to "" and back."""
  by_name = {r[0]["name"]: r for r in runs[0]}
  job, examples, features, logits = by_name["v1"]
  ours = _postprocess(job, examples, features, logits)
  for qid, (_, text) in CRAFTED_TEXTS.items():
    assert ours.predictions[qid] == text, qid
  # Ties: with all logits 0, every candidate scores 0 and the first window's first valid span wins.
  zero = ours.nbest[TIES_ZERO]
  assert len(zero) == 20 and {e["probability"] for e in zero} == {1 / 20}
  assert len({(e["start_logit"], e["end_logit"]) for e in ours.nbest[TIES_FEW]}) < len(ours.nbest[TIES_FEW])
  assert ours.predictions[ACROSS_WINDOWS] == "Swiss watchmakers"  # From "watch ##makers", without ";".
  job, examples, features, logits = by_name["v1-all-invalid"]
  ours = _postprocess(job, examples, features, logits)
  assert ours.nbest[ALL_INVALID] == [{"text": "empty", "probability": 1.0, "start_logit": 0.0, "end_logit": 0.0}]
  job, examples, features, logits = by_name["v2-61"]
  ours = _postprocess(job, examples, features, logits)
  assert (ours.nbest[TOO_LONG][0]["start_logit"], ours.nbest[TOO_LONG][0]["end_logit"]) == (10.0, 9.0)
  job, examples, features, logits = by_name["v2"]
  ours = _postprocess(job, examples, features, logits)
  assert ours.predictions[TIES_ZERO] and ours.null_odds[TIES_ZERO] == 0.0  # Not above 0.0: answered.
  for threshold in job["thresholds"]:
    answered = sum(map(bool, post.apply_threshold(ours.null_odds, ours.best_non_null_texts, threshold).values()))
    assert 0 < answered < len(examples)
  assert {"", "Tokyo\u00a0Tower"} <= {e["text"] for nbest in ours.nbest.values() for e in nbest}


@pytest.mark.skipif(not os.path.exists(DEV_V2), reason=f"{DEV_V2} not present")
def test_dev_subset_was_compared(runs):
  assert {"dev", "dev-v1"} <= {r[0]["name"] for r in runs[0]}


def test_apply_threshold_equals_postprocess(runs):
  job, examples, features, logits = next(r for r in runs[0] if r[0]["name"] == "v2")
  ours = _postprocess(job, examples, features, logits)
  for threshold in (-1e9, -2.5, 0.0, 0.7, 3.0, 1e9):
    assert post.apply_threshold(ours.null_odds, ours.best_non_null_texts, threshold) == _postprocess(
        job, examples, features, logits, threshold).predictions
  with pytest.raises(ValueError, match="different questions"):
    post.apply_threshold(ours.null_odds, {}, 0.0)


def test_writes_remote_paths(runs):
  """gs:// goes through tf.io.gfile; TensorFlow's in-memory ram:// stands in for it."""
  job, examples, features, logits = next(r for r in runs[0] if r[0]["name"] == "v2-small")
  ours = _postprocess(job, examples, features, logits)
  paths = post.write_predictions(ours, "ram://squad_postprocess_test/out")
  import tensorflow as tf

  for name, path in paths.items():
    assert path == f"ram://squad_postprocess_test/out/{name}"
    with tf.io.gfile.GFile(path) as f:
      assert f.read() == _read(os.path.join(job["output_dir"], "0", name))


def test_errors(runs):
  job, examples, features, logits = next(r for r in runs[0] if r[0]["name"] == "v2-small")
  uid = features[3].unique_id
  qid = examples[features[3].example_index].qas_id
  for bad, message in [
      ({k: v for k, v in logits.items() if k != uid},
       re.escape(f"no logits for feature {uid} (question {qid!r}); predict every feature")),
      ({**logits, uid: (logits[uid][0][:-1], logits[uid][1])},
       rf"feature {uid} \(question {qid!r}\): start_logits has shape \(36,\), expected \(37,\)"),
      ({**logits, uid: (logits[uid][0], np.full(37, np.nan, np.float32))},
       rf"feature {uid} \(question {qid!r}\): end_logits are not all finite")]:
    with pytest.raises(ValueError, match=message):
      post.postprocess(examples, features, bad)
  with pytest.raises(ValueError, match="--n_best_size=0: must be at least 1"):
    post.postprocess(examples, features, logits, n_best_size=0)
  with pytest.raises(ValueError, match="--max_answer_length=0: must be at least 1"):
    post.postprocess(examples, features, logits, max_answer_length=0)
