r"""CoNLL-2003 NER peer: Hugging Face transformers on PyTorch, for `bench/bench_ner.py`.

Why: the NER benchmark needs an independent, trusted implementation to compare our TensorFlow fine-tuning
(`scripts/run_ner.py`) against. This script fine-tunes `transformers.BertForTokenClassification` from the same
weights (a Hugging Face directory with config.json, model.safetensors, vocab.txt; the classifier newly
initialised with the seed, as Hugging Face does) on a CoNLL-2003 file, with the same hyperparameters and seed,
and predicts another, writing `word gold predicted` lines that the harness scores for both sides alike.

- Reading (independent of ours): one token a line, columns separated by spaces or tabs, the word first and the
  tag last; a blank line ends a sentence; `-DOCSTART-` lines are skipped. The release's tags are IOB1.
- Labels (the BERT paper, section 5.3): tags are converted to IOB2 (`iob1_to_iob2`: an I-X that follows O or
  another type opens an entity and becomes B-X); labels are O, then B-/I- per entity type of the training file,
  sorted. Each word's label sits on its first WordPiece; every other position has label -100, which
  BertForTokenClassification's cross-entropy ignores (the mean runs over first pieces only, as ours).
- Pieces: every word is tokenized on its own by `BertTokenizerFast(vocab, do_lower_case=True)` without special
  tokens (a word that gives no piece, such as a lone control character, becomes [UNK], so every word has a
  first piece); a word keeps at most max_seq_length - 2 pieces.
- Windows (one sentence each, no document context, as ours' default): [CLS] pieces [SEP]. A sentence of more
  than max_seq_length - 2 pieces is cut into consecutive runs of whole words that fit (greedily), and each run's
  window is filled with the sentence's pieces around it, split evenly between the two sides (a side with less
  gives the rest to the other); only the run's words are labelled and predicted there.
- Batches: `steps` = int(windows / batch x epochs), full batches from a fresh numpy RandomState(seed)
  permutation of the windows each epoch, running on across epoch ends; each batch cut to its longest window.
- Optimisation as bench/glue_hf_peer.py: torch AdamW (0.9 / 0.999, epsilon 1e-6), weight decay 0.01 except
  biases and LayerNorm, global-norm clipping 1.0, google-research's warmup then linear decay; dropout 0.1.
- Prediction: the argmax label at each word's first piece, converted back to the file's IOB1 (`iob2_to_iob1`:
  a B-X stays B-X only right after an entity of type X, else it becomes I-X), written as `word gold predicted`
  per line with a blank line after each sentence (conlleval's input, the layout of ours' eval_predictions.txt).
  The peer scores it with seqeval's default (conlleval) mode itself; the harness rescoring both sides' files
  with one function is what the benchmark reports.

Timing: train_seconds is the training loop only (batch assembly, forward, backward, clipping, update), after
loading and tokenization; train_windows_per_second = windows processed / train_seconds. predict_seconds covers
tokenizing the evaluation file, the prediction loop and writing the predictions (what ours' predict_seconds
covers); predict_loop_seconds is the loop alone.

  python bench/ner_hf_peer.py --train_file=out/bench_ner/data/eng.train --eval_file=../shared/data/conll2003/eng.testa \
      --model_dir=.cache/minilm/model --output_dir=/tmp/peer_ner --seed=1

Writes <output_dir>/results.json and eval_predictions.txt. Needs torch and transformers (bench/requirements.txt);
seqeval for its own score (bench/requirements.txt).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_peer  # noqa: E402
from hf_peer import BIAS_CORRECTION_NOTE, make_order, write_json_atomic  # noqa: E402

IGNORE = -100  # torch's CrossEntropyLoss ignore_index, which BertForTokenClassification uses
_COLUMNS = re.compile(r"[ \t]+")


def read_conll(path: str) -> list[tuple[list[str], list[str]]]:
  """Sentences (words, tags) of a CoNLL file, -DOCSTART- lines skipped."""
  sentences, words, tags = [], [], []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, start=1):
      line = line.rstrip("\r\n")
      if not line.strip():
        if words:
          sentences.append((words, tags))
          words, tags = [], []
        continue
      columns = _COLUMNS.split(line.strip())
      if len(columns) < 2:
        raise ValueError(f"{path}:{number}: expected a word and a tag, got {line!r}")
      if columns[0] == "-DOCSTART-":
        continue
      words.append(columns[0])
      tags.append(columns[-1])
  if words:
    sentences.append((words, tags))
  if not sentences:
    raise ValueError(f"{path}: no sentences")
  return sentences


def _type(tag: str) -> str:
  return tag[2:] if tag != "O" else ""


def iob1_to_iob2(tags: Sequence[str]) -> list[str]:
  out, previous = [], "O"
  for tag in tags:
    if tag.startswith("I-") and (previous == "O" or _type(previous) != _type(tag)):
      tag = "B-" + _type(tag)
    out.append(tag)
    previous = tag
  return out


def iob2_to_iob1(tags: Sequence[str]) -> list[str]:
  out, previous = [], "O"
  for tag in tags:
    written = tag
    if tag.startswith("B-") and (previous == "O" or _type(previous) != _type(tag)):
      written = "I-" + _type(tag)
    out.append(written)
    previous = tag
  return out


@dataclass
class Window:
  """One model input: piece ids, and per position the word it labels (-1: none) and its label (IGNORE: none)."""

  sentence: int
  input_ids: list[int]
  words: list[int]
  labels: list[int]


def make_windows(sentences, tokenizer, max_seq_length: int, label_ids: dict[str, int] | None) -> list[Window]:
  """Windows of the sentences, in order (see the module docstring); labels from IOB2 tags when `label_ids`."""
  budget = max_seq_length - 2
  all_words = [w for words, _ in sentences for w in words]
  pieces_of = tokenizer(all_words, add_special_tokens=False, return_attention_mask=False,
                        return_token_type_ids=False)["input_ids"]
  cls, sep, unk = tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.unk_token_id
  windows, at = [], 0
  for s, (words, tags) in enumerate(sentences):
    pieces = [(p or [unk])[:budget] for p in pieces_of[at:at + len(words)]]
    at += len(words)
    labels = iob1_to_iob2(tags) if label_ids is not None else None
    starts = np.cumsum([0] + [len(p) for p in pieces])
    stream = [i for p in pieces for i in p]
    runs, first = [], 0
    for w in range(1, len(words) + 1):  # greedy runs of whole words within the budget
      if w == len(words) or starts[w + 1] - starts[first] > budget:
        runs.append((first, w))
        first = w
    for first, end in runs:
      lo, hi = int(starts[first]), int(starts[end])
      room = budget - (hi - lo)
      left = min(lo, max(room // 2, room - (len(stream) - hi)))
      right = min(len(stream) - hi, room - left)
      ids = [cls, *stream[lo - left:hi + right], sep]
      word_at, label_at = [-1] * len(ids), [IGNORE] * len(ids)
      for w in range(first, end):
        position = 1 + left + int(starts[w]) - lo
        word_at[position] = w
        label_at[position] = label_ids[labels[w]] if labels is not None else IGNORE
      windows.append(Window(s, ids, word_at, label_at))
  return windows


def collate(windows: list[Window], indices: Sequence[int], pad_id: int, with_labels: bool) -> dict:
  """One batch as torch int64 tensors [B, L], L = its longest window."""
  import torch

  input_ids, token_type_ids, attention_mask = hf_peer.pad([windows[i].input_ids for i in indices], pad_id)
  batch = {"input_ids": torch.from_numpy(input_ids), "attention_mask": torch.from_numpy(attention_mask),
           "token_type_ids": torch.from_numpy(token_type_ids)}
  if with_labels:
    labels = np.full(input_ids.shape, IGNORE, dtype=np.int64)
    for row, i in enumerate(indices):
      labels[row, :len(windows[i].labels)] = windows[i].labels
    batch["labels"] = torch.from_numpy(labels)
  return batch


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = hf_peer.argument_parser(__doc__)
  parser.add_argument("--train_file", required=True, help="CoNLL-2003 file (IOB1) to fine-tune on.")
  parser.add_argument("--eval_file", required=True, help="CoNLL-2003 file (IOB1) to predict and score.")
  hf_peer.add_model_flags(parser, "results.json and eval_predictions.txt go")
  parser.add_argument("--max_seq_length", type=int, default=128)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--predict_batch_size", type=int, default=8)
  hf_peer.add_optimizer_flags(parser, learning_rate=5e-5)
  hf_peer.add_run_flags(parser, seed_help="Batch order, the classifier's start, dropout.", log_every=50)
  args = parser.parse_args(argv)
  hf_peer.check_flags(parser, args, "predict_batch_size", files=("train_file", "eval_file"))
  if args.max_seq_length < 3:
    parser.error("--max_seq_length must hold [CLS] word [SEP]: at least 3")
  return args


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  torch, transformers = hf_peer.start_torch(args.num_threads)
  tokenizer = transformers.BertTokenizerFast(os.path.join(args.model_dir, "vocab.txt"), do_lower_case=True)
  pad_id = tokenizer.pad_token_id

  start = time.perf_counter()
  train_sentences = read_conll(args.train_file)
  types = sorted({_type(t) for _, tags in train_sentences for t in tags if t != "O"})
  labels = ("O", *(f"{prefix}-{kind}" for kind in types for prefix in ("B", "I")))
  label_ids = {label: i for i, label in enumerate(labels)}
  train = make_windows(train_sentences, tokenizer, args.max_seq_length, label_ids)
  train_tokenize_seconds = time.perf_counter() - start
  total_steps = max(1, int(len(train) / args.train_batch_size * args.num_train_epochs))
  warmup_steps = int(total_steps * args.warmup_proportion)
  order = make_order(len(train), args.train_batch_size, total_steps, args.seed)
  print(f"{args.train_file}: {len(train_sentences)} sentences, {len(train)} windows, labels {labels}; "
        f"{total_steps} steps ({warmup_steps} warmup)", flush=True)

  model, _, newly_initialized = hf_peer.load_model(transformers.BertForTokenClassification, args,
                                                   num_labels=len(labels))

  trained = hf_peer.train(model, args, order, lambda indices: model(**collate(train, indices, pad_id, True)).loss,
                          total_steps, warmup_steps, "windows")
  step_losses, processed = trained["step_losses"], trained["processed"]
  train_seconds, train_cpu_seconds = trained["train_seconds"], trained["train_cpu_seconds"]

  start = time.perf_counter()
  eval_sentences = read_conll(args.eval_file)
  unknown = sorted({_type(t) for _, tags in eval_sentences for t in tags if t != "O"} - set(types))
  if unknown:
    raise ValueError(f"{args.eval_file}: entity types {unknown} are not in the training file")
  windows = make_windows(eval_sentences, tokenizer, args.max_seq_length, None)
  loop_start = time.perf_counter()
  predicted = [[None] * len(words) for words, _ in eval_sentences]
  for indices, outputs in hf_peer.predict(model, len(windows), args.predict_batch_size,
                                          lambda indices: collate(windows, indices, pad_id, False)):
    ids = outputs.logits.argmax(-1).numpy()
    for row, i in enumerate(indices):
      for position, w in enumerate(windows[i].words):
        if w >= 0:
          predicted[windows[i].sentence][w] = labels[int(ids[row, position])]
  loop_end = time.perf_counter()
  predicted = [iob2_to_iob1(tags) for tags in predicted]
  lines = []
  for (words, gold), tags in zip(eval_sentences, predicted):
    lines += [f"{w} {g} {p}\n" for w, g, p in zip(words, gold, tags)] + ["\n"]
  os.makedirs(args.output_dir, exist_ok=True)
  predictions = os.path.join(args.output_dir, "eval_predictions.txt")
  with open(predictions, "w", encoding="utf-8") as f:
    f.write("".join(lines))
  predict_seconds = time.perf_counter() - start

  # seqeval's default mode: conlleval's scores.
  from seqeval.metrics import f1_score, precision_score, recall_score

  gold = [tags for _, tags in eval_sentences]
  metrics = {"f1": f1_score(gold, predicted), "precision": precision_score(gold, predicted),
             "recall": recall_score(gold, predicted)}
  report = {
      "implementation": f"transformers {transformers.__version__} / torch {torch.__version__}",
      "metrics_seqeval": metrics, "predictions": predictions, "labels": list(labels),
      "train_sentences": len(train_sentences), "train_windows": len(train), "steps": total_steps,
      "warmup_steps": warmup_steps, "train_windows_processed": processed, "train_seconds": train_seconds,
      "train_windows_per_second": processed / train_seconds, "train_cpu_seconds": train_cpu_seconds,
      "train_tokenize_seconds": train_tokenize_seconds,
      "eval_sentences": len(eval_sentences), "eval_windows": len(windows), "predict_seconds": predict_seconds,
      "predict_loop_seconds": loop_end - loop_start,
      "predict_sentences_per_second": len(eval_sentences) / predict_seconds,
      "predict_loop_sentences_per_second": len(eval_sentences) / (loop_end - loop_start),
      "final_train_loss": step_losses[-1],
      "hyperparameters": hf_peer.hyperparameters(
          args, model, ("max_seq_length", "train_batch_size", "predict_batch_size", *hf_peer.OPTIMIZER_FLAGS)),
      "seed": args.seed,
      "threads": hf_peer.threads(torch, args.num_threads),
      "model": hf_peer.model_record(args, model, newly_initialized),
      "data": {"train": os.path.abspath(args.train_file), "eval": os.path.abspath(args.eval_file)},
      "notes": [BIAS_CORRECTION_NOTE],
      "step_losses": step_losses,
  }
  path = os.path.join(args.output_dir, "results.json")
  write_json_atomic(path, report)
  print(f"{args.eval_file}: seqeval f1 {metrics['f1']:.4f}  |  train {train_seconds:.1f} s "
        f"({processed / train_seconds:.2f} windows/s, {total_steps} steps); predict {predict_seconds:.1f} s\n"
        f"wrote {path}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
