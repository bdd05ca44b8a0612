"""The package's layout: each task in one place (bert_tf/tasks/<task>/), bert_tf/export/ only the shared export
path, no import cycle of any length, no task package importing another (what two tasks share lives in
bert_tf/tasks/common/), and the layers one way: fileio/config/data below model/, model/ below training/, both
below tasks/ (read from the source: imports inside functions count too)."""

from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = {
    "classification": {"hf_head", "glue", "user_data", "classifier", "metrics", "serving", "run"},
    "squad": {"hf_head", "data", "model", "metrics", "postprocess", "folder", "serving", "run"},
    "ner": {"hf_head", "data", "model", "feature_based", "metrics", "folder", "serving", "run"},
    "swag": {"hf_head", "data", "model", "folder", "serving", "run"},
    "features": {"extraction"},
    "pretraining": {"config", "task", "run"},
    "common": {"features", "head", "labels", "layer_choice", "folder", "serving", "task"},
}


def modules() -> dict[str, str]:
  """{dotted module name: path} of every module under bert_tf/."""
  found = {}
  for folder, _, files in os.walk(os.path.join(REPO, "bert_tf")):
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(folder, name)
        dotted = os.path.relpath(path, REPO)[:-3].replace(os.sep, ".")
        found[dotted.removesuffix(".__init__")] = path
  return found


def imports(path: str, known: dict[str, str]) -> set[str]:
  """The bert_tf modules that the module at `path` imports, anywhere in it."""
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  out = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("bert_tf"):
      for alias in node.names:
        full = f"{node.module}.{alias.name}"
        out.add(full if full in known else node.module)
    elif isinstance(node, ast.Import):
      out.update(a.name for a in node.names if a.name.startswith("bert_tf"))
  return out


def import_graph() -> dict[str, set[str]]:
  """{module: the bert_tf modules it imports} over bert_tf/."""
  known = modules()
  return {name: imports(path, known) - {name} for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The import cycles of `graph`: its strongly connected components of two or more modules (each sorted), found
  by Tarjan's algorithm; a cycle of any length is one component."""
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  found = []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for target in sorted(graph.get(node, ())):
      if target not in index:
        visit(target)
        low[node] = min(low[node], low[target])
      elif target in on_stack:
        low[node] = min(low[node], index[target])
    if low[node] == index[node]:
      component = []
      while True:
        top = stack.pop()
        on_stack.discard(top)
        component.append(top)
        if top == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for node in sorted(graph):
    if node not in index:
      visit(node)
  return sorted(found)


def test_cycles_finds_a_cycle_of_any_length_and_only_cycles():
  graph = {"a": {"b"}, "b": {"c"}, "c": {"d"}, "d": {"a", "e"}, "e": set(), "f": {"a"}, "g": {"h"}, "h": {"g"}}
  assert cycles(graph) == [["a", "b", "c", "d"], ["g", "h"]]
  assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_import_cycle():
  assert cycles(import_graph()) == []


def task_of(module: str) -> str | None:
  """The task package of a module under bert_tf/tasks/ (bert_tf.tasks.squad.model -> "squad"), else None."""
  parts = module.split(".")
  return parts[2] if len(parts) > 2 and parts[:2] == ["bert_tf", "tasks"] else None


def test_no_task_imports_another():
  """A task package imports its own modules and bert_tf/tasks/common/; common/ imports no task."""
  crossing = sorted(f"{name} -> {target}" for name, targets in import_graph().items() for target in targets
                    if task_of(name) is not None and task_of(target) not in (None, "common", task_of(name)))
  assert crossing == []


# Layers from the bottom: a module imports only modules of its layer or below. bert_tf.cli, main_job and console sit
# on top with the scripts; errors and fileio at the very bottom.
LAYERS = [("bert_tf.errors", "bert_tf.fileio"), ("bert_tf.config", "bert_tf.data"), ("bert_tf.model",),
          ("bert_tf.training",), ("bert_tf.export",), ("bert_tf.tasks",)]


def layer_of(module: str) -> int | None:
  return next((i for i, prefixes in enumerate(LAYERS)
               if any(module == p or module.startswith(p + ".") for p in prefixes)), None)


def test_layers_import_only_downwards():
  upward = sorted(f"{name} -> {target}" for name, targets in import_graph().items() for target in targets
                  if layer_of(name) is not None and layer_of(target) is not None and layer_of(target) > layer_of(name))
  assert upward == []


def test_each_task_is_one_package_and_export_holds_only_the_shared_path():
  tasks = os.path.join(REPO, "bert_tf", "tasks")
  assert sorted(n for n in os.listdir(tasks) if n.endswith(".py")) == ["__init__.py"]
  for task, expected in TASKS.items():
    names = {n[:-3] for n in os.listdir(os.path.join(tasks, task)) if n.endswith(".py") and n != "__init__.py"}
    assert names == expected, task
  export = {n for n in os.listdir(os.path.join(REPO, "bert_tf", "export")) if n.endswith(".py")}
  assert export == {"__init__.py", "serving.py", "requests.py", "limits.py"}


def test_the_shared_export_path_imports_no_task():
  known = modules()
  for name in ("bert_tf.export.serving", "bert_tf.export.requests"):
    tasks = {m for m in imports(known[name], known) if m.startswith("bert_tf.tasks")}
    assert tasks == set(), name


def test_the_code_passes_the_linter():
  """ruff with pyproject.toml's rules (pyflakes, import order, 120 columns) over everything in the repository."""
  import subprocess
  import sys

  result = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format=concise", REPO],
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
