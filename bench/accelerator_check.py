r"""One prepared check for the first machine where TensorFlow sees a GPU: environment, throughput, replicas, fine-tune.

Why: bert_tf has been built and tested on CPUs only. This is the command to run, unchanged, the day a GPU
machine is at hand; in about 8 minutes on one H100 it answers whether the project trains there and how fast.

  python bench/accelerator_check.py                      # on the GPU machine (pip install '.[gpu]' first)
  python bench/accelerator_check.py --chip=h100_sxm      # MFU against a named chip's dense peak (else detected)
  python bench/accelerator_check.py --peak_tflops=989.4  # ... or against a peak you give
  python bench/accelerator_check.py --dry_run --jobs=2   # the whole check at toy sizes, no GPU needed (the suite's)
  python bench/accelerator_check.py --only=throughput_bf16 --deadline_scale=2   # one part, twice the time

Each part runs in its own process with its own deadline and prints exactly ONE JSON line on stdout,
{"part": ..., "ok": true|false, ...figures..., "seconds": ..., "deadline_s": ...}, also when it fails or runs
past its deadline (then it is killed with its process group and the line carries what it had recorded so far,
"error" and "log": the part's full output). A last line {"part": "summary", ...} follows; the command exits 1
when a part that must pass did not, else 0. Every line also goes to <work_dir>/accelerator_check.jsonl.

  environment         TensorFlow, Keras, keras-hub, CUDA and cuDNN versions TensorFlow was built with, the GPUs
                      (name, compute capability), nvidia-smi's driver line, the relevant environment variables;
                      the first op's and first matmul's seconds (CUDA context, kernel loading, and on H100/H200
                      the driver's PTX compilation, see docs/pretraining.md); float32 (TF32), bfloat16 and float16
                      matmul TFLOPS at 8192^2 against the chip's dense peak. Must pass: a GPU is seen (else the
                      line says why: `distribute.gpu_unavailable_reason`) and the matmuls ran.
  throughput_float32  pretraining steps of BERT-base (L12/H768/A12, vocab 30,522) at sequence 128, 20 masked
  throughput_bf16     positions, global batch 64 of full-length synthetic sequences, one training step (forward,
  throughput_fp16     loss, backward, AdamW update) per tf.function call, with and without XLA, for ours
                      (BertPretrainer) and keras-hub (BertBackbone + MaskedLMHead + NSP Dense) in the same
                      process (bench_pretraining_throughput.py's builders): sequences/s, step ms, first-step
                      (trace/compile) seconds, peak GPU memory, final loss, and MFU against the chip's dense peak
                      of the precision the matmuls run in (TF32 for float32; --chip / --peak_tflops, else the chip
                      is detected from the device name). Must pass: every case of ours ran with a finite loss.
  two_vs_one          one GPU split into 2 logical GPUs (tf.config.set_logical_device_configuration): the real
                      pretraining loop (pretraining.run_pretraining) of a BERT-mini for 6 steps on 1 replica and
                      on 2 replicas (MirroredStrategy's default all-reduce, then hierarchical_copy), same global
                      batch 32, same records, TF32 off. Must pass: the losses agree within 1e-3 relative at every
                      step. (NCCL is not among them: TensorFlow does not run NCCL between logical GPUs.)
  finetune            scripts/run_classifier.py as a user runs it (its default device choice: every GPU) on a
                      synthetic CSV task (label "cue" when the sentence holds one of 4 cue words, 60% "plain"),
                      from random weights of a 2-layer BERT (H64), --dtype=mixed_bfloat16 --jit_compile. Must
                      pass: dev accuracy >= the majority class's share + 0.10.

Deadlines (seconds on one H100; --deadline_scale multiplies them all, and the total, for slower cards):

  environment 35 + throughput 3 x 110 + two_vs_one 45 + finetune 45 = 455 s; a part starts only with its
  deadline inside the 480 s total, so the whole check ends within 8 minutes even when every part runs out.

Why they fit (estimates: nothing here has run on a GPU yet). Importing TensorFlow and keras-hub takes 5-10 s a
process. A throughput part builds two BERT-base models (~3 s each), traces the plain step (7-12 s on this
project's 2-core VM, less on a GPU host's CPU) and compiles the XLA step (30-44 s measured here on the CPU,
where LLVM code generation dominates; 20-40 s assumed on a GPU), four cases in all: about 10 + 6 + 20 + 60 = 96 s
before timing. The timed steps are cheap: 2 warm-up + 3 blocks of 10 steps at 64 x 69.9 GFLOP per step
(training_flops of BERT-base at T=128, P=20) take 32 x 4.5 TFLOP / (989 TFLOPS x 0.3) = 0.5 s in bf16, about
twice that in TF32. Within the part, a case starts only when the time left exceeds 1.2x the longest case so
far; they run in the order ours plain, ours XLA, keras-hub XLA, keras-hub plain, so a short deadline costs the
peer's cases first, and a skipped case is named in the line. two_vs_one: three runs of a 4-layer H256 model,
a few seconds of tracing each. finetune: one script process, 200 steps of a 2-layer model.

--dry_run: the same parts at toy sizes (1-layer H32 models, batch 4, sequence 16, 2 timed steps), needing no GPU
(logical CPUs for two_vs_one); tests/test_bench_accelerator_check.py runs it. Child processes get
CUDA_CACHE_MAXSIZE=4294967296 unless it is set, so that the driver's cache of PTX-compiled kernels holds
TensorFlow's (docs/pretraining.md).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import csv
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accelerators  # noqa: E402  pylint: disable=wrong-import-position

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOTAL_SECONDS = 480.0  # 8 minutes on one H100
# (name, deadline in seconds on one H100, must pass). Dry runs use DRY_DEADLINE for each.
PARTS: list[tuple[str, float, bool]] = [
    ("environment", 35.0, True),
    ("throughput_float32", 110.0, True),
    ("throughput_bf16", 110.0, True),
    ("throughput_fp16", 110.0, True),
    ("two_vs_one", 45.0, True),
    ("finetune", 45.0, True),
]
DRY_DEADLINE = 240.0  # a 2-core VM shared with other jobs
THROUGHPUT_DTYPES = {"throughput_float32": "float32", "throughput_bf16": "mixed_bfloat16",
                     "throughput_fp16": "mixed_float16"}
TWO_VS_ONE_TOLERANCE = 1e-3  # relative, per logged step
FINETUNE_MARGIN = 0.10  # dev accuracy must reach the majority share + this
CUE_WORDS = ("alpha", "bravo", "charlie", "delta")
FILLER_WORDS = tuple(f"word{i:02d}" for i in range(40))
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  p.add_argument("--dry_run", action="store_true", help="toy sizes; no GPU needed (CPU: logical CPUs)")
  p.add_argument("--only", default="", help=f"comma-separated parts to run (default all: "
                 f"{','.join(name for name, _, _ in PARTS)})")
  p.add_argument("--chip", default=None, choices=sorted(accelerators.CHIPS),
                 help="MFU against this chip's dense datasheet peak (default: detected from the GPU's name)")
  p.add_argument("--peak_tflops", type=float, default=None, help="MFU against this dense peak (TFLOPS), any dtype")
  p.add_argument("--deadline_scale", type=float, default=1.0,
                 help="multiplies every part's deadline and the 480 s total (slower cards, a cold PTX cache)")
  p.add_argument("--work_dir", default=os.path.join(tempfile.gettempdir(), "bert_tf_accelerator_check"),
                 help="records, runs, logs and accelerator_check.jsonl go here (emptied first)")
  p.add_argument("--json", default=None, help="the JSON lines file (default <work_dir>/accelerator_check.jsonl)")
  p.add_argument("--batch_size", type=int, default=None, help="throughput: global batch (default 64; dry 4)")
  p.add_argument("--logical_gpu_memory_mb", type=int, default=8192,
                 help="two_vs_one: memory of each of the 2 logical GPUs")
  p.add_argument("--jobs", type=int, default=1,
                 help="parts run at once after environment; > 1 only with --dry_run on CPUs (parts sharing a GPU "
                      "would slow each other)")
  p.add_argument("--finetune_dtype", default="mixed_bfloat16", choices=accelerators.DTYPES)
  p.add_argument("--finetune_jit_compile", default=True, action=argparse.BooleanOptionalAction)
  # Set by the parent for a part's own process.
  p.add_argument("--part", default=None, help=argparse.SUPPRESS)
  p.add_argument("--result_file", default=None, help=argparse.SUPPRESS)
  p.add_argument("--part_deadline_s", type=float, default=None, help=argparse.SUPPRESS)
  args = p.parse_args(argv)
  names = [name for name, _, _ in PARTS]
  args.only = [n for n in args.only.split(",") if n] or names
  unknown = [n for n in args.only if n not in names]
  if unknown:
    p.error(f"--only: unknown part(s) {unknown}; choose among {names}")
  if args.chip and args.peak_tflops is not None:
    p.error("--chip and --peak_tflops both give the peak; pass one")
  if args.peak_tflops is not None and args.peak_tflops <= 0:
    p.error(f"--peak_tflops={args.peak_tflops} must be > 0")
  if args.deadline_scale <= 0:
    p.error(f"--deadline_scale={args.deadline_scale} must be > 0")
  if args.jobs < 1 or (args.jobs > 1 and not args.dry_run):
    p.error(f"--jobs={args.jobs}: 1, or more with --dry_run only (timed parts must have the GPU to themselves)")
  if args.batch_size is not None and args.batch_size < 1:
    p.error(f"--batch_size={args.batch_size} must be >= 1")
  return args


# ----------------------------------------------------------------------------------------------------------
# Sizes


def sizes(dry_run: bool) -> dict:
  """Model and run sizes of each part: full (one H100) or toy (--dry_run)."""
  if dry_run:
    return {
        "throughput": dict(layers=1, hidden=32, heads=2, inter=64, vocab=512, seq=16, predictions=3, batch=4,
                           warmup=1, blocks=1, steps=2),
        "two_vs_one": dict(layers=1, hidden=16, heads=2, inter=32, vocab=99, seq=13, predictions=3, batch=8,
                           steps=3, learning_rate=1e-2, records=24, dropout=0.0),
        "finetune": dict(train=320, dev=100, epochs=20, batch=32, learning_rate=1e-3),
        "matmul": dict(n=128, seconds=0.2),
    }
  return {
      "throughput": dict(preset="base", vocab=30522, seq=128, predictions=20, batch=64, warmup=2, blocks=3,
                         steps=10),
      "two_vs_one": dict(preset="mini", vocab=30522, seq=128, predictions=20, batch=32, steps=6,
                         learning_rate=1e-3, records=256, dropout=0.0),
      "finetune": dict(train=640, dev=200, epochs=10, batch=32, learning_rate=1e-3),
      "matmul": dict(n=8192, seconds=1.0),
  }


def deadlines(args) -> list[tuple[str, float, bool]]:
  """The parts to run with their deadlines (seconds) and whether each must pass."""
  return [(name, (DRY_DEADLINE if args.dry_run else seconds) * args.deadline_scale, must)
          for name, seconds, must in PARTS if name in args.only]


def bert_config(s: dict):
  """The BertConfig of a sizes() entry: a preset, or explicit toy dimensions."""
  from bert_tf.config import BertConfig

  # Dropout draws differ between 1 and 2 replicas (each has its own stream): two_vs_one turns it off.
  dropout = {} if "dropout" not in s else dict(hidden_dropout_prob=s["dropout"],
                                               attention_probs_dropout_prob=s["dropout"])
  if "preset" in s:
    return BertConfig.from_preset(s["preset"], vocab_size=s["vocab"], **dropout)
  return BertConfig.from_preset("tiny", vocab_size=s["vocab"], num_hidden_layers=s["layers"],
                                hidden_size=s["hidden"], num_attention_heads=s["heads"],
                                intermediate_size=s["inter"], max_position_embeddings=max(32, s["seq"]), **dropout)


# ----------------------------------------------------------------------------------------------------------
# The parent: one process per part, each with its deadline, one JSON line each


def run_part(name: str, command: list[str], deadline: float, result_file: str | None, log_path: str,
             env: dict | None = None, finish: Callable[[dict], dict] | None = None) -> dict:
  """Runs `command` in a new session with stdout and stderr to `log_path`; kills its process group at
  `deadline` seconds. Returns the part's line: {"part", "ok", ...figures from `result_file` (the part's own
  record, possibly partial) and from `finish` (called on them after the process ends)..., "seconds",
  "deadline_s"}. ok is the part's own verdict and false on a crash or a deadline passed."""
  start = time.monotonic()
  error = None
  with open(log_path, "w") as log:
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
      code = proc.wait(timeout=deadline)
    except subprocess.TimeoutExpired:
      _kill_group(proc)
      code = None
      error = f"deadline of {deadline:.0f} s passed; killed"
  figures = {}
  if result_file and os.path.exists(result_file):
    try:
      with open(result_file) as f:
        figures = json.load(f)
    except (OSError, ValueError) as e:  # a part killed mid-write leaves the previous whole file (os.replace)
      figures = {"result_file_error": str(e)}
  ok = bool(figures.pop("ok", code == 0 and not result_file)) and code == 0
  if code not in (0, None) and error is None:
    error = f"exited with {code}: {_tail(log_path)}"
  if finish is not None and code == 0:
    try:
      extra = finish(figures)
      ok = bool(extra.pop("ok", ok))
      figures.update(extra)
    except Exception as e:  # pylint: disable=broad-except
      ok, error = False, f"{type(e).__name__}: {e}"
  if figures.get("error") and error is None:
    error = figures.pop("error")
  figures.pop("error", None)
  line = {"part": name, "ok": ok, **figures}
  if error:
    line["error"] = error
    line["log"] = log_path
  line["seconds"] = round(time.monotonic() - start, 1)
  line["deadline_s"] = round(deadline, 1)
  return line


