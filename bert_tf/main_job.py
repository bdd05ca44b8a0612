"""The project's main job on the embedded default corpus: the README's first command runs this.

Stages (each prints its progress):
  1. write the embedded corpus (Python's documentation topics) in the pretraining input format;
  2. learn an uncased WordPiece vocabulary from it;
  3. create pretraining records in `tfrecords/` with parallel workers, and show a few decoded instances;
  4. pretrain the tiny encoder (L2/H128) on them for a few minutes, MLM and NSP accuracy shown as they rise,
     and write the encoder for fine-tuning (a TF checkpoint and a SavedModel);
  5. fine-tune it on a small real classification task made from the corpus - which of four documents a
     sentence comes from - and report accuracy on held-out sentences;
  6. export the classifier as a SavedModel for TensorFlow Serving (raw text in, label out) and predict with it in
     a fresh process that loads only TensorFlow and tensorflow-text.
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
  # Pretraining the tiny config: a few minutes on 2 CPU cores. A small model learns fast at a high rate, but only
  # after a long warmup: with 60 warmup steps to 1e-3 the model stayed at unigram statistics (MLM accuracy 0.08,
  # NSP 0.52 at step 600; keras-hub's BertBackbone alike), with 200 it reached 0.20 and 0.78.
  pretrain_steps: int = 600
  pretrain_batch_size: int = 32
  pretrain_learning_rate: float = 1e-3
  pretrain_warmup_steps: int = 200
  pretrain_log_steps: int = 50
  # Fine-tuning on the document task (792 train / 198 held-out sentences, 4 classes).
  finetune_epochs: float = 5.0
  finetune_batch_size: int = 32
  finetune_learning_rate: float = 2e-4
  finetune_max_seq_length: int = 64
  finetune_log_steps: int = 25
  model_name: str = "documents"
  # Compute precision of pretraining and fine-tuning (bench/bench_mixed_precision.py compares the three).
  dtype: str = "float32"

  def run_options(self, log_steps: int) -> dict:
    """The run options (bert_tf.training.run_options.RunOptions fields) of both training stages: one device,
    the job's seed and dtype, a loop and a progress line every `log_steps` updates."""
    return dict(distribution_strategy="one_device", seed=self.random_seed, dtype=self.dtype,
                steps_per_loop=log_steps, log_steps=log_steps)


def _pretrain(config: MainJobConfig, input_file: str, vocab_size: int, say: Callable[[str], None]) -> dict:
  from bert_tf.config import BertConfig
  from bert_tf.tasks.pretraining import run as pretraining
  from bert_tf.tasks.pretraining.config import PretrainingConfig

  output_dir = os.path.join(config.work_dir, "pretraining")
  run_config = PretrainingConfig(
      input_file=input_file, output_dir=output_dir,
      bert_config=BertConfig.from_preset("tiny", vocab_size=vocab_size),
      max_seq_length=config.max_seq_length, max_predictions_per_seq=config.max_predictions_per_seq,
      train_batch_size=config.pretrain_batch_size, learning_rate=config.pretrain_learning_rate,
      num_train_steps=config.pretrain_steps, num_warmup_steps=config.pretrain_warmup_steps,
      save_checkpoints_steps=config.pretrain_steps, **config.run_options(config.pretrain_log_steps))
  result = pretraining.run_pretraining(run_config)
  first, last = result.history[0], result.history[-1]
  for name in ("mlm_accuracy", "nsp_accuracy", "mlm_loss", "nsp_loss"):
    say(f"{name}: {first[name]:.3f} at step {first['step']} -> {last[name]:.3f} at step {last['step']}")
  say(f"encoder for fine-tuning: {output_dir}/encoder_checkpoint (TF checkpoint), "
      f"{output_dir}/encoder_savedmodel (SavedModel), {output_dir}/bert_config.json")
  return dict(output_dir=output_dir, steps=result.step,
              history=[{k: round(float(v), 4) for k, v in h.items()} for h in result.history])


