"""bert_tf.training.finetuning: the encoder from every checkpoint form, prediction under strategies, step arithmetic."""

import dataclasses
import json
import os

import numpy as np
import pytest
import tensorflow as tf

import assets
import training_helpers as th
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints, convert
from bert_tf.model.encoder import BertEncoder
from bert_tf.training import finetuning


def _weights_equal(a, b):
  assert len(a.weights) == len(b.weights)
  for x, y in zip(a.weights, b.weights):
    np.testing.assert_array_equal(x.numpy(), y.numpy(), err_msg=x.path)


def test_init_encoder_reads_ours_google_research_and_hugging_face(tmp_path):
  config = th.tiny_bert_config()
  source = BertEncoder(config)
  checkpoints.export_encoder(source, config, str(tmp_path / "pretrain"))
  tf1_prefix = convert.save_tf1(convert.Converted(config, source), str(tmp_path / "tf1"))
  for path, kind in ((str(tmp_path / "pretrain"), "encoder_checkpoint"),
                     (str(tmp_path / "pretrain" / "encoder_savedmodel"), "variables"),
                     (tf1_prefix, "google-research"), (str(tmp_path / "tf1"), "google-research")):
    target = BertEncoder(config)
    assert kind in finetuning.init_encoder(target, path)
    _weights_equal(target, source)

  # A Hugging Face directory, converted in memory: the same weights as the converter's.
  hf_dir = os.path.dirname(assets.minilm_file("model/config.json"))
  assets.minilm_file("model/model.safetensors")
  expected = convert.load_hf(hf_dir).encoder
  target = BertEncoder(expected.config)
  assert "Hugging Face" in finetuning.init_encoder(target, hf_dir)
  _weights_equal(target, expected)
  assert finetuning.bert_config_for(None, hf_dir) == expected.config

  with pytest.raises(FileNotFoundError, match="--init_checkpoint"):
    finetuning.init_encoder(BertEncoder(config), str(tmp_path / "nothing"))
  with pytest.raises(ValueError, match="does not match"):
    finetuning.init_encoder(BertEncoder(th.tiny_bert_config().__class__.from_preset("tiny", vocab_size=50)),
                            str(tmp_path / "pretrain"))


def test_bert_config_for_prefers_the_flag_then_the_file_beside_the_checkpoint(tmp_path):
  config = th.tiny_bert_config()
  checkpoints.export_encoder(BertEncoder(config), config, str(tmp_path / "pretrain"))
  assert finetuning.bert_config_for(None, str(tmp_path / "pretrain" / "encoder_checkpoint")) == config
  other = tmp_path / "other.json"
  BertConfig.from_preset("mini").to_json_file(str(other))
  assert finetuning.bert_config_for(str(other), str(tmp_path / "pretrain")).hidden_size == 256
  with pytest.raises(ValueError) as caught:
    finetuning.bert_config_for(None, None)
  assert str(caught.value) == (
      "--init_checkpoint is required: the pretrained model to fine-tune (its bert_config.json comes with it), or a "
      "fine-tuned model's folder; or pass --bert_config_file to start from random weights")
  # --init_checkpoint is checked first, also when --bert_config_file gives the config (issue 30, 5).
  with pytest.raises(FileNotFoundError, match=f"^--init_checkpoint={tmp_path}/nothing does not exist"):
    finetuning.bert_config_for(str(other), str(tmp_path / "nothing"))
  os.makedirs(tmp_path / "weights_only" / "encoder_checkpoint")
  (tmp_path / "weights_only" / "encoder_checkpoint" / "x").write_text("")
  with pytest.raises(ValueError) as caught:
    finetuning.bert_config_for(None, str(tmp_path / "weights_only"))
  assert str(caught.value) == (
      "--bert_config_file is required: no bert_config.json (or Hugging Face config.json) in or beside "
      f"--init_checkpoint={tmp_path}/weights_only; pass the one the model was trained with")


