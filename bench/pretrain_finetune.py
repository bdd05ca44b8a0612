r"""Shared stages of the pretraining-study benchmarks (bench_model_size.py, bench_ablations.py): a corpus, a
vocabulary, pretraining records, pretraining and fine-tuning runs, each through the project's own scripts as a
user runs them (`python scripts/<script>.py ...` as a process of its own), and the held-out masked-LM perplexity.

The corpus (`build_corpus`), one sentence a line and a blank line between documents:
  - the embedded corpus (bert_tf/data/corpus.py: Python's documentation topics, 79 documents, ~65,000 words);
  - the Wikipedia paragraphs of SQuAD v1.1 dev (`../shared/data/squad/dev-v1.1.json`, 48 articles, ~254,000
    words), one document per article (its paragraphs' sentences in order), except the articles reserved for the
    SQuAD fine-tuning split (`squad_split`: the first `squad_train_articles` articles train, the last
    `squad_eval_articles` evaluate), which are never pretrained on.
  Every `heldout_every`-th document of that list (embedded documents first, then the articles, in file order) is
  held out of pretraining: the held-out perplexity is measured on records made from those documents alone.

Every stage writes its output under the work directory and is skipped when a previous run left it complete (a
`.done` file written last marks a finished pretraining or fine-tuning run); a stage that failed raises
`StageError` with the tail of its log.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Sequence

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "scripts")
DEFAULT_DATA_DIR = os.path.normpath(os.path.join(REPO, "..", "shared", "data"))
SQUAD_FILE = os.path.join("squad", "dev-v1.1.json")
CONLL_FILES = (os.path.join("conll2003", "eng.train"), os.path.join("conll2003", "eng.testa"))
GLUE_TASKS = ("MRPC", "RTE")
DONE = ".done"


class StageError(RuntimeError):
  """A script the benchmark ran failed; the message names its log and quotes its last lines."""


def check_data(data_dir: str, tasks: Sequence[str], squad: bool = True, conll: bool = False) -> None:
  """Raises SystemExit naming what is missing from `data_dir` (../shared/data) and what to do."""
  needed = [os.path.join("glue", task, split) for task in tasks for split in ("train.tsv", "dev.tsv")]
  if squad:
    needed.append(SQUAD_FILE)
  if conll:
    needed.extend(CONLL_FILES)
  missing = [p for p in needed if not os.path.isfile(os.path.join(data_dir, p))]
  if missing:
    raise SystemExit(f"--data_dir={data_dir} lacks {', '.join(missing)}: these benchmarks read the real GLUE, "
                     "SQuAD and CoNLL-2003 files of ../shared/data (see its README.md); pass --data_dir=<a folder "
                     "holding glue/MRPC, glue/RTE, squad/dev-v1.1.json and conll2003/eng.{train,testa}>")


# -- Corpus ---------------------------------------------------------------------------------------------------------


def squad_split(num_articles: int, train_articles: int, eval_articles: int) -> tuple[list[int], list[int]]:
  """Article indices (train, eval) of the SQuAD fine-tuning split: the first `train_articles` and the last
  `eval_articles` of the file; the two never overlap."""
  if train_articles < 0 or eval_articles < 0 or train_articles + eval_articles > num_articles:
    raise ValueError(f"{train_articles} training + {eval_articles} evaluation articles do not fit in "
                     f"{num_articles} articles")
  return list(range(train_articles)), list(range(num_articles - eval_articles, num_articles))


def article_sentences(article: dict) -> list[str]:
  """A SQuAD article -> the sentences of its paragraphs, in order."""
  from bert_tf.data import corpus

  return [s for p in article["paragraphs"] for s in corpus.split_sentences(p["context"])]


def assemble_documents(embedded: list[list[str]], articles: list[list[str]], reserved: set[int],
                       heldout_every: int) -> tuple[list[list[str]], list[list[str]]]:
  """(pretraining documents, held-out documents): `embedded` then the `articles` not in `reserved`; every
  `heldout_every`-th of that list (the 1st, the (k+1)-th, ...; 0: none) is held out."""
  documents = [d for d in embedded if d] + [a for i, a in enumerate(articles) if i not in reserved and a]
  if heldout_every <= 0:
    return documents, []
  train = [d for i, d in enumerate(documents) if i % heldout_every]
  heldout = [d for i, d in enumerate(documents) if i % heldout_every == 0]
  return train, heldout


def corpus_text(documents: list[list[str]]) -> str:
  """Documents -> the pretraining input format: a sentence a line, a blank line between documents."""
  return "\n\n".join("\n".join(doc) for doc in documents) + "\n"


def build_corpus(work_dir: str, data_dir: str, squad_train_articles: int, squad_eval_articles: int,
                 heldout_every: int) -> dict:
  """Writes <work_dir>/data/{corpus,heldout}.txt and, when articles are reserved, the SQuAD split's
  squad_train.json / squad_eval.json; returns a description (also data/corpus.json). Rewritten every run: cheap
  and deterministic, so a changed flag cannot leave a stale corpus behind (the later stages check it)."""
  from bert_tf import fileio
  from bert_tf.data import corpus

  with open(os.path.join(data_dir, SQUAD_FILE), encoding="utf-8") as f:
    squad = json.load(f)
  articles = squad["data"]
  train_ids, eval_ids = squad_split(len(articles), squad_train_articles, squad_eval_articles)
  embedded = corpus.default_corpus_documents()
  pretrain, heldout = assemble_documents(embedded, [article_sentences(a) for a in articles],
                                         set(train_ids) | set(eval_ids), heldout_every)
  data = os.path.join(work_dir, "data")
  os.makedirs(data, exist_ok=True)
  description = {
      "sources": ["embedded corpus (Python documentation topics, bert_tf/data/corpus.py)",
                  f"SQuAD v1.1 dev contexts ({SQUAD_FILE}), one document per article, articles "
                  f"{squad_train_articles}..{len(articles) - squad_eval_articles - 1} of {len(articles)}"],
      "heldout_every": heldout_every}
  for name, docs in (("corpus", pretrain), ("heldout", heldout)):
    text = corpus_text(docs)
    path = os.path.join(data, f"{name}.txt")
    _write_if_changed(path, text)
    description[name] = {"file": path, "documents": len(docs), "sentences": sum(map(len, docs)),
                         "words": sum(len(s.split()) for d in docs for s in d)}
  if train_ids and eval_ids:
    for name, ids in (("squad_train", train_ids), ("squad_eval", eval_ids)):
      part = {"version": squad.get("version"), "data": [articles[i] for i in ids]}
      if name == "squad_train":  # google-research's reader trains on one answer per question.
        part["data"] = [{**a, "paragraphs": [{**p, "qas": [{**q, "answers": q["answers"][:1]} for q in p["qas"]]}
                                             for p in a["paragraphs"]]} for a in part["data"]]
      path = os.path.join(data, f"{name}.json")
      fileio.write_text_atomic(path, json.dumps(part))
      description[name] = {"file": path, "articles": [f"{i}: {articles[i]['title']}" for i in ids],
                           "questions": sum(len(p["qas"]) for a in part["data"] for p in a["paragraphs"])}
  fileio.write_text_atomic(os.path.join(data, "corpus.json"), json.dumps(description, indent=2) + "\n")
  return description


def _write_if_changed(path: str, text: str) -> None:
  """Writes `text` to `path` (atomically, its folder made) unless the file holds it already: a rerun leaves the
  inputs of finished stages untouched."""
  from bert_tf import fileio

  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      if f.read() == text:
        return
  os.makedirs(os.path.dirname(path), exist_ok=True)
  fileio.write_text_atomic(path, text)


def conll_split(work_dir: str, data_dir: str, train_sentences: int, eval_sentences: int) -> dict:
  """<work_dir>/data/conll/eng.train and eng.testa: the leading whole documents of ../shared/data's files holding
  at least `train_sentences` / `eval_sentences` sentences (0: the whole file), verbatim (bench_ner.py's
  subsets). -> {"dir", "eng.train": {"documents", "sentences"}, "eng.testa": {...}}."""
  from bench_ner import first_documents  # pylint: disable=import-outside-toplevel

  directory = os.path.join(work_dir, "data", "conll")
  description: dict = {"dir": directory}
  for path, wanted in zip(CONLL_FILES, (train_sentences, eval_sentences)):
    name = os.path.basename(path)
    with open(os.path.join(data_dir, path), encoding="utf-8") as f:
      try:
        text, counts = first_documents(f.read(), wanted)
      except ValueError as e:
        raise SystemExit(f"{os.path.join(data_dir, path)}: {e}; lower --ner_"
                         f"{'train' if name == 'eng.train' else 'eval'}_sentences") from None
    _write_if_changed(os.path.join(directory, name), text)
    description[name] = counts
  return description


# -- Running the scripts --------------------------------------------------------------------------------------------


def _env(threads: int) -> dict[str, str]:
  env = dict(os.environ)
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  env["PYTHONUNBUFFERED"] = "1"
  if threads:
    env["OMP_NUM_THREADS"] = env["TF_NUM_INTRAOP_THREADS"] = str(threads)
  return env


def _tail(path: str, lines: int = 15) -> str:
  try:
    with open(path, encoding="utf-8", errors="replace") as f:
      return "".join(f.readlines()[-lines:])
  except OSError:
    return ""


def run_script(script: str, flags: list[str], log_path: str, say: Callable[[str], None], threads: int = 0) -> float:
  """Runs `python scripts/<script> <flags>` to its end, output to `log_path`; returns its wall seconds. Raises
  StageError with the log's tail when it exits non-zero."""
  os.makedirs(os.path.dirname(log_path), exist_ok=True)
  command = [sys.executable, os.path.join(SCRIPTS, script), *flags]
  say("$ python " + " ".join([os.path.join("scripts", script)] + flags))
  started = time.monotonic()
  with open(log_path, "w") as log:
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=_env(threads))
    try:
      returncode = process.wait()
    except KeyboardInterrupt:
      # Ctrl-C at a terminal reaches the script too. Let it stop its own way (a training script saves a
      # checkpoint that the rerun resumes from) instead of killing it, as subprocess.run would after 0.25 s.
      say(f"interrupted: waiting for {script} to stop")
      _stop(process)
      raise
  seconds = time.monotonic() - started
  if returncode != 0:
    raise StageError(f"{script} exited {returncode} after {seconds:.0f} s; see {log_path}:\n" + _tail(log_path))
  return seconds