def _finetune(config: MainJobConfig, vocab_file: str, pretrained_dir: str, say: Callable[[str], None]) -> dict:
  import numpy as np

  from bert_tf.config import BertConfig
  from bert_tf.data import corpus
  from bert_tf.data.tokenization import FullTokenizer
  from bert_tf.tasks.classification import classifier as classification
  from bert_tf.tasks.classification import metrics
  from bert_tf.training import finetuning

  train, dev = corpus.document_classification_split()
  labels = corpus.DOCUMENT_TASK_TOPICS
  label_ids = {label: i for i, label in enumerate(labels)}
  say(f"task: which document a sentence comes from, {labels}; {len(train)} train and {len(dev)} held-out "
      "sentences (every fifth sentence of each document)")
  tokenizer = FullTokenizer(vocab_file, do_lower_case=True)
  seq = config.finetune_max_seq_length
  files = {}
  for split, pairs in (("train", train), ("dev", dev)):
    path = os.path.join(config.records_dir, "documents", f"{split}.tfrecord")
    files[split] = classification.write_feature_file(
        ((text, None, label_ids[topic]) for text, topic in pairs), tokenizer, seq, path, is_regression=False,
        is_pair=False)
    say(f"{path}: {files[split].num_examples} examples, {files[split].num_truncated} truncated to {seq} tokens")

  output_dir = os.path.join(config.work_dir, "finetuning")
  bert_config = BertConfig.from_json_file(os.path.join(pretrained_dir, "bert_config.json"))
  ft = finetuning.FinetuningConfig(
      output_dir=output_dir, bert_config=bert_config, init_checkpoint=pretrained_dir,
      train_batch_size=config.finetune_batch_size, learning_rate=config.finetune_learning_rate,
      num_train_epochs=config.finetune_epochs, **config.run_options(config.finetune_log_steps))
  task = classification.ClassificationTask(bert_config, len(labels), files["train"].path, seq, seed=ft.seed,
                                           dtype=config.dtype)
  strategy = ft.strategy()
  run, result = finetuning.train(task, ft, files["train"].num_examples, strategy)
  dataset = classification.classifier_dataset(files["dev"].path, 32, seq, False, is_training=False,
                                              pad_to_batch=True)
  predictions, _ = classification.predictions_from_outputs(finetuning.predict(
      run.model, dataset, strategy, num_examples=files["dev"].num_examples), False)
  truth = np.array([label_ids[topic] for _, topic in dev])
  accuracy = metrics.accuracy(predictions, truth)
  majority = float(np.bincount(truth).max() / len(truth))
  first, last = result.history[0], result.history[-1]
  say(f"train accuracy {first['accuracy']:.3f} at step {first['step']} -> {last['accuracy']:.3f} at step "
      f"{last['step']}; held-out accuracy {accuracy:.3f} (majority class {majority:.3f})")
  spec = classification.ClassifierSpec("documents", labels, False, seq, True)
  classifier_dir = classification.save_classifier(run.model, spec, vocab_file, os.path.join(output_dir, "classifier"))
  return dict(output_dir=output_dir, classifier_dir=classifier_dir, steps=result.step, dev_accuracy=accuracy,
              majority_baseline=majority, train_examples=len(train), dev_examples=len(dev),
              history=[{k: round(float(v), 4) for k, v in h.items()} for h in result.history],
              sample=[text for text, _ in dev[:3]])


def _export_and_predict(config: MainJobConfig, classifier_dir: str, sample: list[str],
                        say: Callable[[str], None]) -> dict:
  import subprocess
  import sys

  from bert_tf import console
  from bert_tf.tasks.classification import serving as classifier_serving

  export_dir = os.path.join(config.work_dir, "export")
  saved_model = classifier_serving.export_from_directory(classifier_dir, export_dir, config.model_name,
                                              warmup_texts=[(text, None) for text in sample])
  say(f"SavedModel for TensorFlow Serving: {saved_model} (signatures serving_default: raw text; encoded: ids)")
  script = console.script_path("predict")  # the checkout's scripts/predict.py, or the installed one
  command = [sys.executable, script, f"--saved_model_dir={saved_model}"] + [f"--sentence1={text}" for text in
                                                                             sample[:1]]
  say("fresh process: " + " ".join(command[1:2] + [c if len(c) < 80 else c[:77] + '..."' for c in command[2:]]))
  done = subprocess.run(command, capture_output=True, text=True, check=False)
  if done.returncode != 0:
    raise RuntimeError(f"prediction from the SavedModel failed:\n{done.stderr[-2000:]}")
  lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
  for line in lines:
    say(f"  {line}")
  return dict(saved_model=saved_model, predictions=[json.loads(line) for line in lines])


