"""Helper launched by the `task_runs` fixture (conftest.py): trains every task of task_helpers a few steps in a fresh
process, on 1, 2 or 4 replicas (logical CPU devices) or XLA-compiled, and writes JSON.

  LOGICAL_CPUS=4 python tests/task_runs.py OUT_JSON WORKDIR CASE [CASE ...]

A CASE is task:replicas[:option ...], options being an --all_reduce_alg (hierarchical_copy, ring), `jit`
(--jit_compile, traced as on a GPU: accelerator_checks.tracing_as_on_gpu), `accN` (N micro-batches per step) and a
mixed dtype policy (mixed_float16, mixed_bfloat16): classifier:1 (one_device), squad:2:ring, ner:1:jit:acc2. Every
case trains STEPS (3) steps of a global batch of 8 from the same seed, on static shapes (as on a TPU: one XLA
compilation). Each writes {"losses": [...], "weights": path of an .npz, "weight_names": their paths, "replicas": n,
"xla": trainer.xla_coverage, "xla_ops": the op types XLA compiles, "findings": signatures of the step's ops without
a GPU kernel, "seconds", "error": str|None}.
"""

import contextlib
import json
import os
import sys
import time

import numpy as np
import tensorflow as tf

logical = int(os.environ.get("LOGICAL_CPUS", "1"))
if logical > 1:
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * logical)
tf.config.experimental.enable_op_determinism()

import task_helpers as tk  # noqa: E402
from bert_tf.training import accelerator_checks, distribute  # noqa: E402


def strategy_for(replicas: int, all_reduce_alg: str | None) -> tf.distribute.Strategy:
  if replicas == 1:
    return tf.distribute.OneDeviceStrategy("/cpu:0")
  devices = [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]
  return tf.distribute.MirroredStrategy(devices, cross_device_ops=distribute._cross_device_ops(all_reduce_alg, devices))


def run_case(workdir: str, case: str, data: dict) -> dict:
  task, replicas, *options = case.split(":")
  jit = "jit" in options
  accumulation = next((int(o[3:]) for o in options if o.startswith("acc")), 1)
  algs = [o for o in options if o in distribute.ALL_REDUCE_ALGS]
  dtype = next((o for o in options if o.startswith("mixed_")), "float32")
  name = case.replace(":", "-")
  if task not in data:
    data[task] = tk.write_data(task, os.path.join(workdir, "data", task))
  strategy = strategy_for(int(replicas), algs[0] if algs else None)
  with accelerator_checks.tracing_as_on_gpu() if jit else contextlib.nullcontext():
    run = tk.make_trainer(task, data[task], os.path.join(workdir, name), strategy, dynamic_padding=False,
                          jit_compile=jit, accumulation=accumulation, dtype=dtype,
                          steps=int(os.environ.get("STEPS", "3")))
    run.train()
  step = run._loop_fn.get_concrete_function(run.iterator, tf.TensorSpec([], tf.int32))
  weights = os.path.join(workdir, f"{name}.npz")
  np.savez(weights, *[v.numpy() for v in run.model.weights])
  return {"losses": [h["loss"] for h in run.history], "weights": weights,
          "weight_names": [w.path for w in run.model.weights], "replicas": run.num_replicas,
          "xla": run.xla, "xla_ops": sorted(accelerator_checks.xla_compiled_ops(step)),
          "findings": sorted({f.signature for f in accelerator_checks.ops_without_gpu_kernel(step)}), "error": None}


def main():
  out_json, workdir, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
  results, data = {}, {}
  for case in cases:
    start = time.perf_counter()
    try:
      results[case] = run_case(workdir, case, data)
      results[case]["seconds"] = round(time.perf_counter() - start, 1)
    except Exception as e:  # reported to the test, which asserts on it
      results[case] = {"error": f"{type(e).__name__}: {str(e)[:3000]}"}
  with open(out_json, "w") as f:
    json.dump(results, f)


if __name__ == "__main__":
  main()
