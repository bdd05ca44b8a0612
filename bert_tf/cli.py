"""Shared plumbing of the `scripts/`: logging set-up and turning user errors into a message and exit code 1."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Callable

from bert_tf.errors import UserError, first_line, is_disk_full

# Exceptions that mean "the input or the flags are wrong": shown as one line, without a traceback.
USER_ERRORS = (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError, ValueError,
               UnicodeDecodeError, UserError)
INTERRUPTED = 130  # 128 + SIGINT


class _UserFacingLogs(logging.Filter):
  """Drops the INFO lines TensorFlow and Keras log through absl for their own developers ("Sharding callback
  duration", "Writing fingerprint", "contains input name(s) ... with unsupported characters"); keeps every
  line of bert_tf and every warning."""

  _ours = os.path.dirname(os.path.abspath(__file__))

  def filter(self, record):
    return record.levelno >= logging.WARNING or record.pathname.startswith(self._ours) or \
        "/scripts/" in record.pathname or "/bench/" in record.pathname or \
        "/bert_tf_scripts/" in record.pathname  # the scripts, installed (bert_tf/console.py)


class _ShortFormatter(logging.Formatter):
  """`21:10:35 step 2/8 ...`; warnings and errors say so. absl's default prefix (level, date, thread id,
  file:line) is for developers."""

  def format(self, record):
    level = "" if record.levelno < logging.WARNING else record.levelname.lower() + ": "
    return f"{self.formatTime(record, '%H:%M:%S')} {level}{record.getMessage()}"


def quiet_logs() -> None:
  """Short log lines, without TensorFlow's internal INFO lines (absl's handler, called once flags parsed)."""
  from absl import logging as absl_logging

  handler = absl_logging.get_absl_handler()
  handler.setFormatter(_ShortFormatter())
  if not any(isinstance(f, _UserFacingLogs) for f in handler.filters):
    handler.addFilter(_UserFacingLogs())
  logging.getLogger("tensorflow").setLevel(logging.ERROR)


def quiet_tensorflow() -> None:
  """Keeps TensorFlow's C++ start-up chatter out of the progress display."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def run(main: Callable[[list[str]], None]) -> None:
  """`absl.app.run(main)`, with user errors reported as `error: ...` and exit status 1, and SIGTERM turned into
  an exception so that `finally` blocks remove temporary outputs."""
  from absl import app

  quiet_tensorflow()

  def on_sigterm(signum, frame):
    raise SystemExit(128 + signum)

  signal.signal(signal.SIGTERM, on_sigterm)

  def wrapped(argv):
    quiet_logs()
    try:
      main(argv)
    except USER_ERRORS as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(1)
    except KeyboardInterrupt:
      # Outside a training loop (start-up, evaluation, export); a loop saves and stops by itself.
      print("\ninterrupted (Ctrl-C); outputs are written whole or not at all: rerun the same command to resume",
            file=sys.stderr)
      sys.exit(INTERRUPTED)
    except Exception as e:  # pylint: disable=broad-except
      if not is_disk_full(e):
        raise
      print(f"error: out of disk space (or over a file-size limit): {first_line(e)}; free space and rerun the same "
            "command", file=sys.stderr)
      sys.exit(1)

  app.run(wrapped)


# -- Flags every training script shares -------------------------------------------------------------------------
# Spelled out here rather than imported from bert_tf.training, so that `--help` and flag errors come before
# TensorFlow loads; tests/test_cli.py checks they equal the library's lists.
STRATEGIES = ("one_device", "mirrored", "multi_worker_mirrored", "tpu")
OPTIMIZERS = ("adamw", "adamw_bias_corrected", "lamb")
DTYPES = ("float32", "mixed_float16", "mixed_bfloat16")


