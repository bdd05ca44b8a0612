"""bert_tf.export.serving: the SavedModel TF Serving loads, checked without a server.

TF Serving itself cannot run here (no Docker, no network). What it would do is checked piece by piece: the
version layout it polls, the warmup file it replays, and - the acceptance test - the SavedModel loaded in a
fresh process that imports TensorFlow and tensorflow-text only (as the model server links only those ops), whose
outputs must equal the Keras model's on the training-time encoding of the same text.
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.data.tokenization import FullTokenizer
from bert_tf.export import serving
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.classification import serving as classifier_serving
from bert_tf.tasks.classification.classifier import BertClassifier, ClassifierSpec, save_classifier
from bert_tf.tasks.common.features import encode

# Odd sizes, so that no two dimensions coincide: 29 tokens, T = 11, positions 16, K = 3 labels.
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "a", "dog", "cat", "sat", "on", "mat", "run",
         "##s", "##ing", "##ed", ".", ",", "?", "!", "is", "not", "quick", "brown", "fox", "jump", "uber", "##y",
         "zebra"]
T = 11
MAX_POSITIONS = 16
LABELS = ("entailment", "neutral", "contradiction")
PAIRS = [("The dog sat on the mat.", "A cat is running."),
         ("?", "!"),  # punctuation alone (an empty or blank text is refused: below)
         ("Über quick brown foxes jumped!", "not a dog?"),  # lower-cased, accent stripped, ## pieces, [UNK]
         ("the " * 40, "cat sat"),  # truncated
         ("zebra", "dog " * 12)]
SINGLES = ["The dog sat.", "!", "running cats", "Dog " * 30]


def write_vocab(directory) -> str:
  path = os.path.join(str(directory), "vocab.txt")
  with open(path, "w") as f:
    f.write("\n".join(VOCAB) + "\n")
  return path


def tiny_classifier(num_labels: int, seed: int = 1, dtype: str = "float32") -> BertClassifier:
  """A 1-layer classifier with large initial weights, so that outputs differ visibly between inputs."""
  keras.utils.set_random_seed(seed)
  config = BertConfig.from_preset("tiny", vocab_size=len(VOCAB), num_hidden_layers=1, hidden_size=18,
                                  num_attention_heads=3, intermediate_size=37,
                                  max_position_embeddings=MAX_POSITIONS, initializer_range=0.5)
  model = BertClassifier(config, num_labels, dtype=dtype)
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  return model


def keras_features(vocab_file: str, spec: ClassifierSpec, texts) -> dict[str, np.ndarray]:
  """The training-time (Python) encoding: int32 [N, T] per input."""
  tokenizer = FullTokenizer(vocab_file, do_lower_case=spec.do_lower_case)
  encoded = [encode(tokenizer, a, b, spec.max_seq_length) for a, b in texts]
  return {name: np.array([getattr(e, name) for e in encoded], np.int32) for name in INPUT_NAMES}


def softmax(logits: np.ndarray) -> np.ndarray:
  e = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def export_classifiers(root) -> dict:
  """A pair classifier (3 labels, lower-casing) exported directly, and a single-sentence regression model
  (cased) saved with save_classifier and exported from that folder, all under `root`. Built once per session
  (conftest's `classifier_exports`): test_predict and test_tf_serving_path serve the same pair classifier."""
  vocab = write_vocab(root)
  export_dir = str(root / "export")
  pair_spec = ClassifierSpec("nli", LABELS, is_pair=True, max_seq_length=T, do_lower_case=True)
  pair_model = tiny_classifier(len(LABELS))
  pair_dir = classifier_serving.export_classifier(pair_model, pair_spec, vocab, export_dir, "nli")
  score_spec = ClassifierSpec("sts", (), is_pair=False, max_seq_length=T - 2, do_lower_case=False)
  score_model = tiny_classifier(1, seed=2)
  save_classifier(score_model, score_spec, vocab, str(root / "sts_classifier"))
  score_dir = classifier_serving.export_from_directory(str(root / "sts_classifier"), export_dir, "sts",
                                            warmup_texts=[("A dog.", None), ("Cats run!", None)])
  return {"root": root, "vocab": vocab, "export_dir": export_dir,
          "nli": (pair_model, pair_spec, pair_dir), "sts": (score_model, score_spec, score_dir)}


@pytest.fixture(scope="module")
def exported(classifier_exports):
  return classifier_exports


def _keras_outputs(exported, name, texts) -> np.ndarray:
  model, spec, _ = exported[name]
  features = keras_features(exported["vocab"], spec, texts)
  return model(features, training=False).numpy()


# -- Layout, versions, manifest, warmup -----------------------------------------------------------------------


def test_layout_is_what_tf_serving_polls(exported):
  export_dir = exported["export_dir"]
  assert exported["nli"][2] == os.path.join(export_dir, "nli", "1")
  assert exported["sts"][2] == os.path.join(export_dir, "sts", "1")
  for name in ("nli", "sts"):
    assert os.listdir(os.path.join(export_dir, name)) == ["1"]  # no temporary folder left behind
    version = os.path.join(export_dir, name, "1")
    assert {"saved_model.pb", "variables", "assets.extra"} <= set(os.listdir(version))
    assert os.path.exists(os.path.join(version, "variables", "variables.index"))
    assert sorted(os.listdir(os.path.join(version, "assets.extra"))) == [
        "bert_tf_manifest.json", "tf_serving_warmup_requests", "vocab.txt"]
    with open(os.path.join(version, "assets.extra", "vocab.txt")) as f:
      assert f.read().split() == VOCAB


def test_next_version_takes_one_more_than_the_largest_numeric_folder(tmp_path):
  assert serving.next_version(str(tmp_path / "absent")) == 1
  for name in ("1", "7", "12", ".3.tmp-abc", "notes", "99x"):
    (tmp_path / name).mkdir()
  assert serving.next_version(str(tmp_path)) == 13


@pytest.mark.slow
def test_a_mixed_precision_model_exports_as_float32_next_version(exported, tmp_path):
  """Export again into (a copy of) the model folder: version 2 (asked for: the same weights with the same settings
  would otherwise be found already served by version 1), no half types in the graph, the same outputs as the
  float32 version 1, and version 1 is never overwritten."""
  model, spec, _ = exported["nli"]
  export_dir = str(tmp_path / "export")
  shutil.copytree(os.path.join(exported["export_dir"], "nli"), os.path.join(export_dir, "nli"))
  first = os.path.join(export_dir, "nli", "1")
  mixed = tiny_classifier(len(LABELS), dtype="mixed_bfloat16")
  mixed.set_weights(model.get_weights())
  second = classifier_serving.export_classifier(mixed, spec, exported["vocab"], export_dir, "nli", version=2)
  assert second == os.path.join(export_dir, "nli", "2")
  assert serving.read_manifest(second)["fingerprint"] == serving.read_manifest(first)["fingerprint"]
  assert sorted(os.listdir(os.path.join(export_dir, "nli"))) == ["1", "2"]

  from tensorflow.core.protobuf import saved_model_pb2

  saved = saved_model_pb2.SavedModel()
  with open(os.path.join(second, "saved_model.pb"), "rb") as f:
    saved.ParseFromString(f.read())
  half = {tf.bfloat16.as_datatype_enum, tf.float16.as_datatype_enum}
  for function in saved.meta_graphs[0].graph_def.library.function:
    for node in function.node_def:
      for attr in node.attr.values():
        assert attr.type not in half and not half & set(attr.list.type), (function.signature.name, node.name)

  texts = [("the dog sat", "a cat"), ("?", "fox")]
  a = tf.saved_model.load(first).signatures["serving_default"]
  b = tf.saved_model.load(second).signatures["serving_default"]
  inputs = {"sentence1": tf.constant([t[0] for t in texts]), "sentence2": tf.constant([t[1] for t in texts])}
  np.testing.assert_allclose(b(**inputs)["probabilities"].numpy(), a(**inputs)["probabilities"].numpy(),
                             atol=1e-6)
  with pytest.raises(ValueError, match="already exists"):
    classifier_serving.export_classifier(model, spec, exported["vocab"], export_dir, "nli", version=1)


def test_export_rejects_bad_arguments_before_writing(exported, tmp_path):
  model, spec, _ = exported["nli"]
  with pytest.raises(ValueError, match="model_name"):
    classifier_serving.export_classifier(model, spec, exported["vocab"], str(tmp_path), "a/b")
  with pytest.raises(ValueError, match="version"):
    classifier_serving.export_classifier(model, spec, exported["vocab"], str(tmp_path), "m", version=0)
  with pytest.raises(ValueError, match="sentence pairs"):
    classifier_serving.export_classifier(model, spec, exported["vocab"], str(tmp_path), "m", warmup_texts=[("a", None)])
  with pytest.raises(ValueError, match="2 labels"):
    classifier_serving.export_classifier(model, ClassifierSpec("x", ("a", "b"), True, T, True), exported["vocab"],
                              str(tmp_path), "m")
  with pytest.raises(ValueError, match="max_position_embeddings"):
    classifier_serving.export_classifier(model, ClassifierSpec("x", LABELS, True, MAX_POSITIONS + 1, True),
                              exported["vocab"], str(tmp_path), "m")
  assert not os.listdir(tmp_path)


def test_export_refuses_a_vocabulary_that_does_not_fit_the_model(exported, tmp_path):
  model, spec, _ = exported["nli"]
  for size, error in ((len(VOCAB) + 1, f"ids from {len(VOCAB)} up would index past the embedding table"),
                      (len(VOCAB) // 2, "it is probably not the vocabulary the model was pretrained with")):
    vocab = tmp_path / f"vocab{size}.txt"
    vocab.write_text("\n".join((VOCAB + ["extra"])[:size]) + "\n")
    with pytest.raises(ValueError, match=f"{re.escape(str(vocab))} has {size} tokens but cls/bert_config.json says "
                       f"vocab_size={len(VOCAB)}: {error}"):
      classifier_serving.export_classifier(model, spec, str(vocab), str(tmp_path / "export"), "m",
                                config_source="cls/bert_config.json")
  assert not (tmp_path / "export").exists()


def test_manifest_describes_task_signatures_versions_and_custom_ops(exported):
  import tensorflow_text
  from tensorflow.python.framework import op_def_registry

  manifest = serving.read_manifest(exported["nli"][2])
  assert {k: manifest[k] for k in ("model_name", "version", "task", "labels", "is_regression", "is_pair",
                                   "max_seq_length", "do_lower_case")} == {
      "model_name": "nli", "version": 1, "task": "nli", "labels": list(LABELS), "is_regression": False,
      "is_pair": True, "max_seq_length": T, "do_lower_case": True}
  text, ids = manifest["signatures"]["serving_default"], manifest["signatures"]["encoded"]
  assert set(manifest["signatures"]) == {"serving_default", "encoded"}
  assert text["inputs"] == {"sentence1": {"dtype": "string", "shape": [-1]},
                            "sentence2": {"dtype": "string", "shape": [-1]}}
  assert ids["inputs"] == {name: {"dtype": "int32", "shape": [-1, -1]} for name in INPUT_NAMES}
  outputs = {"probabilities": {"dtype": "float32", "shape": [-1, 3]}, "label_id": {"dtype": "int32", "shape": [-1]},
             "label": {"dtype": "string", "shape": [-1]}}
  assert text["outputs"] == outputs and ids["outputs"] == outputs
  assert manifest["tensorflow"] == tf.__version__ and manifest["tensorflow_text"] == tensorflow_text.__version__
  assert manifest["serving_image"] == f"tensorflow/serving:{tf.__version__}"
  assert "tensorflow-text" in manifest["note"]
  assert manifest["warmup_records"] == len(classifier_serving.DEFAULT_WARMUP_TEXTS) + 1

  # What TensorFlow 2.20 and tensorflow-text 2.20 really put in the graph: the regex word splitter, the
  # WordPiece tokenizer and (lower-casing only) NFD normalization. Registered here, where tensorflow_text is
  # imported; the exporter found core TensorFlow lacks them.
  custom = manifest["custom_ops"]
  assert custom == ["FastWordpieceTokenizeWithOffsets", "NormalizeUTF8", "RegexSplitWithOffsets"]
  assert all(op_def_registry.get(op) is not None for op in custom)
  all_ops = serving.saved_model_op_types(exported["nli"][2])
  assert set(custom) < all_ops and {"MatMul", "Softmax", "StaticRegexReplace", "StringLower"} <= all_ops
  # The cased tokenizer does not normalize: computed from the graph, not a fixed list.
  score = serving.read_manifest(exported["sts"][2])
  assert score["custom_ops"] == ["FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets"]
  assert score["signatures"]["serving_default"]["inputs"] == {"sentence1": {"dtype": "string", "shape": [-1]}}
  assert score["signatures"]["serving_default"]["outputs"] == {"score": {"dtype": "float32", "shape": [-1]}}
  assert score["labels"] == [] and score["is_regression"] and not score["do_lower_case"]


def test_ops_missing_from_core_asks_a_process_without_tensorflow_text():
  assert serving.ops_missing_from_core(["MatMul", "RegexSplitWithOffsets", "NoSuchOp"]) == [
      "NoSuchOp", "RegexSplitWithOffsets"]


def test_the_core_op_list_is_asked_once_per_installation_and_kept(tmp_path, monkeypatch, request, caplog):
  request.addfinalizer(serving.core_op_types.cache_clear)  # the other tests get the real list again
  monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "cache"))
  asked = []

  def ask(real=serving._ask_core_op_types):
    asked.append(serving._core_ops_key())
    return real() if len(asked) == 1 else frozenset({"MatMul", f"Asked{len(asked)}"})

  monkeypatch.setattr(serving, "_ask_core_op_types", ask)
  serving.core_op_types.cache_clear()
  first = serving.core_op_types()
  key = serving._core_ops_key()
  kept = tmp_path / "cache" / "core_ops" / f"{key}.json"
  assert len(asked) == 1 and "MatMul" in first and "RegexSplitWithOffsets" not in first
  written = kept.read_text()
  assert json.loads(written) == {"key": key, "tensorflow": tf.__version__, "ops": sorted(first),
                                 "sha256": hashlib.sha256("\n".join(sorted(first)).encode()).hexdigest()}
  assert [p.name for p in kept.parent.iterdir()] == [kept.name]  # no temporary file left
  # Another process of the same installation reads it: no TensorFlow start-up.
  serving.core_op_types.cache_clear()
  assert serving.core_op_types() == first and len(asked) == 1
  # A damaged or implausible file (issue 40 (8): the manifest then called tensorflow-text's ops core TensorFlow's) is
  # said in one line, asked again and rewritten.
  from tensorflow.core.framework import op_def_pb2
  from tensorflow.python.client import pywrap_tf_session

  registered = op_def_pb2.OpList()
  registered.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
  everything = sorted(op.name for op in registered.op)  # this process's: tensorflow-text's ops too
  assert "RegexSplitWithOffsets" in everything

  def kept_as(**changes):
    return json.dumps({**json.loads(written), **changes})

  without_const = [op for op in sorted(first) if op != "Const"]
  for text, why in [
      ('{"key": "', "not JSON (Unterminated string starting at: line 1 column 9 (char 8))"),
      (kept_as(ops=everything), "its list does not match its SHA-256"),
      (json.dumps({"key": key, "tensorflow": tf.__version__, "ops": everything}), "no SHA-256 of its list"),
      (kept_as(ops="MatMul"), "no list of op names"),
      (kept_as(tensorflow="2.0.0"), "written for another TensorFlow installation"),
      (kept_as(ops=without_const, sha256=hashlib.sha256("\n".join(without_const).encode()).hexdigest()),
       "lacks Const, which every TensorFlow registers"),
      (kept_as(ops=["Const", "Identity", "MatMul", "NoOp", "NotAnOp", "Placeholder"],
               sha256=hashlib.sha256(b"Const\nIdentity\nMatMul\nNoOp\nNotAnOp\nPlaceholder").hexdigest()),
       "lists 1 op types this TensorFlow does not register (NotAnOp)")]:
    kept.write_text(text)
    serving.core_op_types.cache_clear()
    caplog.clear()
    answer = {"MatMul", f"Asked{len(asked) + 1}"}
    with caplog.at_level(logging.WARNING):
      assert serving.core_op_types() == answer
    assert [r.getMessage() for r in caplog.records] == [
        f"{kept}: {why}; listing core TensorFlow's op types again"], why
    assert json.loads(kept.read_text())["ops"] == sorted(answer)
  # Another TensorFlow (version, or a plugin added to or changed in a site-packages folder) has its own key.
  monkeypatch.setattr(tf, "__version__", "2.99.0")
  other_version = serving._core_ops_key()
  site_dir = tmp_path / "site-packages"
  (site_dir / "tensorflow-plugins").mkdir(parents=True)
  plugin = site_dir / "tensorflow-plugins" / "libdevice_plugin.so"
  plugin.write_bytes(b"\0" * 7)
  monkeypatch.syspath_prepend(str(site_dir))
  with_plugin = serving._core_ops_key()
  os.utime(plugin, ns=(1, 1))
  touched = serving._core_ops_key()
  assert len({key, other_version, with_plugin, touched}) == 4
  os.symlink(site_dir / "missing.so", site_dir / "tensorflow-plugins" / "libdangling.so")  # loads nothing
  assert serving._core_ops_key() == touched
  serving.core_op_types.cache_clear()
  assert serving.core_op_types() == {"MatMul", f"Asked{len(asked)}"} and asked[-1] == serving._core_ops_key()
  # A cache that cannot be written is passed over: the answer still comes.
  blocked = tmp_path / "a_file"
  blocked.write_text("")
  monkeypatch.setenv("BERT_TF_CACHE", str(blocked))
  serving.core_op_types.cache_clear()
  assert serving.core_op_types() == {"MatMul", f"Asked{len(asked)}"}


def _warmup_requests(version_dir):
  from tensorflow_serving.apis import prediction_log_pb2

  path = os.path.join(version_dir, "assets.extra", "tf_serving_warmup_requests")
  logs = [prediction_log_pb2.PredictionLog.FromString(r.numpy()) for r in tf.data.TFRecordDataset(path)]
  assert all(log.WhichOneof("log_type") == "predict_log" for log in logs)
  return [log.predict_log.request for log in logs]


def test_warmup_file_holds_predict_requests_for_the_text_signature(exported):
  requests = _warmup_requests(exported["nli"][2])
  texts = classifier_serving.DEFAULT_WARMUP_TEXTS
  expected = [[pair] for pair in texts] + [list(texts)]
  assert len(requests) == len(expected)
  for request, pairs in zip(requests, expected):
    assert request.model_spec.name == "nli" and request.model_spec.signature_name == "serving_default"
    assert not request.model_spec.HasField("version")
    assert set(request.inputs) == {"sentence1", "sentence2"}
    for i, name in enumerate(("sentence1", "sentence2")):
      proto = request.inputs[name]
      assert proto.dtype == tf.string.as_datatype_enum
      assert [d.size for d in proto.tensor_shape.dim] == [len(pairs)]
      assert [s.decode() for s in tf.make_ndarray(proto)] == [p[i] for p in pairs]
  requests = _warmup_requests(exported["sts"][2])
  assert [[s.decode() for s in tf.make_ndarray(r.inputs["sentence1"])] for r in requests] == [
      ["A dog."], ["Cats run!"], ["A dog.", "Cats run!"]]
  assert all(set(r.inputs) == {"sentence1"} and r.model_spec.name == "sts" for r in requests)


# -- The acceptance test: a process with TensorFlow and tensorflow-text only ----------------------------------

_ISOLATED_CLIENT = '''
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  Registers the tokenizer's ops, as TF Serving links them.
from tensorflow_serving.apis import prediction_log_pb2  # Only to read the warmup file, as TF Serving does.

def plain(outputs):
  return {k: [x.decode() if isinstance(x, bytes) else x for x in v.numpy().tolist()] for k, v in outputs.items()}

job = json.load(open(sys.argv[1]))
answer = {}
for name, model in job.items():
  loaded = tf.saved_model.load(model["dir"])
  text = loaded.signatures["serving_default"]
  result = {"text": plain(text(**{k: tf.constant(v, tf.string) for k, v in model["texts"].items()}))}
  encoded = loaded.signatures["encoded"]
  result["encoded"] = plain(encoded(**{k: tf.constant(v, tf.int32) for k, v in model["features"].items()}))
  result["warmup"] = []
  path = model["dir"] + "/assets.extra/tf_serving_warmup_requests"
  for record in tf.data.TFRecordDataset(path):
    request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
    function = loaded.signatures[request.model_spec.signature_name]
    inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
    result["warmup"].append({"inputs": plain(inputs), "outputs": plain(function(**inputs))})
  answer[name] = result
answer["bert_tf_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "bert_tf")
print(json.dumps(answer))
'''


def _run_isolated(tmp_path, job: dict) -> dict:
  """Runs `_ISOLATED_CLIENT` with `python -I` (no PYTHONPATH, no current directory on the path) from a folder
  outside the repository."""
  script, job_file = tmp_path / "client.py", tmp_path / "job.json"
  script.write_text(_ISOLATED_CLIENT)
  job_file.write_text(json.dumps(job))
  env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
  env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
  result = subprocess.run([sys.executable, "-I", str(script), str(job_file)], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-4000:]
  return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_savedmodel_alone_gives_the_keras_models_outputs(exported, tmp_path):
  nli_model, nli_spec, nli_dir = exported["nli"]
  sts_model, sts_spec, sts_dir = exported["sts"]
  nli_features = keras_features(exported["vocab"], nli_spec, PAIRS)
  sts_features = keras_features(exported["vocab"], sts_spec, [(s, None) for s in SINGLES])
  job = {
      "nli": {"dir": nli_dir, "texts": {"sentence1": [a for a, _ in PAIRS], "sentence2": [b for _, b in PAIRS]},
              "features": {k: v.tolist() for k, v in nli_features.items()}},
      "sts": {"dir": sts_dir, "texts": {"sentence1": SINGLES},
              "features": {k: v.tolist() for k, v in sts_features.items()}},
  }
  answer = _run_isolated(tmp_path, job)
  assert answer["bert_tf_modules"] == []

  logits = _keras_outputs(exported, "nli", PAIRS)
  expected = softmax(logits)
  assert np.ptp(expected[:, 0]) > 0.05  # the examples differ, so agreement means something
  for signature in ("text", "encoded"):
    got = answer["nli"][signature]
    np.testing.assert_allclose(np.array(got["probabilities"]), expected, atol=1e-5, rtol=0)
    assert got["label_id"] == logits.argmax(axis=-1).tolist()
    assert got["label"] == [LABELS[i] for i in got["label_id"]]
  scores = _keras_outputs(exported, "sts", [(s, None) for s in SINGLES])
  assert np.ptp(scores) > 0.05
  for signature in ("text", "encoded"):
    assert set(answer["sts"][signature]) == {"score"}
    np.testing.assert_allclose(np.array(answer["sts"][signature]["score"]), scores, atol=1e-5, rtol=0)

  # The warmup requests replay through the loaded model, giving what the model gives on those texts.
  for name in ("nli", "sts"):
    warmup = answer[name]["warmup"]
    assert len(warmup) == 3
    for replay in warmup:
      s1 = replay["inputs"]["sentence1"]
      texts = list(zip(s1, replay["inputs"].get("sentence2", [None] * len(s1))))
      outputs = _keras_outputs(exported, name, texts)
      if name == "nli":
        np.testing.assert_allclose(np.array(replay["outputs"]["probabilities"]), softmax(outputs), atol=1e-5)
      else:
        np.testing.assert_allclose(np.array(replay["outputs"]["score"]), outputs, atol=1e-5)


# -- Each batch at its own length -----------------------------------------------------------------------------


def test_trim_padding_cuts_a_batch_after_its_longest_sequence_rounded_up():
  def lengths_after(masks, multiple):
    mask = tf.constant(masks, tf.int32, shape=np.shape(masks) if len(masks) else [0, T])
    features = {"input_ids": mask * 7, "input_mask": mask, "segment_ids": mask}
    trimmed = serving.trim_padding(features, multiple)
    for name in INPUT_NAMES:
      assert trimmed[name].numpy().tolist() == features[name].numpy()[..., :trimmed[name].shape[-1]].tolist()
    return trimmed["input_mask"].shape

  def row(length):
    return [1] * length + [0] * (T - length)

  assert lengths_after([row(3), row(5)], 8) == [2, 8]
  assert lengths_after([row(3), row(5)], 3) == [2, 6]
  assert lengths_after([row(3), row(5)], 1) == [2, 5]
  assert lengths_after([row(9)], 8) == [1, T]  # 16, but never more than the padded length
  assert lengths_after([row(T)], 1) == [1, T]
  assert lengths_after([[1, 0, 1] + [0] * (T - 3)], 1) == [1, 3]  # up to the last real token, holes kept
  assert lengths_after([[0] * T], 4) == [1, 4]  # no real token: one position, rounded up
  assert lengths_after([], 8) == [0, 8]  # an empty batch
  assert lengths_after([[row(2)] * 4, [row(6)] * 4, [row(1)] * 4], 1) == [3, 4, 6]  # SWAG's [B, 4, T]


def test_a_batch_1_request_runs_at_its_own_length_with_the_padded_outputs(exported):
  """The encoder sees [1, 8] for a 5-token pair (not [1, T]), and the probabilities equal the Keras model's on
  the training-time encoding padded to T."""
  model, spec, _ = exported["nli"]
  server = classifier_serving._ClassifierServer(model, spec, exported["vocab"])  # pylint: disable=protected-access
  seen = []

  def recording_model(features, training):
    seen.append(features["input_ids"].shape.as_list())
    return model(features, training=training)

  object.__setattr__(server, "_model", recording_model)  # the server keeps its model out of tracking this way
  requests = [[("dog", "cat")], [("dog", "cat"), ("The dog sat on the mat.", "A cat.")]]
  tf.config.run_functions_eagerly(True)  # concrete shapes inside the serving function
  try:
    outputs = [server.serve_text(tf.constant([a for a, _ in r]), tf.constant([b for _, b in r])) for r in requests]
  finally:
    tf.config.run_functions_eagerly(False)
  assert keras_features(exported["vocab"], spec, requests[0])["input_mask"].sum() == 5
  assert seen == [[1, 8], [2, T]]  # 5 tokens -> 8; a longest of more than 8 -> 16, at most T = 11
  for request, output in zip(requests, outputs):
    np.testing.assert_allclose(output["probabilities"].numpy(), softmax(_keras_outputs(exported, "nli", request)),
                               atol=1e-6, rtol=0)


# -- Malformed requests: errors or truncation, never a crash --------------------------------------------------


def test_the_signatures_run_the_layers_on_real_tokens_only(exported):
  """Traced under `encoder.padding_skipped`: the graph puts the real rows back with `scatter_rows`
  (TensorScatterUpdate), which the padded computation has no use for; a mixed batch gives the Keras outputs."""
  from tensorflow.core.protobuf import saved_model_pb2

  saved = saved_model_pb2.SavedModel()
  with open(os.path.join(exported["nli"][2], "saved_model.pb"), "rb") as f:
    saved.ParseFromString(f.read())
  ops = {node.op for function in saved.meta_graphs[0].graph_def.library.function for node in function.node_def}
  assert "TensorScatterUpdate" in ops
  texts = [("the dog sat on the mat by the door", "a cat"), ("x", "y"), ("the dog", ".")]
  got = tf.saved_model.load(exported["nli"][2]).signatures["serving_default"](
      sentence1=tf.constant([a for a, _ in texts]), sentence2=tf.constant([b for _, b in texts]))
  np.testing.assert_allclose(got["probabilities"].numpy(), softmax(_keras_outputs(exported, "nli", texts)),
                             atol=1e-6, rtol=0)


@pytest.fixture(scope="module")
def loaded_nli(exported):
  import tensorflow_text  # noqa: F401

  return tf.saved_model.load(exported["nli"][2])


def test_text_signature_rejects_missing_inputs_and_wrong_dtypes(loaded_nli):
  text = loaded_nli.signatures["serving_default"]
  with pytest.raises(TypeError, match="sentence2"):
    text(sentence1=tf.constant(["a dog"]))
  with pytest.raises(tf.errors.InvalidArgumentError, match="expected to be a string tensor"):
    text(sentence1=tf.constant([1]), sentence2=tf.constant([2]))
  with pytest.raises(tf.errors.InvalidArgumentError):  # a scalar, not a batch
    text(sentence1=tf.constant("a dog"), sentence2=tf.constant("a cat"))


def test_text_signature_rejects_batches_of_different_sizes(loaded_nli):
  text = loaded_nli.signatures["serving_default"]
  with pytest.raises(tf.errors.InvalidArgumentError, match="sentence1 and sentence2 must hold the same number"):
    text(sentence1=tf.constant(["a dog", "a cat"]), sentence2=tf.constant(["the mat"]))


def test_empty_text_is_refused_naming_the_row_and_empty_batches_work(loaded_nli, exported):
  """As training refuses a row without text: an empty or blank sentence (whitespace, control characters) is an
  InvalidArgument error naming the input and the row; invalid UTF-8 is one naming the input."""
  text = loaded_nli.signatures["serving_default"]
  for sentence1, sentence2, message in (
      (["dog", ""], ["cat", "mat"], "sentence1 is empty or blank .* in row 1 of the batch"),
      (["dog", "the"], [" \t", "\x00\u200b"], "sentence2 is empty or blank .* in row 0 of the batch"),
      (["dog"], [b"\xff"], "sentence2 must be valid UTF-8")):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      text(sentence1=tf.constant(sentence1), sentence2=tf.constant(sentence2))
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      loaded_nli.encode_text(tf.constant(sentence1), tf.constant(sentence2))
  cls, sep = VOCAB.index("[CLS]"), VOCAB.index("[SEP]")
  features = loaded_nli.encode_text(tf.constant(["dog"]), tf.constant(["?"]))
  assert features["input_ids"].numpy().tolist() == [[cls, VOCAB.index("dog"), sep, VOCAB.index("?"), sep]
                                                    + [0] * (T - 5)]
  empty = text(sentence1=tf.constant([], tf.string), sentence2=tf.constant([], tf.string))
  assert empty["probabilities"].shape == (0, 3) and empty["label"].shape == (0,)


def test_long_text_is_truncated_to_max_seq_length(loaded_nli, exported):
  long_a, long_b = "the dog " * 300, "cat " * 200
  features = loaded_nli.encode_text(tf.constant([long_a]), tf.constant([long_b]))
  expected = keras_features(exported["vocab"], exported["nli"][1], [(long_a, long_b)])
  for name in INPUT_NAMES:
    assert features[name].numpy().tolist() == expected[name].tolist()
  assert features["input_mask"].numpy().tolist() == [[1] * T]
  assert features["input_ids"].numpy()[0, -1] == VOCAB.index("[SEP]")


@pytest.mark.parametrize("change, message", [
    ({"input_ids": [[2, len(VOCAB), 3]]}, f"input_ids must be < vocab_size={len(VOCAB)}"),
    ({"input_ids": [[2, -1, 3]]}, "input_ids must be >= 0"),
    ({"segment_ids": [[0, 2, 0]]}, "segment_ids must be < type_vocab_size=2"),
    ({"input_mask": [[1, 1]]}, "input_mask must have the shape of input_ids"),
    ({"segment_ids": [[0, 0, 0], [0, 0, 0]]}, "segment_ids must have the shape of input_ids"),
    ({"input_mask": [[1, 2, 1]]}, "input_mask must be 0 or 1"),
    ({name: [[1] * (MAX_POSITIONS + 1)] for name in ("input_ids", "input_mask")} | {
        "segment_ids": [[0] * (MAX_POSITIONS + 1)]}, f"at most max_position_embeddings={MAX_POSITIONS}"),
    ({name: np.zeros([1, 0], np.int32) for name in INPUT_NAMES}, "at least one token"),
])
def test_encoded_signature_validates_in_graph(loaded_nli, change, message):
  encoded = loaded_nli.signatures["encoded"]
  inputs = {"input_ids": [[2, 7, 3]], "input_mask": [[1, 1, 1]], "segment_ids": [[0, 0, 0]]} | change
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    encoded(**{k: tf.constant(v, tf.int32) for k, v in inputs.items()})


def test_encoded_signature_accepts_any_length_up_to_max_position_embeddings(loaded_nli, exported):
  encoded = loaded_nli.signatures["encoded"]
  ids = [[2] + [VOCAB.index("dog")] * (MAX_POSITIONS - 2) + [3]]
  inputs = {"input_ids": ids, "input_mask": [[1] * MAX_POSITIONS], "segment_ids": [[0] * MAX_POSITIONS]}
  got = encoded(**{k: tf.constant(v, tf.int32) for k, v in inputs.items()})["probabilities"].numpy()
  logits = exported["nli"][0]({k: np.array(v, np.int32) for k, v in inputs.items()}, training=False).numpy()
  np.testing.assert_allclose(got, softmax(logits), atol=1e-5)
  with pytest.raises(tf.errors.InvalidArgumentError, match="expected to be a int32 tensor"):
    encoded(**{k: tf.constant(v, tf.int64) for k, v in inputs.items()})


# -- saved_model_cli ------------------------------------------------------------------------------------------


def _saved_model_cli(args, with_tf_text: bool = False, cwd=None) -> subprocess.CompletedProcess:
  """TensorFlow's saved_model_cli (the venv's console script), or the same `main` after importing
  tensorflow_text (serving.SAVED_MODEL_CLI_WITH_TF_TEXT)."""
  script = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  if with_tf_text:
    command = [sys.executable, "-I", "-c", serving.SAVED_MODEL_CLI_WITH_TF_TEXT, *args]
  elif os.path.exists(script):
    command = [script, *args]
  else:
    command = [sys.executable, "-I", "-m", "tensorflow.python.tools.saved_model_cli", *args]
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
  return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300,
                        cwd=str(cwd) if cwd else None)


