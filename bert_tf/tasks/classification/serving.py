"""The fine-tuned classifier's SavedModel for TensorFlow Serving: raw text in, labels out, through the shared
export path (`bert_tf.export.serving.export_servable`: versioned layout, atomic write, warmup, op audit, manifest).

The tokenizer runs in the graph (`GraphTokenizer` + `encode_graph`, the same ids as the records the model was
trained on), so a client sends sentences, not ids, and cannot get the vocabulary, lower-casing or truncation
wrong. Signatures (B: batch, T: max_seq_length of the spec, K: labels):

  serving_default  sentence1 tf.string [B] (and sentence2 tf.string [B] for pair tasks)
  encoded          input_ids, input_mask, segment_ids int32 [B, L], L <= max_position_embeddings
  outputs          probabilities float32 [B, K], label_id int32 [B], label tf.string [B]  (classification)
                   score float32 [B]                                                      (regression)

Bad requests become InvalidArgument errors (TF Serving answers HTTP 400 / gRPC INVALID_ARGUMENT), never a
crash: the signatures reject missing inputs and wrong dtypes, in-graph asserts reject mismatched batch sizes,
out-of-range ids and over-long sequences (on GPUs an out-of-range gather returns zeros silently, so the
checks are not redundant), as are invalid UTF-8, an empty or blank sentence (training refuses one too: the row is
named) and a field over the export's max_request_chars (`limits`). Long text is truncated to T. Each batch runs at
its own length (`serving.trim_padding`), a slice of rows at a time, with the outputs of padding to T within 1e-6.
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import tensorflow as tf

from bert_tf.export import serving
from bert_tf.model import checkpoints
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.classification.classifier import BertClassifier, ClassifierSpec, load_classifier
from bert_tf.tasks.common.features import encode_graph
from bert_tf.tasks.common.folder import float32_copy
from bert_tf.tasks.common.serving import TaskServer

TEXT_INPUTS = ("sentence1", "sentence2")
# Used when the caller gives no warmup texts: generic English, enough to run every op once.
DEFAULT_WARMUP_TEXTS: tuple[tuple[str, str], ...] = (
    ("The quick brown fox jumps over the lazy dog.", "A dog sleeps in the sun."),
    ("Is this sentence a question?", "No, it is not."),
)


class _ClassifierServer(TaskServer):
  """The SavedModel's root (`TaskServer`): a float32 classifier, its tokenizer and the serving functions.

  Also saved (not a signature, so TF Serving does not expose it): `encode_text`, the text signature's inputs
  -> int32 [B, T] input_ids, input_mask, segment_ids, for debugging what the model sees (as the records
  have them: padded to T; both signatures cut the batch to its longest sequence first, `serving.trim_padding`).
  """

  def __init__(self, model: BertClassifier, spec: ClassifierSpec, vocab_file: str,
               max_request_chars: int | None = None):
    super().__init__("bert_classifier_server", model, vocab_file, spec.do_lower_case,
                     max_request_chars=max_request_chars)
    self.spec = spec
    self._max_seq_length = spec.max_seq_length
    # A one-entry placeholder for regression keeps the attribute's type fixed; it is never read there.
    self._labels = tf.constant(list(spec.labels) or [""], tf.string)
    text_specs = [tf.TensorSpec([None], tf.string, name=name) for name in TEXT_INPUTS[:1 + spec.is_pair]]
    text_fn = self._serve_pair if spec.is_pair else self._serve_single
    encode_fn = self._encode_pair if spec.is_pair else self._encode_single
    self.serve_text = tf.function(text_fn, input_signature=text_specs)
    self.encode_text = tf.function(encode_fn, input_signature=text_specs)
    id_specs = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]
    self.serve_encoded = tf.function(self._serve_encoded, input_signature=id_specs)

  # -- text -> features

  def _encode_single(self, sentence1):
    return encode_graph(self.tokenizer, self.checked_text("sentence1", sentence1), None, self._max_seq_length)

  def _encode_pair(self, sentence1, sentence2):
    check = tf.debugging.assert_equal(
        tf.size(sentence1), tf.size(sentence2),
        message="sentence1 and sentence2 must hold the same number of examples (one sentence2 per sentence1)")
    with tf.control_dependencies([check]):  # Nothing downstream runs on mismatched batches.
      sentence1, sentence2 = self.checked_text("sentence1", sentence1), self.checked_text("sentence2", sentence2)
    return encode_graph(self.tokenizer, sentence1, sentence2, self._max_seq_length)

  # -- signatures

  def _serve_single(self, sentence1):
    return self._outputs(self._encode_single(sentence1))

  def _serve_pair(self, sentence1, sentence2):
    return self._outputs(self._encode_pair(sentence1, sentence2))

  def _serve_encoded(self, input_ids, input_mask, segment_ids):
    return self._outputs(serving.checked_encoded_inputs(self._model.config, input_ids, input_mask, segment_ids))

  def _outputs(self, features: dict[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    features = serving.trim_padding(features)  # [B, L]: the pooled output does not depend on padding
    # Nor on the padded rows (a batch of requests skips their work); a slice of rows at a time.
    outputs = self.run_model(features, {"logits": tf.float32},
                             lambda output: {"logits": tf.cast(output, tf.float32)})["logits"]  # [B, K], or [B]
    if self.spec.is_regression:
      return {"score": outputs}
    label_id = tf.argmax(outputs, axis=-1, output_type=tf.int32)  # From logits, as evaluation does.
    return {"probabilities": tf.nn.softmax(outputs, axis=-1), "label_id": label_id,
            "label": tf.gather(self._labels, label_id)}


def _warmup_instances(spec: ClassifierSpec, texts: Sequence[tuple[str, str | None]]) -> list[dict[str, str]]:
  if not texts:
    texts = [(a, b if spec.is_pair else None) for a, b in DEFAULT_WARMUP_TEXTS]
  instances = []
  for i, (text_a, text_b) in enumerate(texts):
    if spec.is_pair and text_b is None:
      raise ValueError(f"warmup_texts[{i}]: task {spec.task_name!r} takes sentence pairs; give (text_a, text_b)")
    if not spec.is_pair and text_b is not None:
      raise ValueError(f"warmup_texts[{i}]: task {spec.task_name!r} takes single sentences; give (text_a, None)")
    instances.append({"sentence1": text_a, **({"sentence2": text_b} if spec.is_pair else {})})
  return instances


def classifier_manifest(spec: ClassifierSpec) -> dict[str, Any]:
  """The classifier's own manifest fields (`serving.export_servable` adds the common ones)."""
  return {
      "task": spec.task_name,
      "task_kind": "regression" if spec.is_regression else "classification",
      "labels": list(spec.labels),
      "is_regression": spec.is_regression,
      "is_pair": spec.is_pair,
      "max_seq_length": spec.max_seq_length,
      "do_lower_case": spec.do_lower_case,
  }


