r"""Benchmark: kill a training run with SIGKILL at random moments, rerun it, and check the weights bit for bit.

Why: docs/pretraining.md promises that rerunning a killed command resumes it to the very weights of an
uninterrupted run, and that every output is written under a temporary name and renamed into place. A test kills
a run at one chosen step; a user's machine dies at any moment - during start-up, inside a checkpoint write, while
the encoder or the classifier is exported. This harness kills at moments drawn uniformly over the whole run.

For each workload (`--workloads`):

  pretraining   scripts/run_pretraining.py --deterministic, a checkpoint every --save_checkpoints_steps
  finetuning    scripts/run_classifier.py --do_train --do_eval on an SST-2-format task made from the corpus,
                from the pretraining reference's encoder (--init_checkpoint), a checkpoint every few steps,
                --deterministic where the script has the flag
  finetuning_eval   the same with evaluation while training: --eval_every_steps (off the checkpoint steps, so
                kills fall between an evaluation and the checkpoint that records it) and --keep_best_checkpoint

it runs the command once uninterrupted (the reference, timed: W seconds) and once more (the control: are two
uninterrupted runs bit-identical at all?), then, --kills times: in a fresh output directory, starts the command,
sleeps uniform(0, W), kills its process group with SIGKILL (a draw that falls after the run ended is counted as
missed and drawn again, so that --kills kills land), notes what was on disk (no checkpoint yet, the
newest complete checkpoint, the final one, or the run had already ended), reruns the same command to the end,
and compares

  pretraining   every variable of <output_dir>/encoder_checkpoint/encoder and of encoder_savedmodel/'s
                variables, and the model and optimizer variables of the final training checkpoint
  finetuning    every variable of <output_dir>/classifier/model, and the model and optimizer variables of the
                final training checkpoint
  finetuning_eval   the same (the classifier holds the best evaluated weights; the training checkpoint also
                holds the evaluation state: best step and value, every evaluation's metrics)

with the reference's, bit for bit (training checkpoints: iterator state and save_counter left out, as in
tests/test_run_pretraining.py - a resumed run saves a different number of times). Since a deterministic command
that starts over also ends with the reference's weights, it checks too that the rerun resumed: every loop logs
its step, so a rerun that went on from the killed run's newest checkpoint k logs no step <= k. It then looks for
temporary files left in the trial's directory: TensorFlow's `ckpt-*_temp/`, `*.tempstate*` and `checkpoint.tmp*`,
bert_tf's hidden `.<name>.tmp-*` (fileio.temp_path_for), any other hidden name, and `*.lock` files.

Three more workloads write their output once, with no checkpoint to resume from; a rerun must write the
uninterrupted run's output over whatever the killed one left:

  create_pretraining_data   scripts/create_pretraining_data.py --num_workers=2 on the corpus (--num_shards=8,
                --dupe_factor=10: about 5 s); compared: the records' bytes and the statistics file (less its
                timings and paths)
  convert       scripts/convert_checkpoint.py of the pretraining reference (ours, with its heads) to a Hugging
                Face folder, --overwrite_output_dir (a kill after the folder's rename leaves it whole, and a plain
                rerun is refused by design); compared: every file's bytes, and a differing safetensors file's
                tensors
  export        scripts/export.py of the fine-tuning reference's classifier/; compared: the versions published
                (exactly one), its manifest (the fingerprint included), warmup requests and vocabulary bytes, and
                its variables bit for bit (Keras' seed-generator states left out: they are drawn afresh at every
                load, and the fingerprint leaves them out too); not saved_model.pb, whose graph is traced anew

These are killed as `kill -9 <pid>` or the kernel's OOM killer kills: SIGKILL to the command's own process only,
never its group, because its children (create_pretraining_data's workers) must end by themselves. The harness
then checks that within 5 s no process of the command's session is alive (/proc) and that its standard output
(a pipe shared by the whole tree) reached its end; any survivor is reported, then killed. After the rerun it also
looks outside the trial: shard folders (`bert_tf_shards*`) new in the machine's temporary folder, and files of the
killed or rerun process (`tmp-<pid>`, `owner-<machine>-<pid>`) in bert_tf's cache folder (fileio.cache_dir: the
export's core-op list is written there under a temporary name).

The commands run as a user runs them: `python scripts/<script>.py` as their own process (a new session, so that
the training workloads' kill takes the whole group), with the work directory as the current directory and relative
paths in every flag.

  python bench/bench_kill_resume.py                                    # 20 kills of each workload
  python bench/bench_kill_resume.py --kills=2 --workloads=pretraining  # a quick look
  python bench/bench_kill_resume.py --json=out/kill_resume.json        # also write every trial
  python bench/bench_kill_resume.py --kills=2 --workloads=create_pretraining_data,convert,export
  python bench/bench_kill_resume.py --dtype=mixed_float16 --loss_scale_growth_steps=2 --workloads=pretraining

--dtype runs every command in that dtype policy (in <work_dir>_<dtype> unless --work_dir is given). Under
mixed_float16 the training checkpoint compared also holds the dynamic loss scale, its count of finite steps
towards the next doubling and the run's count of skipped updates; --loss_scale_growth_steps (the commands'
BERT_TF_LOSS_SCALE_GROWTH_STEPS; Keras' default 2000 is longer than these runs) makes the scale double and then
overflow float16 and halve within a run, so that kills fall between skipped updates and doublings. Each run's
count of skipped updates (its last log line) is reported beside the reference's.

Set-up (once per --work_dir, reused after): the embedded corpus, a WordPiece vocabulary learnt from it
(scripts/learn_vocab.py), pretraining records of length 64 (scripts/create_pretraining_data.py), a tiny
bert_config.json (L2/H64/A2, I128) and the SST-2-format task (is a sentence from the string-methods or
format-strings document, or from the debugger or mappings one; corpus.document_classification_split).

convert needs the pretraining reference and export the fine-tuning one: each is run first when it is missing.

Prints a JSON report and a markdown table per workload: trials, reruns that finished, finished runs with
bit-identical weights, trials with leftover temporaries, failed reruns (with the last line of their output),
reruns that resumed among those whose killed run left a checkpoint, and what was on disk at the kills; for the
three one-shot workloads a second table: kills with a process alive 5 s after the kill or an output pipe still
open, and trials with files left outside the trial. Exits 1 when a rerun failed, started over, or ended with
other weights or outputs, or a killed command left a process alive; 0 otherwise (leftovers are reported, not
fatal).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "scripts")
TRAINING_WORKLOADS = ("pretraining", "finetuning", "finetuning_eval")
ONE_SHOT_WORKLOADS = ("create_pretraining_data", "convert", "export")
WORKLOADS = TRAINING_WORKLOADS + ONE_SHOT_WORKLOADS

# The set-up's files, relative to --work_dir (the commands' current directory).
DATA = "data"
CORPUS = os.path.join(DATA, "corpus.txt")
VOCAB = os.path.join(DATA, "vocab.txt")
RECORDS = os.path.join(DATA, "pretrain.tfrecord")
BERT_CONFIG = os.path.join(DATA, "bert_config.json")
TASK_DIR = os.path.join(DATA, "SST-2")
MAX_SEQ_LENGTH = 64
MAX_PREDICTIONS = 10
# The fine-tuning task: sentences of these documents are label 1, of the other two label 0.
POSITIVE_TOPICS = ("string-methods", "formatstrings")

# What convert and export read: the references of pretraining and fine-tuning (relative to --work_dir).
PRETRAINING_OUT = os.path.join("pretraining", "reference", "out")
CLASSIFIER = os.path.join("finetuning", "reference", "out", "classifier")
EXPORT_NAME = "sst2"  # export.py's --model_name: the folder <export_dir>/sst2/<version>/
RECORDS_NAME = "pre.tfrecord"
# Seconds a killed command's children get to end by themselves (and to close its output pipe).
ORPHAN_GRACE_S = 5.0

# Names of temporaries: TensorFlow's checkpoint shards (`ckpt-5_temp/`, SavedModel `variables_temp/`), its
# bundle and state files written before a rename (`*.tempstate<n>`, `checkpoint.tmp<hex>`), bert_tf's
# `.<name>.tmp-<hex>` and any other hidden name, and lock files.
_TEMPORARY = re.compile(r"(_temp$|\.tmp|tmp-|tempstate|\.lock$|^lock$|^\.)")
# The harness's own files in a trial directory: not the commands' outputs.
_OWN_FILES = ("kill.log", "rerun.log", "run.log")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                              formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--kills", type=int, default=20, help="Killed-and-rerun trials per workload.")
  p.add_argument("--seed", type=int, default=0, help="Seed of the kill times.")
  p.add_argument("--work_dir", default=None,
                 help="Set-up files, references and trials; the commands' current directory (default "
                      "out/bench_kill_resume, with _<dtype> under another --dtype).")
  p.add_argument("--dtype", default="float32", choices=("float32", "mixed_bfloat16", "mixed_float16"),
                 help="The commands' --dtype.")
  p.add_argument("--loss_scale_growth_steps", type=int, default=None,
                 help="mixed_float16: finite updates before the loss scale doubles (the commands' "
                      "BERT_TF_LOSS_SCALE_GROWTH_STEPS); default Keras' 2000.")
  p.add_argument("--workloads", default=",".join(WORKLOADS), help="Comma-separated, from " + ",".join(WORKLOADS))
  p.add_argument("--json", default=None, help="Also write the report (every trial) here.")
  p.add_argument("--no_control", action="store_true",
                 help="Skip the second uninterrupted run that checks the command itself is reproducible.")
  p.add_argument("--keep_trials", action="store_true",
                 help="Keep every trial's directory (default: only those with a finding).")
  p.add_argument("--kill_window", type=float, default=1.0,
                 help="Kill times are uniform in [0, this x the reference's wall time].")
  # Sizes: a pretraining run of about 30 s and a fine-tuning run of about 25 s on 2 shared cores.
  p.add_argument("--pretrain_steps", type=int, default=600)
  p.add_argument("--pretrain_checkpoint_steps", type=int, default=10)
  p.add_argument("--finetune_epochs", type=float, default=4.0)
  p.add_argument("--finetune_checkpoint_steps", type=int, default=5)
  p.add_argument("--finetune_eval_steps", type=int, default=3, help="finetuning_eval: --eval_every_steps.")
  p.add_argument("--records_dupe_factor", type=int, default=10,
                 help="create_pretraining_data: --dupe_factor (10: about 5 s with 2 workers on 2 shared cores).")
  p.add_argument("--records_shards", type=int, default=8, help="create_pretraining_data: --num_shards.")
  p.add_argument("--rerun_timeout", type=float, default=600.0, help="Seconds before a rerun counts as hung.")
  args = p.parse_args(argv)
  args.workloads = [w for w in args.workloads.split(",") if w]
  unknown = sorted(set(args.workloads) - set(WORKLOADS))
  if unknown:
    p.error(f"--workloads: unknown {unknown}; choose from {','.join(WORKLOADS)}")
  if args.kills < 0:
    p.error(f"--kills={args.kills}: must be >= 0")
  if args.loss_scale_growth_steps is not None and (args.loss_scale_growth_steps < 1 or args.dtype != "mixed_float16"):
    p.error(f"--loss_scale_growth_steps={args.loss_scale_growth_steps}: must be >= 1, with --dtype=mixed_float16")
  if args.work_dir is None:
    args.work_dir = os.path.join("out", "bench_kill_resume" + ("" if args.dtype == "float32" else f"_{args.dtype}"))
  return args


def _dtype_flags(args: argparse.Namespace) -> list[str]:
  return [] if args.dtype == "float32" else [f"--dtype={args.dtype}"]


# -- Set-up -------------------------------------------------------------------------------------------------------


def _run_script(script: str, flags: list[str], work_dir: str, log_path: str) -> None:
  """Runs a set-up script to the end in `work_dir`; raises with its output's tail when it fails."""
  with open(os.path.join(work_dir, log_path), "w") as log:
    done = subprocess.run([sys.executable, os.path.join(SCRIPTS, script), *flags], cwd=work_dir, stdout=log,
                          stderr=subprocess.STDOUT, check=False)
  if done.returncode != 0:
    raise RuntimeError(f"{script} exited {done.returncode}; see {os.path.join(work_dir, log_path)}:\n"
                       + _tail(os.path.join(work_dir, log_path), 20))


