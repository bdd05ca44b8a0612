"""Shared plumbing of the `scripts/`: logging set-up, user errors as a message and exit code 1, and the flags and
`main` every training, fine-tuning and export script shares (each script defines only its own flags)."""

from __future__ import annotations

import json
import logging
import os
import signal
import sys
from typing import Any, Callable, Mapping

from bert_tf.errors import UserError, access_message, first_line, is_disk_full, unreachable_message
from bert_tf.export import limits
from bert_tf.training.choices import ALL_REDUCE_ALGS, COLLECTIVE_IMPLEMENTATIONS, DTYPES, OPTIMIZERS, STRATEGIES

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
      print(f"error: {access_message(e) or e}", file=sys.stderr)
      sys.exit(1)
    except KeyboardInterrupt:
      # Outside a training loop (start-up, evaluation, export); a loop saves and stops by itself.
      print("\ninterrupted (Ctrl-C); outputs are written whole or not at all: rerun the same command to resume",
            file=sys.stderr)
      sys.exit(INTERRUPTED)
    except Exception as e:  # pylint: disable=broad-except
      line = system_error_line(e, sys.argv[1:])
      if line is None:
        raise
      print(f"error: {line}", file=sys.stderr)
      sys.exit(1)
    finally:
      # Python's shutdown, tearing down TensorFlow's millions of objects, otherwise runs the cyclic garbage
      # collector over all of them several times: about 0.5 s of CPU at the end of every command that imported
      # TensorFlow. Every output is written, flushed and closed before this point (files by `with`, summary
      # writers flushed by the trainer), and garbage that exists now is still finalized by the collection.
      set_live_objects_aside()

  app.run(wrapped)


def system_error_line(error: BaseException, argv: list[str]) -> str | None:
  """The one line (after "error: ") for an error of the system under a script rather than of the script: a full
  disk, a path the system refuses (permissions, a read-only file system), a gs:// path that cannot be reached
  (naming the flag of `argv` that gave it); None for any other error, a bug, which keeps its traceback. The scripts
  check what they can before the work (`fileio.check_writable`); this is for what only the work meets."""
  if is_disk_full(error):
    return (f"out of disk space (or over a file-size limit): {first_line(error)}; free space and rerun the same "
            "command")
  return access_message(error) or unreachable_message(error, argv)


def set_live_objects_aside() -> None:
  """Collects the garbage once, then freezes what is left (gc.freeze): the live objects, which full collections no
  longer walk. They are still freed as usual, by reference counts; only a reference cycle among them that becomes
  garbage later is left uncollected (to the operating system, at exit). For objects that live as long as the
  process: TensorFlow's and Keras's heap once a command has imported them, and everything at its end."""
  import gc

  gc.collect()
  gc.freeze()


# -- Flags every training script shares -------------------------------------------------------------------------
# The options of bert_tf.training.run_options.RunOptions; their choices come from bert_tf.training.choices, which
# imports no TensorFlow, so that `--help` and flag errors come before TensorFlow loads.


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
  flags.DEFINE_enum("all_reduce_alg", None, list(ALL_REDUCE_ALGS),
                    "mirrored: how replicas sum gradients (default: MirroredStrategy's, NCCL between GPUs).")
  flags.DEFINE_enum("collective_implementation", "auto", list(COLLECTIVE_IMPLEMENTATIONS),
                    "multi_worker_mirrored: the all-reduce between workers (auto: NCCL when the workers have GPUs, "
                    "else ring over gRPC).")
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


def define_masking_flags(when: str | None = None, flag_values=None) -> None:
  """Defines --mask_token_rate and --random_token_rate, how the chosen masked-LM positions are filled (the paper's
  Table 8; google-research's 0.8 and 0.1), for create_pretraining_data.py (the masks it writes) and
  run_pretraining.py (`when` "--dynamic_masking": the masks it makes), as key flags of the calling script."""
  from absl import flags

  flag_values = flags.FLAGS if flag_values is None else flag_values
  before = set(flag_values)
  flags = _BoundFlags(flags, flag_values)
  share = f"With {when}: share" if when else "Share"
  flags.DEFINE_float("mask_token_rate", 0.8, f"{share} of the masked-LM positions replaced by [MASK] (the paper's "
                     "Table 8; google-research's 0.8).")
  flags.DEFINE_float("random_token_rate", 0.1, f"{share} replaced by a random token (google-research's 0.1); the "
                     "rest keep their token. The two add up to at most 1; the defaults are google-research's.")
  _declare_key_flags_of_caller(flag_values, set(flag_values) - before)


