"""Record creation and vocabulary word counting as Apache Beam pipelines (the optional extra: pip install -e .[beam]).

Record creation (`create_pretraining_data_beam`) is the sharded mode of `bert_tf.data.pretraining_data` with its
jobs run by a Beam runner instead of local worker processes:

1. The launching process checks the run exactly as the multiprocessing mode does, reads the corpus once and cuts
   it into the same shards (`_iter_shards`: contiguous, at document boundaries, by byte offset), staging each
   shard's document lines as `shard{s}.json` in a temporary directory (`temp_dir`).
2. Pipeline 1: the shards are the elements. Each runs the multiprocessing mode's job (`_run_shard`: tokenize,
   shuffle, pair, mask, serialize, seeded by (random_seed, shard index)) and writes its records and statistics
   next to its input.
3. The launching process adds up the shards' statistics and runs the multiprocessing mode's checks (no output
   file may be left without a record) before any output exists.
4. Pipeline 2: the output files are the elements. File k appends shards k, k + n, k + 2n, ... (n output files),
   in shard order, under a temporary name renamed into place when complete.

So for the same seed and shard count the records are byte-identical to the multiprocessing mode's, whatever the
runner and however it spreads the shards; `create_pretraining_data` writes the statistics file as it always does.
Step 1 is one sequential pass over the corpus on the launching machine; the work per shard (tokenization and
instance creation, nearly all of the time) is what the runner spreads. `temp_dir` must be a directory that the
launcher and every worker can read and write (gs:// on Dataflow); workers need bert_tf installed.

Word counting (`count_words_beam`): the input files are the elements; each file's lines are cut into the chunks
of `BasicTokenizer` and counted, chunk counts are combined over the corpus, then split into words and combined
again: the `count_words` of `bert_tf.data.vocab_learning`, so the learner gets the same counts and learns the
same vocabulary. The counts (and the number of non-blank lines) come back to the launching process, which runs
tensorflow-text's learner and works out the [UNK] rate from the counts, never reading the text itself.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import json
import logging
import os
import shlex
import shutil
import tempfile
import time
import uuid
from typing import Callable, Sequence

from bert_tf import fileio
from bert_tf.data import instances as instances_lib
from bert_tf.data import pretraining_data
from bert_tf.errors import UserError

log = logging.getLogger(__name__)

# Runners the scripts accept. The DirectRunner runs on this machine (in this process by default, or on several
# processes with --direct_num_workers=N --direct_running_mode=multi_processing); the others submit to a service
# or a cluster, whose own options go in `pipeline_options`.
RUNNERS = ("DirectRunner", "DataflowRunner", "FlinkRunner", "SparkRunner", "PortableRunner")
LOCAL_RUNNERS = ("DirectRunner",)
INSTALL_HINT = "pip install -e .[beam]"


class BeamNotInstalledError(UserError, ImportError):
  """apache-beam, an optional extra, is not installed (a UserError: the scripts print the message, no traceback)."""


def import_beam():
  """The `apache_beam` module, or BeamNotInstalledError saying how to install it. Imported only here: the extra
  is optional and nothing else in bert_tf needs it."""
  try:
    import apache_beam
  except ImportError as e:
    raise BeamNotInstalledError(f"--beam_runner needs Apache Beam, an optional extra that is not installed "
                                f"({e}): {INSTALL_HINT} (from the repository), or run without --beam_runner") from e
  return apache_beam


def check_beam_flags(runner: str | None, pipeline_options: str = "", temp_dir: str | None = None,
                     allowed_unknown: str = "") -> None:
  """Validates the scripts' Beam flags before anything is read; imports apache_beam when a runner is named.
  `allowed_unknown` (--beam_allowed_unknown_options): comma-separated option names that Beam's Python SDK does
  not define but the runner takes (a portable runner passes them on); any other unknown option is refused."""
  if runner is None:
    if pipeline_options or temp_dir:
      raise ValueError("--beam_pipeline_options and --beam_temp_dir need --beam_runner (e.g. "
                       "--beam_runner=DirectRunner)")
    return
  if runner not in RUNNERS:
    raise ValueError(f"--beam_runner={runner}: unknown; give one of {', '.join(RUNNERS)}")
  try:
    words = shlex.split(pipeline_options)
  except ValueError as e:
    raise ValueError(f"--beam_pipeline_options={pipeline_options!r}: {e}; give space-separated --name=value "
                     "options as on a shell command line") from None
  for i, word in enumerate(words):
    # A value may follow its option as the next word (`--project my-project`), as on Beam's own command lines.
    if not word.startswith("--") and (i == 0 or not words[i - 1].startswith("--") or "=" in words[i - 1]):
      raise ValueError(f"--beam_pipeline_options: {word!r} is not an option; give --name=value words, e.g. "
                       "'--project=my-project --region=us-central1'")
    if word.split("=", 1)[0] == "--runner":
      raise ValueError("--beam_pipeline_options names --runner: give the runner as --beam_runner only")
  if runner not in LOCAL_RUNNERS and not temp_dir:
    raise ValueError(f"--beam_runner={runner} needs --beam_temp_dir: a directory the launching machine and every "
                     "worker can read and write (gs://bucket/tmp on Dataflow, a shared file system on a cluster)")
  import_beam()
  allowed = {f"--{name.strip().lstrip('-')}" for name in allowed_unknown.split(",") if name.strip()}
  unknown = [name for name in unknown_pipeline_options(runner, pipeline_options) if name not in allowed]
  if unknown:
    raise ValueError(f"--beam_pipeline_options: Beam knows no option {', '.join(unknown)} (misspelled?); Beam "
                     "would drop it silently (\"Discarding unparseable args\"). See the options with "
                     "`python -m apache_beam.examples.wordcount --help`; an option only your runner knows: name it "
                     "in --beam_allowed_unknown_options")


def unknown_pipeline_options(runner: str, options: str) -> list[str]:
  """The `--name`s among `options` that none of Beam's registered PipelineOptions define (those of the runners
  in this apache_beam included), which Beam would otherwise discard with only a log line."""
  parsed = pipeline_options(runner, options)
  known = set(parsed.get_all_options())
  every = parsed.get_all_options(retain_unknown_options=True)
  return sorted(f"--{name}" for name in every if name not in known)


def pipeline_options(runner: str, options: str = ""):
  """Beam's PipelineOptions for `runner` and the space-separated `options` (never this process's argv)."""
  beam = import_beam()
  return beam.options.pipeline_options.PipelineOptions(shlex.split(options) + [f"--runner={runner}"])


def _make_work_dir(temp_dir: str | None) -> str:
  """A fresh directory for one run's staged files: under `temp_dir`, or a local temporary directory. Named after
  this process (`fileio.owner_tag`), so that the next run removes the directories of runs that were killed
  (a `finally` removes a finished or failed run's own)."""
  owner = fileio.owner_tag()
  parent = tempfile.gettempdir() if temp_dir is None else temp_dir
  if not fileio.is_remote(parent):
    for path in fileio.remove_dead_leftovers(parent, "bert_tf_beam_"):
      log.warning("removed %s, left by an interrupted Beam run", path)
  if temp_dir is None:
    return tempfile.mkdtemp(prefix=f"bert_tf_beam_{owner}_")
  path = f"{temp_dir.rstrip('/')}/bert_tf_beam_{owner}_{uuid.uuid4().hex[:12]}"
  if fileio.is_remote(path):
    fileio._gfile().makedirs(path)
  else:
    os.makedirs(path)
  return path


def _remove_work_dir(path: str) -> None:
  if fileio.is_remote(path):
    if fileio.exists(path):
      fileio._gfile().rmtree(path)
  else:
    shutil.rmtree(path, ignore_errors=True)


def _join(directory: str, name: str) -> str:
  # os.path.join would do for local paths only; gs:// paths always use "/".
  return f"{directory}/{name}"


# -- Record creation --------------------------------------------------------------------------------------------


def _stats_to_json(stats: pretraining_data.Stats) -> str:
  return json.dumps(dataclasses.asdict(stats))


def _stats_from_json(text: str) -> pretraining_data.Stats:
  fields = json.loads(text)
  # JSON keys are strings; the histogram's are bucket starts.
  fields["length_histogram"] = {int(k): v for k, v in fields["length_histogram"].items()}
  return pretraining_data.Stats(**fields)


@dataclasses.dataclass(frozen=True)
class _ShardJob:
  """One shard's job on a Beam worker: the staged shard in, its records and statistics out (pipeline 1).

  Pickled once with the pipeline; each worker process builds its tokenizer on its first shard.
  """

  tokenizer: pretraining_data.TokenizerSpec
  vocab: dict
  config: instances_lib.InstanceConfig
  vocab_ids: instances_lib.VocabIds
  random_seed: int
  work_dir: str

  def __call__(self, shard_index: int) -> int:
    state = pretraining_data._worker_state
    key = (self.tokenizer, self.config, self.work_dir)
    if state.get("beam_job") != key:
      pretraining_data._init_worker(self.tokenizer, self.vocab, self.config, self.vocab_ids)
      state["beam_job"] = key
    with fileio.open_file(_join(self.work_dir, f"shard{shard_index:05d}.json"), "r") as f:
      document_lines = json.load(f)
    _, stats = pretraining_data._run_shard(shard_index, self.random_seed, document_lines,
                                           _join(self.work_dir, f"records{shard_index:05d}.tfrecord"))
    with fileio.open_file(_join(self.work_dir, f"stats{shard_index:05d}.json"), "w") as f:
      f.write(_stats_to_json(stats))
    return shard_index


@dataclasses.dataclass(frozen=True)
class _OutputFileJob:
  """Output file k from its shards' records, in shard order (pipeline 2)."""

  output_files: tuple[str, ...]
  num_shards: int
  work_dir: str

  def __call__(self, file_index: int) -> str:
    from bert_tf.data import records

    path = self.output_files[file_index]
    writer = records.TFRecordFileWriter(path)
    try:
      for shard_index in range(file_index, self.num_shards, len(self.output_files)):
        # A TFRecord file is a sequence of self-delimited records: appending files appends their records.
        with fileio.open_file(_join(self.work_dir, f"records{shard_index:05d}.tfrecord"), "rb") as f:
          while chunk := f.read(1 << 22):
            writer.write_framed(chunk)
      writer.close()
    except BaseException:
      writer.abort()
      raise
    return path


STAGING_THREADS = 8  # Writes in flight while staging: one gs:// object write takes tens of milliseconds.


def _stage_shard(work_dir: str, shard_index: int, document_lines: list) -> None:
  with fileio.open_file(_join(work_dir, f"shard{shard_index:05d}.json"), "w") as f:
    json.dump(document_lines, f, ensure_ascii=False)


def _stage_shards(shards, work_dir: str) -> None:
  """Writes each (shard index, documents' lines) as `shard{s}.json` in `work_dir`, a few writes at a time while
  the corpus is read on; at most 2 * STAGING_THREADS shards are held in memory."""
  with concurrent.futures.ThreadPoolExecutor(STAGING_THREADS) as pool:
    pending: collections.deque = collections.deque()
    for shard_index, document_lines in shards:
      pending.append(pool.submit(_stage_shard, work_dir, shard_index, document_lines))
      del document_lines
      while len(pending) > 2 * STAGING_THREADS:
        pending.popleft().result()
    while pending:
      pending.popleft().result()


def beam_shard_runner(runner: str = "DirectRunner", options: str = "", temp_dir: str | None = None) -> Callable:
  """A `run_shards` for `pretraining_data.create_pretraining_data` that runs the shards' jobs on Beam."""

  def run_shards(run: pretraining_data.RunConfig, config, vocab, vocab_ids, stats: pretraining_data.Stats,
                 progress) -> int:
    beam = import_beam()
    num_shards, total = pretraining_data._shard_plan(run)
    if num_shards < len(run.output_files):
      raise ValueError(f"--output_file names {len(run.output_files)} files but the input makes {num_shards} "
                       f"shard(s) and each file gets whole shards: give at most {num_shards} output file(s), or "
                       f"--num_shards={len(run.output_files)}")
    work_dir = _make_work_dir(temp_dir)
    try:
      started = time.time()
      _stage_shards(pretraining_data._iter_shards(run, num_shards, total), work_dir)
      progress(f"{total / 1e6:.1f} MB of text in {len(run.input_files)} file(s) -> {num_shards} shard(s) staged "
               f"in {work_dir} ({time.time() - started:.1f} s); running them on {runner}")

      started = time.time()
      job = _ShardJob(run.tokenizer, vocab, config, vocab_ids, run.random_seed, work_dir)
      with beam.Pipeline(options=pipeline_options(runner, options)) as p:
        # Reshuffle: a runner may otherwise keep the shards Create made together in one bundle on one worker.
        _ = p | "Shards" >> beam.Create(range(num_shards)) | beam.Reshuffle() | "Job" >> beam.Map(job)
      per_file = [0] * len(run.output_files)
      for shard_index in range(num_shards):
        with fileio.open_file(_join(work_dir, f"stats{shard_index:05d}.json"), "r") as f:
          shard_stats = _stats_from_json(f.read())
        stats.merge(shard_stats)
        per_file[shard_index % len(run.output_files)] += shard_stats.instances
      progress(f"{num_shards} shard(s): {stats.instances:,} instances in {time.time() - started:.1f} s "
               f"({stats.instances / max(time.time() - started, 1e-9):,.0f} instances/s)")
      pretraining_data._check_every_output_has_records(
          run, per_file, f"the corpus gives {stats.instances} instance(s) in {num_shards} shard(s), shard s going "
          f"to file s mod {len(run.output_files)}")

      writer = _OutputFileJob(tuple(run.output_files), num_shards, work_dir)
      with beam.Pipeline(options=pipeline_options(runner, options)) as p:
        _ = (p | "OutputFiles" >> beam.Create(range(len(run.output_files))) | beam.Reshuffle()
             | "Write" >> beam.Map(writer))
    finally:
      _remove_work_dir(work_dir)
    return num_shards

  return run_shards


def create_pretraining_data_beam(run: pretraining_data.RunConfig, config: instances_lib.InstanceConfig,
                                 runner: str = "DirectRunner", options: str = "", temp_dir: str | None = None,
                                 progress: Callable[[str], None] = log.info) -> dict:
  """`pretraining_data.create_pretraining_data` in its sharded mode, the shards run on Beam's `runner`.

  `options`: further Beam pipeline options, space-separated (`--project=p --region=r ...`). Returns the statistics
  and writes the statistics file as the multiprocessing mode does.
  """
  if run.reference_compatible:
    raise ValueError("--reference_compatible holds the whole corpus in one process, which a Beam runner cannot "
                     "spread; drop --beam_runner or --reference_compatible")
  check_beam_flags(runner, options, temp_dir)
  return pretraining_data.create_pretraining_data(run, config, progress=progress,
                                                  run_shards=beam_shard_runner(runner, options, temp_dir))


# -- Word counting for the vocabulary ---------------------------------------------------------------------------


@functools.lru_cache(maxsize=2)
def _basic_tokenizer(do_lower_case: bool):
  # One per worker process, not per element: building one compiles its tables.
  from bert_tf.data.tokenization import BasicTokenizer

  return BasicTokenizer(do_lower_case)


def _file_lines(path: str):
  """A file's non-blank lines (blank ones have no words)."""
  from bert_tf.data import text_io

  for _, line in text_io.iter_lines(path):
    if line:
      yield line


@dataclasses.dataclass(frozen=True)
class _LineChunks:
  """A line -> its `BasicTokenizer` chunks (its cleaning, CJK spacing, whitespace split)."""

  do_lower_case: bool

  def __call__(self, line: str):
    for chunk, _ in _basic_tokenizer(self.do_lower_case).chunks(line):
      yield chunk


@dataclasses.dataclass(frozen=True)
class _ChunkWords:
  """(chunk, count) -> (word, count) for each word of the chunk (lower-casing, accents, punctuation)."""

  do_lower_case: bool

  def __call__(self, chunk_count: tuple[str, int]):
    chunk, count = chunk_count
    for word in _basic_tokenizer(self.do_lower_case).chunk_words(chunk):
      yield word, count


def _write_json(value, path: str) -> None:
  with fileio.open_file(path, "w") as f:
    json.dump(value, f, ensure_ascii=False)


def _write_sorted_json(pairs: list, path: str) -> None:
  _write_json(sorted(pairs), path)  # Sorted: the same file whatever order the runner combined the counts in.


def count_words_beam_with_lines(files: Sequence[str], do_lower_case: bool, runner: str = "DirectRunner",
                                options: str = "", temp_dir: str | None = None) -> tuple[collections.Counter, int]:
  """(word -> count, non-blank lines) over `files`: `vocab_learning.count_words`, run as a Beam pipeline.

  The files are the elements (a file is read by one worker); `temp_dir` as for record creation.
  """
  check_beam_flags(runner, options, temp_dir)
  beam = import_beam()
  work_dir = _make_work_dir(temp_dir)
  counts_path, lines_path = _join(work_dir, "word_counts.json"), _join(work_dir, "lines.json")
  try:
    with beam.Pipeline(options=pipeline_options(runner, options)) as p:
      lines = (p | "Files" >> beam.Create(list(files)) | beam.Reshuffle()
               | "Lines" >> beam.FlatMap(_file_lines))
      _ = (lines
           | "Chunks" >> beam.FlatMap(_LineChunks(do_lower_case))
           # Text repeats at the chunk level, as count_words knows: each distinct chunk is split into words once.
           | "CountChunks" >> beam.combiners.Count.PerElement()
           | "Words" >> beam.FlatMap(_ChunkWords(do_lower_case))
           | "CountWords" >> beam.CombinePerKey(sum)
           | beam.combiners.ToList()
           | "SaveCounts" >> beam.Map(_write_sorted_json, counts_path))
      _ = (lines | "CountLines" >> beam.combiners.Count.Globally()
           | "SaveLines" >> beam.Map(_write_json, lines_path))
    with fileio.open_file(counts_path, "r") as f:
      counts = collections.Counter(dict(json.load(f)))
    with fileio.open_file(lines_path, "r") as f:
      return counts, json.load(f)
  finally:
    _remove_work_dir(work_dir)


def count_words_beam(files: Sequence[str], do_lower_case: bool, runner: str = "DirectRunner", options: str = "",
                     temp_dir: str | None = None) -> collections.Counter:
  """Word -> count over the lines of `files`: `vocab_learning.count_words`, run as a Beam pipeline."""
  return count_words_beam_with_lines(files, do_lower_case, runner, options, temp_dir)[0]


def beam_word_counter(runner: str = "DirectRunner", options: str = "", temp_dir: str | None = None) -> Callable:
  """A `counter` for `vocab_learning.learn_vocab_file` that counts on Beam's `runner`: (counts, non-blank lines)."""

  def counter(files: list[str], do_lower_case: bool) -> tuple[collections.Counter, int]:
    return count_words_beam_with_lines(files, do_lower_case, runner, options, temp_dir)

  return counter
