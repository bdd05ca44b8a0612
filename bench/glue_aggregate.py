r"""Pools the per-seed results of several `bench/bench_glue.py` runs (work dirs) into one comparison.

Why: a many-seed comparison is run in pieces (ours and the peer apart, or seeds added later), each piece in its
own --work_dir. This reads `<dir>/ours/<TASK>/seed<S>/eval_results.json` from the --ours dirs and
`<dir>/peer/<TASK>/seed<S>/results.json` from the --peer dirs, keeps the seeds both sides have (a seed found
twice on one side is an error: list only the dir of the run that counts), and prints per seed and pooled: mean, standard
deviation over seeds, ours - peer, and the standard error of that difference (the two sides' random streams are
independent, so it is sqrt(sd_ours^2 / n + sd_peer^2 / n)).

  python bench/glue_aggregate.py --task=MRPC --ours=out/run_a,out/run_b --peer=out/run_a,out/run_c
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import re
import statistics
import sys
from collections.abc import Sequence

METRICS = {"MRPC": ("accuracy", "f1"), "RTE": ("accuracy",)}


def seed_of(path: str) -> int:
  match = re.search(r"/seed(\d+)/", path)
  if not match:
    raise ValueError(f"{path}: no seed<N> folder in the path")
  return int(match.group(1))


def collect(dirs: dict[str, Sequence[str]], task: str) -> tuple[dict[int, dict], dict[int, dict]]:
  """{seed: {metric: value}} for ours and the peer; `dirs` maps each side to its work dirs."""
  sides: dict[str, dict[int, dict]] = {"ours": {}, "peer": {}}
  sources: dict[tuple[str, int], str] = {}
  for side, name in (("ours", "eval_results.json"), ("peer", "results.json")):
    for work_dir in dirs[side]:
      if not os.path.isdir(work_dir):
        raise FileNotFoundError(f"{work_dir}: no such folder")
      for path in sorted(glob.glob(os.path.join(work_dir, side, task, "seed*", name))):
        seed = seed_of(path)
        if (side, seed) in sources:
          raise ValueError(f"{side} seed {seed} is in both {sources[side, seed]} and {path}; list one of them")
        sources[side, seed] = path
        with open(path, encoding="utf-8") as f:
          result = json.load(f)
        values = result["metrics"] if side == "peer" else result
        sides[side][seed] = {m: 100.0 * values[m] for m in METRICS[task]}
  return sides["ours"], sides["peer"]


def main(argv: Sequence[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--ours", required=True, help="Comma-separated bench_glue.py work dirs for our side.")
  parser.add_argument("--peer", required=True, help="Comma-separated bench_glue.py work dirs for the peer.")
  parser.add_argument("--task", default="MRPC", choices=sorted(METRICS))
  args = parser.parse_args(argv)
  dirs = {side: [d for d in getattr(args, side).split(",") if d] for side in ("ours", "peer")}
  try:
    ours, peer = collect(dirs, args.task)
  except (OSError, ValueError, KeyError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  seeds = sorted(set(ours) & set(peer))
  unpaired = sorted(set(ours) ^ set(peer))
  if unpaired:
    print(f"left out (one side only): seeds {unpaired}")
  if len(seeds) < 2:
    print(f"{args.task}: {len(seeds)} seed(s) with both sides; need at least 2", file=sys.stderr)
    return 1
  print(f"{args.task}, {len(seeds)} seeds: {','.join(map(str, seeds))}")
  for seed in seeds:
    print(f"  seed {seed}: " + "  ".join(f"{m} ours {ours[seed][m]:.2f} peer {peer[seed][m]:.2f}"
                                          for m in METRICS[args.task]))
  for metric in METRICS[args.task]:
    a = [ours[s][metric] for s in seeds]
    b = [peer[s][metric] for s in seeds]
    se = math.sqrt(statistics.variance(a) / len(a) + statistics.variance(b) / len(b))
    print(f"{metric}: ours {statistics.mean(a):.2f} ± {statistics.stdev(a):.2f}, peer {statistics.mean(b):.2f} ± "
          f"{statistics.stdev(b):.2f}, ours - peer {statistics.mean(a) - statistics.mean(b):+.2f} (standard error "
          f"{se:.2f})")
  return 0


if __name__ == "__main__":
  sys.exit(main())