def _declare_key_flags_of_caller(flag_values, names) -> None:
  """Makes `names` key flags of the module that called our caller: absl's `--help` lists the main module's key
  flags, and flags defined here belong to bert_tf.cli. (`flags.declare_key_flag` would declare them for this
  module; absl names the main module after sys.argv[0], as below.) Functions of this module that call each other
  declare for their own caller: the caller of the outermost one is the one outside this module."""
  depth = 2
  while sys._getframe(depth).f_globals.get("__name__") == __name__:  # pylint: disable=protected-access
    depth += 1
  name = sys._getframe(depth).f_globals.get("__name__", "")  # pylint: disable=protected-access
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


# -- Flags every fine-tuning script shares ------------------------------------------------------------------------
# google-research/bert's run_classifier.py / run_squad.py names and defaults, the same for every task but those a
# task passes to `define_finetuning_flags` (its max_seq_length, batch, learning rate, model name).
FINETUNING_TASK_FLAGS = ("bert_config_file", "do_lower_case", "do_train", "do_eval", "do_predict", "max_seq_length",
                         "features_dir", "dynamic_padding", "max_train_examples", "export_dir", "model_name",
                         "max_request_chars")
MAX_REQUEST_CHARS_HELP = ("The export refuses a request whose text field holds more characters than this, the "
                          "batch's texts together (memory grows with it: docs/serving.md).")


def define_finetuning_flags(task: str, *, unit: str, do_train: str, do_eval: str, do_predict: str,
                            max_seq_length: int = 128, train_batch_size: int = 32, learning_rate: float = 5e-5,
                            model_name: str | None = None, eval_batch_size: bool = True,
                            max_train_examples: bool = False, helps: Mapping[str, str] | None = None,
                            flag_values=None) -> None:
  """Defines the flags every fine-tuning script has (google-research's, then ours: seed, features, export; the
  training flags of `define_training_flags` and the evaluation flags of `define_evaluation_flags` included), with
  the task's defaults, as key flags of the calling script (its `--help`). `finetuning_config` reads them.

  Args:
    task: the registered task (bert_tf/registry.py), whose model folder --output_dir's help names.
    unit: what --max_seq_length and --dynamic_padding measure: "example", "window", ...
    do_train, do_eval, do_predict: their help: what the task reads and writes for each.
    max_seq_length, train_batch_size, learning_rate, model_name: the task's defaults (model_name None: the
      task's, which --model_name's help must then say, in `helps`).
    eval_batch_size, max_train_examples: whether the task has these flags.
    helps: other flags' help where the task's differs from the shared text.
  """
  from absl import flags

  from bert_tf import registry

  model_dir = registry.get(task).model_dir
  flag_values = flags.FLAGS if flag_values is None else flag_values
  before = set(flag_values)
  texts = {
      "vocab_file": "vocab.txt of the pretrained model (default: the one that comes with --init_checkpoint: in its "
                    "folder or beside its bert_config.json).",
      "bert_config_file": "bert_config.json of the pretrained model (default: the one beside --init_checkpoint).",
      "init_checkpoint": "The pretrained encoder (see above).",
      "output_dir": f"Where checkpoints, results, predictions and {model_dir}/ go.",
      "do_lower_case": "Lower-case and strip accents (uncased models; pass --nodo_lower_case for a cased one).",
      "do_train": do_train, "do_eval": do_eval, "do_predict": do_predict,
      "max_seq_length": f"Tokens per {unit} after WordPiece, [CLS] and [SEP]s included.",
      "train_batch_size": "Global training batch.",
      "eval_batch_size": "Evaluation batch (per worker).",
      "predict_batch_size": "Prediction batch (per worker).",
      "learning_rate": "Peak learning rate.",
      "num_train_epochs": "Epochs over the training set.",
      "warmup_proportion": "Share of the steps with a linear warmup.",
      "seed": "Seed of the head's initialisation, dropout and data order.",
      "features_dir": "Where the TFRecord features are written once and reused; default features/ beside "
                      "--output_dir (out/features for --output_dir=out/mrpc).",
      "dynamic_padding": f"Cut each batch to its longest {unit} (not on TPU).",
      "max_train_examples": "Use only the first N training examples (0: all).",
      "export_dir": "Also export a SavedModel for TensorFlow Serving (raw text in) to "
                    "<export_dir>/<model_name>/<version>/.",
      "model_name": "The served model's name (with --export_dir).",
  }
  unknown = set(helps or {}) - set(texts)
  if unknown:
    raise ValueError(f"help for {', '.join(sorted(unknown))}: not a shared fine-tuning flag")
  texts.update(helps or {})
  bound = _BoundFlags(flags, flag_values)
  # google-research/bert's.
  for name in ("vocab_file", "bert_config_file", "init_checkpoint", "output_dir"):
    bound.DEFINE_string(name, None, texts[name])
  bound.DEFINE_bool("do_lower_case", True, texts["do_lower_case"])
  for name in ("do_train", "do_eval", "do_predict"):
    bound.DEFINE_bool(name, False, texts[name])
  bound.DEFINE_integer("max_seq_length", max_seq_length, texts["max_seq_length"])
  bound.DEFINE_integer("train_batch_size", train_batch_size, texts["train_batch_size"])
  if eval_batch_size:
    bound.DEFINE_integer("eval_batch_size", 8, texts["eval_batch_size"])
  bound.DEFINE_integer("predict_batch_size", 8, texts["predict_batch_size"])
  bound.DEFINE_float("learning_rate", learning_rate, texts["learning_rate"])
  bound.DEFINE_float("num_train_epochs", 3.0, texts["num_train_epochs"])
  bound.DEFINE_float("warmup_proportion", 0.1, texts["warmup_proportion"])
  # The shared training flags (as scripts/run_pretraining.py) and evaluation while training.
  define_training_flags(steps_per_loop=50, log_steps=50, flag_values=flag_values)
  define_evaluation_flags(flag_values=flag_values)
  # New.
  bound.DEFINE_integer("seed", 12345, texts["seed"])
  bound.DEFINE_string("features_dir", None, texts["features_dir"])
  bound.DEFINE_bool("dynamic_padding", True, texts["dynamic_padding"])
  if max_train_examples:
    bound.DEFINE_integer("max_train_examples", 0, texts["max_train_examples"])
  bound.DEFINE_string("export_dir", None, texts["export_dir"])
  bound.DEFINE_string("model_name", model_name, texts["model_name"])
  bound.DEFINE_integer("max_request_chars", limits.MAX_REQUEST_CHARS, MAX_REQUEST_CHARS_HELP)
  _declare_key_flags_of_caller(flag_values, set(flag_values) - before)


