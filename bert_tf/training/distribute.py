"""Choosing a `tf.distribute.Strategy`; one training code path runs under each of them.

  one_device             the first GPU, or the CPU when there is none (or --num_gpus=0)
  mirrored               every GPU TensorFlow sees (MirroredStrategy's own default; --num_gpus=N: the first N),
                         or all logical CPU devices when there is none (or --num_gpus=0)
  multi_worker_mirrored  synchronous data parallelism over machines; each process reads TF_CONFIG
  tpu                    a Cloud TPU (VM: --tpu_name=local; TPU node: its name or grpc:// address)

Under every strategy the global batch is split evenly across replicas; see `trainer.py`. GPUs asked for that
TensorFlow cannot see are refused with the reason (`gpu_unavailable_reason`), never trained around on the CPU.
"""

from __future__ import annotations

import glob
import json
import os

import tensorflow as tf
from absl import logging

from bert_tf.training.choices import ALL_REDUCE_ALGS, COLLECTIVE_IMPLEMENTATIONS, STRATEGIES

GPU_INSTALL = "pip install '.[gpu]' (TensorFlow with its CUDA libraries: tensorflow[and-cuda]==2.20.0)"


def get_strategy(distribution_strategy: str = "mirrored", num_gpus: int | None = None, tpu_name: str | None = None,
                 tpu_zone: str | None = None, gcp_project: str | None = None, all_reduce_alg: str | None = None,
                 collective_implementation: str = "auto") -> tf.distribute.Strategy:
  """Builds the strategy named by `--distribution_strategy`; raises ValueError saying what to change.

  `num_gpus`: None uses every GPU TensorFlow sees (the CPU when it sees none), 0 the CPU, N the first N GPUs
  (refused with the reason when TensorFlow sees fewer)."""
  if distribution_strategy not in STRATEGIES:
    raise ValueError(f"--distribution_strategy={distribution_strategy!r}: choose one of {STRATEGIES}")
  if num_gpus is not None and num_gpus < 0:
    raise ValueError(f"--num_gpus={num_gpus}: must be >= 0")
  if all_reduce_alg is not None and all_reduce_alg not in ALL_REDUCE_ALGS:
    raise ValueError(f"--all_reduce_alg={all_reduce_alg}: choose one of {', '.join(ALL_REDUCE_ALGS)}")
  if collective_implementation not in COLLECTIVE_IMPLEMENTATIONS:
    raise ValueError(f"--collective_implementation={collective_implementation}: choose one of "
                     f"{', '.join(COLLECTIVE_IMPLEMENTATIONS)}")
  if all_reduce_alg is not None and distribution_strategy != "mirrored":
    raise ValueError(f"--all_reduce_alg is for --distribution_strategy=mirrored, not {distribution_strategy}"
                     + (" (use --collective_implementation)" if distribution_strategy == "multi_worker_mirrored"
                        else ""))
  if collective_implementation != "auto" and distribution_strategy != "multi_worker_mirrored":
    raise ValueError("--collective_implementation is for --distribution_strategy=multi_worker_mirrored"
                     + (" (use --all_reduce_alg)" if distribution_strategy == "mirrored" else ""))
  if distribution_strategy == "tpu":
    strategy = _tpu_strategy(tpu_name, tpu_zone, gcp_project)
  else:
    # MultiWorkerMirroredStrategy must be made before TensorFlow initialises its devices: count physical GPUs.
    logical = distribution_strategy != "multi_worker_mirrored"
    gpus = _gpus(num_gpus, logical)
    if not logical:
      visible = len(tf.config.list_physical_devices("GPU"))
      if len(gpus) != visible:  # TensorFlow's collectives span every local GPU; they cannot leave some out.
        raise ValueError(f"--num_gpus={num_gpus}: multi_worker_mirrored uses every GPU a worker sees ({visible} "
                         "here); leave --num_gpus out and choose them with CUDA_VISIBLE_DEVICES")
      strategy = _multi_worker_strategy(gpus, collective_implementation)
    elif distribution_strategy == "one_device":
      strategy = tf.distribute.OneDeviceStrategy(gpus[0] if gpus else "/cpu:0")
    else:
      # Without GPUs: normally one CPU device; several when logical CPU devices were configured (tests do this).
      devices = gpus or [d.name for d in tf.config.list_logical_devices("CPU")]
      strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=_cross_device_ops(all_reduce_alg,
                                                                                            devices))
  logging.info("%s", describe(strategy))
  return strategy


def _gpus(num_gpus: int | None, logical: bool = True) -> list[str]:
  """The GPU devices to train on: the first `num_gpus` TensorFlow sees (all of them for None); `logical`: as
  logical devices (a GPU split in several counts as several), else physical ones (initialises nothing)."""
  visible = ([d.name for d in tf.config.list_logical_devices("GPU")] if logical
             else [f"/gpu:{i}" for i in range(len(tf.config.list_physical_devices("GPU")))])
  if num_gpus is None:
    if not visible:
      hidden = nvidia_gpus_on_machine()
      if hidden:  # A GPU machine training on its CPU by default would be a silent surprise: say why, loudly.
        logging.warning("this machine has %d NVIDIA GPU(s) but TensorFlow sees none, so this run uses the CPU: "
                        "%s", hidden, gpu_unavailable_reason())
    return visible
  if num_gpus > len(visible):
    reason = gpu_unavailable_reason() if not visible else (
        f"pass --num_gpus={len(visible)}, or leave --num_gpus out to use every GPU TensorFlow sees")
    raise ValueError(f"--num_gpus={num_gpus} but TensorFlow sees {len(visible)} GPU(s): {reason}")
  return visible[:num_gpus]


