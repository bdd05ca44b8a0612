"""pyproject.toml: a command per script (bert_tf/console.py), the runtime dependencies (ranges admitting
requirements.txt's pins), every package; and one real `pip install --no-deps --target` of the checkout."""

import importlib.metadata
import os
import subprocess
import sys
import tomllib

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from bert_tf import console, registry

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
with open(os.path.join(REPO, "pyproject.toml"), "rb") as f:
  PROJECT = tomllib.load(f)
SCRIPTS = sorted(name[:-3] for name in os.listdir(os.path.join(REPO, "scripts")) if name.endswith(".py"))


def test_every_script_has_a_command_that_resolves_to_a_function_running_that_script():
  commands = PROJECT["project"]["scripts"]
  assert sorted(console.SCRIPTS) == SCRIPTS
  # The tasks' scripts are the registry's (bert_tf/registry.py), the rest general; pyproject.toml lists both.
  tasks = registry.tasks()
  assert len(tasks) >= 4 and all(f"run_{task.name}" in SCRIPTS and f"export_{task.name}" in SCRIPTS for task in tasks)
  assert sorted(console.GENERAL_SCRIPTS + tuple(s for task in tasks for s in task.scripts())) == SCRIPTS
  assert commands == {console.command_name(s): f"bert_tf.console:{s}" for s in SCRIPTS}
  assert console.command_name("run_classifier") == "bert-tf-run-classifier"
  for name, target in commands.items():
    main = importlib.metadata.EntryPoint(name, target, "console_scripts").load()
    assert callable(main) and main.__name__ == target.split(":")[1]
  for script in SCRIPTS:
    assert console.script_path(script) == os.path.join(REPO, "scripts", f"{script}.py")


def test_the_dependencies_are_ranges_that_admit_the_pins_of_requirements_txt():
  declared = {canonicalize_name(r.name): r for r in map(Requirement, PROJECT["project"]["dependencies"])}
  with open(os.path.join(REPO, "requirements.txt")) as f:
    pins = [Requirement(line) for line in (line.split("#")[0].strip() for line in f) if line]
  assert len(pins) >= 8
  for pin in pins:
    (version,) = [spec.version for spec in pin.specifier if spec.operator == "=="]
    requirement = declared.pop(canonicalize_name(pin.name), None)
    assert requirement is not None, f"{pin.name} is pinned in requirements.txt but not a dependency"
    assert requirement.specifier.contains(version), (str(requirement), version)
    assert not any(spec.operator == "==" for spec in requirement.specifier), str(requirement)  # a range
  assert not declared, f"dependencies without a pin in requirements.txt: {sorted(declared)}"
  # The gpu extra is TensorFlow with its CUDA libraries at exactly the pinned version (no second TensorFlow).
  (gpu,) = map(Requirement, PROJECT["project"]["optional-dependencies"]["gpu"])
  (tensorflow,) = [pin for pin in pins if pin.name == "tensorflow"]
  assert (gpu.name, gpu.extras, str(gpu.specifier)) == ("tensorflow", {"and-cuda"}, str(tensorflow.specifier))


def test_every_package_of_bert_tf_is_installed():
  listed = PROJECT["tool"]["setuptools"]["packages"]
  packages = [os.path.relpath(folder, REPO).replace(os.sep, ".") for folder, _, files in
              os.walk(os.path.join(REPO, "bert_tf")) if "__init__.py" in files]
  assert sorted(listed) == sorted(packages + ["bert_tf_scripts"]) and len(packages) >= 6
  assert PROJECT["tool"]["setuptools"]["package-dir"] == {"bert_tf_scripts": "scripts"}


@pytest.mark.slow
def test_a_real_install_puts_the_scripts_where_the_commands_find_them(tmp_path):
  import shutil

  pytest.importorskip("setuptools")  # the build backend, used from this environment (no download)
  source, target = tmp_path / "source", tmp_path / "site"  # a copy: the build writes build/ and *.egg-info
  for name in ("bert_tf", "scripts"):
    shutil.copytree(os.path.join(REPO, name), source / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
  for name in ("pyproject.toml", "setup.py"):
    shutil.copy(os.path.join(REPO, name), source / name)
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                  "--no-compile", "--target", str(target), str(source)], check=True, capture_output=True,
                 timeout=300, env={**os.environ, "PIP_NO_INPUT": "1"})
  assert sorted(os.listdir(target / "bin")) == sorted(console.command_name(s) for s in SCRIPTS)
  # Run from elsewhere, with only the installed copy importable: the command finds the installed script.
  env = {**os.environ, "PYTHONPATH": str(target)}
  done = subprocess.run([sys.executable, str(target / "bin" / "bert-tf-run-classifier"), "--help"], cwd=tmp_path,
                        env=env, capture_output=True, text=True, timeout=120)
  assert "  --save_checkpoints_steps: Checkpoint every this many updates." in done.stdout, done.stderr[-2000:]
  where = subprocess.run([sys.executable, "-c", "from bert_tf import console; print(console.script_path('predict'))"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=True).stdout
  assert where.strip() == str(target / "bert_tf_scripts" / "predict.py")