CLI_TEXTS = [("The dog sat.", "a b"), ("?", "Fox!")]
CLI_SIGNATURES = ("serving_default", "encoded")


@pytest.fixture(scope="module")
def saved_model_cli(exported, tmp_path_factory) -> dict:
  """saved_model_cli's runs on the pair classifier's export, two at a time (each a TensorFlow start-up that needs
  nothing of the others): `show --all`; `run` of the encoded signature without tensorflow_text; `run` of each
  signature on CLI_TEXTS with tensorflow_text imported, its outputs under <folder>/out. {name: (folder, result)}."""
  features = keras_features(exported["vocab"], exported["nli"][1], CLI_TEXTS)
  exprs = {"serving_default": f"sentence1={[a for a, _ in CLI_TEXTS]!r};sentence2={[b for _, b in CLI_TEXTS]!r}",
           "encoded": ";".join(f"{name}={features[name].tolist()!r}" for name in INPUT_NAMES)}
  runs = {"show": (["show", "--dir", exported["nli"][2], "--all"], False),
          "without_tf_text": (["run", "--dir", exported["nli"][2], "--tag_set", "serve", "--signature_def", "encoded",
                               "--input_exprs", "input_ids=[[2,7,3]];input_mask=[[1,1,1]];segment_ids=[[0,0,0]]"],
                              False)}
  folders = {name: tmp_path_factory.mktemp(name) for name in (*runs, *CLI_SIGNATURES)}
  for signature in CLI_SIGNATURES:
    runs[signature] = (["run", "--dir", exported["nli"][2], "--tag_set", "serve", "--signature_def", signature,
                        "--input_exprs", exprs[signature], "--outdir", str(folders[signature] / "out")], True)
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    started = {name: pool.submit(_saved_model_cli, args, with_tf_text, folders[name])
               for name, (args, with_tf_text) in runs.items()}
    return {name: (folders[name], run.result()) for name, run in started.items()}


