"""Feature-based NER, the paper's section 5.3 (Table 7): the pretrained encoder is frozen, one of its feature
choices (bert_tf.tasks.common.layer_choice) feeds a two-layer bidirectional LSTM, and a dense layer scores each
word's first piece. The windows, labels, loss and metric are the fine-tuning mode's (`ner.data`, `ner.model`,
`ner.metrics`).

  windows --frozen BertEncoder (training=False: no dropout)--> [embeddings, layer 1, ..., layer L]
          --FeatureChoice--> [B, T, H'] --BiLSTM(u) x 2--> [B, T, 2u] --dropout, dense--> logits [B, T, K]

u = `lstm_units`, by default the encoder's H (the paper: 768 units on BERT-base, H = 768).

Because the encoder never changes, its layer outputs can be computed once per window and cached, as the paper's
feature-based setting allows: `write_layer_file` runs the encoder over a window feature file and stores every
layer of every real token, and `layer_dataset` reads them back. `BertFeatureTagger` takes either form of input
(windows, or cached layers under "layers"), so the same model trains on the cache and predicts on either.

Layer records (n = the window's real tokens, [CLS] and [SEP] included; L + 1 = the embeddings and L layers):

  unique_ids   int64 []               the window's index in its file
  label_ids    int64 [n]              as in the window feature file
  label_mask   int64 [n]
  layers       bytes                  float32 [n, L + 1, H], tf.io.serialize_tensor
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Callable

import keras
import numpy as np
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.data import records
from bert_tf.model.encoder import INPUT_NAMES, BertConfigModel, BertEncoder, select_inputs
from bert_tf.model.layers import Dropout16, in_xla_context, truncated_normal
from bert_tf.tasks.common import layer_choice as feature_choice
from bert_tf.tasks.common.features import feature_file_key, read_description, write_description
from bert_tf.tasks.ner import model as nf

LAYERS_KEY = "layers"  # the cached input's entry: float32 [B, T, L + 1, H]


# -- The model ------------------------------------------------------------------------------------------------


def _as_outputs(layers) -> dict:
  """Cached layers [B, T, L + 1, H] -> the encoder's outputs dict that `FeatureChoice` reads."""
  count = layers.shape[2]
  return {"embedding_output": layers[:, :, 0], "encoder_outputs": [layers[:, :, i] for i in range(1, count)]}


