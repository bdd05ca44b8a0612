"""Reading pretraining records back as text and statistics, for `scripts/inspect_tfrecords.py` and the main job."""

from __future__ import annotations

from typing import Iterator, Mapping, Sequence

import numpy as np

from bert_tf.data import records


def decode_instance(features: Mapping[str, np.ndarray], inv_vocab: Mapping[int, str]) -> str:
  """One parsed record (numpy arrays) -> readable text: tokens with each masked position shown as
  `[MASK](original)`, `(~original)` for a kept one and `random(original)` for a random replacement."""
  mask = features["input_mask"]
  length = int(mask.sum())
  ids = features["input_ids"][:length]
  tokens = [inv_vocab.get(int(i), f"<{int(i)}>") for i in ids]
  lines = []
  if "masked_lm_positions" in features:
    weights = features["masked_lm_weights"]
    for position, original in zip(features["masked_lm_positions"][weights > 0],
                                  features["masked_lm_ids"][weights > 0]):
      original_token = inv_vocab.get(int(original), f"<{int(original)}>")
      shown = tokens[position]
      if shown == "[MASK]":
        tokens[position] = f"[MASK]({original_token})"
      elif int(ids[position]) == int(original):
        tokens[position] = f"(~{original_token})"
      else:
        tokens[position] = f"{shown}({original_token})"
  segment_b = int(np.argmax(features["segment_ids"][:length])) if features["segment_ids"][:length].any() else 0
  label = "random B" if int(features["next_sentence_labels"][0]) else "B follows A"
  lines.append(f"next_sentence_labels={int(features['next_sentence_labels'][0])} ({label}); "
               f"{length} tokens, B starts at {segment_b}")
  lines.append(" ".join(tokens))
  return "\n".join(lines)


def check_vocabulary(files: Sequence[str], vocab: Mapping[str, int], vocab_file: str) -> None:
  """Raises ValueError when the records of `files` cannot have been made with `vocab` (read from `vocab_file`):
  a token id past its size (among the records `records.check_record_files` samples), or a first record that
  does not start with its [CLS], as every pretraining instance does. Decoded with another vocabulary, records
  print as plausible nonsense ("[unused112] ...")."""
  fix = "pass the vocabulary the records were made with"
  infos = records.check_record_files(files)
  worst = max(infos, key=lambda info: info.max_token_id)
  if worst.max_token_id >= len(vocab):
    raise ValueError(f"{worst.path}: records hold token id {worst.max_token_id} but --vocab_file={vocab_file} has "
                     f"{len(vocab)} tokens; {fix}")
  first = next(iter_parsed(files[:1]), None)
  if first is not None and first["input_mask"][0]:
    cls_id = vocab.get("[CLS]")
    token = {i: t for t, i in vocab.items()}.get(int(first["input_ids"][0]))
    if int(first["input_ids"][0]) != cls_id:
      raise ValueError(f"{files[0]}: the first record starts with id {int(first['input_ids'][0])}, which is "
                       f"{token!r} in --vocab_file={vocab_file}, not [CLS] (id {cls_id}); {fix}")


def iter_parsed(files: Sequence[str]) -> Iterator[dict]:
  """Parsed records of `files` as dicts of numpy arrays; the record shape is read from the first file."""
  max_seq_length, max_predictions, dynamic = records.infer_record_shape(files[0])
  dataset = records.read_pretraining_dataset(list(files), max_seq_length, max_predictions, dynamic)
  for example in dataset.as_numpy_iterator():
    yield example


def file_statistics(files: Sequence[str]) -> dict:
  """Counts over every record of `files`: records per file, tokens, masked fraction, NSP balance, shape. A damaged
  record (which the up-front check, reading a sample, may not have read) is a ValueError naming its file and index,
  where TensorFlow's DataLossError names neither."""
  import tensorflow as tf

  try:
    return _statistics(files)
  except tf.errors.DataLossError as e:
    from bert_tf.errors import first_line

    found = records.find_corrupt_record(files) or f"{', '.join(files)}: {first_line(e)}"
    raise ValueError(f"{found}; recreate the file with create_pretraining_data.py, or leave it out of "
                     "--input_file") from None


def _statistics(files: Sequence[str]) -> dict:
  import tensorflow as tf

  per_file = {path: sum(1 for _ in tf.data.TFRecordDataset([path])) for path in files}
  max_seq_length, max_predictions, dynamic = records.infer_record_shape(files[0])
  total = tokens = masked = random_next = 0
  for example in iter_parsed(files):
    total += 1
    tokens += int(example["input_mask"].sum())
    if not dynamic:
      masked += int((example["masked_lm_weights"] > 0).sum())
    random_next += int(example["next_sentence_labels"][0])
  return {
      "records": total,
      "records_per_file": per_file,
      "max_seq_length": max_seq_length,
      "max_predictions_per_seq": max_predictions,
      "dynamic_masking": dynamic,
      "mean_tokens": tokens / max(total, 1),
      "masked_fraction": masked / max(tokens, 1),
      "next_sentence_random_fraction": random_next / max(total, 1),
  }
