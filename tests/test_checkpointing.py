"""bert_tf.training.checkpointing: the stop request while TensorFlow runs, a second Ctrl-C, the clean-up of
what interrupted saves leave behind, and damaged checkpoints set aside."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.errors import UserError
from bert_tf.training import checkpointing

# The main thread sits in one TensorFlow call that ends only when `stop` is set: only the watcher thread (which
# reads the wakeup fd) can set it, since Python signal handlers wait for the main thread to return to Python.
_BLOCKED_IN_TENSORFLOW = textwrap.dedent("""
    import os, signal, sys, threading, time
    import tensorflow as tf
    from bert_tf.training import checkpointing

    stop = tf.Variable(False)

    @tf.function
    def spin():
      return tf.while_loop(lambda i: tf.logical_not(stop.read_value()), lambda i: i + 1,
                           [tf.constant(0, tf.int64)])[0]

    spin.get_concrete_function()
    signals = [signal.SIG{sig}] * {times}
    def send():
      for s in signals:
        time.sleep(0.5)
        os.kill(os.getpid(), s)
    with checkpointing.TerminationSignal(on_request=lambda: stop.assign(True)) as t:
      threading.Thread(target=send, daemon=True).start()
      start = time.perf_counter()
      n = int(spin())
      print(f"returned after {{time.perf_counter() - start:.1f}} s, {{n}} iterations, signal {{t.signum}}")
      time.sleep(3)  # a second signal, if any, ends the process here
    print("exited the context")
