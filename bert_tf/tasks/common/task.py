"""The trainer's task for one label per example (a sentence's class, a SWAG example's choice, or a score): what
the classification and multiple-choice tasks share; each adds its model (`build_model`) and its input pipeline
(`build_dataset`)."""

from __future__ import annotations

import tensorflow as tf

from bert_tf.training import trainer


class PerExampleTask(trainer.Task):
  """One label per example, on batches with int32 [B] label_ids (float32 [B] with one output: regression) and
  is_real_example (0 for the rows that pad the last evaluation batch).

  Loss: mean cross-entropy over the `num_labels` logits [B, K] (classification; the choices for multiple choice)
  or mean squared error of the scores [B] (`num_labels` = 1: regression) over the real examples of the global
  batch. Reported: loss, accuracy (not for regression).
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
