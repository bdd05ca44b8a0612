r"""SWAG multiple-choice peer: Hugging Face transformers on PyTorch, for `bench/bench_swag.py`.

Why: the multiple-choice benchmark needs an independent, trusted implementation to compare our TensorFlow
fine-tuning (`scripts/run_swag.py`) against. This script fine-tunes `transformers.BertForMultipleChoice` from the
same weights (a Hugging Face directory with config.json, model.safetensors, vocab.txt; the one-unit classifier
newly initialised with the seed, as Hugging Face does) on a CSV in SWAG's layout, with the same hyperparameters
and seed, and scores another.

- Reading: the CSV files are read here with the `csv` module by column name (the unnamed index column, `sent1`,
  `sent2`, `ending0`..`ending3`, `label`), independently of our reader; an example's id is the index column.
- Sequences: for each example and ending i the pair (sent1, sent2 + " " + ending_i), encoded by
  `BertTokenizerFast(vocab, do_lower_case=True)` as [CLS] a [SEP] b [SEP] with segment ids 0 / 1, truncated to
  --max_seq_length by truncation="longest_first". google-research's `_truncate_seq_pair` (drop the last token of
  the longer side, of the second on a tie, until the pair fits) is computed beside it, and the number of
  sequences where the two differ is reported (`truncation_differs_from_google`): the fast tokenizer's rule is
  not the same in general (on hellaswag_val_as_swag.csv at max_seq_length 64 it differs on 17,515 of the 27,509
  truncated sequences), but at 128 no sequence of that file or of val_first91.csv needs truncating at all.
- Batches: `steps` = int(train examples / batch x epochs) (google-research's arithmetic, as ours), full batches
  drawn from a fresh numpy RandomState(seed) permutation each epoch, running on across epoch ends (as our
  shuffle-repeat-batch pipeline). A batch is [B, 4, L], L = the longest of its 4B sequences (dynamic padding).
- Model and loss: BertForMultipleChoice: pooled [CLS] output, dropout, a dense layer of one unit per sequence,
  the four scores of an example through a softmax, mean cross-entropy over the batch (the model's own loss).
- Optimisation as bench/glue_hf_peer.py: torch AdamW (0.9 / 0.999, epsilon 1e-6), weight decay 0.01 except
  biases and LayerNorm, global-norm clipping 1.0, google-research's warmup then linear decay; dropout 0.1.
- Prediction: the examples in file order, --predict_batch_size at a time, each batch cut to its longest
  sequence; accuracy = the share whose highest-scored ending is the label, and the mean cross-entropy.

Timing: train_seconds is the training loop only (batch assembly, forward, backward, clipping, update), after
model loading and tokenization; train_examples_per_second = examples processed / train_seconds (an example is
four sequences). predict_seconds covers tokenizing the evaluation file and the prediction loop (what ours'
eval_seconds covers: writing its feature file and predicting); predict_loop_seconds is the loop alone.

  python bench/swag_hf_peer.py --train_file=out/bench_swag/data/split/train.csv \
      --eval_file=out/bench_swag/data/split/val.csv --also_eval_file=../shared/data/swag/val_first91.csv \
      --model_dir=.cache/minilm/model --output_dir=/tmp/peer_swag --seed=1

Writes <output_dir>/results.json and, per scored file, <name>_predictions.csv in the layout of ours'
test_predictions.csv (id, label, ending, probability_0..3). Needs torch and transformers (bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_peer  # noqa: E402
from hf_peer import BIAS_CORRECTION_NOTE, make_order, write_json_atomic  # noqa: E402

NUM_CHOICES = 4
ENDINGS = tuple(f"ending{i}" for i in range(NUM_CHOICES))
PREDICTIONS_HEADER = ("id", "label", "ending", *(f"probability_{i}" for i in range(NUM_CHOICES)))


@dataclass
class Items:
  """A SWAG file's examples: ids, endings' texts, labels (-1 where the file has none) and the encoded
  sequences, NUM_CHOICES per example (example j's are rows 4j .. 4j+3), unpadded."""

  ids: list[str]
  endings: list[tuple[str, ...]]
  labels: np.ndarray  # int64 [N]
  input_ids: list[list[int]]  # [4N][length]
  token_type_ids: list[list[int]]

  def __len__(self) -> int:
    return len(self.ids)


def read_swag(path: str) -> list[dict]:
  """Rows of a CSV in SWAG's layout as dicts: id, sent1, sent2, endings, label (None without a label column)."""
  with open(path, encoding="utf-8-sig", newline="") as f:
    reader = csv.DictReader(f)
    names = reader.fieldnames or []
    missing = [n for n in ("", "sent1", "sent2", *ENDINGS) if n not in names]
    if missing:
      raise ValueError(f"{path}:1: the header lacks {missing}; expected SWAG's columns (see docs/swag.md)")
    rows = []
    for line, row in enumerate(reader, start=2):
      label = row.get("label")
      if label is not None and label not in {str(i) for i in range(NUM_CHOICES)}:
        raise ValueError(f"{path}: row {line - 1}: label {label!r} is not 0-{NUM_CHOICES - 1}")
      rows.append({"id": row[""], "sent1": row["sent1"], "sent2": row["sent2"],
                   "endings": tuple(row[e] for e in ENDINGS), "label": None if label is None else int(label)})
  if not rows:
    raise ValueError(f"{path}: no examples")
  return rows


def google_truncate(a: list[int], b: list[int], budget: int) -> tuple[list[int], list[int]]:
  """google-research's _truncate_seq_pair: pop from the longer side (the second on a tie) until they fit."""
  a, b = list(a), list(b)
  while len(a) + len(b) > budget:
    (a if len(a) > len(b) else b).pop()
  return a, b


def encode(tokenizer, rows: list[dict], max_seq_length: int) -> tuple[Items, int, int]:
  """-> (the items, sequences truncated, sequences whose longest_first truncation differs from google's)."""
  firsts = [r["sent1"] for r in rows for _ in range(NUM_CHOICES)]
  seconds = [f"{r['sent2']} {ending}" for r in rows for ending in r["endings"]]
  encoded = tokenizer(firsts, seconds, truncation="longest_first", max_length=max_seq_length, padding=False,
                      return_attention_mask=False, return_token_type_ids=True)
  plain_a = tokenizer(firsts, add_special_tokens=False)["input_ids"]
  plain_b = tokenizer(seconds, add_special_tokens=False)["input_ids"]
  truncated = differs = 0
  cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
  for ids, a, b in zip(encoded["input_ids"], plain_a, plain_b):
    if len(a) + len(b) > max_seq_length - 3:
      truncated += 1
      ga, gb = google_truncate(a, b, max_seq_length - 3)
      differs += ids != [cls, *ga, sep, *gb, sep]
  labels = np.asarray([-1 if r["label"] is None else r["label"] for r in rows], dtype=np.int64)
  items = Items([r["id"] for r in rows], [r["endings"] for r in rows], labels, encoded["input_ids"],
                encoded["token_type_ids"])
  return items, truncated, differs


def collate(items: Items, indices: Sequence[int], pad_id: int, with_labels: bool) -> dict:
  """One batch as torch int64 tensors [B, 4, L], L = the longest of its 4B sequences."""
  import torch

  rows = [NUM_CHOICES * i + c for i in indices for c in range(NUM_CHOICES)]
  input_ids, token_type_ids, attention_mask = hf_peer.pad([items.input_ids[r] for r in rows], pad_id,
                                                          [items.token_type_ids[r] for r in rows])
  shape = (len(indices), NUM_CHOICES, input_ids.shape[1])
  batch = {"input_ids": torch.from_numpy(input_ids.reshape(shape)),
           "token_type_ids": torch.from_numpy(token_type_ids.reshape(shape)),
           "attention_mask": torch.from_numpy(attention_mask.reshape(shape))}
  if with_labels:
    batch["labels"] = torch.from_numpy(items.labels[np.asarray(indices)])
  return batch


def predict(model, items: Items, batch_size: int, pad_id: int) -> np.ndarray:
  """float64 logits [N, 4], in file order."""
  return hf_peer.predict_logits(model, len(items), batch_size,
                                lambda indices: collate(items, indices, pad_id, False))


def probabilities(logits: np.ndarray) -> np.ndarray:
  return np.exp(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))


