"""The SQuAD task of `bench_serving.py`: a question and its context in, the answer text out.

Inputs: the first `--requests` questions of `--squad_file` (SQuAD 1.1 dev: real questions and contexts), each
with its paragraph. Settings as run_squad.py's defaults: max_seq_length 384, doc_stride 128, max_query_length 64,
n_best_size 20, max_answer_length 30, lower case, SQuAD 1.1 (no null answer).

Ours: `export_squad` (windows, max context, n-best span selection and the answer text in the graph).
The peer, as the transformers question-answering pipeline makes its windows, with google-research's span
selection:
  - the question cut to max_query_length pieces (at the end of its 64th piece's characters);
  - the fast tokenizer's windows (`truncation="only_second"`, `return_overflowing_tokens`, `stride` = the
    window's context room - doc_stride, so that consecutive windows start doc_stride pieces apart, as
    google-research's), with offsets;
  - all windows of the batch through the model at once, padded to the longest;
  - google-research's own `_get_best_indexes` (top n_best_size start and end logits of each window's real
    tokens) and `_check_is_max_context` (bert-tensorflow's run_squad.py through `squad_hf_peer.load_reference`);
    pairs with both ends in the context, start in its max-context window, start <= end < start + 30; the
    highest start + end logit, the first in window, start-rank, end-rank order on ties (google-research's
    sort is stable);
  - the answer: the context from the start piece's first to the end piece's last character (offsets), each
    run of whitespace as one space.
Answers compared: the answer texts (whitespace-normalised) that differ, and the largest difference of the best
span's score (start + end logit). With untrained heads the logits are near-flat, so near-ties between spans are
common: a differing text with a score difference below 1e-4 is such a tie, not a different computation.
"""

from __future__ import annotations

import collections
import json
import os

import numpy as np

import bench_serving

UNIT = "questions"
SETTINGS = {"max_seq_length": 384, "doc_stride": 128, "max_query_length": 64, "do_lower_case": True,
            "version_2_with_negative": False, "null_score_diff_threshold": 0.0}
N_BEST_SIZE = 20
MAX_ANSWER_LENGTH = 30
HF_CLASS = "BertForQuestionAnswering"
HEAD_ARGS: dict = {}
ONNX_OUTPUTS = {"start_logits": {0: "batch", 1: "length"}, "end_logits": {0: "batch", 1: "length"}}
EXPORT_NAME = "squad"
SIGNATURE_OUTPUTS = ("answer", "score")
TIE = 1e-4  # score differences below this are float32 rounding of the same span scores


def read_requests(args, count: int) -> list[tuple[str, str]]:
  """(question, context) of the first `count` questions of the SQuAD file."""
  with open(args.squad_file, encoding="utf-8") as f:
    data = json.load(f)["data"]
  pairs = [(qa["question"], paragraph["context"]) for article in data for paragraph in article["paragraphs"]
           for qa in paragraph["qas"]]
  if len(pairs) < count:
    raise ValueError(f"--requests={count}: {args.squad_file} has only {len(pairs)} questions")
  return pairs[:count]


def export_ours(hf_config: dict, state: dict[str, np.ndarray], vocab_file: str, export_dir: str) -> None:
  """A `BertSpanLabeler` with the HF model's weights, saved as run_squad.py saves it, then `export_squad`."""
  import tensorflow as tf

  from bert_tf.model.encoder import INPUT_NAMES
  from bert_tf.tasks.squad import model as squad_model
  from bert_tf.tasks.squad import run as squad_run
  from bert_tf.tasks.squad import serving as squad_serving

  config, encoder = bench_serving.our_encoder(hf_config, state)
  model = squad_model.BertSpanLabeler(config, encoder=encoder, dtype="float32")
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  model.span_output.set_weights([state["qa_outputs.weight"].T, state["qa_outputs.bias"]])
  model_dir = os.path.join(os.path.dirname(export_dir), "squad_model")
  squad_run.save_model(model, SETTINGS, vocab_file, model_dir)
  squad_serving.export_squad(model_dir, export_dir, EXPORT_NAME, version=1, n_best_size=N_BEST_SIZE,
                             max_answer_length=MAX_ANSWER_LENGTH)


