"""The project's main job on the embedded default corpus: the README's first command runs this.

Stages (each prints its progress):
  1. write the embedded corpus (Python's documentation topics) in the pretraining input format;
  2. learn an uncased WordPiece vocabulary from it;
  3. create pretraining records in `tfrecords/` with parallel workers, and show a few decoded instances;
  4. pretrain the tiny encoder (L2/H128) on them for a few minutes, MLM and NSP accuracy shown as they rise,
     and write the encoder for fine-tuning (a TF checkpoint and a SavedModel).
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
  # Pretraining the tiny config: a few minutes on 2 CPU cores. A small model learns fast at a high rate.
  pretrain_steps: int = 600
  pretrain_batch_size: int = 32
  pretrain_learning_rate: float = 1e-3
  pretrain_warmup_steps: int = 60
  pretrain_log_steps: int = 50


def _pretrain(config: MainJobConfig, input_file: str, vocab_size: int, say: Callable[[str], None]) -> dict:
  from bert_tf.config import BertConfig
  from bert_tf.training import pretraining

  output_dir = os.path.join(config.work_dir, "pretraining")
  run_config = pretraining.PretrainingConfig(
      input_file=input_file, output_dir=output_dir,
      bert_config=BertConfig.from_preset("tiny", vocab_size=vocab_size),
      max_seq_length=config.max_seq_length, max_predictions_per_seq=config.max_predictions_per_seq,
      train_batch_size=config.pretrain_batch_size, learning_rate=config.pretrain_learning_rate,
      num_train_steps=config.pretrain_steps, num_warmup_steps=config.pretrain_warmup_steps,
      save_checkpoints_steps=config.pretrain_steps, steps_per_loop=config.pretrain_log_steps,
      log_steps=config.pretrain_log_steps, distribution_strategy="one_device", seed=config.random_seed)
  result = pretraining.run_pretraining(run_config)
  first, last = result.history[0], result.history[-1]
  for name in ("mlm_accuracy", "nsp_accuracy", "mlm_loss", "nsp_loss"):
    say(f"{name}: {first[name]:.3f} at step {first['step']} -> {last[name]:.3f} at step {last['step']}")
  say(f"encoder for fine-tuning: {output_dir}/encoder_checkpoint (TF checkpoint), "
      f"{output_dir}/encoder_savedmodel (SavedModel), {output_dir}/bert_config.json")
  return dict(output_dir=output_dir, steps=result.step,
              history=[{k: round(float(v), 4) for k, v in h.items()} for h in result.history])


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

  say(json.dumps(summary["records"], indent=2))
  inv_vocab = {i: t for t, i in tokenization.load_vocab(vocab_file).items()}
  for k, example in enumerate(describe.iter_parsed([outputs[0]])):
    if k >= config.show_instances:
      break
    say(f"--- instance {k} of {outputs[0]}")
    say(describe.decode_instance(example, inv_vocab))

  stage(f"4/4 pretraining the tiny encoder for {config.pretrain_steps} steps (MLM + NSP, batch "
        f"{config.pretrain_batch_size}, one device)")
  summary["pretraining"] = _pretrain(config, ",".join(outputs), len(tokens), say)
  summary["elapsed_seconds"] = round(time.time() - started, 1)
  fileio.write_text_atomic(os.path.join(config.work_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
  say(f"\nmain job done in {summary['elapsed_seconds']} s; summary in {config.work_dir}/summary.json")
  return summary