def test_vocab_file_defaults_to_the_one_that_comes_with_init_checkpoint(tmp_path, caplog):
  import logging

  config = th.tiny_bert_config()
  checkpoints.export_encoder(BertEncoder(config), config, str(tmp_path / "pretrain"))
  init = str(tmp_path / "pretrain")
  with pytest.raises(ValueError) as caught:
    finetuning.vocab_file_for(None, init)
  assert str(caught.value) == ("--vocab_file is required: the pretrained model's vocab.txt (no vocab.txt in or "
                               f"beside --init_checkpoint={init})")
  with pytest.raises(ValueError) as caught:
    finetuning.vocab_file_for(None, None)
  assert str(caught.value) == "--vocab_file is required: the pretrained model's vocab.txt"
  vocab = th.write_vocab(tmp_path / "pretrain")
  with caplog.at_level(logging.INFO, logger="absl"):
    assert finetuning.vocab_file_for(None, init) == vocab
  assert f"--vocab_file: using {vocab} (from --init_checkpoint)" in caplog.messages
  assert finetuning.vocab_file_for("mine/vocab.txt", init) == "mine/vocab.txt"  # given: as it is (checked later)


def test_train_steps_follow_google_research_and_validation_names_flags():
  config = finetuning.FinetuningConfig(output_dir="x", bert_config=th.tiny_bert_config(), train_batch_size=32,
                                       num_train_epochs=3, warmup_proportion=0.1)
  assert config.train_steps(3668) == (343, 34)  # int(3668 / 32 * 3), int(343 * 0.1): MRPC
  assert config.train_steps(5) == (1, 0)
  for field, value, flag in (("learning_rate", 0.0, "--learning_rate"), ("num_train_epochs", 0, "--num_train_epochs"),
                             ("dtype", "float64", "--dtype"), ("eval_batch_size", 0, "--eval_batch_size"),
                             ("distribution_strategy", "gpu", "--distribution_strategy"),
                             ("eval_every_steps", -1, "--eval_every_steps=-1: must be >= 0"),
                             ("keep_best_checkpoint", True, "--keep_best_checkpoint needs .* --eval_every_steps"),
                             ("early_stopping_patience", 2, "--early_stopping_patience needs")):
    bad = finetuning.FinetuningConfig(output_dir="x", bert_config=th.tiny_bert_config(), **{field: value})
    with pytest.raises(ValueError, match=flag):
      bad.validate()
  evaluating = finetuning.FinetuningConfig(output_dir="x", bert_config=th.tiny_bert_config(), eval_every_steps=5,
                                           metric_for_best="f2")
  evaluating.validate()
  with pytest.raises(ValueError, match="pass --do_train and --do_eval"):
    evaluating.check_evaluation(True, False, ("f1",))
  with pytest.raises(ValueError, match="--metric_for_best=f2: this task reports f1, accuracy"):
    evaluating.check_evaluation(True, True, ("f1", "accuracy"))


_PREDICT = """
import json, sys
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import training_helpers as th
from bert_tf.tasks.classification import classifier as classification
from bert_tf.training import distribute, finetuning
rng = np.random.default_rng(0)
n, t = 11, 9
mask = (np.arange(t)[None] < rng.integers(2, t + 1, [n, 1])).astype(np.int32)
features = {"input_ids": rng.integers(5, th.VOCAB, [n, t]).astype(np.int32) * mask, "input_mask": mask,
            "segment_ids": np.zeros([n, t], np.int32), "is_real_example": np.ones([n], np.int32),
            "label_ids": rng.integers(0, 3, [n]).astype(np.int32)}
task = classification.ClassificationTask(th.tiny_bert_config(), 3, None, t)
out = {}
for name in ("one_device", "mirrored"):
  strategy = distribute.get_strategy(name)
  with strategy.scope():
    tf.keras.utils.set_random_seed(3)
    model = classification.BertClassifier(th.tiny_bert_config(), 3)
    model(features)
  batch = finetuning.eval_batch_size_for(3, strategy)
  def pad(b):
    k = batch - tf.shape(b["input_ids"])[0]
    return {key: tf.pad(v, [[0, k]] + [[0, 0]] * (v.shape.rank - 1)) for key, v in b.items()}
  dataset = tf.data.Dataset.from_tensor_slices(features).batch(batch).map(pad)
  def with_loss(f, training=False):  # the evaluation loss summed in the same pass (padding rows weigh 0)
    logits = model(f, training=training)
    return logits, finetuning.loss_sums(task, f, logits)
  outputs, sums = finetuning.predict(with_loss, dataset, strategy, with_sums=True)
  out[name] = {"replicas": strategy.num_replicas_in_sync, "batch": batch,
               "outputs": finetuning.predict(model, dataset, strategy).tolist(),
               "direct": model(features).numpy().tolist(), "with_sums": outputs.tolist(), "sums": sums,
               "labels": features["label_ids"].tolist(),
               "loss": finetuning.mean_loss(task, sums),
               "host_loss": finetuning.eval_loss(task, {k: features[k] for k in ("label_ids", "is_real_example")},
                                                 outputs, chunk=4)}
json.dump(out, open(sys.argv[1], "w"))
"""


