"""A fine-tuned SQuAD model as transformers' BertForQuestionAnswering and back (bert_tf.model.convert_tasks):
`span_output` [H, 2] on every token (column 0 start, 1 end) is `qa_outputs.weight` [2, H]; no pooler."""

from __future__ import annotations

from typing import Any

from bert_tf.model import convert_tasks


def _build(config, settings: dict[str, Any]):
  from bert_tf.tasks.squad.model import BertSpanLabeler

  return BertSpanLabeler(config, dtype="float32")


def _settings(values: dict, outputs: int, name: str, source: str, longest: int, do_lower_case: bool) -> dict:
  """run_squad.py's defaults (transformers' config has no place for them)."""
  return {"max_seq_length": min(384, longest), "doc_stride": 128, "max_query_length": 64,
          "do_lower_case": do_lower_case, "version_2_with_negative": False, "null_score_diff_threshold": 0.0}


KIND = convert_tasks.TaskKind("squad", "squad.json", "squad_model", "run_squad.py", "BertForQuestionAnswering",
                              "span_output", "qa_outputs", False, build=_build, hf_settings=_settings, outputs=2)
