"""README.md and docs/*.md: the workflow commands chain as written.

The commands a user follows - corpus, vocabulary, config, records, pretraining, GLUE fine-tuning, export,
prediction, fine-tuning on your own files, checkpoint conversion - are the ```bash blocks that follow a
`<!-- workflow -->` line. The README's blocks, in order, are the chain; each doc's blocks must be commands of that
chain, in the same order, so the docs cannot drift from it. The slow test runs the chain as subprocesses from an empty
working directory (so relative paths must work outside the repository), with `python scripts/X.py` pointed at this
repository's scripts and small sizes appended to each command (absl keeps the last value of a repeated flag).
"""

from __future__ import annotations

import glob
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time

import pytest

import runtime_packages

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MARKER = "<!-- workflow -->"
DOCS = ("docs/data.md", "docs/pretraining.md", "docs/finetuning.md", "docs/serving.md")

# Appended to a script's command: the same run, small. Sequence length and predictions must agree between the
# records and pretraining (pretraining checks the records against its flags).
SMALL = {
    "learn_vocab.py": "--vocab_size=300",
    "create_pretraining_data.py": "--max_seq_length=32 --max_predictions_per_seq=5 --dupe_factor=1",
    "inspect_tfrecords.py": "--max_examples=1",
    "run_pretraining.py": "--max_seq_length=32 --max_predictions_per_seq=5 --train_batch_size=8 --num_train_steps=3 "
                          "--num_warmup_steps=1 --save_checkpoints_steps=3 --steps_per_loop=1 --log_steps=1",
    "run_classifier.py": "--max_seq_length=32 --train_batch_size=8 --num_train_epochs=1 --max_train_examples=48",
}
# The chain's scripts, in the order a user runs them.
STAGES = ("learn_vocab.py", "create_pretraining_data.py", "run_pretraining.py", "run_classifier.py",
          "export_classifier.py", "predict.py", "convert_checkpoint.py")
# Flags naming what a command reads (must exist before it runs) and writes (must exist after).
INPUT_FLAGS = ("input_file", "vocab_file", "bert_config_file", "init_checkpoint", "data_dir", "classifier_dir",
               "saved_model_dir", "input", "train_file", "validation_file", "test_file")
OUTPUT_FLAGS = ("output_file", "output_dir", "export_dir")
# Paths written and read by the `python -c` library calls.
PY_WRITES = re.compile(r"(?:write_default_corpus|to_json_file|write_document_task)\('([^']+)'\)")
PY_READS = re.compile(r"open\('([^']+)'|< ([^)\s]+)\)")


def workflow_commands(path: str) -> list[str]:
  """The commands of the ```bash blocks after `<!-- workflow -->` lines in `path`, in order: continuation lines
  joined, whitespace collapsed, blank and comment lines dropped."""
  with open(os.path.join(REPO, path), encoding="utf-8") as f:
    lines = f.read().splitlines()
  commands = []
  for i, line in enumerate(lines):
    if line.strip() != MARKER:
      continue
    assert lines[i + 1].strip() == "```bash", f"{path}:{i + 2}: {MARKER} must be followed by a ```bash block"
    end = lines.index("```", i + 2)
    text = "\n".join(lines[i + 2:end]).replace("\\\n", " ")
    commands += [" ".join(c.split()) for c in text.splitlines() if c.strip() and not c.lstrip().startswith("#")]
  return commands


def script_of(command: str) -> str | None:
  """`X.py` for `python scripts/X.py ...`; None for `python -c ...`."""
  words = command.split()
  assert words[0] == "python", f"a workflow command starts with `python`: {command}"
  if words[1] == "-c":
    return None
  assert words[1].startswith("scripts/"), f"a workflow command runs scripts/X.py or python -c: {command}"
  return words[1][len("scripts/"):]


def flag_values(command: str) -> dict[str, str]:
  """{flag: last value} of `--flag=value` words (absl's rule: the last one wins)."""
  values = {}
  for word in shlex.split(command):
    if word.startswith("--") and "=" in word:
      name, value = word[2:].split("=", 1)
      values[name] = value
  return values


def reads_and_writes(command: str) -> tuple[list[str], list[str]]:
  script = script_of(command)
  if script is None:
    reads = [a or b for a, b in PY_READS.findall(command)]
    return reads, PY_WRITES.findall(command)
  values = flag_values(command)
  inputs = [f for f in INPUT_FLAGS if not (script == "learn_vocab.py" and f == "vocab_file")]
  outputs = list(OUTPUT_FLAGS) + (["vocab_file"] if script == "learn_vocab.py" else [])
  reads = [p for f in inputs if f in values for p in values[f].split(",")]
  writes = [p for f in outputs if f in values for p in values[f].split(",")]
  return reads, writes


@pytest.fixture(scope="module")
def chain() -> list[str]:
  return workflow_commands("README.md")


def test_readme_chain_covers_the_workflow_in_order(chain):
  scripts = [script_of(c) for c in chain]
  order = [scripts.index(s) for s in STAGES if s in scripts]
  assert len(order) == len(STAGES), f"the README's workflow lacks {set(STAGES) - set(scripts)}"
  assert order == sorted(order), f"the README's workflow runs {STAGES} out of order: {scripts}"
  for command in chain:
    reads, writes = reads_and_writes(command)
    for path in reads + writes:
      assert not os.path.isabs(path) and not path.startswith(("~", "$", "..")), \
          f"workflow paths are relative to the user's folder: {path} in {command}"
    for path in writes:
      assert path.startswith("out/") or path == "corpus.txt", f"outputs go under out/: {path} in {command}"


