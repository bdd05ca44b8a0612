"""bert_tf.tasks.ner.serving: the in-graph path (words, windows, first-piece tags, entities) against the Python
one (`ner.make_windows`, `ner.predicted_tags`, `ner_metrics.entities`) on a tiny tagger with bert-base-uncased's
vocabulary, and the exported SavedModel in a fresh process that imports only tensorflow and tensorflow_text."""

import concurrent.futures
import json
import os
import random
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.config import BertConfig
from bert_tf.data.tokenization import BasicTokenizer, FullTokenizer
from bert_tf.export import serving
from bert_tf.tasks.ner import data as ner
from bert_tf.tasks.ner import metrics as ner_metrics
from bert_tf.tasks.ner import model as ner_model
from bert_tf.tasks.ner import run as ner_run
from bert_tf.tasks.ner import serving as ner_serving

T = 11  # 9 pieces a window: most texts below need several
LABELS = ner.labels_for(("LOC", "MISC", "ORG", "PER"), "IOB2")
TEXTS = [
    "EU rejects German call to boycott British lamb.",
    "",
    "Peter Blackburn met officials of the European Commission in Brussels on Thursday, 1996-08-22.",
    "Café in Zürich\tand\nMünchen — U.S.A. 東京",
    "x",
    "   ",
    "수도입니다. Cafe\u0301. the\x00dog sat\x00 in Paris",  # each word its own offsets; a NUL cuts nothing
]


def _model(labels=LABELS):
  keras.utils.set_random_seed(4)
  config = BertConfig.from_preset("tiny", vocab_size=30522, num_hidden_layers=1, hidden_size=18,
                                  num_attention_heads=3, intermediate_size=37, max_position_embeddings=T + 2)
  model = ner_model.BertTokenClassifier(config, len(labels), dtype="float32")
  model({name: tf.zeros([1, 2], tf.int32) for name in ("input_ids", "input_mask", "segment_ids")})
  kernel, bias = model.tag_output.get_weights()
  model.tag_output.set_weights([kernel * 300, bias])  # decisive, varied labels: many entities to compare
  return model


def _settings(labels=LABELS, scheme="IOB2"):
  return {"labels": list(labels), "label_scheme": scheme, "types": ["LOC", "MISC", "ORG", "PER"],
          "train_tag_scheme": "IOB1", "max_seq_length": T, "do_lower_case": True, "document_context": False}


def _row(outputs, name, i, count):
  values = outputs[name][i][:count]
  return [v.decode() if isinstance(v, bytes) else v for v in np.asarray(values).tolist()]


def _python_path(model, tokenizer, text, words, labels):
  """The tags of `words` as run_ner predicts a sentence of them, and their entities' character spans."""
  sentence = ner.NerSentence(tuple(words), ("O",) * len(words), 1, 0)
  windows = ner.make_windows([sentence], tokenizer, T, document_context=False)
  x = {name: tf.constant([getattr(w, name) for w in windows])
       for name in ("input_ids", "input_mask", "segment_ids")}
  predicted = tf.argmax(model(x), axis=-1).numpy()
  return ner.predicted_tags(windows, predicted, [sentence], labels)[0], windows