def _stop(process: subprocess.Popen, grace: float = 120.0) -> None:
  """Waits `grace` seconds for `process` to end after a Ctrl-C; then SIGTERM (the scripts' one request to save and
  stop: a second signal would make them exit without saving), and at last SIGKILL."""
  try:
    process.wait(timeout=grace)
    return
  except subprocess.TimeoutExpired:
    process.terminate()
  try:
    process.wait(timeout=60)
  except subprocess.TimeoutExpired:
    process.kill()
    process.wait()


def run_main(main: Callable[[], int]) -> None:
  """A study benchmark's entry point: exit 1 with the failed stage's message, 130 on Ctrl-C with how to go on."""
  try:
    sys.exit(main())
  except StageError as e:
    print(f"error: {e}", file=sys.stderr)
    sys.exit(1)
  except KeyboardInterrupt:
    print("\ninterrupted: rerun the same command to go on; finished stages are reused and an interrupted "
          "pretraining resumes from its last checkpoint", file=sys.stderr)
    sys.exit(130)


def is_done(directory: str) -> dict | None:
  """The record a finished stage left in `directory`/.done, or None."""
  path = os.path.join(directory, DONE)
  if not os.path.isfile(path):
    return None
  with open(path, encoding="utf-8") as f:
    return json.load(f)


