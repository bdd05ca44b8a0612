"""Shared by the training tests and the helper scripts they launch: tiny records, a tiny config, ports."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
T, P = 13, 3  # odd sizes: max_seq_length, max_predictions_per_seq
VOCAB = 99
SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]  # ids 0..4


def tiny_bert_config(dropout: float = 0.0):
  from bert_tf.config import BertConfig

  return BertConfig.from_preset("tiny", vocab_size=VOCAB, num_hidden_layers=1, hidden_size=18,
                                num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 3,
                                hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)


def write_vocab(directory) -> str:
  path = os.path.join(str(directory), "vocab.txt")
  with open(path, "w") as f:
    f.write("\n".join(SPECIAL + [f"w{i}" for i in range(VOCAB - len(SPECIAL))]) + "\n")
  return path


def write_records(directory, num_files: int = 3, per_file: int = 17, dynamic: bool = False, seed: int = 0) -> str:
  """Random pretraining records of varied lengths; returns a glob matching the files."""
  from bert_tf.data import records

  rng = np.random.default_rng(seed)
  serializer = records.RecordSerializer(T, P, vocab_size=VOCAB, dynamic_masking=dynamic)
  os.makedirs(str(directory), exist_ok=True)
  for f in range(num_files):
    writer = records.TFRecordFileWriter(os.path.join(str(directory), f"records-{f:03d}.tfrecord"))
    for _ in range(per_file):
      a, b = int(rng.integers(1, 5)), int(rng.integers(1, 5))
      ids = [2] + list(rng.integers(5, VOCAB, a)) + [3] + list(rng.integers(5, VOCAB, b)) + [3]
      segments = [0] * (a + 2) + [1] * (b + 1)
      k = int(rng.integers(1, P + 1))
      positions = sorted(rng.choice([i for i in range(len(ids)) if ids[i] > 4], size=k, replace=False))
      labels = [ids[i] for i in positions]
      for i in positions:
        ids[i] = 4
      writer.write(serializer.serialize([int(x) for x in ids], segments, [int(p) for p in positions],
                                        [int(x) for x in labels], int(rng.integers(0, 2))))
    writer.close()
  return os.path.join(str(directory), "records-*.tfrecord")


def free_ports(n: int) -> list[int]:
  sockets = [socket.socket() for _ in range(n)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def python_env(dev_packages: bool = False, **extra) -> dict:
  """The environment of the processes tests start: this repository importable, no GPU, and only the packages a
  user's install has (runtime_packages.py); `dev_packages=True` for a process that needs the development ones (a
  reference or a peer). The repository's scripts see only a user's packages either way."""
  import runtime_packages

  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", CUDA_VISIBLE_DEVICES="", **runtime_packages.runtime_env())
  env["PYTHONPATH"] = os.pathsep.join([REPO, os.path.join(REPO, "tests"), env["PYTHONPATH"]])
  if dev_packages:
    del env[runtime_packages.RUNTIME_ONLY_ENV]
  env.update({k: str(v) for k, v in extra.items()})
  return env


def run_python(args, timeout=240, **env) -> subprocess.CompletedProcess:
  return subprocess.run([sys.executable, *args], cwd=REPO, env=python_env(**env), capture_output=True, text=True,
                        timeout=timeout)


def damage_checkpoint(prefix, how: str) -> None:
  """Damages the checkpoint at `prefix` as a disk or a copy cut short does: "index" flips 30 bytes of its first
  block of .index ("block checksum mismatch"), "data" cuts its one data file to half ("Read less bytes than
  requested")."""
  prefix = str(prefix)
  if how == "index":
    with open(prefix + ".index", "r+b") as f:
      f.seek(10)
      flipped = bytes(b ^ 0xFF for b in f.read(30))
      f.seek(10)
      f.write(flipped)
  else:
    path = prefix + ".data-00000-of-00001"
    os.truncate(path, os.path.getsize(path) // 2)
