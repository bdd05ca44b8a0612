r"""SQuAD fine-tuning peer: Hugging Face transformers on PyTorch with google-research's features and
post-processing, for `bench/bench_squad.py` and `bench/squad_matched.py`.

Why: the SQuAD quality benchmark needs an independent, trusted implementation to compare our TensorFlow
fine-tuning (`scripts/run_squad.py`) against. This script fine-tunes `transformers.BertForQuestionAnswering`
from the same weights (a Hugging Face directory with config.json, model.safetensors, vocab.txt; the qa_outputs
head newly initialised with the seed, as Hugging Face does), and leaves everything around the model to
google-research's own `run_squad.py` (PyPI bert-tensorflow 1.0.4, imported with stand-ins for its TF1-only
`bert.modeling` / `bert.optimization`, which nothing called here needs):

- Reading and windows: `run_squad.read_squad_examples` and `run_squad.convert_examples_to_features` with
  google-research's `tokenization.FullTokenizer` (lower case), the same max_seq_length, doc_stride (the step
  between a context's windows) and max_query_length as ours; so the windows are google-research's by
  construction. The training questions are shuffled with `random.Random(12345)` before windowing, and the
  run takes int(questions / train_batch_size * num_train_epochs) steps (questions, not windows), both as
  google-research's run_squad.py does.
- Batches: every epoch a fresh permutation of the training windows by a numpy RandomState seeded with
  --seed, batches running on across epoch ends, full batches only (as our shuffle-repeat-batch pipeline);
  or the batches of --order_file. Each batch is cut to its longest window (dynamic padding).
- Loss: the mean over the batch of (CE(start) + CE(end)) / 2. By default the model's own loss
  (`BertForQuestionAnswering(..., start_positions, end_positions).loss`): the softmax runs over every position
  of the padded batch, padding included, as google-research's does over its fixed max_seq_length. With
  --mask_padding_in_loss the padded positions are left out of the softmax, as our SquadTask does; matched runs
  use that so that the loss does not depend on how a batch is padded.
- Optimisation as bench/glue_hf_peer.py: torch AdamW (0.9 / 0.999, epsilon 1e-6), weight decay 0.01 except
  biases and LayerNorm, global-norm clipping 1.0, google-research's warmup then linear decay; dropout 0.1 from
  the config (--dropout overrides it; 0 in matched runs).
- Prediction: the evaluation windows in order, --predict_batch_size at a time, each batch cut to its longest
  window; each window's logits are handed on over its real tokens only. google-research ranks the top
  n_best_size start and end positions over all max_seq_length positions, padding included, and drops those
  outside the context afterwards; with dynamic padding the padded positions' logits depend on the batch, and
  in a barely trained model they crowd real candidates out of the top 20. Then `run_squad.write_predictions`
  (n_best_size 20, max_answer_length 30; for v2.0 the null_score_diff_threshold, 0.0 by default) writes
  predictions.json, nbest_predictions.json and null_odds.json.
- Metrics (`score`): the official ones through `bert_tf.tasks.squad.metrics` (tested equal to evaluate-v1.1.py
  and evaluate-v2.0.py), applied to the files written; for v2.0 also the best-threshold search over the null
  odds with each question's best non-null answer (the first non-empty text of its n-best list), and the
  scores of the answers at the threshold found (at_best_f1_thresh_*: HasAns F1, NoAns accuracy). bench_squad.py
  scores our output folders with the same function.

Timing: train_seconds is the training loop only (batch assembly, forward, backward, clipping, update), after
model loading and windowing; train_windows_per_second = windows processed / train_seconds (a window is one
feature, so examples/s here means features/s). predict_loop_seconds is the prediction loop only;
predict_seconds adds making the evaluation windows and write_predictions, which is what our predict_seconds
covers.

  python bench/squad_hf_peer.py --train_file=out/bench_squad/data/v1.1-train.json \
      --predict_file=out/bench_squad/data/v1.1-eval.json --model_dir=.cache/minilm/model \
      --output_dir=/tmp/peer_squad --max_seq_length=256 --seed=1

Writes <output_dir>/results.json and google-research's three prediction files. Needs torch and transformers
(bench/requirements.txt) and bert-tensorflow (requirements-dev.txt).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import shutil
import sys
import time
import types
from collections.abc import Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_peer  # noqa: E402
from hf_peer import decays, google_lr_factor, make_order, write_json_atomic  # noqa: E402,F401

# google-research's run_squad.py shuffles the training questions with this seed before windowing them.
GOOGLE_SHUFFLE_SEED = 12345
BIAS_CORRECTION_NOTE = (
    "torch.optim.AdamW applies Adam's bias correction (m / (1 - beta1^t), v / (1 - beta2^t)); "
    "google-research's AdamWeightDecay has none (ours offers both: --optimizer=adamw / adamw_bias_corrected).")


def load_reference():
  """google-research's (run_squad, tokenization) modules from bert-tensorflow, their flags parsed to the
  defaults. `bert.modeling` and `bert.optimization` import tensorflow.contrib (TF1 only) and are only used by
  the model code, which the peer replaces with transformers; empty stand-ins let run_squad import."""
  sys.modules.setdefault("bert.modeling", types.ModuleType("bert.modeling"))
  sys.modules.setdefault("bert.optimization", types.ModuleType("bert.optimization"))
  import tensorflow.compat.v1 as tf  # pylint: disable=import-outside-toplevel

  tf.logging.set_verbosity(tf.logging.ERROR)  # run_squad logs its first 20 windows in full at INFO.
  from bert import run_squad, tokenization  # pylint: disable=import-outside-toplevel

  if not run_squad.FLAGS.is_parsed():
    run_squad.FLAGS(["squad_hf_peer"])
  return run_squad, tokenization


def read_windows(run_squad, tokenizer, path: str, is_training: bool, args) -> tuple[list, list]:
  """(examples, windows) of a SQuAD file, google-research's; training questions shuffled as it does."""
  examples = run_squad.read_squad_examples(path, is_training)
  if is_training:
    random.Random(GOOGLE_SHUFFLE_SEED).shuffle(examples)
  windows: list = []
  run_squad.convert_examples_to_features(examples, tokenizer, args.max_seq_length, args.doc_stride,
                                         args.max_query_length, is_training, windows.append)
  if not windows:
    raise ValueError(f"{path}: no windows (no question left)")
  return examples, windows