@keras.saving.register_keras_serializable(package="bert_tf")
class BertFeatureTagger(BertConfigModel, keras.Model):
  """A frozen encoder's features (one of `feature_choice.CHOICES`) through a two-layer BiLSTM and a dense layer.

  Args:
    config: the encoder's `BertConfig` (or its dict).
    num_labels: K labels.
    choice: the feature choice.
    lstm_units: u, units of each LSTM direction; default the config's hidden_size.
    dropout: on the BiLSTM's output, before the dense layer; default the config's hidden_dropout_prob.
    encoder: an existing `BertEncoder`; default a new one. It is made non-trainable.
  Inputs: a dict with int32 [B, T] input_mask and either input_ids and segment_ids (the encoder runs, always
    in inference mode) or `LAYERS_KEY`: float [B, T, L + 1, H], the encoder's outputs cached by
    `write_layer_file` (the encoder is skipped). Other entries are ignored.
  Output: logits float32 [B, T, K]. Padded positions are masked in the LSTMs (the backward direction starts at
    the last real token); their logits mean nothing.
  """

  def __init__(self, config, num_labels: int, choice: str, lstm_units: int | None = None,
               dropout: float | None = None, encoder=None, dtype=None, **kwargs):
    super().__init__(dtype=dtype, **kwargs)
    if isinstance(config, dict):
      config = BertConfig.from_dict(config, source="BertFeatureTagger config")
    if num_labels < 2:
      raise ValueError(f"num_labels={num_labels}: a tagger needs at least O and one entity label")
    feature_choice.check_choice(choice, config.num_hidden_layers)
    self.config = config
    self.num_labels = num_labels
    self.choice = choice
    self.lstm_units = lstm_units or config.hidden_size
    self.dropout_rate = config.hidden_dropout_prob if dropout is None else dropout
    self.encoder = encoder if encoder is not None else BertEncoder(config, dtype=dtype, name="encoder")
    self.encoder.trainable = False  # the feature-based setting: no gradient reaches it, no optimizer slots
    self.features = feature_choice.FeatureChoice(choice, config.num_hidden_layers, dtype=dtype, name="features")
    self.lstm_1 = keras.layers.Bidirectional(keras.layers.LSTM(self.lstm_units, return_sequences=True, dtype=dtype),
                                             dtype=dtype, name="lstm_1")
    self.lstm_2 = keras.layers.Bidirectional(keras.layers.LSTM(self.lstm_units, return_sequences=True, dtype=dtype),
                                             dtype=dtype, name="lstm_2")
    self.tag_dropout = Dropout16(self.dropout_rate, dtype=dtype, name="tag_dropout")
    self.tag_output = keras.layers.Dense(num_labels, kernel_initializer=truncated_normal(config.initializer_range),
                                         dtype=dtype, name="tag_output")

  def encoder_outputs(self, inputs) -> dict:
    """The encoder's outputs dict for `inputs` (windows or cached layers), computed without dropout."""
    if LAYERS_KEY in inputs:
      return _as_outputs(tf.cast(inputs[LAYERS_KEY], self.compute_dtype))
    return self.encoder(select_inputs(inputs, INPUT_NAMES, "BertFeatureTagger"), training=False)

  def call(self, inputs, training=None):
    outputs = self.encoder_outputs(inputs)
    x = self.features(outputs)  # [B, T, H']
    mask = tf.cast(inputs["input_mask"][:, :tf.shape(x)[1]], tf.bool)  # [B, T]
    # On a GPU Keras runs the LSTMs as cuDNN's kernel, which refuses a fully masked row: the rows of padding that
    # fill evaluation batches (pad_to_batch) keep their first position. A real window always has it ([CLS]), so
    # nothing changes for them; a padding row's outputs are dropped.
    mask = tf.logical_or(mask, tf.range(tf.shape(mask)[1]) < 1)
    # cuDNN's LSTM kernel has no XLA form: in an XLA-compiled step (--jit_compile, TPUs) the LSTMs run as Keras'
    # own loop, which XLA compiles. Decided as each step is traced.
    for lstm in (self.lstm_1, self.lstm_2):
      lstm.forward_layer.use_cudnn = lstm.backward_layer.use_cudnn = "auto" if not in_xla_context() else False
    x = self.lstm_1(x, mask=mask, training=training)  # [B, T, 2u]
    x = self.lstm_2(x, mask=mask, training=training)  # [B, T, 2u]
    # A new tensor without the Keras mask the LSTM attached (Dropout16 would warn that it drops it): the loss
    # and predictions read the labelled positions only.
    x = self.tag_dropout(tf.identity(x), training=training)
    return tf.cast(self.tag_output(x), tf.float32)  # [B, T, K]

  def get_config(self):
    return {**super().get_config(), "num_labels": self.num_labels, "choice": self.choice,
            "lstm_units": self.lstm_units, "dropout": self.dropout_rate}


def build(model: BertFeatureTagger) -> BertFeatureTagger:
  """Creates `model`'s variables (encoder and head) with a call on a [1, 2] window; returns it."""
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  return model


# -- Cached layers --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class LayerFile:
  """A written layer file and what it holds (also stored as `<path>.json`)."""

  path: str
  num_windows: int
  num_words: int  # labelled positions
  num_layers: int  # L + 1
  hidden_size: int
  max_seq_length: int
  windows_file: str  # the window feature file it was computed from
  encoder_fingerprint: str


def encoder_fingerprint(encoder: BertEncoder) -> str:
  """SHA-256 of the encoder's config, dtype policy and float32 weights: cached layers are named by the weights
  that made them, so other weights (another checkpoint, another epoch of pretraining) never read stale features.
  Not the weights' names, which carry the model's (Keras makes `bert_encoder_1` of a second encoder)."""
  # The compute dtype too: a mixed-precision encoder's layers differ from a float32 one's.
  described = [encoder.config.to_dict(), encoder.dtype_policy.name]
  digest = hashlib.sha256(json.dumps(described, sort_keys=True).encode())
  for weight in encoder.weights:
    digest.update(str(tuple(weight.shape)).encode())
    digest.update(np.ascontiguousarray(np.asarray(weight.numpy(), np.float32)).tobytes())
  return digest.hexdigest()[:16]


def layer_file_path(features_dir: str, windows_file: str, fingerprint: str) -> str:
  """Where the layers of the window feature file `windows_file` (named by its settings' hash) computed by the
  encoder `fingerprint` go under `features_dir`."""
  key = feature_file_key(windows_file.rsplit("/", 1)[-1], fingerprint)
  return f"{features_dir.rstrip('/')}/ner_layers/{key}.tfrecord"