@pytest.mark.parametrize("scheme, file_scheme", [("IOB2", "IOB1"), ("BIOES", "IOB2"), ("IOB2", "BIOES")])
def test_the_graph_tags_and_entities_equal_the_python_path(bert_uncased_vocab_file, scheme, file_scheme):
  """The tags are the run's predictions file's: the model's labels' entities in the training file's scheme."""
  labels = ner.labels_for(("LOC", "MISC", "ORG", "PER"), scheme)
  model = _model(labels)
  server = ner_serving.NerServer(model, bert_uncased_vocab_file,
                                 dict(_settings(labels, scheme), train_tag_scheme=file_scheme))
  outputs = {k: v.numpy() for k, v in server.serve_text(tf.constant(TEXTS)).items()}
  tokenizer, basic = FullTokenizer(bert_uncased_vocab_file), BasicTokenizer(do_lower_case=True)
  assert outputs["words"].shape[0] == len(TEXTS) and outputs["entity_type"].shape[0] == len(TEXTS)
  several_windows = entities_seen = rewritten = 0
  for i, text in enumerate(TEXTS):
    n = int(outputs["num_words"][i])
    words = _row(outputs, "words", i, n)
    starts, ends = _row(outputs, "word_start", i, n), _row(outputs, "word_end", i, n)
    # The basic tokenizer's words, as written in the text, at their character offsets.
    assert [text[s:e] for s, e in zip(starts, ends)] == words
    assert [w for word in words for w in basic.tokenize(word)] == basic.tokenize(text)
    tags = _row(outputs, "tags", i, n)
    if n:
      predicted, windows = _python_path(model, tokenizer, text, words, labels)
      assert tags == ner.convert_tags(predicted, file_scheme), text  # as ner_run.predict writes them
      several_windows += len(windows) > 1
      rewritten += tags != predicted
    assert _row(outputs, "tags", i, outputs["tags"].shape[1])[n:] == [""] * (outputs["tags"].shape[1] - n)
    spans = [(kind, starts[a], ends[b], text[starts[a]:ends[b]]) for kind, a, b in ner_metrics.entities(tags)]
    m = int(outputs["num_entities"][i])
    got = list(zip(*(_row(outputs, name, i, m) for name in ("entity_type", "entity_start", "entity_end",
                                                           "entity_text"))))
    assert got == spans, text
    entities_seen += m
  assert several_windows >= 2 and entities_seen > 10 and rewritten  # the model's labels broke the scheme somewhere


def test_the_encoder_sees_one_row_per_window_and_one_row_for_a_batch_without_words(bert_uncased_vocab_file):
  """No spare row beside real windows (at batch 1 it doubled the model's work); one [CLS] [SEP] row when no text
  has a word, so that the model never runs on an empty batch."""
  model = _model()
  server = ner_serving.NerServer(model, bert_uncased_vocab_file, _settings())
  seen = []

  def recording_model(features, training):
    seen.append(features["input_ids"].numpy().tolist())
    return model(features, training=training)

  object.__setattr__(server, "_model", recording_model)  # the server keeps its model out of tracking this way
  tf.config.run_functions_eagerly(True)  # concrete values inside the serving function
  try:
    one = server.serve_text(tf.constant(["EU rejects lamb."]))
    none = server.serve_text(tf.constant(["", "  \x00 "]))
    zero = server.serve_text(tf.constant([], tf.string))
  finally:
    tf.config.run_functions_eagerly(False)
  pieces = FullTokenizer(bert_uncased_vocab_file).convert_tokens_to_ids(["[CLS]", "eu", "rejects", "lamb", ".",
                                                                         "[SEP]"])
  spare = [101, 102] + [0] * 6  # [CLS] [SEP], rounded up to 8 positions like every batch
  assert seen == [[pieces + [0, 0]], [spare], [spare]]  # 6 pieces -> 8
  assert _row({k: v.numpy() for k, v in one.items()}, "words", 0, 4) == ["EU", "rejects", "lamb", "."]
  assert none["num_words"].numpy().tolist() == [0, 0] and none["num_entities"].numpy().tolist() == [0, 0]
  assert zero["num_words"].numpy().tolist() == [] and zero["tags"].shape[0] == 0


def test_a_plain_tag_set_serves_words_and_tags_without_entities(bert_uncased_vocab_file):
  labels = (".", "DT", "NN", "NNP", "VBZ", "O")  # "O" is a tag like the others here
  model = _model(labels)
  settings = dict(_settings(labels, ner.PLAIN), types=[], train_tag_scheme=ner.PLAIN)
  outputs = {k: v.numpy() for k, v in ner_serving.NerServer(model, bert_uncased_vocab_file, settings).serve_text(
      tf.constant(TEXTS)).items()}
  assert sorted(outputs) == ["num_words", "tags", "word_end", "word_start", "words"]
  tokenizer, seen = FullTokenizer(bert_uncased_vocab_file), set()
  for i, text in enumerate(TEXTS):
    n = int(outputs["num_words"][i])
    words, tags = _row(outputs, "words", i, n), _row(outputs, "tags", i, n)
    if n:
      assert tags == _python_path(model, tokenizer, text, words, labels)[0], text
    seen.update(tags)
  assert len(seen) >= 3 and seen <= set(labels)