def collate(windows: list, indices: Sequence[int], is_training: bool) -> dict:
  """One batch as torch int64 tensors [B, L], L = the batch's longest window (its input_mask's length)."""
  import torch

  length = max(int(sum(windows[i].input_mask)) for i in indices)
  batch = {"input_ids": [windows[i].input_ids[:length] for i in indices],
           "token_type_ids": [windows[i].segment_ids[:length] for i in indices],
           "attention_mask": [windows[i].input_mask[:length] for i in indices]}
  batch = {k: torch.tensor(v, dtype=torch.int64) for k, v in batch.items()}
  if is_training:
    batch["start_positions"] = torch.tensor([windows[i].start_position for i in indices], dtype=torch.int64)
    batch["end_positions"] = torch.tensor([windows[i].end_position for i in indices], dtype=torch.int64)
  return batch


def write_predictions(run_squad, examples: list, windows: list, results: list, args) -> int:
  """google-research's write_predictions into args.output_dir; -> how many questions needed the workaround.

  The reference crashes (AttributeError on best_non_null_entry) for a SQuAD 2.0 question whose n-best list
  holds the null answer alone (every span invalid, as a barely trained model produces). Then each question is
  written by its own call, and a question that crashes gets "" with null odds sys.float_info.max (no answer at
  any threshold; what our post-processing does for such a question)."""
  names = [os.path.join(args.output_dir, n) for n in ("predictions.json", "nbest_predictions.json",
                                                      "null_odds.json")]
  try:
    run_squad.write_predictions(examples, windows, results, args.n_best_size, args.max_answer_length, True, *names)
    return 0
  except AttributeError:
    if not args.version_2_with_negative:
      raise
  by_example: dict[int, list] = {}
  for window in windows:
    by_example.setdefault(window.example_index, []).append(window)
  merged: list[dict] = [{}, {}, {}]
  workarounds = 0
  scratch = os.path.join(args.output_dir, "one_question")
  os.makedirs(scratch, exist_ok=True)
  one = [os.path.join(scratch, os.path.basename(n)) for n in names]
  for index, example in enumerate(examples):
    own = [copy.copy(w) for w in by_example.get(index, [])]
    for w in own:
      w.example_index = 0
    try:
      run_squad.write_predictions([example], own, results, args.n_best_size, args.max_answer_length, True, *one)
      for target, path in zip(merged, one):
        with open(path, encoding="utf-8") as f:
          target.update(json.load(f))
    except AttributeError:
      workarounds += 1
      merged[0][example.qas_id] = ""
      merged[1][example.qas_id] = [{"text": "", "probability": 1.0, "start_logit": 0.0, "end_logit": 0.0}]
      merged[2][example.qas_id] = sys.float_info.max
  shutil.rmtree(scratch)
  for content, path in zip(merged, names):
    with open(path, "w", encoding="utf-8") as f:
      json.dump(content, f, indent=4)
      f.write("\n")
  return workarounds


