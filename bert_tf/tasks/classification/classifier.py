"""Sentence and sentence-pair classification (and regression) on the one encoder: features, records, model,
and the `Task` the shared trainer runs. GLUE uses it; any labelled text-pair data can.

Features of one example (T = max_seq_length), google-research's `run_classifier.py` record format:

  input_ids        int64 [T]  [CLS] A [SEP] (B [SEP]), zero-padded
  input_mask       int64 [T]  1 for real tokens, 0 for padding
  segment_ids      int64 [T]  0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding
  label_ids        int64 []   the label's id (float [] for regression)
  is_real_example  int64 []   0 for the padding examples that fill the last evaluation batch

A pair longer than T - 3 tokens is truncated one token at a time from the end of the longer side (B when they
are equal), google-research's `_truncate_seq_pair`; a single sentence keeps its first T - 2 tokens. The same
rule runs in Python (`encode`, for the records) and in-graph (`encode_graph`, for exported SavedModels); the
tests check that both give the same ids.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from typing import Any, Callable, Iterable, Sequence

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.data import records
from bert_tf.model.encoder import INPUT_NAMES, BertConfigModel, BertEncoder, select_inputs
from bert_tf.model.layers import Dropout16, truncated_normal
from bert_tf.training import trainer

# The entries of a batch that hold one value per token, which dynamic padding cuts (a task adds its labels).
PER_TOKEN_INPUTS = ("input_ids", "input_mask", "segment_ids")

# The schema, declared once: name -> (kind, shape); `T` is max_seq_length. The writer, reader and tests use it.
CLASSIFIER_FEATURES: dict[str, tuple[str, str]] = {
    "input_ids": ("int64", "T"),
    "input_mask": ("int64", "T"),
    "segment_ids": ("int64", "T"),
    "label_ids": ("label", ""),  # int64 for classification, float for regression
    "is_real_example": ("int64", ""),
}


# -- Python encoding ------------------------------------------------------------------------------------------


def truncate_lengths(len_a: int, len_b: int, budget: int) -> tuple[int, int]:
  """Lengths after google-research's `_truncate_seq_pair` (pop from the longer, B on ties) to `budget` tokens,
  in closed form so that the in-graph version can compute it without a loop."""
  excess = len_a + len_b - budget
  if excess <= 0:
    return len_a, len_b
  if len_a > len_b and len_a - len_b >= excess:
    return len_a - excess, len_b
  if len_a <= len_b and len_b - len_a >= excess:
    return len_a, len_b - excess
  # Both sides shrink to half the budget; on an odd budget A keeps the extra token (B is popped on ties).
  return (budget + 1) // 2, budget // 2


@dataclasses.dataclass(frozen=True)
class EncodedExample:
  input_ids: list[int]
  input_mask: list[int]
  segment_ids: list[int]
  num_tokens: int  # real tokens, [CLS] and [SEP]s included
  truncated: bool


def encode(tokenizer, text_a: str, text_b: str | None, max_seq_length: int) -> EncodedExample:
  """One example -> padded features. `tokenizer` is a `FullTokenizer` (its vocab holds [CLS] and [SEP])."""
  cls_id, sep_id = tokenizer.vocab["[CLS]"], tokenizer.vocab["[SEP]"]
  a = tokenizer.tokenize_to_ids(text_a)
  if text_b is None:
    keep = min(len(a), max_seq_length - 2)
    truncated = keep < len(a)
    ids = [cls_id, *a[:keep], sep_id]
    segments = [0] * len(ids)
  else:
    b = tokenizer.tokenize_to_ids(text_b)
    keep_a, keep_b = truncate_lengths(len(a), len(b), max_seq_length - 3)
    truncated = (keep_a, keep_b) != (len(a), len(b))
    ids = [cls_id, *a[:keep_a], sep_id, *b[:keep_b], sep_id]
    segments = [0] * (keep_a + 2) + [1] * (keep_b + 1)
  n = len(ids)
  pad = [0] * (max_seq_length - n)
  return EncodedExample(ids + pad, [1] * n + pad, segments + pad, n, truncated)


def _check_max_seq_length(max_seq_length: int, is_pair: bool) -> None:
  least = 3 if is_pair else 2
  if max_seq_length <= least:
    raise ValueError(f"--max_seq_length={max_seq_length}: must exceed {least} ([CLS] and [SEP]s) to hold text")


# -- Records --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FeatureFile:
  """A written feature file and what it holds (also stored as `<path>.json`)."""

  path: str
  num_examples: int  # real examples
  num_truncated: int
  max_seq_length: int
  is_regression: bool
  token_length_percentiles: dict[str, int]  # of real tokens per example: 50, 90, 99, max


def feature_file_key(*parts: Any) -> str:
  """A short hash naming a feature file by everything that determines its contents."""
  return hashlib.sha256(json.dumps([str(p) for p in parts]).encode()).hexdigest()[:12]


file_fingerprint = fileio.fingerprint  # "<size>:<sha256>" of an input file: a changed file gets new features


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
  fileio.write_text_atomic(path + ".json", json.dumps(dataclasses.asdict(info), indent=2) + "\n")
  return info


def read_description(path: str, description_class):
  """The `<path>.json` description (a dataclass of `description_class`) of a complete feature file at `path`, or
  None when there is none yet. Every task's feature files are described so."""
  if not (fileio.exists(path) and fileio.exists(path + ".json")):
    return None
  with fileio.open_file(path + ".json", "rb") as f:
    values = json.loads(f.read().decode("utf-8"))
  if "path" in values:  # Written as the writing run named it (maybe relative to another working directory).
    values["path"] = path
  return description_class(**values)


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