def _kill_group(proc: subprocess.Popen) -> None:
  """SIGTERM the part's process group, then SIGKILL what is left after 5 s."""
  for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
    try:
      os.killpg(proc.pid, sig)
    except ProcessLookupError:
      return
    try:
      proc.wait(timeout=wait)
      return
    except subprocess.TimeoutExpired:
      continue


def _tail(path: str, chars: int = 400) -> str:
  """The last non-empty line of a log that looks like an error, else its last characters, on one line."""
  try:
    with open(path, errors="replace") as f:
      text = f.read()
  except OSError:
    return ""
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  for line in reversed(lines):
    if line.startswith(("error:", "Traceback")) or "Error" in line.split(":", 1)[0]:
      return line[-chars:]
  return " | ".join(lines[-3:])[-chars:]


def child_argv(args) -> list[str]:
  """The flags a part's own process needs, from the parsed ones."""
  argv = [f"--work_dir={os.path.abspath(args.work_dir)}", f"--logical_gpu_memory_mb={args.logical_gpu_memory_mb}"]
  if args.dry_run:
    argv.append("--dry_run")
  for name in ("chip", "peak_tflops", "batch_size"):
    if getattr(args, name) is not None:
      argv.append(f"--{name}={getattr(args, name)}")
  return argv


def child_env() -> dict:
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(p for p in (REPO, env.get("PYTHONPATH")) if p)
  # The driver's cache of kernels compiled from PTX (H100/H200: TensorFlow 2.20 has no sm_90 code) must hold
  # TensorFlow's kernels, or every process compiles them again (docs/pretraining.md).
  env.setdefault("CUDA_CACHE_MAXSIZE", "4294967296")
  return env


