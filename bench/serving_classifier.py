"""The classifier task of `bench_serving.py`: MRPC pairs in, probabilities out.

Inputs: the first `--requests` pairs of MRPC's train.tsv (real text), max_seq_length 128, lower-cased. Ours:
`classifier_serving.export_classifier`. The peer: `BertForSequenceClassification`, its fast tokenizer with the pair
truncated longest-first to 128, softmax. Answers: each pair's probabilities; compared as labels that differ
(must be 0) and the largest probability difference.
"""

from __future__ import annotations

import numpy as np

import bench_serving

UNIT = "pairs"
MAX_SEQ_LENGTH = 128
LABELS = ("0", "1")  # MRPC's
HF_CLASS = "BertForSequenceClassification"
HEAD_ARGS = {"num_labels": len(LABELS)}
ONNX_OUTPUTS = {"logits": {0: "batch"}}
EXPORT_NAME = "mrpc"
SIGNATURE_OUTPUTS = ("probabilities",)


def read_pairs(data_dir: str, count: int) -> list[tuple[str, str]]:
  """The first `count` sentence pairs of MRPC's train.tsv, with the project's GLUE reader."""
  from bert_tf.tasks.classification import glue

  examples = glue.read_examples("MRPC", data_dir, "train").examples
  if len(examples) < count:
    raise ValueError(f"--requests={count}: {data_dir}/train.tsv has only {len(examples)} pairs")
  return [(e.text_a, e.text_b) for e in examples[:count]]


def read_requests(args, count: int) -> list[tuple[str, str]]:
  return read_pairs(args.data_dir, count)


def our_classifier(hf_config: dict, state: dict[str, np.ndarray]):
  """Our `BertClassifier` with the weights of an HF `BertForSequenceClassification` (config dict, state dict)."""
  import tensorflow as tf

  from bert_tf.model.encoder import INPUT_NAMES
  from bert_tf.tasks.classification.classifier import BertClassifier

  config, encoder = bench_serving.our_encoder(hf_config, state)
  model = BertClassifier(config, len(LABELS), encoder=encoder)
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  model.classifier.set_weights([state["classifier.weight"].T, state["classifier.bias"]])
  return model


def export_ours(hf_config: dict, state: dict[str, np.ndarray], vocab_file: str, export_dir: str) -> None:
  from bert_tf.tasks.classification import serving as classifier_serving
  from bert_tf.tasks.classification.classifier import ClassifierSpec

  spec = ClassifierSpec("MRPC", LABELS, is_pair=True, max_seq_length=MAX_SEQ_LENGTH, do_lower_case=True)
  classifier_serving.export_classifier(our_classifier(hf_config, state), spec, vocab_file, export_dir, EXPORT_NAME,
                                       version=1)


def tf_feed(pairs) -> dict[str, list[str]]:
  return {"sentence1": [a for a, _ in pairs], "sentence2": [b for _, b in pairs]}


def from_tf(outputs: dict) -> list:
  return np.asarray(outputs["probabilities"]).tolist()


def _softmax(logits: np.ndarray) -> np.ndarray:
  e = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def peer_predict(tokenizer, run):
  def predict(pairs):
    features = tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, truncation="longest_first",
                         max_length=MAX_SEQ_LENGTH, return_tensors="np")
    return _softmax(run(features)[0]).tolist()
  return predict


def agreement(reference: list, answers: list) -> dict:
  reference, answers = np.asarray(reference), np.asarray(answers)
  return {"labels_differing": int(np.sum(answers.argmax(-1) != reference.argmax(-1))),
          "max_probability_difference": float(np.abs(answers - reference).max())}
