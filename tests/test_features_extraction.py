"""Feature extraction (bert_tf/tasks/features/extraction.py, scripts/extract_features.py): every value of every
line against google-research's `extract_features.py` (PyPI bert-tensorflow 1.0.4, "the reference") on one tiny
random BERT saved under google-research's TF1 names by our converter, and the up-front errors.

The reference runs in a subprocess (its absl flags would collide with ours), under tf.compat.v1, with its own
`read_examples`, `convert_examples_to_features`, `input_fn_builder`, `model_fn_builder` (so `modeling.BertModel`,
`get_assignment_map_from_checkpoint`, `tf.train.init_from_checkpoint`) and `main` (tokenizer, flags, the JSON
writing) doing the work. Stand-ins, for what TensorFlow 2.20 no longer has:
  - `tensorflow.contrib.layers.layer_norm` (modeling.py's LayerNorm; contrib left TF in 2.0): a function computing
    what contrib's does for modeling's arguments (moments over the last axis, `tf.nn.batch_normalization` with
    variance_epsilon 1e-12) with variables `LayerNorm/beta` and `LayerNorm/gamma` in the same scope, so the
    checkpoint's names load.
  - `tf.estimator` (removed in 2.16; main() uses `tf.estimator.tpu.TPUEstimator`, `RunConfig`, `TPUConfig`,
    `TPUEstimatorSpec` and `ModeKeys.PREDICT`): `TPUEstimator.predict` builds the graph of the reference's
    input_fn and model_fn and runs its predictions in a tf.compat.v1 Session until the data ends, one example at
    a time, as the CPU fallback of TPUEstimator does; the other names are plain records of their arguments.
  - `tf.layers.dense` (modeling.py's dense layers) needs Keras 2: TF_USE_LEGACY_KERAS=1 takes it from tf_keras,
    which the environment has; that is TensorFlow's own legacy layer, not a stand-in.
"""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from bert_tf.config import BertConfig
from bert_tf.tasks.common.features import truncate_lengths
from bert_tf.tasks.features import extraction as fe

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "scripts", "extract_features.py")

_REFERENCE_DRIVER = r"""
import json, sys, types
import tensorflow.compat.v1 as tf
tf.disable_v2_behavior()


def layer_norm(inputs, begin_norm_axis=-1, begin_params_axis=-1, scope=None):
  assert begin_norm_axis == -1 and begin_params_axis == -1  # modeling.py's only use
  with tf.variable_scope(scope, "LayerNorm", [inputs]):
    shape = inputs.shape[-1:]
    beta = tf.get_variable("beta", shape, dtype=inputs.dtype, initializer=tf.zeros_initializer())
    gamma = tf.get_variable("gamma", shape, dtype=inputs.dtype, initializer=tf.ones_initializer())
    mean, variance = tf.nn.moments(inputs, [-1], keep_dims=True)
    return tf.nn.batch_normalization(inputs, mean, variance, offset=beta, scale=gamma, variance_epsilon=1e-12)


contrib = types.ModuleType("tensorflow.contrib")
contrib.layers = types.ModuleType("tensorflow.contrib.layers")
contrib.layers.layer_norm = layer_norm
sys.modules["tensorflow.contrib"], sys.modules["tensorflow.contrib.layers"] = contrib, contrib.layers


class SessionEstimator:
  def __init__(self, use_tpu, model_fn, config, predict_batch_size):
    assert not use_tpu
    self.model_fn, self.batch_size = model_fn, predict_batch_size

  def predict(self, input_fn, yield_single_examples=True):
    params = {"batch_size": self.batch_size}
    with tf.Graph().as_default():
      features = tf.data.make_one_shot_iterator(input_fn(params)).get_next()
      predictions = self.model_fn(features, None, "infer", params).predictions
      with tf.Session() as session:
        session.run(tf.global_variables_initializer())
        while True:
          try:
            batch = session.run(predictions)
          except tf.errors.OutOfRangeError:
            return
          for i in range(len(batch["unique_id"])):
            yield {name: value[i] for name, value in batch.items()}


record = lambda **kwargs: types.SimpleNamespace(**kwargs)
tf.estimator = record(
    ModeKeys=record(PREDICT="infer"),
    tpu=record(TPUEstimator=SessionEstimator, RunConfig=record, TPUConfig=record, TPUEstimatorSpec=record,
               InputPipelineConfig=record(PER_HOST_V2=3)))

from bert import extract_features as ef
ef.FLAGS(["reference", *sys.argv[2:]])
for job in json.load(open(sys.argv[1])):
  for name, value in job.items():
    setattr(ef.FLAGS, name, value)
  ef.main(None)
"""

