"""SQuAD reading and features: field-for-field equality with google-research's `run_squad.py` (PyPI
bert-tensorflow 1.0.4, "the reference") on a fixture built to hit its corner cases and on real dev-v2.0
questions, and the up-front errors.

The reference runs in a subprocess: importing `run_squad.py` defines ~30 absl flags (--vocab_file,
--max_seq_length, ...) in the process-global FLAGS, which would collide with our scripts' flags in this one.
"""

import json
import os
import subprocess
import sys

import pytest

from bert_tf.data import tokenization
from bert_tf.tasks.squad import data as squad

DEV_V2 = "/work/shared/data/squad/dev-v2.0.json"

# Loads bert/run_squad.py without its model code: `modeling.py` imports tensorflow.contrib, gone in TF 2, and
# nothing we call needs it.
_REFERENCE_DRIVER = r"""
import json, sys, types
sys.modules["bert.modeling"] = types.ModuleType("bert.modeling")
sys.modules["bert.optimization"] = types.ModuleType("bert.optimization")
import tensorflow.compat.v1 as tf
tf.logging.set_verbosity(tf.logging.ERROR)
from bert import run_squad, tokenization
run_squad.FLAGS(["reference"])  # Defaults (e.g. tokenization's --preserve_unused_tokens=False), all parsed.
jobs = json.load(open(sys.argv[1]))
results = []
for job in jobs:
  run_squad.FLAGS.version_2_with_negative = job["v2"]
  tokenizer = tokenization.FullTokenizer(job["vocab_file"], do_lower_case=True)
  try:
    examples = run_squad.read_squad_examples(job["input_file"], job["is_training"])
  except ValueError as e:
    results.append({"error": str(e)})
    continue
  features = []
  run_squad.convert_examples_to_features(examples, tokenizer, job["max_seq_length"], job["doc_stride"],
                                         job["max_query_length"], job["is_training"], features.append)
  results.append({
      "examples": [[e.qas_id, e.question_text, e.doc_tokens, e.orig_answer_text, e.start_position,
                    e.end_position, bool(e.is_impossible)] for e in examples],
      "features": [[f.unique_id, f.example_index, f.doc_span_index, f.tokens,
                    [[k, v] for k, v in f.token_to_orig_map.items()],
                    [[k, bool(v)] for k, v in f.token_is_max_context.items()],
                    f.input_ids, f.input_mask, f.segment_ids, f.start_position, f.end_position,
                    bool(f.is_impossible)] for f in features]})
json.dump(results, open(sys.argv[2], "w"))
"""


def example_row(e):
  return [e.qas_id, e.question_text, list(e.doc_tokens), e.orig_answer_text, e.start_position, e.end_position,
          e.is_impossible]


def feature_row(f):
  return [f.unique_id, f.example_index, f.doc_span_index, f.tokens, [list(kv) for kv in f.token_to_orig_map.items()],
          [list(kv) for kv in f.token_is_max_context.items()], f.input_ids, f.input_mask, f.segment_ids,
          f.start_position, f.end_position, f.is_impossible]


# -- The fixture ------------------------------------------------------------------------------------------------

_CONTEXTS = [
    # Long enough for 4-6 windows at max_seq_length 37; punctuation glued to numbers (the answer span is
    # narrowed inside the word), accents, an answer mid-word ("Japan" in "Japanese").
    "The leader was John Smith (1895-1943). He founded Café Ångström in Zürich, where the Japanese "
    "electronics industry met Swiss watchmakers; sales rose 12.5% in 1931, then fell. Critics called it "
    "\"naïve\" — others, brilliant! The firm's archive (3,402 boxes) sits in Genève today, catalogued by "
    "Dr. Émile Durand, whose notes run to 77 volumes and an index",
    # CJK without spaces (one whitespace word, split into characters by the tokenizer), a no-break space
    # (inside a word for the reader, a space for str.split(): that answer cannot be found and is skipped),
    # U+202F (whitespace to the reader), tabs and a newline.
    "東京と大阪は日本の大都市です。 Tokyo\u00a0Tower opened in 1958 and stands 333 metres tall.\tOsaka "
    "Castle\u202fdates from 1583.\nKyoto was the capital for over a thousand years, until 1869, when the "
    "emperor moved to Tokyo; the move was quiet",
    # An odd number of words, several odd lengths of answer; leading whitespace.
    "  Rivers of Europe: the Danube flows through ten countries, the Rhine through six, and the Volga, the "
    "longest, stays in Russia. Alpine glaciers feed the Rhône and the Po; the Thames is short but famous for "
    "London's bridges, of which Tower Bridge (1894) is the best known",
]