def main(argv: Sequence[str] | None = None) -> int:
  argv = list(sys.argv[1:] if argv is None else argv)
  args = parse_args(argv)
  if args.part:
    return child_main(args)
  work_dir = os.path.abspath(args.work_dir)
  shutil.rmtree(work_dir, ignore_errors=True)
  os.makedirs(work_dir)
  json_path = args.json or os.path.join(work_dir, "accelerator_check.jsonl")
  total = (math.inf if args.dry_run else TOTAL_SECONDS) * args.deadline_scale
  started = time.monotonic()
  lines, failed = [], []
  no_gpu = []  # the environment part's reason, when it found no GPU (and this is no dry run)
  env = child_env()
  lock = threading.Lock()
  must_pass = {name: must for name, _, must in PARTS}
  with open(json_path, "w") as out:

    def emit(line: dict) -> None:
      with lock:
        lines.append(line)
        if must_pass.get(line["part"]) and not line["ok"]:
          failed.append(line["part"])
        text = json.dumps(line, sort_keys=False)
        print(text, flush=True)
        out.write(text + "\n")
        out.flush()
        state = "ok" if line["ok"] else "FAILED"
        print(f"[accelerator_check] {line['part']}: {state} in {line.get('seconds', 0)} s"
              + (f" ({line['error'][:200]})" if line.get("error") else ""), file=sys.stderr, flush=True)

    def one(name: str, deadline: float) -> None:
      left = total - (time.monotonic() - started)
      if no_gpu:
        line = {"part": name, "ok": False, "skipped": f"no GPU: {no_gpu[0]}", "seconds": 0.0, "deadline_s": deadline}
      elif left < min(deadline, 10.0):
        line = {"part": name, "ok": False, "skipped": f"the {total:.0f} s total is spent", "seconds": 0.0,
                "deadline_s": deadline}
      else:
        line = launch(args, name, min(deadline, left), work_dir, env)
        if name == "environment" and not args.dry_run and line.get("gpus") == []:
          no_gpu.append(line.get("gpu_unavailable_reason") or "TensorFlow sees no GPU")
      emit(line)

    planned = deadlines(args)
    # environment first and alone: without a GPU the other parts are not started.
    for name, deadline, _ in planned[:1] if planned and planned[0][0] == "environment" else []:
      one(name, deadline)
    rest = [(name, deadline) for name, deadline, _ in planned if name != "environment"]
    if args.jobs == 1:
      for name, deadline in rest:
        one(name, deadline)
    else:
      with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for future in [pool.submit(one, name, deadline) for name, deadline in rest]:
          future.result()
    emit({"part": "summary", "ok": not failed, "failed": failed, "dry_run": args.dry_run,
          "parts": [line["part"] for line in lines], "json": json_path,
          "seconds": round(time.monotonic() - started, 1),
          "budget_s": None if math.isinf(total) else round(total, 1)})
  return 1 if failed else 0