def _write_task(work_dir: str) -> dict:
  """SST-2-format train.tsv / dev.tsv (header `sentence<TAB>label`) from the corpus' document task."""
  from bert_tf.data import corpus

  train, dev = corpus.document_classification_split()
  os.makedirs(os.path.join(work_dir, TASK_DIR), exist_ok=True)
  counts = {}
  for split, pairs in (("train", train), ("dev", dev)):
    rows = ["sentence\tlabel"]
    for text, topic in pairs:
      rows.append(f"{' '.join(text.split())}\t{int(topic in POSITIVE_TOPICS)}")
    with open(os.path.join(work_dir, TASK_DIR, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("\n".join(rows) + "\n")
    counts[split] = len(pairs)
  return counts


def set_up(work_dir: str, say) -> dict:
  """Writes what both workloads read under <work_dir>/data/, skipping what a previous run left complete."""
  from bert_tf.config import BertConfig
  from bert_tf.data import corpus

  os.makedirs(os.path.join(work_dir, DATA), exist_ok=True)
  if not os.path.exists(os.path.join(work_dir, CORPUS)):
    corpus.write_default_corpus(os.path.join(work_dir, CORPUS))
  if not os.path.exists(os.path.join(work_dir, VOCAB)):
    say("set-up: learning the vocabulary")
    _run_script("learn_vocab.py", [f"--input_file={CORPUS}", f"--vocab_file={VOCAB}", "--vocab_size=2000"],
                work_dir, os.path.join(DATA, "learn_vocab.log"))
  if not os.path.exists(os.path.join(work_dir, RECORDS)):
    say("set-up: creating pretraining records")
    _run_script("create_pretraining_data.py", [
        f"--input_file={CORPUS}", f"--output_file={RECORDS}", f"--vocab_file={VOCAB}",
        f"--max_seq_length={MAX_SEQ_LENGTH}", f"--max_predictions_per_seq={MAX_PREDICTIONS}", "--dupe_factor=2"],
        work_dir, os.path.join(DATA, "create_pretraining_data.log"))
  with open(os.path.join(work_dir, VOCAB), encoding="utf-8") as f:
    vocab_size = sum(1 for _ in f)
  BertConfig.from_preset("tiny", vocab_size=vocab_size, hidden_size=64, num_attention_heads=2,
                         intermediate_size=128, max_position_embeddings=MAX_SEQ_LENGTH).to_json_file(
                             os.path.join(work_dir, BERT_CONFIG))
  examples = _write_task(work_dir)
  with open(os.path.join(work_dir, RECORDS + ".stats.json")) as f:
    instances = json.load(f).get("instances")
  return {"vocab_size": vocab_size, "pretraining_instances": instances, "task_examples": examples}


# -- Commands -----------------------------------------------------------------------------------------------------


def pretraining_command(args: argparse.Namespace, output_dir: str) -> list[str]:
  return [sys.executable, os.path.join(SCRIPTS, "run_pretraining.py"), f"--input_file={RECORDS}",
          f"--output_dir={output_dir}", f"--bert_config_file={BERT_CONFIG}", f"--max_seq_length={MAX_SEQ_LENGTH}",
          f"--max_predictions_per_seq={MAX_PREDICTIONS}", "--train_batch_size=32", "--learning_rate=1e-3",
          f"--num_train_steps={args.pretrain_steps}", f"--num_warmup_steps={args.pretrain_steps // 5}",
          f"--save_checkpoints_steps={args.pretrain_checkpoint_steps}",
          f"--steps_per_loop={args.pretrain_checkpoint_steps}", f"--log_steps={args.pretrain_checkpoint_steps}",
          "--keep_checkpoint_max=3", "--distribution_strategy=one_device", "--deterministic", "--seed=7",
          *_dtype_flags(args)]


def finetuning_command(args: argparse.Namespace, output_dir: str, init_checkpoint: str,
                       evaluating: bool = False) -> list[str]:
  # --features_dir inside the trial: each run writes its features, so kills also fall on that write.
  features_dir = os.path.join(os.path.dirname(output_dir), "features")
  return [sys.executable, os.path.join(SCRIPTS, "run_classifier.py"), "--task_name=SST-2",
          f"--data_dir={TASK_DIR}", f"--vocab_file={VOCAB}", f"--bert_config_file={BERT_CONFIG}",
          f"--init_checkpoint={init_checkpoint}", f"--output_dir={output_dir}", f"--features_dir={features_dir}",
          "--do_train", "--do_eval", f"--max_seq_length={MAX_SEQ_LENGTH}", "--train_batch_size=32",
          "--learning_rate=2e-4", f"--num_train_epochs={args.finetune_epochs}",
          f"--save_checkpoints_steps={args.finetune_checkpoint_steps}",
          f"--steps_per_loop={args.finetune_checkpoint_steps}", f"--log_steps={args.finetune_checkpoint_steps}",
          "--distribution_strategy=one_device", "--seed=7", *_dtype_flags(args)] + (
              ["--deterministic"] if classifier_has_deterministic_flag() else []) + (
              [f"--eval_every_steps={args.finetune_eval_steps}", "--keep_best_checkpoint"] if evaluating else [])


def classifier_has_deterministic_flag() -> bool:
  """run_classifier.py gained --deterministic (op determinism) late; older trees train without it."""
  with open(os.path.join(SCRIPTS, "run_classifier.py"), encoding="utf-8") as f:
    return 'DEFINE_bool("deterministic"' in f.read()


def records_command(args: argparse.Namespace, output_dir: str) -> list[str]:
  return [sys.executable, os.path.join(SCRIPTS, "create_pretraining_data.py"), f"--input_file={CORPUS}",
          f"--output_file={os.path.join(output_dir, RECORDS_NAME)}", f"--vocab_file={VOCAB}",
          f"--max_seq_length={MAX_SEQ_LENGTH}", f"--max_predictions_per_seq={MAX_PREDICTIONS}",
          f"--dupe_factor={args.records_dupe_factor}", f"--num_shards={args.records_shards}", "--num_workers=2"]


def convert_command(output_dir: str) -> list[str]:
  # --overwrite_output_dir: a kill after the folder was renamed into place leaves it whole, and without the flag
  # the rerun of the same command would be refused (by design: a non-empty --output_dir is never replaced unasked).
  return [sys.executable, os.path.join(SCRIPTS, "convert_checkpoint.py"), "--input_format=ours",
          f"--input={PRETRAINING_OUT}", "--output_format=hf", f"--output_dir={output_dir}", f"--vocab_file={VOCAB}",
          "--overwrite_output_dir"]


def export_command(output_dir: str) -> list[str]:
  return [sys.executable, os.path.join(SCRIPTS, "export.py"), f"--model_dir={CLASSIFIER}",
          f"--export_dir={output_dir}", f"--model_name={EXPORT_NAME}"]


def _env() -> dict[str, str]:
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  env["PYTHONUNBUFFERED"] = "1"
  return env


def _start(command: list[str], work_dir: str, log_path: str) -> tuple[subprocess.Popen, Any]:
  log = open(os.path.join(work_dir, log_path), "w")
  process = subprocess.Popen(command, cwd=work_dir, stdout=log, stderr=subprocess.STDOUT, env=_env(),
                             start_new_session=True)
  return process, log


def _kill_group(process: subprocess.Popen) -> None:
  try:
    os.killpg(process.pid, signal.SIGKILL)  # start_new_session: the group's id is the child's pid
  except ProcessLookupError:
    pass


def run_to_end(command: list[str], work_dir: str, log_path: str, timeout: float) -> dict:
  """Runs `command` to its end -> {"rc", "seconds", "last_line", "pid", "left_alive"}; a run past `timeout` is
  killed (rc None). `left_alive`: processes of its session still running ORPHAN_GRACE_S after it exited (then
  killed), which a command that ends normally must not leave."""
  started = time.monotonic()
  process, log = _start(command, work_dir, log_path)
  try:
    rc = process.wait(timeout=timeout)
  except subprocess.TimeoutExpired:
    _kill_group(process)
    process.wait()
    rc = None
  finally:
    log.close()
  seconds = time.monotonic() - started
  _, left_alive = wait_for_session_end(process.pid)
  return {"rc": rc, "seconds": round(seconds, 2), "last_line": _last_line(os.path.join(work_dir, log_path)),
          "pid": process.pid, "left_alive": left_alive}


def session_processes(sid: int) -> list[str]:
  """Live processes (zombies are over) of session or process group `sid` ("<pid> <command line>" each): a command
  started with start_new_session leads both, and its children stay in them unless they leave on purpose."""
  if not os.path.isdir("/proc"):  # elsewhere: whether the group has any member at all, zombies included
    try:
      os.killpg(sid, 0)
    except (ProcessLookupError, PermissionError):
      return []
    return [f"group {sid} (no /proc to name its members)"]
  found = []
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat", "rb") as f:
        stat = f.read()
      # After the command name in parentheses (which may hold spaces): state, ppid, pgrp, session.
      state, _, pgrp, session = stat[stat.rindex(b")") + 2:].split()[:4]
      if state in (b"Z", b"X") or sid not in (int(pgrp), int(session)):
        continue
      with open(f"/proc/{entry}/cmdline", "rb") as f:
        command = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except (OSError, ValueError):  # it ended while we looked
      continue
    found.append(f"{entry} {command[:200]}")
  return sorted(found)


def wait_for_session_end(sid: int, grace: float = ORPHAN_GRACE_S) -> tuple[float | None, list[str]]:
  """Waits up to `grace` s for session `sid` to have no live process -> (seconds it took, None if it never did;
  the processes alive at the end). Survivors are then killed (the harness's own children), so that they weigh on
  no later run; they are what the caller reports."""
  started = time.monotonic()
  while True:
    alive = session_processes(sid)
    if not alive:
      return round(time.monotonic() - started, 2), []
    if time.monotonic() - started >= grace:
      break
    time.sleep(0.05)
  try:
    os.killpg(sid, signal.SIGKILL)
  except (ProcessLookupError, PermissionError):
    pass
  for line in session_processes(sid):  # a member that moved to another group, still in the session
    try:
      os.kill(int(line.split()[0]), signal.SIGKILL)
    except (ProcessLookupError, PermissionError, ValueError):
      pass
  return None, alive


def _tail(path: str, lines: int) -> str:
  try:
    with open(path, errors="replace") as f:
      return "".join(f.readlines()[-lines:])
  except OSError:
    return ""


def _last_line(path: str) -> str:
  text = [line.strip() for line in _tail(path, 40).splitlines() if line.strip()]
  return text[-1][-300:] if text else ""


def _log_facts(path: str) -> dict:
  """What a run's log says: the first and last step logged, the step it resumed at (when it says so) and its
  warnings (`HH:MM:SS warning: ...` lines, or absl's `W... file.py:N] ...`: a lock taken over, temporaries
  removed, a checkpoint skipped), each shortened to 240 characters."""
  facts: dict[str, Any] = {}
  try:
    with open(path, errors="replace") as f:
      text = f.read()
  except OSError:
    return facts
  steps = re.findall(r"step (\d+)/(\d+)", text)
  if steps:
    facts["first_logged_step"] = int(steps[0][0])
    facts["last_logged_step"] = int(steps[-1][0])
  resumed = re.search(r"resuming at step (\d+)", text)
  if resumed:
    facts["resumed_at_step"] = int(resumed.group(1))
  skipped = re.search(r"mixed_float16: (\d+) of \d+ updates skipped", text)  # the trainer's last line
  if skipped:
    facts["skipped_updates"] = int(skipped.group(1))
  warnings = [m.group(1) or m.group(2) for m in re.finditer(
      r"^(?:\d\d:\d\d:\d\d warning: (.*)|W\d{4} [^\]]*\] (.*))$", text, re.MULTILINE)]
  if warnings:
    facts["warnings"] = [w if len(w) <= 240 else f"{w[:150]} ... {w[-85:]}" for w in warnings[:8]]
  return facts


# -- What is on disk ------------------------------------------------------------------------------------------------


def find_temporaries(directory: str) -> list[str]:
  """Temporary files and folders under `directory` (paths relative to it); a matching folder is not entered."""
  found = []
  for root, dirs, files in os.walk(directory):
    rel = os.path.relpath(root, directory)
    for name in sorted(dirs):
      if _TEMPORARY.search(name):
        found.append(os.path.normpath(os.path.join(rel, name)) + "/")
    dirs[:] = sorted(d for d in dirs if not _TEMPORARY.search(d))
    for name in sorted(files):
      if _TEMPORARY.search(name) and not (rel == "." and name in _OWN_FILES):
        found.append(os.path.normpath(os.path.join(rel, name)))
  return found


def _checkpoint_steps(output_dir: str) -> list[int]:
  """Steps of the complete training checkpoints (`ckpt-<step>.index` present) in <output_dir>/checkpoints."""
  try:
    names = os.listdir(os.path.join(output_dir, "checkpoints"))
  except OSError:
    return []
  return sorted(int(m.group(1)) for m in (re.fullmatch(r"ckpt-(\d+)\.index", n) for n in names) if m)


def _listed_checkpoint_steps(output_dir: str) -> list[int]:
  """Steps of the checkpoints that <output_dir>/checkpoints/checkpoint (TensorFlow's state file, rewritten
  atomically after each save) lists and whose `.index` exists: what a rerun can resume from."""
  try:
    with open(os.path.join(output_dir, "checkpoints", "checkpoint"), encoding="utf-8") as f:
      listed = re.findall(r'checkpoint_paths?: "([^"]*)"', f.read())
  except OSError:
    return []
  complete = set(_checkpoint_steps(output_dir))
  steps = {int(m.group(1)) for m in (re.search(r"ckpt-(\d+)$", path) for path in listed) if m}
  return sorted(steps & complete)


def state_at_kill(output_dir: str, final_step: int, final_outputs: Sequence[str]) -> dict:
  """Where a killed run stood, by its files: before its first checkpoint, mid-training (newest checkpoint
  before the last step), or after the final checkpoint (writing the encoder / classifier, evaluating).
  `newest_checkpoint_step` is the newest one the state file lists (the rerun's starting point);
  `newest_index_step` the newest `.index` on disk, later when the kill fell between the two writes."""
  listed = _listed_checkpoint_steps(output_dir)
  indexes = _checkpoint_steps(output_dir)
  present = [name for name in final_outputs if os.path.exists(os.path.join(output_dir, name))]
  if not listed:
    state = "before first checkpoint"
  elif listed[-1] < final_step:
    state = "mid-training"
  else:
    state = "after final checkpoint"
  return {"state": state, "newest_checkpoint_step": listed[-1] if listed else None,
          "newest_index_step": indexes[-1] if indexes else None, "final_outputs_present": present}


# -- Comparing weights --------------------------------------------------------------------------------------------


def _checkpoint_tensors(prefix: str, training: bool) -> dict[str, Any]:
  """Every variable of a checkpoint; for a training checkpoint only model and optimizer variables and the
  evaluation state (not the serialized input iterator, the save counter or the object graph)."""
  import numpy as np
  import tensorflow as tf

  reader = tf.train.load_checkpoint(prefix)
  names = [n for n in reader.get_variable_to_shape_map() if n != "_CHECKPOINTABLE_OBJECT_GRAPH"]
  if training:
    names = [n for n in names if n.endswith("VARIABLE_VALUE") and not n.startswith(("iterator", "save_counter"))]
  # A string variable (the evaluation state) reads as bytes: an array too, to compare alike.
  return {n: np.asarray(reader.get_tensor(n)) for n in names}


def weight_files(workload: str, output_dir: str) -> dict[str, tuple[str, bool]]:
  """The checkpoints compared for `workload`: {label: (prefix, is_training_checkpoint)}."""
  steps = _checkpoint_steps(output_dir)
  files = {}
  if workload == "pretraining":
    files["encoder_checkpoint"] = (os.path.join(output_dir, "encoder_checkpoint", "encoder"), False)
    files["encoder_savedmodel"] = (os.path.join(output_dir, "encoder_savedmodel", "variables", "variables"), False)
  else:
    files["classifier"] = (os.path.join(output_dir, "classifier", "model"), False)
  if steps:
    files[f"checkpoints/ckpt-{steps[-1]}"] = (os.path.join(output_dir, "checkpoints", f"ckpt-{steps[-1]}"), True)
  return files


def read_weights(workload: str, output_dir: str) -> dict[str, dict[str, Any]]:
  """{label: {variable: array}} of `weight_files`; a checkpoint that cannot be read maps to an error string."""
  out: dict[str, Any] = {}
  for label, (prefix, training) in weight_files(workload, output_dir).items():
    try:
      out[label] = _checkpoint_tensors(prefix, training)
    except Exception as e:  # pylint: disable=broad-except  # a missing or corrupt output is a finding
      out[label] = f"unreadable: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
  return out


def compare(reference: dict[str, Any], trial: dict[str, Any]) -> dict:
  """-> {"identical": bool, "differences": [...]} comparing bit for bit (bytes of each array)."""
  differences = []
  for label in sorted(set(reference) | set(trial)):
    ref, got = reference.get(label), trial.get(label)
    if ref is None or got is None:
      differences.append(f"{label}: only in the {'reference' if got is None else 'trial'}")
      continue
    if isinstance(ref, str) or isinstance(got, str):
      differences.append(f"{label}: reference {ref if isinstance(ref, str) else 'ok'}, trial "
                         f"{got if isinstance(got, str) else 'ok'}")
      continue
    if set(ref) != set(got):
      differences.append(f"{label}: variables differ ({len(set(ref) ^ set(got))} names in one only)")
    differing = [n for n in sorted(set(ref) & set(got)) if not _same_bits(ref[n], got[n])]
    if differing:
      worst = max(differing, key=lambda n: _max_abs_diff(ref[n], got[n]))
      differences.append(f"{label}: {len(differing)} of {len(ref)} variables differ (largest |diff| "
                         f"{_max_abs_diff(ref[worst], got[worst]):.3g} in {worst})")
  return {"identical": not differences, "differences": differences}


def _same_bits(a, b) -> bool:
  return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _max_abs_diff(a, b) -> float:
  import numpy as np

  if a.shape != b.shape or not np.issubdtype(a.dtype, np.number):
    return float("inf")
  return float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64)), initial=0.0))