def _word_starts(context):
  starts, prev_space = [], True
  for i, c in enumerate(context):
    space = c in " \t\r\n\u202f"
    if not space and prev_space:
      starts.append(i)
    prev_space = space
  return starts


def build_fixture(with_impossible: bool) -> dict:
  """A SQuAD v2.0 file (v1.1 without `with_impossible`): for every context, questions whose one answer starts
  at every word (1 to 4 words long, so some straddle window edges), the hand-made cases, and (v2.0) an
  impossible question with plausible answers."""
  data = []
  for a, context in enumerate(_CONTEXTS):
    starts = _word_starts(context)
    qas = []
    for n, s in enumerate(starts):
      words = 1 + n % 4
      end = starts[n + words] if n + words < len(starts) else len(context)
      text = context[s:end].rstrip(" \t\n\u202f")
      qas.append({"id": f"a{a}-w{n}", "question": f"What is word {n} of context {a}?",
                  "answers": [{"text": text, "answer_start": s}]})
    paragraph = {"context": context, "qas": qas}
    data.append({"title": f"article {a}", "paragraphs": [paragraph]})

  def add(a, qid, question, text, start=None):
    context = _CONTEXTS[a]
    start = context.index(text) if start is None else start
    data[a]["paragraphs"][0]["qas"].append(
        {"id": qid, "question": question, "answers": [{"text": text, "answer_start": start}]})

  add(0, "year", "When was John Smith born?", "1895")
  add(0, "japan", "What country?", "Japan")
  add(0, "long-question", "Which doctor, famous for his meticulous notes and indexes in many volumes, in which "
      "city, catalogued the archive of the firm that he did not found?", "Dr. Émile Durand")
  add(0, "not-found", "A typo in the annotation?", "Genevaa", _CONTEXTS[0].index("Genève"))
  add(1, "cjk", "Which city?", "大阪")
  add(1, "nbsp", "What opened?", "Tokyo\u00a0Tower")  # Skipped: see _CONTEXTS.
  add(1, "narrow-space", "What dates from 1583?", "Castle\u202fdates")
  add(1, "whitespace-start", "Starts on a space?", " Tokyo", _CONTEXTS[1].index(" Tokyo"))
  add(2, "leading", "First word?", "Rivers")
  add(2, "last", "Last word?", "known")
  if with_impossible:
    data[2]["paragraphs"][0]["qas"].append(
        {"id": "impossible", "question": "Which river flows through Mars?", "answers": [], "is_impossible": True,
         "plausible_answers": [{"text": "the Danube", "answer_start": _CONTEXTS[2].index("the Danube")}]})
    for article in data:
      for qa in article["paragraphs"][0]["qas"]:
        qa.setdefault("is_impossible", False)
  return {"version": "v2.0" if with_impossible else "1.1", "data": data}


def write_json(path, value):
  path.write_text(json.dumps(value, ensure_ascii=False), encoding="utf-8")
  return str(path)


def dev_subset(path, n_questions, training):
  """The first `n_questions` of a real SQuAD file (for training: only the first of each question's answers)."""
  with open(path, encoding="utf-8") as f:
    root = json.load(f)
  data, left = [], n_questions
  for article in root["data"]:
    paragraphs = []
    for paragraph in article["paragraphs"]:
      qas = paragraph["qas"][:left]
      if training:
        qas = [dict(qa, answers=qa["answers"][:1]) for qa in qas]
      left -= len(qas)
      if qas:
        paragraphs.append(dict(paragraph, qas=qas))
    if paragraphs:
      data.append(dict(article, paragraphs=paragraphs))
    if left == 0:
      break
  return {"version": root.get("version"), "data": data}


# -- Against the reference --------------------------------------------------------------------------------------