@pytest.mark.slow
def test_saved_model_cli_show_lists_both_signatures(saved_model_cli):
  _, result = saved_model_cli["show"]
  assert result.returncode == 0, result.stderr[-3000:]
  out = result.stdout
  for needle in ("signature_def['serving_default']", "signature_def['encoded']", "inputs['sentence1']",
                 "inputs['sentence2']", "inputs['input_ids']", "outputs['probabilities']", "outputs['label']"):
    assert needle in out
  # It lists the concrete functions by loading the model, which needs the tf-text ops; it says so and goes on.
  assert "could not be listed due to the existence of custom ops" in out


@pytest.mark.slow
def test_saved_model_cli_run_needs_tensorflow_text_even_for_the_encoded_signature(saved_model_cli):
  _, result = saved_model_cli["without_tf_text"]
  assert result.returncode != 0
  assert "Op type not registered 'RegexSplitWithOffsets'" in result.stderr


@pytest.mark.slow
@pytest.mark.parametrize("signature", CLI_SIGNATURES)
def test_saved_model_cli_runs_with_tensorflow_text_imported(exported, saved_model_cli, signature):
  """saved_model_cli runs the graph in a TF1 Session with the checkpoint's restore op - TF Serving's way of
  loading - so this also checks that every variable the signatures read is restored that way."""
  folder, result = saved_model_cli[signature]
  assert result.returncode == 0, result.stderr[-3000:]
  features = keras_features(exported["vocab"], exported["nli"][1], CLI_TEXTS)
  expected = softmax(exported["nli"][0](features, training=False).numpy())
  np.testing.assert_allclose(np.load(folder / "out" / "probabilities.npy"), expected, atol=1e-5, rtol=0)
  assert np.load(folder / "out" / "label_id.npy").tolist() == expected.argmax(axis=-1).tolist()