@pytest.mark.slow
def test_prediction_on_two_replicas_keeps_order_and_drops_padding(tmp_path):
  result = th.run_python(["-c", _PREDICT, str(tmp_path / "out.json")])
  assert result.returncode == 0, result.stderr[-3000:]
  out = json.loads((tmp_path / "out.json").read_text())
  assert (out["one_device"]["replicas"], out["mirrored"]["replicas"]) == (1, 2)
  assert out["mirrored"]["batch"] == 4  # 3 rounded up to a multiple of 2 replicas
  for name in ("one_device", "mirrored"):
    np.testing.assert_allclose(out[name]["outputs"], out[name]["direct"], atol=1e-5)
    assert np.asarray(out[name]["outputs"]).shape == (11, 3) and out[name]["with_sums"] == out[name]["outputs"]
    # The evaluation loss: the mean cross-entropy over the 11 real examples, whatever the batches, replicas and
    # padding rows; summed in the prediction pass (with_sums) or on the host in chunks (eval_loss), alike.
    logits = np.asarray(out[name]["direct"], np.float64)
    labels = out[name]["labels"]
    expected = -np.mean((logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))[np.arange(11), labels])
    assert out[name]["sums"]["normalizers"] == {"examples": 11.0}
    assert out[name]["loss"] == pytest.approx(expected, abs=1e-5)
    assert out[name]["host_loss"] == pytest.approx(expected, abs=1e-5)


def test_encoder_savedmodel_runs_in_a_session_loader_like_tf_serving(tmp_path):
  """`saved_model_cli run` restores variables the way TF Serving does (a Session and the checkpoint's restore
  op); Keras 3 variables exported through the model would be left uninitialised (keras-team/keras#20095)."""
  import subprocess
  import sys

  config = th.tiny_bert_config()
  encoder = BertEncoder(config)
  checkpoints.export_encoder(encoder, config, str(tmp_path))
  features = {"input_ids": np.array([[2, 7, 9, 3]], np.int32), "input_mask": np.ones([1, 4], np.int32),
              "segment_ids": np.zeros([1, 4], np.int32)}
  for name, value in features.items():
    np.save(tmp_path / f"{name}.npy", value)
  inputs = ";".join(f"{name}={tmp_path / name}.npy" for name in features)
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  done = subprocess.run([cli, "run", "--dir", str(tmp_path / "encoder_savedmodel"), "--tag_set", "serve",
                         "--signature_def", "serving_default", "--inputs", inputs, "--outdir",
                         str(tmp_path / "cli_out")], capture_output=True, text=True, env=th.python_env())
  assert done.returncode == 0, done.stderr[-2000:]
  pooled = np.load(tmp_path / "cli_out" / "pooled_output.npy")
  np.testing.assert_allclose(pooled, encoder(features)["pooled_output"].numpy(), atol=1e-5)


def _checkpoint_values(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.endswith("VARIABLE_VALUE") and not name.startswith(("iterator", "save_counter"))}


