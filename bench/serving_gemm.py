r"""The encoder's matrix products alone at serving sizes: TensorFlow's CPU kernels against ONNX Runtime's.

Batch-1 serving multiplies a few dozen rows (M = the tokens of one request) by the encoder's weights; batch 32
multiplies a few thousand. This script builds, for a model size, the encoder's four products of every layer
- query/key/value [M, H] x [H, 3H], attention output [M, H] x [H, H], intermediate [M, H] x [H, I],
output [M, I] x [I, H], each with its bias, one after another on one inter-op thread - and nothing else (no attention,
no activation, no LayerNorm), as one TensorFlow graph (weights in resource variables, as an export holds them; run by
a TF1 session, TF Serving's path) and as one ONNX Runtime session (the same products as `Gemm` nodes, weights as
initializers, as an exported ONNX model holds them), with the same threads. For each M the two run in turn, in blocks
of a tenth of `--repeats` calls with a pause between (ONNX Runtime's threads spin after a run and would slow a TF call
made right after), and the medians are reported with the achieved GFLOP/s. The gap at small M is what the serving
graph cannot close by changing the graph: the time of the same products on the same CPU.

  python bench/serving_gemm.py --model=minilm --rows=16,24,56,128,1792
  TF_ENABLE_ONEDNN_OPTS=0 python bench/serving_gemm.py --model=minilm    # TensorFlow's Eigen kernels instead

`--tf_variants` times other ways of writing the same products in the TF graph, each its own session, in the same
blocks (`tf_<variant>` in the report): `constants` (the weights as Const nodes, as a frozen graph holds them:
oneDNN may then cache them reordered), `batch_matmul` (a BatchMatMulV2 of [1, M, K] x [1, K, N]: oneDNN's
matmul primitive instead of its inner product), `swapped` (the weights stored [N, K], the product computed as
(W x^T)^T: M becomes the long side of the kernel's split). Process-wide switches are environment variables:
TF_ONEDNN_ASSUME_FROZEN_WEIGHTS=1 (every weight treated as constant: reordered once and cached, oneDNN's brgemm
kernels), TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD=1 (the calling thread works too).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

SIZES = {"minilm": (6, 384, 1536), "base": (12, 768, 3072)}  # layers, hidden, intermediate


def products(layers: int, hidden: int, inter: int) -> list[tuple[int, int]]:
  """The [K, N] of every weight matrix a request meets, in order."""
  return [(hidden, 3 * hidden), (hidden, hidden), (hidden, inter), (inter, hidden)] * layers


TF_VARIANTS = ("variables", "constants", "batch_matmul", "swapped")


def tf_product(tf, rows, kernel: np.ndarray, bias: np.ndarray, variant: str):
  """rows [M, K] @ kernel [K, N] + bias [N] as `variant` writes it (see the module's docstring)."""
  if variant == "constants":
    return tf.nn.bias_add(tf.matmul(rows, tf.constant(kernel)), tf.constant(bias))
  b = tf.Variable(bias).read_value()
  if variant == "variables":
    return tf.nn.bias_add(tf.matmul(rows, tf.Variable(kernel).read_value()), b)
  if variant == "batch_matmul":
    return tf.nn.bias_add(tf.matmul(rows[None], tf.Variable(kernel).read_value()[None])[0], b)
  if variant == "swapped":
    return tf.nn.bias_add(tf.transpose(tf.matmul(tf.Variable(kernel.T.copy()).read_value(), rows,
                                                 transpose_b=True)), b)
  raise ValueError(f"variant {variant!r}: one of {TF_VARIANTS}")


def tf_chain(shapes, threads: int, variant: str = "variables"):
  """A TF1 session computing every product (x @ kernel + bias) from the fed rows; returns run(x, wide) ->
  seconds, where x [M, H] feeds the products with K = H and wide [M, I] the one with K = I."""
  import tensorflow as tf

  graph = tf.Graph()
  rng = np.random.default_rng(0)
  with graph.as_default():
    x = tf.compat.v1.placeholder(tf.float32, [None, shapes[0][0]])
    wide = tf.compat.v1.placeholder(tf.float32, [None, shapes[3][0]])
    outs = []
    for k, n in shapes:
      kernel = rng.standard_normal([k, n]).astype(np.float32) * 0.02
      outs.append(tf_product(tf, x if k == shapes[0][0] else wide, kernel, np.zeros(n, np.float32), variant))
    init = tf.compat.v1.global_variables_initializer()
  config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=1)
  session = tf.compat.v1.Session(graph=graph, config=config)
  session.run(init)

  def run(rows: np.ndarray, wide_rows: np.ndarray) -> float:
    began = time.perf_counter()
    session.run(outs, {x: rows, wide: wide_rows})
    return time.perf_counter() - began

  return run