# -- export_servable: any task's module ------------------------------------------------------------------------


class WordServer(tf.Module):
  """A servable with no BERT and core ops only, shaped like SQuAD's: `serving_default` takes question and
  context strings [B] and answers `answer` (the question upper-cased) string [B], `words` (the context's word
  count + offset, a variable) int32 [B] and `tokens` (the context's words, padded with "") string [B, W];
  `count` takes text [B] and answers its word counts int32 [B]."""

  def __init__(self, offset: int = 0):
    super().__init__(name="word_server")
    self.offset = tf.Variable(offset, dtype=tf.int32, name="offset")
    self.serve = tf.function(self._serve, input_signature=[tf.TensorSpec([None], tf.string, name="question"),
                                                           tf.TensorSpec([None], tf.string, name="context")])
    self.count = tf.function(self._count, input_signature=[tf.TensorSpec([None], tf.string, name="text")])

  def _serve(self, question, context):
    words = tf.strings.split(context)  # ragged [B, (W)]
    return {"answer": tf.strings.upper(question),
            "words": tf.cast(words.row_lengths(), tf.int32) + self.offset,
            "tokens": words.to_tensor("")}

  def _count(self, text):
    return {"words": tf.cast(tf.strings.split(text).row_lengths(), tf.int32)}


WORD_WARMUP = [{"question": "who ran?", "context": "the dog ran"}, {"question": "why", "context": "fox"}]
WORD_MANIFEST = {"task": "words", "task_kind": "squad", "max_answer_length": 7}