def export_classifier(model: BertClassifier, spec: ClassifierSpec, vocab_file: str, export_dir: str,
                      model_name: str, version: int | None = None,
                      warmup_texts: Sequence[tuple[str, str | None]] = (), config_source: str | None = None,
                      max_request_chars: int | None = None) -> str:
  """Writes `<export_dir>/<model_name>/<version>/` for TensorFlow Serving (`serving.export_servable`); returns that
  path.

  Args:
    model: a fine-tuned `BertClassifier` of any dtype policy; a float32 copy is exported.
    spec: the task: labels (in id order; () for regression), is_pair, max_seq_length, do_lower_case.
    vocab_file: the vocabulary the model was trained with.
    export_dir: TF Serving's model root (local or gs://).
    model_name: the name clients use (REST URL, gRPC model_spec.name); a folder name, no "/".
    version: a positive integer; None takes 1 + the largest existing version (or 1). An existing version is
      never overwritten.
    warmup_texts: (text_a, text_b) pairs (text_b None for single-sentence tasks) for the warmup requests;
      default a couple of generic sentences.
    config_source: the model's bert_config.json, named when the vocabulary does not fit the model
      (`handoff.check_vocab_fits`).
    max_request_chars: a request whose sentence1 (or sentence2) field holds more characters, the batch's
      together, is refused (`limits`).
  """
  serving.check_name_and_version(model_name, version)
  serving.check_export_dir(export_dir, model_name)
  if model.num_labels != spec.num_labels:
    raise ValueError(f"the model has {model.num_labels} outputs but the spec of {spec.task_name!r} has "
                     f"{spec.num_labels} labels; pass the spec the model was trained with")
  if spec.max_seq_length > model.config.max_position_embeddings:
    raise ValueError(f"max_seq_length={spec.max_seq_length} exceeds the model's max_position_embeddings="
                     f"{model.config.max_position_embeddings}")
  warmup = serving.check_warmup_instances(_warmup_instances(spec, warmup_texts), TEXT_INPUTS[:1 + spec.is_pair])
  checkpoints.check_vocab_fits(vocab_file, model.config, config_source, flag=None)
  server = _ClassifierServer(float32_copy(model), spec, vocab_file, max_request_chars)
  return server.export(export_dir, model_name, version, warmup, classifier_manifest(spec), vocab_file)


def export_from_directory(classifier_dir: str, export_dir: str, model_name: str | None = None,
                          version: int | None = None, warmup_texts: Sequence[tuple[str, str | None]] = (),
                          max_request_chars: int | None = None) -> str:
  """`export_classifier` of a classifier folder written by `save_classifier`; returns the version's path.
  `model_name` defaults to the task's name in lower case."""
  serving.check_export_dir(export_dir, model_name or "")
  from bert_tf.model import released

  classifier_dir = released.task_model_dir(classifier_dir)  # A Hugging Face classifier: ours converted from it.
  model, spec, vocab_file = load_classifier(classifier_dir)
  return export_classifier(model, spec, vocab_file, export_dir, model_name or spec.task_name.lower(), version,
                           warmup_texts, config_source=os.path.join(classifier_dir, "bert_config.json"),
                           max_request_chars=max_request_chars)