@pytest.mark.slow
def test_run_classifier_resumes_a_stopped_and_a_killed_run_from_a_relative_output_dir(tmp_path):
  """As a user runs it: relative paths from the run's own directory; Ctrl-C at step 3, then SIGKILL at step 5,
  then the same command to the end, against an uninterrupted run."""
  import concurrent.futures
  import signal
  import subprocess
  import sys

  from test_classification_run import TOKENS, write_mrpc

  (tmp_path / "vocab.txt").write_text("\n".join(TOKENS) + "\n")
  config = BertConfig.from_preset("tiny", vocab_size=len(TOKENS), hidden_size=18, num_attention_heads=3,
                                  intermediate_size=37, num_hidden_layers=1, max_position_embeddings=40,
                                  hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
  checkpoints.export_encoder(BertEncoder(config), config, str(tmp_path / "pretrained"))
  write_mrpc(tmp_path / "MRPC", sizes=(29, 5, 3))
  flags = ["--task_name=MRPC", "--data_dir=MRPC", "--vocab_file=vocab.txt", "--init_checkpoint=pretrained",
           "--do_train", "--max_seq_length=21", "--train_batch_size=4", "--num_train_epochs=1",
           "--save_checkpoints_steps=2", "--steps_per_loop=1", "--distribution_strategy=one_device",
           "--deterministic", "--features_dir=features"]
  script = os.path.join(th.REPO, "scripts", "run_classifier.py")
  helper = os.path.join(th.REPO, "tests", "interrupted_run.py")

  def run(args, out, **env):
    return subprocess.run([sys.executable, *args, *flags, f"--output_dir={out}"], cwd=tmp_path, timeout=300,
                          env=th.python_env(INTERRUPT_SCRIPT="run_classifier.py", **env), capture_output=True,
                          text=True)

  # The uninterrupted run needs nothing of the interrupted ones: it runs beside them, on the second core.
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    uninterrupted = pool.submit(run, [script], "whole")
    stopped = run([helper], "out", INTERRUPT_AT_STEP=3, INTERRUPT_SIGNAL="INT")
    killed = run([helper], "out", INTERRUPT_AT_STEP=5, INTERRUPT_SIGNAL="KILL")
    resumed = run([script], "out")
    whole = uninterrupted.result()
  assert whole.returncode == 0, whole.stderr[-3000:]
  assert stopped.returncode == 130, stopped.stderr[-3000:]
  assert f"stopped at step 3 on request; saved {tmp_path / 'out' / 'checkpoints' / 'ckpt-3'}" in stopped.stderr
  assert "Traceback" not in stopped.stderr
  assert killed.returncode == -signal.SIGKILL
  assert "resuming at step 3" in killed.stderr, killed.stderr[-3000:]
  assert resumed.returncode == 0, resumed.stderr[-3000:]
  assert "resuming at step 4" in resumed.stderr and "taking over the lock" in resumed.stderr
  steps = 29 // 4  # google-research's int(examples / batch * epochs)
  a = _checkpoint_values(str(tmp_path / "whole" / "checkpoints" / f"ckpt-{steps}"))
  b = _checkpoint_values(str(tmp_path / "out" / "checkpoints" / f"ckpt-{steps}"))
  assert a.keys() == b.keys() and len(a) > 10
  for name in a:
    np.testing.assert_array_equal(b[name], a[name], err_msg=name)
  assert sorted(os.listdir(tmp_path / "out")) == sorted(os.listdir(tmp_path / "whole"))  # no lock, no temporaries


def test_prediction_shows_progress_from_the_first_batch(caplog):
  import logging

  import keras

  dense = keras.layers.Dense(2)

  def model(batch, training=False):
    del training
    return dense(batch["x"])
  data = tf.data.Dataset.from_tensor_slices({"x": tf.ones([7, 3]), "is_real_example": tf.constant([1] * 6 + [0])})
  with caplog.at_level(logging.INFO, logger="absl"):  # absl's logger: other tests may have raised its level
    outputs = finetuning.predict(model, data.batch(2), tf.distribute.OneDeviceStrategy("/cpu:0"),
                                 description="MRPC dev", progress_seconds=0.0)
  assert outputs.shape == (6, 2)
  lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("MRPC dev: batch ")]
  assert [line.split("  ")[0] for line in lines] == [f"MRPC dev: batch {i}/4" for i in (1, 2, 3, 4)]
  assert lines[1].split("  ")[1] == "4 examples" and "examples/s  ETA " in lines[1]
  assert lines[3].split("  ")[1] == "6 examples" and "ETA" not in lines[3]  # the padded example not counted
  done = [r.getMessage() for r in caplog.records if r.getMessage().startswith("MRPC dev: done")]
  assert len(done) == 1 and done[0].startswith("MRPC dev: done, 6 examples in ") and done[0].endswith(" examples/s)")


def test_a_resumed_run_reports_the_rate_of_the_steps_it_ran():
  from bert_tf.training import trainer

  # 84 steps, the last 53 run by this process in 61.2 s, 8.2 s of which evaluating while training.
  result = trainer.TrainResult(step=84, metrics={}, interrupted=False, steps_run=53, eval_seconds=8.2)
  seconds = finetuning.training_seconds(result, 61.2)
  assert seconds == pytest.approx(53.0)
  assert finetuning.examples_per_second(result, seconds, 32) == pytest.approx(32.0)
  assert finetuning.training_line(result, seconds, 32, "windows") == \
      "trained 84 steps (53 in this process, resumed at step 31) in 53.0 s (32.0 windows/s)"
  fresh = trainer.TrainResult(step=7, metrics={}, interrupted=False, steps_run=7)
  assert finetuning.training_line(fresh, 3.5, 2) == "trained 7 steps in 3.5 s (4.0 examples/s)"


