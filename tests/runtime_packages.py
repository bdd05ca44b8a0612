"""The packages a user's install of bert_tf has, and the development-only ones the scripts that tests start do not see.

`pip install bert_tf` (with its `beam` extra) brings bert_tf's dependencies and theirs; requirements-dev.txt adds
the tests' references and the benchmark peers (scikit-learn, tf-models-official with matplotlib and pandas,
transformers and torch, ...). Some of those change what a script does at start-up although it never uses them:
Keras imports scikit-learn (its sklearn wrappers) and matplotlib (its plotting utilities) whenever they are
installed, about 1.3 s of CPU in each process that imports TensorFlow here. And a script that imported a
development-only package by mistake would pass every test here and fail at a user's.

So the processes that tests start run as in a user's install: tests put `runtime_site/` on their PYTHONPATH
(training_helpers.python_env; test_readme's commands), whose `sitecustomize` hides from such a process the top-level
modules of every installed distribution outside bert_tf's dependency closure (`hidden_modules()`, passed in
HIDDEN_ENV). That covers every process started through python_env (RUNTIME_ONLY_ENV: the scripts, the clients of an
export, the helpers that train in a fresh process, bench/accelerator_check.py's dry run) and, whoever starts them,
the scripts (`scripts/*.py`, `bert-tf-*` commands, tests/interrupted_run.py). The processes that run a reference or
a peer (`python_env(dev_packages=True)`, or an environment of their own) and the test processes themselves see
everything.
"""

from __future__ import annotations

import importlib.metadata
import os
import re

from runtime_site.sitecustomize import HIDDEN_ENV, RUNTIME_ONLY_ENV, top_level

SITE_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runtime_site")
EXTRAS = ("beam",)  # bert_tf's extras the suite installs and tests (pyproject.toml); `gpu` is not installed here


def _name(name: str) -> str:
  return re.sub(r"[-_.]+", "-", name).lower()


def _installed() -> dict:
  """Normalised name -> installed distribution."""
  return {_name(d.metadata["Name"]): d for d in importlib.metadata.distributions()}


def runtime_distributions(root: str = "bert_tf", extras: tuple[str, ...] = EXTRAS, installed: dict | None = None
                          ) -> set[str]:
  """The normalised names of `root` and of every installed distribution it needs (with `extras`), transitively,
  following each requirement's markers and extras as pip does (`installed`: `_installed()`, read when not given)."""
  from packaging.requirements import Requirement

  installed = _installed() if installed is None else installed
  seen, todo = set(), [(root, tuple(extras))]
  while todo:
    name, wanted = todo.pop()
    dist = installed.get(_name(name))
    if dist is None or (_name(name), wanted) in seen:
      continue
    seen.add((_name(name), wanted))
    for line in dist.requires or []:
      requirement = Requirement(line)
      if requirement.marker and not any(requirement.marker.evaluate({"extra": e}) for e in wanted or ("",)):
        continue
      todo.append((requirement.name, tuple(sorted(requirement.extras))))
  return {name for name, _ in seen}


def hidden_modules() -> list[str]:
  """The top-level modules of the installed distributions outside bert_tf's runtime closure, less any that a
  runtime distribution also installs (namespace packages such as `google`)."""
  dists = _installed()
  runtime = runtime_distributions(installed=dists)
  kept = set().union(*(top_level(d) for name, d in dists.items() if name in runtime))
  extra = set().union(*(top_level(d) for name, d in dists.items() if name not in runtime))
  return sorted(m for m in extra - kept if m.isidentifier())


def runtime_env() -> dict:
  """The variables that make a process started with them see only a user's packages: runtime_site on PYTHONPATH
  (callers that need more there add to it), the hidden modules, and the mark of such a process."""
  return {"PYTHONPATH": SITE_DIR, HIDDEN_ENV: hidden_env(), RUNTIME_ONLY_ENV: "1"}


def hidden_env() -> str:
  """HIDDEN_ENV's value, computed once per test run (the conftest puts it into the environment workers inherit)."""
  if HIDDEN_ENV not in os.environ:
    os.environ[HIDDEN_ENV] = ",".join(hidden_modules())
  return os.environ[HIDDEN_ENV]
