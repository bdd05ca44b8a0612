"""tests/runtime_packages.py and tests/runtime_site/sitecustomize.py: the processes that tests start see the packages
of a user's install, no development-only one, unless they run a reference or a peer; pytest's own see everything."""

import os
import subprocess
import sys

import runtime_packages
import training_helpers as th
from runtime_site import sitecustomize  # this process is pytest's: it hides nothing


def test_bert_tfs_dependencies_are_kept_and_the_references_and_peers_hidden():
  runtime = runtime_packages.runtime_distributions()
  assert {"bert-tf", "tensorflow", "tensorflow-text", "keras", "keras-hub", "absl-py", "google-cloud-storage",
          "tensorflow-serving-api", "huggingface-hub", "numpy", "protobuf", "apache-beam"} <= runtime
  assert not {"scikit-learn", "matplotlib", "pandas", "torch", "transformers", "tf-models-official", "seqeval",
              "bert-tensorflow", "pytest"} & runtime
  hidden = set(runtime_packages.hidden_modules())
  # Keras imports the first two whenever they are installed; the rest are the tests' references and peers.
  assert {"sklearn", "matplotlib", "pandas", "scipy", "torch", "transformers", "official", "tf_keras", "seqeval",
          "bert", "pytest"} <= hidden
  # `google` is a namespace package that google-cloud-storage (runtime) shares with development packages.
  assert not {"tensorflow", "tensorflow_text", "keras", "keras_hub", "absl", "numpy", "google", "apache_beam",
              "tensorflow_serving", "huggingface_hub", "bert_tf"} & hidden


def test_only_the_repositorys_scripts_and_bert_tf_commands_are_user_commands():
  assert sitecustomize.is_user_command(os.path.join(th.REPO, "scripts", "run_classifier.py"))
  assert sitecustomize.is_user_command(os.path.join(sys.prefix, "bin", "bert-tf-run-classifier"))
  assert sitecustomize.is_user_command(os.path.join(th.REPO, "tests", "interrupted_run.py"))
  for other in (os.path.join(th.REPO, "tests", "task_runs.py"), os.path.join(th.REPO, "bench", "accelerator_check.py"),
                "-c", "-m", ""):
    assert not sitecustomize.is_user_command(other), other


def test_a_process_started_by_a_test_cannot_import_a_hidden_module_unless_it_runs_a_reference():
  # absl, which every script imports first, hidden for this test: the script stops at its first import.
  script = [sys.executable, os.path.join("scripts", "predict.py"), "--print_request", "--sentence1=a"]
  hidden = {runtime_packages.HIDDEN_ENV: "absl,sklearn"}
  stopped = subprocess.run(script, cwd=th.REPO, env=th.python_env(**hidden), capture_output=True, text=True,
                           timeout=60)
  assert stopped.returncode == 1 and "ModuleNotFoundError: No module named 'absl'" in stopped.stderr, stopped.stderr
  ran = subprocess.run(script, cwd=th.REPO, env=th.python_env(), capture_output=True, text=True, timeout=60)
  assert ran.returncode == 0 and '"sentence1": "a"' in ran.stdout, ran.stderr
  # A script sees a user's packages even in an environment that lets other processes see every package.
  stopped = subprocess.run(script, cwd=th.REPO, env=th.python_env(dev_packages=True, **hidden), capture_output=True,
                           text=True, timeout=60)
  assert stopped.returncode == 1 and "No module named 'absl'" in stopped.stderr, stopped.stderr
  # Any other process: hidden from python_env's, seen by a reference's (dev_packages=True).
  probe = [sys.executable, "-c", "import absl, sklearn"]
  other = subprocess.run(probe, cwd=th.REPO, env=th.python_env(**hidden), capture_output=True, text=True, timeout=60)
  assert other.returncode == 1 and "No module named 'absl'" in other.stderr, other.stderr
  other = subprocess.run(probe, cwd=th.REPO, env=th.python_env(dev_packages=True, **hidden), capture_output=True,
                         text=True, timeout=60)
  assert other.returncode == 0, other.stderr


def test_a_hidden_package_looks_uninstalled_to_imports_probes_and_metadata():
  code = """
import importlib.metadata, importlib.util, sys
import sitecustomize
sitecustomize.hide(["sklearn"])
sitecustomize.hide(["pytest"])  # a second call adds to the first
assert importlib.util.find_spec("sklearn") is None and importlib.util.find_spec("pytest") is None
assert importlib.util.find_spec("numpy") is not None
try:
  import sklearn.metrics
except ModuleNotFoundError as e:
  assert e.name == "sklearn", e
else:
  raise AssertionError("sklearn imported")
try:
  importlib.metadata.distribution("scikit-learn")
except importlib.metadata.PackageNotFoundError:
  pass
else:
  raise AssertionError("scikit-learn's metadata found")
assert importlib.metadata.distribution("numpy").version
print("hidden")
"""
  done = subprocess.run([sys.executable, "-c", code], cwd=th.REPO, env=th.python_env(dev_packages=True),
                        capture_output=True, text=True, timeout=60)
  assert done.returncode == 0 and done.stdout.strip() == "hidden", done.stderr
