"""SQuAD span prediction on the one encoder: feature records, the `BertSpanLabeler` model, and the `Task` the
shared trainer runs. The windows come from `squad.convert_examples_to_features`; post-processing and the script
live elsewhere.

Records (T = max_seq_length), google-research `run_squad.py`'s `FeatureWriter` names and types, so either
project reads the other's files:

  unique_ids       int64 []   the window's `SquadFeatures.unique_id` (1000000000, 1000000001, ...)
  input_ids        int64 [T]  [CLS] question [SEP] window [SEP], zero-padded
  input_mask       int64 [T]  1 for real tokens, 0 for padding
  segment_ids      int64 [T]  0 for [CLS] question [SEP], 1 for the window and its [SEP], 0 for padding
  start_positions  int64 []   training only: input position of the answer's first token (0: [CLS], no answer)
  end_positions    int64 []   training only: of its last token (inclusive)
  is_impossible    int64 []   training only: 1 for a SQuAD v2.0 question without an answer (written, not read,
                              as in the reference)

Loss: the mean over the batch of (CE(start) + CE(end)) / 2, google-research's. One deliberate difference: the
softmax of the loss runs over the real tokens of each window, where the reference's runs over all T positions,
padding included. The reference's loss depends on how much padding a window has, which dynamic padding and
the encoder's training path (padded positions computed as zeros) change; over real tokens it does not, and
the answer is always at a real token ([CLS] for none). The model's logits themselves are not masked, as in
the reference: post-processing only ever picks positions of window tokens.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import keras
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.data import records
from bert_tf.model.encoder import INPUT_NAMES, BertConfigModel, BertEncoder, select_inputs
from bert_tf.model.layers import truncated_normal
from bert_tf.tasks.common.features import (
  feature_dataset,
  feature_file_key,
  file_fingerprint,
  read_description,
  write_description,
)
from bert_tf.tasks.common.task import FineTuningTask
from bert_tf.tasks.squad import data as squad
from bert_tf.tasks.squad.data import SquadFeatures

# The schema, declared once: name -> (shape, in training records, in evaluation records); `T` is max_seq_length.
SQUAD_FEATURES: dict[str, tuple[str, bool, bool]] = {
    "unique_ids": ("", True, True),
    "input_ids": ("T", True, True),
    "input_mask": ("T", True, True),
    "segment_ids": ("T", True, True),
    "start_positions": ("", True, False),
    "end_positions": ("", True, False),
    "is_impossible": ("", True, False),
}
# Written for the reference's sake; no model or loss here reads it.
_WRITTEN_ONLY = ("is_impossible",)
# What `squad_predictions` puts at the positions past a dynamically padded batch's length: below any logit, so
# they sort last where post-processing ranks all T positions.
PAD_LOGIT = -10000.0


def feature_names(is_training: bool) -> list[str]:
  return [name for name, (_, train, evaluate) in SQUAD_FEATURES.items() if (train if is_training else evaluate)]


def feature_spec(max_seq_length: int, is_training: bool) -> dict:
  """The `tf.io.parse_example` spec of the records the model reads: name -> int64 FixedLenFeature."""
  return {name: tf.io.FixedLenFeature([max_seq_length] if SQUAD_FEATURES[name][0] == "T" else [], tf.int64)
          for name in feature_names(is_training) if name not in _WRITTEN_ONLY}


# -- Records --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SquadFeatureFile:
  """A written feature file and what it holds (also stored as `<path>.json`)."""

  path: str
  num_features: int  # windows
  num_examples: int  # questions with at least one window
  is_training: bool
  max_seq_length: int
  num_unanswered: int  # training windows labelled [CLS] (no answer in the window, or impossible); 0 otherwise


def _serialize(feature: SquadFeatures, is_training: bool) -> bytes:
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  features = {"unique_ids": ints([feature.unique_id]), "input_ids": ints(feature.input_ids),
              "input_mask": ints(feature.input_mask), "segment_ids": ints(feature.segment_ids)}
  if is_training:
    features["start_positions"] = ints([feature.start_position])
    features["end_positions"] = ints([feature.end_position])
    features["is_impossible"] = ints([int(feature.is_impossible)])
  assert list(features) == feature_names(is_training)
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_feature_file(features: Iterable[SquadFeatures], path: str, is_training: bool) -> SquadFeatureFile:
  """Windows from `squad.convert_examples_to_features` -> a TFRecord file at `path` (local or gs://) and its
  `<path>.json` description. Written under a temporary name and renamed into place, so a file that exists is
  complete. Training records need the windows' positions (features made with is_training=True)."""
  writer = records.TFRecordFileWriter(path)
  count = unanswered = 0
  examples: set[int] = set()
  max_seq_length = 0
  try:
    for feature in features:
      if is_training and feature.start_position is None:
        raise ValueError(f"{path}: window {feature.unique_id} has no answer position; make training features "
                         "with convert_examples_to_features(..., is_training=True)")
      if max_seq_length and len(feature.input_ids) != max_seq_length:
        raise ValueError(f"{path}: window {feature.unique_id} has {len(feature.input_ids)} ids, the first had "
                         f"{max_seq_length}; write windows of one max_seq_length per file")
      max_seq_length = len(feature.input_ids)
      writer.write(_serialize(feature, is_training))
      count += 1
      examples.add(feature.example_index)
      unanswered += is_training and feature.start_position == 0
  except BaseException:
    writer.abort()
    raise
  writer.close()
  info = SquadFeatureFile(path, count, len(examples), is_training, max_seq_length, int(unanswered))
  write_description(info)
  return info


def read_feature_file_info(path: str) -> SquadFeatureFile | None:
  """The description of a complete feature file at `path`, or None when there is none yet."""
  return read_description(path, SquadFeatureFile)


def feature_file_path(features_dir: str, squad_file: str, vocab_file: str, is_training: bool,
                      version_2_with_negative: bool, do_lower_case: bool, max_seq_length: int, doc_stride: int,
                      max_query_length: int, num_examples: int | None = None,
                      include_unknowns: float = squad.INCLUDE_ALL_UNKNOWNS) -> str:
  """Where the features of `squad_file` go under `features_dir`: named by a hash of everything that determines
  them (the data and vocab files' contents, the flags, `num_examples` when the run uses a prefix, and
  `include_unknowns` when it drops windows: `squad.keep_unknowns`)."""
  # Evaluation windows are stored shortest first (see `squad.run`), which the key says. Keeping every window
  # adds nothing to the key, so files written before --include_unknowns existed keep their names.
  sampled = [f"unknowns {include_unknowns!r}"] if squad.samples_unknowns(include_unknowns) else []
  key = feature_file_key(file_fingerprint(squad_file), file_fingerprint(vocab_file), is_training,
                         version_2_with_negative, do_lower_case, max_seq_length, doc_stride, max_query_length,
                         num_examples, *([] if is_training else ["by length"]), *sampled)
  split = "train" if is_training else "eval"
  return f"{features_dir.rstrip('/')}/squad/{split}-{key}.tfrecord"


def cached_feature_file(path: str, make_features: Callable[[], Iterable[SquadFeatures]],
                        is_training: bool) -> tuple[SquadFeatureFile, bool]:
  """(the feature file at `path`, True) when a complete one is there; else writes it from `make_features()`
  (called only then: reading and windowing SQuAD's training set takes minutes) -> (it, False)."""
  info = read_feature_file_info(path)
  if info is not None:
    if info.is_training != is_training:
      raise ValueError(f"{path}: holds {'training' if info.is_training else 'evaluation'} features; remove it or "
                       "name the file with feature_file_path")
    return info, True
  return write_feature_file(make_features(), path, is_training), False


def squad_dataset(path: str, batch_size: int, max_seq_length: int, is_training: bool, input_context=None,
                  seed: int = 12345, dynamic_padding: bool = True, pad_to_batch: bool = False,
                  length_multiple: int = 8, shuffle_buffer: int = 100_000) -> tf.data.Dataset:
  """Batches of SQuAD features from a feature file (local or gs://).

  Args:
    batch_size: examples per batch of this input pipeline (the per-replica batch under a strategy).
    is_training: shuffle (seeded), repeat and keep full batches only; else one pass in file order.
    input_context: a `tf.distribute.InputContext`; each pipeline keeps 1 window in `num_input_pipelines`.
    dynamic_padding: cut each batch to its longest window, rounded up to a multiple of `length_multiple`
      (`common.features.trim_padding`, through the shared `common.features.feature_dataset`). Off for TPUs, which
      need static shapes.
    pad_to_batch: (evaluation) append all-zero windows with is_real_example = 0 so that every batch is full;
      `finetuning.predict` drops them.
    shuffle_buffer: windows; the default holds SQuAD v1.1's ~88,000 training windows (~200 MB at T = 384).
  Returns: dicts of unique_ids int64 [B]; input_ids, input_mask, segment_ids int32 [B, T'] (T' <= T);
    is_real_example int32 [B]; and for training start_positions, end_positions int32 [B].
  """
  def convert(parsed):
    # unique_ids stay int64: they pass 2^31 after ~1.1e9 windows, and they are never computed with.
    batch = {k: v if k == "unique_ids" else tf.cast(v, tf.int32) for k, v in parsed.items()}
    batch["is_real_example"] = tf.ones_like(batch["input_mask"][:, 0])
    return batch

  return feature_dataset(path, feature_spec(max_seq_length, is_training), convert, batch_size, max_seq_length,
                         is_training, input_context, seed, dynamic_padding, pad_to_batch, length_multiple,
                         shuffle_buffer)


# -- Model ----------------------------------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="bert_tf")
class BertSpanLabeler(BertConfigModel, keras.Model):
  """The encoder, then one dense layer of 2 units on every position of the sequence output: the scores of
  each token as the answer's start and end (google-research's `run_squad.create_model`: no dropout, weights
  from a truncated normal of stddev `initializer_range`).

  Args:
    config: the encoder's `BertConfig` (or its dict).
    encoder: an existing `BertEncoder` to use (e.g. one loaded from a checkpoint); default a new one.
  Inputs: dict of int32 [B, T] input_ids, input_mask, segment_ids (other entries are ignored).
  Outputs: dict of start_logits, end_logits float32 [B, T] (cast from the compute dtype: they feed a softmax
    over T). Padded positions are not masked, as in the reference; the loss and post-processing ignore them.
  """

  def __init__(self, config, encoder=None, dtype=None, **kwargs):
    super().__init__(dtype=dtype, **kwargs)
    if isinstance(config, dict):
      config = BertConfig.from_dict(config, source="BertSpanLabeler config")
    self.config = config
    self.encoder = encoder if encoder is not None else BertEncoder(config, dtype=dtype, name="encoder")
    self.span_output = keras.layers.Dense(2, kernel_initializer=truncated_normal(config.initializer_range),
                                          dtype=dtype, name="span_output")

  def call(self, inputs, training=None):
    sequence = self.encoder(select_inputs(inputs, INPUT_NAMES, "BertSpanLabeler"), training=training)
    logits = tf.cast(self.span_output(sequence["sequence_output"]), tf.float32)  # [B, T, 2]
    return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}


