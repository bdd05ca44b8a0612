r"""Acceptance of the SQuAD SavedModel: its answers against the Python path's `predictions.json`.

Why: the export runs tokenization, windows, span selection and the threshold in the graph; this checks, on real
dev questions and a real fine-tuned model, that a TensorFlow Serving client gets the answers that
`run_squad.py --do_predict` writes. It exports `<run_dir>/squad_model` (scripts/export_squad.py), then answers
every question of `--predict_file` in a fresh process that imports only `tensorflow` and `tensorflow_text` (as a
server has them), and compares:

  - answers equal to the Python path's, per question (for SQuAD 2.0 at the threshold stored in squad.json,
    i.e. `squad_postprocess.apply_threshold` of the run's null_odds.json and nbest_predictions.json);
  - EM and F1 of both (the official metrics, `bert_tf.tasks.squad.metrics`);
  - the export's questions/s in that process (batch --batch_size, CPU).

  python bench/squad_export_check.py --run_dir=out/bench_squad/ours-v1.1-seed1 \
      --predict_file=out/bench_squad/data/eval-v1.1.json --work_dir=/tmp/squad_export_v1

Writes <work_dir>/export_check.json and prints it; lists the first differing questions. Exits 1 when under
--min_equal (default 0.99) of the answers are equal or EM/F1 differ by more than --max_metric_diff (0.2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# Runs with `python -I`: no PYTHONPATH, no repository on the path; only TensorFlow and tensorflow-text.
_ANSWER = r"""
import json, sys, time
import tensorflow as tf
import tensorflow_text  # noqa: F401  the tokenizer's ops
saved_model_dir, predict_file, out_file, batch_size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
serve = tf.saved_model.load(saved_model_dir).signatures["serving_default"]
rows = []
with open(predict_file, encoding="utf-8") as f:
  for article in json.load(f)["data"]:
    for paragraph in article["paragraphs"]:
      for qa in paragraph["qas"]:
        rows.append((qa["id"], qa["question"], paragraph["context"]))
serve(question=tf.constant([rows[0][1]]), context=tf.constant([rows[0][2]]))  # trace and warm up
answers = {}
start = time.perf_counter()
for lo in range(0, len(rows), batch_size):
  batch = rows[lo:lo + batch_size]
  out = serve(question=tf.constant([r[1] for r in batch]), context=tf.constant([r[2] for r in batch]))
  out = {k: v.numpy().tolist() for k, v in out.items()}
  for i, (qid, _, _) in enumerate(batch):
    answers[qid] = {k: (v[i].decode("utf-8") if isinstance(v[i], bytes) else v[i]) for k, v in out.items()}
seconds = time.perf_counter() - start
with open(out_file, "w", encoding="utf-8") as f:
  json.dump({"answers": answers, "seconds": seconds, "modules": sorted(
      m.split(".")[0] for m in sys.modules if m.split(".")[0] in ("bert_tf", "keras_hub"))}, f)