SIZES = [(37, 11, 9), (61, 17, 12)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  d = tmp_path_factory.mktemp("squad")
  out = {"v2": write_json(d / "v2.json", build_fixture(True)), "v1": write_json(d / "v1.json", build_fixture(False))}
  if os.path.exists(DEV_V2):
    out["dev"] = write_json(d / "dev.json", dev_subset(DEV_V2, 40, training=False))
    out["dev-train"] = write_json(d / "dev-train.json", dev_subset(DEV_V2, 40, training=True))
  return out


def _jobs(files, vocab_file):
  jobs = []
  for name, v2 in (("v2", True), ("v1", False)):
    for is_training in (True, False):
      for seq, stride, query in SIZES:
        jobs.append(dict(input_file=files[name], v2=v2, is_training=is_training, max_seq_length=seq,
                         doc_stride=stride, max_query_length=query))
  # Training on a v2.0 file without version_2_with_negative: the impossible question has no answer.
  jobs.append(dict(input_file=files["v2"], v2=False, is_training=True, max_seq_length=37, doc_stride=11,
                   max_query_length=9))
  for name, is_training in (("dev", False), ("dev-train", True)):
    if name in files:
      for seq, stride, query in [(384, 128, 64), (61, 17, 12)]:
        jobs.append(dict(input_file=files[name], v2=True, is_training=is_training, max_seq_length=seq,
                         doc_stride=stride, max_query_length=query))
  return [dict(job, vocab_file=vocab_file) for job in jobs]


@pytest.fixture(scope="module")
def reference_runs(files, bert_uncased_vocab_file, tmp_path_factory):
  """(job, the reference's result) for every job, from one subprocess."""
  d = tmp_path_factory.mktemp("reference")
  jobs = _jobs(files, bert_uncased_vocab_file)
  jobs_file, results_file = d / "jobs.json", d / "results.json"
  jobs_file.write_text(json.dumps(jobs))
  run = subprocess.run([sys.executable, "-c", _REFERENCE_DRIVER, str(jobs_file), str(results_file)], text=True,
                       capture_output=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES=""))
  assert run.returncode == 0, f"the reference failed:\n{run.stderr[-3000:]}"
  return list(zip(jobs, json.loads(results_file.read_text())))


@pytest.fixture(scope="module")
def tokenizer(bert_uncased_vocab_file):
  return tokenization.FullTokenizer(bert_uncased_vocab_file, do_lower_case=True)


def run_ours(job, tokenizer):
  result = squad.read_squad_examples(job["input_file"], job["is_training"], job["v2"])
  features = squad.convert_examples_to_features(
      result.examples, tokenizer, job["is_training"], max_seq_length=job["max_seq_length"],
      doc_stride=job["doc_stride"], max_query_length=job["max_query_length"])
  return result, list(features)


def _count_questions(path):
  with open(path, encoding="utf-8") as f:
    return sum(len(p["qas"]) for a in json.load(f)["data"] for p in a["paragraphs"])


def test_equals_reference(reference_runs, tokenizer):
  """Every field of every example and feature, for training and evaluation, v1.1 and v2.0, small and default
  window sizes, on the fixture and (when present) the first 40 questions of dev-v2.0."""
  compared = 0
  for job, expected in reference_runs:
    if "error" in expected:
      continue
    result, features = run_ours(job, tokenizer)
    name = f"{os.path.basename(job['input_file'])} training={job['is_training']} v2={job['v2']} " \
           f"sizes={job['max_seq_length']}/{job['doc_stride']}/{job['max_query_length']}"
    assert [example_row(e) for e in result.examples] == expected["examples"], name
    assert len(features) == len(expected["features"]), name
    for ours, theirs in zip(features, expected["features"]):
      assert feature_row(ours) == theirs, f"{name}: feature {ours.unique_id}"
    assert result.skipped == _count_questions(job["input_file"]) - len(expected["examples"]), name
    compared += 1
  assert compared == len(reference_runs) - 1