def masked_span_loss(outputs, batch):
  """Mean over the batch of (CE(start) + CE(end)) / 2 with each softmax over the window's real tokens."""
  import torch

  pad = batch["attention_mask"] == 0
  losses = []
  for side in ("start", "end"):
    logits = getattr(outputs, f"{side}_logits").masked_fill(pad, -1e9)
    losses.append(torch.nn.functional.cross_entropy(logits, batch[f"{side}_positions"]))
  return (losses[0] + losses[1]) / 2


def score(predict_file: str, output_dir: str, version_2_with_negative: bool) -> dict[str, float]:
  """The official metrics of the prediction files in `output_dir` (google-research's names) on
  `predict_file`: v1.1 {exact_match, f1}; v2.0 evaluate-v2.0.py's keys for predictions.json as written, and
  best_exact / best_f1 and their thresholds from the search over null_odds.json with every question's best
  non-null answer (the first non-empty text of its nbest_predictions.json list)."""
  from bert_tf.tasks.squad import metrics as squad_metrics  # pylint: disable=import-outside-toplevel

  def load(name):
    with open(os.path.join(output_dir, name), encoding="utf-8") as f:
      return json.load(f)

  with open(predict_file, encoding="utf-8-sig") as f:
    dataset = json.load(f)
  predictions = load("predictions.json")
  if not version_2_with_negative:
    return dict(squad_metrics.evaluate_v1(dataset, predictions))
  values = dict(squad_metrics.evaluate_v2(dataset, predictions))
  nbest = load("nbest_predictions.json")
  best_non_null = {qid: next((e["text"] for e in entries if e["text"]), "") for qid, entries in nbest.items()}
  null_odds = load("null_odds.json")
  search = squad_metrics.evaluate_v2(dataset, best_non_null, null_odds)
  values.update((key, search[key]) for key in ("best_exact", "best_exact_thresh", "best_f1", "best_f1_thresh"))
  # The answers at the chosen threshold (the official rule: null when the odds exceed it), for HasAns F1 and
  # NoAns accuracy there.
  chosen = {qid: "" if null_odds[qid] > values["best_f1_thresh"] else text for qid, text in best_non_null.items()}
  at_best = squad_metrics.evaluate_v2(dataset, chosen)
  values.update((f"at_best_f1_thresh_{key}", at_best[key]) for key in ("exact", "f1", "HasAns_f1", "NoAns_exact")
                if key in at_best)
  return values


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = hf_peer.argument_parser(__doc__)
  parser.add_argument("--train_file", required=True, help="SQuAD JSON to fine-tune on.")
  parser.add_argument("--predict_file", required=True, help="SQuAD JSON (with answers) to predict and score.")
  hf_peer.add_model_flags(parser, "results.json and the predictions go")
  parser.add_argument("--version_2_with_negative", action="store_true", help="SQuAD 2.0.")
  parser.add_argument("--max_seq_length", type=int, default=384)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--predict_batch_size", type=int, default=8)
  hf_peer.add_optimizer_flags(parser, learning_rate=5e-5)
  parser.add_argument("--n_best_size", type=int, default=20)
  parser.add_argument("--max_answer_length", type=int, default=30)
  parser.add_argument("--null_score_diff_threshold", type=float, default=0.0)
  hf_peer.add_run_flags(parser, seed_help="Batch order, the head's start, dropout.", log_every=20)
  # Matched runs (bench/squad_matched.py).
  hf_peer.add_matched_flags(
      parser, order_help="JSON list of batches (lists of training window indices, in windowing order), one per "
                         "step; replaces the seeded order, and its length is the step count.",
      head_help=".npz with the span head's kernel [hidden, 2], bias [2].")
  parser.add_argument("--mask_padding_in_loss", action="store_true",
                      help="Softmax of the loss over real tokens only (as our SquadTask); default: the model's "
                           "own loss over every position of the padded batch.")
  args = parser.parse_args(argv)
  hf_peer.check_flags(parser, args, "predict_batch_size", files=("train_file", "predict_file"))
  if args.doc_stride >= args.max_seq_length - args.max_query_length - 3:
    parser.error("--doc_stride must be below max_seq_length - max_query_length - 3 so windows overlap")
  return args


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  os.environ.setdefault("OMP_NUM_THREADS", str(args.num_threads))
  os.makedirs(args.output_dir, exist_ok=True)
  run_squad, tokenization = load_reference()

  torch, transformers = hf_peer.start_torch(args.num_threads)
  FLAGS = run_squad.FLAGS  # pylint: disable=invalid-name
  FLAGS.version_2_with_negative = args.version_2_with_negative
  FLAGS.null_score_diff_threshold = args.null_score_diff_threshold
  FLAGS.verbose_logging = False
  tokenizer = tokenization.FullTokenizer(os.path.join(args.model_dir, "vocab.txt"), do_lower_case=True)

  start = time.perf_counter()
  train_examples, train_windows = read_windows(run_squad, tokenizer, args.train_file, True, args)
  train_features_seconds = time.perf_counter() - start
  total_steps = max(1, int(len(train_examples) / args.train_batch_size * args.num_train_epochs))
  if args.order_file:
    order = hf_peer.read_order(args.order_file, len(train_windows))
    total_steps = len(order)
  else:
    order = make_order(len(train_windows), args.train_batch_size, total_steps, args.seed)
  warmup_steps = int(total_steps * args.warmup_proportion)
  print(f"{args.train_file}: {len(train_examples)} questions, {len(train_windows)} windows; {total_steps} steps "
        f"({warmup_steps} warmup) in {train_features_seconds:.1f} s of windowing", flush=True)

  model, _, newly_initialized = hf_peer.load_model(transformers.BertForQuestionAnswering, args, head="qa_outputs")

  def loss_of(indices):
    batch = collate(train_windows, indices, True)
    if args.mask_padding_in_loss:
      positions = {k: batch.pop(k) for k in ("start_positions", "end_positions")}
      return masked_span_loss(model(**batch), {**batch, **positions})
    return model(**batch).loss

  trained = hf_peer.train(model, args, order, loss_of, total_steps, warmup_steps, "windows")
  step_losses, processed = trained["step_losses"], trained["processed"]
  train_seconds, train_cpu_seconds = trained["train_seconds"], trained["train_cpu_seconds"]

  start = time.perf_counter()
  predict_examples, predict_windows = read_windows(run_squad, tokenizer, args.predict_file, False, args)
  predict_features_seconds = time.perf_counter() - start
  results = []
  start = time.perf_counter()
  for indices, outputs in hf_peer.predict(model, len(predict_windows), args.predict_batch_size,
                                          lambda indices: collate(predict_windows, indices, False)):
    starts, ends = outputs.start_logits.double().numpy(), outputs.end_logits.double().numpy()
    for row, i in enumerate(indices):
      # Each window's logits over its own tokens only: the reference ranks its top n_best_size starts and ends
      # over every position, and the padded ones' logits depend on the batch's padding (see the docstring).
      n = len(predict_windows[i].tokens)
      results.append(run_squad.RawResult(unique_id=predict_windows[i].unique_id,
                                         start_logits=starts[row, :n].tolist(), end_logits=ends[row, :n].tolist()))
  predict_loop_seconds = time.perf_counter() - start
  start = time.perf_counter()
  no_candidate = write_predictions(run_squad, predict_examples, predict_windows, results, args)
  postprocess_seconds = time.perf_counter() - start
  metrics = score(args.predict_file, args.output_dir, args.version_2_with_negative)

  predict_seconds = predict_features_seconds + predict_loop_seconds + postprocess_seconds
  report = {
      "implementation": f"transformers {transformers.__version__} / torch {torch.__version__}; google-research "
                        "bert-tensorflow run_squad.py windows and write_predictions",
      "metrics": metrics,
      "train_examples": len(train_examples), "train_windows": len(train_windows), "steps": total_steps,
      "warmup_steps": warmup_steps, "train_windows_processed": processed, "train_seconds": train_seconds,
      "train_windows_per_second": processed / train_seconds, "train_cpu_seconds": train_cpu_seconds,
      "train_features_seconds": train_features_seconds,
      "predict_examples": len(predict_examples), "predict_windows": len(predict_windows),
      "predict_features_seconds": predict_features_seconds, "predict_loop_seconds": predict_loop_seconds,
      "postprocess_seconds": postprocess_seconds, "predict_seconds": predict_seconds,
      "predict_windows_per_second": len(predict_windows) / predict_loop_seconds,
      "predict_examples_per_second": len(predict_examples) / predict_seconds,
      "final_train_loss": step_losses[-1],
      "questions_with_null_answer_only": no_candidate,
      "hyperparameters": {
          **hf_peer.hyperparameters(args, model, (
              "max_seq_length", "doc_stride", "max_query_length", "train_batch_size", "predict_batch_size",
              *hf_peer.OPTIMIZER_FLAGS, "n_best_size", "max_answer_length", "null_score_diff_threshold")),
          "loss_softmax": "real tokens" if args.mask_padding_in_loss else "every position of the padded batch",
      },
      "seed": args.seed, "version_2_with_negative": args.version_2_with_negative,
      "threads": hf_peer.threads(torch, args.num_threads),
      "model": hf_peer.model_record(args, model, newly_initialized),
      "data": {"train": os.path.abspath(args.train_file), "predict": os.path.abspath(args.predict_file)},
      "notes": [BIAS_CORRECTION_NOTE],
      "matched": {"order_file": args.order_file, "head_init": args.head_init, "dropout": args.dropout},
      "step_losses": step_losses,
  }
  path = os.path.join(args.output_dir, "results.json")
  write_json_atomic(path, report)
  shown = "  ".join(f"{k} {v:.3f}" for k, v in metrics.items() if isinstance(v, float))
  print(f"{args.predict_file}: {shown}\ntrain {train_seconds:.1f} s ({processed / train_seconds:.2f} windows/s, "
        f"{total_steps} steps); predict loop {predict_loop_seconds:.1f} s "
        f"({len(predict_windows) / predict_loop_seconds:.2f} windows/s), with windowing and post-processing "
        f"{predict_seconds:.1f} s\nwrote {path}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
