"""Named-entity recognition on the one encoder: feature records of `ner.NerWindow`s, the `BertTokenClassifier`
model, and the `Task` the shared trainer runs. The windows come from `ner.make_windows`; the script's glue
lives in `ner.run`.

Records (T = max_seq_length), all int64:

  unique_ids   []   the window's index in its file (0, 1, ...)
  input_ids    [T]  [CLS] left context, centre, right context [SEP], zero-padded
  input_mask   [T]  1 for real tokens, 0 for padding
  segment_ids  [T]  all 0 (one segment)
  label_ids    [T]  the label id of each centre word at its first piece, 0 elsewhere
  label_mask   [T]  1 at the first piece of each centre word, 0 elsewhere

Loss: the mean cross-entropy over the labelled positions (label_mask = 1) of the global batch: one term per
word of the centres, none for later pieces of a word, context or padding (the paper, section 5.3).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Iterable

import keras
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
from bert_tf.tasks.common.task import FineTuningTask
from bert_tf.tasks.ner.data import NerWindow

# The schema, declared once: name -> shape ("T": max_seq_length, "": a scalar).
NER_FEATURES: dict[str, str] = {"unique_ids": "", "input_ids": "T", "input_mask": "T", "segment_ids": "T",
                                "label_ids": "T", "label_mask": "T"}
# The [B, T] entries that dynamic padding cuts along with the encoder's inputs.
_PER_TOKEN = tuple(name for name, shape in NER_FEATURES.items() if shape == "T")


def feature_spec(max_seq_length: int) -> dict:
  """The `tf.io.parse_example` spec of the records: name -> int64 FixedLenFeature."""
  return {name: tf.io.FixedLenFeature([max_seq_length] if shape == "T" else [], tf.int64)
          for name, shape in NER_FEATURES.items()}


# -- Records --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class NerFeatureFile:
  """A written feature file and what it holds (also stored as `<path>.json`)."""

  path: str
  num_windows: int
  num_words: int  # labelled positions
  max_seq_length: int


def _serialize(window: NerWindow) -> bytes:
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  features = {"unique_ids": ints([window.unique_id]), "input_ids": ints(window.input_ids),
              "input_mask": ints(window.input_mask), "segment_ids": ints(window.segment_ids),
              "label_ids": ints(window.label_ids), "label_mask": ints(window.label_mask)}
  assert list(features) == list(NER_FEATURES)
  return tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString()


def write_feature_file(windows: Iterable[NerWindow], path: str) -> NerFeatureFile:
  """Windows -> a TFRecord file at `path` (local or gs://) and its `<path>.json` description, written under a
  temporary name and renamed into place, so a file that exists is complete."""
  writer = records.TFRecordFileWriter(path)
  count = words = max_seq_length = 0
  try:
    for window in windows:
      if max_seq_length and len(window.input_ids) != max_seq_length:
        raise ValueError(f"{path}: window {window.unique_id} has {len(window.input_ids)} ids, the first had "
                         f"{max_seq_length}; write windows of one max_seq_length per file")
      max_seq_length = len(window.input_ids)
      writer.write(_serialize(window))
      count += 1
      words += sum(window.label_mask)
  except BaseException:
    writer.abort()
    raise
  writer.close()
  info = NerFeatureFile(path, count, words, max_seq_length)
  write_description(info)
  return info


def read_feature_file_info(path: str) -> NerFeatureFile | None:
  """The description of a complete feature file at `path`, or None when there is none yet."""
  return read_description(path, NerFeatureFile)


def feature_file_path(features_dir: str, conll_file: str, vocab_file: str, *settings) -> str:
  """Where the features of `conll_file` go under `features_dir`: named by a hash of the data and vocab files'
  contents and of every setting that shapes the windows (casing, T, document context, labels...)."""
  key = feature_file_key(file_fingerprint(conll_file), file_fingerprint(vocab_file), *settings)
  return f"{features_dir.rstrip('/')}/ner/{key}.tfrecord"


def cached_feature_file(path: str, make_windows: Callable[[], Iterable[NerWindow]]) -> tuple[NerFeatureFile, bool]:
  """(the feature file at `path`, True) when a complete one is there; else writes it from `make_windows()`
  -> (it, False)."""
  info = read_feature_file_info(path)
  if info is not None:
    return info, True
  return write_feature_file(make_windows(), path), False


def ner_dataset(path: str, batch_size: int, max_seq_length: int, is_training: bool, input_context=None,
                seed: int = 12345, dynamic_padding: bool = True, pad_to_batch: bool = False,
                length_multiple: int = 1, shuffle_buffer: int = 100_000) -> tf.data.Dataset:
  """Batches of NER windows from a feature file (local or gs://), through the shared
  `common.features.feature_dataset` (arguments as there).

  Returns: dicts of unique_ids int64 [B]; input_ids, input_mask, segment_ids, label_ids, label_mask int32
    [B, T'] (T' <= T: with `dynamic_padding` every [B, T] entry is cut to the batch's longest window, rounded up
    to a multiple of `length_multiple`); is_real_example int32 [B] (0 for `pad_to_batch`'s rows).
  """
  def convert(parsed):
    batch = {k: v if k == "unique_ids" else tf.cast(v, tf.int32) for k, v in parsed.items()}
    batch["is_real_example"] = tf.ones_like(batch["input_mask"][:, 0])
    return batch

  return feature_dataset(path, feature_spec(max_seq_length), convert, batch_size, max_seq_length, is_training,
                         input_context, seed, dynamic_padding, pad_to_batch, length_multiple, shuffle_buffer,
                         per_token=_PER_TOKEN)


# -- Model ----------------------------------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="bert_tf")
class BertTokenClassifier(EncoderHeadModel):
  """The encoder, then dropout and a dense layer on every position of the sequence output: one score per label
  and token.

  Args:
    config, dropout, encoder, dtype: `EncoderHeadModel`'s.
    num_labels: K labels.
  Inputs: dict of int32 [B, T] input_ids, input_mask, segment_ids (other entries are ignored).
  Output: logits float32 [B, T, K] (cast from the compute dtype: they feed a softmax). Padded positions are
    not masked; the loss and predictions read the labelled positions only.
  """

  def __init__(self, config, num_labels: int, dropout: float | None = None, encoder=None, dtype=None, **kwargs):
    if num_labels < 2:
      raise ValueError(f"num_labels={num_labels}: a tagger needs at least O and one entity label")
    super().__init__(config, dropout, encoder, dtype=dtype, **kwargs)
    self.num_labels = num_labels
    self.tag_dropout, self.tag_output = self.output_layers("tag_dropout", "tag_output", num_labels, dtype)

  def call(self, inputs, training=None):
    sequence = self.encoder(select_inputs(inputs, INPUT_NAMES, "BertTokenClassifier"), training=training)
    x = self.tag_dropout(sequence["sequence_output"], training=training)
    return tf.cast(self.tag_output(x), tf.float32)  # [B, T, K]

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels}


def ner_predictions(model: BertTokenClassifier, max_seq_length: int, loss_task: NerTask | None = None) -> Callable:
  """`model` as `finetuning.predict` runs it: features -> float32 [B, T] label ids (the argmax at every
  position, as floats: `predict` casts outputs), padded back to `max_seq_length` after a dynamically padded
  batch so the batches concatenate to [N, T]. Only ids at label_mask positions mean anything.

  With `loss_task` (windows labelled: the evaluation loss), -> (those ids, `finetuning.loss_sums` of the task's
  loss on the logits): for `finetuning.predict(..., with_sums=True)`, which adds the sums up over the pass."""
  from bert_tf.training import finetuning

  def call(features, training=False):
    logits = model(features, training=training)  # [B, T', K]
    ids = tf.argmax(logits, axis=-1, output_type=tf.int32)  # [B, T']
    ids = tf.pad(ids, [[0, 0], [0, max_seq_length - tf.shape(ids)[1]]])
    if loss_task is None:
      return ids
    return ids, finetuning.loss_sums(loss_task, features, logits)

  return call


# -- Task -----------------------------------------------------------------------------------------------------


class NerTask(FineTuningTask):
  """Fine-tuning a `BertTokenClassifier` with the shared trainer on a training feature file (`FineTuningTask`'s
  settings; `num_labels`: K).

  Loss: the mean over the labelled positions of the global batch of the cross-entropy of their label. Reported:
  loss and accuracy (of the labels at those positions).
  """

  read_file = staticmethod(ner_dataset)

  def __init__(self, bert_config, num_labels: int, train_file: str | None, max_seq_length: int, seed: int = 12345,
               dtype: str = "float32", dynamic_padding: bool = True, length_multiple: int = 1):
    super().__init__(bert_config, train_file, max_seq_length, seed, dtype, dynamic_padding, length_multiple)
    self.num_labels = num_labels

  def build_model(self):
    return BertTokenClassifier(self.bert_config, self.num_labels, dtype=self.dtype)

  def normalizers(self, features):
    return {"words": tf.reduce_sum(tf.cast(features["label_mask"], tf.float32))}

  def loss_terms(self, features, outputs):
    weights = tf.cast(features["label_mask"], tf.float32)  # [B, T]
    labels = features["label_ids"]
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=outputs)  # [B, T]
    correct = tf.cast(tf.equal(tf.argmax(outputs, axis=-1, output_type=tf.int32), labels), tf.float32)
    return {"loss_sum": tf.reduce_sum(weights * losses), "correct_sum": tf.reduce_sum(weights * correct)}

  def loss(self, terms, normalizers):
    return terms["loss_sum"] / tf.maximum(normalizers["words"], 1.0)

  def metrics(self, sums):
    return {"accuracy": sums["correct_sum"] / max(sums["words"], 1.0)}