def test_each_step_reads_what_an_earlier_one_wrote(chain):
  """Statically: every path a command reads was written by an earlier command (or is the user's data)."""
  written = []
  for command in chain:
    reads, writes = reads_and_writes(command)
    for path in reads:
      if path.startswith("glue_data/"):
        continue  # The GLUE download, brought by the user.
      assert any(path == w or path.startswith(w.rstrip("/") + "/") for w in written), \
          f"{path} is read by `{command}` but no earlier workflow command writes it"
    written += writes


@pytest.mark.parametrize("doc", DOCS)
def test_docs_commands_are_the_readmes(chain, doc):
  commands = workflow_commands(doc)
  assert commands, f"{doc} has no {MARKER} block"
  positions = []
  for command in commands:
    assert command in chain, f"{doc}: `{command}` is not one of the README's workflow commands"
    positions.append(chain.index(command))
  assert positions == sorted(positions), f"{doc}: workflow commands out of the README's order"


def _write_mrpc(directory: str, sizes=(24, 8, 4), seed=3) -> None:
  """A few rows in the GLUE download's MRPC format (byte-order mark, header, 5 columns)."""
  words = "the model reads a sentence and its pair then says whether they mean the same thing".split()
  rng = random.Random(seed)
  os.makedirs(directory)
  for split, n in zip(("train", "dev", "test"), sizes):
    rows = ["\ufeff" + ("Quality" if split != "test" else "index") + "\t#1 ID\t#2 ID\t#1 String\t#2 String"]
    for i in range(n):
      a = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
      b = " ".join(rng.choice(words) for _ in range(rng.randint(3, 12)))
      rows.append(f"{i % 2 if split != 'test' else i}\t{100 + i}\t{200 + i}\t{a} .\t{b} .")
    with open(os.path.join(directory, f"{split}.tsv"), "w", encoding="utf-8") as f:
      f.write("\n".join(rows) + "\n")


def _runnable(command: str) -> str:
  """The README's command with this interpreter and repository, plus the small sizes."""
  script = script_of(command)
  rest = command.split(None, 2)[2]
  if script is None:
    return f"{shlex.quote(sys.executable)} -c {rest}"
  path = os.path.join(REPO, "scripts", script)
  assert os.path.isfile(path), f"the README runs scripts/{script}, which does not exist"
  return f"{shlex.quote(sys.executable)} {shlex.quote(path)} {rest} {SMALL.get(script, '')}".rstrip()


def _exists(path: str) -> bool:
  """A file, folder or glob match, or a checkpoint prefix (`bert_model.ckpt` of `bert_model.ckpt.index`)."""
  return bool(glob.glob(path) or glob.glob(glob.escape(path) + ".*"))


@pytest.mark.slow
def test_readme_workflow_runs_as_written(chain, tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)  # The commands' relative paths, checked here, resolve where they run.
  _write_mrpc("glue_data/MRPC")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **runtime_packages.runtime_env())  # as a user's install
  outputs = {}
  for command in chain:
    reads, writes = reads_and_writes(command)
    for path in reads:
      assert _exists(path), f"`{command}` needs {path}, which the commands before it did not write"
    start = time.monotonic()
    done = subprocess.run(["bash", "-c", _runnable(command)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=600)
    took = time.monotonic() - start
    assert done.returncode == 0, (f"`{command}` exited {done.returncode} after {took:.0f} s:\n"
                                  f"{done.stdout[-3000:]}\n{done.stderr[-6000:]}")
    for path in writes:
      assert _exists(path), f"`{command}` exited 0 but did not write {path}"
    outputs.setdefault(script_of(command) or command, []).append(done)

  # The small sizes took effect (absl kept the appended values) and the stages fit together.
  with open("out/vocab.txt", encoding="utf-8") as f:
    vocab_size = len(f.read().splitlines())
  assert 5 < vocab_size <= 300
  with open("out/bert_config.json") as f:
    assert json.load(f)["vocab_size"] == vocab_size
  assert "step 3/3" in outputs["run_pretraining.py"][0].stderr
  assert os.path.isdir("out/pretrain/encoder_checkpoint")
  assert os.path.isfile("out/mrpc/eval_results.txt") and os.path.isfile("out/mrpc/MRPC.tsv")
  assert os.path.isfile("out/export/mrpc/1/saved_model.pb")
  mrpc, documents = (json.loads(done.stdout.strip().splitlines()[-1]) for done in outputs["predict.py"])
  assert mrpc["label"] in ("0", "1") and len(mrpc["probabilities"]) == 2
  # Your own data: the labels are the CSV's strings, in the run's outputs, the model and the export.
  topics = ("debugger", "formatstrings", "string-methods", "typesmapping")  # sorted
  assert documents["label"] in topics and len(documents["probabilities"]) == 4
  with open("out/documents/test_predictions.csv", encoding="utf-8") as f:
    rows = f.read().splitlines()
  assert rows[0] == "index,prediction" and len(rows) == 1 + 198 and rows[1].split(",")[1] in topics
  assert "macro_f1 = " in open("out/documents/eval_results.txt").read()
  with open("out/export/documents/1/assets.extra/bert_tf_manifest.json") as f:
    assert json.load(f)["labels"] == list(topics)
  assert os.path.isfile("out/pretrain_tf1/bert_model.ckpt.index")
  with open("out/pretrain_hf/config.json") as f:
    assert json.load(f)["architectures"] == ["BertForPreTraining"]  # The pretraining heads came along.
  assert os.path.isfile("out/pretrain_hf/model.safetensors") and os.path.isfile("out/pretrain_hf/vocab.txt")
