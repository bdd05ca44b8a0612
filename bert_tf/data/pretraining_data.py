"""Creating pretraining records from raw text: reading, tokenizing, sharding, parallel workers, writing, stats.

Two modes share the instance algorithm of `bert_tf.data.instances`:

* Reference-compatible (`reference_compatible=True`): one process holds the whole corpus, exactly as
  google-research/bert's `create_pretraining_data.py` does; for the same seed, vocabulary, input and flags the
  records are the reference's, record for record, in the same order, round-robin over the output files.
* Sharded (the default): the corpus is cut, at document boundaries, into `num_shards` contiguous shards of about
  equal size in bytes. Each shard is an independent job seeded by (random_seed, shard index): its documents are
  shuffled, paired and masked on their own, and the random next sentence B of an instance is drawn from another
  document *of the same shard*. Jobs run on `num_workers` processes; shard s is appended to output file
  s mod (number of output files), in shard order. Peak memory is a few shards, not the corpus, and for the same
  seed and shard count the output is byte-identical whatever the number of workers.

Every output is written under a temporary name and renamed into place only when complete.
"""

from __future__ import annotations

import concurrent.futures
import ctypes
import dataclasses
import functools
import json
import logging
import math
import multiprocessing
import os
import random
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Callable, Iterator, Sequence

import numpy as np

from bert_tf import fileio
from bert_tf.data import instances as instances_lib
from bert_tf.data import records, text_io

log = logging.getLogger(__name__)

LENGTH_BUCKET = 16  # Width of the length-histogram buckets in the statistics file.


@dataclasses.dataclass(frozen=True)
class TokenizerSpec:
  """How to build the tokenizer, picklable so each worker process builds its own."""

  vocab_file: str
  do_lower_case: bool = True
  preserve_special_tokens: bool = False

  def build(self, vocab=None):
    """The Python tokenizer: as fast as the in-graph one here (its per-chunk cache) and, unlike it, needs no
    TensorFlow, so workers start in a fraction of a second. Both give the reference's ids (tests)."""
    from bert_tf.data import tokenization

    return tokenization.FullTokenizer(vocab if vocab is not None else self.vocab_file,
                                      do_lower_case=self.do_lower_case,
                                      preserve_special_tokens=self.preserve_special_tokens)


@dataclasses.dataclass
class Stats:
  """Counts over written instances; shards' stats add up."""

  instances: int = 0
  tokens: int = 0  # Real tokens, including [CLS] and [SEP].
  masked: int = 0
  replaced_by_mask: int = 0
  kept: int = 0
  random_token: int = 0
  random_next: int = 0
  forced_random_next: int = 0  # One-sentence chunks, whose B is random without a coin flip.
  documents: int = 0
  sentences: int = 0
  length_histogram: dict = dataclasses.field(default_factory=dict)  # bucket start -> count

  def add_instance(self, instance: instances_lib.Instance) -> None:
    self.instances += 1
    self.tokens += len(instance.input_ids)
    self.masked += len(instance.masked_lm_positions)
    self.replaced_by_mask += instance.num_replaced_by_mask
    self.kept += instance.num_kept
    self.random_token += instance.num_random
    self.random_next += instance.is_random_next
    self.forced_random_next += instance.forced_random_next
    bucket = (len(instance.input_ids) - 1) // LENGTH_BUCKET * LENGTH_BUCKET + 1
    self.length_histogram[bucket] = self.length_histogram.get(bucket, 0) + 1

  def merge(self, other: "Stats") -> None:
    for field in dataclasses.fields(self):
      if field.name == "length_histogram":
        for bucket, count in other.length_histogram.items():
          self.length_histogram[bucket] = self.length_histogram.get(bucket, 0) + count
      else:
        setattr(self, field.name, getattr(self, field.name) + getattr(other, field.name))

  def to_dict(self) -> dict:
    masked = max(self.masked, 1)
    return {
        "instances": self.instances,
        "documents": self.documents,
        "sentences": self.sentences,
        "tokens": self.tokens,
        "mean_tokens_per_instance": self.tokens / max(self.instances, 1),
        "masked_lm_predictions": self.masked,
        "masked_fraction": self.masked / max(self.tokens, 1),
        "masked_replaced_by_mask_fraction": self.replaced_by_mask / masked,
        "masked_kept_fraction": self.kept / masked,
        "masked_random_token_fraction": self.random_token / masked,
        "next_sentence_random_fraction": self.random_next / max(self.instances, 1),
        # Among pairs whose B was chosen by the 50% coin flip.
        "next_sentence_random_fraction_of_coin_flips":
            (self.random_next - self.forced_random_next) / max(self.instances - self.forced_random_next, 1),
        "length_histogram": {f"{b}-{b + LENGTH_BUCKET - 1}": self.length_histogram[b]
                             for b in sorted(self.length_histogram)},
    }


