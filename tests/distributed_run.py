"""Helper launched by test_distribute.py: trains the tiny pretrainer in a fresh process, writes JSON.

  python tests/distributed_run.py OUT_JSON WORKDIR CASE [CASE ...]

A CASE is strategy:accumulation_steps[:all_reduce_alg] (one_device:1, mirrored:2, mirrored:1:ring,
multi_worker_mirrored:1, tpu:1). With
LOGICAL_CPUS=n the process first splits its CPU into n logical devices (before TensorFlow initialises them).
Each case writes {"losses": [...], "weights": path of an .npz, "replicas": n, "chief": bool, "error": str|None}.
Environment: STEPS (4), BATCH (global, 8), DROPOUT (0), DATA (a records glob; default: written here).
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf

logical = int(os.environ.get("LOGICAL_CPUS", "1"))
if logical > 1:
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * logical)
tf.config.experimental.enable_op_determinism()

import training_helpers as th  # noqa: E402
from bert_tf.tasks.pretraining import run as pretraining  # noqa: E402
from bert_tf.tasks.pretraining.config import PretrainingConfig  # noqa: E402
from bert_tf.training import distribute, trainer  # noqa: E402


def run_case(workdir, case, data):
  name, accumulation, *all_reduce_alg = case.split(":")
  strategy = distribute.get_strategy(name, tpu_name="local" if name == "tpu" else None,
                                     all_reduce_alg=(all_reduce_alg or [None])[0])
  out = os.path.join(workdir, case.replace(":", "-"))
  config = PretrainingConfig(
      input_file=data, output_dir=out, bert_config=th.tiny_bert_config(float(os.environ.get("DROPOUT", "0"))),
      max_seq_length=th.T,
      max_predictions_per_seq=th.P, train_batch_size=int(os.environ.get("BATCH", "8")),
      num_train_steps=int(os.environ.get("STEPS", "4")), num_warmup_steps=1, learning_rate=1e-2,
      save_checkpoints_steps=2, steps_per_loop=1, log_steps=1, gradient_accumulation_steps=int(accumulation),
      export_encoder=False, seed=7)
  captured = {}

  class Recording(trainer.Trainer):
    def train(self):
      result = super().train()
      captured["trainer"] = self
      return result

  pretraining.run_pretraining(config, strategy=strategy, trainer_cls=Recording)
  recorded = captured["trainer"]
  weights = os.path.join(workdir, f"{case.replace(':', '-')}-worker{distribute.worker_index(strategy)}.npz")
  np.savez(weights, *[v.numpy() for v in recorded.model.weights])
  return {"losses": [h["loss"] for h in recorded.history], "weights": weights,
          "replicas": strategy.num_replicas_in_sync, "chief": distribute.is_chief(strategy), "error": None}


def main():
  out_json, workdir, cases = sys.argv[1], sys.argv[2], sys.argv[3:]
  data = os.environ.get("DATA") or th.write_records(os.path.join(workdir, "data"))
  results = {}
  for case in cases:
    try:
      results[case] = run_case(workdir, case, data)
    except Exception as e:  # reported to the test, which asserts on it
      results[case] = {"error": f"{type(e).__name__}: {e}"}
  with open(out_json, "w") as f:
    json.dump(results, f)


if __name__ == "__main__":
  main()