def nvidia_gpus_on_machine() -> int:
  """NVIDIA GPUs the kernel driver lists (/proc/driver/nvidia/gpus/<bus id>), whatever TensorFlow sees."""
  return len(glob.glob("/proc/driver/nvidia/gpus/*"))


def gpu_unavailable_reason() -> str:
  """Why TensorFlow sees no GPU, as one clause that says what to do: a CPU-only TensorFlow, CUDA_VISIBLE_DEVICES
  hiding them, no NVIDIA driver, or a driver whose GPUs TensorFlow could not open (its CUDA libraries missing)."""
  if not tf.test.is_built_with_gpu_support():
    return f"this TensorFlow ({tf.__version__}) is a CPU-only build; install the GPU one: {GPU_INSTALL}"
  hidden = os.environ.get("CUDA_VISIBLE_DEVICES")
  if hidden is not None and not [d for d in hidden.split(",") if d.strip() not in ("", "-1")]:
    return f"CUDA_VISIBLE_DEVICES={hidden!r} hides every GPU; unset it or name the GPUs (CUDA_VISIBLE_DEVICES=0,1)"
  if not nvidia_gpus_on_machine():
    return ("this machine has no NVIDIA GPU driver loaded (/proc/driver/nvidia/gpus is empty); run on a GPU "
            "machine, or pass --num_gpus=0 for the CPU")
  return ("the NVIDIA driver lists GPUs but TensorFlow could not open them, most often because its CUDA "
          f"libraries are missing (TensorFlow then logs 'Cannot dlopen some GPU libraries'): {GPU_INSTALL}"
          + (f"; CUDA_VISIBLE_DEVICES={hidden!r} is set, check it names them" if hidden else ""))


def _cross_device_ops(all_reduce_alg: str | None, devices: list[str]):
  """MirroredStrategy's `cross_device_ops` for --all_reduce_alg (None: its own default)."""
  if all_reduce_alg is None:
    return None
  if all_reduce_alg == "nccl":
    if not all("GPU" in d.upper() for d in devices):
      raise ValueError("--all_reduce_alg=nccl needs GPUs (NCCL sums on GPUs only); choose hierarchical_copy or "
                       "ring, or leave it out")
    return tf.distribute.NcclAllReduce()
  if all_reduce_alg == "hierarchical_copy":
    return tf.distribute.HierarchicalCopyAllReduce()
  # Ring all-reduce among this machine's devices: TensorFlow's collective ops, as MultiWorkerMirroredStrategy
  # uses between machines (the class is not exported under tf.distribute).
  from tensorflow.python.distribute import cross_device_ops as cross_device_ops_lib

  return cross_device_ops_lib.CollectiveAllReduce(
      devices=devices, group_size=len(devices), options=tf.distribute.experimental.CommunicationOptions(
          implementation=tf.distribute.experimental.CommunicationImplementation.RING))


def describe(strategy: tf.distribute.Strategy) -> str:
  """`strategy MirroredStrategy: 2 replica(s) on /gpu:0, /gpu:1 (1 worker)`: a run's first log line."""
  devices = getattr(strategy.extended, "worker_devices", None) or ()
  shown = ", ".join(_short_device(d) for d in devices) or "the TPU's cores"
  return (f"strategy {type(strategy).__name__}: {strategy.num_replicas_in_sync} replica(s) on {shown} "
          f"({num_workers(strategy)} worker(s))")


def _short_device(name: str) -> str:
  """/job:localhost/replica:0/task:0/device:GPU:1 -> /gpu:1."""
  kind, _, index = name.rsplit("device:", 1)[-1].partition(":")
  return f"/{kind.lower()}:{index}"


def _multi_worker_strategy(gpus: list[str], collective_implementation: str) -> tf.distribute.Strategy:
  config = os.environ.get("TF_CONFIG")
  if not config:
    raise ValueError(
        "--distribution_strategy=multi_worker_mirrored needs TF_CONFIG in the environment of every worker, "
        'e.g. {"cluster": {"worker": ["host0:12345", "host1:12345"]}, "task": {"type": "worker", "index": 0}}; '
        "see docs/pretraining.md")
  check_tf_config(config)
  # NCCL between GPUs; ring all-reduce over gRPC for CPU-only workers.
  names = tf.distribute.experimental.CommunicationImplementation
  if collective_implementation == "nccl" and not gpus:
    raise ValueError("--collective_implementation=nccl needs GPUs on every worker, and TensorFlow sees none here: "
                     + gpu_unavailable_reason())
  implementation = {"nccl": names.NCCL, "ring": names.RING}.get(collective_implementation,
                                                                names.NCCL if gpus else names.RING)
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
  cluster, task = _entries(parsed, ("cluster", "task"), "TF_CONFIG", see)
  if not isinstance(cluster, dict) or not cluster:
    raise ValueError(f'TF_CONFIG "cluster" must be a non-empty object of task types; {see}')
  for task_type, addresses in cluster.items():
    if not isinstance(addresses, list) or not all(isinstance(a, str) for a in addresses):
      raise ValueError(f'TF_CONFIG "cluster": the task type {_name(task_type)} must be a list of "host:port" '
                       f"strings; {see}")
  if not isinstance(task, dict):
    raise ValueError(f'TF_CONFIG "task" must be an object with "type" and "index"; {see}')
  task_type, index = _entries(task, ("type", "index"), 'TF_CONFIG "task"', see)
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


def _entries(mapping: dict, keys: tuple[str, ...], what: str, see: str) -> tuple:
  """`mapping`'s values of `keys`, in order; a ValueError naming `what` and the first key it lacks."""
  for key in keys:
    if key not in mapping:
      raise ValueError(f'{what} has no "{key}" key; {see}')
  return tuple(mapping[key] for key in keys)


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
