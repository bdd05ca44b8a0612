r"""GLUE fine-tuning peer: Hugging Face transformers on PyTorch, for `bench/bench_glue.py`.

Why: the GLUE quality benchmark needs an independent, trusted implementation to compare our TensorFlow
fine-tuning (`scripts/run_classifier.py`) against. This script fine-tunes
`transformers.BertForSequenceClassification` from the same weights (a Hugging Face directory with
config.json, model.safetensors, vocab.txt; the classifier head newly initialised, as Hugging Face does) on
the same GLUE train.tsv, with the same hyperparameters and seed, and evaluates on dev.tsv.

What it does, mirroring google-research/bert's `run_classifier.py` (which our side implements):

- Data: the TSVs are read here with `csv` (QUOTE_NONE, UTF-8 with an optional BOM), independently of our
  reader. MRPC: label = column 0 ("0"/"1"), sentences = columns 3 and 4. RTE: sentences = columns 1 and 2,
  label = column 3 (entailment -> 0, not_entailment -> 1, google-research's label order). The header row is
  skipped. `--max_train_examples=N` keeps the first N training rows in file order (0 = all).
- Tokenization: `BertTokenizerFast(vocab_file, do_lower_case=True)` pair encoding, [CLS] a [SEP] b [SEP],
  truncation "longest_first" to `--max_seq_length`; each batch is padded to its longest sequence (dynamic
  padding; our side pads per batch too).
- Optimisation: AdamW (beta 0.9 / 0.999, epsilon 1e-6), weight decay 0.01 on every parameter except biases
  and LayerNorm weights; global-norm gradient clipping at 1.0; google-research's schedule: the learning rate
  is lr * step / warmup_steps while step < warmup_steps, then lr * (1 - step / total_steps) (the decay runs
  from step 0, as the reference's polynomial_decay does), where step counts the updates already applied;
  warmup_steps = int(total_steps * warmup_proportion). Dropout 0.1 (the config's hidden and attention
  dropout; the classifier dropout defaults to the hidden one). Mean cross-entropy loss over the batch.
- Batching: the training set is shuffled at every epoch by a numpy RandomState seeded with `--seed`;
  the last partial batch of an epoch is kept (Hugging Face's default), so an epoch has
  ceil(train_examples / batch) steps. `--seed` also seeds torch (dropout, the classifier initialisation).
- Known difference: torch.optim.AdamW applies Adam's bias correction; google-research's AdamWeightDecay
  (and ours) does not. This is recorded in results.json under "notes".

Metrics on dev: accuracy, and for MRPC F1 of the positive class 1, computed here with numpy; also the mean
dev loss. Timing: train_seconds is the wall time of the training loop only (batch assembly, forward,
backward, update), excluding model loading and tokenization; train_examples_per_second = training examples
processed (epochs x train examples) / train_seconds. eval_seconds is the wall time of the dev pass.

  python bench/glue_hf_peer.py --task_name=RTE --data_dir=../shared/data/glue/RTE \
      --model_dir=.cache/minilm/model --output_dir=/tmp/peer_rte --learning_rate=5e-5 --seed=42

Writes <output_dir>/results.json. Needs torch and transformers (bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import csv
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_peer  # noqa: E402
from hf_peer import BIAS_CORRECTION_NOTE, decays, google_lr_factor, write_json_atomic  # noqa: E402,F401


@dataclass(frozen=True)
class TaskSpec:
  """Where a task's columns are and how its labels map to class ids."""

  text_a_column: int
  text_b_column: int
  label_column: int
  num_columns: int
  labels: tuple[str, ...]  # Class id i is labels[i].
  f1: bool  # Whether F1 of class 1 is reported.


TASKS = {
    "MRPC": TaskSpec(text_a_column=3, text_b_column=4, label_column=0, num_columns=5, labels=("0", "1"),
                     f1=True),
    "RTE": TaskSpec(text_a_column=1, text_b_column=2, label_column=3, num_columns=4,
                    labels=("entailment", "not_entailment"), f1=False),
}


@dataclass
class Examples:
  """Tokenized examples: token ids and segment ids per example (unpadded), and class ids."""

  input_ids: list[list[int]]
  token_type_ids: list[list[int]]
  labels: np.ndarray

  def __len__(self) -> int:
    return len(self.labels)