def launch(args, name: str, deadline: float, work_dir: str, env: dict) -> dict:
  """Runs one part as its own process; returns its line."""
  part_dir = os.path.join(work_dir, name)
  os.makedirs(part_dir)
  log_path = os.path.join(work_dir, f"{name}.log")
  if name == "finetune":
    return run_finetune(args, part_dir, deadline, log_path, env)
  result_file = os.path.join(part_dir, "result.json")
  command = [sys.executable, os.path.abspath(__file__), *child_argv(args), f"--part={name}",
             f"--result_file={result_file}", f"--part_deadline_s={deadline}"]
  return run_part(name, command, deadline, result_file, log_path, env)


# ----------------------------------------------------------------------------------------------------------
# A part's own process


class Recorder:
  """The part's figures as a JSON file, rewritten whole (os.replace) after every update, so that the parent
  reads what was measured up to the moment a deadline killed the part."""

  def __init__(self, path: str):
    self.path, self.values = path, {}
    self.save()

  def update(self, **values) -> None:
    self.values.update(values)
    self.save()

  def save(self) -> None:
    tmp = f"{self.path}.tmp"
    with open(tmp, "w") as f:
      json.dump(self.values, f, default=str)
    os.replace(tmp, self.path)


def child_main(args) -> int:
  rec = Recorder(args.result_file)
  args.started = time.monotonic()
  functions = {"environment": part_environment, "two_vs_one": part_two_vs_one}
  try:
    if args.part in THROUGHPUT_DTYPES:
      part_throughput(args, rec, THROUGHPUT_DTYPES[args.part])
    else:
      functions[args.part](args, rec)
  except Exception as e:  # pylint: disable=broad-except
    traceback.print_exc()
    rec.update(ok=False, error=f"{type(e).__name__}: {str(e)[:500]}")
  return 0