# -- One workload -------------------------------------------------------------------------------------------------


class Workload:
  """A command to kill and rerun, its final step and the outputs a finished run has."""

  def __init__(self, name: str, args: argparse.Namespace, work_dir: str, init_checkpoint: str | None = None,
               num_train_examples: int = 0):
    self.name, self.args, self.work_dir, self.init_checkpoint = name, args, work_dir, init_checkpoint
    if name == "pretraining":
      self.final_step = args.pretrain_steps
      self.final_outputs = ("encoder_checkpoint", "encoder_savedmodel")
    else:  # FinetuningConfig.train_steps: int(examples / batch * epochs)
      self.final_step = max(1, int(num_train_examples / 32 * args.finetune_epochs))
      self.final_outputs = ("classifier", "eval_results.json")

  def command(self, trial_dir: str) -> list[str]:
    output_dir = os.path.join(trial_dir, "out")
    if self.name == "pretraining":
      return pretraining_command(self.args, output_dir)
    return finetuning_command(self.args, output_dir, self.init_checkpoint, evaluating=self.name == "finetuning_eval")

  def read(self, output_dir: str) -> dict[str, Any]:
    """What is compared of a finished run's <trial>/out."""
    return read_weights(self.name, output_dir)

  def compare(self, reference: dict[str, Any], trial: dict[str, Any]) -> dict:
    return compare(reference, trial)

  def fresh(self, trial_dir: str) -> None:
    path = os.path.join(self.work_dir, trial_dir)
    if os.path.exists(path):
      shutil.rmtree(path)
    os.makedirs(path)

  def uninterrupted(self, trial_dir: str) -> dict:
    self.fresh(trial_dir)
    result = run_to_end(self.command(trial_dir), self.work_dir, os.path.join(trial_dir, "run.log"),
                        self.args.rerun_timeout)
    result["leftovers"] = find_temporaries(os.path.join(self.work_dir, trial_dir))
    if result["rc"] != 0:
      raise RuntimeError(f"{self.name}: the uninterrupted run in {os.path.join(self.work_dir, trial_dir)} exited "
                         f"{result['rc']}: {result['last_line']}")
    return result

  def trial(self, trial_dir: str, kill_after: float, reference: dict) -> dict:
    """Start, SIGKILL after `kill_after` s, note the state, rerun to the end, compare with `reference`."""
    self.fresh(trial_dir)
    work, out = self.work_dir, os.path.join(self.work_dir, trial_dir, "out")
    record: dict[str, Any] = {"trial_dir": trial_dir, "kill_after_s": round(kill_after, 2)}
    started = time.monotonic()
    process, log = _start(self.command(trial_dir), work, os.path.join(trial_dir, "kill.log"))
    try:
      rc = process.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
      rc = None
    if rc is None:
      _kill_group(process)
      rc = process.wait()
      record["killed"] = True
    else:
      record["killed"] = False
    log.close()
    record["first_run_s"] = round(time.monotonic() - started, 2)
    record["first_run_rc"] = rc
    at_kill = state_at_kill(out, self.final_step, self.final_outputs)
    if not record["killed"]:
      at_kill["state"] = "ended before kill" if rc == 0 else f"failed before kill (exit {rc})"
    record.update(at_kill)
    record.update({f"first_run_{k}": v for k, v in _log_facts(os.path.join(work, trial_dir, "kill.log")).items()})
    record["temporaries_at_kill"] = find_temporaries(os.path.join(work, trial_dir))

    rerun = run_to_end(self.command(trial_dir), work, os.path.join(trial_dir, "rerun.log"), self.args.rerun_timeout)
    record["rerun_rc"] = rerun["rc"]
    record["rerun_s"] = rerun["seconds"]
    record.update({f"rerun_{k}": v for k, v in _log_facts(os.path.join(work, trial_dir, "rerun.log")).items()})
    record["resumed"] = resumed(record, self.final_step)
    record["finished"] = rerun["rc"] == 0
    if not record["finished"]:
      record["rerun_error"] = rerun["last_line"] if rerun["rc"] is not None else "timed out"
    record["leftovers"] = find_temporaries(os.path.join(work, trial_dir))
    if record["finished"]:
      record.update(self.compare(reference, self.read(out)))
    else:
      record["identical"] = None
    return record


