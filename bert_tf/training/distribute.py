"""Choosing a `tf.distribute.Strategy`; one training code path runs under each of them.

  one_device             one GPU (--num_gpus=1) or the CPU
  mirrored               all GPUs of this machine (--num_gpus), or all logical CPU devices when num_gpus=0
  multi_worker_mirrored  synchronous data parallelism over machines; each process reads TF_CONFIG
  tpu                    a Cloud TPU (VM: --tpu_name=local; TPU node: its name or grpc:// address)

Under every strategy the global batch is split evenly across replicas; see `trainer.py`.
"""

from __future__ import annotations

import json
import os

import tensorflow as tf

STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")


def get_strategy(distribution_strategy: str = "mirrored", num_gpus: int = 0, tpu_name: str | None = None,
                 tpu_zone: str | None = None, gcp_project: str | None = None) -> tf.distribute.Strategy:
  """Builds the strategy named by `--distribution_strategy`; raises ValueError saying what to change."""
  if distribution_strategy not in STRATEGIES:
    raise ValueError(f"--distribution_strategy={distribution_strategy!r}: choose one of {STRATEGIES}")
  if num_gpus < 0:
    raise ValueError(f"--num_gpus={num_gpus}: must be >= 0")
  if distribution_strategy == "tpu":
    return _tpu_strategy(tpu_name, tpu_zone, gcp_project)
  if distribution_strategy == "multi_worker_mirrored":
    return _multi_worker_strategy(num_gpus)

  gpus = tf.config.list_logical_devices("GPU")
  if num_gpus > len(gpus):
    raise ValueError(f"--num_gpus={num_gpus} but this machine has {len(gpus)} GPU(s) visible to TensorFlow; "
                     f"pass --num_gpus={len(gpus)} or make the GPUs visible (CUDA_VISIBLE_DEVICES)")
  if distribution_strategy == "one_device":
    return tf.distribute.OneDeviceStrategy("/gpu:0" if num_gpus else "/cpu:0")
  if num_gpus:
    return tf.distribute.MirroredStrategy([f"/gpu:{i}" for i in range(num_gpus)])
  # Normally one CPU device; several when logical CPU devices were configured (tests do this).
  return tf.distribute.MirroredStrategy([d.name for d in tf.config.list_logical_devices("CPU")])


def _multi_worker_strategy(num_gpus: int) -> tf.distribute.Strategy:
  config = os.environ.get("TF_CONFIG")
  if not config:
    raise ValueError(
        "--distribution_strategy=multi_worker_mirrored needs TF_CONFIG in the environment of every worker, "
        'e.g. {"cluster": {"worker": ["host0:12345", "host1:12345"]}, "task": {"type": "worker", "index": 0}}; '
        "see docs/pretraining.md")
  check_tf_config(config)
  # NCCL between GPUs; ring all-reduce over gRPC for CPU-only workers.
  implementation = (tf.distribute.experimental.CommunicationImplementation.NCCL if num_gpus
                    else tf.distribute.experimental.CommunicationImplementation.RING)
  return tf.distribute.MultiWorkerMirroredStrategy(
      communication_options=tf.distribute.experimental.CommunicationOptions(implementation=implementation))


# TensorFlow's task types: safe to repeat in a message. Any other value of TF_CONFIG is never repeated.
_TASK_TYPES = ("chief", "worker", "ps", "evaluator")


