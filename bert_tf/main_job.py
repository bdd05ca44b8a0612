"""The project's main job on the embedded default corpus: the README's first command runs this.

Stages (each prints its progress):
  1. write the embedded corpus (Python's documentation topics) in the pretraining input format;
  2. learn an uncased WordPiece vocabulary from it;
  3. create pretraining records in `tfrecords/` with parallel workers;
  4. print a summary and a few decoded instances.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from typing import Callable


@dataclasses.dataclass(frozen=True)
class MainJobConfig:
  work_dir: str = "out/main_job"  # Corpus, vocabulary and later stages' outputs.
  records_dir: str = "tfrecords"
  vocab_size: int = 3000  # The corpus has ~3,400 distinct words; a larger request gives no larger vocabulary.
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  dupe_factor: int = 5
  num_workers: int = 2
  num_shards: int = 4
  num_output_files: int = 4
  random_seed: int = 12345
  show_instances: int = 3


def run(config: MainJobConfig = MainJobConfig(), say: Callable[[str], None] = print) -> dict:
  """Runs every stage; returns a summary dict (also written to `<work_dir>/summary.json`)."""
  from bert_tf import fileio
  from bert_tf.data import corpus, describe, instances, pretraining_data, text_io, tokenization, vocab_learning

  started = time.time()
  summary: dict = {}

  def stage(title: str) -> None:
    say(f"\n== [{time.time() - started:6.1f} s] {title}")

  stage("1/4 embedded corpus (pydoc_data.topics) -> one sentence a line, blank line between documents")
  corpus_file = corpus.write_default_corpus(os.path.join(config.work_dir, "corpus.txt"))
  lines = [line for _, line in text_io.iter_lines(corpus_file)]
  words = sum(len(line.split()) for line in lines)
  say(f"{corpus_file}: {sum(1 for l in lines if l)} sentences, {words:,} words")
  summary["corpus"] = dict(file=corpus_file, words=words)

  stage(f"2/4 learning an uncased WordPiece vocabulary of about {config.vocab_size} tokens")
  vocab_file = os.path.join(config.work_dir, "vocab.txt")
  tokens = vocab_learning.learn_wordpiece_vocab((l for l in lines if l), config.vocab_size, do_lower_case=True)
  tokenization.save_vocab(tokens, vocab_file)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  unk = vocab_learning.unk_rate(tokenizer, [l for l in lines if l])
  say(f"{vocab_file}: {len(tokens)} tokens; [UNK] rate on the corpus {100 * unk:.3f}%")
  summary["vocab"] = dict(file=vocab_file, size=len(tokens), unk_rate=unk)

  stage(f"3/4 pretraining records: {config.num_shards} shards on {config.num_workers} workers, "
        f"dupe_factor {config.dupe_factor}")
  outputs = tuple(os.path.join(config.records_dir, f"pretrain-{k:02d}-of-{config.num_output_files:02d}.tfrecord")
                  for k in range(config.num_output_files))
  run_config = pretraining_data.RunConfig(
      input_files=(corpus_file,), output_files=outputs,
      tokenizer=pretraining_data.TokenizerSpec(vocab_file, do_lower_case=True),
      random_seed=config.random_seed, num_workers=config.num_workers, num_shards=config.num_shards,
      stats_file=os.path.join(config.records_dir, "pretrain.stats.json"))
  stats = pretraining_data.create_pretraining_data(
      run_config, instances.InstanceConfig(max_seq_length=config.max_seq_length,
                                           max_predictions_per_seq=config.max_predictions_per_seq,
                                           dupe_factor=config.dupe_factor), progress=say)
  summary["records"] = {k: stats[k] for k in (
      "instances", "tokens", "masked_fraction", "next_sentence_random_fraction", "elapsed_seconds",
      "instances_per_second", "output_files", "stats_file")}

  stage("4/4 summary")
  say(json.dumps(summary["records"], indent=2))
  inv_vocab = {i: t for t, i in tokenization.load_vocab(vocab_file).items()}
  for k, example in enumerate(describe.iter_parsed([outputs[0]])):
    if k >= config.show_instances:
      break
    say(f"--- instance {k} of {outputs[0]}")
    say(describe.decode_instance(example, inv_vocab))
  summary["elapsed_seconds"] = round(time.time() - started, 1)
  fileio.write_text_atomic(os.path.join(config.work_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
  say(f"\nmain job done in {summary['elapsed_seconds']} s; summary in {config.work_dir}/summary.json")
  return summary