def squad_predictions(model: BertSpanLabeler, max_seq_length: int) -> Callable:
  """`model` as `finetuning.predict` runs it: features -> float32 [B, 2, T] (start, end logits), every padded
  position at `PAD_LOGIT` (and padded back to `max_seq_length` after a dynamically padded batch, so the batches
  concatenate to [N, 2, T]). google-research scores padded positions too; masking them makes the answers
  independent of how windows are batched and padded."""

  def call(features, training=False):
    outputs = model(features, training=training)
    logits = tf.stack([outputs["start_logits"], outputs["end_logits"]], axis=1)  # [B, 2, T']
    # Padded positions of a batch's shorter windows too: their logits are untrained and depend on how the
    # batch was padded, and they could take places in a window's top n_best_size.
    logits = tf.where(features["input_mask"][:, tf.newaxis, :] > 0, logits, PAD_LOGIT)
    return tf.pad(logits, [[0, 0], [0, 0], [0, max_seq_length - tf.shape(logits)[2]]], constant_values=PAD_LOGIT)

  return call


# -- Task -----------------------------------------------------------------------------------------------------


def _masked_logits(logits, input_mask):
  """float32 [B, T] with the padded positions far below any real logit (out of the softmax and the argmax)."""
  return tf.where(input_mask > 0, logits, tf.constant(-1e9, logits.dtype))


