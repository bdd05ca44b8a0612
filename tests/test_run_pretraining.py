"""scripts/run_pretraining.py end to end: a smoke run, and runs killed (SIGKILL) and preempted (SIGTERM) that a
rerun of the same command resumes to the very weights of an uninterrupted run."""

import concurrent.futures
import functools
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th

STEPS = 8
SCRIPT = os.path.join(th.REPO, "scripts", "run_pretraining.py")
HELPER = os.path.join(th.REPO, "tests", "interrupted_run.py")
FSIZE_BYTES = 8192  # below one checkpoint's data file (asserted), above everything else the run writes


# Evaluation during training and at the end: it must leave killed and resumed runs bit-identical.
EVAL_FLAGS = ["--do_train", "--do_eval", "--eval_every_steps=4", "--max_eval_steps=2", "--eval_batch_size=5"]


def _flags(out, data="data/records-*.tfrecord", config="bert_config.json", actions=tuple(EVAL_FLAGS)):
  # Relative paths, as users type them: the runs start in the test's directory.
  return [f"--input_file={data}", f"--output_dir={out}", f"--bert_config_file={config}",
          f"--max_seq_length={th.T}", f"--max_predictions_per_seq={th.P}", "--train_batch_size=6",
          f"--num_train_steps={STEPS}", "--num_warmup_steps=2", "--save_checkpoints_steps=3", "--steps_per_loop=1",
          "--log_steps=2", "--distribution_strategy=one_device", "--deterministic", "--seed=5", *actions]


def _start(cwd, args, **env):
  return subprocess.Popen([sys.executable, *args], cwd=cwd, env=th.python_env(**env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=200):
  output, _ = process.communicate(timeout=timeout)
  return process.returncode, output


def _weights(prefix):
  reader = tf.train.load_checkpoint(prefix)
  # Model and optimizer variables (slots included); not the iterator's serialized state or the save counter.
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.endswith("VARIABLE_VALUE") and not name.startswith(("iterator", "save_counter"))}


LEFTOVERS = ["interrupted/checkpoints/ckpt-9_temp/part-00000-of-00001.data-00000-of-00001.tempstate1",
             "interrupted/checkpoints/ckpt-7.data-00000-of-00001",  # data without its index
             "interrupted/checkpoints/checkpoint.tmp0f1e2d3c",
             "interrupted/.encoder_savedmodel.tmp-0123abcd/saved_model.pb",
             "interrupted/.encoder_checkpoint.tmp-89abcdef/encoder.index"]


def _uninterrupted_then_disk_full(root) -> dict:
  """The uninterrupted run into whole/; then a run whose disk fills up at its second checkpoint, and its rerun,
  into diskfull/."""
  steps = {"whole": _finish(_start(root, [SCRIPT, *_flags("whole")]))}
  steps["whole_eval_results"] = (root / "whole" / "eval_results.txt").read_text()
  # google-research's evaluation alone, of the finished run's newest checkpoint.
  steps["eval_only"] = _finish(_start(root, [SCRIPT, *_flags("whole", actions=EVAL_FLAGS[1:2] + EVAL_FLAGS[3:])]))
  steps["full"] = _finish(_start(root, [HELPER, *_flags("diskfull")], INTERRUPT_AT_STEP=4, INTERRUPT_SIGNAL="FSIZE",
                                 FSIZE_BYTES=FSIZE_BYTES))
  steps["full_checkpoints"] = sorted(os.listdir(root / "diskfull" / "checkpoints"))
  steps["full_rerun"] = _finish(_start(root, [SCRIPT, *_flags("diskfull")]))
  return steps