def _serialize(unique_id: int, label_ids, label_mask, layers) -> bytes:
  def ints(values):
    return tf.train.Feature(int64_list=tf.train.Int64List(value=values))

  feature = {"unique_ids": ints([unique_id]), "label_ids": ints(label_ids), "label_mask": ints(label_mask),
             LAYERS_KEY: tf.train.Feature(bytes_list=tf.train.BytesList(
                 value=[tf.io.serialize_tensor(tf.constant(layers, tf.float32)).numpy()]))}
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def write_layer_file(encoder: BertEncoder, windows: nf.NerFeatureFile, path: str, batch_size: int = 32,
                     fingerprint: str | None = None, say: Callable[[str], None] = lambda line: None) -> LayerFile:
  """Runs the frozen `encoder` (inference mode, float32 outputs) over every window of the feature file `windows`
  and writes each window's layers at its real tokens to `path` (and `<path>.json`), under a temporary name
  renamed into place, so a file that exists is complete."""
  dataset = nf.ner_dataset(windows.path, batch_size, windows.max_seq_length, is_training=False,
                           dynamic_padding=True)

  @tf.function(reduce_retracing=True)
  def layers_of(batch):
    outputs = encoder(select_inputs(batch, INPUT_NAMES, "write_layer_file"), training=False)
    return tf.cast(tf.stack(feature_choice.stacked_outputs(outputs), axis=2), tf.float32)  # [B, T', L+1, H]

  writer = records.TFRecordFileWriter(path)
  count = words = 0
  try:
    for batch in dataset:
      layers = layers_of(batch).numpy()
      lengths = batch["input_mask"].numpy().sum(axis=1)
      ids, labels, masks = (batch[k].numpy() for k in ("unique_ids", "label_ids", "label_mask"))
      for row, n in enumerate(lengths):
        writer.write(_serialize(int(ids[row]), labels[row, :n], masks[row, :n], layers[row, :n]))
        words += int(masks[row, :n].sum())
      count += len(lengths)
      if count % (50 * batch_size) < batch_size:
        say(f"{path}: layers of {count}/{windows.num_windows} windows")
  except BaseException:
    writer.abort()
    raise
  writer.close()
  if count != windows.num_windows:
    raise ValueError(f"{windows.path}: read {count} windows, its description says {windows.num_windows}; remove "
                     "it to have it written again")
  config = encoder.config
  info = LayerFile(path, count, words, config.num_hidden_layers + 1, config.hidden_size, windows.max_seq_length,
                   windows.path, fingerprint or encoder_fingerprint(encoder))
  write_description(info)
  return info


def cached_layer_file(encoder: BertEncoder, windows: nf.NerFeatureFile, features_dir: str, batch_size: int = 32,
                      say: Callable[[str], None] = lambda line: None) -> tuple[LayerFile, bool]:
  """(the layer file of `windows` under `features_dir` computed by `encoder`, True) when a complete one is there;
  else writes it -> (it, False)."""
  fingerprint = encoder_fingerprint(encoder)
  path = layer_file_path(features_dir, windows.path, fingerprint)
  info = read_description(path, LayerFile)
  if info is not None:
    return info, True
  return write_layer_file(encoder, windows, path, batch_size, fingerprint, say), False


# Training batches group windows of similar length (at most 8, 16, 24, ... tokens): an LSTM runs a step for
# every position of the batch, padding included, and random batches of sentences are mostly padding.
LENGTH_BUCKETS = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384)


