"""bert_tf/registry.py: the tasks register themselves by decorator; what lists tasks reads it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bert_tf import registry

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_task_packages_register_themselves_without_tensorflow():
  """The scripts read the registry before parsing flags: finding the tasks must not load TensorFlow."""
  code = ("import sys; from bert_tf import registry; "
          "print(' '.join(t.name for t in registry.tasks()), 'tensorflow' in sys.modules)")
  shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": REPO})
  assert shown.stdout.split() == ["classifier", "ner", "squad", "swag", "False"], shown.stderr[-2000:]


def test_the_tasks_folders_are_those_their_packages_and_the_converter_know():
  from bert_tf.model import convert_tasks
  from bert_tf.tasks.classification import classifier
  from bert_tf.tasks.ner import folder as ner_folder
  from bert_tf.tasks.squad import folder as squad_folder
  from bert_tf.tasks.swag import folder as swag_folder

  tasks = {task.name: task for task in registry.tasks()}
  assert (tasks["classifier"].model_dir, tasks["classifier"].settings_name) == ("classifier", classifier.SPEC_NAME)
  for name, folder in (("ner", ner_folder), ("squad", squad_folder), ("swag", swag_folder)):
    assert (tasks[name].model_dir, tasks[name].settings_name) == (folder.MODEL_DIR, folder.SETTINGS_NAME), name
  assert {(k.settings_name, k.model_dir, k.script, k.architecture) for k in convert_tasks.task_kinds()} == \
      {(t.settings_name, t.model_dir, f"run_{t.name}.py", t.hf_class) for t in tasks.values()}


@pytest.fixture
def scratch(monkeypatch):
  """The registry's table, restored after the test (a test's toy tasks do not stay registered)."""
  registry.tasks()  # the real tasks registered first, so that they are in the copy put back
  monkeypatch.setattr(registry, "_TASKS", dict(registry._TASKS))  # pylint: disable=protected-access


def _toy(name="toy_task", **attributes):
  values = dict(name=name, model_dir="toy_model", settings_name="toy.json", description="toy model",
                hf_class="BertForToys", served_name="toy")
  values.update(attributes)
  return type("Toy", (registry.Task,), values)


def test_a_registered_task_is_found_with_its_scripts(scratch):
  toy = registry.register_task(_toy())
  assert registry.get("toy_task") is toy and toy in registry.tasks()
  assert toy.scripts() == ("run_toy_task", "export_toy_task")
  assert registry.register_task(toy) is toy  # the same class again (a module imported twice): no change


def test_a_second_task_of_a_name_and_a_task_missing_an_attribute_are_refused(scratch):
  registry.register_task(_toy())
  with pytest.raises(ValueError, match="a task named 'toy_task' is registered already"):
    registry.register_task(_toy())
  incomplete = _toy(name="other_toy")
  del incomplete.hf_class
  with pytest.raises(TypeError, match="Toy: a registered task sets hf_class"):
    registry.register_task(incomplete)
  with pytest.raises(ValueError, match="no task 'other_toy'; the tasks are classifier, ner, squad, swag, toy_task"):
    registry.get("other_toy")


def test_class_keywords_set_the_attributes_and_an_unknown_one_is_refused(scratch):
  class Keyed(registry.Task, name="keyed_toy", model_dir="keyed_model", settings_name="keyed.json",
              description="keyed toy", hf_class="BertForToys", served_name=None):
    pass

  registry.register_task(Keyed)
  assert (Keyed.name, Keyed.model_dir, Keyed.settings_name, Keyed.served_name, Keyed.exporter) == \
      ("keyed_toy", "keyed_model", "keyed.json", None, None)
  with pytest.raises(NotImplementedError, match="keyed_toy: no exporter"):
    Keyed.export("m", "e", None, None, {}, "model_dir")
  with pytest.raises(TypeError, match="Typo: a task has no attribute hf_clas, modeldir "):
    type("Typo", (registry.Task,), {}, hf_clas="x", modeldir="y")


def test_export_calls_the_exporter_of_the_package_serving_module(scratch, tmp_path, monkeypatch):
  package = tmp_path / "toy_export_task"
  package.mkdir()
  (package / "__init__.py").write_text(
      "from bert_tf import registry\n\n\n@registry.register_task\n"
      "class ToyExport(registry.Task, name='toy_export', model_dir='toy_model', settings_name='toy.json',\n"
      "                description='toy model', hf_class='BertForToys', served_name='toy', exporter='export_toy'):\n"
      "  pass\n")
  (package / "serving.py").write_text(
      "def export_toy(model_dir, export_dir, model_name, version, **flags):\n"
      "  return repr((model_dir, export_dir, model_name, version, flags))\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  import toy_export_task  # pylint: disable=import-outside-toplevel

  task = registry.get("toy_export")
  assert task is toy_export_task.ToyExport
  assert task.export("m", "e", None, 3, {"n_best": 7}, "model_dir") == repr(("m", "e", "toy", 3, {"n_best": 7}))
  assert task.export("m", "e", "mine", None, {}, "model_dir") == repr(("m", "e", "mine", None, {}))


def test_each_task_exporter_is_a_function_of_its_serving_module():
  """Read from the source (importing serving.py loads TensorFlow)."""
  import ast

  for task in registry.tasks():
    path = os.path.join(REPO, *task.__module__.split("."), "serving.py")
    with open(path, encoding="utf-8") as f:
      functions = {node.name for node in ast.parse(f.read()).body if isinstance(node, ast.FunctionDef)}
    assert task.exporter in functions, task.name


def test_a_task_outside_a_package_has_no_package_modules(scratch, tmp_path, monkeypatch):
  """A task defined in a lone module (no package around it) has no hf_head.py or serving.py to find: hf_head() is
  None and export says what is missing, rather than every lookup of the tasks failing on the module."""
  (tmp_path / "lone_toy_task.py").write_text(
      "from bert_tf import registry\n\n\n@registry.register_task\n"
      "class Lone(registry.Task, name='lone_toy', model_dir='lone_model', settings_name='lone.json',\n"
      "           description='lone model', hf_class='BertForLone', served_name='lone', exporter='export_lone'):\n"
      "  pass\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  import importlib
  import sys

  try:
    lone = importlib.import_module("lone_toy_task").Lone
    assert lone.package_module("hf_head") is None and lone.hf_head() is None
    with pytest.raises(NotImplementedError, match="^lone_toy: no serving.py beside lone_toy_task$"):
      lone.export("m", "e", None, None, {}, "model_dir")
  finally:
    sys.modules.pop("lone_toy_task", None)
  assert registry.get("swag").package_module("folder").__name__ == "bert_tf.tasks.swag.folder"