# -- Reading ---------------------------------------------------------------------------------------------------


def iter_document_lines(input_files: Sequence[str]) -> Iterator[tuple[int, list[str]]]:
  """Yields (start byte offset, non-blank lines) per document over all files, in order.

  As in the reference, a blank line ends a document and file boundaries do not: documents are runs of non-blank
  lines across the concatenated input. Offsets count raw bytes over all files.
  """
  offset = 0
  start = 0
  lines: list[str] = []
  for path in input_files:
    for _, line, size in text_io.iter_lines_with_size(path):
      if line:
        if not lines:
          start = offset
        lines.append(line)
      elif lines:
        yield start, lines
        lines = []
      offset += size
  if lines:
    yield start, lines


def tokenize_documents(document_lines: Sequence[Sequence[str]], tokenizer) -> list[list[list[int]]]:
  """Documents of text lines -> documents of token-id sentences; empty sentences and documents dropped.

  `tokenizer` is a `FullTokenizer`, or anything with `tokenize_lines` (the in-graph tokenizer's batch path).
  """
  documents = []
  if hasattr(tokenizer, "tokenize_lines"):
    flat = [line for lines in document_lines for line in lines]
    ids, row_splits = tokenizer.tokenize_lines(flat) if flat else (np.zeros(0), np.zeros(1, np.int64))
    ids, row_splits = ids.tolist(), row_splits.tolist()
    k = 0
    for lines in document_lines:
      sentences = [ids[row_splits[k + j]:row_splits[k + j + 1]] for j in range(len(lines))]
      k += len(lines)
      documents.append([s for s in sentences if s])
  else:
    for lines in document_lines:
      sentences = (tokenizer.tokenize_to_ids(line) for line in lines)
      documents.append([s for s in sentences if s])
  return [d for d in documents if d]


# -- One job: documents -> shuffled serialized records -----------------------------------------------------------


def make_records(documents: list, config: instances_lib.InstanceConfig, vocab_ids: instances_lib.VocabIds,
                 rng: random.Random, stats: Stats) -> list[bytes]:
  """The reference's sequence: shuffle documents, dupe_factor passes, shuffle the instances."""
  stats.documents += len(documents)
  stats.sentences += sum(len(d) for d in documents)
  serialize = _serializer(config.max_seq_length, config.max_predictions_per_seq, vocab_ids.size,
                          config.dynamic_masking).serialize
  serialized: list[bytes] = []

  def emit(instance: instances_lib.Instance) -> None:
    stats.add_instance(instance)
    serialized.append(serialize(instance.input_ids, instance.segment_ids, instance.masked_lm_positions,
                                instance.masked_lm_ids, int(instance.is_random_next)))

  with instances_lib.Draws(rng) as draws:  # Every draw of the job, in the reference's order.
    draws.shuffle(documents)
    instances_lib.create_instances(documents, config, vocab_ids, draws, emit)
    draws.shuffle(serialized)
  return serialized


@functools.lru_cache(maxsize=4)
def _serializer(*args) -> records.RecordSerializer:
  # Its tables take ~10 ms to build; a worker reuses them for every shard.
  return records.RecordSerializer(*args)


def shard_rng(random_seed: int, shard_index: int) -> random.Random:
  # A string seed is hashed with SHA-512 by `random`, the same on every platform and Python run.
  return random.Random(f"bert_tf-shard:{random_seed}:{shard_index}")


# Worker processes build their tokenizer once, in the pool initializer.
_worker_state: dict = {}


def _init_worker(tokenizer_spec: TokenizerSpec, vocab: dict, config, vocab_ids) -> None:
  _worker_state.update(tokenizer=tokenizer_spec.build(vocab), config=config, vocab_ids=vocab_ids)


def _init_pool_worker(parent_pid: int, *args) -> None:
  """The process pool's initializer: this worker ends with the command (`_die_with_parent`), then `_init_worker`."""
  _die_with_parent(parent_pid)
  _init_worker(*args)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