def mark_done(directory: str, record: dict) -> None:
  from bert_tf import fileio

  fileio.write_text_atomic(os.path.join(directory, DONE), json.dumps(record, indent=2) + "\n")


def stage(directory: str, key: dict, run: Callable[[], dict], say: Callable[[str], None]) -> dict:
  """Runs `run` unless `directory` holds a finished stage made with the same `key` (its flags); returns its
  record. A finished stage with another key is refused: it would mix two configurations in one table."""
  done = is_done(directory)
  if done is not None:
    if done.get("key") != key:
      raise SystemExit(f"{directory} holds a finished run with other settings ({key_difference(done.get('key'), key)})"
                       ": use another --work_dir, or delete that folder to redo it")
    say(f"reusing {directory} (finished earlier)")
    return done
  record = run()
  record["key"] = key
  mark_done(directory, record)
  return record


def key_difference(old, new) -> str:
  """What differs between two stage keys, briefly: the flags only one of them has, or the differing values."""
  if not isinstance(old, dict) or not isinstance(new, dict):
    return f"{old} != {new}"
  parts = []
  for name in sorted(set(old) | set(new)):
    a, b = old.get(name), new.get(name)
    if a == b:
      continue
    if isinstance(a, list) and isinstance(b, list):
      parts.append(f"{name}: it had {[x for x in a if x not in b]}, this run has {[x for x in b if x not in a]}")
    else:
      parts.append(f"{name}: it had {a!r}, this run has {b!r}")
  return "; ".join(parts)