class OneShot(Workload):
  """A command that writes its output once (records, a converted model, a served version): nothing to resume from,
  so its rerun writes the whole output again, over what the killed run left. Killed as a user's `kill -9 <pid>` or
  the OOM killer kills it: SIGKILL to its own process only, so that its children must end by themselves."""

  def __init__(self, name: str, args: argparse.Namespace, work_dir: str):
    super().__init__(name, args, work_dir)
    self.final_step, self.final_outputs = None, ()

  def command(self, trial_dir: str) -> list[str]:
    output_dir = os.path.join(trial_dir, "out")
    if self.name == "create_pretraining_data":
      return records_command(self.args, output_dir)
    return convert_command(output_dir) if self.name == "convert" else export_command(output_dir)

  def published(self, output_dir: str) -> bool:
    """Whether the command's output is in place (what a user would take for a finished run's)."""
    if self.name == "create_pretraining_data":
      return os.path.exists(os.path.join(output_dir, RECORDS_NAME))
    if self.name == "convert":
      return os.path.isdir(output_dir)  # written under a hidden name beside it, then renamed whole
    return bool(_versions(os.path.join(output_dir, EXPORT_NAME)))

  def read(self, output_dir: str) -> dict[str, Any]:
    """{label: bytes | str | {name: array}}: files' bytes, texts, tensors; "missing: ..." for what is not there."""
    if self.name == "create_pretraining_data":
      records = os.path.join(output_dir, RECORDS_NAME)
      return {RECORDS_NAME: _file_bytes(records), "statistics": _stats_text(records + ".stats.json")}
    if self.name == "convert":
      out: dict[str, Any] = {}
      for path in _files_under(output_dir):
        out[path] = _file_bytes(os.path.join(output_dir, path))
        if path.endswith(".safetensors"):  # its tensors too: were its bytes to differ, are the weights the same?
          out[f"{path} tensors"] = _safetensors_tensors(os.path.join(output_dir, path))
      return out or {"output": f"missing: no file under {output_dir}"}
    model_dir = os.path.join(output_dir, EXPORT_NAME)
    versions = _versions(model_dir)
    out = {"versions published": ",".join(versions) or "none"}
    if len(versions) == 1:
      version = os.path.join(model_dir, versions[0])
      for path in _files_under(os.path.join(version, "assets.extra")):
        out[f"assets.extra/{path}"] = _file_bytes(os.path.join(version, "assets.extra", path))
      try:
        with open(os.path.join(version, "assets.extra", "bert_tf_manifest.json"), encoding="utf-8") as f:
          out["fingerprint"] = str(json.load(f).get("fingerprint"))
      except (OSError, ValueError) as e:
        out["fingerprint"] = f"missing: {e}"
      try:
        out["variables"] = _served_variables(os.path.join(version, "variables", "variables"))
      except Exception as e:  # pylint: disable=broad-except  # a missing or corrupt output is a finding
        out["variables"] = f"unreadable: {type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''}"
    return out

  def compare(self, reference: dict[str, Any], trial: dict[str, Any]) -> dict:
    """-> {"identical", "differences"}: bytes and texts equal, tensors bit for bit (`compare`)."""
    differences = []
    for label in sorted(set(reference) | set(trial)):
      ref, got = reference.get(label), trial.get(label)
      if ref is None or got is None:
        differences.append(f"{label}: only in the {'reference' if got is None else 'trial'}")
      elif isinstance(ref, dict) and isinstance(got, dict):
        differences += compare({label: ref}, {label: got})["differences"]
      elif isinstance(ref, bytes) and isinstance(got, bytes):
        if ref != got:
          at = next((i for i, (a, b) in enumerate(zip(ref, got)) if a != b), min(len(ref), len(got)))
          differences.append(f"{label}: {len(got):,} bytes against the reference's {len(ref):,}, first difference "
                             f"at byte {at:,}")
      elif ref != got:
        differences.append(f"{label}: reference {_shown(ref)}, trial {_shown(got)}")
    return {"identical": not differences, "differences": differences}

  def trial(self, trial_dir: str, kill_after: float, reference: dict) -> dict:
    """Start, SIGKILL its own process after `kill_after` s, check that its children end and its output pipe
    closes within ORPHAN_GRACE_S, note what is on disk, rerun to the end, compare with `reference`."""
    self.fresh(trial_dir)
    work, out = self.work_dir, os.path.join(self.work_dir, trial_dir, "out")
    record: dict[str, Any] = {"trial_dir": trial_dir, "kill_after_s": round(kill_after, 2),
                              "newest_checkpoint_step": None, "resumed": None, "stdout_closed": None,
                              "stdout_closed_after_s": None}
    outside_before = _outside_names()
    started = time.monotonic()
    process, reader = _start_piped(self.command(trial_dir), work, os.path.join(trial_dir, "kill.log"))
    try:
      rc = process.wait(timeout=kill_after)
    except subprocess.TimeoutExpired:
      rc = None
    record["killed"] = rc is None
    if rc is None:
      # How many there were (the command, its workers, multiprocessing's resource tracker): which ones must end.
      record["processes_at_kill"] = len(session_processes(process.pid))
      os.kill(process.pid, signal.SIGKILL)  # its own process only: the children must follow by themselves
      killed_at = time.monotonic()
      rc = process.wait()
      record["session_ended_after_s"], record["alive_after_kill"] = wait_for_session_end(process.pid)
      reader.join(timeout=max(0.0, killed_at + ORPHAN_GRACE_S - time.monotonic()))
      record["stdout_closed"] = not reader.is_alive()
      record["stdout_closed_after_s"] = round(reader.closed_at - killed_at, 2) if reader.closed_at else None
    else:  # it ended by itself: its children must be gone as well
      record["session_ended_after_s"], record["alive_after_kill"] = wait_for_session_end(process.pid)
    reader.join()  # any survivor was killed: the pipe ends now
    process.stdout.close()
    record["first_run_s"] = round(time.monotonic() - started, 2)
    record["first_run_rc"] = rc
    record["first_run_pid"] = process.pid
    record["temporaries_at_kill"] = find_temporaries(os.path.join(work, trial_dir))
    if not record["killed"]:
      record["state"] = "ended before kill" if rc == 0 else f"failed before kill (exit {rc})"
    elif self.published(out):
      record["state"] = "output in place"
    else:
      record["state"] = "temporaries only" if record["temporaries_at_kill"] else "nothing written"

    rerun = run_to_end(self.command(trial_dir), work, os.path.join(trial_dir, "rerun.log"), self.args.rerun_timeout)
    record["rerun_rc"] = rerun["rc"]
    record["rerun_s"] = rerun["seconds"]
    record["alive_after_rerun"] = rerun["left_alive"]
    record.update({f"rerun_{k}": v for k, v in _log_facts(os.path.join(work, trial_dir, "rerun.log")).items()})
    record["finished"] = rerun["rc"] == 0
    if not record["finished"]:
      record["rerun_error"] = rerun["last_line"] if rerun["rc"] is not None else "timed out"
    record["leftovers"] = find_temporaries(os.path.join(work, trial_dir))
    record["outside_leftovers"] = outside_leftovers(outside_before, (process.pid, rerun["pid"]))
    if record["finished"]:
      record.update(self.compare(reference, self.read(out)))
    else:
      record["identical"] = None
    return record