WORDS = ["the", "cat", "sat", "on", "mat", "dog", "run", "##s", "sleep", "a", "b", "c", "x", "|", ".", ",",
         "cafe", "naive", "東", "京", "ü", "long", "##er", "word", "##y", "!", "é"]
LINES = [
    "The cat sat on the mat.",
    "the dog runs ||| the cat sleeps",
    "",  # a blank line: [CLS] [SEP]
    " ".join(["the long cat"] * 12),  # longer than max_seq_length 24: truncated
    " ".join(["the long cat"] * 9) + " ||| a dog sleeps .",  # a pair truncated from its longer side
    "Café 東京 naïve Über wordy!",
    "a ||| b ||| c",  # the last " ||| " separates
    "x |||",  # no text after the separator: one sentence
    "dog\t,\u00a0cat \u3000 .",
    "the\rcat .",  # GFile drops the "\r"
]
SEQ = 24


def tiny_config(vocab_size):
  return BertConfig(vocab_size=vocab_size, hidden_size=36, num_hidden_layers=2, num_attention_heads=3,
                    intermediate_size=53, max_position_embeddings=130, type_vocab_size=2)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """A random 2-layer BERT as google-research's layout (bert_model.ckpt, bert_config.json, vocab.txt) and as
  ours (encoder/ckpt-1), and the input lines."""
  from bert_tf.model import checkpoints, convert
  from bert_tf.model.encoder import BertEncoder

  d = tmp_path_factory.mktemp("features")
  vocab = d / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]) + "\n", encoding="utf-8")
  config = tiny_config(5 + len(WORDS))
  encoder = BertEncoder(config)
  rng = np.random.default_rng(7)
  # Weights large enough that GELU sees inputs of several units (where its erf and tanh forms differ by ~1e-3)
  # and LayerNorm scales and offsets far from 1 and 0.
  for v in encoder.weights:
    v.assign(rng.normal(0.0, 0.5, v.shape).astype(np.float32))
  converted = convert.Converted(config, encoder, vocab_file=str(vocab))
  out = {"vocab": str(vocab), "tf1": convert.save_tf1(converted, str(d / "tf1")),
         "ours": os.path.dirname(os.path.dirname(convert.save_ours(converted, str(d / "ours")))),
         "input": str(d / "input.txt"), "dir": str(d)}
  # The pretraining hand-off (encoder_checkpoint/, encoder_savedmodel/, bert_config.json), as run_pretraining.py
  # leaves it.
  out["handoff"] = checkpoints.export_encoder(encoder, config, str(d / "pretrain"))
  with open(out["input"], "w", encoding="utf-8") as f:
    f.write("\n".join(LINES) + "\n")
  return out


# (name, flags): the reference runs each; the layers in a chosen order, the default length, a cased tokenizer.
JOBS = [("pair_layers", dict(layers="-2,-1", max_seq_length=SEQ, batch_size=4, do_lower_case=True)),
        ("all_layers", dict(layers="0,-1,1", max_seq_length=128, batch_size=32, do_lower_case=False))]


