"""The fine-tuning tasks, registered by decorator (as the TF Model Garden's `task_factory.register_task_cls`).

Everything that lists the tasks reads this registry: the scripts (`scripts/run_<name>.py` and
`scripts/export_<name>.py` per task, `scripts/export.py` for any task's folder), the console commands
(bert_tf/console.py; pyproject.toml's entry points, which cannot run Python, are checked against them by
tests/test_packaging.py) and the tests. A task package registers its task in its `__init__.py`:

  from bert_tf import registry

  @registry.register_task
  class Swag(registry.Task, name="swag", model_dir="swag_model", settings_name="swag.json", description="SWAG model",
             hf_class="BertForMultipleChoice", served_name="swag", exporter="export_swag"):
    ...  # what the task does its own way (SQuAD: its export flags)

The class keywords set `Task`'s attributes (which say what each means; attributes in the class body do too). That
`__init__.py` must not import TensorFlow (a script's `--help` and flag errors come before TensorFlow loads): what
needs it is imported inside the methods (`export` imports the package's serving.py when it runs). `tasks()`
imports every package of bert_tf.tasks, so that each registers itself; a task defined elsewhere registers when
its module is imported.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Mapping

_TASKS: dict[str, type[Task]] = {}


class Task:
  """What the scripts and commands know of a fine-tuning task (class attributes; subclass and register)."""

  name: str  # scripts/run_<name>.py and scripts/export_<name>.py; the commands bert-tf-run-<name>, ...
  model_dir: str  # the fine-tuned model's folder under a run's --output_dir (classifier, squad_model, ...)
  settings_name: str  # the settings file in that folder, which says the folder's task (classifier.json, ...)
  description: str  # what that folder holds, in a sentence: "classifier", "SQuAD model", ...
  hf_class: str  # transformers' class of the same model (hf:<id> of one exports as this task)
  served_name: str | None  # the exported model's default name (None: the task says, e.g. a GLUE task's name)
  exporter: str | None = None  # the function of the package's serving.py that `export` calls (None: no export)

  def __init_subclass__(cls, **attributes):
    """`class Ner(registry.Task, name="ner", ...)`: the keywords set the class attributes of the same names; a
    keyword that names none of them is refused."""
    super().__init_subclass__()
    unknown = sorted(set(attributes) - set(Task.__annotations__))
    if unknown:
      raise TypeError(f"{cls.__qualname__}: a task has no attribute {', '.join(unknown)} (it has "
                      f"{', '.join(Task.__annotations__)})")
    for attribute, value in attributes.items():
      setattr(cls, attribute, value)

  @classmethod
  def scripts(cls) -> tuple[str, ...]:
    """The files of scripts/ that are this task's (each a console command)."""
    return (f"run_{cls.name}", f"export_{cls.name}")

  @classmethod
  def package_module(cls, name: str):
    """The module `name` of the package the task is defined in (its __init__.py or a module of it), imported;
    None when there is none (or the task is defined in a module outside any package)."""
    import importlib.util

    package = importlib.import_module(cls.__module__).__package__
    if not package:
      return None
    try:
      found = importlib.util.find_spec(f"{package}.{name}")
    except ModuleNotFoundError:
      return None
    return None if found is None else importlib.import_module(f"{package}.{name}")

  @classmethod
  def hf_head(cls):
    """The mapping of the task's head to its transformers class (`hf_class`) and back, a
    bert_tf.model.convert_tasks.TaskKind, or None when the task has none; bert_tf.model.convert_tasks reads it
    here, so that bert_tf.model imports no task. By default the `KIND` of the task package's hf_head.py, if it
    has one (imported only when asked: it needs TensorFlow)."""
    module = cls.package_module("hf_head")
    return None if module is None else module.KIND

  @classmethod
  def define_export_flags(cls, flags) -> None:
    """Defines the task's own flags of its export (SQuAD's answer search) with `flags`' DEFINE_* functions; the
    task's flags of scripts/export.py too, so their names must not be another task's."""

  @classmethod
  def export(cls, model_dir: str, export_dir: str, model_name: str | None, version: int | None,
             flag_values: Mapping[str, Any], flag: str) -> str:
    """Exports the task's model folder (or a Hugging Face model of `hf_class`: a folder or hf:<id>) to
    <export_dir>/<model_name>/<version>/ for TensorFlow Serving; returns that path. `model_name` None: the
    task's default; `flag_values`: the values of `define_export_flags`' flags; `flag` names `model_dir`'s flag
    in messages.

    By default `<exporter>(model_dir, export_dir, model_name, version, **flag_values)` of the task package's
    serving.py, `model_name` None given as `served_name`."""
    if cls.exporter is None:
      raise NotImplementedError(f"{cls.name}: no exporter")
    serving = cls.package_module("serving")
    if serving is None:
      raise NotImplementedError(f"{cls.name}: no serving.py beside {cls.__module__}")
    return getattr(serving, cls.exporter)(model_dir, export_dir, cls.served_name if model_name is None else model_name,
                                          version, **flag_values)


def register_task(cls: type[Task]) -> type[Task]:
  """Class decorator: registers a `Task` subclass under its `name` (a second task of the same name is refused)."""
  for attribute in ("name", "model_dir", "settings_name", "description", "hf_class", "served_name"):
    if not hasattr(cls, attribute):
      raise TypeError(f"{cls.__qualname__}: a registered task sets {attribute}")
  if cls.name in _TASKS and _TASKS[cls.name] is not cls:
    raise ValueError(f"{cls.__qualname__}: a task named {cls.name!r} is registered already "
                     f"({_TASKS[cls.name].__module__}.{_TASKS[cls.name].__qualname__})")
  _TASKS[cls.name] = cls
  return cls


def _import_task_packages() -> None:
  """Imports each package of bert_tf.tasks (its __init__.py, which registers its task)."""
  from bert_tf import tasks as package

  for module in pkgutil.iter_modules(package.__path__, package.__name__ + "."):
    if module.ispkg:
      importlib.import_module(module.name)


def tasks() -> tuple[type[Task], ...]:
  """Every registered task, by name."""
  _import_task_packages()
  return tuple(_TASKS[name] for name in sorted(_TASKS))


def get(name: str) -> type[Task]:
  """The task registered as `name`; a ValueError naming the registered ones for another."""
  found = {task.name: task for task in tasks()}
  if name not in found:
    raise ValueError(f"no task {name!r}; the tasks are {', '.join(found)}")
  return found[name]
