"""Benchmark: the float32 MFU ceiling of a pretraining step on this CPU, from its matmuls timed alone.

`bench_pretraining_throughput.py` counts a step's model FLOPs (matmuls only) and divides by the step time and the
machine's best square-matmul rate. Even a step that did nothing but its matmuls would not reach 100% of that
peak: the shapes of BERT's products (K = H = 256 or 512, batched T x D attention products, the [B*P, V] masked-LM
projection) run slower than large square ones. This script times every product of one training step alone -
forward, input gradient and weight gradient, in the layouts TensorFlow's autodiff uses - each the best of
`--repeats` graph calls of 8 products in sequence, and reports

  ceiling = training FLOPs / (sum of the products' best times) / matmul peak

for the same configs, batch and FLOP count as the throughput benchmark (all T tokens and P slots, padding
included). A step's MFU cannot exceed its config's ceiling, whatever is done around the matmuls.

  python bench/bench_matmul_ceiling.py [--configs=mini,small] [--json=report.json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import bench_pretraining_throughput as throughput  # noqa: E402
from bert_tf.config import BertConfig  # noqa: E402


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--configs", default="mini,small")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--seq_length", type=int, default=128)
  p.add_argument("--max_predictions_per_seq", type=int, default=20)
  p.add_argument("--vocab_size", type=int, default=30522)
  p.add_argument("--repeats", type=int, default=7, help="timed blocks per product; the best is kept")
  p.add_argument("--peak_sizes", default="1024,1536,2048")
  p.add_argument("--probe_seconds", type=float, default=3.0)
  p.add_argument("--json", default="")
  return p.parse_args(argv)


def products(config: BertConfig, batch: int, length: int, predictions: int) -> list[tuple[str, int, tuple]]:
  """(name, times per step, (a_shape, b_shape, transpose_a, transpose_b)) of every matmul of a training step:
  each forward product and its two gradient products (dX = dY W^T, dW = X^T dY)."""
  h, i, v = config.hidden_size, config.intermediate_size, config.vocab_size
  d = config.hidden_size // config.num_attention_heads  # head size
  layers, tokens, slots = config.num_hidden_layers, batch * length, batch * predictions
  bn = batch * config.num_attention_heads  # attention products are batched over B x N heads
  out = []

  def dense(name, rows, k, m, count):
    out.append((f"{name} forward", count, ((rows, k), (k, m), False, False)))
    out.append((f"{name} dX", count, ((rows, m), (k, m), False, True)))
    out.append((f"{name} dW", count, ((rows, k), (rows, m), True, False)))

  dense("qkv", tokens, h, 3 * h, layers)
  dense("attention output", tokens, h, h, layers)
  dense("ffn in", tokens, h, i, layers)
  dense("ffn out", tokens, i, h, layers)
  # Scores S = Q K^T [BN, T, T]; dQ = dS K, dK = dS^T Q.
  out.append(("scores forward", layers, ((bn, length, d), (bn, length, d), False, True)))
  out.append(("scores dQ", layers, ((bn, length, length), (bn, length, d), False, False)))
  out.append(("scores dK", layers, ((bn, length, length), (bn, length, d), True, False)))
  # Context C = P V [BN, T, D]; dP = dC V^T, dV = P^T dC.
  out.append(("context forward", layers, ((bn, length, length), (bn, length, d), False, False)))
  out.append(("context dP", layers, ((bn, length, d), (bn, length, d), False, True)))
  out.append(("context dV", layers, ((bn, length, length), (bn, length, d), True, False)))
  dense("mlm transform", slots, h, h, 1)
  # Logits = rows E^T with the [V, H] embedding: forward NT, d rows = dL E (NN), dE = dL^T rows (TN).
  out.append(("mlm projection forward", 1, ((slots, h), (v, h), False, True)))
  out.append(("mlm projection dX", 1, ((slots, v), (v, h), False, False)))
  out.append(("mlm projection dE", 1, ((slots, v), (slots, h), True, False)))
  dense("pooler", batch, h, h, 1)
  dense("nsp", batch, h, 2, 1)
  return out


def time_product(shapes: tuple, repeats: int, copies: int = 8) -> tuple[float, float]:
  """Best seconds of one product, and its FLOPs.

  One graph call runs the product `copies` times in sequence (each on its own left operand, so that nothing is
  computed once for all, each after the previous one): a tf.function call costs about 0.5 ms on this machine,
  as much as a small product itself. The best of `repeats` calls, divided by `copies`.
  """
  a_shape, b_shape, ta, tb = shapes
  lefts = [tf.random.normal(a_shape, seed=1 + j) for j in range(copies)]
  b = tf.random.normal(b_shape, seed=99)

  @tf.function
  def block(lefts, b):
    # Every product is returned (a slice of one would let grappler compute only the slice), one after another.
    products = []
    for a in lefts:
      with tf.control_dependencies(products[-1:]):
        products.append(tf.linalg.matmul(a, b, transpose_a=ta, transpose_b=tb))
    return products

  block(lefts, b)
  rows, cols = (a_shape[-1] if ta else a_shape[-2]), (b_shape[-2] if tb else b_shape[-1])
  k = a_shape[-2] if ta else a_shape[-1]
  flops = 2.0 * rows * cols * k * (a_shape[0] if len(a_shape) == 3 else 1)
  best = float("inf")
  for _ in range(repeats):
    t0 = time.perf_counter()
    block(lefts, b)  # Eager execution is synchronous: the products are done when the call returns.
    best = min(best, (time.perf_counter() - t0) / copies)
  return best, flops


def main(argv=None):
  args = parse_args(argv)
  sizes = [int(s) for s in args.peak_sizes.split(",")]
  peak_before = throughput.matmul_peak(sizes, args.probe_seconds)
  report = {"batch": args.batch_size, "seq_length": args.seq_length,
            "max_predictions_per_seq": args.max_predictions_per_seq, "configs": {}}
  for name in args.configs.split(","):
    config = BertConfig.from_preset(name, vocab_size=args.vocab_size)
    rows, total_seconds, total_flops = [], 0.0, 0.0
    for label, count, shapes in products(config, args.batch_size, args.seq_length, args.max_predictions_per_seq):
      seconds, flops = time_product(shapes, args.repeats)
      rows.append({"product": label, "count": count, "ms": round(seconds * 1e3, 3),
                   "gflops": round(flops / seconds / 1e9, 1)})
      total_seconds += count * seconds
      total_flops += count * flops
      print(f"[{name}] {label:28s} x{count}  {seconds * 1e3:8.3f} ms  {flops / seconds / 1e9:6.1f} GFLOP/s",
            flush=True)
    model = throughput.training_flops(config.num_hidden_layers, config.hidden_size, config.intermediate_size,
                                      config.vocab_size, args.batch_size, args.seq_length,
                                      args.max_predictions_per_seq)["training"]
    report["configs"][name] = {"products": rows, "matmul_seconds": total_seconds, "timed_flops": total_flops,
                               "model_flops": model}
  peak_after = throughput.matmul_peak(sizes, args.probe_seconds)
  peak = max(peak_before["gflops"], peak_after["gflops"])
  report["matmul_peak"] = {"gflops": peak, "before": peak_before, "after": peak_after}
  for name, entry in report["configs"].items():
    rate = entry["model_flops"] / entry["matmul_seconds"] / 1e9
    entry["matmul_only_gflops"] = round(rate, 1)
    entry["ceiling"] = round(rate / peak, 4)
    # The products timed are exactly the model FLOPs of the throughput benchmark's formula: a check of both.
    entry["flops_match"] = abs(entry["timed_flops"] - entry["model_flops"]) / entry["model_flops"] < 1e-3
  print(json.dumps(report, indent=1))
  for name, entry in report["configs"].items():
    print(f"{name}: matmuls alone {entry['matmul_seconds'] * 1e3:.1f} ms per step, {entry['matmul_only_gflops']} "
          f"GFLOP/s = MFU ceiling {100 * entry['ceiling']:.1f}% of the {peak} GFLOP/s peak "
          f"(FLOPs match the throughput benchmark's formula: {entry['flops_match']})")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report, f, indent=1)


if __name__ == "__main__":
  main()