def feature_dataset(path: str, spec: dict, convert: Callable[[dict], dict], batch_size: int, max_seq_length: int,
                    is_training: bool, input_context=None, seed: int = 12345, dynamic_padding: bool = True,
                    pad_to_batch: bool = False, length_multiple: int = 8, shuffle_buffer: int = 100_000,
                    per_token: Sequence[str] = PER_TOKEN_INPUTS) -> tf.data.Dataset:
  """The input pipeline of every task's feature file (local or gs://): batches of `spec`'s features, each batch
  passed through `convert` (dtypes, extra entries) after parsing.

  Args and behaviour as `classifier_dataset`: training shards by `input_context`, shuffles (seeded) and repeats,
  full batches only; evaluation is one pass in file order, with `pad_to_batch` appending all-zero rows so every
  batch is full; `dynamic_padding` cuts each batch's `per_token` entries by `trim_padding`.
  """
  d = tf.data.TFRecordDataset([path])
  if input_context is not None and input_context.num_input_pipelines > 1:
    d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  if is_training:
    d = d.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
  d = d.batch(batch_size, drop_remainder=is_training)
  d = d.map(lambda serialized: convert(tf.io.parse_example(serialized, spec)), num_parallel_calls=tf.data.AUTOTUNE)
  if pad_to_batch and not is_training:
    def pad(batch):
      n = batch_size - tf.shape(batch["input_ids"])[0]
      return {k: tf.ensure_shape(tf.pad(v, [[0, n]] + [[0, 0]] * (v.shape.rank - 1)), [batch_size] + v.shape[1:])
              for k, v in batch.items()}

    d = d.map(pad)
  if dynamic_padding:
    d = d.map(lambda batch: trim_padding(batch, max_seq_length, length_multiple, per_token))
  return d.prefetch(tf.data.AUTOTUNE)


