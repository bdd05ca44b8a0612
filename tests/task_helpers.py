"""Every training task of the shared trainer on tiny random data, for the checks that run them all alike (GPU
kernels, XLA, several replicas): pretraining's records and each fine-tuning task's feature file, its
`trainer.Task`, and a `trainer.Trainer` of it.

  TASKS: pretraining, classifier, squad, ner, swag, ner_feature_based (the frozen encoder's cached layers
  feeding the BiLSTM tagger: --feature_based with --cache_features, its default)
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow as tf

import training_helpers as th

TASKS = ("pretraining", "classifier", "squad", "ner", "swag", "ner_feature_based")
T = th.T  # 13: max_seq_length of every task
NUM_LABELS = 3  # classifier classes and NER labels
EXAMPLES = 24  # per feature file
LEARNING_RATE = 1e-3  # AdamW, 1 warmup step


def _ints(values) -> tf.train.Feature:
  return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in np.ravel(values)]))


def _window(rng) -> dict[str, np.ndarray]:
  """One sequence: [CLS] a [SEP] b [SEP] of random ids, its mask and segments, padded to T."""
  a, b = int(rng.integers(1, 6)), int(rng.integers(1, 5))
  n = a + b + 3
  ids = np.zeros(T, np.int64)
  ids[:n] = [2, *rng.integers(5, th.VOCAB, a), 3, *rng.integers(5, th.VOCAB, b), 3]
  mask = (np.arange(T) < n).astype(np.int64)
  segments = ((np.arange(T) >= a + 2) & (np.arange(T) < n)).astype(np.int64)
  return {"input_ids": ids, "input_mask": mask, "segment_ids": segments}


def _example(task: str, index: int, rng) -> dict[str, np.ndarray | int]:
  if task == "swag":
    from bert_tf.tasks.swag.data import NUM_CHOICES

    choices = [_window(rng) for _ in range(NUM_CHOICES)]
    return {**{k: np.stack([c[k] for c in choices]) for k in choices[0]},
            "label_ids": int(rng.integers(0, NUM_CHOICES)), "is_real_example": 1}
  window = _window(rng)
  n = int(window["input_mask"].sum())
  if task == "classifier":
    return {**window, "label_ids": int(rng.integers(0, NUM_LABELS)), "is_real_example": 1}
  if task == "squad":
    start = int(rng.integers(0, n))
    return {"unique_ids": 1000 + index, **window, "start_positions": start,
            "end_positions": int(rng.integers(start, n))}
  # NER: a label at each word's first piece (here the first token and every other one after it, [SEP]s aside).
  words = (window["input_mask"] > 0) & (window["input_ids"] > 4)
  label_mask = (words & ((np.arange(T) % 2 == 1) | (np.arange(T) == 1))).astype(np.int64)
  labels = np.where(label_mask > 0, rng.integers(0, NUM_LABELS, T), 0)
  return {"unique_ids": 1000 + index, **window, "label_ids": labels, "label_mask": label_mask}


def write_data(task: str, directory) -> str:
  """Tiny random training data of `task` in `directory` -> what `make_task` reads: pretraining's records glob,
  or the feature file (for ner_feature_based, the window file; its layer file is written beside it)."""
  directory = str(directory)
  os.makedirs(directory, exist_ok=True)
  if task == "pretraining":
    return th.write_records(os.path.join(directory, "records"))
  rng = np.random.default_rng(TASKS.index(task))
  path = os.path.join(directory, f"{task}.tfrecord")
  with tf.io.TFRecordWriter(path) as writer:
    for i in range(EXAMPLES):
      features = {k: _ints(v) for k, v in _example("ner" if task == "ner_feature_based" else task, i, rng).items()}
      writer.write(tf.train.Example(features=tf.train.Features(feature=features)).SerializeToString())
  if task == "ner_feature_based":
    _write_layers(path)
  return path


def _layer_path(windows_path: str) -> str:
  return windows_path + ".layers"


def _write_layers(windows_path: str) -> None:
  """The frozen encoder's layers of every window, as --cache_features writes them (a random tiny encoder)."""
  from bert_tf.model.encoder import BertEncoder
  from bert_tf.tasks.ner import feature_based
  from bert_tf.tasks.ner import model as ner_model

  tf.keras.utils.set_random_seed(5)
  windows = ner_model.NerFeatureFile(windows_path, EXAMPLES, 0, T)
  feature_based.write_layer_file(BertEncoder(th.tiny_bert_config()), windows, _layer_path(windows_path), batch_size=8)