def read_tsv(path: str, spec: TaskSpec) -> tuple[list[str], list[str], list[int]]:
  """Reads a GLUE TSV (header skipped): returns (text_a, text_b, class ids)."""
  texts_a, texts_b, labels = [], [], []
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
    for line_number, row in enumerate(reader, start=1):
      if line_number == 1:
        continue
      if len(row) != spec.num_columns:
        raise ValueError(f"{path}:{line_number}: expected {spec.num_columns} tab-separated columns, got "
                         f"{len(row)}")
      label = row[spec.label_column]
      if label not in spec.labels:
        raise ValueError(f"{path}:{line_number}: label {label!r} is not one of {spec.labels}")
      texts_a.append(row[spec.text_a_column])
      texts_b.append(row[spec.text_b_column])
      labels.append(spec.labels.index(label))
  if not labels:
    raise ValueError(f"{path}: no examples")
  return texts_a, texts_b, labels


def tokenize(tokenizer, texts_a: list[str], texts_b: list[str], labels: list[int],
             max_seq_length: int) -> Examples:
  """Pair-encodes the texts, truncating the longer side first to `max_seq_length`; no padding."""
  encoded = tokenizer(texts_a, texts_b, truncation="longest_first", max_length=max_seq_length,
                      padding=False, return_attention_mask=False, return_token_type_ids=True)
  return Examples(encoded["input_ids"], encoded["token_type_ids"], np.asarray(labels, dtype=np.int64))


def collate(examples: Examples, indices: Sequence[int], pad_id: int, with_labels: bool = True) -> dict:
  """One batch as torch tensors, padded to its longest sequence."""
  import torch

  input_ids, token_type_ids, attention_mask = hf_peer.pad(
      [examples.input_ids[i] for i in indices], pad_id, [examples.token_type_ids[i] for i in indices])
  batch = {"input_ids": torch.from_numpy(input_ids), "token_type_ids": torch.from_numpy(token_type_ids),
           "attention_mask": torch.from_numpy(attention_mask)}
  if with_labels:
    batch["labels"] = torch.from_numpy(examples.labels[np.asarray(indices)])
  return batch