def check_tf_config(config: str) -> dict:
  """Parses TF_CONFIG and checks what MultiWorkerMirroredStrategy needs: a "cluster" of task types, each a
  list of "host:port" addresses, and this process's "task" (a type of the cluster and an index into its list).

  Raises ValueError naming the key at fault. The messages never repeat the value, nor any address in it:
  TF_CONFIG may carry credentials (tokens in addresses, extra keys).
  """
  see = 'e.g. {"cluster": {"worker": ["host0:12345", "host1:12345"]}, "task": {"type": "worker", "index": 0}}'
  try:
    parsed = json.loads(config)
  except json.JSONDecodeError as e:  # e.msg holds no text of the document; str(e) neither, but be explicit.
    raise ValueError(f"TF_CONFIG is not JSON ({e.msg} at character {e.pos} of {len(config)}); {see}") from None
  if not isinstance(parsed, dict):
    raise ValueError(f"TF_CONFIG is JSON but not an object ({type(parsed).__name__}); {see}")
  for key in ("cluster", "task"):
    if key not in parsed:
      raise ValueError(f'TF_CONFIG has no "{key}" key; {see}')
  cluster, task = parsed["cluster"], parsed["task"]
  if not isinstance(cluster, dict) or not cluster:
    raise ValueError(f'TF_CONFIG "cluster" must be a non-empty object of task types; {see}')
  for task_type, addresses in cluster.items():
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
      raise ValueError(f'TF_CONFIG "cluster": the task type {_name(task_type)} must be a list of "host:port" '
                       f"strings; {see}")
  if not isinstance(task, dict):
    raise ValueError(f'TF_CONFIG "task" must be an object with "type" and "index"; {see}')
  for key in ("type", "index"):
    if key not in task:
      raise ValueError(f'TF_CONFIG "task" has no "{key}" key; {see}')
  task_type, index = task["type"], task["index"]
  if not isinstance(task_type, str) or task_type not in cluster:
    raise ValueError(f'TF_CONFIG "task": its "type" {_name(task_type)} is not a task type of "cluster" (which '
                     f"has {_names(cluster)}); {see}")
  if isinstance(index, bool) or not isinstance(index, int):
    raise ValueError(f'TF_CONFIG "task": its "index" must be an integer, not a {type(index).__name__}; {see}')
  if not 0 <= index < len(cluster[task_type]):
    raise ValueError(f'TF_CONFIG "task": its "index" {index} is out of range: "cluster" has '
                     f"{len(cluster[task_type])} task(s) of type {_name(task_type)}, indices 0 to "
                     f"{len(cluster[task_type]) - 1}")
  return parsed


def _name(value) -> str:
  """A task type for a message: itself when it is one of TensorFlow's, else not repeated."""
  return repr(value) if value in _TASK_TYPES else "(a name other than chief, worker, ps, evaluator)"


def _names(mapping: dict) -> str:
  known = [repr(k) for k in mapping if k in _TASK_TYPES]
  others = len(mapping) - len(known)
  return ", ".join(known + [f"{others} other name(s)"] * bool(others))


def _tpu_strategy(tpu_name, tpu_zone, gcp_project) -> tf.distribute.Strategy:
  if not tpu_name:
    raise ValueError("--distribution_strategy=tpu needs --tpu_name: 'local' on a Cloud TPU VM, else the TPU "
                     "node's name or grpc:// address")
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu_name, zone=tpu_zone,
                                                                 project=gcp_project)
    if tpu_name != "local":
      tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except Exception as e:  # The resolver raises ValueError, NotFoundError or URLError depending on the case.
    first_line = (str(e).splitlines() or [""])[0][:200]
    raise ValueError(
        f"--distribution_strategy=tpu --tpu_name={tpu_name}: no TPU could be reached ({type(e).__name__}: "
        f"{first_line}). On a Cloud TPU VM use --tpu_name=local with TensorFlow's TPU build (tensorflow-tpu); "
        "elsewhere choose --distribution_strategy=one_device, mirrored or multi_worker_mirrored") from None
  return tf.distribute.TPUStrategy(resolver)


def worker_index(strategy: tf.distribute.Strategy) -> int:
  """This process's index among the workers (0 except under multi-worker strategies)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if resolver is None or not resolver.cluster_spec().as_dict() or resolver.task_type is None:
    return 0
  return int(resolver.task_id)


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """True for the one process that writes checkpoints and summaries.

  Under MultiWorkerMirroredStrategy that is the `chief` task if the cluster has one, else worker 0; a TPU or
  single-machine strategy has one process, which is the chief.
  """
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
    return True
  resolver = strategy.cluster_resolver
  task_type = resolver.task_type
  if task_type is None:
    return True
  if task_type == "chief":
    return True
  return task_type == "worker" and resolver.task_id == 0 and "chief" not in resolver.cluster_spec().as_dict()


def num_workers(strategy: tf.distribute.Strategy) -> int:
  return int(getattr(strategy.extended, "_num_workers", 1))
