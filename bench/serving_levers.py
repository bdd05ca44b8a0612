r"""Where the TF side's batch-1 time goes, and what each lever gives, in one process (for `bench_serving.py`).

For the classifier SavedModel that `bench_serving.py` exported (run it first, with the same --work_dir), each
of the first `--requests` MRPC pairs is run at batch 1 through every case below, the cases in turn (the order
rotating), so that the machine's load falls on all alike; the median per case is reported:

  text                 the SavedModel's `serving_default`: sentences in, probabilities out (what is served)
  tokenize             its `encode_text` alone: the in-graph tokenizer and packing, int32 [1, 128]
  model_at_128         our Keras classifier (same weights) in a tf.function on the features padded to 128
  model_own_length     the same on the features cut by `serving.trim_padding` (what `text` runs)
  model_own_length_xla the same function with jit_compile=True (XLA; each of the <= 16 lengths compiled once,
                       before timing)
  model_own_length_bf16 the same under the mixed_bfloat16 policy (bfloat16 matmuls; not the same answers)

and for the same pairs in batches of 32 (cut by `trim_padding` to the batch's longest pair), in turn:

  batch32_padded       the model over every position of the batch, padding included (the exports until
                       2026-11-25)
  batch32_real_rows    the same traced under `encoder.padding_skipped`: the layers' row-wise work on the real
                       tokens only (what the exports run now)

Also printed: the op count of the tokenizer's graph (`encode_text`, nested functions included).

  python bench/serving_levers.py --work_dir=/tmp/bench_serving --model=minilm --requests=100
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_serving  # noqa: E402  pylint: disable=wrong-import-position
import serving_classifier  # noqa: E402  pylint: disable=wrong-import-position


def op_count(concrete) -> int:
  """Ops of a concrete function's graph and of every function in its library (nested calls included)."""
  graph_def = concrete.graph.as_graph_def()
  return len(graph_def.node) + sum(len(f.node_def) for f in graph_def.library.function)