def predictions_csv(items: Items, probs: np.ndarray) -> str:
  """ours' test_predictions.csv layout: id, chosen ending's index and text, four probabilities (6 decimals)."""
  text = io.StringIO()
  writer = csv.writer(text, lineterminator="\n")
  writer.writerow(PREDICTIONS_HEADER)
  for guid, endings, row in zip(items.ids, items.endings, probs):
    chosen = int(row.argmax())
    writer.writerow([guid, chosen, endings[chosen], *(f"{p:.6f}" for p in row)])
  return text.getvalue()


def scores(items: Items, logits: np.ndarray) -> dict[str, float]:
  labels = items.labels
  log_p = np.log(np.maximum(probabilities(logits), 1e-300))
  return {"accuracy": float(np.mean(logits.argmax(axis=1) == labels)),
          "loss": float(-np.mean(log_p[np.arange(len(labels)), labels]))}


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = hf_peer.argument_parser(__doc__)
  parser.add_argument("--train_file", required=True, help="CSV in SWAG's layout to fine-tune on.")
  parser.add_argument("--eval_file", required=True, help="CSV in SWAG's layout (with labels) to score.")
  parser.add_argument("--also_eval_file", default=None, help="Another labelled CSV to predict and score.")
  hf_peer.add_model_flags(parser, "results.json and the predictions go")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_batch_size", type=int, default=16)
  parser.add_argument("--predict_batch_size", type=int, default=8)
  hf_peer.add_optimizer_flags(parser, learning_rate=2e-5)
  hf_peer.add_run_flags(parser, seed_help="Batch order, the classifier's start, dropout.", log_every=20)
  args = parser.parse_args(argv)
  hf_peer.check_flags(parser, args, "predict_batch_size", files=("train_file", "eval_file", "also_eval_file"))
  if args.max_seq_length < 4:
    parser.error("--max_seq_length must hold [CLS] a [SEP] b [SEP]: at least 4")
  return args


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  torch, transformers = hf_peer.start_torch(args.num_threads)
  tokenizer = transformers.BertTokenizerFast(os.path.join(args.model_dir, "vocab.txt"), do_lower_case=True)
  pad_id = tokenizer.pad_token_id

  start = time.perf_counter()
  train_rows = read_swag(args.train_file)
  if any(r["label"] is None for r in train_rows):
    raise ValueError(f"{args.train_file}: has no label column; training needs labels")
  train, train_truncated, train_differs = encode(tokenizer, train_rows, args.max_seq_length)
  train_tokenize_seconds = time.perf_counter() - start
  total_steps = max(1, int(len(train) / args.train_batch_size * args.num_train_epochs))
  warmup_steps = int(total_steps * args.warmup_proportion)
  order = make_order(len(train), args.train_batch_size, total_steps, args.seed)
  print(f"{args.train_file}: {len(train)} examples, {train_truncated} of {NUM_CHOICES * len(train)} sequences "
        f"truncated ({train_differs} unlike google-research's rule); {total_steps} steps ({warmup_steps} warmup)",
        flush=True)

  model, _, newly_initialized = hf_peer.load_model(transformers.BertForMultipleChoice, args)

  trained = hf_peer.train(model, args, order, lambda indices: model(**collate(train, indices, pad_id, True)).loss,
                          total_steps, warmup_steps, "examples")
  step_losses, processed = trained["step_losses"], trained["processed"]
  train_seconds, train_cpu_seconds = trained["train_seconds"], trained["train_cpu_seconds"]

  os.makedirs(args.output_dir, exist_ok=True)
  scored = {}
  for key, path in (("eval", args.eval_file), ("also_eval", args.also_eval_file)):
    if path is None:
      continue
    start = time.perf_counter()
    rows = read_swag(path)
    if any(r["label"] is None for r in rows):
      raise ValueError(f"{path}: has no label column; it cannot be scored")
    items, truncated, differs = encode(tokenizer, rows, args.max_seq_length)
    loop_start = time.perf_counter()
    logits = predict(model, items, args.predict_batch_size, pad_id)
    end = time.perf_counter()
    name = os.path.splitext(os.path.basename(path))[0]
    predictions = os.path.join(args.output_dir, f"{name}_predictions.csv")
    with open(predictions, "w", encoding="utf-8", newline="") as f:
      f.write(predictions_csv(items, probabilities(logits)))
    scored[key] = {"file": os.path.abspath(path), "examples": len(items), "metrics": scores(items, logits),
                   "predictions": predictions, "truncated_sequences": truncated,
                   "truncation_differs_from_google": differs, "predict_seconds": end - start,
                   "predict_loop_seconds": end - loop_start,
                   "predict_examples_per_second": len(items) / (end - start),
                   "predict_loop_examples_per_second": len(items) / (end - loop_start)}
    print(f"{path}: accuracy {scored[key]['metrics']['accuracy']:.4f}  loss {scored[key]['metrics']['loss']:.4f} "
          f"({len(items)} examples, {end - start:.1f} s with tokenization)", flush=True)

  evaluation = scored["eval"]
  report = {
      "implementation": f"transformers {transformers.__version__} / torch {torch.__version__}",
      "metrics": evaluation["metrics"], "eval_examples": evaluation["examples"],
      "train_examples": len(train), "steps": total_steps, "warmup_steps": warmup_steps,
      "train_examples_processed": processed, "train_seconds": train_seconds,
      "train_examples_per_second": processed / train_seconds, "train_cpu_seconds": train_cpu_seconds,
      "train_tokenize_seconds": train_tokenize_seconds,
      "predict_seconds": evaluation["predict_seconds"], "predict_loop_seconds": evaluation["predict_loop_seconds"],
      "predict_examples_per_second": evaluation["predict_examples_per_second"],
      "predict_loop_examples_per_second": evaluation["predict_loop_examples_per_second"],
      "truncated_sequences": {"train": train_truncated, **{k: v["truncated_sequences"] for k, v in scored.items()}},
      "truncation_differs_from_google": {"train": train_differs,
                                         **{k: v["truncation_differs_from_google"] for k, v in scored.items()}},
      "scored": scored, "final_train_loss": step_losses[-1],
      "hyperparameters": hf_peer.hyperparameters(
          args, model, ("max_seq_length", "train_batch_size", "predict_batch_size", *hf_peer.OPTIMIZER_FLAGS)),
      "seed": args.seed,
      "threads": hf_peer.threads(torch, args.num_threads),
      "model": hf_peer.model_record(args, model, newly_initialized),
      "data": {"train": os.path.abspath(args.train_file)},
      "notes": [BIAS_CORRECTION_NOTE],
      "step_losses": step_losses,
  }
  path = os.path.join(args.output_dir, "results.json")
  write_json_atomic(path, report)
  print(f"train {train_seconds:.1f} s ({processed / train_seconds:.2f} examples/s, {total_steps} steps)\nwrote {path}",
        flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