def run(config: MainJobConfig = MainJobConfig(), say: Callable[[str], None] = print) -> dict:
  """Runs every stage; returns a summary dict (also written to `<work_dir>/summary.json`)."""
  from bert_tf import fileio

  started = time.time()

  def stage(title: str) -> None:
    say(f"\n== [{time.time() - started:6.1f} s] {title}")

  summary = prepare_data(config, say, stage)
  stage(f"4/6 pretraining the tiny encoder for {config.pretrain_steps} steps (MLM + NSP, batch "
        f"{config.pretrain_batch_size}, one device)")
  summary["pretraining"] = _pretrain(config, ",".join(summary["records"]["output_files"]), summary["vocab"]["size"],
                                     say)

  stage(f"5/6 fine-tuning the pretrained encoder to tell which document a sentence comes from "
        f"({config.finetune_epochs:g} epochs, batch {config.finetune_batch_size})")
  summary["finetuning"] = _finetune(config, summary["vocab"]["file"], summary["pretraining"]["output_dir"], say)

  stage("6/6 export for TensorFlow Serving, and a prediction from the SavedModel in a fresh process")
  summary["export"] = _export_and_predict(config, summary["finetuning"]["classifier_dir"],
                                          summary["finetuning"]["sample"], say)
  summary["elapsed_seconds"] = round(time.time() - started, 1)
  fileio.write_text_atomic(os.path.join(config.work_dir, "summary.json"), json.dumps(summary, indent=2) + "\n")
  say(f"\nmain job done in {summary['elapsed_seconds']} s; summary in {config.work_dir}/summary.json")
  return summary


def prepare_data(config: MainJobConfig, say: Callable[[str], None] = print,
                 stage: Callable[[str], None] | None = None) -> dict:
  """Stages 1-3: the corpus, its vocabulary and the pretraining records -> the summary's "corpus", "vocab" and
  "records" entries (`records["output_files"]`: the record files)."""
  from bert_tf.data import corpus, describe, instances, pretraining_data, text_io, tokenization, vocab_learning

  stage = stage or (lambda title: say(f"\n== {title}"))
  summary: dict = {}
  stage("1/6 embedded corpus (pydoc_data.topics) -> one sentence a line, blank line between documents")
  corpus_file = corpus.write_default_corpus(os.path.join(config.work_dir, "corpus.txt"))
  lines = [line for _, line in text_io.iter_lines(corpus_file)]
  words = sum(len(line.split()) for line in lines)
  say(f"{corpus_file}: {sum(1 for l in lines if l)} sentences, {words:,} words")
  summary["corpus"] = dict(file=corpus_file, words=words)

  stage(f"2/6 learning an uncased WordPiece vocabulary of about {config.vocab_size} tokens")
  vocab_file = os.path.join(config.work_dir, "vocab.txt")
  tokens = vocab_learning.learn_wordpiece_vocab((l for l in lines if l), config.vocab_size, do_lower_case=True)
  tokenization.save_vocab(tokens, vocab_file)
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  unk = vocab_learning.unk_rate(tokenizer, [l for l in lines if l])
  say(f"{vocab_file}: {len(tokens)} tokens; [UNK] rate on the corpus {100 * unk:.3f}%")
  summary["vocab"] = dict(file=vocab_file, size=len(tokens), unk_rate=unk)

  stage(f"3/6 pretraining records: {config.num_shards} shards on {config.num_workers} workers, "
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
  return summary