def define_training_flags(steps_per_loop: int, log_steps: int, flag_values=None) -> None:
  """Defines google-research's loop and TPU flags and the strategy, precision, XLA and accumulation flags of
  every training script (pretraining and fine-tuning), with the given loop defaults, in `flag_values`
  (default: absl's global FLAGS). They are key flags of the calling script, so its `--help` lists them."""
  from absl import flags

  flag_values = flags.FLAGS if flag_values is None else flag_values
  before = set(flag_values)
  flags = _BoundFlags(flags, flag_values)

  # google-research/bert's.
  flags.DEFINE_integer("save_checkpoints_steps", 1000, "Checkpoint every this many updates.")
  flags.DEFINE_integer("iterations_per_loop", None, "google-research's name for --steps_per_loop.")
  flags.DEFINE_bool("use_tpu", False, "Same as --distribution_strategy=tpu.")
  flags.DEFINE_string("tpu_name", None, "'local' on a Cloud TPU VM, else the TPU's name or grpc:// address.")
  flags.DEFINE_string("tpu_zone", None, "GCE zone of the TPU (when --tpu_name is a name).")
  flags.DEFINE_string("gcp_project", None, "GCP project of the TPU (when --tpu_name is a name).")
  # New.
  flags.DEFINE_enum("distribution_strategy", "mirrored", list(STRATEGIES),
                    "How to distribute: see docs/pretraining.md.")
  flags.DEFINE_integer("num_gpus", None, "GPUs to use on this machine (default: every GPU TensorFlow sees, else "
                       "the CPU; 0: the CPU). Asking for GPUs TensorFlow cannot see is refused with the reason.")
  flags.DEFINE_enum("all_reduce_alg", None, ["nccl", "hierarchical_copy", "ring"], "mirrored: how replicas sum "
                    "gradients (default: MirroredStrategy's, NCCL between GPUs).")
  flags.DEFINE_enum("collective_implementation", "auto", ["auto", "nccl", "ring"], "multi_worker_mirrored: the "
                    "all-reduce between workers (auto: NCCL when the workers have GPUs, else ring over gRPC).")
  flags.DEFINE_enum("optimizer", "adamw", list(OPTIMIZERS),
                    "AdamW as google-research's (no bias correction), AdamW with Adam's bias correction (as "
                    "torch.optim.AdamW and the TF Model Garden), or LAMB.")
  flags.DEFINE_enum("dtype", "float32", list(DTYPES), "Compute precision.")
  flags.DEFINE_bool("jit_compile", False, "XLA-compile each replica's whole training step where TensorFlow allows "
                    "(docs/pretraining.md, XLA and accelerators).")
  flags.DEFINE_integer("gradient_accumulation_steps", 1, "Micro-batches per update (train_batch_size / this "
                       "examples each, split across replicas).")
  flags.DEFINE_integer("steps_per_loop", steps_per_loop, "Updates per host call (checkpoints and logs fall on "
                       "loop ends).")
  flags.DEFINE_integer("log_steps", log_steps, "A progress line and TensorBoard summaries every this many updates.")
  flags.DEFINE_bool("deterministic", False, "Enable TensorFlow op determinism (slower; same seed, same weights, "
                    "also across a kill and resume).")
  flags.DEFINE_bool("overwrite_output_dir", False, "Start the run over: remove what an earlier run wrote in "
                    "--output_dir (checkpoints, model, results; other files stay). Without it a rerun resumes, and "
                    "one with other settings (data, labels, learning rate, ...: <output_dir>/run.json) is refused.")
  _declare_key_flags_of_caller(flag_values, set(flag_values) - before)


def _declare_key_flags_of_caller(flag_values, names) -> None:
  """Makes `names` key flags of the module that called our caller: absl's `--help` lists the main module's key
  flags, and flags defined here belong to bert_tf.cli. (`flags.declare_key_flag` would declare them for this
  module; absl names the main module after sys.argv[0], as below.)"""
  name = sys._getframe(2).f_globals.get("__name__", "")  # pylint: disable=protected-access
  module = sys.argv[0] if name == "__main__" else name
  for flag in names:
    flag_values.register_key_flag_for_module(module, flag_values[flag])


