"""A fine-tuned tagger as transformers' BertForTokenClassification and back (bert_tf.model.convert_tasks):
`tag_output` [H, K] on every token (read at a word's first piece, no CRF) is `classifier.weight` [K, H]; no
pooler; the labels are config.json's id2label. The feature-based tagger (a BiLSTM) has no counterpart."""

from __future__ import annotations

from typing import Any

from bert_tf.model import convert_tasks


def _build(config, settings: dict[str, Any]):
  from bert_tf.tasks.ner.model import BertTokenClassifier

  return BertTokenClassifier(config, len(settings["labels"]), dtype="float32")


def _entity_scheme(labels: list[str]) -> tuple[str, list[str]]:
  """(label_scheme, entity types) of a tagger's labels: IOB2 or BIOES when every label is O or <B|I|E|S>-<type>,
  else plain (a tag set of its own: part of speech, ...)."""
  from bert_tf.tasks.ner import data as ner
  from bert_tf.tasks.ner.metrics import split_tag

  try:
    parts = [split_tag(label) for label in labels]
  except ValueError:
    return ner.PLAIN, []
  types = sorted({kind for _, kind in parts if kind})
  if not types:
    return ner.PLAIN, []
  return ("BIOES" if any(prefix in ("E", "S") for prefix, _ in parts) else "IOB2"), types


def _settings(values: dict, outputs: int, name: str, source: str, longest: int, do_lower_case: bool) -> dict:
  labels = convert_tasks.labels_of(values, outputs, source)
  scheme, types = _entity_scheme(labels)
  return {"labels": labels, "label_scheme": scheme, "types": types, "train_tag_scheme": scheme,
          "max_seq_length": min(128, longest), "do_lower_case": do_lower_case, "document_context": False}


def _label_fields(settings: dict[str, Any]) -> dict[str, Any]:
  return convert_tasks.label_fields(settings["labels"])


def _refusal(settings: dict[str, Any]) -> str | None:
  if settings.get("feature_based"):
    return ("a feature-based NER tagger (--feature_based: a BiLSTM on the frozen encoder's layers) has no Hugging "
            "Face class; convert it to ours or tf1 (the encoder), or fine-tune a tagger without --feature_based")
  return None


KIND = convert_tasks.TaskKind("ner", "ner.json", "ner_model", "run_ner.py", "BertForTokenClassification",
                              "tag_output", "classifier", False, build=_build, hf_settings=_settings,
                              label_fields=_label_fields, refusal=_refusal)
