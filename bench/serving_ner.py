"""The NER task of `bench_serving.py`: a sentence as text in, each word's tag out.

Inputs: the first `--requests` sentences of `--conll_file` (CoNLL-2003 eng.testa), each one's words joined by
spaces as one text. Labels: CoNLL-2003's, IOB2 (O, then B-/I- of LOC, MISC, ORG, PER), max_seq_length 128,
lower case, no document context.

Ours: `export_ner` (words, windows, the tag head and the entities in the graph). The peer:
`BertForTokenClassification` with the fast tokenizer, as `bench/ner_hf_peer.py` predicts: the words are the
tokenizer's own pre-tokenizer's (`BertPreTokenizer`: whitespace and punctuation, as the basic tokenizer that
ours uses, so "U.S." is four words on both sides), then `ner_hf_peer.make_windows` (each word's pieces, runs of
whole words within 126 pieces, filled with the sentence's other pieces around them) and `ner_hf_peer.collate`;
each word's tag is the argmax at its first piece. Answers compared: texts whose word lists differ, and words
whose tag differs (of all words).
"""

from __future__ import annotations

import os

import numpy as np

import bench_serving

UNIT = "sentences"
LABELS = ("O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")
SETTINGS = {"labels": list(LABELS), "label_scheme": "IOB2", "types": ["LOC", "MISC", "ORG", "PER"],
            "train_tag_scheme": "IOB1", "max_seq_length": 128, "do_lower_case": True, "document_context": False}
HF_CLASS = "BertForTokenClassification"
HEAD_ARGS = {"num_labels": len(LABELS)}
ONNX_OUTPUTS = {"logits": {0: "batch", 1: "length"}}
EXPORT_NAME = "ner"
SIGNATURE_OUTPUTS = ("num_words", "words", "tags")


def read_requests(args, count: int) -> list[str]:
  import ner_hf_peer  # pylint: disable=import-outside-toplevel

  sentences = ner_hf_peer.read_conll(args.conll_file)
  if len(sentences) < count:
    raise ValueError(f"--requests={count}: {args.conll_file} has only {len(sentences)} sentences")
  return [" ".join(words) for words, _ in sentences[:count]]


def export_ours(hf_config: dict, state: dict[str, np.ndarray], vocab_file: str, export_dir: str) -> None:
  """A `BertTokenClassifier` with the HF model's weights, saved as run_ner.py saves it, then `export_ner`."""
  import tensorflow as tf

  from bert_tf.model.encoder import INPUT_NAMES
  from bert_tf.tasks.ner import model as ner_model
  from bert_tf.tasks.ner import run as ner_run
  from bert_tf.tasks.ner import serving as ner_serving

  config, encoder = bench_serving.our_encoder(hf_config, state)
  model = ner_model.BertTokenClassifier(config, len(LABELS), encoder=encoder, dtype="float32")
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  model.tag_output.set_weights([state["classifier.weight"].T, state["classifier.bias"]])
  model_dir = os.path.join(os.path.dirname(export_dir), "ner_model")
  ner_run.save_model(model, SETTINGS, vocab_file, model_dir)
  ner_serving.export_ner(model_dir, export_dir, EXPORT_NAME, version=1)


def tf_feed(texts) -> dict[str, list[str]]:
  return {"text": list(texts)}


def from_tf(outputs: dict) -> list:
  return [[[w.decode("utf-8"), t.decode("utf-8")] for w, t in zip(words[:n], tags[:n])]
          for n, words, tags in zip(outputs["num_words"], outputs["words"], outputs["tags"])]


def peer_predict(tokenizer, run):
  import ner_hf_peer  # pylint: disable=import-outside-toplevel

  split = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str

  def predict(texts):
    words = [[w for w, _ in split(text)] for text in texts]
    windows = ner_hf_peer.make_windows([(ws, ["O"] * len(ws)) for ws in words], tokenizer, SETTINGS["max_seq_length"],
                                       None)
    batch = ner_hf_peer.collate(windows, range(len(windows)), tokenizer.pad_token_id, False)
    logits = run({k: v.numpy() for k, v in batch.items()})[0]
    tags = [[None] * len(ws) for ws in words]
    for row, window in enumerate(windows):
      for position, w in enumerate(window.words):
        if w >= 0:
          tags[window.sentence][w] = LABELS[int(logits[row, position].argmax())]
    return [[[w, t] for w, t in zip(ws, ts)] for ws, ts in zip(words, tags)]
  return predict


def agreement(reference: list, answers: list) -> dict:
  texts_differing = sum([w for w, _ in a] != [w for w, _ in r] for a, r in zip(answers, reference))
  same_words = [(a, r) for a, r in zip(answers, reference) if [w for w, _ in a] == [w for w, _ in r]]
  return {"word_lists_differing": texts_differing,
          "tags_differing": sum(ta != tr for a, r in same_words for (_, ta), (_, tr) in zip(a, r)),
          "words": sum(len(r) for r in reference)}
