"""A fine-tuned SWAG model as transformers' BertForMultipleChoice and back (bert_tf.model.convert_tasks):
`choice_score` [H, 1] on each choice's pooled [CLS] is `classifier.weight` [1, H]."""

from __future__ import annotations

from typing import Any

from bert_tf.model import convert_tasks


def _build(config, settings: dict[str, Any]):
  from bert_tf.tasks.swag.model import BertMultipleChoice

  return BertMultipleChoice(config, dtype="float32")


def _settings(values: dict, outputs: int, name: str, source: str, longest: int, do_lower_case: bool) -> dict:
  return {"max_seq_length": min(128, longest), "do_lower_case": do_lower_case, "num_choices": 4}


def _input_shape(settings: dict[str, Any]) -> list[int]:
  return [1, int(settings.get("num_choices", 4)), 2]


KIND = convert_tasks.TaskKind("swag", "swag.json", "swag_model", "run_swag.py", "BertForMultipleChoice",
                              "choice_score", "classifier", True, build=_build, hf_settings=_settings, outputs=1,
                              input_shape=_input_shape)