def test_entity_words_follow_conlleval_on_random_labels():
  rng = random.Random(11)
  prefixes = list(ner_serving.PREFIX_CODES)
  for _ in range(40):
    texts = [[(rng.choice(prefixes), rng.randrange(3)) for _ in range(rng.randrange(0, 8))]
             for _ in range(rng.randrange(1, 5))]
    flat = [w for t in texts for w in t]
    first, last = ner_serving.entity_words(
        tf.constant([ner_serving.PREFIX_CODES[p] for p, _ in flat] or [], tf.int32),
        tf.constant([k for _, k in flat] or [], tf.int32), tf.constant([len(t) for t in texts], tf.int64))
    expected, offset = [], 0
    for t in texts:
      tags = ["O" if p == "O" else f"{p}-T{k}" for p, k in t]
      expected += [(offset + a, offset + b) for _, a, b in ner_metrics.entities(tags)]
      offset += len(t)
    assert list(zip(first.numpy().tolist(), last.numpy().tolist())) == expected, texts


def test_bad_settings_and_folders_are_refused(bert_uncased_vocab_file, tmp_path):
  model = _model()
  with pytest.raises(ValueError, match="ner.json has 5 labels but the model has 9 outputs"):
    ner_serving.NerServer(model, bert_uncased_vocab_file, dict(_settings(), labels=list(LABELS[:5])))
  with pytest.raises(ValueError, match=r"max_seq_length=99: must be in \[3, max_position_embeddings=13\]"):
    ner_serving.NerServer(model, bert_uncased_vocab_file, dict(_settings(), max_seq_length=99))
  with pytest.raises(FileNotFoundError, match="no ner.json; give a folder written by run_ner.py"):
    ner_serving.export_ner(str(tmp_path), str(tmp_path / "export"))
  with pytest.raises(ValueError, match="model_name='a/b': give a plain folder name"):
    ner_serving.export_ner(str(tmp_path), str(tmp_path / "export"), model_name="a/b")


def test_encoded_signature_gives_the_models_labels(bert_uncased_vocab_file):
  model = _model()
  server = ner_serving.NerServer(model, bert_uncased_vocab_file, _settings())
  x = {"input_ids": tf.constant([[101, 7327, 102, 0], [101, 2198, 2003, 102]], tf.int32),
       "input_mask": tf.constant([[1, 1, 1, 0], [1, 1, 1, 1]], tf.int32), "segment_ids": tf.zeros([2, 4], tf.int32)}
  out = server.serve_encoded(**x)
  np.testing.assert_allclose(out["logits"].numpy(), model(x).numpy(), atol=1e-6)
  assert out["label_id"].numpy().tolist() == np.argmax(model(x).numpy(), -1).tolist()
  with pytest.raises(tf.errors.InvalidArgumentError, match="input_mask must have the shape of input_ids"):
    server.serve_encoded(x["input_ids"], x["input_mask"][:, :3], x["segment_ids"])


_FRESH = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops
loaded = tf.saved_model.load(sys.argv[1])
out = loaded.signatures["serving_default"](text=tf.constant(json.loads(sys.argv[2])))
assert not [m for m in sys.modules if m.startswith("bert_tf")]
try:
  loaded.signatures["serving_default"](text=tf.constant([b"caf\\xe9"]))
  bad = "accepted"
except tf.errors.InvalidArgumentError as e:
  bad = "InvalidArgument"
print(json.dumps({"outputs": {k: v.numpy().tolist() for k, v in out.items()}, "bad_utf8": bad},
                 default=lambda b: b.decode()))
