"""Exports a fine-tuned SQuAD model for TensorFlow Serving: raw question and context in, the answer out.

  python scripts/export_squad.py --squad_model_dir=out/squad/squad_model --export_dir=export --model_name=squad

writes export/squad/<version>/ (the next free version unless --model_version). The window sizes, casing and,
for SQuAD 2.0, the null_score_diff_threshold stored by `run_squad.py --do_eval` are the model folder's;
`--null_score_diff_threshold` overrides the threshold. (`scripts/run_squad.py --export_dir=...` does the same
at the end of a run.) See docs/squad.md.
"""

from bert_tf import cli

# scripts/export.py for this task alone (bert_tf/cli.py), with this script's flag for the folder.
cli.define_export_flags("squad", model_dir_flag="squad_model_dir")

if __name__ == "__main__":
  cli.run(cli.export_main("squad", model_dir_flag="squad_model_dir"))