def learn_vocab(work_dir: str, vocab_size: int, say, threads: int = 0) -> str:
  data = os.path.join(work_dir, "data")
  vocab = os.path.join(data, "vocab.txt")

  def run():
    seconds = run_script("learn_vocab.py", [f"--input_file={os.path.join(data, 'corpus.txt')}",
                                            f"--vocab_file={vocab}", f"--vocab_size={vocab_size}"],
                         os.path.join(data, "logs", "learn_vocab.log"), say, threads)
    with open(vocab, encoding="utf-8") as f:
      return {"seconds": round(seconds, 1), "tokens": sum(1 for _ in f)}

  stage(os.path.join(data, "vocab"), {"vocab_size": vocab_size, "corpus": _digest(os.path.join(data, "corpus.txt"))},
        run, say)
  return vocab


def _digest(path: str) -> str:
  import hashlib

  with open(path, "rb") as f:
    return hashlib.sha256(f.read()).hexdigest()[:16]


def create_records(work_dir: str, name: str, input_name: str, flags: list[str], say, threads: int = 0) -> str:
  """scripts/create_pretraining_data.py on data/<input_name>.txt -> data/records/<name>/records.tfrecord."""
  data = os.path.join(work_dir, "data")
  directory = os.path.join(data, "records", name)
  output = os.path.join(directory, "records.tfrecord")
  full = [f"--input_file={os.path.join(data, input_name + '.txt')}", f"--output_file={output}",
          f"--vocab_file={os.path.join(data, 'vocab.txt')}", *flags]

  def run():
    seconds = run_script("create_pretraining_data.py", full, os.path.join(directory, "create.log"), say, threads)
    with open(output + ".stats.json", encoding="utf-8") as f:
      stats = json.load(f)
    return {"seconds": round(seconds, 1), "instances": stats.get("instances"), "command_flags": full}

  stage(directory, {"flags": full, "input": _digest(os.path.join(data, input_name + ".txt")),
                    "vocab": _digest(os.path.join(data, "vocab.txt"))}, run, say)
  return output


