"""TensorFlow Serving's own path through every task's export (classifier, SQuAD, NER, SWAG), without the server.

TF Serving cannot be installed here, so what it does is done in a fresh process that imports only `tensorflow`
and `tensorflow_text` (`tensorflow_serving.apis`' protos too, to parse the warmup file as the server does):

- it loads each export with the TF1 SavedModel loader into a Session (`tf.compat.v1.saved_model.loader.load`:
  variables restored by the checkpoint's restore op) and runs `Session.run` on each SignatureDef's tensor
  names; the outputs must equal `tf.saved_model.load`'s, request by request, errors included;
- it replays every `PredictionLog` of `assets.extra/tf_serving_warmup_requests` through both loaders;
- it lists the ops core TensorFlow registers and those `import tensorflow_text` adds; every op of each graph
  and of its function library (`serving.saved_model_op_types`) must be one of them, and the manifest's
  `custom_ops` exactly the graph's non-core ones. The model server links tensorflow-text's ops of its own
  release (tensorflow_text:ops_lib), which for the manifest's `tensorflow/serving:2.20.0` is tensorflow-text
  2.20.0; the installed 2.20.1 is its patch release (tensorflow/text#1488 "Update Version for 2.20.1").

The requests include the malformed and edge cases a fuzz of the exports found (issue 24, section 3): empty,
blank and control-only texts alone in a batch, zero examples, NULs, invalid UTF-8, words whose normalised form
changes length. Each must be answered, or refused with an InvalidArgument error naming the input, the same
way by both loaders.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.export import serving
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.squad import model as squad_model
from bert_tf.tasks.squad import run as squad_run
from bert_tf.tasks.squad import serving as squad_serving
from bert_tf.tasks.swag import serving as swag_serving
from test_serving import MAX_POSITIONS, VOCAB, write_vocab

SQUAD_T = 15


def _squad_model() -> squad_model.BertSpanLabeler:
  """Large initial weights (as test_serving's tiny_classifier), so outputs differ visibly between inputs."""
  config = BertConfig.from_preset("tiny", vocab_size=len(VOCAB), num_hidden_layers=1, hidden_size=18,
                                  num_attention_heads=3, intermediate_size=37, max_position_embeddings=MAX_POSITIONS,
                                  initializer_range=0.5)
  model = squad_model.BertSpanLabeler(config, dtype="float32")
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  return model


@pytest.fixture(scope="module")
def exports(tmp_path_factory, classifier_exports, ner_export, swag_export):
  """The four task exports of tiny models. The classifier (test_serving's, over its 29-token vocabulary), the NER
  tagger (test_ner_serving's) and the multiple-choice model (test_swag_serving's) are the session's shared ones;
  the SQuAD model over test_serving's vocabulary is written here as run_squad.py writes it (the model folder,
  then the export function)."""
  root = tmp_path_factory.mktemp("tf_serving_path")
  vocab = write_vocab(root)
  keras.utils.set_random_seed(5)
  squad_settings = {"max_seq_length": SQUAD_T, "doc_stride": 4, "max_query_length": 5, "do_lower_case": True,
                    "version_2_with_negative": True, "null_score_diff_threshold": 0.0}
  squad_run.save_model(_squad_model(), squad_settings, vocab, str(root / "squad_model"))
  return {"classifier": classifier_exports["nli"][2],
          # A small request limit: a request over it costs little, and is refused by both loaders alike.
          "squad": squad_serving.export_squad(str(root / "squad_model"), str(root / "export"),
                                              max_request_chars=SQUAD_LIMIT),
          "ner": ner_export["path"], "swag": swag_export["path"]}


# -- Requests: (signature, inputs) per export ------------------------------------------------------------------

BAD_UTF8 = b"caf\xe9"
SQUAD_LIMIT = 900  # characters per field per request of the SQuAD export
SQUAD_CONTEXT = "The dog sat on the mat. A cat is running, the fox is not quick."
NER_TEXTS = ["The quick brown fox sat on the mat.", "수도입니다.", "Cafe\u0301. dog", "the\x00dog sat\x00", "",
             "Über dog!"]

REQUESTS = {
    "classifier": [
        ("serving_default", {"sentence1": ["The dog sat.", "x", "a\x00cat"], "sentence2": ["A cat.", "!", "is"]}),
        # Blank text is refused as training refuses it, naming the input and the row.
        ("serving_default", {"sentence1": ["The dog sat.", "x"], "sentence2": ["A cat.", " \x00\u200b"]}),
        ("serving_default", {"sentence1": [], "sentence2": []}),
        ("encoded", {"input_ids": [[2, 7, 3]], "input_mask": [[1, 1, 1]], "segment_ids": [[0, 0, 0]]}),
        ("encoded", {"input_ids": [[2, 99, 3]], "input_mask": [[1, 1, 1]], "segment_ids": [[0, 0, 0]]}),
    ],
    "squad": [
        ("serving_default", {"question": ["Who sat?", "What is quick?", "?"],
                             "context": [SQUAD_CONTEXT, SQUAD_CONTEXT.replace(" ", "\x00 "), "the dog"]}),
        # Every context empty, blank or only control characters; then zero examples.
        ("serving_default", {"question": ["a", "b", "c"], "context": ["", " \n ", "\x00\x01"]}),
        ("serving_default", {"question": [], "context": []}),
        ("serving_default", {"question": [BAD_UTF8], "context": ["the dog"]}),
        ("serving_default", {"question": ["who"], "context": [BAD_UTF8]}),
        ("serving_default", {"question": ["who", " "], "context": ["the dog", "the cat"]}),
        # Over the limit by the batch's characters together (each context alone is under it).
        ("serving_default", {"question": ["who", "what"], "context": ["the dog sat. " * 40, "a cat ran. " * 40]}),
        ("encoded", {"input_ids": [[2, 7, 3, 8, 3]], "input_mask": [[1] * 5], "segment_ids": [[0, 0, 0, 1, 1]]}),
    ],
    "ner": [
        ("serving_default", {"text": NER_TEXTS}),
        ("serving_default", {"text": ["", "  ", "\x00", "\x01\u200b"]}),
        ("serving_default", {"text": []}),
        ("serving_default", {"text": [BAD_UTF8]}),
        ("encoded", {"input_ids": [[2, 7, 3, 0]], "input_mask": [[1, 1, 1, 0]], "segment_ids": [[0, 0, 0, 0]]}),
    ],
    "swag": [
        ("serving_default", {"sent1": ["The dog sat.", ""], "sent2": ["A cat", ""], "ending0": ["runs.", "y"],
                             "ending1": ["is not quick.", "x"], "ending2": ["sat on the mat.", "z"],
                             "ending3": ["jumps!", "\x00!"]}),
        ("serving_default", {name: [] for name in swag_serving.TEXT_INPUTS}),
        ("serving_default", {"sent1": ["a"], "sent2": ["b"], "ending0": ["c"], "ending1": [BAD_UTF8],
                             "ending2": ["e"], "ending3": ["d"]}),
    ],
}


def _encode(value) -> dict:
  array = np.asarray(value, dtype=object)
  flat = array.reshape(-1).tolist()
  if array.size == 0 or isinstance(flat[0], (str, bytes)):
    return {"dtype": "string", "shape": list(array.shape),
            "value": [base64.b64encode(v if isinstance(v, bytes) else v.encode()).decode() for v in flat]}
  return {"dtype": "int32", "shape": list(array.shape), "value": flat}


# -- The checker: a process with tensorflow and tensorflow_text only ---------------------------------------------

_CHECKER = r'''
import base64, json, sys
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session


def registered_ops():
  ops = op_def_pb2.OpList()
  ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
  return {op.name for op in ops.op}


core_ops = registered_ops()
import tensorflow_text  # noqa: E402  The ops TF Serving links in (tensorflow_text:ops_lib).
text_ops = registered_ops() - core_ops
from tensorflow_serving.apis import prediction_log_pb2  # noqa: E402  Only to parse the warmup file.


def array(spec):
  if spec["dtype"] == "string":
    return np.array([base64.b64decode(v) for v in spec["value"]], dtype=object).reshape(spec["shape"])
  return np.array(spec["value"], dtype=spec["dtype"]).reshape(spec["shape"])


def plain(value):
  value = np.asarray(value)
  if value.dtype == object:
    return {"shape": list(value.shape), "bytes": [base64.b64encode(v).decode() for v in value.reshape(-1)]}
  return {"shape": list(value.shape), "values": value.reshape(-1).tolist()}


def answer(call, signature, inputs):
  try:
    return {k: plain(v) for k, v in sorted(call(signature, inputs).items())}
  except tf.errors.InvalidArgumentError as e:
    return {"error": e.message[:3000]}


job = json.load(open(sys.argv[1]))
result = {"core_ops": sorted(core_ops), "text_ops": sorted(text_ops), "tensorflow": tf.__version__,
          "tensorflow_text": tensorflow_text.__version__, "exports": {}}
for name, export in job.items():
  requests = [(signature, {k: array(v) for k, v in inputs.items()}) for signature, inputs in export["requests"]]
  warmup = []
  for record in tf.data.TFRecordDataset(export["dir"] + "/assets.extra/tf_serving_warmup_requests"):
    log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
    request = log.predict_log.request
    warmup.append((request.model_spec.signature_name or "serving_default",
                   {k: tf.make_ndarray(v) for k, v in request.inputs.items()}))
  out = {"warmup_inputs": [{k: plain(v) for k, v in sorted(inputs.items())} for _, inputs in warmup]}

  # tf.saved_model.load, as a Python client does.
  loaded = tf.saved_model.load(export["dir"])
  def tf2(signature, inputs):
    tensors = {k: tf.constant(v, tf.string) if v.dtype == object else tf.constant(v) for k, v in inputs.items()}
    return {k: v.numpy() for k, v in loaded.signatures[signature](**tensors).items()}
  out["tf2"] = [answer(tf2, s, x) for s, x in requests]
  out["tf2_warmup"] = [answer(tf2, s, x) for s, x in warmup]
  del loaded

  # The TF1 loader in a Session, as TF Serving does: run the SignatureDef's tensor names.
  graph = tf.Graph()
  with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], export["dir"])
    def tf1(signature, inputs):
      signature_def = meta_graph.signature_def[signature]
      feed = {signature_def.inputs[k].name: v for k, v in inputs.items()}
      return session.run({k: info.name for k, info in signature_def.outputs.items()}, feed)
    out["signatures"] = sorted(k for k in meta_graph.signature_def if not k.startswith("__"))
    out["tf1"] = [answer(tf1, s, x) for s, x in requests]
    out["tf1_warmup"] = [answer(tf1, s, x) for s, x in warmup]
  result["exports"][name] = out
result["bert_tf_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "bert_tf")
print(json.dumps(result))
'''


@pytest.fixture(scope="module")
def checked(exports, tmp_path_factory):
  """The checker's answer for all four exports (one process)."""
  root = tmp_path_factory.mktemp("tf_serving_checker")
  script, job_file = root / "checker.py", root / "job.json"
  script.write_text(_CHECKER)
  job = {name: {"dir": path, "requests": [(signature, {k: _encode(v) for k, v in inputs.items()})
                                          for signature, inputs in REQUESTS[name]]}
         for name, path in exports.items()}
  job_file.write_text(json.dumps(job))
  # `python -I` from a folder outside the repository: no PYTHONPATH, no current directory on the path.
  env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
  env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
  result = subprocess.run([sys.executable, "-I", str(script), str(job_file)], cwd=str(root), env=env,
                          capture_output=True, text=True, timeout=600)
  assert result.returncode == 0, result.stderr[-4000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


def _decoded(output: dict):
  """An output as the checker printed it -> a numpy array (strings as bytes)."""
  if "bytes" in output:
    return np.array([base64.b64decode(v) for v in output["bytes"]], dtype=object).reshape(output["shape"])
  return np.array(output["values"]).reshape(output["shape"])


def _assert_same(a: dict, b: dict, where):
  """Two answers to one request: the same outputs (floats within 1e-5), or both an error with one message."""
  assert set(a) == set(b), where
  if "error" in a:
    assert a["error"].split("\n")[0] == b["error"].split("\n")[0], where
    return
  for name in a:
    x, y = _decoded(a[name]), _decoded(b[name])
    assert x.shape == y.shape, (where, name)
    if x.dtype.kind == "f":
      np.testing.assert_allclose(x, y, atol=1e-5, rtol=0, err_msg=f"{where} {name}")
    else:
      assert x.tolist() == y.tolist(), (where, name)


def _strings(output: dict) -> list:
  return [v.decode("utf-8") for v in _decoded(output).reshape(-1)]


def test_the_session_loader_answers_as_tf_saved_model_load(checked, exports):
  assert checked["bert_tf_modules"] == []
  for name, path in exports.items():
    out = checked["exports"][name]
    assert out["signatures"] == sorted(serving.read_manifest(path)["signatures"]), name
    assert len(out["tf1"]) == len(out["tf2"]) == len(REQUESTS[name])
    for i, (a, b) in enumerate(zip(out["tf1"], out["tf2"])):
      _assert_same(a, b, (name, i))
    # Warmup: every PredictionLog, each answered (TF Serving refuses a version whose warmup fails).
    assert len(out["warmup_inputs"]) == serving.read_manifest(path)["warmup_records"] >= 3
    for i, (a, b) in enumerate(zip(out["tf1_warmup"], out["tf2_warmup"])):
      assert "error" not in a, (name, i, a)
      _assert_same(a, b, (name, "warmup", i))


def test_every_op_is_core_or_tensorflow_texts(checked, exports):
  assert checked["tensorflow"] == tf.__version__ == "2.20.0"
  assert checked["tensorflow_text"].startswith("2.20.")
  core, text = set(checked["core_ops"]), set(checked["text_ops"])
  assert {"RegexSplitWithOffsets", "FastWordpieceTokenizeWithOffsets", "NormalizeUTF8"} <= text
  assert not core & text and "MatMul" in core
  for name, path in exports.items():
    ops = serving.saved_model_op_types(path)
    assert ops <= core | text, (name, sorted(ops - core - text))
    manifest = serving.read_manifest(path)
    assert manifest["custom_ops"] == sorted(ops - core), name
    assert manifest["custom_ops"] and set(manifest["custom_ops"]) <= text, name
    # What the server must be: the image of the TensorFlow that wrote it (and its tensorflow-text ops).
    assert manifest["serving_image"] == "tensorflow/serving:2.20.0", name


def test_edge_requests_are_answered_or_refused_by_both_loaders(checked):
  for loader in ("tf1", "tf2"):
    classifier, squad, ner_out, swag = (checked["exports"][name][loader]
                                        for name in ("classifier", "squad", "ner", "swag"))
    assert _decoded(classifier[0]["probabilities"]).shape == (3, 3)
    assert "sentence2 is empty or blank (only whitespace or control characters) in row 1 of the batch" in (
        classifier[1]["error"])
    assert _decoded(classifier[2]["probabilities"]).shape == (0, 3)
    assert "input_ids must be < vocab_size=29" in classifier[4]["error"]

    assert len(_strings(squad[0]["answer"])) == 3
    # A batch of only empty, blank and control-only contexts: no answer for each, as inside a mixed batch.
    assert _strings(squad[1]["answer"]) == ["", "", ""]
    assert _decoded(squad[1]["start_char"]).tolist() == [-1, -1, -1]
    assert _decoded(squad[1]["null_score_diff"]).tolist() == [squad_serving.NO_SPAN_NULL_DIFF] * 3
    assert {name: _decoded(value).shape for name, value in squad[2].items()} == {
        "answer": (0,), "start_char": (0,), "end_char": (0,), "score": (0,), "null_score_diff": (0,)}
    assert "question must be valid UTF-8" in squad[3]["error"]
    assert "context must be valid UTF-8" in squad[4]["error"]
    assert "question is empty or blank (only whitespace or control characters) in row 1" in squad[5]["error"]
    assert ("context: 960 characters in this request, over the request limit of 900 set at export "
            "(max_request_chars in the manifest)") in squad[6]["error"]

    # NER: each word its own text and offsets, also where normalising changed the length; nothing lost
    # after a NUL; texts without words have none, alone in a batch too.
    words = _decoded(ner_out[0]["words"])
    counts = _decoded(ner_out[0]["num_words"]).tolist()
    starts, ends = _decoded(ner_out[0]["word_start"]), _decoded(ner_out[0]["word_end"])
    got = [[w.decode("utf-8") for w in words[i, :n]] for i, n in enumerate(counts)]
    assert got[1:] == [["수도입니다", "."], ["Cafe\u0301", ".", "dog"], ["the\x00dog", "sat"], [],
                       ["Über", "dog", "!"]]
    for i, text in enumerate(NER_TEXTS):
      assert [text[s:e] for s, e in zip(starts[i, :counts[i]], ends[i, :counts[i]])] == got[i]
    assert _decoded(ner_out[1]["num_words"]).tolist() == [0, 0, 0, 0]
    assert _decoded(ner_out[1]["num_entities"]).tolist() == [0, 0, 0, 0]
    assert _decoded(ner_out[2]["tags"]).shape[0] == 0
    assert "text must be valid UTF-8" in ner_out[3]["error"]

    assert _decoded(swag[0]["probabilities"]).shape == (2, 4)
    assert _decoded(swag[1]["probabilities"]).shape == (0, 4)
    assert "ending1 must be valid UTF-8" in swag[2]["error"]


def test_predict_answers_an_empty_context_and_refuses_bad_input_in_one_line(exports):
  """scripts/predict.py --saved_model_dir runs `requests.run_local`: a context of nothing is answered with no
  answer, and the model's own refusals are one line (cli prints `error: ...`), not a traceback."""
  from bert_tf.export import requests

  (row,) = requests.run_local(exports["squad"], [{"question": "Who sat?", "context": ""}])
  assert row == {"answer": "", "start_char": -1, "end_char": -1, "score": 0.0,
                 "null_score_diff": pytest.approx(squad_serving.NO_SPAN_NULL_DIFF)}
  with pytest.raises(ValueError, match=r"^the model refused the examples: question must be valid UTF-8$"):
    requests.run_local(exports["squad"], [{"question": BAD_UTF8, "context": "the dog"}])