def main(argv=None) -> None:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--work_dir", default="/tmp/bench_serving")
  parser.add_argument("--data_dir", required=True, help="MRPC's folder (train.tsv)")
  parser.add_argument("--model", default="minilm", choices=bench_serving.MODELS)
  parser.add_argument("--requests", type=int, default=100)
  parser.add_argument("--threads", type=int, default=2)
  parser.add_argument("--inter_threads", type=int, default=1)
  args = parser.parse_args(argv)

  import tensorflow as tf
  import tensorflow_text  # noqa: F401
  import transformers

  from bert_tf.export import serving
  from bert_tf.model.encoder import padding_skipped
  from bert_tf.tasks.classification.classifier import BertClassifier

  tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  tf.config.threading.set_inter_op_parallelism_threads(args.inter_threads)
  paths = bench_serving.prepare("classifier", args.model, os.path.abspath(args.work_dir))
  loaded = tf.saved_model.load(os.path.join(paths["export"], "mrpc", "1"))
  hf = transformers.BertForSequenceClassification.from_pretrained(paths["hf"])
  model = serving_classifier.our_classifier(hf.config.to_dict(),
                                           {k: v.detach().numpy() for k, v in hf.state_dict().items()})
  del hf
  text_fn = loaded.signatures["serving_default"]
  pairs = serving_classifier.read_pairs(args.data_dir, args.requests)
  texts = [(tf.constant([a]), tf.constant([b])) for a, b in pairs]
  padded = [loaded.encode_text(a, b) for a, b in texts]
  trimmed = [serving.trim_padding(f) for f in padded]
  spec = {name: tf.TensorSpec([None, None], tf.int32) for name in padded[0]}
  plain = tf.function(lambda features: model(features, training=False), input_signature=[spec])
  xla = tf.function(lambda features: model(features, training=False), input_signature=[spec], jit_compile=True)
  # bfloat16 matmuls (oneDNN, on CPUs with AVX512_BF16 or AMX); LayerNorm and softmax stay float32.
  bf16_model = BertClassifier(model.config, model.num_labels, dtype="mixed_bfloat16")
  bf16_model({name: tf.zeros([1, 2], tf.int32) for name in padded[0]})
  bf16_model.set_weights(model.get_weights())
  bf16 = tf.function(lambda features: tf.cast(bf16_model(features, training=False), tf.float32),
                     input_signature=[spec])
  cases = {
      "text": lambda i: text_fn(sentence1=texts[i][0], sentence2=texts[i][1])["probabilities"].numpy(),
      "tokenize": lambda i: loaded.encode_text(*texts[i])["input_ids"].numpy(),
      "model_at_128": lambda i: plain(padded[i]).numpy(),
      "model_own_length": lambda i: plain(trimmed[i]).numpy(),
      "model_own_length_xla": lambda i: xla(trimmed[i]).numpy(),
      "model_own_length_bf16": lambda i: bf16(trimmed[i]).numpy(),
  }
  for i in range(len(pairs)):  # Warm: every shape traced (and compiled by XLA) before timing.
    for case in cases.values():
      case(i)
  xla_diff = max(float(np.abs(xla(t).numpy() - plain(t).numpy()).max()) for t in trimmed)
  bf16_logits, logits = [np.concatenate([f(t).numpy() for t in trimmed]) for f in (bf16, plain)]
  times = {name: [] for name in cases}
  names = list(cases)
  for i in range(len(pairs)):
    for name in names[i % len(names):] + names[:i % len(names)]:
      began = time.perf_counter()
      cases[name](i)
      times[name].append(time.perf_counter() - began)
  lengths = [int(f["input_mask"].numpy().sum()) for f in padded]

  with padding_skipped(model):
    real_rows = tf.function(lambda features: model(features, training=False), input_signature=[spec])
    real_rows.get_concrete_function()  # traced inside: the flag is read while tracing
  batches = [serving.trim_padding(loaded.encode_text(tf.constant([a for a, _ in chunk]),
                                                     tf.constant([b for _, b in chunk])))
             for chunk in (pairs[s:s + 32] for s in range(0, len(pairs), 32)) if len(chunk) == 32]
  batch_cases = {"batch32_padded": plain, "batch32_real_rows": real_rows}
  batch_times = {name: [] for name in batch_cases}
  for batch in batches:
    for fn in batch_cases.values():
      fn(batch)
  real_rows_diff = max(float(np.abs(real_rows(b).numpy() - plain(b).numpy()).max()) for b in batches)
  for round_index in range(3):
    for i, batch in enumerate(batches):
      order = list(batch_cases) if (i + round_index) % 2 == 0 else list(batch_cases)[::-1]
      for name in order:
        began = time.perf_counter()
        batch_cases[name](batch).numpy()
        batch_times[name].append(time.perf_counter() - began)
  positions = sum(int(np.prod(b["input_mask"].shape)) for b in batches)
  report = {
      "model": args.model, "requests": len(pairs), "threads": args.threads, "inter_threads": args.inter_threads,
      "median_ms": {name: 1000 * float(np.median(t)) for name, t in times.items()},
      "batch32_pairs_per_s": {name: 32 * len(t) / float(np.sum(t)) for name, t in batch_times.items()},
      "batch32_padding_fraction": 1 - sum(int(b["input_mask"].numpy().sum()) for b in batches) / max(positions, 1),
      "batch32_real_rows_max_logit_difference": real_rows_diff,
      "real_tokens_median": float(np.median(lengths)),
      "padded_length_median": float(np.median([f["input_mask"].shape[1] for f in trimmed])),
      "tokenizer_ops": op_count(loaded.encode_text.get_concrete_function(
          tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string))),
      "xla_max_logit_difference": xla_diff,
      "bf16_max_logit_difference": float(np.abs(bf16_logits - logits).max()),
      "bf16_labels_differing": int(np.sum(bf16_logits.argmax(-1) != logits.argmax(-1))),
      "load_average": os.getloadavg(),
  }
  print(json.dumps(report, indent=1))


if __name__ == "__main__":
  main()
