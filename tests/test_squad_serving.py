"""bert_tf.tasks.squad.serving: the in-graph SQuAD pipeline (windows, max context, span selection, threshold)
gives the answers of the Python path (`squad.convert_examples_to_features` + the model + `squad_postprocess`)
on the same model, for v1.1 and v2.0 settings, contexts of many windows and batches that mix lengths."""

import random

import keras
import numpy as np
import pytest
import tensorflow as tf

from bert_tf.config import BertConfig
from bert_tf.data import tokenization
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.squad import data as squad
from bert_tf.tasks.squad import model as squad_model
from bert_tf.tasks.squad import postprocess as squad_postprocess
from bert_tf.tasks.squad import serving as squad_serving

T, STRIDE, QUERY = 41, 7, 9  # odd sizes: max_seq_length, doc_stride, max_query_length
WORDS = ("the river runs north through old town in 1990s , ( 1895 - 1943 ) . café naïve Beyoncé's Knowles-Carter "
         "ÉCOLE résumé Tokyo 東京 don't U.S. 3.14 \"quoted\" [SEP] unbelievably antidisestablishmentarianism "
         "a an of on at by to").split() + ["x\x00y", "\x00", "수도입니다.", "Cafe\u0301."]  # NULs cut nothing
SPACES = (" ", " ", " ", " ", "  ", "\n", "\u202f", " \t ", "\u00a0")


def _text(rng: random.Random, n: int) -> str:
  out = []
  for i in range(n):
    out.append(rng.choice(WORDS))
    out.append(rng.choice(SPACES) if i < n - 1 else "")
  return "".join(out)