def test_prediction_from_files_shows_the_total_and_eta_from_the_number_of_examples(caplog):
  import logging

  def model(batch, training=False):
    del training
    return batch["x"]
  # A filter makes the cardinality unknown, as for TFRecord files.
  data = tf.data.Dataset.from_tensor_slices({"x": tf.ones([7, 3]), "is_real_example": tf.ones([7], tf.int32)})
  data = data.filter(lambda example: True).batch(2)
  assert data.cardinality() == tf.data.UNKNOWN_CARDINALITY
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  with caplog.at_level(logging.INFO, logger="absl"):
    finetuning.predict(model, data, strategy, description="known", progress_seconds=0.0, num_examples=7)
    finetuning.predict(model, data, strategy, description="unknown", progress_seconds=0.0)
  lines = [r.getMessage() for r in caplog.records if ": batch " in r.getMessage()]
  assert [line.split("  ")[0] for line in lines] == [f"known: batch {i}/4" for i in (1, 2, 3, 4)] + [
      f"unknown: batch {i}" for i in (1, 2, 3, 4)]
  assert "ETA " in lines[1] and "ETA" not in lines[5]


@pytest.mark.parametrize("output_dir, expected", [("out/mrpc", "out/features"), ("out/mrpc/", "out/features"),
                                                  ("mrpc", "features"), ("/runs/a/squad", "/runs/a/features"),
                                                  ("gs://bucket/runs/mrpc", "gs://bucket/runs/features"),
                                                  ("gs://bucket", "gs://bucket/features")])
def test_feature_caches_default_to_features_beside_the_output_dir(output_dir, expected):
  assert finetuning.default_features_dir(output_dir) == expected


def test_every_task_config_caches_beside_its_output_dir_unless_told():
  from bert_tf.tasks.classification import run as classification_run
  from bert_tf.tasks.ner import run as ner_run
  from bert_tf.tasks.squad import run as squad_run
  from bert_tf.tasks.swag import run as swag_run

  ft = finetuning.FinetuningConfig(output_dir="out/task", bert_config=th.tiny_bert_config())
  for cls in (classification_run.ClassifierConfig, squad_run.SquadConfig, ner_run.NerConfig, swag_run.SwagConfig):
    required = {name: "x" for name, field in cls.__dataclass_fields__.items()
                if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING}
    assert cls(**{**required, "finetuning": ft}).features_dir == "out/features", cls
    assert cls(**{**required, "finetuning": ft, "features_dir": "cache"}).features_dir == "cache", cls


def test_prediction_traces_a_model_once_across_calls_and_batch_lengths():
  import keras

  dense = keras.layers.Dense(2)
  dense.build([None, None, 3])  # as a task's model is before predicting (a first trace that builds is traced twice)
  traces = []

  def model(batch, training=False):
    del training
    traces.append(batch["x"].shape.as_list())  # Python runs only while tracing
    return tf.reduce_sum(dense(batch["x"]), axis=1)  # [B, T, 3] -> [B, 2]

  def padded(lengths, batch_size):  # dynamic padding: each batch as long as its longest example
    x = np.stack([np.pad(np.full([n, 3], n + 1.0, np.float32), [[0, 6 - n], [0, 0]]) for n in lengths])
    data = tf.data.Dataset.from_tensor_slices({"x": x, "length": lengths, "is_real_example": np.ones_like(lengths)})
    return data.batch(batch_size).map(lambda b: {**b, "x": b["x"][:, :tf.reduce_max(b["length"])]}), x

  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  dataset, x = padded(np.array([1, 2, 5, 3, 6, 2, 4]), 3)
  first = finetuning.predict(model, dataset, strategy)
  dataset, shorter = padded(np.array([2, 1, 3, 1, 1]), 2)
  second = finetuning.predict(model, dataset, strategy)
  assert traces == [[None, None, 3]]  # one trace: the batch size and length unknown
  np.testing.assert_allclose(first, np.sum(dense(x).numpy(), axis=1), rtol=1e-6)
  np.testing.assert_allclose(second, np.sum(dense(shorter).numpy(), axis=1), rtol=1e-6)

  def other(batch, training=False):  # another model is not run with the first one's step
    del training
    traces.append("other")
    return -tf.reduce_sum(dense(batch["x"]), axis=1)
  np.testing.assert_allclose(finetuning.predict(other, padded(np.array([1, 2, 5, 3, 6, 2, 4]), 3)[0], strategy),
                             -first, rtol=1e-6)
  assert traces == [[None, None, 3], "other"]