def write_bert_config(work_dir: str, preset_file: str, vocab_size: int, max_position_embeddings: int) -> str:
  """configs/<preset_file> with the learnt vocabulary's size -> data/configs/<preset_file>."""
  from bert_tf.config import BertConfig

  config = BertConfig.from_json_file(os.path.join(REPO, "configs", preset_file))
  config = BertConfig.from_dict({**config.to_dict(), "vocab_size": vocab_size,
                                 "max_position_embeddings": max_position_embeddings})
  path = os.path.join(work_dir, "data", "configs", preset_file)
  os.makedirs(os.path.dirname(path), exist_ok=True)
  config.to_json_file(path)
  return path


def pretrain(output_dir: str, flags: list[str], say, threads: int = 0) -> dict:
  """scripts/run_pretraining.py --output_dir=<output_dir> <flags>; its last logged metrics."""

  def run():
    seconds = run_script("run_pretraining.py", [f"--output_dir={output_dir}", *flags],
                         os.path.join(output_dir + "_logs", "run_pretraining.log"), say, threads)
    return {"seconds": round(seconds, 1), "last_log": last_metrics_line(
        os.path.join(output_dir + "_logs", "run_pretraining.log"))}

  return stage(output_dir + "_logs", {"flags": flags}, run, say)


def last_metrics_line(log_path: str) -> str:
  """The last line of a training log that reports a step (the trainer's progress lines)."""
  last = ""
  with open(log_path, encoding="utf-8", errors="replace") as f:
    for line in f:
      if "step" in line and ("loss" in line or "accuracy" in line):
        last = line.strip()
  return last[-300:]


def _finetune(script: str, output_dir: str, full: list[str], say, threads: int) -> dict:
  """The stage of one fine-tuning run: `python scripts/<script> <full>` (its log <output_dir>_logs/<script>.log),
  then its <output_dir>/eval_results.json -> {"seconds", "eval_results"}."""

  def run():
    log = os.path.join(output_dir + "_logs", script.replace(".py", ".log"))
    seconds = run_script(script, full, log, say, threads)
    with open(os.path.join(output_dir, "eval_results.json"), encoding="utf-8") as f:
      results = json.load(f)
    return {"seconds": round(seconds, 1), "eval_results": results}

  return stage(output_dir + "_logs", {"flags": full}, run, say)


def finetune_glue(task: str, output_dir: str, pretrained_dir: str, vocab: str, data_dir: str, flags: list[str],
                  say, threads: int = 0) -> dict:
  """scripts/run_classifier.py --do_train --do_eval on ../shared/data/glue/<task>; its eval_results.json."""
  full = [f"--task_name={task}", f"--data_dir={os.path.join(data_dir, 'glue', task)}", f"--vocab_file={vocab}",
          f"--init_checkpoint={pretrained_dir}", f"--output_dir={output_dir}", "--do_train", "--do_eval",
          f"--features_dir={os.path.join(os.path.dirname(vocab), 'features')}",
          "--distribution_strategy=one_device", *flags]

  return _finetune("run_classifier.py", output_dir, full, say, threads)


def finetune_squad(output_dir: str, pretrained_dir: str, vocab: str, train_file: str, eval_file: str,
                   flags: list[str], say, threads: int = 0) -> dict:
  """scripts/run_squad.py --do_train --do_eval on the split's files; its eval_results.json."""
  full = [f"--vocab_file={vocab}", f"--init_checkpoint={pretrained_dir}", f"--output_dir={output_dir}",
          f"--train_file={train_file}", f"--predict_file={eval_file}", "--do_train", "--do_eval",
          f"--features_dir={os.path.join(os.path.dirname(vocab), 'features')}",
          "--distribution_strategy=one_device", *flags]

  return _finetune("run_squad.py", output_dir, full, say, threads)


