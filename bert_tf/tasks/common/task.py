"""The trainer's tasks that the fine-tuning tasks share: `FineTuningTask`, the settings of every task that
fine-tunes a BERT encoder on a feature file, and `PerExampleTask`, one label per example (a sentence's class, a SWAG
example's choice, or a score), the classification and multiple-choice tasks' loss. Each task adds its model
(`build_model`) and its input pipeline (`build_dataset`)."""

from __future__ import annotations

import dataclasses
from typing import Any

import tensorflow as tf

from bert_tf.errors import first_line
from bert_tf.training import trainer


@dataclasses.dataclass(eq=False)  # eq=False: tasks compare (and hash) by identity, as trainer.Task does
class FineTuningTask(trainer.Task):
  """A model with a BERT encoder (`model.encoder`), trained on a feature file of the task's records.

  Args:
    bert_config: the encoder's `BertConfig`.
    train_file: the training feature file (None for a task that only computes losses, e.g. of evaluation).
    max_seq_length: T, the file's sequence length.
    seed: the input pipeline's shuffle seed.
    dtype: the model's Keras dtype policy ("float32", "mixed_float16", ...).
    dynamic_padding: batches cut to their longest sequence, rounded up to a multiple of `length_multiple`.
  The training batches are `read_file`'s; checkpoints hold the model and, on its own, the encoder (what
  --init_checkpoint of a later run reads).
  """

  bert_config: Any
  train_file: str | None
  max_seq_length: int
  seed: int = 12345
  dtype: str = "float32"
  dynamic_padding: bool = True
  length_multiple: int = 8

  @staticmethod
  def read_file(path: str, batch_size: int, max_seq_length: int, is_training: bool, **options) -> tf.data.Dataset:
    """The task's feature file at `path` -> batches (`ner_dataset`, `squad_dataset`, ...: set it to the task's)."""
    raise NotImplementedError

  def build_dataset(self, batch_size, input_context):
    return self.read_file(self.train_file, batch_size, self.max_seq_length, is_training=True,
                          input_context=input_context, seed=self.seed, dynamic_padding=self.dynamic_padding,
                          length_multiple=self.length_multiple)

  def checkpoint_items(self, model):
    return {"model": model, "encoder": model.encoder}

  def training_file(self) -> str:
    """The file the training batches are read from: `train_file`, the task's feature file."""
    return self.train_file

  def input_error(self, error):
    """The training file's damaged record, found by reading it again and checking every CRC (TensorFlow's
    message, "Graph execution error", names neither file nor record), else the file and TensorFlow's first line."""
    from bert_tf.data import records

    path = self.training_file()
    try:
      found = records.find_corrupt_record([path])
    except (OSError, ValueError, tf.errors.OpError):  # gone or unreadable now: TensorFlow's words must do
      found = None
    return found or f"{path}: {first_line(error)}"

  def input_fix(self, latest):
    """The training file is a cache of the task's data (`common.features`), written again where it is missing, with
    the same records: the run record binds the data, not the cache, so the same command goes on."""
    then = f"resumes from {latest}" if latest else "starts the run (no step was saved)"
    return (f"it is a cache made from the training data: remove it and rerun the same command, which writes it "
            f"again and {then}")


class PerExampleTask(FineTuningTask):
  """One label per example, on batches with int32 [B] label_ids (float32 [B] with one output: regression) and
  is_real_example (0 for the rows that pad the last evaluation batch).

  Loss: mean cross-entropy over the `num_labels` logits [B, K] (classification; the choices for multiple choice)
  or mean squared error of the scores [B] (`num_labels` = 1: regression) over the real examples of the global
  batch. Reported: loss, accuracy (not for regression).
  """

  def __init__(self, bert_config, num_labels: int, train_file: str | None, max_seq_length: int, seed: int = 12345,
               dtype: str = "float32", dynamic_padding: bool = True, length_multiple: int = 8):
    super().__init__(bert_config, train_file, max_seq_length, seed, dtype, dynamic_padding, length_multiple)
    self.num_labels = num_labels
    self.is_regression = num_labels == 1

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