def test_fixture_reaches_the_corner_cases(reference_runs, tokenizer):
  """The fixture is worth comparing on: answers cut by a window edge, answers on a window's first and last
  token, the impossible question, several windows per context, skipped questions, truncated questions."""
  job = next(j for j, _ in reference_runs if j["input_file"].endswith("v2.json") and j["is_training"]
             and j["v2"] and j["max_seq_length"] == 37)
  result, features = run_ours(job, tokenizer)
  # Skipped: a typo, and "Tokyo\u00a0Tower" (one word to the reader, "Tokyo Tower" once cleaned) twice.
  assert {"not-found", "nbsp", "a1-w1"} == (
      {q for a in build_fixture(True)["data"] for q in (qa["id"] for qa in a["paragraphs"][0]["qas"])}
      - {e.qas_id for e in result.examples}) and result.skipped == 3
  by_id = {e.qas_id: e for e in result.examples}
  # An answer that starts on a space starts at the word before it, which still contains the text.
  assert by_id["whitespace-start"].start_position == 0 and by_id["whitespace-start"].end_position == 1
  assert by_id["impossible"].is_impossible and by_id["impossible"].plausible_answers == ("the Danube",)
  answered = [f for f in features if not f.is_impossible]
  assert any(f.start_position == 0 for f in answered)  # The answer is in another window or cut by this one.
  first_doc = [f for f in answered if f.start_position and f.start_position == f.tokens.index("[SEP]") + 1]
  last_doc = [f for f in answered if f.end_position and f.end_position == len(f.tokens) - 2]
  assert first_doc and last_doc
  cut = 0
  for f in answered:
    if f.start_position == 0:
      e = result.examples[f.example_index]
      words = set(f.token_to_orig_map.values())
      cut += e.start_position in words or e.end_position in words  # Partly inside: still labelled [CLS].
  assert cut > 0
  assert max(f.doc_span_index for f in features) >= 4
  assert any(len(f.tokens) < 37 and f.input_ids[-1] == 0 for f in features)  # Padding.
  long_q = next(f for f in features if result.examples[f.example_index].qas_id == "long-question")
  assert long_q.tokens.index("[SEP]") == 1 + 9
  # Japan stays "japanese": no sub-span of the word spells it. 1895 is narrowed inside "(1895-1943).".
  year = next(f for f in features if result.examples[f.example_index].qas_id == "year" and f.start_position)
  assert year.tokens[year.start_position:year.end_position + 1] == ["1895"]
  japan = next(f for f in features if result.examples[f.example_index].qas_id == "japan" and f.start_position)
  assert japan.tokens[japan.start_position:japan.end_position + 1] == ["japanese"]


def test_training_on_v2_file_without_version_2_flag(reference_runs, tokenizer):
  job, expected = next((j, r) for j, r in reference_runs if "error" in r)
  assert "exactly 1 answer" in expected["error"]
  with pytest.raises(ValueError) as e:
    run_ours(job, tokenizer)
  assert str(e.value) == (f"{job['input_file']}: question 'impossible': 0 answers; training needs exactly one per "
                          "question (an unanswerable one needs version_2_with_negative and is_impossible)")


def test_evaluation_keeps_gold_answers(files):
  result = squad.read_squad_examples(files["v2"], is_training=False, version_2_with_negative=True)
  by_id = {e.qas_id: e for e in result.examples}
  assert by_id["year"].answers == ("1895",) and by_id["year"].start_position is None
  assert by_id["impossible"].answers == () and not by_id["impossible"].is_impossible  # As the reference.
  assert result.skipped == 0 and len(result.examples) == _count_questions(files["v2"])


def test_evaluation_windows_labelled_for_the_loss_are_the_training_windows(files, tokenizer):
  """with_gold_positions: the evaluation examples' windows get the labels training gives the same questions (the
  fixture has one answer each: train and dev alike), and the inputs and ids they have unlabelled; a question
  training skips (its words miss the text) stays unlabelled."""
  sizes = dict(max_seq_length=37, doc_stride=11, max_query_length=9)
  train = squad.read_squad_examples(files["v2"], is_training=True, version_2_with_negative=True)
  dev = squad.read_squad_examples(files["v2"], is_training=False, version_2_with_negative=True).examples
  trained = {}
  for f in squad.convert_examples_to_features(train.examples, tokenizer, True, **sizes):
    trained.setdefault(train.examples[f.example_index].qas_id, []).append((f.start_position, f.end_position))
  plain = list(squad.convert_examples_to_features(dev, tokenizer, False, **sizes))
  labelled = list(squad.convert_examples_to_features(squad.with_gold_positions(dev, True), tokenizer, False, **sizes))
  assert [feature_row(f)[:9] for f in labelled] == [feature_row(f)[:9] for f in plain]  # all but the labels
  assert all(f.start_position is None for f in plain)
  got = {}
  for f in labelled:
    got.setdefault(dev[f.example_index].qas_id, []).append((f.start_position, f.end_position))
  skipped = {"not-found", "nbsp", "a1-w1"}
  assert {q: got[q] for q in trained} == trained and set(got) - set(trained) == skipped
  assert all(got[q] == [(None, None)] * len(got[q]) for q in skipped)
  assert {dev[i].qas_id for i in range(len(dev)) if dev[i].gold_words is None and dev[i].answers} == skipped
  assert got["impossible"] == [(0, 0)] * len(got["impossible"]) and any(s for s, _ in got["year"])