def _die_with_parent(parent_pid: int) -> None:
  """Ends this process when its parent `parent_pid` ends, however it ends, SIGKILL included. Otherwise a worker of
  a killed command lives on, waiting on its pipes and holding the command's standard output open, so that a caller
  reading that output never sees its end. Linux: the kernel sends SIGKILL when the parent's thread that started this
  process ends (PR_SET_PDEATHSIG); ProcessPoolExecutor starts workers in the thread that submits, the command's.
  Elsewhere a thread checks every second."""
  if sys.platform.startswith("linux"):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
      raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
  else:
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True).start()
  # A parent that died before the signal was asked for sends none: this process then has another parent already.
  if os.getppid() != parent_pid:
    os._exit(1)


def _exit_when_orphaned(parent_pid: int) -> None:
  while os.getppid() == parent_pid:
    time.sleep(1)
  os._exit(1)


def _run_shard(shard_index: int, random_seed: int, document_lines: list, temp_path: str) -> tuple[str, Stats]:
  """Worker body: one shard's records into the local file `temp_path`; returns it with the shard's stats."""
  stats = Stats()
  documents = tokenize_documents(document_lines, _worker_state["tokenizer"])
  serialized = make_records(documents, _worker_state["config"], _worker_state["vocab_ids"],
                            shard_rng(random_seed, shard_index), stats)
  records.write_tfrecord_file(temp_path, serialized)
  return temp_path, stats


# -- Orchestration -----------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """Everything `create_pretraining_data` needs besides the instance settings."""

  input_files: tuple[str, ...]
  output_files: tuple[str, ...]
  tokenizer: TokenizerSpec
  random_seed: int = 12345
  reference_compatible: bool = False
  num_workers: int = 1
  num_shards: int = 0  # 0: one shard per `shard_size_mb` of input text.
  # Half a megabyte (~80k words, ~75 documents of typical size) to draw the random next sentence from; enough
  # shards that the last ones do not leave workers idle for long.
  shard_size_mb: float = 0.5
  stats_file: str | None = None  # Default: <first output file>.stats.json

  @property
  def stats_path(self) -> str:
    return self.stats_file or self.output_files[0] + ".stats.json"

  def outputs(self) -> list[tuple[str, str]]:
    """(flag, path) of every file the run writes: the records, then the statistics."""
    return [("output_file", path) for path in self.output_files] + [("stats_file", self.stats_path)]

  def check_outputs(self) -> None:
    """Before anything is read: no output (records or statistics) is a folder or one of the inputs (the text or
    the vocabulary), which the rename at the end would replace; one line naming both flags."""
    for flag, path in self.outputs():
      fileio.check_output_file(flag, path)
      fileio.check_not_input(flag, path, {"input_file": self.input_files, "vocab_file": [self.tokenizer.vocab_file]})


def _append_file(source: str, destination: records.TFRecordFileWriter) -> None:
  # A TFRecord file is a sequence of self-delimited records, so concatenating files concatenates records.
  with open(source, "rb") as f:
    while chunk := f.read(1 << 22):
      destination.write_framed(chunk)
  os.remove(source)