def _interrupted_then_rerun(root) -> dict:
  """Into interrupted/: preempted at step 2, Ctrl-C at step 4, SIGKILL at step 7, then rerun over leftovers."""
  steps = {}
  for kind, at in (("TERM", 2), ("INT", 4), ("KILL", 7)):
    steps[kind] = _finish(_start(root, [HELPER, *_flags("interrupted")], INTERRUPT_AT_STEP=at,
                                 INTERRUPT_SIGNAL=kind))
    steps[kind + "_checkpoints"] = sorted(os.listdir(root / "interrupted" / "checkpoints"))
    steps[kind + "_outputs"] = sorted(os.listdir(root / "interrupted"))
  for leftover in LEFTOVERS:
    os.makedirs(os.path.dirname(root / leftover), exist_ok=True)
    (root / leftover).write_bytes(b"partial")
  steps["rerun"] = _finish(_start(root, [SCRIPT, *_flags("interrupted")]))
  return steps


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """In one working directory, with relative paths: an uninterrupted run, then a run whose disk fills up at its
  second checkpoint, rerun; beside them (two cores) the same command preempted (SIGTERM) at step 2, stopped by
  Ctrl-C at step 4, killed (SIGKILL) at step 7 and rerun to the end over planted leftovers of interrupted saves."""
  root = tmp_path_factory.mktemp("run_pretraining")
  th.write_records(root / "data")
  th.tiny_bert_config(dropout=0.1).to_json_file(str(root / "bert_config.json"))  # dropout: its state resumes too
  # The disk-full pair needs nothing of the interrupted chain: it follows the short uninterrupted run on the second
  # core rather than the chain on the first, so the two cores share seven runs as four and three, not one and six.
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    beside = pool.submit(_uninterrupted_then_disk_full, root)
    steps = _interrupted_then_rerun(root)
    steps.update(beside.result())
  return root, steps