def classification_metrics(predictions: np.ndarray, labels: np.ndarray, f1: bool) -> dict[str, float]:
  """Accuracy, and F1 of class 1 when `f1`."""
  metrics = {"accuracy": float(np.mean(predictions == labels))}
  if f1:
    tp = int(np.sum((predictions == 1) & (labels == 1)))
    fp = int(np.sum((predictions == 1) & (labels == 0)))
    fn = int(np.sum((predictions == 0) & (labels == 1)))
    metrics["f1"] = 2.0 * tp / (2 * tp + fp + fn) if tp + fp + fn else 0.0
  return metrics


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = hf_peer.argument_parser(__doc__)
  parser.add_argument("--task_name", required=True, choices=sorted(TASKS))
  parser.add_argument("--data_dir", required=True, help="Folder with the task's train.tsv and dev.tsv.")
  hf_peer.add_model_flags(parser, "results.json is written")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--eval_batch_size", type=int, default=8, help="google-research's default.")
  hf_peer.add_optimizer_flags(parser, learning_rate=5e-5)
  parser.add_argument("--max_train_examples", type=int, default=0,
                      help="Keep the first N training examples (file order); 0 = all.")
  hf_peer.add_run_flags(parser, seed_help=None, log_every=20)
  # Matched runs (bench/glue_matched.py): the other implementation's batches and classifier start, no dropout.
  hf_peer.add_matched_flags(
      parser, order_help="JSON list of batches (lists of train.tsv example indices, header excluded), one per "
                         "optimizer step; replaces the seeded shuffle, and its length is the step count.",
      head_help=".npz with the classifier's kernel [hidden, classes] and bias [classes].")
  args = parser.parse_args(argv)
  if args.max_train_examples < 0:
    parser.error("--max_train_examples must be >= 0")
  hf_peer.check_flags(parser, args, "eval_batch_size")
  return args


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  spec = TASKS[args.task_name]
  torch, transformers = hf_peer.start_torch(args.num_threads)

  vocab_file = os.path.join(args.model_dir, "vocab.txt")
  tokenizer = transformers.BertTokenizerFast(vocab_file, do_lower_case=True)
  train_texts = read_tsv(os.path.join(args.data_dir, "train.tsv"), spec)
  if args.max_train_examples:
    train_texts = tuple(column[:args.max_train_examples] for column in train_texts)
  dev_texts = read_tsv(os.path.join(args.data_dir, "dev.tsv"), spec)
  train = tokenize(tokenizer, *train_texts, args.max_seq_length)
  dev = tokenize(tokenizer, *dev_texts, args.max_seq_length)
  pad_id = tokenizer.pad_token_id
  print(f"{args.task_name}: {len(train)} train / {len(dev)} dev examples; longest train sequence "
        f"{max(map(len, train.input_ids))} tokens", flush=True)

  order = hf_peer.read_order(args.order_file, len(train)) if args.order_file else None
  model, loading, newly_initialized = hf_peer.load_model(
      transformers.BertForSequenceClassification, args, head="classifier", show_unexpected=True,
      num_labels=len(spec.labels))
  steps_per_epoch = math.ceil(len(train) / args.train_batch_size)
  total_steps = len(order) if order else max(1, int(steps_per_epoch * args.num_train_epochs))
  warmup_steps = int(total_steps * args.warmup_proportion)

  shuffler = np.random.RandomState(args.seed)

  def batches():
    if order:
      yield from order
      return
    while True:
      permutation = shuffler.permutation(len(train))
      for begin in range(0, len(train), args.train_batch_size):
        yield permutation[begin:begin + args.train_batch_size]

  trained = hf_peer.train(model, args, batches(), lambda i: model(**collate(train, i, pad_id)).loss, total_steps,
                          warmup_steps, "examples", show_lr=True)
  step, processed, step_losses = trained["steps"], trained["processed"], trained["step_losses"]
  train_seconds, train_cpu_seconds = trained["train_seconds"], trained["train_cpu_seconds"]

  start = time.perf_counter()
  logits = hf_peer.predict_logits(model, len(dev), args.eval_batch_size,
                                  lambda indices: collate(dev, indices, pad_id, with_labels=False))
  eval_seconds = time.perf_counter() - start
  log_probs = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
  metrics = classification_metrics(np.argmax(logits, axis=1), dev.labels, spec.f1)
  metrics["eval_loss"] = float(-np.mean(log_probs[np.arange(len(dev)), dev.labels]))

  results = {
      "implementation": f"transformers {transformers.__version__} / torch {torch.__version__}",
      "task": args.task_name,
      "metrics": metrics,
      "eval_examples": len(dev),
      "train_examples": len(train),
      "epochs": args.num_train_epochs,
      "steps": step,
      "warmup_steps": warmup_steps,
      "train_examples_processed": processed,
      "train_seconds": train_seconds,
      "train_examples_per_second": processed / train_seconds,
      "train_cpu_seconds": train_cpu_seconds,
      "eval_seconds": eval_seconds,
      "eval_examples_per_second": len(dev) / eval_seconds,
      "final_train_loss": step_losses[-1],
      "hyperparameters": {
          "max_seq_length": args.max_seq_length, "train_batch_size": args.train_batch_size,
          "eval_batch_size": args.eval_batch_size, "learning_rate": args.learning_rate,
          "num_train_epochs": args.num_train_epochs, "warmup_proportion": args.warmup_proportion,
          "weight_decay": args.weight_decay, "adam_betas": [0.9, 0.999], "adam_epsilon": args.adam_epsilon,
          "max_grad_norm": args.max_grad_norm,
          "hidden_dropout_prob": model.config.hidden_dropout_prob,
          "attention_probs_dropout_prob": model.config.attention_probs_dropout_prob,
          "schedule": "google-research: lr*step/warmup_steps, then lr*(1 - step/total_steps)",
          "padding": "dynamic, to the longest sequence of each batch",
          "last_partial_batch": "kept",
          "shuffle": "numpy RandomState(seed).permutation every epoch",
          "max_train_examples": args.max_train_examples,
      },
      "seed": args.seed,
      "threads": hf_peer.threads(torch, args.num_threads),
      "model": {"model_dir": os.path.abspath(args.model_dir), "newly_initialized": newly_initialized,
                "unexpected_keys": sorted(loading.get("unexpected_keys", [])),
                "attn_implementation": model.config._attn_implementation,
                "hidden_act": model.config.hidden_act},
      "data": {"train": os.path.abspath(os.path.join(args.data_dir, "train.tsv")),
               "dev": os.path.abspath(os.path.join(args.data_dir, "dev.tsv"))},
      "notes": [BIAS_CORRECTION_NOTE],
      "matched": {"order_file": args.order_file, "head_init": args.head_init, "dropout": args.dropout},
      "step_losses": step_losses,
  }
  os.makedirs(args.output_dir, exist_ok=True)
  path = os.path.join(args.output_dir, "results.json")
  write_json_atomic(path, results)
  shown = "  ".join(f"{k} {v:.4f}" for k, v in metrics.items())
  print(f"{args.task_name} dev: {shown}  |  train {train_seconds:.1f}s, {processed / train_seconds:.1f} "
        f"examples/s, {step} steps  |  eval {eval_seconds:.1f}s", flush=True)
  print(f"wrote {path}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