def export_words(export_dir: str, version: int | None = None, offset: int = 10, **kwargs) -> str:
  server = WordServer(offset)
  args = {"warmup_instances": WORD_WARMUP, "manifest": WORD_MANIFEST} | kwargs
  return serving.export_servable(server, {"serving_default": server.serve, "count": server.count}, export_dir,
                                 "words", version, **args)


@pytest.fixture(scope="module")
def word_export(tmp_path_factory):
  root = tmp_path_factory.mktemp("words")
  return export_words(str(root / "export"), vocab_file=write_vocab(root))


def test_export_servable_layout_and_manifest(word_export):
  model_dir = os.path.dirname(word_export)
  assert os.path.basename(word_export) == "1" and os.listdir(model_dir) == ["1"]
  assert {"saved_model.pb", "variables", "assets.extra"} <= set(os.listdir(word_export))
  assert sorted(os.listdir(os.path.join(word_export, "assets.extra"))) == [
      "bert_tf_manifest.json", "tf_serving_warmup_requests", "vocab.txt"]
  with open(os.path.join(word_export, "assets.extra", "vocab.txt")) as f:
    assert f.read().split() == VOCAB
  manifest = serving.read_manifest(word_export)
  assert set(manifest) == set(serving.COMMON_MANIFEST_KEYS) | set(WORD_MANIFEST)
  assert {k: manifest[k] for k in WORD_MANIFEST} == WORD_MANIFEST
  assert list(manifest)[:5] == ["model_name", "version", "task", "task_kind", "max_answer_length"]
  assert (manifest["model_name"], manifest["version"], manifest["warmup_records"]) == ("words", 1, 3)
  assert manifest["vocab_file"] == "assets.extra/vocab.txt"
  assert manifest["signatures"] == {
      "serving_default": {
          "inputs": {"context": {"dtype": "string", "shape": [-1]}, "question": {"dtype": "string", "shape": [-1]}},
          "outputs": {"answer": {"dtype": "string", "shape": [-1]}, "tokens": {"dtype": "string", "shape": [-1, -1]},
                      "words": {"dtype": "int32", "shape": [-1]}}},
      "count": {"inputs": {"text": {"dtype": "string", "shape": [-1]}},
                "outputs": {"words": {"dtype": "int32", "shape": [-1]}}}}
  # Core ops only: nothing for the server to link in, and the note says so rather than naming tensorflow-text.
  assert manifest["custom_ops"] == [] and "core TensorFlow" in manifest["note"]
  assert manifest["tensorflow"] == tf.__version__
  assert manifest["serving_image"] == f"tensorflow/serving:{tf.__version__}"
  # The variable is saved and restored: 10 is added to each count.
  loaded = tf.saved_model.load(word_export)
  out = loaded.signatures["serving_default"](question=tf.constant(["a b"]), context=tf.constant(["x y z"]))
  assert out["words"].numpy().tolist() == [13] and out["answer"].numpy().tolist() == [b"A B"]