def finetune_ner(output_dir: str, pretrained_dir: str, vocab: str, conll_dir: str, flags: list[str], say,
                 threads: int = 0) -> dict:
  """scripts/run_ner.py --do_train --do_eval on `conll_dir` (eng.train, eng.testa; IOB1 read, IOB2 labels); its
  eval_results.json (conlleval's overall "f1", in percent, among others)."""
  full = [f"--data_dir={conll_dir}", f"--vocab_file={vocab}", f"--init_checkpoint={pretrained_dir}",
          f"--output_dir={output_dir}", "--do_train", "--do_eval", "--tag_scheme=IOB1", "--label_scheme=IOB2",
          f"--features_dir={os.path.join(os.path.dirname(vocab), 'features')}",
          "--distribution_strategy=one_device", *flags]

  return _finetune("run_ner.py", output_dir, full, say, threads)


def heldout_records(work_dir: str, max_seq_length: int, max_predictions_per_seq: int, say, threads: int = 0) -> str:
  """Records of data/heldout.txt with the default 80/10/10 masks (dupe_factor 2, seed 12345): the one held-out
  set both study benchmarks score every masked-LM encoder on."""
  flags = [f"--max_seq_length={max_seq_length}", f"--max_predictions_per_seq={max_predictions_per_seq}",
           "--random_seed=12345", "--dupe_factor=2"]
  return create_records(work_dir, "heldout", "heldout", flags, say, threads)


def cached_heldout_perplexity(pretrained_dir: str, records: str, max_seq_length: int,
                              max_predictions_per_seq: int) -> dict:
  """`heldout_perplexity`, computed once and kept in <pretrained_dir>_logs/heldout_perplexity.json."""
  path = os.path.join(pretrained_dir + "_logs", "heldout_perplexity.json")
  if os.path.isfile(path):
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  ppl = heldout_perplexity(pretrained_dir, records, max_seq_length, max_predictions_per_seq)
  with open(path, "w", encoding="utf-8") as f:
    json.dump(ppl, f, indent=2)
  return ppl