@pytest.mark.skipif(not os.path.exists(DEV_V2), reason=f"{DEV_V2} not present")
def test_dev_subset_was_compared(reference_runs):
  dev = [r for j, r in reference_runs if j["input_file"].endswith(("dev.json", "dev-train.json"))]
  assert len(dev) == 4 and all(len(r["examples"]) > 20 and len(r["features"]) >= len(r["examples"]) for r in dev)


# -- Errors -----------------------------------------------------------------------------------------------------


def _one_question(**qa_changes):
  qa = {"id": "q1", "question": "Who?", "answers": [{"text": "Ann", "answer_start": 0}], "is_impossible": False}
  qa.update(qa_changes)
  return {"data": [{"title": "t", "paragraphs": [{"context": "Ann went home.", "qas": [qa]}]}]}


def _error(tmp_path, content, is_training=True, v2=True):
  path = tmp_path / "bad.json"
  if isinstance(content, bytes):
    path.write_bytes(content)
  else:
    write_json(path, content)
  with pytest.raises(ValueError) as e:
    squad.read_squad_examples(str(path), is_training, v2)
  return str(e.value).replace(str(path), "F")


def test_errors(tmp_path):
  assert _error(tmp_path, {"version": "v2.0"}) == (
      "F: top level: no 'data' key; is this a SQuAD file (v2.0 for version_2_with_negative)?")
  no_context = {"data": [{"paragraphs": [{"qas": []}]}]}
  assert _error(tmp_path, no_context) == (
      "F: data[0].paragraphs[0]: no 'context' key; is this a SQuAD file (v2.0 for version_2_with_negative)?")
  no_id = _one_question()
  del no_id["data"][0]["paragraphs"][0]["qas"][0]["id"]
  assert _error(tmp_path, no_id) == (
      "F: data[0].paragraphs[0].qas[0]: no 'id' key; is this a SQuAD file (v2.0 for version_2_with_negative)?")
  no_answers = _one_question()
  del no_answers["data"][0]["paragraphs"][0]["qas"][0]["answers"]
  assert _error(tmp_path, no_answers) == (
      "F: question 'q1': no 'answers' key; is this a SQuAD file (v2.0 for version_2_with_negative)?")
  assert len(squad.read_squad_examples(str(tmp_path / "bad.json"), False).examples) == 1  # Fine to evaluate.
  no_flag = _one_question()
  del no_flag["data"][0]["paragraphs"][0]["qas"][0]["is_impossible"]
  assert _error(tmp_path, no_flag) == (
      "F: question 'q1': no 'is_impossible' key; is this a SQuAD file (v2.0 for version_2_with_negative)?")
  assert _error(tmp_path, _one_question(answers=[{"text": "Ann"}])) == (
      "F: question 'q1': no 'answer_start' key; is this a SQuAD file (v2.0 for version_2_with_negative)?")
  assert _error(tmp_path, _one_question(answers=[{"text": "Ann", "answer_start": "0"}])) == (
      "F: question 'q1': 'answer_start' is str, expected int")
  assert _error(tmp_path, _one_question(answers=[{"text": "home.", "answer_start": 10}])) == (
      "F: question 'q1': answer_start 10 with a text of 5 characters is outside the context of 14 characters; "
      "fix answer_start")
  assert _error(tmp_path, _one_question(answers=[{"text": "Ann", "answer_start": -1}]), is_training=False) == (
      "F: question 'q1': answer_start -1 with a text of 3 characters is outside the context of 14 characters; "
      "fix answer_start")
  assert _error(tmp_path, _one_question(answers=[{"text": "", "answer_start": 0}])) == (
      "F: question 'q1': empty answer text")
  assert _error(tmp_path, _one_question(answers=[{"text": "Ann", "answer_start": 0}] * 2)) == (
      "F: question 'q1': 2 answers; training needs exactly one per question (an unanswerable one needs "
      "version_2_with_negative and is_impossible)")
  twice = _one_question()
  qas = twice["data"][0]["paragraphs"][0]["qas"]
  qas.append(dict(qas[0]))
  assert _error(tmp_path, twice) == (
      "F: question 'q1': the id appears twice; predictions are keyed by id, so ids must be unique")
  assert _error(tmp_path, {"data": [{"paragraphs": [{"context": "x", "qas": []}]}]}, is_training=False) == (
      "F: no questions; give a SQuAD file with data[].paragraphs[].qas[]")
  assert _error(tmp_path, {"data": []}) == "F: no questions; give a SQuAD file with data[].paragraphs[].qas[]"
  good = json.dumps(_one_question()).encode()
  assert _error(tmp_path, good.replace(b"home", b"h\xffme")) == (
      f"F: byte {good.index(b'home') + 1} is not valid UTF-8 (invalid start byte); SQuAD files are UTF-8: "
      "re-encode the file")
  assert _error(tmp_path, b'{"data": [}') == "F:1:11: not valid JSON (Expecting value)"
  assert _error(tmp_path, []) == "F: top level: expected a JSON object, found list; is this a SQuAD file?"
  with pytest.raises(FileNotFoundError, match="no such SQuAD file"):
    squad.read_squad_examples(str(tmp_path / "missing.json"), True)