def test_export_servable_warmup_requests(word_export):
  requests = _warmup_requests(word_export)
  expected = [[WORD_WARMUP[0]], [WORD_WARMUP[1]], WORD_WARMUP]
  assert len(requests) == len(expected)
  for request, batch in zip(requests, expected):
    assert (request.model_spec.name, request.model_spec.signature_name) == ("words", "serving_default")
    assert set(request.inputs) == {"question", "context"}
    for name in ("question", "context"):
      assert request.inputs[name].dtype == tf.string.as_datatype_enum
      assert [s.decode() for s in tf.make_ndarray(request.inputs[name])] == [b[name] for b in batch]


def test_an_export_traces_each_signature_once_and_warms_up_the_saved_graph(tmp_path):
  traced = []

  class Counted(WordServer):
    def _serve(self, question, context):
      traced.append("serve")
      return super()._serve(question, context)

    def _count(self, text):
      traced.append("count")
      return super()._count(text)

  server = Counted(offset=10)
  path = serving.export_servable(server, {"serving_default": server.serve, "count": server.count},
                                 str(tmp_path / "export"), "words", None, WORD_WARMUP, WORD_MANIFEST)
  # The warmup run's trace of serving_default is the one tf.saved_model.save writes: no second trace.
  assert sorted(traced) == ["count", "serve"]
  assert os.path.basename(path) == "1"
  loaded = tf.saved_model.load(path)
  out = loaded.signatures["serving_default"](question=tf.constant(["a b"]), context=tf.constant(["x y z"]))
  assert out["words"].numpy().tolist() == [13]


