"""bert_tf.training.run_lock: one run per output directory; dead holders are taken over."""

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from bert_tf import fileio
from bert_tf.errors import OutputDirInUse
from bert_tf.training import run_lock


def dead_owner_tag() -> str:
  """`fileio.owner_tag()` of a process of this host that has ended."""
  ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
  return fileio.owner_tag().rsplit("-", 1)[0] + f"-{int(ended.stdout)}"


def test_remove_dead_leftovers_removes_only_what_a_dead_process_of_this_host_left(tmp_path):
  dead, live = dead_owner_tag(), fileio.owner_tag()
  (tmp_path / f".a.tfrecord.tmp-01234567.{dead}").write_bytes(b"x" * 100)
  (tmp_path / f"bert_tf_beam_{dead}_0123").mkdir()
  (tmp_path / f"bert_tf_beam_{dead}_0123" / "shard").write_text("x")
  kept = [f".b.tfrecord.tmp-01234567.{live}", f".c.tmp-01234567.owner-00000000-{dead.rsplit('-', 1)[1]}",
          ".d.tfrecord.tmp-01234567", "notes"]
  for name in kept:
    (tmp_path / name).write_text("x")
  assert fileio.remove_dead_leftovers(str(tmp_path), "bert_tf_beam_") == [
      str(tmp_path / f"bert_tf_beam_{dead}_0123")]
  assert fileio.remove_dead_leftovers(str(tmp_path), ".") == [str(tmp_path / f".a.tfrecord.tmp-01234567.{dead}")]
  assert sorted(os.listdir(tmp_path)) == sorted(kept)
  assert fileio.remove_dead_leftovers(str(tmp_path / "absent"), ".") == []


def _plant(directory, **record):
  os.makedirs(directory, exist_ok=True)
  base = {"host": socket.gethostname(), "started": "2026-11-23T10:00:00", "heartbeat": time.time()}
  (directory / ".lock").write_text(json.dumps(dict(base, **record)))


def test_a_lock_is_held_for_the_block_and_released(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with run_lock.RunLock("out/run") as lock:  # relative, and the directory does not exist yet
    assert lock.path == str(tmp_path / "out" / "run" / ".lock")
    record = json.loads((tmp_path / "out" / "run" / ".lock").read_text())
    assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
    with pytest.raises(OutputDirInUse) as refused:
      run_lock.RunLock(str(tmp_path / "out" / "run")).acquire()
    assert str(refused.value).startswith(f"{tmp_path / 'out' / 'run'} is in use by another run (host "
                                         f"{socket.gethostname()}, pid {os.getpid()}, started ")
    assert f"If that run is dead, delete {tmp_path / 'out' / 'run' / '.lock'}" in str(refused.value)
  assert not os.path.exists(tmp_path / "out")  # nothing written: the folders the lock made are gone


def test_a_live_holder_on_this_host_refuses_and_a_dead_or_reused_pid_is_taken_over(tmp_path):
  sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
  try:
    _plant(tmp_path / "live", pid=sleeper.pid, process_start=fileio.process_start(sleeper.pid))
    with pytest.raises(OutputDirInUse, match=f"pid {sleeper.pid}, started 2026-11-23T10:00:00"):
      run_lock.RunLock(str(tmp_path / "live")).acquire()
    # The same pid with another start time is another process that reused the pid: the holder is dead.
    _plant(tmp_path / "reused", pid=sleeper.pid, process_start=fileio.process_start(sleeper.pid) - 1)
    with run_lock.RunLock(str(tmp_path / "reused")):
      assert json.loads((tmp_path / "reused" / ".lock").read_text())["pid"] == os.getpid()
  finally:
    sleeper.kill()
    sleeper.wait()
  _plant(tmp_path / "dead", pid=sleeper.pid, process_start=None)  # no such process any more
  with run_lock.RunLock(str(tmp_path / "dead")):
    assert json.loads((tmp_path / "dead" / ".lock").read_text())["pid"] == os.getpid()
  (tmp_path / "garbage").mkdir()
  (tmp_path / "garbage" / ".lock").write_text("{not json")
  with run_lock.RunLock(str(tmp_path / "garbage")):
    pass


def test_another_host_counts_as_alive_while_its_heartbeat_is_fresh(tmp_path):
  _plant(tmp_path / "fresh", host="other-host", pid=1, heartbeat=time.time() - 30)
  with pytest.raises(OutputDirInUse, match="host other-host, pid 1"):
    run_lock.RunLock(str(tmp_path / "fresh")).acquire()
  _plant(tmp_path / "stale", host="other-host", pid=1, heartbeat=time.time() - run_lock.STALE_SECONDS - 1)
  with run_lock.RunLock(str(tmp_path / "stale")):
    assert json.loads((tmp_path / "stale" / ".lock").read_text())["host"] == socket.gethostname()


def test_only_the_chief_locks_under_multi_worker(monkeypatch):
  cases = [(None, True),
           ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}, True),
           ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}, False),
           ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}}, False),
           ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}}, True)]
  for config, chief in cases:
    if config is None:
      monkeypatch.delenv("TF_CONFIG", raising=False)
    else:
      monkeypatch.setenv("TF_CONFIG", json.dumps(config))
    assert run_lock.is_chief_from_env() is chief, config