def create_pretraining_data(run: RunConfig, config: instances_lib.InstanceConfig,
                            progress: Callable[[str], None] = log.info, run_shards: Callable | None = None) -> dict:
  """Writes the records and the statistics file; returns the statistics (a JSON-able dict).

  `run_shards`: what runs the sharded mode's jobs, called as `_run_sharded` is (run, config, vocab, vocab_ids,
  stats, progress) and returning the shard count; default the worker processes of `_run_sharded`. The Beam
  pipeline (`bert_tf.data.beam_pipeline`) passes its own, so checks and statistics stay this function's.
  """
  from bert_tf.data import tokenization

  config.validate()
  if run.num_workers < 1:
    raise ValueError(f"--num_workers={run.num_workers}: must be at least 1")
  if not run.output_files:
    raise ValueError("--output_file is empty; give one or more comma-separated output paths")
  for path in run.input_files:
    if not fileio.exists(path):
      raise FileNotFoundError(f"input file {path} does not exist")
    if text_io.is_directory(path):
      raise IsADirectoryError(f"input file {path} is a directory: give files or globs, e.g. "
                              f"{os.path.join(path, '*.txt')}")
  vocab = tokenization.load_vocab(run.tokenizer.vocab_file)
  tokenization.check_special_tokens(vocab, run.tokenizer.vocab_file)
  vocab_ids = instances_lib.VocabIds.from_vocab(vocab)
  # Before any output exists. Reads up to the first non-blank line: at once for any real corpus.
  if next(iter_document_lines(run.input_files), None) is None:
    raise ValueError(f"{text_io.name_files(run.input_files)}: no documents (the corpus is empty or blank): give "
                     "one sentence a line, a blank line between documents; nothing was written")

  if instances_lib.BACKEND != "compiled":
    progress("bert_tf.data._draws is not compiled (pip install -e . builds it with a C compiler): the records are "
             "the same, made more slowly (about 1.4x per instance, measured here)")
  started = time.time()
  stats = Stats()
  if run.reference_compatible:
    num_shards = 1
    _run_reference_compatible(run, config, vocab, vocab_ids, stats, progress)
  else:
    num_shards = (run_shards or _run_sharded)(run, config, vocab, vocab_ids, stats, progress)
  elapsed = time.time() - started

  summary = stats.to_dict()
  summary.update(
      elapsed_seconds=round(elapsed, 3),
      instances_per_second=round(stats.instances / max(elapsed, 1e-9), 1),
      mode="reference_compatible" if run.reference_compatible else "sharded",
      draws=instances_lib.BACKEND,
      num_shards=num_shards,
      num_workers=1 if run.reference_compatible else run.num_workers,
      input_files=list(run.input_files),
      output_files=list(run.output_files),
      settings=dict(dataclasses.asdict(config), random_seed=run.random_seed,
                    vocab_file=run.tokenizer.vocab_file, do_lower_case=run.tokenizer.do_lower_case),
  )
  stats_file = run.stats_path
  fileio.write_text_atomic(stats_file, json.dumps(summary, indent=2) + "\n")
  summary["stats_file"] = stats_file
  return summary


def _check_every_output_has_records(run: RunConfig, per_file: Sequence[int], how: str) -> None:
  """A run that would leave an output file without a single record is an error, not a file that looks complete.

  `per_file`: records per output file; `how`: how records were spread over the files, for the message. Called
  before the outputs are committed, so raising leaves none of them.
  """
  if not sum(per_file):
    # Documents exist (checked up front), and a document with a token gives an instance per pass, so every
    # non-blank line lost all its characters to the tokenizer's cleaning (control characters, U+FFFD...).
    raise ValueError(f"{text_io.name_files(run.input_files)}: no instances: no line of the corpus has a token "
                     "(its non-blank lines hold only control or unprintable characters, which the tokenizer "
                     "drops); nothing was written")
  empty = [path for path, n in zip(run.output_files, per_file) if not n]
  if empty:
    raise ValueError(f"--output_file: {len(empty)} of the {len(per_file)} output files would hold no record "
                     f"({text_io.name_files(empty)}): {how}; give at most {len(per_file) - len(empty)} output "
                     "file(s); nothing was written")