def test_export_servable_writes_under_a_hidden_name_and_takes_the_next_version(tmp_path, monkeypatch):
  """While the version is being written, the model folder holds only a hidden, non-numeric name (what TF
  Serving ignores); then the version appears whole. Exporting again takes the next version; an existing one is
  refused."""
  export_dir = str(tmp_path / "export")
  model_dir = os.path.join(export_dir, "words")
  seen = []
  write = serving.write_warmup_requests

  def spy(path, *args, **kwargs):
    seen.append((path, sorted(os.listdir(model_dir))))
    return write(path, *args, **kwargs)

  monkeypatch.setattr(serving, "write_warmup_requests", spy)
  first = export_words(export_dir)
  (path, listing), = seen
  writing = os.path.relpath(path, model_dir).split(os.sep)[0]
  # The export's lock (run_lock.LOCK_NAME) is there too while it writes.
  assert listing == [writing, ".lock"] and writing.startswith(".1.tmp-") and not any(n.isdigit() for n in listing)
  assert first == os.path.join(model_dir, "1") and os.listdir(model_dir) == ["1"]

  # The next version, its warmup requests calling another signature, with no vocabulary.
  second = export_words(export_dir, warmup_instances=[{"text": "a b"}], warmup_signature="count")
  assert second == os.path.join(model_dir, "2") and sorted(os.listdir(model_dir)) == ["1", "2"]
  assert seen[1][1][0].startswith(".2.tmp-") and seen[1][1][1:] == [".lock", "1"]
  (request,) = _warmup_requests(second)
  assert request.model_spec.signature_name == "count" and set(request.inputs) == {"text"}
  manifest = serving.read_manifest(second)
  assert manifest["version"] == 2 and manifest["warmup_records"] == 1 and "vocab_file" not in manifest
  assert sorted(os.listdir(os.path.join(second, "assets.extra"))) == ["bert_tf_manifest.json",
                                                                      "tf_serving_warmup_requests"]
  with pytest.raises(ValueError, match=r"words/2 already exists and TF Serving may be serving it"):
    export_words(export_dir, version=2)
  assert sorted(os.listdir(model_dir)) == ["1", "2"] and len(seen) == 2


def test_an_export_the_newest_version_already_serves_publishes_nothing(tmp_path):
  """The same server (weights), manifest, warmup and vocabulary as the newest version: no new version, that one's
  path returned (a rerun of a finished run with --export_dir). Other weights publish the next version; the first
  weights again, no longer the newest, publish another (a rollback); an explicit version is always written."""
  export_dir, vocab = str(tmp_path / "export"), write_vocab(tmp_path)
  model_dir = os.path.join(export_dir, "words")
  first = export_words(export_dir, vocab_file=vocab)
  assert export_words(export_dir, vocab_file=vocab) == first and os.listdir(model_dir) == ["1"]
  fingerprint = serving.read_manifest(first)["fingerprint"]
  assert re.fullmatch(r"[0-9a-f]{64}", fingerprint)
  assert export_words(export_dir, offset=11, vocab_file=vocab) == os.path.join(model_dir, "2")
  assert export_words(export_dir, vocab_file=vocab) == os.path.join(model_dir, "3")
  assert serving.read_manifest(os.path.join(model_dir, "3"))["fingerprint"] == fingerprint
  assert export_words(export_dir, version=7, vocab_file=vocab) == os.path.join(model_dir, "7")
  assert sorted(os.listdir(model_dir), key=int) == ["1", "2", "3", "7"]


def test_the_next_export_removes_what_a_killed_one_left(tmp_path):
  """A killed export leaves its hidden version folder and its lock; the next export to the model takes the dead
  lock over and removes the folder. A live export's lock is refused."""
  model_dir = tmp_path / "export" / "words"
  left = model_dir / ".1.tmp-0123abcd" / "variables"
  left.mkdir(parents=True)
  (left / "variables.data-00000-of-00001").write_bytes(b"\0" * 1000)
  (model_dir / ".lock").write_text("{}")  # cut short: a dead holder's
  assert export_words(str(tmp_path / "export")) == str(model_dir / "1")
  assert sorted(os.listdir(model_dir)) == ["1"]
  from bert_tf.errors import OutputDirInUse
  from bert_tf.training import run_lock

  with run_lock.RunLock(str(model_dir)), pytest.raises(OutputDirInUse, match="is in use by another run"):
    export_words(str(tmp_path / "export"))
  assert sorted(os.listdir(model_dir)) == ["1"]


def test_an_export_dir_that_is_a_file_is_refused_before_anything_loads(tmp_path):
  from bert_tf.tasks.ner import serving as ner_serving
  from bert_tf.tasks.squad import serving as squad_serving
  from bert_tf.tasks.swag import serving as swag_serving

  (tmp_path / "file").write_text("x")
  for export_dir in (tmp_path / "file", tmp_path / "file" / "below"):
    with pytest.raises(ValueError, match=f"--export_dir={export_dir}: {tmp_path / 'file'} is a file, not a folder"):
      export_words(str(export_dir))
    for export in (squad_serving.export_squad, ner_serving.export_ner, swag_serving.export_swag):
      with pytest.raises(ValueError, match="is a file, not a folder"):
        export(str(tmp_path / "no_model"), str(export_dir))
  with pytest.raises(ValueError, match="is a file, not a folder"):
    classifier_serving.export_from_directory(str(tmp_path / "no_model"), str(tmp_path / "file"), "m")


@pytest.mark.parametrize("change, error", [
    ({"model_name": "a/b"}, "model_name='a/b': give a plain folder name"),
    ({"model_name": ".hidden"}, "model_name='.hidden'"),
    ({"model_name": "a\\b c"}, r"model_name='a\\\\b c': give a plain folder name \(A-Z, a-z, 0-9, '-', '_', and '\.' "
                                r"after the first character\)"),
    ({"model_name": ""}, "model_name=''"),
    ({"version": 0}, "version=0: must be a positive integer"),
    ({"version": "2"}, "version='2'"),
    ({"version": True}, "version=True"),
    ({"manifest": {"task_kind": "squad"}}, "manifest: needs a non-empty string 'task'"),
    ({"manifest": {"task": "words"}}, "manifest: needs a non-empty string 'task_kind'"),
    ({"manifest": {"task": "words", "task_kind": ""}}, "'task_kind'"),
    ({"manifest": WORD_MANIFEST | {"version": 3}}, r"manifest: \['version'\] are computed by the export"),
    ({"manifest": WORD_MANIFEST | {"labels": {1, 2}}}, "manifest: not JSON-serializable"),
    ({"warmup_signature": "other"}, r"signatures \['count', 'serving_default'\]: no 'other'"),
    ({"warmup_instances": []}, "warmup_instances: give a non-empty list"),
    ({"warmup_instances": [{"question": "a"}]},
     r"warmup_instances: has inputs \['question'\] but the signature takes \['context', 'question'\]; "
     r"missing \['context'\]"),
    ({"warmup_instances": [{"question": "a", "context": "b", "text": "c"}]}, r"unexpected \['text'\]"),
    ({"warmup_instances": [{"question": 1, "context": "b"}]}, "warmup_instances: 'serving_default' fails on them"),
    ({"vocab_file": "/nonexistent/vocab.txt"}, "vocab_file=/nonexistent/vocab.txt: no such file"),
])
def test_export_servable_rejects_bad_arguments_before_writing(tmp_path, change, error):
  server = WordServer()
  args = {"server": server, "signatures": {"serving_default": server.serve, "count": server.count},
          "export_dir": str(tmp_path), "model_name": "words", "version": None, "warmup_instances": WORD_WARMUP,
          "manifest": WORD_MANIFEST} | change
  with pytest.raises((ValueError, FileNotFoundError), match=error):
    serving.export_servable(**args)
  assert not os.listdir(tmp_path)