def test_remote_paths_go_through_gfile_with_a_heartbeat(monkeypatch):
  """TensorFlow's in-memory file system stands for gs:// here: the same tf.io.gfile calls (issue 15 tests GCS)."""
  import tensorflow as tf

  monkeypatch.setattr(run_lock, "HEARTBEAT_SECONDS", 0.05)
  directory = "ram://run_lock_test/out"
  with run_lock.RunLock(directory) as lock:
    assert lock.path == directory + "/.lock"

    def read():  # ram:// rewrites the file in place, so a read can catch half of it (a gs:// upload is whole)
      while True:
        try:
          return json.loads(tf.io.gfile.GFile(lock.path).read())
        except json.JSONDecodeError:
          time.sleep(0.01)

    first = read()
    assert first["pid"] == os.getpid()
    deadline = time.time() + 10
    while read()["heartbeat"] == first["heartbeat"]:
      assert time.time() < deadline, "the heartbeat was not refreshed"
      time.sleep(0.05)
    with pytest.raises(OutputDirInUse):
      run_lock.RunLock(directory).acquire()
  assert not tf.io.gfile.exists(directory + "/.lock")


def test_a_run_that_writes_nothing_leaves_no_empty_output_dir(tmp_path):
  with pytest.raises(ValueError):
    with run_lock.RunLock(str(tmp_path / "out" / "mrpc")):
      assert os.listdir(tmp_path / "out" / "mrpc") == [".lock"]
      raise ValueError("bad flags")  # as a validation failure under the lock
  assert os.listdir(tmp_path) == []  # out/ too: the lock made both
  with run_lock.RunLock(str(tmp_path / "out" / "mrpc")):
    (tmp_path / "out" / "mrpc" / "eval_results.txt").write_text("x")
  assert os.listdir(tmp_path / "out" / "mrpc") == ["eval_results.txt"]
  os.makedirs(tmp_path / "existing")
  with run_lock.RunLock(str(tmp_path / "existing")):
    pass
  assert os.path.isdir(tmp_path / "existing")  # a folder the user made stays


def test_an_output_files_lock_lies_beside_it_and_names_the_file_and_the_flag(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  with run_lock.RunLock.for_file("data/pre.tfrecord", "output_file") as lock:  # its folder does not exist yet
    assert lock.path == str(tmp_path / "data" / ".pre.tfrecord.lock")
    assert os.listdir(tmp_path / "data") == [".pre.tfrecord.lock"]
    with pytest.raises(OutputDirInUse) as refused:
      run_lock.RunLock.for_file(str(tmp_path / "data" / "pre.tfrecord"), "output_file").acquire()
    assert str(refused.value) == (
        f"{tmp_path / 'data' / 'pre.tfrecord'} is in use by another run ({run_lock.RunLock.describe(lock._record)}); "
        f"wait for it to end or give another --output_file. If that run is dead, delete {lock.path}")
    run_lock.RunLock.for_file("data/other.tfrecord", "output_file").acquire()  # another file of the folder: free
  assert os.listdir(tmp_path / "data") == [".other.tfrecord.lock"]
  (tmp_path / "data" / ".other.tfrecord.lock").unlink()
  assert os.listdir(tmp_path) == ["data"]
  # An export's lock of its model folder names the export's flags.
  instead = "give another --model_name or --export_dir"
  with run_lock.RunLock(str(tmp_path / "export" / "m"), instead=instead):
    with pytest.raises(OutputDirInUse, match="; wait for it to end or give another --model_name or --export_dir. If "):
      run_lock.RunLock(str(tmp_path / "export" / "m"), instead=instead).acquire()
