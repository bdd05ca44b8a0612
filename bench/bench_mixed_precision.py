r"""Benchmark: mixed precision against float32 end to end, on the main job's workload (a CPU is enough).

The main job (bert_tf/main_job.py) pretrains the tiny encoder (L2/H128, sequence 128, batch 32) on the embedded
corpus and fine-tunes it on the four-document classification task made from it. This bench runs those very
stages (`main_job.prepare_data`, `main_job._pretrain`, `main_job._finetune`) once per dtype policy, with the
same seed, the same records and so the same data order:

  1. pretraining in float32, mixed_bfloat16 and mixed_float16: the loss every --log_steps steps (each value the
     mean over those steps), and the largest relative gap |loss - loss_float32| / loss_float32 over the second
     half of the run, against --tolerance; under mixed_float16 the loss scale and the updates skipped for
     non-finite gradients;
  2. fine-tuning each pretrained encoder, in its own dtype policy, with each of --finetune_seeds: held-out
     accuracy per seed, the mean and the spread, so that a gap between dtypes can be read against the noise of
     the seed alone.

  python bench/bench_mixed_precision.py                          # the main job's 600 steps, 3 fine-tune seeds
  python bench/bench_mixed_precision.py --pretrain_steps=100 --finetune_seeds=1   # a quick look
  python bench/bench_mixed_precision.py --json=out/mixed_precision.json

Why a relative tolerance on window means: each logged loss is the mean of --log_steps steps, so it is what a
user reads on the progress line; the three runs see the same batches, so the gap is the dtype's alone (rounding
of activations to 8 (bfloat16) or 11 (float16) significant bits, which perturbs the trajectory, not its level).
Exits 1 when a gap exceeds --tolerance or a fine-tune's mean accuracy is further from float32's than
--accuracy_tolerance.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time
from collections.abc import Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

DTYPES = ("float32", "mixed_bfloat16", "mixed_float16")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--work_dir", default=os.path.join("out", "bench_mixed_precision"))
  p.add_argument("--dtypes", default=",".join(DTYPES), help="Comma-separated; float32 first (the reference).")
  p.add_argument("--pretrain_steps", type=int, default=600, help="The main job's 600 by default.")
  p.add_argument("--pretrain_batch_size", type=int, default=32, help="The main job's 32 by default.")
  p.add_argument("--log_steps", type=int, default=50, help="A loss value (mean over these steps) every this many.")
  p.add_argument("--finetune_seeds", default="12345,1,2", help="Comma-separated fine-tuning seeds.")
  p.add_argument("--finetune_dtype", default="same", choices=("same",) + DTYPES,
                 help="Fine-tune in the pretraining's dtype policy (same), or in this one whatever it was: "
                      "TensorFlow's CPU float16 kernels make a mixed_float16 fine-tune about 100x slower here.")
  p.add_argument("--tolerance", type=float, default=0.03,
                 help="Largest relative gap of the loss curve to float32's over the second half.")
  p.add_argument("--accuracy_tolerance", type=float, default=0.03,
                 help="Largest gap of the mean held-out accuracy to float32's.")
  p.add_argument("--json", default=None, help="Also write the report here.")
  args = p.parse_args(argv)
  args.dtypes = [d for d in args.dtypes.split(",") if d]
  if not args.dtypes or args.dtypes[0] != "float32" or set(args.dtypes) - set(DTYPES):
    p.error(f"--dtypes: float32 first, then any of {DTYPES[1:]}")
  args.finetune_seeds = [int(s) for s in args.finetune_seeds.split(",") if s]
  return args


def curve_gap(reference: Sequence[dict], curve: Sequence[dict]) -> dict:
  """The largest relative gap of `curve`'s loss to `reference`'s over the second half of the steps ->
  {"max_relative_gap", "at_step"}. Both are history entries ({"step", "loss", ...}) logged at the same steps."""
  steps = [h["step"] for h in reference]
  if steps != [h["step"] for h in curve]:
    raise ValueError(f"the curves are logged at other steps: {steps} vs {[h['step'] for h in curve]}")
  half = steps[-1] / 2
  gaps = [(abs(c["loss"] - r["loss"]) / r["loss"], r["step"]) for r, c in zip(reference, curve) if r["step"] > half]
  gap, step = max(gaps)
  return {"max_relative_gap": gap, "at_step": step}


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  from absl import logging

  from bert_tf import main_job

  logging.set_verbosity(logging.WARNING)  # the stages' own lines (`say`) are the report
  work_dir = os.path.abspath(args.work_dir)
  started = time.monotonic()

  def say(line: str) -> None:
    print(f"[{time.monotonic() - started:7.1f} s] {line}", flush=True)

  base = main_job.MainJobConfig(work_dir=os.path.join(work_dir, "data"), records_dir=os.path.join(work_dir, "data"),
                                pretrain_steps=args.pretrain_steps, pretrain_log_steps=args.log_steps,
                                pretrain_batch_size=args.pretrain_batch_size,
                                pretrain_warmup_steps=args.pretrain_steps // 3)  # the main job's 200 of 600
  if os.path.exists(os.path.join(base.records_dir, "pretrain.stats.json")):
    with open(os.path.join(base.records_dir, "pretrain.stats.json")) as f:
      files = json.load(f)["output_files"]
    vocab_file = os.path.join(base.work_dir, "vocab.txt")
    with open(vocab_file, encoding="utf-8") as f:
      vocab_size = sum(1 for _ in f)
  else:
    data = main_job.prepare_data(dataclasses.replace(base, show_instances=0), say=lambda line: None)
    files, vocab_file, vocab_size = data["records"]["output_files"], data["vocab"]["file"], data["vocab"]["size"]
  say(f"data: {len(files)} record files, vocabulary {vocab_size}; load average {os.getloadavg()[0]:.2f}, "
      f"{os.cpu_count()} cores")

  report: dict = {"argv": sys.argv[1:], "pretrain_steps": args.pretrain_steps,
                  "pretrain_batch_size": args.pretrain_batch_size, "tolerance": args.tolerance,
                  "dtypes": {}}
  for dtype in args.dtypes:
    config = dataclasses.replace(base, work_dir=os.path.join(work_dir, dtype), dtype=dtype)
    t = time.monotonic()
    pretrained = main_job._pretrain(config, ",".join(files), vocab_size, say=lambda line: None)  # pylint: disable=protected-access
    history = pretrained["history"]
    entry = {"pretrain_seconds": round(time.monotonic() - t, 1),
             "curve": [{k: h[k] for k in ("step", "loss", "mlm_accuracy", "nsp_accuracy", "loss_scale",
                                          "skipped_updates_total") if k in h} for h in history]}
    if dtype != "float32":
      entry.update(curve_gap(report["dtypes"]["float32"]["curve"], entry["curve"]))
    last = history[-1]
    say(f"{dtype}: pretrained {args.pretrain_steps} steps in {entry['pretrain_seconds']} s; loss "
        + " ".join(f"{h['loss']:.3f}" for h in history) + f"; mlm_accuracy {last['mlm_accuracy']:.3f}, "
        f"nsp_accuracy {last['nsp_accuracy']:.3f}"
        + (f"; max relative gap to float32 over the second half {entry['max_relative_gap']:.4f} at step "
           f"{int(entry['at_step'])}" if "max_relative_gap" in entry else "")
        + (f"; loss scale {last['loss_scale']:g}, {int(last['skipped_updates_total'])} updates skipped"
           if "loss_scale" in last else ""))
    accuracies = []
    for seed in args.finetune_seeds:
      ft = dataclasses.replace(config, work_dir=os.path.join(work_dir, dtype, f"finetune-{seed}"), random_seed=seed,
                               dtype=dtype if args.finetune_dtype == "same" else args.finetune_dtype)
      t = time.monotonic()
      tuned = main_job._finetune(ft, vocab_file, pretrained["output_dir"], say=lambda line: None)  # pylint: disable=protected-access
      accuracies.append(round(tuned["dev_accuracy"], 4))
      say(f"{dtype}: fine-tuned in {ft.dtype} (seed {seed}) in {time.monotonic() - t:.1f} s: held-out accuracy "
          f"{tuned['dev_accuracy']:.3f} (majority class {tuned['majority_baseline']:.3f})")
    entry["finetune_accuracy"] = accuracies
    entry["finetune_dtype"] = ft.dtype
    entry["finetune_accuracy_mean"] = round(statistics.mean(accuracies), 4)
    entry["finetune_accuracy_spread"] = round(max(accuracies) - min(accuracies), 4)
    report["dtypes"][dtype] = entry

  reference = report["dtypes"]["float32"]
  bad = []
  lines = ["| dtype | pretraining s | final loss | max rel. gap (2nd half) | MLM acc | NSP acc | "
           "fine-tune accuracy (seeds; dtype) | mean | loss scale / skipped |", "|---|---|---|---|---|---|---|---|---|"]
  for dtype, e in report["dtypes"].items():
    last = e["curve"][-1]
    gap = e.get("max_relative_gap")
    if gap is not None and gap > args.tolerance:
      bad.append(f"{dtype}: loss gap {gap:.4f} > --tolerance={args.tolerance}")
    if abs(e["finetune_accuracy_mean"] - reference["finetune_accuracy_mean"]) > args.accuracy_tolerance:
      bad.append(f"{dtype}: mean accuracy {e['finetune_accuracy_mean']} vs float32's "
                 f"{reference['finetune_accuracy_mean']}")
    gap_text = "-" if gap is None else f"{gap:.4f} (step {int(e['at_step'])})"
    lines.append(f"| {dtype} | {e['pretrain_seconds']} | {last['loss']:.4f} | {gap_text} | "
                 f"{last['mlm_accuracy']:.3f} | {last['nsp_accuracy']:.3f} | "
                 f"{', '.join(f'{a:.3f}' for a in e['finetune_accuracy'])}; {e['finetune_dtype']} | "
                 f"{e['finetune_accuracy_mean']:.3f} | "
                 + (f"{last['loss_scale']:g} / {int(last['skipped_updates_total'])}" if "loss_scale" in last else "-")
                 + " |")
  steps = [h["step"] for h in reference["curve"]]
  lines += ["", "| step | " + " | ".join(report["dtypes"]) + " |", "|---" * (len(report["dtypes"]) + 1) + "|"]
  for i, step in enumerate(steps):
    lines.append(f"| {int(step)} | " + " | ".join(f"{e['curve'][i]['loss']:.4f}" for e in report["dtypes"].values())
                 + " |")
  report["failures"] = bad
  report["elapsed_s"] = round(time.monotonic() - started, 1)
  print(json.dumps(report, indent=2))
  print()
  print("\n".join(lines))
  for line in bad:
    print(f"FAIL {line}")
  if args.json:
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
      json.dump(report, f, indent=2)
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