def test_window_size_errors(tokenizer):
  examples = [squad.SquadExample("q", "Who?", ("Ann", "went"))]
  for kwargs, message in [
      (dict(max_seq_length=12, max_query_length=9),
       "--max_seq_length=12 must exceed --max_query_length=9 + 3 ([CLS] and two [SEP]s), or no context token fits"),
      (dict(max_query_length=0), "--max_query_length=0: must be at least 1"),
      (dict(doc_stride=0), "--doc_stride=0: must be at least 1 (the step between window starts)")]:
    with pytest.raises(ValueError) as e:
      squad.convert_examples_to_features(examples, tokenizer, False, **kwargs)
    assert str(e.value) == message
  with pytest.raises(ValueError) as e:
    squad.convert_examples_to_features(examples, tokenizer, True)
  assert str(e.value) == ("example 0 (question 'q') has no answer position; read the file with is_training=True "
                          "to make training features")


def test_keep_unknowns_keeps_every_answer_window_and_a_fixed_share_of_the_rest(files, tokenizer):
  """--include_unknowns: every window holding its answer stays; each other one (no answer in it, or an impossible
  question) stays with the given probability, chosen by its question id and window index, so the same windows
  are kept whatever the examples' order; negative or 1 keeps all; 0 and > 1 are refused naming the flag."""
  sizes = dict(max_seq_length=37, doc_stride=11, max_query_length=9)
  examples = squad.read_squad_examples(files["v2"], is_training=True, version_2_with_negative=True).examples

  def kept(order, include_unknowns):
    ordered = [examples[i] for i in order]
    windows = squad.convert_examples_to_features(ordered, tokenizer, True, **sizes)
    return {(ordered[w.example_index].qas_id, w.doc_span_index, w.start_position)
            for w in squad.keep_unknowns(windows, ordered, include_unknowns)}

  forward, backward = list(range(len(examples))), list(range(len(examples)))[::-1]
  every = kept(forward, -1.0)
  answered = {w for w in every if w[2]}
  assert kept(forward, 1.0) == every and len(every) == 772 and len(answered) == 253
  third = kept(forward, 0.3)
  assert third == kept(backward, 0.3)  # a window's fate does not depend on the examples' order
  assert answered <= third and len(third - answered) == 129  # of the 519 windows without an answer
  assert len(kept(forward, 0.02) - answered) == 12 and kept(forward, 0.3) >= kept(forward, 0.02)
  for bad in (0.0, 1.5):
    with pytest.raises(ValueError, match=rf"^--include_unknowns={bad:g}: must be a probability in \(0, 1\]"):
      list(squad.keep_unknowns(iter(()), examples, bad))
