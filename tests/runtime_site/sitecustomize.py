"""Started by Python in every process with tests/runtime_site on its path (tests/runtime_packages.py says why).

In a process that tests start as a user's would run (RUNTIME_ONLY_ENV set: every process started through
training_helpers.python_env, and test_readme's commands), and in any process running one of this repository's
scripts (`scripts/<name>.py`, also through tests/interrupted_run.py) or a `bert-tf-*` command, the top-level modules
named in BERT_TF_TEST_HIDDEN_MODULES are not installed, as far as the process can tell: `import sklearn` raises
ModuleNotFoundError and `importlib.util.find_spec("sklearn")` is None, exactly as in an install without them (a
finder that raised instead would break code that probes for optional packages). Every other process (pytest's, the
references', the peers') is left as it is.
"""

import importlib.machinery
import os
import sys

HIDDEN_ENV = "BERT_TF_TEST_HIDDEN_MODULES"
RUNTIME_ONLY_ENV = "BERT_TF_TEST_RUNTIME_ONLY"
_SCRIPTS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "scripts")


def is_user_command(argv0: str) -> bool:
  """A script of this repository's scripts/ folder, an installed bert-tf-* command, or tests/interrupted_run.py
  (which runs a script, stopping it at a step)."""
  if not argv0 or argv0.startswith("-"):
    return False
  path = os.path.realpath(argv0)
  return (os.path.dirname(path) == os.path.realpath(_SCRIPTS) or os.path.basename(argv0).startswith("bert-tf-")
          or path == os.path.join(os.path.dirname(os.path.realpath(_SCRIPTS)), "tests", "interrupted_run.py"))


def top_level(dist) -> set:
  """The top-level modules a distribution installs (its top_level.txt, else its RECORD's first folders)."""
  listed = dist.read_text("top_level.txt")
  if listed:
    return {line.replace("/", ".").split(".")[0] for line in listed.split()}
  return {p.parts[0][:-3] if len(p.parts) == 1 else p.parts[0] for p in dist.files or []
          if p.parts[0] != ".." and not p.parts[0].endswith((".dist-info", ".data", ".libs"))
          and (len(p.parts) > 1 or p.parts[0].endswith(".py"))}


_hidden: set = set()


def hide(modules) -> None:
  """Makes the path finder (site-packages, PYTHONPATH) find none of the top-level `modules` nor their
  submodules, nor their distributions' metadata; called again, hides those too."""
  _hidden.update(modules)
  finder = importlib.machinery.PathFinder
  if finder not in sys.meta_path:  # ours is in its place already
    return

  class RuntimeOnlyPathFinder:
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
      if fullname.partition(".")[0] in _hidden:
        return None
      return finder.find_spec(fullname, path, target)

    @classmethod
    def find_distributions(cls, *args, **kwargs):
      for dist in finder.find_distributions(*args, **kwargs):
        tops = top_level(dist)
        if not tops or not tops <= _hidden:
          yield dist

    @classmethod
    def invalidate_caches(cls):
      finder.invalidate_caches()

  sys.meta_path[sys.meta_path.index(finder)] = RuntimeOnlyPathFinder


if os.environ.get(HIDDEN_ENV) and (os.environ.get(RUNTIME_ONLY_ENV) == "1"
                                   or is_user_command(sys.argv[0] if sys.argv else "")):
  hide(m for m in os.environ[HIDDEN_ENV].split(",") if m)