def test_model_names_are_what_the_message_says():
  for name in ("mrpc", "sts-b", "glue_mrpc", "mrpc.v2", "M2"):
    serving.check_name_and_version(name, None)
  for name in ("a\\b", "a b", "..", "a:b", "mrpc/1", "é"):
    with pytest.raises(ValueError, match="give a plain folder name"):
      serving.check_name_and_version(name, None)


def test_check_warmup_instances():
  names = ["question", "context"]
  assert serving.check_warmup_instances([{"question": "a", "context": "b", "x": None}], names) == [
      {"question": "a", "context": "b"}]
  assert serving.check_warmup_instances([{"ids": [1, 2]}, {"ids": [3, 4]}]) == [{"ids": [1, 2]}, {"ids": [3, 4]}]
  with pytest.raises(ValueError, match=r"warmup_instances 1: has inputs \['question'\] but the signature takes"):
    serving.check_warmup_instances([{"question": "a", "context": "b"}, {"question": "c"}], names)
  with pytest.raises(ValueError, match=r"warmup_instances 1: 'ids' has shape \[3\] but warmup_instances 0's has "
                     r"\[2\]"):
    serving.check_warmup_instances([{"ids": [1, 2]}, {"ids": [3, 4, 5]}])
  with pytest.raises(ValueError, match=r"warmup_instances 'ids': a ragged list"):
    serving.check_warmup_instances([{"ids": [[1], [2, 3]]}])
  with pytest.raises(ValueError, match="warmup_instances 'x': dict is not an input value"):
    serving.check_warmup_instances([{"x": {"a": 1}}])
  with pytest.raises(ValueError, match="warmup_instances 1: str, not a dict"):
    serving.check_warmup_instances([{"question": "a"}, "question"])
  assert len(serving.check_warmup_instances([{"t": "a"}] * 999)) == 999  # 999 + the batch: TF Serving's 1,000
  with pytest.raises(ValueError, match="1000 warmup examples make 1001 requests; TF Serving reads at most 1000"):
    serving.check_warmup_instances([{"t": "a"}] * 1000)


def test_classifier_manifest_names_its_task_kind(exported):
  assert serving.read_manifest(exported["nli"][2])["task_kind"] == "classification"
  assert serving.read_manifest(exported["sts"][2])["task_kind"] == "regression"


def test_warmup_file_is_the_same_bytes_whatever_order_the_inputs_come_in(tmp_path):
  # The inputs are a protobuf map: without deterministic serialization the bytes follow insertion order (and the
  # process's hashing), so the same export written twice, or locally and on gs://, would differ.
  instances = [{"sentence1": "A dog.", "sentence2": "No.", "question": "Why?"}, {"sentence1": "B", "sentence2": "C",
                                                                                  "question": "D"}]
  paths = [str(tmp_path / name) for name in ("forward", "reversed")]
  for path, order in zip(paths, (instances, [dict(reversed(list(i.items()))) for i in instances])):
    assert serving.write_warmup_requests(path, "pairs", order) == 3
  forward, backward = (open(path, "rb").read() for path in paths)
  assert forward == backward


def test_a_new_version_of_another_kind_of_task_is_refused(exported):
  """The sts regression model (single sentences) as the next version of "nli" (pair classification) would change
  what TF Serving answers under that name: refused before anything is written (a new version of the same kind:
  test_a_mixed_precision_model_exports_as_float32_next_version)."""
  model, spec, _ = exported["sts"]
  before = sorted(os.listdir(os.path.join(exported["export_dir"], "nli")))
  with pytest.raises(ValueError, match=r"nli/\d+ was exported as task_kind 'classification', is_pair True \(task "
                                       r"'nli'\); version \d+ would be task_kind 'regression', is_pair False \(task "
                                       r"'sts'\), and TF Serving would answer clients of 'nli' with it"):
    classifier_serving.export_classifier(model, spec, exported["vocab"], exported["export_dir"], "nli")
  assert sorted(os.listdir(os.path.join(exported["export_dir"], "nli"))) == before


def test_in_slices_runs_a_slice_of_rows_at_a_time_with_the_outputs_of_one_call():
  """Rows of [N, 3, L] features (SWAG's shape) through a function of the rows, 2 rows (2 x 3 x 5 <= 31 tokens) a
  step: the slices seen, and the outputs equal to one call on every row; zero rows run one empty step."""
  features = {name: tf.reshape(tf.range(7 * 3 * 5, dtype=tf.int32) + offset, [7, 3, 5])
              for offset, name in enumerate(("input_ids", "input_mask", "segment_ids"))}
  seen = []

  def fn(rows):
    seen.append(int(tf.shape(rows["input_ids"])[0]))
    return {"total": tf.reduce_sum(rows["input_ids"] * rows["segment_ids"], axis=[1, 2]),
            "scaled": tf.cast(rows["input_mask"], tf.float32) / 2}

  sliced = serving.in_slices(fn, features, {"total": tf.int32, "scaled": tf.float32}, tokens_per_step=31)
  assert seen == [2, 2, 2, 1]
  whole = fn(features)
  assert sliced["total"].numpy().tolist() == whole["total"].numpy().tolist()
  assert np.array_equal(sliced["scaled"].numpy(), whole["scaled"].numpy()) and sliced["scaled"].shape == (7, 3, 5)
  seen.clear()
  empty = serving.in_slices(fn, {name: value[:0] for name, value in features.items()}, {"total": tf.int32,
                                                                                       "scaled": tf.float32})
  assert seen == [0] and empty["total"].shape == (0,) and empty["scaled"].shape == (0, 3, 5)

  @tf.function
  def traced(ids):  # in a graph, the static shapes past the rows are kept (the signature's outputs)
    out = serving.in_slices(fn, {"input_ids": ids, "input_mask": ids, "segment_ids": ids},
                            {"total": tf.int32, "scaled": tf.float32}, tokens_per_step=31)
    assert out["scaled"].shape.as_list() == [None, 3, 5] and out["total"].shape.as_list() == [None]
    return out

  assert traced.get_concrete_function(tf.TensorSpec([None, 3, 5], tf.int32)) is not None