def ort_chain(shapes, threads: int):
  """The same products as `Gemm` nodes of one ONNX Runtime session (weights as initializers); run(x, wide)."""
  import onnxruntime as ort
  from onnx import TensorProto, helper, numpy_helper

  rng = np.random.default_rng(0)
  nodes, weights, outputs = [], [], []
  for i, (k, n) in enumerate(shapes):
    name = "x" if k == shapes[0][0] else "wide"  # as tf_chain
    weights += [numpy_helper.from_array(rng.standard_normal([k, n]).astype(np.float32) * 0.02, f"w{i}"),
                numpy_helper.from_array(np.zeros(n, np.float32), f"b{i}")]
    nodes.append(helper.make_node("Gemm", [name, f"w{i}", f"b{i}"], [f"y{i}"]))
    outputs.append(helper.make_tensor_value_info(f"y{i}", TensorProto.FLOAT, [None, n]))
  inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [None, shapes[0][0]]),
            helper.make_tensor_value_info("wide", TensorProto.FLOAT, [None, shapes[3][0]])]
  model = helper.make_model(helper.make_graph(nodes, "products", inputs, outputs, weights),
                            opset_imports=[helper.make_opsetid("", 17)])
  model.ir_version = 8
  options = ort.SessionOptions()
  options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
  session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])

  def run(rows: np.ndarray, wide_rows: np.ndarray) -> float:
    began = time.perf_counter()
    session.run(None, {"x": rows, "wide": wide_rows})
    return time.perf_counter() - began

  return run


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--model", default="minilm", choices=sorted(SIZES))
  parser.add_argument("--rows", default="16,24,56,128,1792", help="M values: tokens of a request or a batch")
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--repeats", type=int, default=100)
  parser.add_argument("--tf_variants", default="", help=f"comma-separated, of {TF_VARIANTS[1:]}: also time "
                      "these ways of writing the products in TensorFlow")
  parser.add_argument("--json", help="also write the report here")
  args = parser.parse_args(argv)
  rows = [int(v) for v in args.rows.split(",")]
  variants = [v for v in args.tf_variants.split(",") if v]
  unknown = sorted(set(variants) - set(TF_VARIANTS[1:]))
  if unknown:
    raise SystemExit(f"error: --tf_variants: {unknown} unknown; give a comma-separated list of {TF_VARIANTS[1:]}")
  shapes = products(*SIZES[args.model])
  flops_per_row = sum(2 * k * n for k, n in shapes)
  sides = {"tf_session": tf_chain(shapes, args.threads), "onnxruntime": ort_chain(shapes, args.threads),
           **{f"tf_{v}": tf_chain(shapes, args.threads, v) for v in variants}}
  rng = np.random.default_rng(1)
  switches = ("TF_ENABLE_ONEDNN_OPTS", "TF_ONEDNN_ASSUME_FROZEN_WEIGHTS", "TF_ONEDNN_THREADPOOL_USE_CALLER_THREAD")
  report = {"model": args.model, "threads": args.threads, "repeats": args.repeats,
            "onednn": os.environ.get("TF_ENABLE_ONEDNN_OPTS", "default (on)"),
            "environment": {k: os.environ[k] for k in switches if k in os.environ}, "load_average": os.getloadavg(),
            "rows": {}}
  for m in rows:
    x = rng.standard_normal([m, shapes[0][0]]).astype(np.float32)
    wide = rng.standard_normal([m, shapes[3][0]]).astype(np.float32)
    times = {side: [] for side in sides}
    repeats = max(5, args.repeats * 56 // max(m, 56))  # fewer repeats for the large products
    for _ in range(5):
      for run in sides.values():
        run(x, wide)
    # In blocks, a pause between: ONNX Runtime's threads spin for a while after each run (its default), which
    # takes the cores from a TensorFlow call made right after it (call by call, TF's times came out 1.5x).
    block = max(1, repeats // 10)
    for start in range(0, repeats, block):
      for side, run in sides.items():
        time.sleep(0.05)
        times[side] += [run(x, wide) for _ in range(min(block, repeats - start))]
    medians = {side: float(np.median(t)) for side, t in times.items()}
    report["rows"][m] = {side: {"ms": 1000 * t, "gflop_s": flops_per_row * m / t / 1e9} for side, t in medians.items()}
    report["rows"][m]["tf_over_ort"] = medians["tf_session"] / medians["onnxruntime"]
  print(json.dumps(report, indent=1))
  print(f"\n{args.model}: the encoder's {len(shapes)} products, {args.threads} threads, environment "
        f"{report['environment'] or 'default'}, load average {report['load_average'][0]:.2f}\n")
  extra = [f"tf_{v}" for v in variants]
  print("| rows M | TF session ms (GFLOP/s) | ONNX Runtime ms (GFLOP/s) | TF / ORT time |"
        + "".join(f" {side} ms |" for side in extra) + "\n|---|---|---|---|" + "---|" * len(extra))
  for m, r in report["rows"].items():
    print(f"| {m} | {r['tf_session']['ms']:.2f} ({r['tf_session']['gflop_s']:.0f}) | "
          f"{r['onnxruntime']['ms']:.2f} ({r['onnxruntime']['gflop_s']:.0f}) | {r['tf_over_ort']:.2f}x |"
          + "".join(f" {r[side]['ms']:.2f} |" for side in extra))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(report, f, indent=1)


if __name__ == "__main__":
  main()
