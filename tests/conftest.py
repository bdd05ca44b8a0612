"""Shared fixtures."""

from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # So tests can `import assets` however pytest is started.

import assets  # noqa: E402


@pytest.fixture(scope="session")
def bert_uncased_vocab_file() -> str:
  """bert-base-uncased's vocab.txt (30,522 tokens), fetched once into .cache/ (see tests/assets.py)."""
  return assets.minilm_file("model/vocab.txt")