def _served_variables(prefix: str) -> dict[str, Any]:
  """A SavedModel's variables by "<name> (<checkpoint key>)", less Keras' seed-generator states: the checkpoint keys
  them by object path (model_variables/<n>), and only the object graph it holds gives each one's variable name."""
  import numpy as np
  import tensorflow as tf
  from tensorflow.core.protobuf import trackable_object_graph_pb2

  reader = tf.train.load_checkpoint(prefix)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  attributes = [a for node in graph.nodes for a in node.attributes
                if a.name == "VARIABLE_VALUE" and a.full_name.rsplit("/", 1)[-1] != "seed_generator_state"]
  return {f"{a.full_name} ({a.checkpoint_key.split('/.ATTRIBUTES')[0]})":
          np.asarray(reader.get_tensor(a.checkpoint_key)) for a in attributes}


def _versions(model_dir: str) -> list[str]:
  """The numeric folders of a served model's folder (what TF Serving loads), in order."""
  try:
    return sorted((n for n in os.listdir(model_dir) if n.isdigit()), key=int)
  except OSError:
    return []


def _files_under(directory: str) -> list[str]:
  """Every file under `directory`, relative to it, sorted."""
  found = []
  for root, _, files in os.walk(directory):
    found += [os.path.relpath(os.path.join(root, name), directory) for name in files]
  return sorted(found)