def finetuning_config(config_class: Callable[..., Any], require: Mapping[str, str] | None = None, flag_values=None,
                      **task_fields):
  """The task's run config from the flags of `define_finetuning_flags`: `config_class(finetuning=<the
  FinetuningConfig>, vocab_file=..., <FINETUNING_TASK_FLAGS the script has>, **task_fields)`. Raises ValueError
  for a missing --output_dir, then for each flag of `require` ({name: what to give}) left empty, then as the
  FinetuningConfig does; --vocab_file's default is looked up after those checks."""
  from absl import flags

  from bert_tf.training import finetuning

  FLAGS = flags.FLAGS if flag_values is None else flag_values  # pylint: disable=invalid-name
  if not FLAGS.output_dir:
    raise ValueError("--output_dir is required")
  for name, what in (require or {}).items():
    if not FLAGS[name].value:
      raise ValueError(f"--{name} is required: {what}")
  limits.check_max_request_chars(FLAGS.max_request_chars)
  batches = {name: FLAGS[name].value for name in ("train_batch_size", "eval_batch_size", "predict_batch_size")
             if name in FLAGS}
  ft = finetuning.FinetuningConfig(
      output_dir=FLAGS.output_dir, bert_config=finetuning.bert_config_for(FLAGS.bert_config_file,
                                                                          FLAGS.init_checkpoint),
      init_checkpoint=FLAGS.init_checkpoint, learning_rate=FLAGS.learning_rate,
      num_train_epochs=FLAGS.num_train_epochs, warmup_proportion=FLAGS.warmup_proportion, seed=FLAGS.seed,
      **batches, **training_flag_values(FLAGS), **evaluation_flag_values(FLAGS))
  vocab_file = finetuning.vocab_file_for(FLAGS.vocab_file, FLAGS.init_checkpoint)  # after the config's checks
  shared = {name: FLAGS[name].value for name in FINETUNING_TASK_FLAGS if name in FLAGS}
  return config_class(finetuning=ft, vocab_file=vocab_file, **shared, **task_fields)