class SquadTask(FineTuningTask):
  """Fine-tuning a `BertSpanLabeler` with the shared trainer on a training feature file (`FineTuningTask`'s
  settings).

  Loss: the mean over the windows of the global batch of (CE(start) + CE(end)) / 2, each a softmax over the
  window's real tokens (see the module docstring). Reported: loss, start_accuracy, end_accuracy.
  """

  read_file = staticmethod(squad_dataset)

  def build_model(self):
    return BertSpanLabeler(self.bert_config, dtype=self.dtype)

  def normalizers(self, features):
    return {"examples": tf.reduce_sum(tf.cast(features["is_real_example"], tf.float32))}

  def loss_terms(self, features, outputs):
    real = tf.cast(features["is_real_example"], tf.float32)
    terms = {}
    for side in ("start", "end"):
      positions = features[f"{side}_positions"]
      logits = _masked_logits(outputs[f"{side}_logits"], features["input_mask"])
      losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=positions, logits=logits)  # [B]
      correct = tf.cast(tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), positions), tf.float32)
      terms[f"{side}_loss_sum"] = tf.reduce_sum(real * losses)
      terms[f"{side}_correct_sum"] = tf.reduce_sum(real * correct)
    return terms

  def loss(self, terms, normalizers):
    return (terms["start_loss_sum"] + terms["end_loss_sum"]) / 2.0 / tf.maximum(normalizers["examples"], 1.0)

  def metrics(self, sums):
    examples = max(sums["examples"], 1.0)
    return {"start_accuracy": sums["start_correct_sum"] / examples,
            "end_accuracy": sums["end_correct_sum"] / examples}