def _file_bytes(path: str) -> bytes | str:
  try:
    with open(path, "rb") as f:
      return f.read()
  except OSError as e:
    return f"missing: {e.strerror}"


# The statistics file's fields that differ between two runs of one command: its timings, and paths that name
# the trial's folder.
_STATS_VARYING = ("elapsed_seconds", "instances_per_second", "output_files", "stats_file")


def _stats_text(path: str) -> str:
  try:
    with open(path, encoding="utf-8") as f:
      stats = json.load(f)
  except (OSError, ValueError) as e:
    return f"missing: {e}"
  return json.dumps({k: v for k, v in stats.items() if k not in _STATS_VARYING}, sort_keys=True)


def _safetensors_tensors(path: str) -> dict[str, Any] | str:
  from bert_tf.model import convert

  try:
    return convert.read_safetensors(path)
  except Exception as e:  # pylint: disable=broad-except  # a truncated file is a finding
    return f"unreadable: {type(e).__name__}: {e}"


def _shown(value: Any) -> str:
  text = value if isinstance(value, str) else repr(value)
  return text if len(text) <= 120 else f"{text[:80]} ... {text[-30:]}"


class _PipeReader(threading.Thread):
  """Copies a command's output pipe into its log; ends at the pipe's end, when no process holds it any more."""

  def __init__(self, pipe, log_path: str):
    super().__init__(daemon=True)
    self.pipe, self.log_path, self.closed_at = pipe, log_path, None

  def run(self) -> None:
    with open(self.log_path, "wb") as log:
      while chunk := os.read(self.pipe.fileno(), 1 << 16):
        log.write(chunk)
        log.flush()
    self.closed_at = time.monotonic()


def _start_piped(command: list[str], work_dir: str, log_path: str) -> tuple[subprocess.Popen, _PipeReader]:
  """`command` in a new session, its stdout and stderr one pipe that a thread copies into `log_path`: a caller that
  reads a command's output waits for the pipe's end, which a child left running holds back."""
  process = subprocess.Popen(command, cwd=work_dir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=_env(),
                             start_new_session=True)
  reader = _PipeReader(process.stdout, os.path.join(work_dir, log_path))
  reader.start()
  return process, reader


def _outside_names() -> set[str]:
  """Names of shard folders in the machine's temporary folder (create_pretraining_data puts them there when its
  output is remote)."""
  try:
    return {n for n in os.listdir(tempfile.gettempdir()) if "bert_tf_shards" in n}
  except OSError:
    return set()


def outside_leftovers(before: set[str], pids: Sequence[int]) -> list[str]:
  """What a trial's processes `pids` left outside the trial: shard folders new in the temporary folder since
  `before`, and files in bert_tf's cache folder named after one of them (`.tmp-<pid>`, `owner-<machine>-<pid>`)."""
  from bert_tf import fileio

  found = [os.path.join(tempfile.gettempdir(), n) for n in sorted(_outside_names() - before)]
  named = re.compile(r"(tmp-|owner-[0-9a-f]+-)(" + "|".join(str(p) for p in pids if p) + r")$")
  for root, dirs, files in os.walk(fileio.cache_dir()):
    found += [os.path.join(root, n) for n in sorted(dirs + files) if named.search(n)]
  return found


def resumed(record: dict, final_step: int) -> bool | None:
  """Whether the rerun went on from the newest checkpoint the killed run left (None: there was none).

  Every loop logs a step (--log_steps = --steps_per_loop = --save_checkpoints_steps), so a rerun that resumes
  from checkpoint k logs no step <= k - and none at all when k is the last step; one that logs a step <= k
  started over (ending with the same weights all the same, since the command is deterministic)."""
  k = record["newest_checkpoint_step"]
  if k is None:
    return None
  first = record.get("rerun_first_logged_step")
  if first is None:
    return record.get("rerun_rc") == 0 and k >= final_step
  return first > k