"""


def export_ner_model(directory, vocab_file: str) -> dict:
  """`_model()` saved as run_ner.py saves it into `directory`, and its export. Built once per session (conftest's
  `ner_export`)."""
  model_dir = str(directory / "ner_model")
  ner_run.save_model(_model(), _settings(), vocab_file, model_dir)
  return {"directory": directory, "model_dir": model_dir,
          "path": ner_serving.export_ner(model_dir, str(directory / "export"))}


@pytest.mark.slow  # an export and a fresh process that loads it: about 30 s
def test_export_serves_in_a_fresh_process(bert_uncased_vocab_file, ner_export):
  model_dir, path = ner_export["model_dir"], ner_export["path"]
  assert path == str(ner_export["directory"] / "export" / "ner" / "1")
  manifest = serving.read_manifest(path)
  assert (manifest["task"], manifest["task_kind"], manifest["labels"]) == ("ner", "ner", list(LABELS))
  assert manifest["signatures"]["serving_default"]["inputs"] == {"text": {"dtype": "string", "shape": [-1]}}
  assert sorted(manifest["signatures"]["serving_default"]["outputs"]) == sorted(
      ["num_words", "words", "word_start", "word_end", "tags", "num_entities", "entity_type", "entity_start",
       "entity_end", "entity_text"])
  assert manifest["signatures"]["encoded"]["outputs"]["logits"] == {"dtype": "float32", "shape": [-1, -1, 9]}
  assert os.path.exists(os.path.join(path, "assets.extra", "tf_serving_warmup_requests"))
  # The fresh process and the reload in this one need nothing of each other: they run side by side (two cores).
  with concurrent.futures.ThreadPoolExecutor(1) as pool:
    serving_fresh = pool.submit(subprocess.run, [sys.executable, "-c", _FRESH, path, json.dumps(TEXTS)],
                                capture_output=True, text=True, env=th.python_env(), timeout=300)
    reloaded, _ = ner_run.load_model(model_dir)
    server = ner_serving.NerServer(reloaded, bert_uncased_vocab_file, _settings())
    expected = server.serve_text(tf.constant(TEXTS))
    done = serving_fresh.result()
  assert done.returncode == 0, done.stderr[-3000:]
  result = json.loads(done.stdout.strip().splitlines()[-1])
  assert result["bad_utf8"] == "InvalidArgument"
  for name, value in expected.items():
    value = value.numpy().tolist()
    if value and isinstance(np.asarray(value).flat[0], bytes):
      value = [[v.decode() for v in row] for row in value]
    assert result["outputs"][name] == value, name
  assert sum(result["outputs"]["num_entities"]) > 5


_MEMORY = """
import json, sys
import tensorflow as tf
import tensorflow_text  # registers the tokenizer's ops
serve = tf.saved_model.load(sys.argv[1]).signatures["serving_default"]
sentence = "Peter Blackburn met officials of the European Commission in Brussels on Thursday. "
def peak_mb():  # this process's own peak (ru_maxrss would start at the parent's: it survives exec)
  with open("/proc/self/status") as f:
    return next(int(line.split()[1]) for line in f if line.startswith("VmHWM:")) / 1024
result = {}
for chars in [200] + [int(n) for n in sys.argv[2:]]:
  text = (sentence * (chars // len(sentence) + 1))[:chars]
  words = int(serve(text=tf.constant([text]))["num_words"][0])
  result[chars] = {"peak_mb": peak_mb(), "words": words}
print(json.dumps(result))
"""


@pytest.mark.slow  # a fresh process that loads the export and tags three texts: about 20 s
def test_a_long_text_takes_memory_linear_in_its_length(ner_export):
  """One text of 20,000 then 160,000 characters (about 3,000 and 24,000 words, 3,700 windows of this tagger's
  9 pieces) in a fresh process: the peak memory grows by a few tens of MB, not by copies of the text per word (the
  tokenizer's offsets and the words' characters once took 1.3 GB at 30,000 characters and 17.8 GB at 200,000)."""
  done = subprocess.run([sys.executable, "-c", _MEMORY, ner_export["path"], "20000", "160000"],
                        capture_output=True, text=True, env=th.python_env(), timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  result = {int(k): v for k, v in json.loads(done.stdout.strip().splitlines()[-1]).items()}
  sentence = "Peter Blackburn met officials of the European Commission in Brussels on Thursday. "
  basic = BasicTokenizer(do_lower_case=True)
  for chars in (20000, 160000):
    assert result[chars]["words"] == len(basic.tokenize((sentence * (chars // len(sentence) + 1))[:chars]))
  growth = {chars: result[chars]["peak_mb"] - result[200]["peak_mb"] for chars in (20000, 160000)}
  assert growth[160000] < 400, growth  # 8 times the text: tens of MB, with room for the allocator
