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


# -- Exports several modules serve: each built once per session (an export traces its signatures: seconds) ------


@pytest.fixture(scope="session")
def classifier_exports(tmp_path_factory) -> dict:
  """test_serving's pair classifier and regression model, exported (test_serving.export_classifiers); test_predict
  and test_tf_serving_path serve the pair classifier too."""
  import test_serving

  return test_serving.export_classifiers(tmp_path_factory.mktemp("serving"))


@pytest.fixture(scope="session")
def swag_export(tmp_path_factory) -> dict:
  """test_swag_serving's model folder and export (test_swag_serving.export_swag_model); test_tf_serving_path
  serves it too."""
  import test_swag_serving

  return test_swag_serving.export_swag_model(tmp_path_factory.mktemp("swag_export"))


@pytest.fixture(scope="session")
def ner_export(tmp_path_factory, bert_uncased_vocab_file) -> dict:
  """test_ner_serving's model folder and export (test_ner_serving.export_ner_model); test_tf_serving_path serves
  it too."""
  import test_ner_serving

  return test_ner_serving.export_ner_model(tmp_path_factory.mktemp("ner_export"), bert_uncased_vocab_file)