def make_task(task: str, data: str, output_dir: str = "", dtype: str = "float32", dynamic_padding: bool = True,
              steps: int = 3, batch: int = 8, accumulation: int = 1, jit_compile: bool = False):
  """`task`'s trainer.Task on `data` (from `write_data`) -> (the task, its TrainerConfig, its optimizer_fn): tiny
  BERT, AdamW on the warmup-then-decay schedule, one progress line per step."""
  from bert_tf.tasks.pretraining.config import PretrainingConfig
  from bert_tf.tasks.pretraining.task import PretrainingTask
  from bert_tf.training import optimization, trainer

  config = th.tiny_bert_config()
  if task == "pretraining":
    run = PretrainingConfig(
        input_file=data, output_dir=output_dir, bert_config=config, max_seq_length=T, max_predictions_per_seq=th.P,
        train_batch_size=batch, num_train_steps=steps, num_warmup_steps=1, learning_rate=LEARNING_RATE, seed=11,
        dtype=dtype, export_encoder=False)
    made = PretrainingTask(run)
  elif task == "classifier":
    from bert_tf.tasks.classification.classifier import ClassificationTask

    made = ClassificationTask(config, NUM_LABELS, data, T, seed=11, dtype=dtype, dynamic_padding=dynamic_padding)
  elif task == "squad":
    from bert_tf.tasks.squad.model import SquadTask

    made = SquadTask(config, data, T, seed=11, dtype=dtype, dynamic_padding=dynamic_padding)
  elif task == "ner":
    from bert_tf.tasks.ner.model import NerTask

    made = NerTask(config, NUM_LABELS, data, T, seed=11, dtype=dtype, dynamic_padding=dynamic_padding)
  elif task == "swag":
    from bert_tf.tasks.swag.model import MultipleChoiceTask

    made = MultipleChoiceTask(config, data, T, seed=11, dtype=dtype, dynamic_padding=dynamic_padding)
  elif task == "ner_feature_based":
    from bert_tf.tasks.common.features import read_description
    from bert_tf.tasks.ner import feature_based

    layers = read_description(_layer_path(data), feature_based.LayerFile)
    made = feature_based.NerFeatureTask(config, NUM_LABELS, "last_hidden", data, T, layers=layers, lstm_units=5,
                                        seed=11, dtype=dtype, dynamic_padding=dynamic_padding)
  else:
    raise ValueError(f"unknown task {task!r}; one of {TASKS}")
  trainer_config = trainer.TrainerConfig(
      output_dir=output_dir, global_batch_size=batch, num_train_steps=steps, gradient_accumulation_steps=accumulation,
      steps_per_loop=steps, save_checkpoints_steps=100, log_steps=1, jit_compile=jit_compile)
  return made, trainer_config, lambda: optimization.create_optimizer("adamw", LEARNING_RATE, steps, 1, dtype=dtype)


def make_trainer(task: str, data: str, output_dir: str, strategy: tf.distribute.Strategy, **kwargs):
  """A `trainer.Trainer` of `make_task(task, data, output_dir, **kwargs)` under `strategy` (seeded alike)."""
  from bert_tf.training import trainer

  tf.keras.utils.set_random_seed(3)
  made, config, optimizer_fn = make_task(task, data, str(output_dir), **kwargs)
  return trainer.Trainer(made, strategy, optimizer_fn, config)