@pytest.mark.slow
def test_smoke_run_writes_checkpoints_summaries_and_the_encoder(runs):
  root, steps = runs
  rc, output = steps["whole"]
  assert rc == 0, output[-3000:]
  assert f"step {STEPS}/{STEPS}" in output and "mlm_accuracy" in output and "sequences_per_second" in output
  assert f"starting fresh in {root / 'whole' / 'checkpoints'}" in output
  assert "step 1/8  loss " in output and "(the first step took " in output  # progress from the first step
  assert "Sharding callback" not in output and "unsupported characters" not in output  # TensorFlow's INFO lines
  out = root / "whole"
  expected = {"bert_config.json", "run.json", "checkpoints", "encoder_checkpoint",
              "encoder_savedmodel", "train", "eval", "eval_results.txt"}
  assert set(os.listdir(out)) == expected  # the lock is gone with the run, no temporaries
  latest = tf.train.latest_checkpoint(str(out / "checkpoints"))
  assert latest.endswith(f"ckpt-{STEPS}")
  saved = tf.train.load_checkpoint(latest).get_variable_to_shape_map()
  assert any(name.startswith("model_state/") for name in saved)  # dropout seed states, for exact resumes
  assert "iterator/.ATTRIBUTES/ITERATOR_STATE" in saved
  tags = set()
  for event_file in tf.io.gfile.glob(str(out / "train" / "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(event_file):
      tags |= {v.tag for v in event.summary.value}
  assert {"loss", "mlm_loss", "mlm_accuracy", "nsp_accuracy", "learning_rate", "sequences_per_second"} <= tags

  evals = [line.split("eval at step ", 1)[1] for line in output.splitlines() if "eval at step " in line]
  assert [e.split(": ", 1)[0] for e in evals] == ["4", "8"], evals  # step 8 once: --do_eval takes it
  assert all(" masked_lm_accuracy " in e and "  loss " in e for e in evals), evals
  results = dict(line.split(" = ") for line in steps["whole_eval_results"].splitlines())
  assert list(results) == ["global_step", "loss", "masked_lm_accuracy", "masked_lm_loss", "next_sentence_accuracy",
                           "next_sentence_loss"] and results["global_step"] == str(STEPS)
  assert all(0 <= float(results[name]) <= 1 for name in ("masked_lm_accuracy", "next_sentence_accuracy"))
  eval_steps = {}
  for event_file in tf.io.gfile.glob(str(out / "eval" / "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(event_file):
      for value in event.summary.value:
        eval_steps.setdefault(value.tag, set()).add(event.step)
  assert eval_steps["eval/masked_lm_accuracy"] == {4, STEPS} and eval_steps["eval/next_sentence_loss"] == {4, STEPS}
  # --do_eval alone evaluates the newest checkpoint: the very numbers of the evaluation at the end of training.
  rc, output = steps["eval_only"]
  assert rc == 0, output[-3000:]
  assert f"evaluating {out / 'checkpoints' / f'ckpt-{STEPS}'}" in output and "step 1/" not in output
  assert (out / "eval_results.txt").read_text() == steps["whole_eval_results"]

  from bert_tf.model import checkpoints

  encoder = checkpoints.load_encoder(str(out))
  features = {"input_ids": tf.constant([[2, 7, 9, 3, 0]]), "input_mask": tf.constant([[1, 1, 1, 1, 0]]),
              "segment_ids": tf.zeros([1, 5], tf.int32)}
  served = tf.saved_model.load(str(out / checkpoints.ENCODER_SAVEDMODEL_DIR)).signatures["serving_default"](**features)
  np.testing.assert_allclose(served["pooled_output"], encoder(features)["pooled_output"], atol=1e-6)


def _assert_same_weights(root, run):
  whole = _weights(str(root / "whole" / "checkpoints" / f"ckpt-{STEPS}"))
  resumed = _weights(str(root / run / "checkpoints" / f"ckpt-{STEPS}"))
  assert whole.keys() == resumed.keys() and len(whole) > 10
  for name in whole:
    np.testing.assert_array_equal(resumed[name], whole[name], err_msg=name)


@pytest.mark.slow
def test_preempted_interrupted_and_killed_runs_resume_from_a_relative_output_dir_to_the_same_weights(runs):
  root, steps = runs
  checkpoints = root / "interrupted" / "checkpoints"
  rc, output = steps["TERM"]
  assert rc == 143, output[-3000:]
  assert "stopped at step 2 on request; saved " in output and "Traceback" not in output
  assert "ckpt-2.index" in steps["TERM_checkpoints"]  # saved on SIGTERM, off the every-3-steps schedule
  assert "encoder_checkpoint" not in steps["TERM_outputs"]  # the hand-off is for finished runs only
  rc, output = steps["INT"]
  assert rc == 130, output[-3000:]  # Ctrl-C: saved, exit 128 + SIGINT, no traceback
  assert f"resuming at step 2 from {checkpoints / 'ckpt-2'}" in output
  assert "received SIGINT: stopping after the current step" in output
  assert f"stopped at step 4 on request; saved {checkpoints / 'ckpt-4'}. Rerun the same command" in output
  assert "Traceback" not in output and "KeyboardInterrupt" not in output
  assert {"ckpt-3.index", "ckpt-4.index"} <= set(steps["INT_checkpoints"])
  rc, output = steps["KILL"]
  assert rc == -signal.SIGKILL, output[-3000:]
  assert "resuming at step 4" in output
  assert {"ckpt-4.index", "ckpt-6.index"} <= set(steps["KILL_checkpoints"])
  assert "ckpt-7.index" not in steps["KILL_checkpoints"]
  assert ".lock" in steps["KILL_outputs"]  # left by the killed run ...
  rc, output = steps["rerun"]
  assert rc == 0, output[-3000:]
  assert "taking over the lock of a run that is no longer alive" in output  # ... and taken over
  assert "resuming at step 6" in output
  for leftover in LEFTOVERS:  # removed, with a warning naming each
    top = leftover.split("/")[:3] if "/checkpoints/" in leftover else leftover.split("/")[:2]
    assert not os.path.exists(root.joinpath(*top)), leftover
    assert str(root.joinpath(*top)) in output, leftover
  assert ".lock" not in os.listdir(root / "interrupted")
  _assert_same_weights(root, "interrupted")


@pytest.mark.slow
def test_a_full_disk_stops_with_one_line_keeps_the_previous_checkpoint_and_the_rerun_resumes(runs):
  root, steps = runs
  rc, output = steps["full"]
  checkpoints = root / "diskfull" / "checkpoints"
  assert os.path.getsize(checkpoints / "ckpt-3.data-00000-of-00001") > FSIZE_BYTES  # the limit bites
  assert rc == 1, output[-3000:]
  errors = [line for line in output.splitlines() if line.startswith("error:")]
  assert len(errors) == 1 and "Traceback" not in output, output[-3000:]
  assert errors[0].startswith(f"error: no room to write checkpoint {checkpoints / 'ckpt-6'} (")
  assert "File too large" in errors[0] and " MiB free in " in errors[0]
  assert f"the previous checkpoint {checkpoints / 'ckpt-3'} is intact" in errors[0]
  assert not [n for n in steps["full_checkpoints"] if n.startswith("ckpt-6")]  # no partial files
  assert {"ckpt-3.index", "checkpoint"} <= set(steps["full_checkpoints"])
  rc, output = steps["full_rerun"]
  assert rc == 0, output[-3000:]
  assert "resuming at step 3" in output
  _assert_same_weights(root, "diskfull")


def _locked_output_dir(directory):
  """A run on busy/, whose lock names this live test process: it must be refused."""
  import json
  import socket

  from bert_tf import fileio

  th.write_records(directory / "data", num_files=1, per_file=2)
  th.tiny_bert_config().to_json_file(str(directory / "bert_config.json"))
  os.makedirs(directory / "busy")
  holder = {"host": socket.gethostname(), "pid": os.getpid(), "started": "2026-11-23T10:00:00",
            "process_start": fileio.process_start(os.getpid()), "heartbeat": 0}  # this live test process
  (directory / "busy" / ".lock").write_text(json.dumps(holder))
  return lambda: subprocess.run([sys.executable, SCRIPT, *_flags("busy")], cwd=directory, env=th.python_env(),
                                capture_output=True, text=True, timeout=200)


def _bad_flags(directory):
  data = th.write_records(directory / "data", num_files=1, per_file=2)
  config = str(directory / "bert_config.json")
  th.tiny_bert_config().to_json_file(config)
  flags = [f"--input_file={data}", f"--output_dir={directory / 'out'}", f"--bert_config_file={config}",
           "--max_seq_length=12", f"--max_predictions_per_seq={th.P}"]
  return lambda: th.run_python([SCRIPT, *flags])


# max_position_embeddings per case: below the flag's length, below the records', enough but no --dynamic_masking.
POSITIONS = {"flag": th.T + 3, "records": th.T - 1, "whole_word_mask": th.T + 3}
LENGTH_CASES = tuple(POSITIONS)


def _too_long(directory, case):
  data = th.write_records(directory / "data", num_files=1, per_file=2)  # records of length T = 13
  config = str(directory / "bert_config.json")
  bert_config = th.tiny_bert_config()
  bert_config.max_position_embeddings = POSITIONS[case]
  bert_config.to_json_file(config)
  flags = [f"--input_file={data}", f"--output_dir={directory / 'out'}", f"--bert_config_file={config}",
           f"--max_predictions_per_seq={th.P}", "--distribution_strategy=one_device"]
  flags += {"flag": [f"--max_seq_length={th.T + 4}"], "records": [f"--max_seq_length={th.T - 1}"],
            "whole_word_mask": [f"--max_seq_length={th.T}", "--do_whole_word_mask"]}[case]
  return lambda: th.run_python([SCRIPT, *flags])


@pytest.fixture(scope="module")
def refused(tmp_path_factory):
  """{case: (its folder, the finished run)} for the runs that must stop before writing anything, each prepared in
  its own folder and run two at a time: each is a TensorFlow start-up that needs nothing of the others."""
  runs = {}
  for case, prepare in {"locked": _locked_output_dir, "bad_flags": _bad_flags,
                        **{case: functools.partial(_too_long, case=case) for case in LENGTH_CASES}}.items():
    directory = tmp_path_factory.mktemp(case)
    runs[case] = (directory, prepare(directory))
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    started = {case: pool.submit(run) for case, (_, run) in runs.items()}
    return {case: (runs[case][0], started[case].result()) for case in runs}


def test_a_second_run_on_a_locked_output_dir_is_refused_naming_the_holder(refused):
  import socket

  directory, result = refused["locked"]
  assert result.returncode == 1, result.stderr[-2000:]
  assert (f"error: {directory / 'busy'} is in use by another run (host {socket.gethostname()}, pid {os.getpid()}, "
          "started 2026-11-23T10:00:00)") in result.stderr, result.stderr[-2000:]
  assert os.listdir(directory / "busy") == [".lock"]  # nothing written, the holder's lock untouched


def test_bad_flags_exit_1_with_a_message_naming_the_flag(refused):
  _, result = refused["bad_flags"]
  assert result.returncode == 1
  assert "error:" in result.stderr and "--max_seq_length=13" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("case", LENGTH_CASES)
def test_lengths_over_the_position_embeddings_and_static_whole_word_masking_exit_1(refused, case):
  directory, result = refused[case]
  config, positions = str(directory / "bert_config.json"), POSITIONS[case]
  assert result.returncode == 1, result.stderr[-2000:]
  expected = {
      "flag": f"error: --max_seq_length={th.T + 4} exceeds max_position_embeddings={positions} in {config}: ",
      "records": f"records have max_seq_length {th.T}, which exceeds max_position_embeddings={positions} in "
                 f"{config}: ",
      "whole_word_mask": "error: --do_whole_word_mask needs --dynamic_masking: "}[case]
  assert expected in result.stderr, result.stderr[-2000:]
  assert not os.path.exists(directory / "out")  # failed before anything was written


# mixed_float16 (issue 32, section 3): a loss scale that doubles after every 2 finite updates (Keras: 2000) soon
# overflows float16, and halves on a skipped update; a run killed between a skip and the next doubling resumes to
# the uninterrupted run's very weights, optimizer state, loss scale and count of skipped updates.
FP16_STEPS = 12
FP16_ENV = {"BERT_TF_LOSS_SCALE_GROWTH_STEPS": "2"}


def _fp16_flags(out):
  return _flags(out, actions=("--do_train",)) + [
      "--dtype=mixed_float16", "--learning_rate=3e-3", f"--num_train_steps={FP16_STEPS}", "--log_steps=1",
      "--save_checkpoints_steps=2", "--keep_checkpoint_max=10"]


def _loss_scales(output) -> dict[int, tuple[float, int]]:
  """{step: (loss scale, updates skipped in that step)} from a run's progress lines (--log_steps=1)."""
  scales = {}
  for line in output.splitlines():
    if f"/{FP16_STEPS}  loss " in line and " loss_scale " in line:
      step = int(line.split("step ", 1)[1].split("/", 1)[0])
      skipped = int(float(line.split(" skipped_updates ", 1)[1].split()[0])) if " skipped_updates " in line else 0
      scales[step] = (float(line.split(" loss_scale ", 1)[1].split()[0]), skipped)
  return scales


@pytest.mark.slow
def test_a_float16_run_killed_between_a_skipped_update_and_the_next_doubling_resumes_bit_identically(tmp_path):
  th.write_records(tmp_path / "data")
  th.tiny_bert_config(dropout=0.1).to_json_file(str(tmp_path / "bert_config.json"))
  rc, whole = _finish(_start(tmp_path, [SCRIPT, *_fp16_flags("whole")], **FP16_ENV))
  assert rc == 0, whole[-3000:]
  scales = _loss_scales(whole)
  assert sorted(scales) == list(range(1, FP16_STEPS + 1)), whole[-3000:]
  skipped = [step for step, (_, n) in scales.items() if n]
  # The killed run's newest checkpoint: the first even step (checkpoints every 2) at or after the first skip.
  resume_at = skipped[0] + skipped[0] % 2
  assert resume_at <= FP16_STEPS - 3, scales  # room for a doubling after it
  assert any(scales[s][0] > scales[s - 1][0] for s in range(resume_at + 1, FP16_STEPS + 1)), scales
  total = len(skipped)
  assert f"mixed_float16: {total} of {FP16_STEPS} updates skipped for non-finite gradients" in whole

  rc, killed = _finish(_start(tmp_path, [HELPER, *_fp16_flags("resumed")], INTERRUPT_AT_STEP=resume_at + 1,
                              INTERRUPT_SIGNAL="KILL", **FP16_ENV))
  assert rc == -signal.SIGKILL, killed[-3000:]
  assert _loss_scales(killed) == {s: scales[s] for s in range(1, resume_at + 1)}  # killed before its line
  rc, rerun = _finish(_start(tmp_path, [SCRIPT, *_fp16_flags("resumed")], **FP16_ENV))
  assert rc == 0, rerun[-3000:]
  assert f"resuming at step {resume_at}" in rerun
  assert _loss_scales(rerun) == {s: scales[s] for s in range(resume_at + 1, FP16_STEPS + 1)}
  assert f"mixed_float16: {total} of {FP16_STEPS} updates skipped" in rerun  # the count went on from the checkpoint
  whole_weights = _weights(str(tmp_path / "whole" / "checkpoints" / f"ckpt-{FP16_STEPS}"))
  resumed = _weights(str(tmp_path / "resumed" / "checkpoints" / f"ckpt-{FP16_STEPS}"))
  assert whole_weights.keys() == resumed.keys()
  assert resumed["skipped_updates/.ATTRIBUTES/VARIABLE_VALUE"] == total
  # The loss scale (the progress line shows 4 digits) is among the variables compared.
  assert any(v.shape == () and v.dtype == np.float32 and float(f"{v:.4g}") == scales[FP16_STEPS][0]
             for v in whole_weights.values()), sorted(whole_weights)
  for name in whole_weights:
    np.testing.assert_array_equal(resumed[name], whole_weights[name], err_msg=name)


# Issue 40 (4): a damaged newest checkpoint stopped the resume with a traceback although the one before was intact.
DAMAGED = {"bad_index": {8: "index"}, "bad_data": {8: "data"}, "none_intact": {8: "index", 6: "data", 3: "index"}}


@pytest.mark.slow
def test_a_damaged_newest_checkpoint_is_set_aside_and_the_rerun_resumes_from_the_one_before_to_the_same_weights(runs):
  """Copies of the finished whole/ (checkpoints at steps 3, 6, 8), their newest checkpoint's index corrupt or its
  data file cut short, or every checkpoint damaged, rerun with the same command; and --do_eval alone on the last."""
  import shutil

  root, _ = runs
  files = {}
  for name, damage in DAMAGED.items():
    shutil.copytree(root / "whole", root / name)
    for step, how in damage.items():
      th.damage_checkpoint(root / name / "checkpoints" / f"ckpt-{step}", how)
    files[name] = {n: (root / name / "checkpoints" / n).read_bytes()
                   for n in os.listdir(root / name / "checkpoints")}
  runs = {name: _flags(name) for name in DAMAGED}
  runs["eval_only"] = _flags("none_intact", actions=EVAL_FLAGS[1:2] + EVAL_FLAGS[3:])  # reads, as the run beside it
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    results = dict(zip(runs, pool.map(lambda flags: _finish(_start(root, [SCRIPT, *flags])), runs.values())))

  for name, fault in (("bad_index", "ckpt-8.index: damaged (block checksum mismatch)"),
                      ("bad_data", "ckpt-8.data-00000-of-00001: damaged (truncated: Read less bytes than requested)")):
    rc, output = results[name]
    checkpoints = root / name / "checkpoints"
    assert rc == 0 and "Traceback" not in output, output[-3000:]
    said = [line.split(" ", 1)[1] for line in output.splitlines() if "damaged (" in line]
    assert said == [f"warning: {checkpoints}/{fault}; set ckpt-8 aside (renamed to ckpt-8.data-00000-of-00001.damaged, "
                    f"ckpt-8.index.damaged), resuming from {checkpoints / 'ckpt-6'}"], output[-3000:]
    assert f"resuming at step 6 from {checkpoints / 'ckpt-6'}, training to step {STEPS}" in output
    for n in ("ckpt-8.index", "ckpt-8.data-00000-of-00001"):  # renamed byte for byte, beside the new ckpt-8
      assert (checkpoints / f"{n}.damaged").read_bytes() == files[name][n], n
    assert tf.train.latest_checkpoint(str(checkpoints)) == str(checkpoints / f"ckpt-{STEPS}")
    _assert_same_weights(root, name)

  rc, output = results["none_intact"]
  checkpoints = root / "none_intact" / "checkpoints"
  assert rc == 1 and "Traceback" not in output, output[-3000:]
  assert [line for line in output.splitlines() if line.startswith("error:")] == [
      f"error: {checkpoints}: no checkpoint there can be read (ckpt-8: ckpt-8.index: block checksum mismatch; ckpt-6: "
      "ckpt-6.data-00000-of-00001: truncated: Read less bytes than requested; ckpt-3: ckpt-3.index: block checksum "
      "mismatch): start the run over with --overwrite_output_dir, or give another --output_dir"], output[-3000:]
  assert {n: (checkpoints / n).read_bytes() for n in os.listdir(checkpoints)} == files["none_intact"]  # untouched
  rc, output = results["eval_only"]  # --do_eval alone: the checkpoint it would evaluate
  assert rc == 1 and "Traceback" not in output, output[-3000:]
  assert [line for line in output.splitlines() if line.startswith("error:")] == [
      f"error: {checkpoints}/ckpt-8.index: damaged (block checksum mismatch); rerun the training command of "
      f"{root / 'none_intact'}, which sets the damaged checkpoint aside and resumes from the one before, or read an "
      "older ckpt-<step> beside it"], output[-3000:]