@pytest.fixture(scope="module")
def reference(files):
  """{job name: the reference's output lines}, from one subprocess."""
  jobs = [dict(job, output_file=os.path.join(files["dir"], f"reference_{name}.jsonl")) for name, job in JOBS]
  jobs_file = os.path.join(files["dir"], "jobs.json")
  with open(jobs_file, "w") as f:
    json.dump(jobs, f)
  tf1 = files["tf1"]
  run = subprocess.run(
      [sys.executable, "-c", _REFERENCE_DRIVER, jobs_file, f"--input_file={files['input']}",
       f"--vocab_file={files['vocab']}", f"--bert_config_file={os.path.dirname(tf1)}/bert_config.json",
       f"--init_checkpoint={tf1}", "--output_file=unused"],
      text=True, capture_output=True,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", TF_USE_LEGACY_KERAS="1"))
  assert run.returncode == 0, f"the reference failed:\n{run.stderr[-3000:]}"
  return {name: read_lines(job["output_file"]) for (name, _), job in zip(JOBS, jobs)}


def read_lines(path):
  with open(path, encoding="utf-8") as f:
    return [json.loads(line) for line in f]


def run_ours(files, name, checkpoint, **changes):
  flags = dict(JOBS)[name]
  config = fe.FeatureExtractionConfig(
      input_file=files["input"], output_file=os.path.join(files["dir"], f"ours_{name}.jsonl"),
      vocab_file=files["vocab"], init_checkpoint=checkpoint, **dict(flags, **changes))
  fe.run(config, say=lambda line: None)
  return read_lines(config.output_file)


def max_difference(ours, theirs):
  """The largest |difference| of two outputs' values; AssertionError when anything else differs."""
  assert len(ours) == len(theirs) == len(LINES)
  worst = 0.0
  for line, (a, b) in enumerate(zip(ours, theirs)):
    assert a["linex_index"] == b["linex_index"] == line
    assert [f["token"] for f in a["features"]] == [f["token"] for f in b["features"]], f"line {line}"
    for fa, fb in zip(a["features"], b["features"]):
      assert [x["index"] for x in fa["layers"]] == [x["index"] for x in fb["layers"]]
      for xa, xb in zip(fa["layers"], fb["layers"]):
        assert len(xa["values"]) == len(xb["values"]) == 36
        worst = max(worst, float(np.max(np.abs(np.subtract(xa["values"], xb["values"])))))
  return worst


def test_script_equals_reference(files, reference, tmp_path):
  """The real entry point on the google-research checkpoint: same tokens, layer indexes and values (both
  rounded to 6 decimals) within 1e-5, and the same keys in the same order."""
  output = tmp_path / "features.jsonl"
  flags = dict(JOBS)["pair_layers"]
  run = subprocess.run(
      [sys.executable, SCRIPT, f"--input_file={files['input']}", f"--output_file={output}",
       f"--vocab_file={files['vocab']}", f"--init_checkpoint={files['tf1']}",
       *[f"--{k}={v}" for k, v in flags.items() if k != "do_lower_case"]],
      text=True, capture_output=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
  assert run.returncode == 0, run.stderr[-3000:]
  assert json.loads(run.stdout.strip().splitlines()[-1])["lines"] == len(LINES)
  ours = read_lines(output)
  assert max_difference(ours, reference["pair_layers"]) <= 1e-5
  with open(output) as f, open(os.path.join(files["dir"], "reference_pair_layers.jsonl")) as g:
    first, theirs = f.readline(), g.readline()
  assert list(json.loads(first)) == list(json.loads(theirs)) == ["linex_index", "features"]
  assert first.isascii()  # non-ASCII tokens escaped, as json.dumps writes them


def test_library_equals_reference_all_layers_cased(files, reference):
  assert max_difference(run_ours(files, "all_layers", files["tf1"]), reference["all_layers"]) <= 1e-5


def test_our_checkpoint_and_gelu(files, reference):
  """Our checkpoint, the pretraining hand-off's checkpoint and SavedModel of the same weights give the reference's
  values with --gelu=tanh (google-research's form); with erf (bert_tf's form, "auto" for them) they differ by
  more than the tolerance: the comparison can tell the two apart."""
  theirs = reference["pair_layers"]
  assert max_difference(run_ours(files, "pair_layers", files["ours"], gelu="tanh"), theirs) <= 1e-5
  for form in ("checkpoint", "savedmodel"):
    assert max_difference(run_ours(files, "pair_layers", files["handoff"][form], gelu="tanh"), theirs) <= 1e-5
  assert max_difference(run_ours(files, "pair_layers", files["ours"]), theirs) > 1e-4
  assert max_difference(run_ours(files, "pair_layers", files["tf1"], gelu="erf"), theirs) > 1e-4


def test_fixture_reaches_the_corner_cases(reference):
  tokens = [[f["token"] for f in line["features"]] for line in reference["pair_layers"]]
  assert tokens[1] == ["[CLS]", "the", "dog", "run", "##s", "[SEP]", "the", "cat", "sleep", "##s", "[SEP]"]
  assert tokens[2] == ["[CLS]", "[SEP]"]
  assert len(tokens[3]) == SEQ and tokens[3][-1] == "[SEP]"
  assert len(tokens[4]) == SEQ and tokens[4][-6:] == ["a", "dog", "sleep", "##s", ".", "[SEP]"]
  assert tokens[5] == ["[CLS]", "cafe", "東", "京", "naive", "[UNK]", "word", "##y", "!", "[SEP]"]
  assert tokens[6] == ["[CLS]", "a", "|", "|", "|", "b", "[SEP]", "c", "[SEP]"]
  assert tokens[7] == ["[CLS]", "x", "|", "|", "|", "[SEP]"]
  assert tokens[9] == ["[CLS]", "[UNK]", ".", "[SEP]"]  # "thecat"
  cased = [[f["token"] for f in line["features"]] for line in reference["all_layers"]]
  assert cased[5] == ["[CLS]", "[UNK]", "東", "京", "[UNK]", "[UNK]", "word", "##y", "!", "[SEP]"]
  assert [x["index"] for x in reference["all_layers"][0]["features"][0]["layers"]] == [0, -1, 1]


def test_round6_is_pythons_round():
  """Equal, not close, to round(float(x), 6) on float32 values of every size, and on ties (k / 128: x * 1e6 ends
  in .5 exactly), which go to the even neighbour."""
  rng = np.random.default_rng(3)
  values = np.concatenate([rng.normal(0, 1, 20000), rng.normal(0, 1e-5, 5000), rng.normal(0, 1e4, 5000),
                           np.arange(-2000, 2000) / 128]).astype(np.float32)
  assert fe.round6(values).tolist() == [round(float(x), 6) for x in values]  # float(x): the reference's
  assert fe.round6(np.float32([1 / 128, 3 / 128])).tolist() == [0.007812, 0.023438]


def test_read_examples(tmp_path):
  """Read with GFile, as google-research reads them: lines end at "\n" only and every "\r" is dropped (Python's
  text mode would split "u\rv" in two); stripped; the last " ||| " splits a pair."""
  path = tmp_path / "in.txt"
  path.write_bytes(" a ||| b \r\n\nx |||\na ||| b ||| c\nu\rv\n\t".encode())
  assert [(e.unique_id, e.text_a, e.text_b) for e in fe.read_examples(str(path))] == [
      (0, "a", "b"), (1, "", None), (2, "x |||", None), (3, "a ||| b", "c"), (4, "uv", None), (5, "", None)]

  path.write_bytes(b"fine\ncaf\xe9\n")
  with pytest.raises(ValueError, match=f"^--input_file={path}:2: not valid UTF-8 .*; re-encode the file as UTF-8"):
    fe.read_examples(str(path))


def test_layers_and_truncation():
  assert fe.parse_layers("-2,-1", 2) == [-2, -1]
  assert fe.parse_layers("1, 0,-1", 2) == [1, 0, -1]
  # The truncation convert_examples_to_features uses (common.features.truncate_lengths): the longer side first,
  # b on ties.
  assert truncate_lengths(5, 2, 4) == (2, 2)
  assert truncate_lengths(3, 3, 4) == (2, 2)


def _error(files, tmp_path, **changes):
  settings = dict(input_file=files["input"], output_file=str(tmp_path / "out" / "f.jsonl"),
                  vocab_file=files["vocab"], init_checkpoint=files["tf1"], layers="-1")
  settings.update(changes)
  with pytest.raises((ValueError, FileNotFoundError)) as e:
    fe.run(fe.FeatureExtractionConfig(**settings), say=lambda line: None)
  assert not os.path.exists(settings["output_file"])
  assert not (tmp_path / "out").exists() or os.listdir(tmp_path / "out") == []
  return str(e.value)


def test_errors(files, tmp_path):
  empty = tmp_path / "empty.txt"
  empty.write_text("")
  missing = str(tmp_path / "missing.txt")
  assert _error(files, tmp_path, input_file=missing) == f"--input_file={missing}: no such file"
  assert "is empty; write one example a line" in _error(files, tmp_path, input_file=str(empty))
  assert _error(files, tmp_path, layers="-3") == (
      "--layers=-3: -3 is out of range for a model of 2 layers (num_hidden_layers); use -2..-1 (from the last) "
      "or 0..1 (from the first)")
  assert "--layers=-1,x: give comma-separated layer indexes" in _error(files, tmp_path, layers="-1,x")
  assert "exceeds max_position_embeddings=130" in _error(files, tmp_path, max_seq_length=131)
  assert "must be at least 3" in _error(files, tmp_path, max_seq_length=2)
  assert "--init_checkpoint=" in _error(files, tmp_path, init_checkpoint=str(tmp_path / "nothing"),
                                        bert_config_file=os.path.join(os.path.dirname(files["tf1"]),
                                                                      "bert_config.json"))


def test_an_output_that_is_one_of_the_models_files_is_refused(files, tmp_path):
  """Issue 40 (1): the vocabulary and BERT config that --init_checkpoint brings (the flags' defaults) and its
  checkpoint files are inputs too; writing over one is refused before anything is read."""
  folder = os.path.dirname(files["tf1"])
  settings = dict(input_file=files["input"], vocab_file=None, init_checkpoint=files["tf1"], layers="-1")
  for name, flag in (("vocab.txt", "vocab_file"), ("bert_config.json", "bert_config_file"),
                     ("bert_model.ckpt.index", "init_checkpoint")):
    path = os.path.join(folder, name)
    with open(path, "rb") as f:
      before = f.read()
    with pytest.raises(ValueError) as e:
      fe.run(fe.FeatureExtractionConfig(output_file=path, **settings), say=lambda line: None)
    assert str(e.value) == (f"--output_file={path} is --{flag}'s {path}: writing it would destroy the input; give "
                            "another --output_file")
    with open(path, "rb") as f:
      assert f.read() == before


def test_vocab_file_defaults_to_the_one_beside_the_checkpoint(files, tmp_path):
  """Issue 30 (9): the vocab.txt that comes with --init_checkpoint (here beside google-research's prefix)."""
  settings = dict(input_file=files["input"], init_checkpoint=files["tf1"], layers="-1", max_seq_length=SEQ)
  for name, vocab in (("given", files["vocab"]), ("default", None)):
    fe.run(fe.FeatureExtractionConfig(output_file=str(tmp_path / f"{name}.jsonl"), vocab_file=vocab, **settings),
           say=lambda line: None)
  assert read_lines(tmp_path / "default.jsonl") == read_lines(tmp_path / "given.jsonl")
  pretrain = os.path.dirname(files["handoff"]["config"])
  assert _error(files, tmp_path, vocab_file=None, init_checkpoint=pretrain) == (
      f"--vocab_file is required: the pretrained model's vocab.txt (no vocab.txt in or beside --init_checkpoint="
      f"{pretrain})")


def test_script_error_exit(files, tmp_path):
  """A bad flag through the real entry point: one line on stderr, exit 1, no output (the default --layers
  asks for -3 and -4 of a 2-layer model)."""
  output = tmp_path / "f.jsonl"
  run = subprocess.run(
      [sys.executable, SCRIPT, f"--input_file={files['input']}", f"--output_file={output}",
       f"--vocab_file={files['vocab']}", f"--init_checkpoint={files['tf1']}"],
      text=True, capture_output=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
  assert run.returncode == 1
  assert run.stderr.strip().splitlines()[-1].startswith("error: --layers=-1,-2,-3,-4: -3 is out of range")
  assert os.listdir(tmp_path) == []


def test_script_refuses_a_vocabulary_without_cls_and_sep_in_one_line(files, tmp_path):
  """Issue 40 (6): was KeyError: '[CLS]' after the model had loaded."""
  with open(files["vocab"], encoding="utf-8") as f:
    tokens = [t.lower() if t in ("[CLS]", "[SEP]") else t for t in f.read().splitlines()]
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(tokens) + "\n", encoding="utf-8")
  run = subprocess.run(
      [sys.executable, SCRIPT, f"--input_file={files['input']}", f"--output_file={tmp_path / 'f.jsonl'}",
       f"--vocab_file={vocab}", f"--init_checkpoint={files['tf1']}", "--layers=-1"],
      text=True, capture_output=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
  assert (run.returncode, run.stderr.strip().splitlines()[-1]) == (
      1, f"error: --vocab_file={vocab}: has no [CLS] [SEP], which BERT needs; give the vocab.txt the model was "
         "trained with (every BERT vocabulary holds them)"), run.stderr[-3000:]
  assert "Traceback" not in run.stderr
  assert os.listdir(tmp_path) == ["vocab.txt"]  # nothing written