def heldout_perplexity(pretrained_dir: str, records: str, max_seq_length: int, max_predictions_per_seq: int,
                       batch_size: int = 64) -> dict:
  """exp(mean masked-LM cross-entropy) of the final pretraining checkpoint's encoder and masked-LM head over
  every prediction of `records` (static masks, one pass). Returns {"perplexity", "mlm_loss", "mlm_accuracy",
  "predictions", "checkpoint"}."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # The benchmark's own output stays readable.
  import tensorflow as tf

  from bert_tf.config import BertConfig
  from bert_tf.model.pretraining import BertPretrainer, pretraining_loss_terms
  from bert_tf.tasks.pretraining.run import recorded_options
  from bert_tf.training import inputs

  config = BertConfig.from_json_file(os.path.join(pretrained_dir, "bert_config.json"))
  if config.causal_attention:
    raise StageError(f"{pretrained_dir} is a left-to-right LM: its next-token loss is no masked-LM perplexity")
  # A --no_nsp run's checkpoint has no next-sentence head (its pretraining_options.json says so).
  objective = (recorded_options(pretrained_dir) or {}).get("objective", "bert")
  model = BertPretrainer(config, next_sentence=objective == "bert")
  prefix = tf.train.latest_checkpoint(os.path.join(pretrained_dir, "checkpoints"))
  if prefix is None:
    raise StageError(f"no training checkpoint under {pretrained_dir}/checkpoints")
  tf.train.Checkpoint(model=model).restore(prefix).expect_partial().assert_existing_objects_matched()
  dataset = inputs.pretraining_dataset(records, batch_size, max_seq_length, max_predictions_per_seq,
                                       is_training=False)

  @tf.function
  def step(features):
    terms = pretraining_loss_terms(features, model(features, training=False))
    return terms["mlm_loss_sum"], terms["mlm_weight_sum"], terms["mlm_correct_sum"]

  loss = weight = correct = 0.0
  for features in dataset:
    l, w, c = step(features)
    loss, weight, correct = loss + float(l), weight + float(w), correct + float(c)
  if weight == 0:
    raise StageError(f"{records} holds no masked-LM predictions")
  return {"perplexity": math.exp(loss / weight), "mlm_loss": loss / weight, "mlm_accuracy": correct / weight,
          "predictions": int(weight), "checkpoint": prefix}


# -- The scripts' flags, from the benchmarks' common arguments -----------------------------------------------------


def pretraining_flags(args, records: str, config_file: str, extra: Sequence[str] = ()) -> list[str]:
  """run_pretraining.py's flags for one budget (--pretrain_* of either benchmark), plus a variant's `extra`."""
  steps = args.pretrain_steps
  loop = max(1, min(50, steps // 4))
  return [f"--input_file={records}", f"--bert_config_file={config_file}", f"--max_seq_length={args.max_seq_length}",
          f"--max_predictions_per_seq={args.max_predictions_per_seq}",
          f"--train_batch_size={args.pretrain_batch_size}", f"--learning_rate={args.pretrain_learning_rate}",
          f"--num_train_steps={steps}", f"--num_warmup_steps={int(steps * args.pretrain_warmup_fraction)}",
          f"--save_checkpoints_steps={steps}", f"--steps_per_loop={loop}", f"--log_steps={loop}",
          "--distribution_strategy=one_device", f"--seed={args.pretrain_seed}", *extra]


def ner_flags(args, seed: int, feature_based: str | None = None) -> list[str]:
  """run_ner.py's flags (--ner_*) for one seed: fine-tuning, or with `feature_based` (a FeatureChoice name) the
  frozen encoder's features into the two-layer BiLSTM tagger (--ner_feature_learning_rate: it trains from
  scratch)."""
  rate = args.ner_feature_learning_rate if feature_based else args.ner_learning_rate
  flags = [f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.finetune_batch_size}",
           f"--learning_rate={rate}", f"--num_train_epochs={args.ner_epochs}", f"--seed={seed}",
           "--predict_batch_size=64"]
  if feature_based:
    flags.append(f"--feature_based={feature_based}")
  return flags


def glue_flags(args, seed: int) -> list[str]:
  """run_classifier.py's flags (--finetune_*, --max_train_examples) for one fine-tuning seed."""
  flags = [f"--max_seq_length={args.max_seq_length}", f"--train_batch_size={args.finetune_batch_size}",
           f"--learning_rate={args.finetune_learning_rate}", f"--num_train_epochs={args.finetune_epochs}",
           f"--seed={seed}", "--eval_batch_size=32"]
  if args.max_train_examples:
    flags.append(f"--max_train_examples={args.max_train_examples}")
  return flags


def vocab_size_of(vocab_file: str) -> int:
  with open(vocab_file, encoding="utf-8") as f:
    return sum(1 for _ in f)


def write_report(work_dir: str, stem: str, script: str, argv: Sequence[str] | None, started: float,
                 fields: dict, markdown: str) -> dict:
  """Writes <work_dir>/<stem>.json (date, command, host, wall time, then `fields`) and <stem>.md (the budget and
  the tables); -> the report."""
  report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": f"python bench/{script} " + " ".join(sys.argv[1:] if argv is None else argv),
            "host": platform.node(), "cpus": os.cpu_count(), "wall_seconds": round(time.time() - started, 1),
            **fields}
  with open(os.path.join(work_dir, f"{stem}.json"), "w", encoding="utf-8") as f:
    json.dump(report, f, indent=2)
  with open(os.path.join(work_dir, f"{stem}.md"), "w", encoding="utf-8") as f:
    f.write(f"Budget: {fields['budget']}\n\n{markdown}\n")
  return report


# -- Tables ---------------------------------------------------------------------------------------------------------


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
  """A markdown table; floats are written as given (format them before)."""
  lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
  lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
  return "\n".join(lines)


def percent(value: float | None) -> str:
  return "-" if value is None else f"{100 * value:.1f}"