def _gpu_name(tf) -> str | None:
  gpus = tf.config.list_physical_devices("GPU")
  if not gpus:
    return None
  return tf.config.experimental.get_device_details(gpus[0]).get("device_name")


def part_environment(args, rec: Recorder) -> None:
  """Versions, devices, the first op's and matmul's seconds, matmul TFLOPS by dtype against the chip's peak."""
  import platform

  start = time.perf_counter()
  import tensorflow as tf

  rec.update(import_seconds=round(time.perf_counter() - start, 1), tensorflow=tf.__version__,
             python=platform.python_version())
  import keras

  from bert_tf.training import distribute

  try:
    import keras_hub
    hub = keras_hub.__version__
  except ImportError as e:
    hub = f"not importable: {e}"
  build = tf.sysconfig.get_build_info()
  gpus = tf.config.list_physical_devices("GPU")
  details = [tf.config.experimental.get_device_details(g) for g in gpus]
  rec.update(keras=keras.__version__, keras_hub=hub, built_with_cuda=tf.test.is_built_with_cuda(),
             cuda_version=build.get("cuda_version"), cudnn_version=build.get("cudnn_version"),
             cuda_compute_capabilities=build.get("cuda_compute_capabilities"),
             gpus=[{"name": d.get("device_name"),
                    "compute_capability": ".".join(str(x) for x in d.get("compute_capability", ()))}
                   for d in details],
             nvidia_smi=_nvidia_smi(), nvidia_gpus_on_machine=distribute.nvidia_gpus_on_machine(),
             env={k: os.environ.get(k) for k in ("CUDA_VISIBLE_DEVICES", "CUDA_CACHE_MAXSIZE", "CUDA_CACHE_PATH",
                                                  "TF_XLA_FLAGS", "XLA_FLAGS", "TF_GPU_ALLOCATOR")},
             tensor_float_32=tf.config.experimental.tensor_float_32_execution_enabled())
  if not gpus:
    rec.update(gpu_unavailable_reason=distribute.gpu_unavailable_reason())
  device = "/gpu:0" if gpus else "/cpu:0"
  # The first op starts the CUDA context and loads (on sm_90, PTX-compiles) kernels: the cold-start cost.
  with tf.device(device):
    t = time.perf_counter()
    x = tf.random.normal([1024, 1024], seed=1)
    float(x[0, 0])
    first_op = time.perf_counter() - t
    t = time.perf_counter()
    float(tf.linalg.matmul(x, x)[0, 0])
    first_matmul = time.perf_counter() - t
    t = time.perf_counter()
    float(tf.linalg.matmul(x, x)[0, 0])
    second_matmul = time.perf_counter() - t
  rec.update(device=device, first_op_seconds=round(first_op, 3), first_matmul_seconds=round(first_matmul, 3),
             second_matmul_seconds=round(second_matmul, 4))
  if not gpus and not args.dry_run:  # the check stops here; CPU matmul rates would only cost time
    rec.update(ok=False)
    return
  import bench_pretraining_throughput as bpt

  m = sizes(args.dry_run)["matmul"]
  rates, vs_peak = {}, {}
  chip = args.chip or accelerators.chip_from_device_name(_gpu_name(tf) or "")
  with tf.device(device):
    for dtype_policy, dtype in (("float32", tf.float32), ("mixed_bfloat16", tf.bfloat16),
                                ("mixed_float16", tf.float16)):
      rate = bpt.matmul_rate(m["n"], m["seconds"], block_seconds=m["seconds"] / 4, dtype=dtype) / 1000.0
      rates[dtype.name] = round(rate, 3)
      peak, _ = accelerators.resolve_peak(args.chip, args.peak_tflops, _gpu_name(tf), dtype_policy,
                                          tf.config.experimental.tensor_float_32_execution_enabled())
      vs_peak[dtype.name] = round(rate / peak, 3) if peak else None
      rec.update(matmul_size=m["n"], matmul_tflops=rates, matmul_vs_dense_peak=vs_peak, chip=chip)
  rec.update(ok=bool(gpus) or args.dry_run)