def define_evaluation_flags(flag_values=None) -> None:
  """Defines the flags of evaluation while training, shared by every fine-tuning script (the fields of the same
  names in bert_tf.training.finetuning.FinetuningConfig), as key flags of the calling script (its `--help`)."""
  from absl import flags

  flag_values = flags.FLAGS if flag_values is None else flag_values
  before = set(flag_values)
  flags = _BoundFlags(flags, flag_values)
  flags.DEFINE_integer("eval_every_steps", 0, "Evaluate on the dev split (--do_eval's) every this many updates and "
                       "at the end, with the task's metric; logged and in TensorBoard under eval/ (0: off).")
  flags.DEFINE_bool("keep_best_checkpoint", False, "Save and export the evaluated weights with the best "
                    "--metric_for_best, not the last ones (eval_results say which step).")
  flags.DEFINE_string("metric_for_best", None, "The metric of eval_results that picks the best evaluation (default: "
                      "the task's headline: accuracy, F1, Matthews or Pearson correlation, entity F1); the highest "
                      "wins, the lowest for a loss.")
  flags.DEFINE_integer("early_stopping_patience", 0, "Stop training after this many evaluations without a "
                       "better --metric_for_best (0: never).")
  _declare_key_flags_of_caller(flag_values, set(flag_values) - before)


EVALUATION_FLAGS = ("eval_every_steps", "keep_best_checkpoint", "metric_for_best", "early_stopping_patience")


def evaluation_flag_values(flag_values=None) -> dict:
  """The values of `define_evaluation_flags`' flags, as the config fields of the same names."""
  from absl import flags

  values = flags.FLAGS if flag_values is None else flag_values
  return {name: values[name].value for name in EVALUATION_FLAGS}


def start_training() -> None:
  """What every training script does once its flags are checked: op determinism if --deterministic, INFO logs."""
  from absl import flags
  from absl import logging as absl_logging

  if flags.FLAGS.deterministic:
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
  absl_logging.set_verbosity(absl_logging.INFO)


def run_finetuning(run: Callable[[], dict], output_dir: str) -> dict:
  """A fine-tuning script's run: `start_training`, then `run()` holding --output_dir's lock (the chief's; the
  workers of a multi-worker job share the directory); exits 130 / 143 when Ctrl-C / SIGTERM stopped it after
  saving. Returns run()'s summary."""
  from bert_tf.training import run_lock

  start_training()
  with run_lock.RunLock(output_dir, enabled=run_lock.is_chief_from_env()):
    summary = run()
  if summary.get("interrupted"):
    sys.exit(summary.get("exit_code", 143))  # saved: rerunning the same command resumes
  return summary


def training_flag_values(flag_values=None) -> dict:
  """The values of `define_training_flags`' flags as the config fields of the same names, with google-research's
  aliases resolved (--use_tpu, --iterations_per_loop); raises ValueError when an alias contradicts a flag."""
  from absl import flags

  FLAGS = flags.FLAGS if flag_values is None else flag_values  # pylint: disable=invalid-name
  strategy = FLAGS.distribution_strategy
  if FLAGS.use_tpu:
    if FLAGS["distribution_strategy"].present and strategy != "tpu":
      raise ValueError(f"--use_tpu contradicts --distribution_strategy={strategy}; pass one of them")
    strategy = "tpu"
  steps_per_loop = FLAGS.steps_per_loop
  if FLAGS.iterations_per_loop is not None:
    if FLAGS["steps_per_loop"].present:
      raise ValueError("--iterations_per_loop and --steps_per_loop are the same setting; pass one of them")
    steps_per_loop = FLAGS.iterations_per_loop
  return dict(distribution_strategy=strategy, steps_per_loop=steps_per_loop,
              **{name: FLAGS[name].value for name in (
                  "save_checkpoints_steps", "log_steps", "num_gpus", "all_reduce_alg", "collective_implementation",
                  "tpu_name", "tpu_zone", "gcp_project",
                  "optimizer", "dtype", "jit_compile", "gradient_accumulation_steps", "overwrite_output_dir")})


class _BoundFlags:
  """absl's DEFINE_* functions with `flag_values` bound (tests define the flags in a FlagValues of their own)."""

  def __init__(self, flags_module, flag_values):
    self._flags, self._flag_values = flags_module, flag_values

  def __getattr__(self, name):
    define = getattr(self._flags, name)
    return lambda *args, **kwargs: define(*args, flag_values=self._flag_values, **kwargs)
