"""A fine-tuned classifier as transformers' BertForSequenceClassification and back (bert_tf.model.convert_tasks):
`classifier` [H, K] on the pooled [CLS] is `classifier.weight` [K, H]; K = 1 is a regression
(problem_type "regression"); the labels are config.json's id2label."""

from __future__ import annotations

import re
from typing import Any

from bert_tf.model import convert_tasks


def _build(config, settings: dict[str, Any]):
  from bert_tf.tasks.classification.classifier import BertClassifier

  return BertClassifier(config, len(settings["labels"]) or 1, dtype="float32")


def _task_name(values: dict, name: str) -> tuple[str, bool | None]:
  """(a classifier's task name, whether it takes pairs when known): a GLUE task's when config.json's
  finetuning_task names one (transformers' run_glue.py writes it), else the model's name."""
  from bert_tf.tasks.classification import glue

  task = values.get("finetuning_task")
  if isinstance(task, str):
    try:
      found = glue.get_task(task)
      return found.name, found.is_pair
    except ValueError:
      name = task
  name = name.removeprefix("hf:").rstrip("/").rsplit("/", 1)[-1]  # hf:<org>/<model>, or a folder
  return re.sub(r"[^a-z0-9_-]+", "_", name.lower()).strip("_") or "classifier", None


def _settings(values: dict, outputs: int, name: str, source: str, longest: int, do_lower_case: bool) -> dict:
  problem_type = values.get("problem_type")
  if problem_type == "multi_label_classification":
    raise ValueError(f"{source}: problem_type multi_label_classification (a sigmoid per label) has no classifier "
                     "here (one softmax over the labels); fine-tune it as single-label, or keep it in transformers")
  if problem_type == "regression" and outputs != 1:
    raise ValueError(f"{source}: a regression of {outputs} outputs; ours predicts one number (STS-B's)")
  task_name, is_pair = _task_name(values, name)
  labels = [] if outputs == 1 else convert_tasks.labels_of(values, outputs, source)
  return {"task_name": task_name, "labels": labels, "is_pair": bool(is_pair), "max_seq_length": longest,
          "do_lower_case": do_lower_case}


def _label_fields(settings: dict[str, Any]) -> dict[str, Any]:
  if not settings.get("labels"):
    return {"id2label": {"0": "LABEL_0"}, "label2id": {"LABEL_0": 0}, "problem_type": "regression",
            "finetuning_task": settings["task_name"]}
  return {**convert_tasks.label_fields(settings["labels"]), "problem_type": "single_label_classification",
          "finetuning_task": settings["task_name"]}


KIND = convert_tasks.TaskKind("classification", "classifier.json", "classifier", "run_classifier.py",
                              "BertForSequenceClassification", "classifier", "classifier", True, build=_build,
                              hf_settings=_settings, label_fields=_label_fields)