def _nvidia_smi() -> str | None:
  exe = shutil.which("nvidia-smi")
  if not exe:
    return None
  try:
    out = subprocess.run([exe, "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                          "--format=csv,noheader"], capture_output=True, text=True, timeout=15)
    return out.stdout.strip() or out.stderr.strip()
  except (OSError, subprocess.SubprocessError) as e:
    return f"nvidia-smi failed: {e}"


def part_throughput(args, rec: Recorder, dtype: str) -> None:
  """Ours and keras-hub, plain and XLA, BERT-base (toy in a dry run) pretraining steps in `dtype`."""
  import numpy as np
  import tensorflow as tf

  import bench_pretraining_throughput as bpt

  s = dict(sizes(args.dry_run)["throughput"])
  if args.batch_size:
    s["batch"] = args.batch_size
  config = bert_config(s)
  gpus = tf.config.list_physical_devices("GPU")
  device = "/gpu:0" if gpus else "/cpu:0"
  tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
  peak, peak_source = accelerators.resolve_peak(args.chip, args.peak_tflops, _gpu_name(tf), dtype, tf32)
  flops = bpt.training_flops(config.num_hidden_layers, config.hidden_size, config.intermediate_size,
                             config.vocab_size, s["batch"], s["seq"], s["predictions"])
  batch = bpt.synthetic_batch(s["batch"], s["seq"], s["predictions"], config.vocab_size, seed=12345,
                              min_length=s["seq"])  # full-length sequences: every FLOP counted is computed
  with tf.device(device):
    features = {k: tf.identity(tf.constant(v)) for k, v in batch.items()}
  rec.update(dtype=dtype, device=device, gpu=_gpu_name(tf), tensor_float_32=tf32,
             model=f"L{config.num_hidden_layers}/H{config.hidden_size}/A{config.num_attention_heads}",
             vocab_size=config.vocab_size, batch_size=s["batch"], seq_length=s["seq"],
             max_predictions_per_seq=s["predictions"],
             training_gflop_per_sequence=round(flops["training"] / s["batch"] / 1e9, 3),
             peak_tflops=peak, peak_source=peak_source, cases=[])
  import keras

  deadline = args.part_deadline_s or math.inf
  models, cases, longest = {}, [], 0.0
  for impl, xla in (("ours", False), ("ours", True), ("keras_hub", True), ("keras_hub", False)):
    left = deadline - (time.monotonic() - args.started)
    if longest and left < 1.2 * longest:
      cases.append({"implementation": impl, "xla": xla,
                    "skipped": f"{left:.0f} s left in the part's deadline, the longest case took {longest:.0f} s"})
      rec.update(cases=cases)
      continue
    case_start = time.monotonic()
    case = {"implementation": impl, "xla": xla}
    try:
      if impl not in models:
        keras.utils.set_random_seed(12345)
        with tf.device(device):
          forward, variables = bpt.BUILDERS[impl](config, dtype)
          optimizer = bpt.make_optimizer(dtype)
          optimizer.build(variables)
        models[impl] = (forward, variables, optimizer)
        case["trainable_params"] = sum(int(np.prod(v.shape)) for v in variables)
      forward, variables, optimizer = models[impl]
      step = bpt.make_train_step(forward, variables, optimizer, xla)
      if gpus:
        tf.config.experimental.reset_memory_stats("GPU:0")
      t = time.perf_counter()
      with tf.device(device):
        loss = float(step(features).numpy())
        case["first_step_seconds"] = round(time.perf_counter() - t, 2)
        for _ in range(s["warmup"]):
          step(features)
        float(step(features).numpy())
        block_seconds = []
        for _ in range(s["blocks"]):
          t = time.perf_counter()
          for _ in range(s["steps"]):
            out = step(features)  # enqueued: the GPU runs the steps back to back
          loss = float(out.numpy())  # waits for the block's last step
          block_seconds.append((time.perf_counter() - t) / s["steps"])
      step_s = statistics.median(block_seconds)
      achieved = accelerators.mfu(flops["training"], step_s, peak)
      case.update(step_ms=round(1e3 * step_s, 3), step_ms_blocks=[round(1e3 * b, 3) for b in block_seconds],
                  sequences_per_s=round(s["batch"] / step_s, 1),
                  achieved_tflops=round(flops["training"] / step_s / 1e12, 3),
                  mfu=None if achieved is None else round(achieved, 4), final_loss=round(loss, 4),
                  finite_loss=math.isfinite(loss))
      if gpus:
        case["peak_memory_gib"] = round(tf.config.experimental.get_memory_info("GPU:0")["peak"] / 2 ** 30, 2)
      if dtype == "mixed_float16":
        case["loss_scale"] = float(optimizer.dynamic_scale.numpy())
    except Exception as e:  # pylint: disable=broad-except
      traceback.print_exc()
      case["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    case["seconds"] = round(time.monotonic() - case_start, 1)
    longest = max(longest, case["seconds"])
    cases.append(case)
    rec.update(cases=cases)
  ours = [c for c in cases if c["implementation"] == "ours"]
  best = {impl: max((c["sequences_per_s"] for c in cases if c["implementation"] == impl and "sequences_per_s" in c),
                    default=None) for impl in ("ours", "keras_hub")}
  ratio = round(best["ours"] / best["keras_hub"], 3) if best["ours"] and best["keras_hub"] else None
  best_mfu = max((c["mfu"] for c in ours if c.get("mfu") is not None), default=None)
  rec.update(cases=cases, ours_best_sequences_per_s=best["ours"], keras_hub_best_sequences_per_s=best["keras_hub"],
             ours_over_keras_hub=ratio, ours_best_mfu=best_mfu,
             ok=all(c.get("finite_loss") for c in ours) and len(ours) == 2)


def write_records(directory: str, count: int, seq: int, predictions: int, vocab: int, seed: int = 0) -> str:
  """`count` random pretraining records (varied lengths, masked positions, NSP labels) in 2 files; the glob."""
  import numpy as np

  from bert_tf.data import records

  rng = np.random.default_rng(seed)
  serializer = records.RecordSerializer(seq, predictions, vocab_size=vocab)
  os.makedirs(directory, exist_ok=True)
  for f in range(2):
    writer = records.TFRecordFileWriter(os.path.join(directory, f"records-{f}.tfrecord"))
    for _ in range(count // 2):
      n = int(rng.integers(max(6, seq // 2), seq + 1))  # tokens in [CLS] A [SEP] B [SEP]
      a = int(rng.integers(1, n - 4))
      b = n - 3 - a
      ids = [2] + list(rng.integers(5, vocab, a)) + [3] + list(rng.integers(5, vocab, b)) + [3]
      segments = [0] * (a + 2) + [1] * (b + 1)
      k = int(rng.integers(1, min(predictions, n - 3) + 1))
      positions = sorted(int(i) for i in rng.choice([i for i in range(n) if ids[i] > 4], size=k, replace=False))
      labels = [int(ids[i]) for i in positions]
      for i in positions:
        ids[i] = 4  # [MASK]
      writer.write(serializer.serialize([int(x) for x in ids], segments, positions, labels, int(rng.integers(0, 2))))
    writer.close()
  return os.path.join(directory, "records-*.tfrecord")


def part_two_vs_one(args, rec: Recorder) -> None:
  """The real pretraining loop on 1 and on 2 logical devices of one GPU (CPU in a dry run), same global batch."""
  import tensorflow as tf

  gpus = tf.config.list_physical_devices("GPU")
  # Before TensorFlow initialises its devices: only the first GPU, split in two.
  if gpus:
    tf.config.set_visible_devices(gpus[0], "GPU")
    tf.config.set_logical_device_configuration(
        gpus[0], [tf.config.LogicalDeviceConfiguration(memory_limit=args.logical_gpu_memory_mb)] * 2)
  else:
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  # TF32 rounds matmul inputs to 10 bits of mantissa: 1 and 2 replicas would differ by ~1e-3 from that alone.
  tf.config.experimental.enable_tensor_float_32_execution(False)
  from bert_tf.tasks.pretraining import run as pretraining
  from bert_tf.tasks.pretraining.config import PretrainingConfig
  from bert_tf.training import distribute, trainer

  s = sizes(args.dry_run)["two_vs_one"]
  config = bert_config(s)
  work = os.path.dirname(args.result_file)
  data = write_records(os.path.join(work, "records"), s["records"], s["seq"], s["predictions"], config.vocab_size)
  kind = "gpu" if gpus else "cpu"
  one_gpu = 1 if gpus else 0
  two_gpus = 2 if gpus else 0  # CPU: mirrored takes every logical CPU device, the two made above
  cases = [("1 replica", "one_device", one_gpu, None), ("2 replicas", "mirrored", two_gpus, None),
           ("2 replicas, hierarchical_copy", "mirrored", two_gpus, "hierarchical_copy")]
  rec.update(devices=kind, logical_devices=[d.name for d in tf.config.list_logical_devices(kind.upper())],
             model=f"L{config.num_hidden_layers}/H{config.hidden_size}/A{config.num_attention_heads}",
             global_batch_size=s["batch"], seq_length=s["seq"], steps=s["steps"], tensor_float_32=False,
             tolerance_relative=TWO_VS_ONE_TOLERANCE, runs={})
  runs = {}
  for label, strategy_name, num_gpus, alg in cases:
    captured = {}

    class Recording(trainer.Trainer):
      def train(self):
        result = super().train()
        captured["trainer"] = self
        return result

    run = {}
    start = time.monotonic()
    try:
      strategy = distribute.get_strategy(strategy_name, num_gpus, all_reduce_alg=alg)
      run["strategy"] = distribute.describe(strategy)
      pconfig = PretrainingConfig(
          input_file=data, output_dir=os.path.join(work, label.replace(" ", "_").replace(",", "")),
          bert_config=config, max_seq_length=s["seq"], max_predictions_per_seq=s["predictions"],
          train_batch_size=s["batch"], num_train_steps=s["steps"], num_warmup_steps=1,
          learning_rate=s["learning_rate"], save_checkpoints_steps=s["steps"], steps_per_loop=1, log_steps=1,
          export_encoder=False, seed=7, overwrite_output_dir=True)
      pretraining.run_pretraining(pconfig, strategy=strategy, trainer_cls=Recording)
      history = captured["trainer"].history
      # MirroredStrategy picks its default all-reduce on first use (ReductionToOneDevice between logical GPUs).
      ops = (getattr(strategy.extended, "_cross_device_ops", None)
             or getattr(strategy.extended, "_inferred_cross_device_ops", None))
      run["cross_device_ops"] = type(ops).__name__ if ops is not None else None
      run.update(replicas=strategy.num_replicas_in_sync, losses=[round(h["loss"], 6) for h in history],
                 sequences_per_s_last=round(history[-1].get("sequences_per_second", float("nan")), 1))
    except Exception as e:  # pylint: disable=broad-except
      traceback.print_exc()
      run["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    run["seconds"] = round(time.monotonic() - start, 1)
    runs[label] = run
    rec.update(runs=runs)
  base = runs["1 replica"].get("losses")
  ok = bool(base) and all(math.isfinite(x) for x in base)
  worst = 0.0
  for label, run in runs.items():
    if label == "1 replica":
      continue
    losses = run.get("losses")
    if not losses or len(losses) != len(base or []) or run.get("replicas") != 2:
      ok = False
      continue
    diff = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(losses, base))
    run["max_relative_difference"] = float(f"{diff:.3g}")
    worst = max(worst, diff)
  rec.update(runs=runs, max_relative_difference=float(f"{worst:.3g}"),
             ok=ok and worst <= TWO_VS_ONE_TOLERANCE)


# ----------------------------------------------------------------------------------------------------------
# The fine-tune part: the user's command itself


def write_finetune_task(directory: str, n_train: int, n_dev: int, seed: int = 7) -> dict:
  """A CSV task no model can solve by the majority class: label "cue" when the sentence holds one of
  CUE_WORDS (40% of sentences), else "plain"; 5-12 words from FILLER_WORDS around it. Writes train.csv,
  dev.csv, vocab.txt (the special tokens and every word) and bert_config.json (2 layers, H64, random weights
  come from run_classifier.py --bert_config_file); returns their paths and the dev majority share."""
  rng = random.Random(seed)
  os.makedirs(directory, exist_ok=True)
  paths = {}
  for split, n in (("train", n_train), ("dev", n_dev)):
    labels = ["cue"] * round(0.4 * n) + ["plain"] * (n - round(0.4 * n))
    rng.shuffle(labels)
    path = os.path.join(directory, f"{split}.csv")
    with open(path, "w", newline="") as f:
      writer = csv.writer(f)
      writer.writerow(["sentence1", "label"])
      for label in labels:
        words = [rng.choice(FILLER_WORDS) for _ in range(rng.randint(5, 12))]
        if label == "cue":
          words.insert(rng.randrange(len(words) + 1), rng.choice(CUE_WORDS))
        writer.writerow([" ".join(words), label])
    paths[split] = path
  paths["vocab"] = os.path.join(directory, "vocab.txt")
  with open(paths["vocab"], "w") as f:
    f.write("\n".join([*SPECIAL_TOKENS, *CUE_WORDS, *FILLER_WORDS]) + "\n")
  paths["bert_config"] = os.path.join(directory, "bert_config.json")
  with open(paths["bert_config"], "w") as f:
    json.dump({"vocab_size": len(SPECIAL_TOKENS) + len(CUE_WORDS) + len(FILLER_WORDS), "hidden_size": 64,
               "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 128, "hidden_act": "gelu",
               "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1, "max_position_embeddings": 32,
               "type_vocab_size": 2, "initializer_range": 0.02}, f, indent=2)
  with open(paths["dev"]) as f:
    dev_labels = [row["label"] for row in csv.DictReader(f)]
  paths["majority_share"] = max(dev_labels.count(x) for x in set(dev_labels)) / len(dev_labels)
  return paths


def run_finetune(args, part_dir: str, deadline: float, log_path: str, env: dict) -> dict:
  s = sizes(args.dry_run)["finetune"]
  task = write_finetune_task(os.path.join(part_dir, "data"), s["train"], s["dev"])
  out = os.path.join(part_dir, "run")
  command = [sys.executable, os.path.join(REPO, "scripts", "run_classifier.py"),
             f"--train_file={task['train']}", f"--validation_file={task['dev']}", f"--vocab_file={task['vocab']}",
             f"--bert_config_file={task['bert_config']}", "--do_train", "--do_eval", f"--output_dir={out}",
             "--max_seq_length=16", f"--train_batch_size={s['batch']}", f"--learning_rate={s['learning_rate']}",
             f"--num_train_epochs={s['epochs']}", f"--dtype={args.finetune_dtype}",
             f"--{'' if args.finetune_jit_compile else 'no'}jit_compile", "--seed=7", "--log_steps=10",
             "--steps_per_loop=10"]

  def finish(_):
    with open(os.path.join(out, "eval_results.json")) as f:
      results = json.load(f)
    accuracy = results["accuracy"]
    need = task["majority_share"] + FINETUNE_MARGIN
    return {"ok": accuracy >= need, "dev_accuracy": round(accuracy, 4),
            "majority_share": round(task["majority_share"], 4), "needed": round(need, 4),
            "dtype": args.finetune_dtype, "jit_compile": args.finetune_jit_compile,
            "train_examples_per_second": results.get("train_examples_per_second"),
            "command": "scripts/run_classifier.py " + " ".join(command[2:])}

  return run_part("finetune", command, deadline, None, log_path, env, finish)


if __name__ == "__main__":
  sys.exit(main())