def run_workload(workload: Workload, args: argparse.Namespace, rng: random.Random, say) -> dict:
  name = workload.name
  say(f"== {name}: reference run")
  reference_run = workload.uninterrupted(os.path.join(name, "reference"))
  wall = reference_run["seconds"]
  reference = workload.read(os.path.join(workload.work_dir, name, "reference", "out"))
  skipped = _log_facts(os.path.join(workload.work_dir, name, "reference", "run.log")).get("skipped_updates")
  reference_run["skipped_updates"] = skipped
  compared = (f"compared: {', '.join(reference)}" if isinstance(workload, OneShot) else
              f"{sum(len(v) for v in reference.values() if isinstance(v, dict))} variables in {', '.join(reference)}")
  say(f"{name}: reference {wall:.1f} s, {compared}; leftovers {reference_run['leftovers'] or 'none'}"
      + ("" if skipped is None else f"; {skipped} updates skipped for non-finite gradients")
      + (f"; LEFT ALIVE after it ended: {reference_run['left_alive']}" if reference_run["left_alive"] else ""))
  result: dict[str, Any] = {"command": " ".join(workload.command(os.path.join(name, "trial-NN"))[1:]),
                            "final_step": workload.final_step, "reference": reference_run}
  if not args.no_control:
    say(f"== {name}: control run (uninterrupted again)")
    control_dir = os.path.join(name, "control")
    control = workload.uninterrupted(control_dir)
    control.update(workload.compare(reference, workload.read(os.path.join(workload.work_dir, control_dir, "out"))))
    result["control"] = control
    say(f"{name}: control {control['seconds']:.1f} s, bit-identical to the reference: {control['identical']}"
        + ("" if control["identical"] else f" ({'; '.join(control['differences'])})"))
    if control["identical"] and not control["leftovers"] and not args.keep_trials:
      shutil.rmtree(os.path.join(workload.work_dir, control_dir))
  # A draw that falls after the run has ended (runs vary in speed) kills nothing: it is counted as missed and
  # drawn again, so that --kills kills land on a live process (at most 3x --kills draws).
  trials, missed = [], []
  k = -1
  while len(trials) < args.kills and k + 1 < 3 * args.kills:
    k += 1
    kill_after = rng.uniform(0, args.kill_window * wall)
    trial_dir = os.path.join(name, f"trial-{k:02d}")
    record = workload.trial(trial_dir, kill_after, reference)
    if record["state"] == "ended before kill":
      missed.append(record)
      say(f"{name} draw {k + 1}: {kill_after:.1f} s came after the run ended ({record['state']}); drawn again")
      if not args.keep_trials:
        shutil.rmtree(os.path.join(workload.work_dir, trial_dir), ignore_errors=True)
      continue
    trials.append(record)
    verdict = ("identical" if record["identical"] else "DIFFERENT" if record["finished"]
               else f"RERUN FAILED ({record['rerun_error']})")
    if isinstance(workload, OneShot):
      alive = record["alive_after_kill"]
      say(f"{name} {len(trials)}/{args.kills}: killed at {kill_after:.1f} s ({record['state']}, temporaries "
          f"{len(record['temporaries_at_kill'])}); its session "
          + (f"ended after {record['session_ended_after_s']} s" if not alive else f"STILL HAD {len(alive)} "
             f"PROCESS(ES) after {ORPHAN_GRACE_S:.0f} s")
          + {True: f", its output pipe closed after {record['stdout_closed_after_s']} s",
             False: f", its output pipe STILL OPEN after {ORPHAN_GRACE_S:.0f} s", None: ""}[record["stdout_closed"]]
          + f"; rerun {record['rerun_s']:.1f} s: {verdict}; leftovers {record['leftovers'] or 'none'}"
          + (f"; OUTSIDE THE TRIAL {record['outside_leftovers']}" if record["outside_leftovers"] else "")
          + (f"; the rerun left alive {record['alive_after_rerun']}" if record["alive_after_rerun"] else ""))
      for line in alive:
        say(f"    alive: {line}")
    else:
      how = {None: "", True: "resumed, ", False: "STARTED OVER, "}[record["resumed"]]
      say(f"{name} {len(trials)}/{args.kills}: killed at {kill_after:.1f} s ({record['state']}, newest checkpoint "
          f"{record['newest_checkpoint_step']}, temporaries {len(record['temporaries_at_kill'])}); rerun "
          f"{record['rerun_s']:.1f} s, {how}first step logged {record.get('rerun_first_logged_step', '-')}: "
          f"{verdict}; leftovers {record['leftovers'] or 'none'}"
          + ("" if "rerun_skipped_updates" not in record else f"; skipped updates {record['rerun_skipped_updates']}"))
    if not record["identical"]:
      for line in record.get("differences", []):
        say(f"    {line}")
    finding = (not record["identical"] or record["leftovers"] or record["resumed"] is False
               or record.get("alive_after_kill") or record.get("stdout_closed") is False
               or record.get("outside_leftovers") or record.get("alive_after_rerun"))
    if not finding and not args.keep_trials:
      shutil.rmtree(os.path.join(workload.work_dir, trial_dir))
  result["trials"] = trials
  result["missed_draws"] = missed
  result["summary"] = dict(summarize(trials), missed_draws=len(missed))
  return result


def _kinds(texts) -> dict[str, int]:
  """Counts of `texts` with numbers and hex names replaced by <n> / <hex> (ckpt-<n>_temp/, .x.tmp-<hex>)."""
  counts: dict[str, int] = {}
  for text in texts:
    kind = re.sub(r"\d+", "<n>", re.sub(r"[0-9a-f]{8,}", "<hex>", text))
    counts[kind] = counts.get(kind, 0) + 1
  return counts


def summarize(trials: list[dict]) -> dict:
  states: dict[str, int] = {}
  for t in trials:
    key = t["state"] if not t["state"].startswith("failed") else "failed before kill"
    states[key] = states.get(key, 0) + 1
  return {
      "trials": len(trials),
      "finished": sum(t["finished"] for t in trials),
      "bit_identical": sum(bool(t["identical"]) for t in trials),
      "with_leftovers": sum(bool(t["leftovers"]) for t in trials),
      "reruns_failed": sum(not t["finished"] for t in trials),
      "with_checkpoint_at_kill": sum(t["resumed"] is not None for t in trials),
      "resumed": sum(t["resumed"] is True for t in trials),
      "started_over": sum(t["resumed"] is False for t in trials),
      "states_at_kill": states,
      "leftover_kinds": _kinds(path for t in trials for path in t["leftovers"]),
      "rerun_errors": sorted({t["rerun_error"] for t in trials if not t["finished"]}),
      "reruns_taking_over_a_lock": sum(any("lock" in w for w in t.get("rerun_warnings", [])) for t in trials),
      "rerun_warning_kinds": _kinds(w[:60] for t in trials for w in t.get("rerun_warnings", [])),
      # One-shot workloads (OneShot.trial); 0 for the others.
      "with_processes_alive": sum(bool(t.get("alive_after_kill")) for t in trials),
      "with_output_pipe_open": sum(t.get("stdout_closed") is False for t in trials),
      "slowest_session_end_s": max((t["session_ended_after_s"] for t in trials
                                    if t.get("session_ended_after_s") is not None), default=None),
      "with_outside_leftovers": sum(bool(t.get("outside_leftovers")) for t in trials),
      "reruns_leaving_processes": sum(bool(t.get("alive_after_rerun")) for t in trials),
      "temporary_kinds_at_kill": _kinds(path for t in trials for path in t.get("temporaries_at_kill", [])),
      "processes_at_kill": {n: sum(t.get("processes_at_kill") == n for t in trials)
                            for n in sorted({t["processes_at_kill"] for t in trials if "processes_at_kill" in t})},
  }