def layer_dataset(info: LayerFile, batch_size: int, is_training: bool, input_context=None, seed: int = 12345,
                  pad_to_batch: bool = False, shuffle_buffer: int = 4096, length_multiple: int = 1,
                  static_length: bool = False) -> tf.data.Dataset:
  """Batches of a layer file, each padded to its longest window, rounded up to a multiple of `length_multiple`
  (at most the file's max_seq_length; under XLA each length is a compilation); with `static_length` (TPUs, which
  need static shapes) every batch is padded to max_seq_length.

  Training shards by `input_context`, shuffles (seeded; `shuffle_buffer` windows of serialized layers, about
  (L + 1) H 4 bytes a token each, are held in memory and in the trainer's checkpoints of the input) and repeats,
  full batches of windows of similar length (`LENGTH_BUCKETS`); evaluation is one pass in file order, with
  `pad_to_batch` appending all-zero rows so every batch is full.

  Returns: dicts of unique_ids int64 [B]; `LAYERS_KEY` float32 [B, T', L + 1, H]; input_mask, label_ids,
    label_mask int32 [B, T']; is_real_example int32 [B] (0 for `pad_to_batch`'s rows).
  """
  spec = {"unique_ids": tf.io.FixedLenFeature([], tf.int64), "label_ids": tf.io.VarLenFeature(tf.int64),
          "label_mask": tf.io.VarLenFeature(tf.int64), LAYERS_KEY: tf.io.FixedLenFeature([], tf.string)}
  shape = [None, info.num_layers, info.hidden_size]

  def parse(serialized):
    parsed = tf.io.parse_single_example(serialized, spec)
    layers = tf.ensure_shape(tf.io.parse_tensor(parsed[LAYERS_KEY], tf.float32), shape)  # [n, L+1, H]
    labels = tf.cast(tf.sparse.to_dense(parsed["label_ids"]), tf.int32)
    return {"unique_ids": parsed["unique_ids"], LAYERS_KEY: layers,
            "input_mask": tf.ones_like(labels), "label_ids": labels,
            "label_mask": tf.cast(tf.sparse.to_dense(parsed["label_mask"]), tf.int32),
            "is_real_example": tf.constant(1, tf.int32)}

  d = tf.data.TFRecordDataset([info.path])
  if input_context is not None and input_context.num_input_pipelines > 1:
    d = d.shard(input_context.num_input_pipelines, input_context.input_pipeline_id)
  if is_training:
    d = d.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
  d = d.map(parse, num_parallel_calls=tf.data.AUTOTUNE)
  if is_training:
    boundaries = [b + 1 for b in LENGTH_BUCKETS if b < info.max_seq_length]  # bucket i: lengths < boundaries[i]
    d = d.bucket_by_sequence_length(lambda w: tf.shape(w["input_mask"])[0], boundaries,
                                    [batch_size] * (len(boundaries) + 1), drop_remainder=True)
  else:
    d = d.padded_batch(batch_size)
  if pad_to_batch and not is_training:
    def pad(batch):
      n = batch_size - tf.shape(batch["input_mask"])[0]
      return {k: tf.pad(v, [[0, n]] + [[0, 0]] * (v.shape.rank - 1)) for k, v in batch.items()}

    d = d.map(pad)
  if static_length or length_multiple > 1:
    def pad_length(batch):
      length = tf.shape(batch["input_mask"])[1]
      target = info.max_seq_length if static_length else tf.minimum(
          (length + length_multiple - 1) // length_multiple * length_multiple, info.max_seq_length)
      padded = {k: tf.pad(v, [[0, 0], [0, target - length]] + [[0, 0]] * (v.shape.rank - 2)) if v.shape.rank >= 2
                else v for k, v in batch.items()}
      if static_length:  # full batches (training, pad_to_batch) say so in their static shape too
        rows = batch_size if is_training or pad_to_batch else None
        padded = {k: tf.ensure_shape(v, [rows] + ([info.max_seq_length] if v.shape.rank >= 2 else []) + v.shape[2:])
                  for k, v in padded.items()}
      return padded

    d = d.map(pad_length)
  return d.prefetch(tf.data.AUTOTUNE)


# -- Task -----------------------------------------------------------------------------------------------------


class NerFeatureTask(nf.NerTask):
  """Training a `BertFeatureTagger` with the shared trainer: the fine-tuning task's loss and metrics, a frozen
  encoder, and as input either a layer file (`layers`, the encoder skipped) or the window feature file."""

  def __init__(self, bert_config, num_labels: int, choice: str, train_file: str, max_seq_length: int,
               layers: LayerFile | None = None, lstm_units: int | None = None, seed: int = 12345,
               dtype: str = "float32", dynamic_padding: bool = True, length_multiple: int = 1):
    super().__init__(bert_config, num_labels, train_file, max_seq_length, seed=seed, dtype=dtype,
                     dynamic_padding=dynamic_padding, length_multiple=length_multiple)
    feature_choice.check_choice(choice, bert_config.num_hidden_layers)
    self.choice = choice
    self.layers = layers
    self.lstm_units = lstm_units

  def build_model(self):
    return BertFeatureTagger(self.bert_config, self.num_labels, self.choice, lstm_units=self.lstm_units,
                             dtype=self.dtype)

  def build_dataset(self, batch_size, input_context):
    if self.layers is None:
      return super().build_dataset(batch_size, input_context)
    return layer_dataset(self.layers, batch_size, is_training=True, input_context=input_context, seed=self.seed,
                         length_multiple=self.length_multiple, static_length=not self.dynamic_padding)

  def training_file(self):
    return super().training_file() if self.layers is None else self.layers.path