""")


def _run_blocked(sig, times):
  return subprocess.run([sys.executable, "-c", _BLOCKED_IN_TENSORFLOW.format(sig=sig, times=times)],
                        env=th.python_env(), capture_output=True, text=True, timeout=120, cwd=th.REPO)


def test_a_signal_reaches_a_loop_blocked_in_tensorflow_and_the_context_ends_normally():
  for sig, number in (("INT", 2), ("TERM", 15)):
    result = _run_blocked(sig, 1)
    assert result.returncode == 0, result.stderr[-2000:]
    assert f", signal {number}\n" in result.stdout and "exited the context" in result.stdout, result.stdout
    seconds = float(result.stdout.split("returned after ")[1].split(" s")[0])
    assert seconds < 5, result.stdout  # the signal came at 0.5 s
    assert f"received SIG{sig}: stopping after the current step and saving a checkpoint" in result.stderr


def test_a_second_ctrl_c_exits_at_once_without_saving():
  result = _run_blocked("INT", 2)
  assert result.returncode == 130, (result.stdout, result.stderr[-2000:])
  assert "exited the context" not in result.stdout
  assert "SIGINT again: exiting now without saving; rerun the same command to resume" in result.stderr
  assert "Traceback" not in result.stderr


def test_remove_leftovers_takes_only_what_interrupted_saves_leave(tmp_path):
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  directory = tmp_path / "out" / "checkpoints"
  manager = checkpointing.Checkpointer(str(directory), strategy, v=tf.Variable([1.0, 2.0, 3.0]))
  manager.save(3)
  planted = ["ckpt-5_temp/part-00000-of-00001.data-00000-of-00001.tempstate7", "ckpt-6.data-00000-of-00001",
             "checkpoint.tmp1a2b3c4d", ".tmp-worker-1/ckpt-3.index"]
  for name in planted:
    os.makedirs(os.path.dirname(directory / name), exist_ok=True)
    (directory / name).write_bytes(b"x")
  kept = set(os.listdir(directory)) - {p.split("/")[0] for p in planted}
  assert kept == {"checkpoint", "ckpt-3.index", "ckpt-3.data-00000-of-00001"}
  removed = manager.remove_leftovers()
  assert sorted(os.path.basename(p) for p in removed) == sorted(
      [".tmp-worker-1", "checkpoint.tmp1a2b3c4d", "ckpt-5_temp", "ckpt-6.data-00000-of-00001"])
  assert set(os.listdir(directory)) == kept
  assert manager.latest() == str(directory / "ckpt-3")

  out = tmp_path / "out"
  for name in (".encoder_savedmodel.tmp-0123abcd", ".encoder_checkpoint.tmp-89abcdef"):
    os.makedirs(out / name)
  (out / ".eval_results.json.tmp-00ff00ff").write_text("{")
  (out / ".keep.tmp-notahexid").write_text("")  # not our temporaries' pattern
  removed = checkpointing.remove_export_leftovers(str(out))
  assert len(removed) == 3
  assert sorted(os.listdir(out)) == [".keep.tmp-notahexid", "checkpoints"]


def test_latest_reads_a_relative_directory_and_an_older_state_file_with_doubled_paths(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  manager = checkpointing.Checkpointer(os.path.join("run", "checkpoints"), strategy, v=tf.Variable(1.0))
  manager.save(4)
  assert manager.latest() == str(tmp_path / "run" / "checkpoints" / "ckpt-4")
  # What a relative --output_dir made before the fix: the state file names the path relative to the old cwd.
  (tmp_path / "run" / "checkpoints" / "checkpoint").write_text(
      'model_checkpoint_path: "run/checkpoints/ckpt-4"\nall_model_checkpoint_paths: "run/checkpoints/ckpt-4"\n')
  again = checkpointing.Checkpointer("run/checkpoints", strategy, v=tf.Variable(0.0))
  assert again.restore() == str(tmp_path / "run" / "checkpoints" / "ckpt-4")
  np.testing.assert_equal(again.checkpoint.v.numpy(), 1.0)


def test_an_in_graph_stop_ends_a_host_loop_after_the_step_in_flight(tmp_path):
  from bert_tf.tasks.pretraining.config import PretrainingConfig
  from bert_tf.tasks.pretraining.task import PretrainingTask
  from bert_tf.training import optimization, trainer

  data = th.write_records(tmp_path / "data", num_files=1, per_file=7)
  config = PretrainingConfig(
      input_file=data, output_dir=str(tmp_path / "out"), bert_config=th.tiny_bert_config(),
      max_seq_length=th.T, max_predictions_per_seq=th.P, train_batch_size=2, num_train_steps=50,
      num_warmup_steps=0, distribution_strategy="one_device")
  run = trainer.Trainer(PretrainingTask(config), tf.distribute.OneDeviceStrategy("/cpu:0"),
                        lambda: optimization.create_optimizer("adamw", 1e-4, 50, 0), config.trainer_config())
  _, done = run._loop_fn(run.iterator, tf.constant(5))
  assert int(done) == 5
  run._stop.assign(True)
  _, done = run._loop_fn(run.iterator, tf.constant(40))
  assert int(done) == 1  # at least one step, then the stop


def test_damaged_checkpoints_are_set_aside_renamed_and_the_newest_intact_one_restored(tmp_path):
  """Issue 40 (4): a damaged newest checkpoint stopped the resume with a traceback although the one before was
  intact."""
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  directory = tmp_path / "checkpoints"
  v = tf.Variable([1.0, 2.0, 3.0])
  writer = checkpointing.Checkpointer(str(directory), strategy, v=v)
  for step in (3, 6, 9):
    v.assign([step] * 3)
    writer.save(step)
  th.damage_checkpoint(directory / "ckpt-9", "index")
  th.damage_checkpoint(directory / "ckpt-6", "data")
  damaged = {name: (directory / name).read_bytes() for name in os.listdir(directory)
             if name.startswith(("ckpt-6.", "ckpt-9."))}
  resumed = checkpointing.Checkpointer(str(directory), strategy, v=tf.Variable([0.0, 0.0, 0.0]))
  assert resumed.set_aside_damaged() == [str(directory / "ckpt-9"), str(directory / "ckpt-6")]
  # Renamed, not deleted, byte for byte; the state file names the intact one alone.
  assert {name: (directory / f"{name}.damaged").read_bytes() for name in damaged} == damaged
  assert sorted(os.listdir(directory)) == sorted(["checkpoint", "ckpt-3.index", "ckpt-3.data-00000-of-00001",
                                                  *(f"{name}.damaged" for name in damaged)])
  assert (directory / "checkpoint").read_text().splitlines()[:2] == ['model_checkpoint_path: "ckpt-3"',
                                                                   'all_model_checkpoint_paths: "ckpt-3"']
  assert resumed.restore() == str(directory / "ckpt-3")
  np.testing.assert_equal(resumed.checkpoint.v.numpy(), [3.0, 3.0, 3.0])
  # The resumed run writes ckpt-6 again; the files set aside stay beside it, and a second damage of ckpt-6 is
  # set aside under its own name.
  resumed.checkpoint.v.assign([6.0] * 3)
  assert resumed.save(6) == str(directory / "ckpt-6") == resumed.latest()
  th.damage_checkpoint(directory / "ckpt-6", "index")
  again = checkpointing.Checkpointer(str(directory), strategy, v=tf.Variable([0.0, 0.0, 0.0]))
  assert again.set_aside_damaged() == [str(directory / "ckpt-6")]
  assert {"ckpt-6.index.damaged-2", "ckpt-6.data-00000-of-00001.damaged-2"} <= set(os.listdir(directory))
  assert again.restore() == str(directory / "ckpt-3")


def test_with_no_intact_checkpoint_the_error_names_the_folder_and_the_choices_and_moves_nothing(tmp_path):
  strategy = tf.distribute.OneDeviceStrategy("/cpu:0")
  directory = tmp_path / "checkpoints"
  writer = checkpointing.Checkpointer(str(directory), strategy, v=tf.Variable(1.0))
  writer.save(2)
  writer.save(4)
  th.damage_checkpoint(directory / "ckpt-4", "index")
  th.damage_checkpoint(directory / "ckpt-2", "data")
  files = sorted(os.listdir(directory))
  with pytest.raises(UserError) as caught:
    checkpointing.Checkpointer(str(directory), strategy, v=tf.Variable(0.0)).set_aside_damaged()
  assert str(caught.value) == (
      f"{directory}: no checkpoint there can be read (ckpt-4: ckpt-4.index: block checksum mismatch; ckpt-2: "
      "ckpt-2.data-00000-of-00001: truncated: Read less bytes than requested): start the run over with "
      "--overwrite_output_dir, or give another --output_dir")
  assert sorted(os.listdir(directory)) == files
