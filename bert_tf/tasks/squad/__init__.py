"""SQuAD v1.1 and v2.0 extractive question answering, as google-research's run_squad.py does it.

  data.py         the official JSON -> examples -> windowed features
  model.py        `BertSpanLabeler` (start/end logits) and the trainer's task
  postprocess.py  n-best spans, the answer text, v2.0's no-answer threshold
  metrics.py      the official evaluate-v1.1 / v2.0 scores
  folder.py       the fine-tuned model's folder (squad_model/): save, settings, load
  serving.py      the raw-text SavedModel: question and context in, the answer out
  run.py          what scripts/run_squad.py runs
"""

from __future__ import annotations

from bert_tf import registry


@registry.register_task
class Squad(registry.Task, name="squad", model_dir="squad_model", settings_name="squad.json",
            description="SQuAD model", hf_class="BertForQuestionAnswering", served_name="squad",
            exporter="export_squad"):
  """scripts/run_squad.py and export_squad.py, with the answer search's flags."""

  @classmethod
  def define_export_flags(cls, flags):
    # run_squad.py's answer search (the same defaults); the threshold is the model folder's unless given.
    flags.DEFINE_integer("n_best_size", 20, "SQuAD: start and end candidates per window, as run_squad.py.")
    flags.DEFINE_integer("max_answer_length", 30, "SQuAD: longest answer, in WordPiece tokens.")
    flags.DEFINE_float("null_score_diff_threshold", None, "SQuAD 2.0: override the threshold stored in the model "
                       "folder (by run_squad.py --do_eval).")

  @classmethod
  def export(cls, model_dir, export_dir, model_name, version, flag_values, flag):
    from bert_tf.model import released
    from bert_tf.tasks.squad import folder

    local = released.task_model_dir(model_dir)  # A Hugging Face question answerer: converted.
    if not folder.is_model_dir(local):
      raise ValueError(f"--{flag}={model_dir}: holds no {folder.SETTINGS_NAME}; give the {folder.MODEL_DIR}/ folder "
                       "of a run_squad.py --output_dir")
    return super().export(local, export_dir, model_name, version, flag_values, flag)