"""


def parse_args(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--run_dir", required=True, help="A run_squad.py --output_dir (squad_model/, predictions).")
  parser.add_argument("--predict_file", required=True, help="The SQuAD JSON that run predicted.")
  parser.add_argument("--work_dir", required=True, help="Where the export and the report go.")
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--n_best_size", type=int, default=20)
  parser.add_argument("--max_answer_length", type=int, default=30)
  parser.add_argument("--null_score_diff_threshold", type=float, default=None,
                      help="SQuAD 2.0: export and compare at this threshold instead of the stored one (e.g. 1e9: "
                      "always answer, which checks span selection on every question)")
  parser.add_argument("--min_equal", type=float, default=0.99)
  parser.add_argument("--max_metric_diff", type=float, default=0.2)
  return parser.parse_args(argv)


def _read(path):
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def main(argv=None) -> int:
  args = parse_args(argv)
  sys.path.insert(0, REPO)
  from bert_tf.tasks.squad import metrics as squad_metrics
  from bert_tf.tasks.squad import postprocess as squad_postprocess
  from bert_tf.tasks.squad import run as squad_run

  model_dir = os.path.join(args.run_dir, squad_run.MODEL_DIR)
  settings = squad_run.read_settings(model_dir)
  version_2 = bool(settings["version_2_with_negative"])
  os.makedirs(args.work_dir, exist_ok=True)
  export_dir = os.path.join(args.work_dir, "export")
  env = dict(os.environ, PYTHONPATH=REPO)
  exported = subprocess.run(
      [sys.executable, os.path.join(REPO, "scripts", "export_squad.py"), f"--squad_model_dir={model_dir}",
       f"--export_dir={export_dir}", "--model_name=squad", f"--n_best_size={args.n_best_size}",
       f"--max_answer_length={args.max_answer_length}"]
      + ([f"--null_score_diff_threshold={args.null_score_diff_threshold}"]
         if args.null_score_diff_threshold is not None else []), capture_output=True, text=True, env=env)
  if exported.returncode != 0:
    print(exported.stderr[-3000:], file=sys.stderr)
    return 1
  version_dir = exported.stdout.strip().splitlines()[-1]
  answers_file = os.path.join(args.work_dir, "export_answers.json")
  fresh = subprocess.run([sys.executable, "-I", "-c", _ANSWER, version_dir, args.predict_file, answers_file,
                          str(args.batch_size)], capture_output=True, text=True,
                         env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
  if fresh.returncode != 0:
    print(fresh.stderr[-3000:], file=sys.stderr)
    return 1
  answered = _read(answers_file)
  export_answers = {qid: row["answer"] for qid, row in answered["answers"].items()}

  threshold = float(settings["null_score_diff_threshold"] if args.null_score_diff_threshold is None
                    else args.null_score_diff_threshold)
  if version_2:
    nbest = _read(os.path.join(args.run_dir, squad_postprocess.NBEST_FILE))
    best_non_null = {qid: next((e["text"] for e in entries if e["text"]), "") for qid, entries in nbest.items()}
    python_answers = squad_postprocess.apply_threshold(
        _read(os.path.join(args.run_dir, squad_postprocess.NULL_ODDS_FILE)), best_non_null, threshold)
  else:
    python_answers = _read(os.path.join(args.run_dir, squad_postprocess.PREDICTIONS_FILE))
  if set(python_answers) != set(export_answers):
    print(f"the export answered {len(export_answers)} questions, the run {len(python_answers)}", file=sys.stderr)
    return 1
  differing = sorted(qid for qid in python_answers if python_answers[qid] != export_answers[qid])
  dataset = _read(args.predict_file)
  evaluate = squad_metrics.evaluate_v2 if version_2 else squad_metrics.evaluate_v1
  python_metrics, export_metrics = evaluate(dataset, python_answers), evaluate(dataset, export_answers)
  em_key = "exact" if version_2 else "exact_match"
  report = {
      "run_dir": args.run_dir, "predict_file": args.predict_file, "saved_model": version_dir,
      "version_2_with_negative": version_2, "null_score_diff_threshold": threshold if version_2 else None,
      "questions": len(python_answers), "equal": len(python_answers) - len(differing),
      "equal_fraction": round(1 - len(differing) / len(python_answers), 5),
      "python_em": python_metrics[em_key], "python_f1": python_metrics["f1"],
      "export_em": export_metrics[em_key], "export_f1": export_metrics["f1"],
      "em_diff": round(export_metrics[em_key] - python_metrics[em_key], 4),
      "f1_diff": round(export_metrics["f1"] - python_metrics["f1"], 4),
      "export_questions_per_second": round(len(export_answers) / answered["seconds"], 2),
      "fresh_process_imported": answered["modules"],
      "differences": [{"id": qid, "python": python_answers[qid], "export": export_answers[qid]}
                      for qid in differing[:20]],
      "uptime": os.getloadavg(), "date": time.strftime("%Y-%m-%d %H:%M:%S"),
  }
  with open(os.path.join(args.work_dir, "export_check.json"), "w", encoding="utf-8") as f:
    json.dump(report, f, indent=2, ensure_ascii=False)
  print(json.dumps(report, indent=2, ensure_ascii=False))
  ok = (report["equal_fraction"] >= args.min_equal and abs(report["em_diff"]) <= args.max_metric_diff
        and abs(report["f1_diff"]) <= args.max_metric_diff and not answered["modules"])
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