def finetuning_main(config: Callable[[], Any], run: Callable[..., dict],
                    hidden: tuple[str, ...] = ()) -> Callable[[list[str]], None]:
  """A fine-tuning script's `main`: --output_dir checked (a file there, or a folder that cannot be written: one
  line, before TensorFlow loads; --features_dir and --export_dir writable too), `config()` built and validated
  (before TensorFlow starts devices: bad flags fail fast), `run(config, say=...)` under `run_finetuning`, its
  summary printed as JSON without the keys `hidden`."""

  def main(argv):
    del argv
    from absl import flags
    from absl import logging as absl_logging

    from bert_tf import fileio
    from bert_tf.training import run_identity

    run_identity.check_output_dir(flags.FLAGS.output_dir)
    for name in ("output_dir", "features_dir", "export_dir"):  # one line now, not a traceback after training
      if name in flags.FLAGS:
        fileio.check_writable(name, flags.FLAGS[name].value)
    built = config()
    built.validate()
    summary = run_finetuning(lambda: run(built, say=lambda line: absl_logging.info("%s", line)), built.output_dir)
    print(json.dumps({k: v for k, v in summary.items() if k not in hidden}, indent=2, default=str))

  return main


# -- Export: scripts/export.py (any task's folder) and its aliases scripts/export_<task>.py ----------------------------


def define_export_flags(task: str | None = None, model_dir_flag: str = "model_dir", flag_values=None) -> None:
  """Defines the flags of scripts/export.py (`task` None: a folder of any registered task, with every task's own
  export flags) or of scripts/export_<task>.py (the task's flags; its folder's flag named as before, e.g.
  --classifier_dir), as key flags of the calling script (its `--help`). `export_main` reads them."""
  from absl import flags

  from bert_tf import registry

  flag_values = flags.FLAGS if flag_values is None else flag_values
  before = set(flag_values)
  bound = _BoundFlags(flags, flag_values)
  if task is None:
    exported = registry.tasks()
    folders = ", ".join(f"<run_{t.name} --output_dir>/{t.model_dir}" for t in exported)
    bound.DEFINE_string(model_dir_flag, None, f"A fine-tuned model's folder, whose settings file says its task: "
                        f"{folders}; a run's --output_dir holding one of them; or a Hugging Face model with a task "
                        f"head ({', '.join(t.hf_class for t in exported)}: its folder, or hf:<id>).")
    unnamed = [f"a {t.description}'s task name in lower case" for t in exported if t.served_name is None]
    named = ", ".join(t.served_name for t in exported if t.served_name is not None)
    bound.DEFINE_string("model_name", None, f"The served model's name (default: the task's: {'; '.join(unnamed)}; "
                        f"else {named}).")
  else:
    exported = (registry.get(task),)
    t = exported[0]
    bound.DEFINE_string(model_dir_flag, None, f"A fine-tuned {t.description}: <run_{t.name} --output_dir>/"
                        f"{t.model_dir}, or a Hugging Face {t.hf_class} (its folder, or hf:<id>).")
    bound.DEFINE_string("model_name", t.served_name, "The served model's name" +
                        (" (default: the task name, lower case)." if t.served_name is None else "."))
  bound.DEFINE_string("export_dir", None, "TF Serving's model root (local or gs://).")
  bound.DEFINE_integer("model_version", None, "The version folder (default: 1 + the newest existing one).")
  bound.DEFINE_integer("max_request_chars", limits.MAX_REQUEST_CHARS, MAX_REQUEST_CHARS_HELP)
  for t in exported:
    t.define_export_flags(bound)
  _declare_key_flags_of_caller(flag_values, set(flag_values) - before)


def _own_export_flags(task) -> set[str]:
  """The names of the flags `task.define_export_flags` defines."""
  from absl import flags

  values = flags.FlagValues()
  task.define_export_flags(_BoundFlags(flags, values))
  return set(values)


