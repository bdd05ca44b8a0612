"""The package's layout: each task in one place (bert_tf/tasks/<task>/), bert_tf/export/ only the shared export
path, and no two modules that import each other (read from the source: imports inside functions count too)."""

from __future__ import annotations

import ast
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = {
    "classification": {"glue", "user_data", "classifier", "metrics", "serving", "run"},
    "squad": {"data", "model", "metrics", "postprocess", "folder", "serving", "run"},
    "ner": {"data", "model", "feature_based", "metrics", "folder", "serving", "run"},
    "swag": {"data", "model", "folder", "serving", "run"},
    "features": {"extraction", "choice"},
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


def test_no_two_modules_import_each_other():
  known = modules()
  graph = {name: imports(path, known) - {name} for name, path in known.items()}
  mutual = sorted({tuple(sorted((a, b))) for a, targets in graph.items() for b in targets
                   if a in graph.get(b, set())})
  assert mutual == []


def test_each_task_is_one_package_and_export_holds_only_the_shared_path():
  tasks = os.path.join(REPO, "bert_tf", "tasks")
  assert sorted(n for n in os.listdir(tasks) if n.endswith(".py")) == ["__init__.py"]
  for task, expected in TASKS.items():
    names = {n[:-3] for n in os.listdir(os.path.join(tasks, task)) if n.endswith(".py") and n != "__init__.py"}
    assert names == expected, task
  export = {n for n in os.listdir(os.path.join(REPO, "bert_tf", "export")) if n.endswith(".py")}
  assert export == {"__init__.py", "serving.py", "requests.py"}


def test_the_shared_export_path_imports_no_task():
  known = modules()
  for name in ("bert_tf.export.serving", "bert_tf.export.requests"):
    tasks = {m for m in imports(known[name], known) if m.startswith("bert_tf.tasks")}
    assert tasks == set(), name