@pytest.fixture(scope="module")
def model(bert_uncased_vocab_file):
  config = BertConfig.from_preset("tiny", vocab_size=30522, num_hidden_layers=1, hidden_size=24,
                                  num_attention_heads=2, intermediate_size=31, max_position_embeddings=T + 3,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
  keras.utils.set_random_seed(7)
  labeller = squad_model.BertSpanLabeler(config, dtype="float32")
  labeller({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  # A random span head scores near zero everywhere, so near-ties would decide; spread the logits.
  kernel, bias = labeller.span_output.get_weights()
  labeller.span_output.set_weights([kernel * 40.0, bias])
  return labeller


def _examples(n: int, seed: int) -> tuple[list[str], list[str]]:
  rng = random.Random(seed)
  # A blank question (NULs alone, say) is refused (below): each ends with a word.
  questions = [_text(rng, rng.randint(0, 14)) + " why" for _ in range(n)]
  # Mostly short contexts, some spanning many windows, one empty and one of only spaces.
  contexts = [_text(rng, rng.choice((1, 3, 8, 20, 45, 120))) for _ in range(n)]
  contexts[3], contexts[5] = "", " \n "
  return questions, contexts


def _python_answers(model, vocab_file, questions, contexts, version_2, threshold):
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  examples = []
  for i, (q, c) in enumerate(zip(questions, contexts)):
    doc_tokens, _ = squad.split_context(c)
    examples.append(squad.SquadExample(qas_id=str(i), question_text=q, doc_tokens=tuple(doc_tokens)))
  features = list(squad.convert_examples_to_features(examples, tokenizer, False, T, STRIDE, QUERY))
  inputs = {name: tf.constant([getattr(f, name) for f in features], tf.int32) for name in INPUT_NAMES}
  logits = squad_model.squad_predictions(model, T)(inputs).numpy()
  results = {f.unique_id: (logits[i, 0], logits[i, 1]) for i, f in enumerate(features)}
  predictions = squad_postprocess.postprocess(examples, features, results, version_2_with_negative=version_2,
                                              null_score_diff_threshold=threshold)
  return predictions, len(features)


@pytest.mark.parametrize("version_2", [False, True])
def test_exported_answers_equal_the_python_path(model, bert_uncased_vocab_file, version_2):
  questions, contexts = _examples(61, seed=3 + version_2)
  threshold = 0.7 if version_2 else 0.0
  settings = {"max_seq_length": T, "doc_stride": STRIDE, "max_query_length": QUERY, "do_lower_case": True,
              "version_2_with_negative": version_2, "null_score_diff_threshold": threshold}
  server = squad_serving.SquadServer(model, bert_uncased_vocab_file, settings)
  expected, num_windows = _python_answers(model, bert_uncased_vocab_file, questions, contexts, version_2,
                                          threshold)
  assert num_windows > 3 * len(questions)  # many contexts span several windows
  # Two uneven batches: the graph pads each to its own longest window.
  got = {}
  for lo, hi in ((0, 17), (17, len(questions))):
    out = server.serve_text(tf.constant(questions[lo:hi]), tf.constant(contexts[lo:hi]))
    for name, values in out.items():
      got.setdefault(name, []).extend(values.numpy().tolist())
  answers = [a.decode("utf-8") for a in got["answer"]]
  for i, answer in enumerate(answers):
    want = expected.predictions[str(i)]
    if want == "empty" and not version_2:  # SQuAD 1.1's placeholder when no span is possible
      want = ""
    assert answer == want, (i, questions[i], contexts[i])
    start, end = got["start_char"][i], got["end_char"][i]
    if answer:
      # The offsets point at the answer in the context, whitespace runs collapsed.
      assert " ".join(squad.split_context(contexts[i][start:end])[0]) == answer
    else:
      assert (start, end) == (-1, -1)
  assert sum(bool(a) for a in answers) > 20
  assert answers[3] == answers[5] == ""  # empty and blank contexts
  if version_2:
    assert 0 < sum(not a for a in answers) < len(answers) - 20  # the threshold said "no answer" to some
    for i in range(len(answers)):
      odds = expected.null_odds[str(i)]
      if odds == squad_postprocess.NO_CANDIDATE_NULL_ODDS:
        assert got["null_score_diff"][i] == squad_serving.NO_SPAN_NULL_DIFF
      else:
        assert got["null_score_diff"][i] == pytest.approx(odds, abs=1e-3)
  else:
    assert "null_score_diff" not in got
  # score: the best span's start + end logit, as nbest_predictions.json's first non-null entry.
  for i in range(len(answers)):
    entries = [e for e in expected.nbest[str(i)] if e["text"] and e["text"] != "empty"]
    if entries:
      assert got["score"][i] == pytest.approx(entries[0]["start_logit"] + entries[0]["end_logit"], abs=1e-3)


def test_offsets_are_characters_and_answers_keep_the_context_spelling(model, bert_uncased_vocab_file):
  settings = {"max_seq_length": T, "doc_stride": STRIDE, "max_query_length": QUERY, "do_lower_case": True,
              "version_2_with_negative": False, "null_score_diff_threshold": 0.0}
  server = squad_serving.SquadServer(model, bert_uncased_vocab_file, settings)
  context = "Café  Beyoncé's ÉCOLE\n1990s"
  out = server.serve_text(tf.constant(["who"]), tf.constant([context]))
  answer = out["answer"].numpy()[0].decode("utf-8")
  start, end = int(out["start_char"][0]), int(out["end_char"][0])
  assert 0 <= start < end <= len(context)
  assert answer == " ".join(context[start:end].split())  # characters, not bytes: the accents cost no offset
  assert answer and answer[0] != " " and answer[-1] != " "


def test_bad_requests_are_errors_not_crashes(model, bert_uncased_vocab_file):
  settings = {"max_seq_length": T, "doc_stride": STRIDE, "max_query_length": QUERY, "do_lower_case": True,
              "version_2_with_negative": True, "null_score_diff_threshold": 0.0}
  server = squad_serving.SquadServer(model, bert_uncased_vocab_file, settings)
  with pytest.raises(tf.errors.InvalidArgumentError, match="same number of examples"):
    server.serve_text(tf.constant(["a", "b"]), tf.constant(["c"]))
  for question, context, message in ((b"a", b"caf\xe9", "context must be valid UTF-8"),
                                      (b"caf\xe9", b"a", "question must be valid UTF-8")):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      server.serve_text(tf.constant([question]), tf.constant([context]))
  # A blank question asks nothing: refused, naming the row; a blank context is answered "" (no span there).
  with pytest.raises(tf.errors.InvalidArgumentError, match="question is empty or blank .* in row 1 of the batch"):
    server.serve_text(tf.constant(["Who?", " \t\x01", "What?"]), tf.constant(["Ada.", "Bo.", "Cy."]))
  blank_context = server.serve_text(tf.constant(["Who?", "What?"]), tf.constant(["", " \n "]))
  assert blank_context["answer"].numpy().tolist() == [b"", b""]
  assert blank_context["start_char"].numpy().tolist() == [-1, -1]
  empty = server.serve_text(tf.constant([], tf.string), tf.constant([], tf.string))
  assert {name: value.shape[0] for name, value in empty.items()} == {
      "answer": 0, "start_char": 0, "end_char": 0, "score": 0, "null_score_diff": 0}


def test_settings_are_checked_before_anything_is_built(model, bert_uncased_vocab_file):
  settings = {"max_seq_length": T, "doc_stride": STRIDE, "max_query_length": T - 3, "do_lower_case": True,
              "version_2_with_negative": False, "null_score_diff_threshold": 0.0}
  with pytest.raises(ValueError, match="max_query_length"):
    squad_serving.SquadServer(model, bert_uncased_vocab_file, settings)
  with pytest.raises(ValueError, match="max_position_embeddings"):
    squad_serving.SquadServer(model, bert_uncased_vocab_file, dict(settings, max_query_length=QUERY,
                                                                     max_seq_length=T + 4))
  with pytest.raises(ValueError, match="n_best_size"):
    squad_serving.SquadServer(model, bert_uncased_vocab_file, dict(settings, max_query_length=QUERY),
                              n_best_size=0)
  assert np.isfinite(squad_serving.NO_SPAN_NULL_DIFF)


def test_a_very_long_context_in_a_batch_of_short_ones(model, bert_uncased_vocab_file, monkeypatch):
  """Over 300 windows, run by the encoder 16 at a time (`serving.in_slices`): the answers of the Python path, which
  runs every window at once."""
  from bert_tf.export import serving

  settings = {"max_seq_length": T, "doc_stride": STRIDE, "max_query_length": QUERY, "do_lower_case": True,
              "version_2_with_negative": False, "null_score_diff_threshold": 0.0}
  monkeypatch.setattr(serving, "ENCODER_TOKENS_PER_STEP", 16 * T)  # read when the signature is traced
  server = squad_serving.SquadServer(model, bert_uncased_vocab_file, settings)
  rng = random.Random(11)
  questions = ["Where?", _text(rng, 30), "What year?"]  # the second question is cut to QUERY pieces
  contexts = ["A short one.", _text(rng, 2500), "In 1990s ."]
  expected, num_windows = _python_answers(model, bert_uncased_vocab_file, questions, contexts, False, 0.0)
  assert num_windows > 300
  out = server.serve_text(tf.constant(questions), tf.constant(contexts))
  assert [a.decode("utf-8") for a in out["answer"].numpy()] == [expected.predictions[str(i)] for i in range(3)]


def test_encoded_signature_gives_the_masked_logits(model, bert_uncased_vocab_file):
  settings = {"max_seq_length": T, "doc_stride": STRIDE, "max_query_length": QUERY, "do_lower_case": True,
              "version_2_with_negative": True, "null_score_diff_threshold": 0.0}
  server = squad_serving.SquadServer(model, bert_uncased_vocab_file, settings)
  ids = tf.constant([[101, 2054, 102, 7592, 102, 0, 0], [101, 2073, 102, 3000, 2003, 1996, 102]], tf.int32)
  mask = tf.cast(ids > 0, tf.int32)
  segments = tf.constant([[0, 0, 0, 1, 1, 0, 0], [0, 0, 0, 1, 1, 1, 1]], tf.int32)
  out = server.serve_encoded(ids, mask, segments)
  direct = model({"input_ids": ids, "input_mask": mask, "segment_ids": segments})
  for name in ("start_logits", "end_logits"):
    np.testing.assert_allclose(out[name].numpy()[mask.numpy() > 0], direct[name].numpy()[mask.numpy() > 0],
                               atol=1e-5)
    assert (out[name].numpy()[mask.numpy() == 0] == squad_model.PAD_LOGIT).all()
  with pytest.raises(tf.errors.InvalidArgumentError, match="input_ids must be < vocab_size"):
    server.serve_encoded(ids + 40000, mask, segments)