def markdown(report: dict) -> str:
  training = {k: w for k, w in report["workloads"].items() if k in TRAINING_WORKLOADS}
  one_shot = {k: w for k, w in report["workloads"].items() if k in ONE_SHOT_WORKLOADS}
  lines = []
  if training:
    lines += ["| workload | reference s | control identical | trials | finished | bit-identical | with leftovers | "
              "reruns failed | resumed / had a checkpoint | states at kill | missed draws |",
              "|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, w in training.items():
    s = w["summary"]
    control = w.get("control", {}).get("identical", "-")
    states = ", ".join(f"{k} {v}" for k, v in s["states_at_kill"].items())
    lines.append(f"| {name} | {w['reference']['seconds']:.1f} | {control} | {s['trials']} | {s['finished']} | "
                 f"{s['bit_identical']} | {s['with_leftovers']} | {s['reruns_failed']} | "
                 f"{s['resumed']} / {s['with_checkpoint_at_kill']} | {states} | {s.get('missed_draws', 0)} |")
  if one_shot:
    lines += [""] if lines else []
    lines += ["| workload | reference s | control identical | kills landed | reruns finished | identical | with "
              "leftovers | processes alive 5 s after the kill | output pipe open 5 s after | left outside the trial | "
              "slowest end of the session s | states at kill | missed draws |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
  for name, w in one_shot.items():
    s = w["summary"]
    control = w.get("control", {}).get("identical", "-")
    states = ", ".join(f"{k} {v}" for k, v in s["states_at_kill"].items())
    lines.append(f"| {name} | {w['reference']['seconds']:.1f} | {control} | {s['trials']} | {s['finished']} | "
                 f"{s['bit_identical']} | {s['with_leftovers']} | {s['with_processes_alive']} | "
                 f"{s['with_output_pipe_open']} | {s['with_outside_leftovers']} | {s['slowest_session_end_s']} | "
                 f"{states} | {s.get('missed_draws', 0)} |")
  for name, w in one_shot.items():
    s = w["summary"]
    if s["processes_at_kill"]:
      lines.append(f"\n{name} processes in the command's session at the kills: " + ", ".join(
          f"{n} ({count} kill{'s' if count > 1 else ''})" for n, count in s["processes_at_kill"].items()))
    if s["temporary_kinds_at_kill"]:
      lines.append(f"\n{name} temporaries at the kills (trials): " + ", ".join(
          f"`{k}` ({v})" for k, v in s["temporary_kinds_at_kill"].items()))
    alive = [t for t in w["trials"] if t.get("alive_after_kill") or t.get("alive_after_rerun")]
    if alive:
      lines.append(f"\n{name} processes alive {ORPHAN_GRACE_S:.0f} s after the command ended: " + "; ".join(
          f"{t['trial_dir']}: {' / '.join(t.get('alive_after_kill', []) + t.get('alive_after_rerun', []))}"
          for t in alive))
    outside = [t for t in w["trials"] if t.get("outside_leftovers")]
    if outside:
      lines.append(f"\n{name} left outside the trial: " + "; ".join(
          f"{t['trial_dir']}: {', '.join(t['outside_leftovers'])}" for t in outside))
  for name, w in report["workloads"].items():
    s = w["summary"]
    if s["leftover_kinds"]:
      lines.append(f"\n{name} leftovers (trials): " + ", ".join(f"`{k}` ({v})" for k, v in s["leftover_kinds"].items()))
    if s["rerun_warning_kinds"]:
      lines.append(f"\n{name} reruns' warnings (trials): " + ", ".join(
          f"`{k}...` ({v})" for k, v in s["rerun_warning_kinds"].items()))
    if s["rerun_errors"]:
      lines.append(f"\n{name} rerun errors: " + "; ".join(f"`{e}`" for e in s["rerun_errors"]))
    over = [t for t in w["trials"] if t["resumed"] is False]
    if over:
      lines.append(f"\n{name} reruns that started over instead of resuming: " + "; ".join(
          f"{t['trial_dir']} (checkpoint {t['newest_checkpoint_step']} on disk, first step logged "
          f"{t.get('rerun_first_logged_step')})" for t in over))
    different = [t for t in w["trials"] if t["finished"] and not t["identical"]]
    if different:
      lines.append(f"\n{name} trials with different weights: " + "; ".join(
          f"{t['trial_dir']} (killed at {t['kill_after_s']} s, {t['state']}): {' / '.join(t['differences'])}"
          for t in different))
  return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # this process reads checkpoints with TensorFlow
  if args.loss_scale_growth_steps is not None:  # the commands inherit it (_env)
    os.environ["BERT_TF_LOSS_SCALE_GROWTH_STEPS"] = str(args.loss_scale_growth_steps)
  work_dir = os.path.abspath(args.work_dir)
  started = time.monotonic()

  def say(line: str) -> None:
    print(f"[{time.monotonic() - started:7.1f} s] {line}", flush=True)

  loadavg_before = [round(x, 2) for x in os.getloadavg()]
  say(f"work dir {work_dir}; load average {loadavg_before}; {os.cpu_count()} cores")
  setup = set_up(work_dir, say)
  say(f"set-up: {setup}")
  rng = random.Random(args.seed)
  report: dict[str, Any] = {
      "date": datetime.datetime.now().isoformat(timespec="seconds"), "argv": sys.argv[1:], "work_dir": work_dir,
      "setup": setup, "dtype": args.dtype, "loss_scale_growth_steps": args.loss_scale_growth_steps,
      "machine": {"cores": os.cpu_count(), "loadavg_before": loadavg_before}, "workloads": {}}
  pretraining = Workload("pretraining", args, work_dir)
  init_checkpoint = os.path.join("pretraining", "reference", "out")
  if "pretraining" in args.workloads:
    report["workloads"]["pretraining"] = run_workload(pretraining, args, rng, say)
  for name in ("finetuning", "finetuning_eval"):
    if name not in args.workloads:
      continue
    if not os.path.exists(os.path.join(work_dir, init_checkpoint, "encoder_checkpoint")):
      say("== the pretraining reference, to fine-tune from")
      pretraining.uninterrupted(os.path.join("pretraining", "reference"))
    finetuning = Workload(name, args, work_dir, init_checkpoint, setup["task_examples"]["train"])
    report["workloads"][name] = run_workload(finetuning, args, rng, say)
  for name in ONE_SHOT_WORKLOADS:
    if name not in args.workloads:
      continue
    # convert reads the pretraining reference; export the fine-tuning one, which starts from it.
    if name in ("convert", "export") and not os.path.exists(os.path.join(work_dir, init_checkpoint,
                                                                         "encoder_checkpoint")):
      say("== the pretraining reference, to convert and fine-tune from")
      pretraining.uninterrupted(os.path.join("pretraining", "reference"))
    if name == "export" and not os.path.exists(os.path.join(work_dir, CLASSIFIER)):
      say("== the fine-tuning reference, to export")
      Workload("finetuning", args, work_dir, init_checkpoint, setup["task_examples"]["train"]).uninterrupted(
          os.path.join("finetuning", "reference"))
    report["workloads"][name] = run_workload(OneShot(name, args, work_dir), args, rng, say)
  report["machine"]["loadavg_after"] = [round(x, 2) for x in os.getloadavg()]
  report["elapsed_s"] = round(time.monotonic() - started, 1)
  table = markdown(report)
  print(json.dumps({**report, "workloads": {k: {**v, "trials": f"{len(v['trials'])} (see --json)"}
                                            for k, v in report["workloads"].items()}}, indent=2, default=str))
  print()
  print(table)
  if args.json:
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "w") as f:
      json.dump(report, f, indent=2, default=str)
    with open(os.path.splitext(args.json)[0] + ".md", "w") as f:
      f.write(table + "\n")
  bad = any(t["finished"] is False or t["identical"] is False or t["resumed"] is False or t.get("alive_after_kill")
            or t.get("stdout_closed") is False for w in report["workloads"].values() for t in w["trials"])
  return 1 if bad else 0


if __name__ == "__main__":
  sys.exit(main())