def trim_padding(batch: dict, max_seq_length: int, length_multiple: int = 1,
                 per_token: Sequence[str] = PER_TOKEN_INPUTS) -> dict:
  """A batch's `per_token` entries [..., T] ([B, T]; [B, C, T] for multiple choice; by default the encoder's
  three inputs, a task adds its token labels) cut on the last axis to its longest sequence, rounded up to a
  multiple of `length_multiple` (at most `max_seq_length`); other entries unchanged."""
  longest = tf.reduce_max(tf.reduce_sum(batch["input_mask"], axis=-1))
  length = tf.minimum((longest + length_multiple - 1) // length_multiple * length_multiple, max_seq_length)
  return {k: v[..., :length] if k in per_token else v for k, v in batch.items()}


# -- In-graph encoding (for SavedModels that take raw text) -------------------------------------------------


def encode_graph(tokenizer, text_a, text_b, max_seq_length: int) -> dict:
  """`encode` in-graph: tf.string [B] (and [B] or None) -> int32 [B, max_seq_length] input_ids, input_mask,
  segment_ids. `tokenizer` is a `GraphTokenizer` with [CLS] and [SEP] in its vocabulary."""
  vocab = tokenizer.vocab
  cls_id, sep_id = vocab["[CLS]"], vocab["[SEP]"]

  def keep_first(ids, lengths):
    positions = tf.ragged.range(ids.row_lengths())
    return tf.ragged.boolean_mask(ids, positions < tf.expand_dims(lengths, 1))

  a = tokenizer.tokenize(text_a)
  len_a = a.row_lengths()
  if text_b is None:
    segments = [keep_first(a, tf.minimum(len_a, max_seq_length - 2))]
  else:
    b = tokenizer.tokenize(text_b)
    len_b = b.row_lengths()
    budget = tf.constant(max_seq_length - 3, tf.int64)
    excess = len_a + len_b - budget
    half_a, half_b = (budget + 1) // 2, budget // 2
    a_longer = len_a > len_b
    keep_a = tf.where(excess <= 0, len_a,
                      tf.where(a_longer, tf.where(len_a - len_b >= excess, len_a - excess, half_a),
                               tf.where(len_b - len_a >= excess, len_a, half_a)))
    keep_b = tf.where(excess <= 0, len_b,
                      tf.where(a_longer, tf.where(len_a - len_b >= excess, len_b, half_b),
                               tf.where(len_b - len_a >= excess, len_b - excess, half_b)))
    segments = [keep_first(a, keep_a), keep_first(b, keep_b)]
  ids, segment_ids = tf_text.combine_segments(segments, start_of_sequence_id=cls_id, end_of_segment_id=sep_id)
  input_ids, input_mask = tf_text.pad_model_inputs(ids, max_seq_length)
  segment_ids, _ = tf_text.pad_model_inputs(segment_ids, max_seq_length)
  return {"input_ids": tf.cast(input_ids, tf.int32), "input_mask": tf.cast(input_mask, tf.int32),
          "segment_ids": tf.cast(segment_ids, tf.int32)}


# -- Model ----------------------------------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="bert_tf")
class BertClassifier(BertConfigModel, keras.Model):
  """The encoder, then dropout and a dense layer on the pooled output.

  Args:
    config: the encoder's `BertConfig` (or its dict).
    num_labels: K classes; 1 makes it a regression model (STS-B).
    dropout: before the output layer; default the config's hidden_dropout_prob (0.1 in every BERT).
    encoder: an existing `BertEncoder` to use (e.g. one loaded from a checkpoint); default a new one.
  Inputs: dict of int32 [B, T] input_ids, input_mask, segment_ids (other entries are ignored).
  Output: logits [B, K] (compute dtype), or scores [B] when num_labels == 1.
  """

  def __init__(self, config, num_labels: int, dropout: float | None = None, encoder=None, dtype=None,
               **kwargs):
    super().__init__(dtype=dtype, **kwargs)
    if isinstance(config, dict):
      config = BertConfig.from_dict(config, source="BertClassifier config")
    if num_labels < 1:
      raise ValueError(f"num_labels={num_labels}: must be >= 1 (1 means regression)")
    self.config = config
    self.num_labels = num_labels
    self.dropout_rate = config.hidden_dropout_prob if dropout is None else dropout
    self.encoder = encoder if encoder is not None else BertEncoder(config, dtype=dtype, name="encoder")
    self.classifier_dropout = Dropout16(self.dropout_rate, dtype=dtype, name="classifier_dropout")
    self.classifier = keras.layers.Dense(num_labels, kernel_initializer=truncated_normal(config.initializer_range),
                                         dtype=dtype, name="classifier")

  def call(self, inputs, training=None):
    # Only the pooled output is needed: the encoder's last layer runs for [CLS] alone.
    pooled = self.encoder.pooled_output(select_inputs(inputs, INPUT_NAMES, "BertClassifier"), training=training)
    pooled = self.classifier_dropout(pooled, training=training)
    logits = self.classifier(pooled)  # [B, K]
    return logits[:, 0] if self.num_labels == 1 else logits

  def get_config(self) -> dict[str, Any]:
    return {**super().get_config(), "num_labels": self.num_labels, "dropout": self.dropout_rate}


# -- Task -----------------------------------------------------------------------------------------------------


class ClassificationTask(trainer.Task):
  """Fine-tuning a `BertClassifier` with the shared trainer.

  Loss: mean cross-entropy (classification) or mean squared error (regression) over the real examples of the
  global batch. Reported: loss, accuracy (classification).
  """

  def __init__(self, bert_config, num_labels: int, train_file: str, max_seq_length: int, seed: int = 12345,
               dtype: str = "float32", dynamic_padding: bool = True, length_multiple: int = 8):
    self.bert_config = bert_config
    self.num_labels = num_labels
    self.is_regression = num_labels == 1
    self.train_file = train_file
    self.max_seq_length = max_seq_length
    self.seed = seed
    self.dtype = dtype
    self.dynamic_padding = dynamic_padding
    self.length_multiple = length_multiple

  def build_model(self):
    return BertClassifier(self.bert_config, self.num_labels, dtype=self.dtype)

  def build_dataset(self, batch_size, input_context):
    return classifier_dataset(self.train_file, batch_size, self.max_seq_length, self.is_regression,
                              is_training=True, input_context=input_context, seed=self.seed,
                              dynamic_padding=self.dynamic_padding, length_multiple=self.length_multiple)

  def normalizers(self, features):
    return {"examples": tf.reduce_sum(tf.cast(features["is_real_example"], tf.float32))}

  def loss_terms(self, features, outputs):
    real = tf.cast(features["is_real_example"], tf.float32)
    if self.is_regression:
      error = outputs - tf.cast(features["label_ids"], tf.float32)
      return {"loss_sum": tf.reduce_sum(real * tf.square(error))}
    labels = features["label_ids"]
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=outputs)
    correct = tf.cast(tf.equal(tf.argmax(outputs, axis=-1, output_type=tf.int32), labels), tf.float32)
    return {"loss_sum": tf.reduce_sum(real * losses), "correct_sum": tf.reduce_sum(real * correct)}

  def loss(self, terms, normalizers):
    return terms["loss_sum"] / tf.maximum(normalizers["examples"], 1.0)

  def metrics(self, sums):
    if self.is_regression:
      return {}
    return {"accuracy": sums["correct_sum"] / max(sums["examples"], 1.0)}

  def checkpoint_items(self, model):
    return {"model": model, "encoder": model.encoder}


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


