r"""SQuAD prediction speed alone: ours (`scripts/run_squad.py --do_predict` from a fine-tuned `squad_model/`) against
the peer (`bench/squad_hf_peer.py`: Hugging Face `BertForQuestionAnswering` with google-research's windows and
`write_predictions`), in interleaved rounds, each side a fresh process with the same thread settings.

Why: `bench_squad.py` times prediction once per seed, after each side's training, so a busy machine distorts single
figures; this repeats only the prediction, alternating the sides, and reports each round and the median.

What each side's `predict_seconds` covers (the same work on both): reading the evaluation file, making its windows
(ours also writes them to a fresh feature file), the model over every window (`--predict_batch_size` a batch, each
batch cut to its longest window), the post-processing and writing the prediction files. Model loading and process
start-up are not included.

- Ours predicts with a model fine-tuned by `bench_squad.py` (`--ours_model`, default the v1.1 seed-1 run's).
- The peer cannot predict without training (its script always trains); it trains one step on `--peer_train_file`
  (a few questions) and then predicts. Its prediction starts from MiniLM's weights and a fresh head: the same
  compute as a fine-tuned model's (the n-best lists differ, not their size).

  python bench/squad_predict_speed.py --rounds=3 --work_dir=out/squad_predict_speed

Writes <work_dir>/predict_speed.json and prints a table. Needs the data and model of a `bench_squad.py` run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from typing import Sequence

BENCH = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)

import bench_glue  # noqa: E402  (run_logged, subprocess_env, write_atomic, minilm_dir)

OURS_SCRIPT = os.path.join(REPO, "scripts", "run_squad.py")
PEER_SCRIPT = os.path.join(BENCH, "squad_hf_peer.py")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  source = os.path.join(REPO, "out", "bench_squad")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--predict_file", default=os.path.join(source, "data", "v1.1-eval.json"))
  parser.add_argument("--peer_train_file", default=os.path.join(source, "data", "v1.1-train.json"))
  parser.add_argument("--ours_model", default=os.path.join(source, "ours", "v1.1", "seed1", "squad_model"))
  parser.add_argument("--model_dir", default=None, help="The Hugging Face MiniLM directory (default: bench_glue's).")
  parser.add_argument("--version_2_with_negative", action="store_true")
  parser.add_argument("--max_seq_length", type=int, default=256)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  parser.add_argument("--predict_batch_size", type=int, default=8)
  parser.add_argument("--num_threads", type=int, default=2)
  parser.add_argument("--work_dir", default=os.path.join(REPO, "out", "squad_predict_speed"))
  parser.add_argument("--python", default=sys.executable)
  args = parser.parse_args(argv)
  if args.rounds < 1:
    parser.error("--rounds must be at least 1")
  for name in ("predict_file", "peer_train_file", "ours_model"):
    if not os.path.exists(getattr(args, name)):
      parser.error(f"--{name}: {getattr(args, name)} does not exist; run bench/bench_squad.py first or pass it")
  args.work_dir = os.path.abspath(args.work_dir)
  return args


def _windows(args) -> list[str]:
  return [f"--max_seq_length={args.max_seq_length}", f"--doc_stride={args.doc_stride}",
          f"--max_query_length={args.max_query_length}", f"--predict_batch_size={args.predict_batch_size}"]


def _fresh(path: str) -> str:
  shutil.rmtree(path, ignore_errors=True)
  os.makedirs(path)
  return path


def run_ours(args, round_: int, env) -> dict:
  out = _fresh(os.path.join(args.work_dir, "ours", f"round{round_}"))
  command = [args.python, OURS_SCRIPT, f"--vocab_file={os.path.join(args.ours_model, 'vocab.txt')}",
             "--do_lower_case", f"--bert_config_file={os.path.join(args.ours_model, 'bert_config.json')}",
             f"--init_checkpoint={args.ours_model}", "--do_predict", "--do_eval", f"--predict_file={args.predict_file}",
             *_windows(args), "--distribution_strategy=one_device",
             f"--features_dir={os.path.join(out, 'features')}", f"--output_dir={out}"]
  if args.version_2_with_negative:
    command.append("--version_2_with_negative")
  run = bench_glue.run_logged(command, env, os.path.join(out, "log.txt"), f"ours round {round_}")
  if not run["returncode"]:
    with open(os.path.join(out, "predictions.json"), encoding="utf-8") as f:
      run["questions"] = len(json.load(f))
    with open(os.path.join(out, "eval_results.json"), encoding="utf-8") as f:
      run["predict_seconds"] = float(json.load(f)["predict_seconds"])  # --do_eval's scoring comes after it
  return run


def run_peer(args, round_: int, model_dir: str, env) -> dict:
  out = _fresh(os.path.join(args.work_dir, "peer", f"round{round_}"))
  # One training step (its script always trains): 16 questions of batch 16 for one epoch.
  command = [args.python, PEER_SCRIPT, f"--train_file={args.peer_train_file}",
             f"--predict_file={args.predict_file}", f"--model_dir={model_dir}", f"--output_dir={out}",
             *_windows(args), "--train_batch_size=16", "--num_train_epochs=0.001", "--seed=1",
             f"--num_threads={args.num_threads}"]
  if args.version_2_with_negative:
    command.append("--version_2_with_negative")
  run = bench_glue.run_logged(command, env, os.path.join(out, "log.txt"), f"peer round {round_}")
  if not run["returncode"]:
    with open(os.path.join(out, "results.json"), encoding="utf-8") as f:
      results = json.load(f)
    with open(os.path.join(out, "predictions.json"), encoding="utf-8") as f:
      run["questions"] = len(json.load(f))
    run["predict_seconds"] = float(results["predict_seconds"])
    run["predict_loop_seconds"] = float(results.get("predict_loop_seconds", "nan"))
  return run


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  env = bench_glue.subprocess_env(args.num_threads)
  model_dir = args.model_dir or bench_glue.minilm_dir()
  rounds = []
  for r in range(1, args.rounds + 1):
    with open("/proc/loadavg") as f:
      load = f.read().split()[0]
    rounds.append({"round": r, "load_before": float(load), "ours": run_ours(args, r, env),
                   "peer": run_peer(args, r, model_dir, env)})
    for side in ("ours", "peer"):
      if rounds[-1][side]["returncode"]:
        print(f"{side} failed in round {r}: see {rounds[-1][side]['log']}", file=sys.stderr)
        return 1
  questions = {rounds[0]["ours"]["questions"], rounds[0]["peer"]["questions"]}
  if len(questions) != 1:
    print(f"the sides answered different numbers of questions: {questions}", file=sys.stderr)
    return 1
  n = questions.pop()
  lines = ["| round | load before | ours s | peer s | ours q/s | peer q/s | ours / peer |",
           "|---|---|---|---|---|---|---|"]
  ratios = []
  for r in rounds:
    ours, peer = r["ours"]["predict_seconds"], r["peer"]["predict_seconds"]
    ratios.append(peer / ours)
    lines.append(f"| {r['round']} | {r['load_before']:.2f} | {ours:.1f} | {peer:.1f} | {n / ours:.1f} | "
                 f"{n / peer:.1f} | {peer / ours:.2f}x |")
  lines.append(f"\nmedian ours / peer: {statistics.median(ratios):.2f}x over {len(ratios)} rounds, {n} questions "
               f"({args.predict_file})")
  table = "\n".join(lines)
  print(table)
  bench_glue.write_atomic(os.path.join(args.work_dir, "predict_speed.json"),
                          json.dumps({"args": vars(args), "questions": n, "rounds": rounds,
                                      "median_ratio": statistics.median(ratios)}, indent=2) + "\n")
  bench_glue.write_atomic(os.path.join(args.work_dir, "predict_speed.md"), table + "\n")
  return 0


if __name__ == "__main__":
  sys.exit(main())
