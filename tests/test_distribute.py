"""Strategies: two mirrored replicas train like one device; two workers on 127.0.0.1 stay in lockstep and only
the chief keeps checkpoints; TPU selection fails with a message saying what to do."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import training_helpers as th
from bert_tf.training import distribute


def _npz(path):
  with np.load(path) as f:
    return [f[k] for k in sorted(f.files, key=lambda k: int(k.split("_")[1]))]


@pytest.mark.slow
def test_two_mirrored_replicas_match_one_device_and_tpu_is_refused(tmp_path):
  out = tmp_path / "results.json"
  # Logical CPU devices must be configured before TensorFlow initialises its devices: a fresh process.
  # mirrored:2 = two replicas, each accumulating 2 micro-batches: both ways of splitting the batch at once.
  # --all_reduce_alg: hierarchical_copy and ring (TensorFlow's collective ops) on the same two replicas.
  algs = ["mirrored:1:hierarchical_copy", "mirrored:1:ring"]
  result = th.run_python([os.path.join("tests", "distributed_run.py"), str(out), str(tmp_path), "one_device:1",
                          "mirrored:2", *algs, "tpu:1"], LOGICAL_CPUS=2, STEPS=4)
  assert result.returncode == 0, result.stderr[-3000:]
  runs = json.loads(out.read_text())
  one = runs["one_device:1"]
  assert one["error"] is None and one["replicas"] == 1 and len(one["losses"]) == 4, one
  for case in ["mirrored:2", *algs]:
    two = runs[case]
    assert two["error"] is None, (case, two["error"])
    assert two["replicas"] == 2, case
    # Same global batch of 8: all 8 on one device, or 4 (2 + 2 twice with accumulation) on each of two replicas.
    assert two["losses"] == pytest.approx(one["losses"], abs=1e-5), case
    for a, b in zip(_npz(two["weights"]), _npz(one["weights"])):
      np.testing.assert_allclose(a, b, atol=1e-6, err_msg=case)
  assert "no TPU could be reached" in runs["tpu:1"]["error"]
  assert "--distribution_strategy=one_device, mirrored or multi_worker_mirrored" in runs["tpu:1"]["error"]


# Weights whose gradient is exactly 0 in exact arithmetic: the output bias of SQuAD's start and end logits and of
# SWAG's choice scores (a softmax over positions or choices ignores a constant added to all). What is summed is
# rounding noise (~1e-9) whose value depends on how the batch is split, and Adam (epsilon 1e-6) turns it into steps
# of up to lr * noise / epsilon: 1.4e-6 here (lr 1e-3), bound 1e-5. Every other weight agrees within 1e-6.
ZERO_GRADIENT = ("span_output/bias", "choice_score/bias")  # the ends of their paths
ZERO_GRADIENT_ATOL = 1e-5


@pytest.mark.slow
@pytest.mark.parametrize("task", ["classifier", "squad", "ner", "swag", "ner_feature_based"])
def test_every_fine_tuning_task_trains_alike_on_1_2_and_4_replicas(task, task_runs):
  # The same global batch of 8 on one device, or 4 / 2 per replica on 2 / 4 logical CPU devices, with the
  # --all_reduce_alg choices spread over the tasks (conftest.TASK_RUN_CASES); 3 steps from the same seed.
  from test_accelerator_checks import HOST_OPS

  one = task_runs[f"{task}:1"]
  assert one["error"] is None, one["error"]
  cases = [case for case in task_runs if case.split(":")[:1] == [task] and case.split(":")[1] in ("2", "4")
           and "jit" not in case]
  assert sorted(case.split(":")[1] for case in cases) == ["2", "4"]
  for case in cases:
    run = task_runs[case]
    assert run["error"] is None, (case, run["error"])
    assert run["replicas"] == int(case.split(":")[1]) and len(run["losses"]) == 3, case
    assert run["losses"] == pytest.approx(one["losses"], abs=1e-5), case
    assert len(run["weight_names"]) == len(one["weight_names"])  # in the same order (the names number models)
    for name, a, b in zip(run["weight_names"], _npz(run["weights"]), _npz(one["weights"])):
      np.testing.assert_allclose(a, b, atol=ZERO_GRADIENT_ATOL if name.endswith(ZERO_GRADIENT) else 1e-6,
                                 err_msg=case)
    # The step's ops with their all-reduces and the split of the batch among replicas: GPU kernels but HOST_OPS.
    assert set(run["findings"]) <= set(HOST_OPS), (case, run["findings"])


@pytest.mark.slow
def test_two_workers_train_in_lockstep_and_only_the_chief_keeps_checkpoints(tmp_path):
  data = th.write_records(tmp_path / "data", num_files=4)
  ports = th.free_ports(2)
  cluster = {"worker": [f"127.0.0.1:{p}" for p in ports]}
  workers = []
  for index in range(2):
    env = th.python_env(TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}}),
                        DATA=data, STEPS=3)
    workers.append(subprocess.Popen(
        [sys.executable, os.path.join("tests", "distributed_run.py"), str(tmp_path / f"w{index}.json"),
         str(tmp_path), "multi_worker_mirrored:1"], cwd=th.REPO, env=env, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True))
  outputs = []
  for w in workers:
    try:
      outputs.append(w.communicate(timeout=200)[0])
    finally:
      w.kill()
  assert [w.returncode for w in workers] == [0, 0], outputs[0][-2000:] + outputs[1][-2000:]
  runs = [json.loads((tmp_path / f"w{i}.json").read_text())["multi_worker_mirrored:1"] for i in range(2)]
  assert [r["error"] for r in runs] == [None, None], runs
  assert [r["chief"] for r in runs] == [True, False] and runs[0]["replicas"] == 2
  assert len(runs[0]["losses"]) == 3 and runs[0]["losses"] == runs[1]["losses"]
  for a, b in zip(_npz(runs[0]["weights"]), _npz(runs[1]["weights"])):
    np.testing.assert_array_equal(a, b)

  out = tmp_path / "multi_worker_mirrored-1"
  checkpoints = sorted(os.listdir(out / "checkpoints"))
  # The chief's model checkpoints; each worker's own input position; no leftover of worker 1's temporary save.
  assert checkpoints == ["checkpoint", "ckpt-2.data-00000-of-00001", "ckpt-2.index", "ckpt-3.data-00000-of-00001",
                         "ckpt-3.index", "input_pipeline-0", "input_pipeline-1"], checkpoints
  assert len(os.listdir(out / "train")) == 1  # one TensorBoard writer: the chief's


def test_strategy_selection_errors_say_what_to_change(monkeypatch):
  with pytest.raises(ValueError, match="choose one of"):
    distribute.get_strategy("parameter_server")
  with pytest.raises(ValueError, match="--tpu_name"):
    distribute.get_strategy("tpu")
  with pytest.raises(ValueError, match=r"--num_gpus=4 but TensorFlow sees 0 GPU\(s\): "):
    distribute.get_strategy("mirrored", num_gpus=4)
  with pytest.raises(ValueError, match=r"--all_reduce_alg=nccl needs GPUs"):
    distribute.get_strategy("mirrored", all_reduce_alg="nccl")
  with pytest.raises(ValueError, match=r"--all_reduce_alg is for --distribution_strategy=mirrored, not one_device$"):
    distribute.get_strategy("one_device", all_reduce_alg="ring")
  with pytest.raises(ValueError, match=r"--collective_implementation is for .*multi_worker_mirrored \(use "
                     r"--all_reduce_alg\)"):
    distribute.get_strategy("mirrored", collective_implementation="nccl")
  monkeypatch.delenv("TF_CONFIG", raising=False)
  with pytest.raises(ValueError, match="TF_CONFIG"):
    distribute.get_strategy("multi_worker_mirrored")
  one = distribute.get_strategy("one_device")
  assert distribute.is_chief(one) and distribute.worker_index(one) == 0 and distribute.num_workers(one) == 1


SECRET = "s3cr3t-T0KEN"  # Stands for a credential inside TF_CONFIG: no message may repeat it.
GOOD_TASK = {"type": "worker", "index": 0}


@pytest.mark.parametrize("config,expected", [
    ('{"cluster": {"worker": ["h:1?token=%s"]}, "task": ' % SECRET, "TF_CONFIG is not JSON (Expecting value at "
     "character 60 of 60)"),
    (json.dumps([SECRET]), "TF_CONFIG is JSON but not an object (list)"),
    (json.dumps({"task": GOOD_TASK, "password": SECRET}), 'TF_CONFIG has no "cluster" key'),
    (json.dumps({"cluster": {"worker": [f"{SECRET}:1"]}}), 'TF_CONFIG has no "task" key'),
    (json.dumps({"cluster": {"worker": f"{SECRET}:1"}, "task": GOOD_TASK}),
     'TF_CONFIG "cluster": the task type \'worker\' must be a list of "host:port" strings'),
    (json.dumps({"cluster": {"worker": [f"{SECRET}:1"]}, "task": {"type": "worker"}}),
     'TF_CONFIG "task" has no "index" key'),
    (json.dumps({"cluster": {"worker": [f"{SECRET}:1"], SECRET: []}, "task": {"type": SECRET + "x", "index": 0}}),
     'TF_CONFIG "task": its "type" (a name other than chief, worker, ps, evaluator) is not a task type of '
     '"cluster" (which has \'worker\', 1 other name(s))'),
    (json.dumps({"cluster": {"worker": [f"{SECRET}:1", "h:2"]}, "task": {"type": "worker", "index": 2}}),
     'TF_CONFIG "task": its "index" 2 is out of range: "cluster" has 2 task(s) of type \'worker\', indices 0 to 1'),
])
def test_bad_tf_config_is_named_without_repeating_it(monkeypatch, config, expected):
  monkeypatch.setenv("TF_CONFIG", config)
  with pytest.raises(ValueError) as raised:
    distribute.get_strategy("multi_worker_mirrored")
  assert str(raised.value).startswith(expected)
  assert SECRET not in str(raised.value) and "h:2" not in str(raised.value)


def test_good_tf_config_passes_the_check():
  config = {"cluster": {"chief": ["h:0"], "worker": ["h:1", "h:2"]}, "task": {"type": "worker", "index": 1}}
  assert distribute.check_tf_config(json.dumps(config)) == config


def test_the_default_uses_the_cpu_where_tensorflow_sees_no_gpu_and_says_so(caplog):
  # No GPU on the test machines: the default (num_gpus=None) is the CPU, as --num_gpus=0 is; the log names it.
  with caplog.at_level("INFO", logger="absl"):
    default, cpu = distribute.get_strategy("mirrored"), distribute.get_strategy("mirrored", num_gpus=0)
  assert default.extended.worker_devices == cpu.extended.worker_devices
  assert distribute.describe(default) == "strategy MirroredStrategy: 1 replica(s) on /cpu:0 (1 worker(s))"
  assert distribute.describe(default) in caplog.text
  one = distribute.get_strategy("one_device")
  assert distribute.describe(one) == "strategy OneDeviceStrategy: 1 replica(s) on /cpu:0 (1 worker(s))"


@pytest.mark.parametrize("setting,reason", [
    # What a user of this TensorFlow (a CUDA build, as PyPI's tensorflow 2.20 for Linux x86_64) on a machine
    # without an NVIDIA driver is told, with and without CUDA_VISIBLE_DEVICES hiding the GPUs.
    (None, "this machine has no NVIDIA GPU driver loaded (/proc/driver/nvidia/gpus is empty); run on a GPU "
           "machine, or pass --num_gpus=0 for the CPU"),
    ("-1", "CUDA_VISIBLE_DEVICES='-1' hides every GPU; unset it or name the GPUs (CUDA_VISIBLE_DEVICES=0,1)"),
    ("", "CUDA_VISIBLE_DEVICES='' hides every GPU; unset it or name the GPUs (CUDA_VISIBLE_DEVICES=0,1)"),
])
def test_gpus_asked_for_but_not_seen_are_refused_with_the_reason(monkeypatch, setting, reason):
  import tensorflow as tf

  if not tf.test.is_built_with_gpu_support() or distribute.nvidia_gpus_on_machine():
    pytest.skip("written for a CUDA build of TensorFlow on a machine without NVIDIA GPUs")
  if setting is None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
  else:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", setting)
  assert distribute.gpu_unavailable_reason() == reason
  with pytest.raises(ValueError) as e:
    distribute.get_strategy("one_device", num_gpus=1)
  assert str(e.value) == f"--num_gpus=1 but TensorFlow sees 0 GPU(s): {reason}"


def test_a_cpu_only_tensorflow_is_named_with_the_install_line(monkeypatch):
  import tensorflow as tf

  # The CPU-only build (tensorflow-cpu, or a macOS wheel) reports no GPU support; this machine's may not be one.
  monkeypatch.setattr(tf.test, "is_built_with_gpu_support", lambda: False)
  assert distribute.gpu_unavailable_reason() == (
      f"this TensorFlow ({tf.__version__}) is a CPU-only build; install the GPU one: pip install '.[gpu]' "
      "(TensorFlow with its CUDA libraries: tensorflow[and-cuda]==2.20.0)")
