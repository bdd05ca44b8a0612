"""bert_tf.tasks.swag.serving: a fine-tuned SWAG model folder exported through the shared export path, loaded in a
fresh process that imports only TensorFlow and tensorflow-text, gives the Keras model's probabilities on the
sequences the training records hold."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.data import tokenization
from bert_tf.export import serving
from bert_tf.tasks.swag import data as swag
from bert_tf.tasks.swag import model as swag_model
from bert_tf.tasks.swag import run as swag_run
from bert_tf.tasks.swag import serving as swag_serving
from test_swag_model import WORDS, _config

T = 13
EXAMPLES = [
    swag.SwagExample("0", "The man runs.", "He", ("jumps over the fence.", "sleeps.", "walks slowly away.",
                                                  "falls into water."), None),
    # Upper case (lower-cased in the graph), an empty sent2, and pairs longer than T (truncated).
    swag.SwagExample("1", "A RED dog, then a blue cat sits in the park quickly.", "",
                     ("it sits.", "the ball runs away over the red fence into the water slowly.", "she walks.",
                      "they sleep."), None),
    swag.SwagExample("2", "", "The woman", ("!", "runs.", "jumps quickly, then falls.", "sits."), None),
]


def _swag_example(sent1, sent2, endings):
  return swag.SwagExample("x", sent1, sent2, tuple(endings), None)


def export_swag_model(directory) -> dict:
  """A random (so the choices' probabilities differ) model saved as run_swag.py saves it into `directory`, and its
  export. Built once per session (conftest's `swag_export`)."""
  vocab = directory / "vocab.txt"
  vocab.write_text("\n".join([*tokenization.SPECIAL_TOKENS, *WORDS]) + "\n")
  keras.utils.set_random_seed(11)
  model = swag_model.BertMultipleChoice(_config())
  model({name: tf.zeros([1, 4, 2], tf.int32) for name in ("input_ids", "input_mask", "segment_ids")})
  # Weights of scale 1: at BERT's initialisation the tiny encoder's pooled outputs barely differ between
  # sequences, and the four probabilities would all be 0.25 to 4 decimals.
  for i, weight in enumerate(model.weights):
    weight.assign(np.random.default_rng(i).normal(0, 1.0, weight.shape).astype(np.float32))
  model_dir = str(directory / "swag_model")
  swag_run.save_model(model, {"max_seq_length": T, "do_lower_case": True, "num_choices": 4}, str(vocab), model_dir)
  path = swag_serving.export_swag(model_dir, str(directory / "export"))
  return {"model": swag_run.load_model(model_dir), "model_dir": model_dir, "path": path,
          "tokenizer": tokenization.FullTokenizer(str(vocab)), "directory": directory}


@pytest.fixture(scope="module")
def exported(swag_export):
  return swag_export


def _keras_logits(exported, examples):
  encoded = [swag.encode_example(exported["tokenizer"], e, T) for e in examples]
  features = {name: tf.constant([[getattr(s, name) for s in seqs] for seqs in encoded], tf.int32)
              for name in ("input_ids", "input_mask", "segment_ids")}
  return exported["model"](features, training=False).numpy()


def _inputs(examples):
  return {"sent1": [e.sent1 for e in examples], "sent2": [e.sent2 for e in examples],
          **{f"ending{i}": [e.endings[i] for e in examples] for i in range(4)}}


def test_layout_and_manifest(exported):
  path = exported["path"]
  assert path == os.path.join(str(exported["directory"] / "export"), "swag", "1")
  assert sorted(os.listdir(os.path.join(path, serving.ASSETS_EXTRA))) == [
      serving.MANIFEST_FILE, serving.WARMUP_FILE, serving.VOCAB_FILE]
  manifest = serving.read_manifest(path)
  assert {k: manifest[k] for k in ("model_name", "version", "task", "task_kind", "num_choices", "inputs",
                                   "max_seq_length", "do_lower_case", "warmup_records")} == {
      "model_name": "swag", "version": 1, "task": "swag", "task_kind": "multiple_choice", "num_choices": 4,
      "inputs": ["sent1", "sent2", "ending0", "ending1", "ending2", "ending3"], "max_seq_length": T,
      "do_lower_case": True, "warmup_records": 3}
  signature = manifest["signatures"]["serving_default"]
  assert signature["inputs"] == {name: {"dtype": "string", "shape": [-1]} for name in swag_serving.TEXT_INPUTS}
  assert signature["outputs"] == {"ending": {"dtype": "string", "shape": [-1]},
                                  "label_id": {"dtype": "int32", "shape": [-1]},
                                  "probabilities": {"dtype": "float32", "shape": [-1, 4]}}
  assert list(manifest["signatures"]) == ["serving_default"]
  assert manifest["custom_ops"]  # tensorflow-text's tokenizer ops


_ISOLATED_CLIENT = '''
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  Registers the tokenizer's ops, as TF Serving links them.
from tensorflow_serving.apis import prediction_log_pb2  # Only to read the warmup file, as TF Serving does.

def plain(outputs):
  return {k: [x.decode() if isinstance(x, bytes) else x for x in v.numpy().tolist()] for k, v in outputs.items()}

job = json.load(open(sys.argv[1]))
loaded = tf.saved_model.load(job["dir"])
serve = loaded.signatures["serving_default"]
answer = {"text": plain(serve(**{k: tf.constant(v, tf.string) for k, v in job["inputs"].items()})), "warmup": []}
for record in tf.data.TFRecordDataset(job["dir"] + "/assets.extra/tf_serving_warmup_requests"):
  request = prediction_log_pb2.PredictionLog.FromString(record.numpy()).predict_log.request
  inputs = {k: tf.constant(tf.make_ndarray(v)) for k, v in request.inputs.items()}
  answer["warmup"].append({"inputs": plain(inputs), "outputs": plain(serve(**inputs))})
answer["bert_tf_modules"] = sorted(m for m in sys.modules if m.split(".")[0] == "bert_tf")
print(json.dumps(answer))
'''


@pytest.mark.slow
def test_a_fresh_process_with_tensorflow_text_alone_gives_the_keras_models_outputs(exported, tmp_path):
  script, job_file = tmp_path / "client.py", tmp_path / "job.json"
  script.write_text(_ISOLATED_CLIENT)
  job_file.write_text(json.dumps({"dir": exported["path"], "inputs": _inputs(EXAMPLES)}))
  env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
  env.update(TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
  result = subprocess.run([sys.executable, "-I", str(script), str(job_file)], cwd=str(tmp_path), env=env,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-4000:]
  answer = json.loads(result.stdout.strip().splitlines()[-1])
  assert answer["bert_tf_modules"] == []

  logits = _keras_logits(exported, EXAMPLES)
  expected = swag_model.probabilities(logits)
  assert np.ptp(expected, axis=1).min() > 0.05  # the choices differ, so agreement means something
  assert any(s.truncated for e in EXAMPLES for s in swag.encode_example(exported["tokenizer"], e, T))
  got = answer["text"]
  np.testing.assert_allclose(np.array(got["probabilities"]), expected, atol=1e-5, rtol=0)
  assert got["label_id"] == logits.argmax(axis=1).tolist()
  assert got["ending"] == [e.endings[i] for e, i in zip(EXAMPLES, got["label_id"])]

  # The warmup requests (one per default example, one of both) replay to the model's outputs on those texts.
  assert len(answer["warmup"]) == 3
  for replay in answer["warmup"]:
    texts = replay["inputs"]
    examples = [_swag_example(texts["sent1"][i], texts["sent2"][i], [texts[f"ending{c}"][i] for c in range(4)])
                for i in range(len(texts["sent1"]))]
    np.testing.assert_allclose(np.array(replay["outputs"]["probabilities"]),
                               swag_model.probabilities(_keras_logits(exported, examples)), atol=1e-5, rtol=0)


def test_batches_of_different_sizes_are_an_error_and_empty_batches_work(exported):
  import tensorflow_text  # noqa: F401

  serve = tf.saved_model.load(exported["path"]).signatures["serving_default"]
  inputs = {k: tf.constant(v, tf.string) for k, v in _inputs(EXAMPLES).items()}
  with pytest.raises(tf.errors.InvalidArgumentError, match="ending2 must hold as many examples as sent1"):
    serve(**dict(inputs, ending2=tf.constant(["a", "b"])))
  # As training reads SWAG: a blank ending is refused, naming it and its row; an empty sent1 or sent2 is text.
  blank = [" "] * (len(EXAMPLES) - 1) + ["ends."]
  with pytest.raises(tf.errors.InvalidArgumentError, match="ending3 is empty or blank .* in row 0 of the batch"):
    serve(**dict(inputs, ending3=tf.constant(blank)))
  with pytest.raises(tf.errors.InvalidArgumentError, match="ending1 must be valid UTF-8"):
    serve(**dict(inputs, ending1=tf.constant([b"\xff"] * len(EXAMPLES))))
  empty = serve(**{k: tf.constant([], tf.string) for k in swag_serving.TEXT_INPUTS})
  assert empty["probabilities"].shape == (0, 4) and empty["ending"].shape == (0,)
  with pytest.raises(TypeError):
    serve(**{k: v for k, v in inputs.items() if k != "sent2"})


def test_bad_folders_and_warmup_examples_are_named_before_writing(exported, tmp_path):
  # (Versions, the atomic write and warmup files are export_servable's, tested in test_serving.)
  with pytest.raises(FileNotFoundError, match=f"^{tmp_path}: no swag.json; give a folder written by run_swag.py "
                     r"\(<output_dir>/swag_model\)"):
    swag_serving.export_swag(str(tmp_path), str(tmp_path / "export"))
  with pytest.raises(ValueError, match="warmup_instances"):
    swag_serving.export_swag(exported["model_dir"], str(tmp_path / "export"), warmup=[{"sent1": "a"}])
  assert not (tmp_path / "export" / "swag").exists()
