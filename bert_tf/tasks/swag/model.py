"""SWAG multiple choice on the one encoder: feature records, the `BertMultipleChoice` model, and the `Task` the
shared trainer runs. Examples come from `swag.read_examples`; the script's glue is `swag.run`.

Records of one example (C = 4 choices, T = max_seq_length), each sequence encoded as a GLUE pair
(`swag.encode_example`):

  input_ids        int64 [C, T]  row i: [CLS] sent1 [SEP] sent2 ending_i [SEP], zero-padded
  input_mask       int64 [C, T]  1 for real tokens, 0 for padding
  segment_ids      int64 [C, T]  0 for [CLS] sent1 [SEP], 1 for the rest and its [SEP], 0 for padding
  label_ids        int64 []      the true ending, 0..C-1 (0 for test.csv, which has none)
  is_real_example  int64 []      0 for the padding examples that fill the last evaluation batch

The model (the paper, section 4.4): the encoder over the B x C sequences as one batch [B*C, T], a dense layer of
one unit on each pooled output, the scores reshaped to [B, C] and a softmax over the C choices. The loss is the
cross-entropy of that softmax against the true ending, averaged over the real examples of the global batch.

Dynamic padding cuts a batch's [B, C, T] to the longest of its B*C sequences (`common.features.trim_padding`).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

import keras
import numpy as np
import tensorflow as tf

from bert_tf.data import records
from bert_tf.model.encoder import INPUT_NAMES, select_inputs
from bert_tf.tasks.common.features import (
  feature_dataset,
  feature_file_key,
  file_fingerprint,
  read_description,
  write_description,
)
from bert_tf.tasks.common.head import EncoderHeadModel
from bert_tf.tasks.common.task import PerExampleTask
from bert_tf.tasks.swag import data as swag

# The schema, declared once: name -> shape ("CT": [num_choices, max_seq_length], "": a scalar); all int64.
SWAG_FEATURES: dict[str, str] = {
    "input_ids": "CT",
    "input_mask": "CT",
    "segment_ids": "CT",
    "label_ids": "",
    "is_real_example": "",
}


def feature_spec(max_seq_length: int, num_choices: int = swag.NUM_CHOICES) -> dict:
  """The `tf.io.parse_example` spec of the records: name -> int64 FixedLenFeature ([C, T] or [])."""
  return {name: tf.io.FixedLenFeature([num_choices, max_seq_length] if shape == "CT" else [], tf.int64)
          for name, shape in SWAG_FEATURES.items()}


# -- Records --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SwagFeatureFile:
  """A written feature file and what it holds (also stored as `<path>.json`)."""

  path: str
  num_examples: int
  num_choices: int
  max_seq_length: int
  num_truncated: int  # sequences (of num_examples * num_choices) cut to max_seq_length
  token_length_percentiles: dict[str, int]  # of real tokens per sequence: 50, 90, 99, max


def _serialize(encoded: list, label: int) -> bytes:
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  features = {name: ints([i for e in encoded for i in getattr(e, name)])
              for name in ("input_ids", "input_mask", "segment_ids")}
  features["label_ids"] = ints([label])
  features["is_real_example"] = ints([1])
  assert list(features) == list(SWAG_FEATURES)
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_feature_file(examples: Iterable[swag.SwagExample], tokenizer, max_seq_length: int,
                       path: str) -> SwagFeatureFile:
  """SWAG examples -> a TFRecord file at `path` (local or gs://) and its `<path>.json` description; an example
  without a label (test.csv) is written with label 0. Written under a temporary name and renamed into place, so a
  file that exists is complete."""
  if max_seq_length <= 3:
    raise ValueError(f"--max_seq_length={max_seq_length}: must exceed 3 ([CLS] and two [SEP]s) to hold text")
  writer = records.TFRecordFileWriter(path)
  lengths, truncated, count = [], 0, 0
  try:
    for example in examples:
      encoded = swag.encode_example(tokenizer, example, max_seq_length)
      lengths.extend(e.num_tokens for e in encoded)
      truncated += sum(e.truncated for e in encoded)
      writer.write(_serialize(encoded, example.label or 0))
      count += 1
  except BaseException:
    writer.abort()
    raise
  writer.close()
  percentiles = {str(q): int(np.percentile(lengths, q)) for q in (50, 90, 99)} if lengths else {}
  if lengths:
    percentiles["max"] = int(max(lengths))
  info = SwagFeatureFile(path, count, swag.NUM_CHOICES, max_seq_length, truncated, percentiles)
  write_description(info)
  return info


def read_feature_file_info(path: str) -> SwagFeatureFile | None:
  """The description of a complete feature file at `path`, or None when there is none yet."""
  return read_description(path, SwagFeatureFile)


def feature_file_path(features_dir: str, data_file: str, vocab_file: str, split: str, do_lower_case: bool,
                      max_seq_length: int, num_examples: int) -> str:
  """Where the features of `data_file` go under `features_dir`: named by a hash of everything that determines
  them (the data and vocab files' contents, the casing, the length, how many examples of the file are used)."""
  key = feature_file_key(file_fingerprint(data_file), file_fingerprint(vocab_file), do_lower_case, max_seq_length,
                         num_examples)
  return f"{features_dir.rstrip('/')}/swag/{split}-{key}.tfrecord"


def swag_dataset(path: str, batch_size: int, max_seq_length: int, is_training: bool, input_context=None,
                 seed: int = 12345, dynamic_padding: bool = True, pad_to_batch: bool = False,
                 length_multiple: int = 8, num_choices: int = swag.NUM_CHOICES) -> tf.data.Dataset:
  """Batches of SWAG features from a feature file (local or gs://), through the shared
  `common.features.feature_dataset` (sharding, shuffling, padding to full batches as there).

  Args:
    batch_size: examples per batch of this input pipeline (each holds `num_choices` sequences).
    dynamic_padding: cut each batch to its longest sequence (`common.features.trim_padding`). Off for TPUs.
  Returns: dicts of input_ids, input_mask, segment_ids int32 [B, C, T'] (T' <= T), label_ids int32 [B],
    is_real_example int32 [B].
  """
  def convert(parsed):
    return {k: tf.cast(v, tf.int32) for k, v in parsed.items()}

  return feature_dataset(path, feature_spec(max_seq_length, num_choices), convert, batch_size, max_seq_length,
                         is_training, input_context, seed, dynamic_padding, pad_to_batch, length_multiple)


# -- Model ----------------------------------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="bert_tf")
class BertMultipleChoice(EncoderHeadModel):
  """The encoder over every choice's sequence, dropout and a dense layer of one unit on each pooled output.

  Args:
    config, dropout, encoder, dtype: `EncoderHeadModel`'s.
  Inputs: dict of int32 [B, C, T] input_ids, input_mask, segment_ids (other entries are ignored).
  Output: logits [B, C] (compute dtype), one per choice; a softmax over C gives the choices' probabilities.
  """

  def __init__(self, config, dropout: float | None = None, encoder=None, dtype=None, **kwargs):
    super().__init__(config, dropout, encoder, dtype=dtype, **kwargs)
    self.choice_dropout, self.choice_score = self.output_layers("choice_dropout", "choice_score", 1, dtype)

  def call(self, inputs, training=None):
    inputs = select_inputs(inputs, INPUT_NAMES, "BertMultipleChoice")
    ids = inputs["input_ids"]
    num_choices = ids.shape[1] if ids.shape[1] is not None else tf.shape(ids)[1]
    # The choices are independent sequences: one encoder batch of B*C.
    flat = {name: tf.reshape(value, [-1, tf.shape(value)[-1]]) for name, value in inputs.items()}  # [B*C, T]
    pooled = self.encoder.pooled_output(flat, training=training)  # [B*C, H]
    scores = self.choice_score(self.choice_dropout(pooled, training=training))  # [B*C, 1]
    return tf.reshape(scores, [-1, num_choices])  # [B, C]


def probabilities(logits: np.ndarray) -> np.ndarray:
  """float [N, C] logits -> the softmax over the C choices, float [N, C]."""
  shifted = logits - logits.max(axis=-1, keepdims=True)
  exp = np.exp(shifted)
  return exp / exp.sum(axis=-1, keepdims=True)


# -- Task -----------------------------------------------------------------------------------------------------


class MultipleChoiceTask(PerExampleTask):
  """Fine-tuning a `BertMultipleChoice` with the shared trainer on a training feature file: one label per example
  (`PerExampleTask`) with the C choices as the classes. Loss: mean cross-entropy of the softmax over the
  choices against the true one, over the real examples of the global batch. Reported: loss, accuracy.
  """

  read_file = staticmethod(swag_dataset)

  def __init__(self, bert_config, train_file: str, max_seq_length: int, seed: int = 12345,
               dtype: str = "float32", dynamic_padding: bool = True, length_multiple: int = 8):
    super().__init__(bert_config, swag.NUM_CHOICES, train_file, max_seq_length, seed=seed, dtype=dtype,
                     dynamic_padding=dynamic_padding, length_multiple=length_multiple)

  def build_model(self):
    return BertMultipleChoice(self.bert_config, dtype=self.dtype)