def _run_reference_compatible(run, config, vocab, vocab_ids, stats, progress) -> None:
  rng = random.Random(run.random_seed)
  tokenizer = run.tokenizer.build(vocab)
  progress(f"reading and tokenizing {len(run.input_files)} file(s) (reference-compatible mode: one process, "
           "whole corpus in memory)")
  document_lines = [lines for _, lines in iter_document_lines(run.input_files)]
  documents = tokenize_documents(document_lines, tokenizer)
  del document_lines
  progress(f"{len(documents)} documents; creating instances ({config.dupe_factor} passes)")
  serialized = make_records(documents, config, vocab_ids, rng, stats)
  n_out = len(run.output_files)
  _check_every_output_has_records(
      run, [(len(serialized) - k + n_out - 1) // n_out for k in range(n_out)],
      f"the corpus gives {len(serialized)} instance(s), dealt round-robin")
  writers = [records.TFRecordFileWriter(path) for path in run.output_files]
  try:
    for k, record in enumerate(serialized):
      writers[k % len(writers)].write(record)  # Round-robin, as the reference does.
    for writer in writers:
      writer.close()
  except BaseException:
    for writer in writers:
      writer.abort()
    raise
  progress(f"wrote {stats.instances} instances to {len(writers)} file(s)")


def _shard_plan(run: RunConfig) -> tuple[int, int]:
  """(number of shards, total input bytes); the plan depends on the input and flags only."""
  total = sum(text_io.uncompressed_size(path) for path in run.input_files)
  if run.num_shards > 0:
    return run.num_shards, total
  if run.shard_size_mb <= 0:
    raise ValueError(f"--shard_size_mb={run.shard_size_mb}: must be > 0 (or set --num_shards)")
  return max(1, math.ceil(total / (run.shard_size_mb * (1 << 20)))), total


def _iter_shards(run: RunConfig, num_shards: int, total: int) -> Iterator[tuple[int, list]]:
  """Yields (shard index, documents' lines) for every shard, in order, holding one shard at a time."""
  current, documents = 0, []
  for start, lines in iter_document_lines(run.input_files):
    shard = min(num_shards - 1, start * num_shards // max(total, 1))
    while shard > current:
      yield current, documents
      current, documents = current + 1, []
    documents.append(lines)
  while current < num_shards:
    yield current, documents
    current, documents = current + 1, []


def _run_sharded(run, config, vocab, vocab_ids, stats, progress) -> int:
  num_shards, total = _shard_plan(run)
  if num_shards < len(run.output_files):  # Known before any work: some outputs would get no shard.
    raise ValueError(
        f"--output_file names {len(run.output_files)} files but the input makes {num_shards} shard(s) "
        f"({total / 1e6:.2f} MB of text{'' if run.num_shards else f' at --shard_size_mb={run.shard_size_mb}'}), "
        f"and each file gets whole shards: give at most {num_shards} output file(s), or "
        f"--num_shards={len(run.output_files)}")
  progress(f"{total / 1e6:.1f} MB of text in {len(run.input_files)} file(s) -> {num_shards} shard(s) on "
           f"{run.num_workers} worker(s)")
  writers = [records.TFRecordFileWriter(path) for path in run.output_files]
  started = time.time()

  per_file = [0] * len(writers)

  def finish(shard_index: int, temp_path: str, shard_stats: Stats) -> None:
    stats.merge(shard_stats)
    per_file[shard_index % len(writers)] += shard_stats.instances
    _append_file(temp_path, writers[shard_index % len(writers)])
    done = shard_index + 1
    rate = stats.instances / max(time.time() - started, 1e-9)
    eta = (time.time() - started) / done * (num_shards - done)
    progress(f"shard {done}/{num_shards}: {stats.instances:,} instances, {rate:,.0f} instances/s, "
             f"ETA {eta:,.0f} s")

  # Workers write each shard to a local temporary file (no TensorFlow needed there); this process appends it to
  # its output, which may be on gs://. Local shards go beside the first output (a remote one's: in the machine's
  # temporary folder), in a hidden folder named after this process, which the next run removes if this one is killed.
  first = run.output_files[0]
  shard_dir = fileio.temp_path_for(
      os.path.join(tempfile.gettempdir(), "bert_tf_shards") if fileio.is_remote(first) else first + ".shards")
  os.mkdir(shard_dir)

  def shard_temp(shard_index: int) -> str:
    return os.path.join(shard_dir, f"shard{shard_index:05d}.tfrecord")

  executor = None
  try:
    if run.num_workers == 1:
      _init_worker(run.tokenizer, vocab, config, vocab_ids)
      for shard_index, document_lines in _iter_shards(run, num_shards, total):
        finish(shard_index, *_run_shard(shard_index, run.random_seed, document_lines, shard_temp(shard_index)))
    else:
      # Spawned, not forked: this process has TensorFlow loaded, whose thread pools do not survive a fork.
      executor = concurrent.futures.ProcessPoolExecutor(
          max_workers=run.num_workers, mp_context=multiprocessing.get_context("spawn"),
          initializer=_init_pool_worker, initargs=(os.getpid(), run.tokenizer, vocab, config, vocab_ids))
      pending: dict[int, concurrent.futures.Future] = {}
      next_to_finish = 0
      # At most num_workers + 1 shards are in flight, which bounds the memory of this process too.
      for shard_index, document_lines in _iter_shards(run, num_shards, total):
        pending[shard_index] = executor.submit(
            _run_shard, shard_index, run.random_seed, document_lines, shard_temp(shard_index))
        del document_lines
        while len(pending) > run.num_workers:
          finish(next_to_finish, *pending.pop(next_to_finish).result())
          next_to_finish += 1
      while pending:
        finish(next_to_finish, *pending.pop(next_to_finish).result())
        next_to_finish += 1
      executor.shutdown()
      executor = None
    _check_every_output_has_records(run, per_file, f"the corpus gives {stats.instances} instance(s) in "
                                    f"{num_shards} shard(s), shard s going to file s mod {len(writers)}")
    for writer in writers:
      writer.close()
  except BaseException:
    if executor is not None:
      executor.shutdown(wait=True, cancel_futures=True)
    for writer in writers:
      writer.abort()
    raise
  finally:
    shutil.rmtree(shard_dir, ignore_errors=True)
  return num_shards