def tf_feed(pairs) -> dict[str, list[str]]:
  return {"question": [q for q, _ in pairs], "context": [c for _, c in pairs]}


def from_tf(outputs: dict) -> list:
  return [{"text": " ".join(a.decode("utf-8").split()), "score": float(s)}
          for a, s in zip(outputs["answer"], outputs["score"])]


def peer_predict(tokenizer, run):
  import squad_hf_peer  # pylint: disable=import-outside-toplevel

  google, _ = squad_hf_peer.load_reference()
  span = collections.namedtuple("DocSpan", ["start", "length"])
  length = SETTINGS["max_seq_length"]

  def windows_of(question: str, context: str) -> list[dict]:
    cut = tokenizer(question, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    if len(cut) > SETTINGS["max_query_length"]:
      question = question[:cut[SETTINGS["max_query_length"] - 1][1]]
    room = length - 3 - len(tokenizer(question, add_special_tokens=False)["input_ids"])
    encoded = tokenizer(question, context, truncation="only_second", max_length=length,
                        stride=max(room - SETTINGS["doc_stride"], 0), return_overflowing_tokens=True,
                        return_offsets_mapping=True)
    windows, start = [], 0
    for w in range(len(encoded["input_ids"])):
      in_context = [i for i, s in enumerate(encoded.sequence_ids(w)) if s == 1]
      windows.append({"input_ids": encoded["input_ids"][w], "token_type_ids": encoded["token_type_ids"][w],
                      "offsets": encoded["offset_mapping"][w], "first": in_context[0],
                      "span": span(start, len(in_context))})
      start += SETTINGS["doc_stride"]
    return windows

  def predict(pairs):
    per_pair = [windows_of(q, c) for q, c in pairs]
    flat = [w for ws in per_pair for w in ws]
    longest = max(len(w["input_ids"]) for w in flat)
    features = {name: np.zeros([len(flat), longest], np.int64) for name in bench_serving.PEER_INPUTS}
    for row, w in enumerate(flat):
      n = len(w["input_ids"])
      features["input_ids"][row, :n] = w["input_ids"]
      features["token_type_ids"][row, :n] = w["token_type_ids"]
      features["attention_mask"][row, :n] = 1
    starts, ends = run(features)
    answers, row = [], 0
    for (_, context), windows in zip(pairs, per_pair):
      spans = [w["span"] for w in windows]
      best = None
      for index, w in enumerate(windows):
        n = len(w["input_ids"])
        lo, hi = w["first"], w["first"] + w["span"].length  # the context's positions in the window
        for s in google._get_best_indexes(starts[row + index, :n].tolist(), N_BEST_SIZE):
          if not lo <= s < hi or not google._check_is_max_context(spans, index, w["span"].start + s - lo):
            continue
          for e in google._get_best_indexes(ends[row + index, :n].tolist(), N_BEST_SIZE):
            if not lo <= e < hi or e < s or e - s + 1 > MAX_ANSWER_LENGTH:
              continue
            score = float(starts[row + index, s] + ends[row + index, e])
            if best is None or score > best[0]:
              best = (score, w["offsets"][s][0], w["offsets"][e][1])
      row += len(windows)
      answers.append({"text": " ".join(context[best[1]:best[2]].split()) if best else "",
                      "score": best[0] if best else 0.0})
    return answers
  return predict


def agreement(reference: list, answers: list) -> dict:
  differ = [abs(a["score"] - r["score"]) for a, r in zip(answers, reference) if a["text"] != r["text"]]
  return {"texts_differing": len(differ), "of_them_ties": sum(d < TIE for d in differ),
          "max_score_difference": max(abs(a["score"] - r["score"]) for a, r in zip(answers, reference))}
