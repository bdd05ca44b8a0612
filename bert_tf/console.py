"""The console commands `pip install` puts on PATH: `bert-tf-run-classifier` runs scripts/run_classifier.py, and so
on for every script, with the same flags and behaviour as `python scripts/<name>.py`. The task scripts are the
registered tasks' (bert_tf/registry.py); pyproject.toml lists the same commands (tests/test_packaging.py).

Installed (`pip install .`, or from git), the scripts travel as the package `bert_tf_scripts` (pyproject.toml maps
it to scripts/); from a checkout (editable install, or PYTHONPATH) they are read from scripts/ beside bert_tf/.
Either way the script runs as `__main__` with sys.argv[0] its own path, so absl's `--help` lists its flags.
"""

from __future__ import annotations

import importlib.util
import os
import runpy
import sys

from bert_tf import registry

# The files of scripts/ that belong to no fine-tuning task; each registered task adds its own (run_<task>,
# export_<task>: bert_tf/registry.py). The command of each is "bert-tf-" + its name with dashes (`command_name`).
GENERAL_SCRIPTS = ("convert_checkpoint", "create_pretraining_data", "export", "extract_features", "inspect_tfrecords",
                   "learn_vocab", "main_job", "predict", "run_pretraining")
SCRIPTS = tuple(sorted(GENERAL_SCRIPTS + tuple(s for task in registry.tasks() for s in task.scripts())))
SCRIPTS_PACKAGE = "bert_tf_scripts"


def command_name(script: str) -> str:
  """'run_classifier' -> 'bert-tf-run-classifier'."""
  return "bert-tf-" + script.replace("_", "-")


def script_path(script: str) -> str:
  """The file of `script`: scripts/ beside this bert_tf (a checkout, installed editable or not), else the
  installed package bert_tf_scripts (a non-editable install)."""
  path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", f"{script}.py")
  if os.path.isfile(path):
    return path
  spec = importlib.util.find_spec(SCRIPTS_PACKAGE)
  for directory in (spec.submodule_search_locations or []) if spec else []:
    installed = os.path.join(directory, f"{script}.py")
    if os.path.isfile(installed):
      return installed
  raise FileNotFoundError(f"{command_name(script)}: {script}.py is not installed (neither {path} nor a "
                          f"{SCRIPTS_PACKAGE} package holds it); reinstall bert_tf")


def run_script(script: str) -> None:
  """Runs scripts/<script>.py as `python scripts/<script>.py` would, with this process's arguments."""
  path = script_path(script)
  sys.argv[0] = path
  runpy.run_path(path, run_name="__main__")


def _command(script: str):
  def main() -> None:
    run_script(script)

  main.__name__ = main.__qualname__ = script
  main.__doc__ = f"`{command_name(script)}`: `python scripts/{script}.py`."
  return main


# One function per script, named after it: pyproject.toml's [project.scripts] point at them.
globals().update({script: _command(script) for script in SCRIPTS})