def float32_copy(model: BertClassifier) -> BertClassifier:
  """A float32 classifier with `model`'s weights, outside any strategy scope: what is saved and exported,
  whatever the policy of training (TF Serving's clients expect float32, and CPUs serve float16 slowly)."""
  copy = BertClassifier(model.config, model.num_labels, dropout=model.dropout_rate, dtype="float32")
  copy({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  copy.set_weights(model.get_weights())
  return copy


def save_classifier(model: BertClassifier, spec: ClassifierSpec, vocab_file: str, directory: str) -> str:
  """Writes a fine-tuned classifier (float32 weights, whatever the training policy) under `directory`."""
  from bert_tf.training import handoff

  spec_text = json.dumps(dataclasses.asdict(spec), indent=2) + "\n"
  return handoff.save_task_model(float32_copy(model), SPEC_NAME, spec_text, vocab_file, directory)


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
  from bert_tf.training import handoff

  config = BertConfig.from_json_file(os.path.join(directory, "bert_config.json"))
  model = BertClassifier(config, spec.num_labels, dtype="float32")
  model(dict(zip(INPUT_NAMES, [tf.zeros([1, 2], tf.int32)] * 3)))
  handoff.restore_task_model(model, directory, "run_classifier.py (<output_dir>/classifier/)")
  return model, spec, os.path.join(directory, "vocab.txt")
