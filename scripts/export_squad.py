"""Exports a fine-tuned SQuAD model for TensorFlow Serving: raw question and context in, the answer out.

  python scripts/export_squad.py --squad_model_dir=out/squad/squad_model --export_dir=export --model_name=squad

writes export/squad/<version>/ (the next free version unless --model_version). The window sizes, casing and,
for SQuAD 2.0, the null_score_diff_threshold stored by `run_squad.py --do_eval` are the model folder's;
`--null_score_diff_threshold` overrides the threshold. (`scripts/run_squad.py --export_dir=...` does the same
at the end of a run.) See docs/squad.md.
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("squad_model_dir", None, "A fine-tuned model: <run_squad --output_dir>/squad_model, or a "
                    "Hugging Face BertForQuestionAnswering (its folder, or hf:<id>).")
flags.DEFINE_string("export_dir", None, "TF Serving's model root (local or gs://).")
flags.DEFINE_string("model_name", "squad", "The served model's name.")
flags.DEFINE_integer("model_version", None, "The version folder (default: 1 + the newest existing one).")
flags.DEFINE_integer("n_best_size", 20, "Start and end candidates per window, as run_squad.py.")
flags.DEFINE_integer("max_answer_length", 30, "Longest answer, in WordPiece tokens.")
flags.DEFINE_float("null_score_diff_threshold", None, "SQuAD 2.0: override the stored threshold.")


def main(argv):
  if len(argv) > 1:
    raise ValueError(f"unexpected arguments {argv[1:]}")
  for name in ("squad_model_dir", "export_dir"):
    if not getattr(FLAGS, name):
      raise ValueError(f"--{name} is required")
  from bert_tf.model import released
  from bert_tf.tasks.squad import serving as squad_serving
  from bert_tf.tasks.squad import run as squad_run

  model_dir = released.task_model_dir(FLAGS.squad_model_dir)  # A Hugging Face question answerer: converted.
  if not squad_run.is_model_dir(model_dir):
    raise ValueError(f"--squad_model_dir={FLAGS.squad_model_dir}: holds no {squad_run.SETTINGS_NAME}; give the "
                     f"{squad_run.MODEL_DIR}/ folder of a run_squad.py --output_dir")
  print(squad_serving.export_squad(model_dir, FLAGS.export_dir, FLAGS.model_name, FLAGS.model_version,
                                   FLAGS.n_best_size, FLAGS.max_answer_length, FLAGS.null_score_diff_threshold))


if __name__ == "__main__":
  cli.run(main)