def task_of_model_dir(path: str, flag: str = "model_dir"):
  """(the registered task, its model folder) of `path`: a task's model folder (its settings file says which), a
  run's --output_dir holding one, or a Hugging Face model with a task head (a folder or hf:<id>: ours, converted
  from it); else a FileNotFoundError / ValueError naming --`flag` and what it takes."""
  from bert_tf import fileio, registry
  from bert_tf.model import checkpoints, released

  tasks = registry.tasks()

  def task_of(folder):  # a model folder (bert_config.json and weights) holding a task's settings file
    if not checkpoints.is_task_model_dir(folder):
      return None
    return next((t for t in tasks if fileio.exists(fileio.join(folder, t.settings_name))), None)

  local = released.task_model_dir(path)  # hf:<id> (or a Hugging Face folder) of a task head: ours, converted
  named = local.startswith((released.HF, released.KERAS_HUB))  # a released name without a task head
  if not named and not fileio.exists(local):
    raise FileNotFoundError(f"--{flag}={path}: no such folder; give a fine-tuned model's folder (e.g. "
                            f"<output_dir>/{tasks[0].model_dir})")
  found = task_of(local)
  if found is not None:
    return found, local
  inside = [(t, fileio.join(local, t.model_dir)) for t in tasks
            if not named and fileio.isdir(local) and task_of(fileio.join(local, t.model_dir)) is t]
  if len(inside) == 1:
    return inside[0]
  if inside:
    raise ValueError(f"--{flag}={path}: holds the model folders of {len(inside)} tasks "
                     f"({', '.join(t.model_dir for t, _ in inside)}); give one of them")
  raise ValueError(f"--{flag}={path}: not a fine-tuned model (no {', '.join(t.settings_name for t in tasks)} beside "
                   "a bert_config.json and the weights); give a run's "
                   f"<output_dir>/{'|'.join(t.model_dir for t in tasks)}, or a Hugging Face model with a task head "
                   f"({', '.join(t.hf_class for t in tasks)})")


def check_export_dir_outside(export_dir: str, model_dir: str, model_dir_flag: str = "model_dir") -> None:
  """ValueError when --export_dir is the model folder being exported or lies in it: the version folders would be
  written into the model they are read from (and go with it when a run's --overwrite_output_dir replaces it)."""
  from bert_tf import fileio

  if fileio.find_input(model_dir, {"export_dir": [export_dir]}, inside=True):
    raise ValueError(f"--export_dir={export_dir} lies in --{model_dir_flag}'s {model_dir}: the export would be "
                     "written into the model it reads; give another --export_dir")


def export_main(task: str | None = None, model_dir_flag: str = "model_dir") -> Callable[[list[str]], None]:
  """The `main` of a script that `define_export_flags(task, model_dir_flag)` set up: exports --<model_dir_flag> to
  --export_dir (`task` None: the task its folder says) and prints the version's path. A task's own export flag
  given for another task's folder is refused."""

  def main(argv):
    from absl import flags

    from bert_tf import fileio, registry

    FLAGS = flags.FLAGS  # pylint: disable=invalid-name
    if len(argv) > 1:
      raise ValueError(f"unexpected arguments {argv[1:]}")
    for name in (model_dir_flag, "export_dir"):
      if not FLAGS[name].value:
        raise ValueError(f"--{name} is required")
    fileio.check_writable("export_dir", FLAGS.export_dir)
    limits.check_max_request_chars(FLAGS.max_request_chars)
    given = FLAGS[model_dir_flag].value
    found, model_dir = (registry.get(task), given) if task else task_of_model_dir(given, model_dir_flag)
    check_export_dir_outside(FLAGS.export_dir, model_dir, model_dir_flag)
    own = _own_export_flags(found)
    for other in (registry.tasks() if task is None else ()):
      for name in sorted(_own_export_flags(other) - own):
        if FLAGS[name].present:
          raise ValueError(f"--{name}: for a {other.description} only, and --{model_dir_flag}={given} is a "
                           f"{found.description}; drop it")
    print(found.export(model_dir, FLAGS.export_dir, FLAGS.model_name, FLAGS.model_version,
                       {**{name: FLAGS[name].value for name in own}, "max_request_chars": FLAGS.max_request_chars},
                       model_dir_flag))

  return main


def start_training() -> None:
  """What every training script does once its flags are checked and its modules imported: op determinism if
  --deterministic, INFO logs, and the objects of the start-up set aside from the garbage collector."""
  from absl import flags
  from absl import logging as absl_logging

  if flags.FLAGS.deterministic:
    import tensorflow as tf

    tf.config.experimental.enable_op_determinism()
  absl_logging.set_verbosity(absl_logging.INFO)
  # TensorFlow's and Keras's modules are a heap of about a million objects that live as long as the process, and
  # each full collection walks them all (about 0.1 s); tracing makes enough garbage for a full collection every
  # few seconds. Set aside, they are no longer walked: in a 15 s (CPU) MRPC run, garbage collection fell from
  # 1.7 s to 1.1 s. What is made from here on is collected as usual.
  set_live_objects_aside()


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
  """The values of `define_training_flags`' flags as the `RunOptions` fields of the same names (every field but
  --seed and --keep_checkpoint_max, which scripts define with their own help), with google-research's aliases
  resolved (--use_tpu, --iterations_per_loop); raises ValueError when an alias contradicts a flag."""
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
