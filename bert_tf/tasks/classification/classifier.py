"""Sentence and sentence-pair classification (and regression) on the one encoder: features, records, model,
and the `Task` the shared trainer runs. GLUE uses it; any labelled text-pair data can.

Features of one example (T = max_seq_length), google-research's `run_classifier.py` record format:

  input_ids        int64 [T]  [CLS] A [SEP] (B [SEP]), zero-padded
  input_mask       int64 [T]  1 for real tokens, 0 for padding
  segment_ids      int64 [T]  0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding
  label_ids        int64 []   the label's id (float [] for regression)
  is_real_example  int64 []   0 for the padding examples that fill the last evaluation batch

The ids are bert_tf.tasks.common.features' `encode` (google-research's `_truncate_seq_pair` for a pair longer
than T - 3 tokens; a single sentence keeps its first T - 2), as every task's are.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Iterable, Sequence

import keras
import numpy as np
import tensorflow as tf

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.data import records
from bert_tf.model.encoder import INPUT_NAMES, select_inputs
from bert_tf.tasks.common.features import EncodedExample, encode, feature_dataset, read_description, write_description
from bert_tf.tasks.common.folder import float32_copy
from bert_tf.tasks.common.head import EncoderHeadModel
from bert_tf.tasks.common.task import PerExampleTask

# The schema, declared once: name -> (kind, shape); `T` is max_seq_length. The writer, reader and tests use it.
CLASSIFIER_FEATURES: dict[str, tuple[str, str]] = {
    "input_ids": ("int64", "T"),
    "input_mask": ("int64", "T"),
    "segment_ids": ("int64", "T"),
    "label_ids": ("label", ""),  # int64 for classification, float for regression
    "is_real_example": ("int64", ""),
}


# -- Records --------------------------------------------------------------------------------------------------


def _check_max_seq_length(max_seq_length: int, is_pair: bool) -> None:
  least = 3 if is_pair else 2
  if max_seq_length <= least:
    raise ValueError(f"--max_seq_length={max_seq_length}: must exceed {least} ([CLS] and [SEP]s) to hold text")


@dataclasses.dataclass(frozen=True)
class FeatureFile:
  """A written feature file and what it holds (also stored as `<path>.json`)."""

  path: str
  num_examples: int  # real examples
  num_truncated: int
  max_seq_length: int
  is_regression: bool
  token_length_percentiles: dict[str, int]  # of real tokens per example: 50, 90, 99, max


def _serialize(encoded: EncodedExample, label: int | float, is_regression: bool, is_real: bool) -> bytes:
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  label_feature = (tf.train.Feature(float_list=tf.train.FloatList(value=[float(label)])) if is_regression
                   else ints([int(label)]))
  features = {"input_ids": ints(encoded.input_ids), "input_mask": ints(encoded.input_mask),
              "segment_ids": ints(encoded.segment_ids), "label_ids": label_feature,
              "is_real_example": ints([int(is_real)])}
  assert set(features) == set(CLASSIFIER_FEATURES)
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_feature_file(examples: Iterable[tuple[str, str | None, int | float]], tokenizer, max_seq_length: int,
                       path: str, is_regression: bool, is_pair: bool) -> FeatureFile:
  """(text_a, text_b, label id) triples -> a TFRecord file at `path` and its `<path>.json` description.

  Written under a temporary name and renamed into place, so a file that exists is complete.
  """
  _check_max_seq_length(max_seq_length, is_pair)
  writer = records.TFRecordFileWriter(path)
  lengths, truncated = [], 0
  try:
    for text_a, text_b, label in examples:
      encoded = encode(tokenizer, text_a, text_b, max_seq_length)
      lengths.append(encoded.num_tokens)
      truncated += encoded.truncated
      writer.write(_serialize(encoded, label, is_regression, True))
  except BaseException:
    writer.abort()
    raise
  writer.close()
  if lengths:
    pct = {str(q): int(np.percentile(lengths, q)) for q in (50, 90, 99)}
    pct["max"] = int(max(lengths))
  else:
    pct = {}
  info = FeatureFile(path, len(lengths), truncated, max_seq_length, is_regression, pct)
  write_description(info)
  return info


def read_feature_file_info(path: str) -> FeatureFile | None:
  """The description of a complete feature file at `path`, or None when there is none yet."""
  return read_description(path, FeatureFile)


def feature_spec(max_seq_length: int, is_regression: bool) -> dict:
  spec = {}
  for name, (kind, shape) in CLASSIFIER_FEATURES.items():
    dtype = tf.float32 if kind == "label" and is_regression else tf.int64
    spec[name] = tf.io.FixedLenFeature([max_seq_length] if shape == "T" else [], dtype)
  return spec


def classifier_dataset(path: str, batch_size: int, max_seq_length: int, is_regression: bool,
                       is_training: bool, input_context=None, seed: int = 12345, dynamic_padding: bool = True,
                       pad_to_batch: bool = False, length_multiple: int = 8):
  """Batches of classifier features from a feature file (local or gs://).

  Args:
    batch_size: examples per batch of this input pipeline (the per-replica batch under a strategy).
    is_training: repeat and reshuffle every epoch, full batches only; else one pass in file order.
    input_context: a `tf.distribute.InputContext`; each pipeline keeps 1 example in `num_input_pipelines`.
    dynamic_padding: cut each batch to its longest example, rounded up to a multiple of `length_multiple`
      (padding computes nothing useful, and GLUE sentences are mostly far shorter than T; under XLA each
      length is a compilation, hence the rounding). Off for TPUs, which need static shapes.
    pad_to_batch: (evaluation) append all-zero examples with is_real_example = 0 so every batch is full and
      shapes stay static; drop them from the predictions by is_real_example.
  Returns: dicts of input_ids, input_mask, segment_ids int32 [B, T'] (T' <= T), label_ids int32 [B] (float32
    for regression), is_real_example int32 [B].
  """
  spec = feature_spec(max_seq_length, is_regression)

  def cast(parsed):
    return {k: tf.cast(v, tf.int32) if v.dtype == tf.int64 else v for k, v in parsed.items()}

  # The whole file fits in the shuffle buffer for every GLUE task but QQP and MNLI (~400k examples, ~250 MB).
  return feature_dataset(path, spec, cast, batch_size, max_seq_length, is_training, input_context, seed,
                         dynamic_padding, pad_to_batch, length_multiple)


# -- Model ----------------------------------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="bert_tf")
class BertClassifier(EncoderHeadModel):
  """The encoder, then dropout and a dense layer on the pooled output.

  Args:
    config, dropout, encoder, dtype: `EncoderHeadModel`'s.
    num_labels: K classes; 1 makes it a regression model (STS-B).
  Inputs: dict of int32 [B, T] input_ids, input_mask, segment_ids (other entries are ignored).
  Output: logits [B, K] (compute dtype), or scores [B] when num_labels == 1.
  """

  def __init__(self, config, num_labels: int, dropout: float | None = None, encoder=None, dtype=None,
               **kwargs):
    if num_labels < 1:
      raise ValueError(f"num_labels={num_labels}: must be >= 1 (1 means regression)")
    super().__init__(config, dropout, encoder, dtype=dtype, **kwargs)
    self.num_labels = num_labels
    self.classifier_dropout, self.classifier = self.output_layers("classifier_dropout", "classifier", num_labels,
                                                                  dtype)

  def call(self, inputs, training=None):
    # Only the pooled output is needed: the encoder's last layer runs for [CLS] alone.
    pooled = self.encoder.pooled_output(select_inputs(inputs, INPUT_NAMES, "BertClassifier"), training=training)
    pooled = self.classifier_dropout(pooled, training=training)
    logits = self.classifier(pooled)  # [B, K]
    return logits[:, 0] if self.num_labels == 1 else logits

  def get_config(self) -> dict[str, Any]:
    return {**super().get_config(), "num_labels": self.num_labels}


# -- Task -----------------------------------------------------------------------------------------------------


class ClassificationTask(PerExampleTask):
  """Fine-tuning a `BertClassifier` with the shared trainer: `num_labels` classes, or 1 for regression (loss and
  metrics: `PerExampleTask`'s)."""

  def build_model(self):
    return BertClassifier(self.bert_config, self.num_labels, dtype=self.dtype)

  def build_dataset(self, batch_size, input_context):
    return classifier_dataset(self.train_file, batch_size, self.max_seq_length, self.is_regression,
                              is_training=True, input_context=input_context, seed=self.seed,
                              dynamic_padding=self.dynamic_padding, length_multiple=self.length_multiple)


def predictions_from_outputs(outputs: np.ndarray, is_regression: bool) -> tuple[np.ndarray, np.ndarray]:
  """Model outputs -> (predictions, probabilities): label ids int [N] and softmax [N, K], or scores [N] twice."""
  if is_regression:
    return outputs, outputs
  shifted = outputs - outputs.max(axis=-1, keepdims=True)
  probabilities = np.exp(shifted)
  probabilities /= probabilities.sum(axis=-1, keepdims=True)
  return outputs.argmax(axis=-1), probabilities


def examples_for_writing(examples: Sequence, label_ids: dict | None) -> Iterable[tuple[str, str | None, Any]]:
  """GLUE `InputExample`s -> (text_a, text_b, label id) for `write_feature_file`; unlabelled (test) examples
  get label 0. `label_ids` maps label names to ids (None for regression)."""
  for example in examples:
    if example.label is None:
      label = 0
    elif label_ids is None:
      label = float(example.label)
    else:
      label = label_ids[example.label]
    yield example.text_a, example.text_b, label


# -- A fine-tuned classifier on disk --------------------------------------------------------------------------
# <directory>/bert_config.json, vocab.txt, classifier.json (ClassifierSpec), model.{index,data-*} (a TF
# checkpoint of the BertClassifier, float32). Everything export and prediction need, in one folder.

SPEC_NAME = "classifier.json"


@dataclasses.dataclass(frozen=True)
class ClassifierSpec:
  task_name: str
  labels: tuple[str, ...]  # label names in id order; () for regression
  is_pair: bool
  max_seq_length: int
  do_lower_case: bool

  @property
  def num_labels(self) -> int:
    return len(self.labels) or 1

  @property
  def is_regression(self) -> bool:
    return not self.labels


def save_classifier(model: BertClassifier, spec: ClassifierSpec, vocab_file: str, directory: str) -> str:
  """Writes a fine-tuned classifier (float32 weights, whatever the training policy) under `directory`."""
  from bert_tf.model import checkpoints

  spec_text = json.dumps(dataclasses.asdict(spec), indent=2) + "\n"
  return checkpoints.save_task_model(float32_copy(model), SPEC_NAME, spec_text, vocab_file, directory)


def read_spec(directory: str) -> ClassifierSpec:
  """The spec (task, labels, ...) of a classifier folder written by `save_classifier`, without its model."""
  spec_path = os.path.join(directory, SPEC_NAME)
  if not fileio.exists(spec_path):
    raise FileNotFoundError(f"{directory}: no {SPEC_NAME}; give a folder written by save_classifier "
                            "(run_classifier.py writes <output_dir>/classifier/)")
  with fileio.open_file(spec_path, "rb") as f:
    values = json.loads(f.read().decode("utf-8"))
  # Other keys (converted_from, in a folder converted from Hugging Face) say where the model came from.
  fields = {field.name for field in dataclasses.fields(ClassifierSpec)}
  return ClassifierSpec(**{**{k: v for k, v in values.items() if k in fields}, "labels": tuple(values["labels"])})


def load_classifier(directory: str) -> tuple[BertClassifier, ClassifierSpec, str]:
  """-> (the float32 model with its weights, its spec, the path of its vocab.txt)."""
  spec = read_spec(directory)
  from bert_tf.model import checkpoints

  config = BertConfig.from_json_file(os.path.join(directory, "bert_config.json"))
  model = BertClassifier(config, spec.num_labels, dtype="float32")
  model(dict(zip(INPUT_NAMES, [tf.zeros([1, 2], tf.int32)] * 3)))
  checkpoints.restore_task_model(model, directory, "run_classifier.py (<output_dir>/classifier/)")
  return model, spec, os.path.join(directory, "vocab.txt")
