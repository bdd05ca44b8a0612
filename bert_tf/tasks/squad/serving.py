"""A SQuAD SavedModel that answers: raw question and context strings in, the answer string out.

Everything between the strings and the answer runs in the graph, as `squad.convert_examples_to_features` and
`squad_postprocess.postprocess` do it in Python:

  1. tokenization with byte offsets (`GraphTokenizer.tokenize_with_offsets`), the question cut to
     max_query_length pieces;
  2. windows over the context, `doc_stride` pieces apart, T = max_seq_length tokens each
     ([CLS] question [SEP] window [SEP]), and each token's "max context" window;
  3. the encoder and span head over all windows of the batch at once, padded to the longest window;
  4. span selection: the n_best_size highest start and end logits of each window, pairs with both ends in the
     window's context part, start in its max-context window, start <= end < start + max_answer_length; the
     pair with the highest start + end logit over all windows (the first such pair in window, start-rank,
     end-rank order on ties: the order in which the Python path sorts its candidates);
  5. SQuAD 2.0: the null score (the minimum over the windows of start[CLS] + end[CLS]), the null-score
     difference (null - best start - best end) and the model's stored `null_score_diff_threshold`.

Signatures (B: batch; L: tokens, at most max_position_embeddings):

  serving_default  question, context  tf.string [B], valid UTF-8
                   -> answer       tf.string [B]  the context's text from the answer's first to last character,
                                                  each run of SQuAD whitespace as one space (as the Python
                                                  path's words joined by spaces); "" for no answer
                      start_char, end_char int32 [B]  the answer's [start, end) in the context in characters
                                                  (Python string indices); -1, -1 with answer ""
                      score        float32 [B]  start + end logit of the best span (0 when there is none)
                      null_score_diff float32 [B]  (SQuAD 2.0 models only) null score - score; the answer is ""
                                                  when it exceeds the stored threshold (float32 max when the
                                                  context offers no span)
  encoded          input_ids, input_mask, segment_ids int32 [B, L] (windows made by the client)
                   -> start_logits, end_logits float32 [B, L] (padding at PAD_LOGIT)

The answer text follows google-research's `get_final_text`, fallbacks included: the predicted pieces'
characters, or the whole words holding them where that function gives up (see `_final_text_span`).
Known differences from predictions.json, all rare (docs/squad.md gives the measured rate): `get_final_text`
looks the predicted text up by its first occurrence in the words, so a piece text repeated earlier in them
("s" in "Lakers Stadium's") can make it return another place's spelling; logits of windows batched
differently may differ in the last float32 bits, which can flip near-ties; a context with no possible span
gives "" where SQuAD 1.1's predictions.json says "empty".
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import tensorflow as tf

from bert_tf.data import graph_tokenizer
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.common.serving import TaskServer, model_folder
from bert_tf.tasks.squad import data as squad
from bert_tf.tasks.squad import folder
from bert_tf.tasks.squad import model as sf
from bert_tf.tasks.squad import postprocess as squad_postprocess

TEXT_INPUTS = ("question", "context")
# The whitespace that separates SQuAD's "doc tokens" (squad.split_context): the Python path joins the words of
# an answer with one space, so the export collapses each run of it the same way.
_RE_SQUAD_WHITESPACE = "[ \\t\\r\\n\\x{202F}]+"
NO_SPAN_NULL_DIFF = float(tf.float32.max)  # Python's path writes sys.float_info.max; float32 cannot hold it.
DEFAULT_WARMUP: tuple[dict[str, str], ...] = (
    {"question": "Who wrote the letter?", "context": "The letter was written by Ada Lovelace in 1843."},
    {"question": "Where is the river?", "context": " ".join(["The river runs north through the old town."] * 60)},
)


class SquadServer(TaskServer):
  """The SavedModel's root (`TaskServer`): a float32 `BertSpanLabeler`, its tokenizer and the two serving functions.

  Args:
    model: the fine-tuned span labeller (float32).
    vocab_file: its vocabulary.
    settings: the model's squad.json (`folder.read_settings`): max_seq_length, doc_stride, max_query_length,
      do_lower_case, version_2_with_negative, null_score_diff_threshold.
    n_best_size, max_answer_length: span selection, as google-research's flags.
  """

  def __init__(self, model: sf.BertSpanLabeler, vocab_file: str, settings: Mapping[str, Any],
               n_best_size: int = squad_postprocess.N_BEST_SIZE,
               max_answer_length: int = squad_postprocess.MAX_ANSWER_LENGTH,
               max_request_chars: int | None = None):
    super().__init__("bert_squad_server", model, vocab_file, bool(settings["do_lower_case"]), needs="SQuAD windows",
                     max_request_chars=max_request_chars)
    vocab = self.tokenizer.vocab
    self._cls_id, self._sep_id = vocab["[CLS]"], vocab["[SEP]"]
    self._unk_id = vocab["[UNK]"]  # GraphTokenizer has checked it is there
    self._max_seq_length = int(settings["max_seq_length"])
    self._doc_stride = int(settings["doc_stride"])
    self._max_query_length = int(settings["max_query_length"])
    squad.check_window_sizes(self._max_seq_length, self._doc_stride, self._max_query_length)
    squad_postprocess.check_sizes(n_best_size, max_answer_length)
    if self._max_seq_length > model.config.max_position_embeddings:
      raise ValueError(f"max_seq_length={self._max_seq_length} exceeds the model's max_position_embeddings="
                       f"{model.config.max_position_embeddings}")
    self._n_best_size = n_best_size
    self._max_answer_length = max_answer_length
    self._version_2 = bool(settings["version_2_with_negative"])
    self._threshold = float(settings.get("null_score_diff_threshold") or 0.0)
    text_specs = [tf.TensorSpec([None], tf.string, name=name) for name in TEXT_INPUTS]
    self.serve_text = tf.function(self._serve_text, input_signature=text_specs)
    id_specs = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]
    self.serve_encoded = tf.function(self._serve_encoded, input_signature=id_specs)

  # -- encoded

  def _logits(self, features: Mapping[str, tf.Tensor]) -> tuple[tf.Tensor, tf.Tensor]:
    """float32 [W, L] start and end logits, padded positions at PAD_LOGIT (out of every top-k)."""
    # Padded positions' logits are replaced below, so their work is skipped; a long context's windows run a slice
    # at a time.
    outputs = self.run_model(features, {"start_logits": tf.float32, "end_logits": tf.float32},
                             lambda output: {name: tf.cast(output[name], tf.float32)
                                             for name in ("start_logits", "end_logits")})
    real = features["input_mask"] > 0
    pad = tf.constant(sf.PAD_LOGIT, tf.float32)
    return (tf.where(real, tf.cast(outputs["start_logits"], tf.float32), pad),
            tf.where(real, tf.cast(outputs["end_logits"], tf.float32), pad))

  def _serve_encoded(self, input_ids, input_mask, segment_ids):
    from bert_tf.export import serving

    features = serving.checked_encoded_inputs(self._model.config, input_ids, input_mask, segment_ids)
    start, end = self._logits(features)
    return {"start_logits": start, "end_logits": end}

  # -- text

  def _serve_text(self, question, context):
    check = tf.debugging.assert_equal(
        tf.size(question), tf.size(context),
        message="question and context must hold the same number of examples (one context per question)")
    with tf.control_dependencies([check]):
      # A blank question asks nothing (training refuses one): refused. A blank context has no span: answered
      # "" (no answer), as any context without one.
      question = self.checked_text("question", question)
      context = self.checked_text("context", context, allow_blank=True)
    batch = tf.size(question)
    T = self._max_seq_length  # pylint: disable=invalid-name

    query = self.tokenizer.tokenize(question)[:, :self._max_query_length]  # int64 [B, (Q)]
    tokens = self.tokenizer.tokenize_with_offsets(context)
    doc = tokens.ids.merge_dims(1, 2)  # int64 [B, (N)]
    doc_begin = tokens.piece_begin.merge_dims(1, 2).flat_values  # int64 [sum N], byte offsets in the context
    doc_end = tokens.piece_end.merge_dims(1, 2).flat_values

    # Windows (squad._doc_spans): starts k * step, step = min(room, doc_stride), until one reaches the end.
    q_len = tf.cast(query.row_lengths(), tf.int32)  # [B]
    n_doc = tf.cast(doc.row_lengths(), tf.int32)  # [B]
    room = T - q_len - 3  # [B] context tokens a window holds (>= 1: check_window_sizes)
    step = tf.minimum(room, self._doc_stride)
    n_windows = (tf.maximum(n_doc - room, 0) + step - 1) // step + 1  # [B]; one (empty) for an empty context
    max_windows = tf.reduce_max(tf.concat([n_windows, [1]], 0))
    k = tf.range(max_windows)[tf.newaxis, :]  # [1, K]
    starts = k * step[:, tf.newaxis]  # [B, K]
    lengths = tf.clip_by_value(n_doc[:, tf.newaxis] - starts, 0, room[:, tf.newaxis])
    is_window = k < n_windows[:, tf.newaxis]
    grid = tf.where(is_window)  # [W, 2] (example, window index), in example then window order
    w_example = tf.cast(grid[:, 0], tf.int32)
    w_index = tf.cast(grid[:, 1], tf.int32)
    w_start = tf.gather_nd(starts, grid)  # [W]
    w_length = tf.gather_nd(lengths, grid)
    w_query = tf.gather(q_len, w_example)

    is_max = self._max_context(w_example, w_index, w_start, w_length, room, step, n_doc, n_windows)  # [W, T]

    # Inputs [W, L]: [CLS] question [SEP] window [SEP], zero-padded to the longest window of the batch.
    seq_len = w_query + w_length + 3
    width = tf.maximum(tf.reduce_max(tf.concat([seq_len, [3]], 0)), 3)
    pos = tf.range(width)[tf.newaxis, :]  # [1, L]
    doc_pos = pos - w_query[:, tf.newaxis] - 2  # the window's context token at each position
    in_query = (pos >= 1) & (pos <= w_query[:, tf.newaxis])
    in_doc = (doc_pos >= 0) & (doc_pos < w_length[:, tf.newaxis])
    is_sep = (pos == w_query[:, tf.newaxis] + 1) | (doc_pos == w_length[:, tf.newaxis])
    q_row = tf.gather(tf.cast(query.row_starts(), tf.int32), w_example)[:, tf.newaxis]
    d_row = tf.gather(tf.cast(doc.row_starts(), tf.int32), w_example)[:, tf.newaxis]
    doc_index = d_row + w_start[:, tf.newaxis] + doc_pos  # [W, L] into the flat context pieces
    q_ids = _gather_or_zero(tf.cast(query.flat_values, tf.int32), q_row + pos - 1, in_query)
    d_ids = _gather_or_zero(tf.cast(doc.flat_values, tf.int32), doc_index, in_doc)
    input_ids = tf.where(pos == 0, self._cls_id, tf.where(is_sep, self._sep_id, q_ids + d_ids))
    input_mask = tf.cast(pos < seq_len[:, tf.newaxis], tf.int32)
    segment_ids = tf.cast(in_doc | (doc_pos == w_length[:, tf.newaxis]), tf.int32)
    start_logits, end_logits = self._logits(
        {"input_ids": input_ids, "input_mask": input_mask, "segment_ids": segment_ids})

    # Span selection (squad_postprocess.postprocess), scores in float64 as Python adds the float32 logits.
    top = tf.minimum(self._n_best_size, width)
    start_values, start_top = tf.math.top_k(start_logits, top)  # [W, K]: ties keep position order
    end_values, end_top = tf.math.top_k(end_logits, top)
    start_doc = start_top - w_query[:, tf.newaxis] - 2
    end_doc = end_top - w_query[:, tf.newaxis] - 2
    start_ok = ((start_doc >= 0) & (start_doc < w_length[:, tf.newaxis])
                & tf.gather(is_max, tf.maximum(start_doc, 0), batch_dims=1))
    end_ok = (end_doc >= 0) & (end_doc < w_length[:, tf.newaxis])
    pair_ok = (start_ok[:, :, tf.newaxis] & end_ok[:, tf.newaxis, :]
               & (start_top[:, :, tf.newaxis] <= end_top[:, tf.newaxis, :])
               & (end_top[:, tf.newaxis, :] < start_top[:, :, tf.newaxis] + self._max_answer_length))
    start64, end64 = tf.cast(start_values, tf.float64), tf.cast(end_values, tf.float64)
    pair_score = start64[:, :, tf.newaxis] + end64[:, tf.newaxis, :]
    neg_inf = tf.constant(-float("inf"), tf.float64)
    pair_score = tf.reshape(tf.where(pair_ok, pair_score, neg_inf), [-1, top * top])  # [W, K*K]
    # [B, windows * K*K] in candidate order; the first maximum wins, as the stable sort of the Python path.
    by_example = tf.tensor_scatter_nd_update(tf.fill([batch, max_windows, top * top], neg_inf), grid, pair_score)
    by_example = tf.reshape(by_example, [batch, -1])
    best_score = tf.reduce_max(tf.concat([by_example, tf.fill([batch, 1], neg_inf)], 1), axis=1)  # [B]
    has_span = best_score > neg_inf
    candidates = tf.shape(by_example)[1]
    best = tf.reduce_min(tf.where(tf.equal(by_example, best_score[:, tf.newaxis]),
                                  tf.range(candidates)[tf.newaxis, :], candidates), axis=1)
    best = tf.where(has_span, best, 0)
    window_of = tf.tensor_scatter_nd_update(tf.zeros([batch, max_windows], tf.int32), grid,
                                            tf.range(tf.shape(grid)[0], dtype=tf.int32))
    flat_window = tf.gather(window_of, best // (top * top), batch_dims=1)  # [B] (garbage without a span)
    flat_window = tf.minimum(flat_window, tf.maximum(tf.shape(grid)[0] - 1, 0))
    rank = best % (top * top)
    start_pos = tf.gather(tf.gather(start_top, flat_window), rank // top, batch_dims=1)
    end_pos = tf.gather(tf.gather(end_top, flat_window), rank % top, batch_dims=1)
    start_logit = tf.gather(tf.gather(start64, flat_window), rank // top, batch_dims=1)
    end_logit = tf.gather(tf.gather(end64, flat_window), rank % top, batch_dims=1)

    # Pieces -> bytes of the context -> the answer text and its character offsets.
    first_piece = tf.gather(doc_index, flat_window)
    first_piece = tf.gather(first_piece, start_pos, batch_dims=1)
    last_piece = tf.gather(tf.gather(doc_index, flat_window), end_pos, batch_dims=1)
    safe = lambda values, index: tf.gather(tf.concat([values, [0]], 0),  # noqa: E731
                                           tf.where(has_span, tf.cast(index, tf.int32), tf.size(values)))
    begin_byte = tf.cast(safe(doc_begin, first_piece), tf.int32)
    end_byte = tf.cast(safe(doc_end, last_piece), tf.int32)
    begin_byte, end_byte = self._final_text_span(context, tokens, doc, first_piece, last_piece, begin_byte,
                                                 end_byte, has_span)
    raw_answer = tf.strings.substr(context, begin_byte, end_byte - begin_byte)
    start_char = tf.strings.length(tf.strings.substr(context, tf.zeros_like(begin_byte), begin_byte), unit="UTF8_CHAR")
    end_char = start_char + tf.strings.length(raw_answer, unit="UTF8_CHAR")
    answered = has_span
    outputs = {}
    if self._version_2:
      null_window = tf.cast(start_logits[:, 0], tf.float64) + tf.cast(end_logits[:, 0], tf.float64)
      null_score = tf.math.unsorted_segment_min(null_window, w_example, batch)  # [B]
      null_diff = tf.where(has_span, null_score - start_logit - end_logit, NO_SPAN_NULL_DIFF)
      answered = has_span & ~(null_diff > self._threshold)
      outputs["null_score_diff"] = tf.cast(null_diff, tf.float32)
    outputs.update({
        "answer": tf.where(answered, tf.strings.regex_replace(raw_answer, _RE_SQUAD_WHITESPACE, " "), ""),
        "start_char": tf.where(answered, start_char, -1),
        "end_char": tf.where(answered, end_char, -1),
        "score": tf.cast(tf.where(has_span, start_logit + end_logit, 0.0), tf.float32),
    })
    return outputs

  def _final_text_span(self, context, tokens, doc, first_piece, last_piece, begin_byte, end_byte, has_span):
    """[begin, end) bytes of the answer as `squad_postprocess.final_text` gives it: the predicted pieces'
    characters, except where that function falls back to the whole words (SQuAD's whitespace-separated doc
    tokens) that hold them. It does so when the words, without spaces, have another number of characters
    than their basic tokens (a removed control character, a no-break space inside a word, a lower-casing
    that changes the length), and when a piece is [UNK] (its text is not in the words). int32 [B] each."""
    batch = tf.size(context)
    rows = tf.range(batch, dtype=tf.int64)
    # The doc tokens holding the answer's first and last byte; keys (row << 32) + byte order all of them.
    _, word_begin, word_end = graph_tokenizer.regex_split_with_offsets(context, _RE_SQUAD_WHITESPACE)
    keys = tf.bitwise.left_shift(word_begin.value_rowids(), 32) + word_begin.flat_values
    first = tf.searchsorted(keys, tf.bitwise.left_shift(rows, 32) + tf.cast(begin_byte, tf.int64),
                            side="right") - 1
    last = tf.searchsorted(keys, tf.bitwise.left_shift(rows, 32) + tf.cast(end_byte - 1, tf.int64),
                           side="right") - 1
    first, last = tf.maximum(first, 0), tf.maximum(last, 0)
    words_begin = tf.cast(_gather_or_zero(word_begin.flat_values, first, has_span), tf.int32)
    words_end = tf.cast(_gather_or_zero(word_end.flat_values, last, has_span), tf.int32)
    span = tf.strings.substr(context, words_begin, words_end - words_begin)
    orig_chars = tf.strings.length(tf.strings.regex_replace(span, _RE_SQUAD_WHITESPACE, ""), unit="UTF8_CHAR")
    # The basic tokens inside those words, and their characters as tokenized.
    token_keys = tf.bitwise.left_shift(tokens.word_begin.value_rowids(), 32) + tokens.word_begin.flat_values
    token_chars = tf.concat([[0], tf.cumsum(tf.strings.length(tokens.words.flat_values, unit="UTF8_CHAR"))], 0)
    lo = tf.searchsorted(token_keys, tf.bitwise.left_shift(rows, 32) + tf.cast(words_begin, tf.int64))
    hi = tf.searchsorted(token_keys, tf.bitwise.left_shift(rows, 32) + tf.cast(words_end, tf.int64))
    tok_chars = tf.gather(token_chars, hi) - tf.gather(token_chars, lo)
    unk = tf.concat([[0], tf.cumsum(tf.cast(tf.equal(doc.flat_values, self._unk_id), tf.int32))], 0)
    # Clipped: without a span the pieces are garbage, and a batch of empty contexts has no pieces at all.
    first_piece, last_piece = tf.maximum(first_piece, 0), tf.minimum(tf.maximum(last_piece, 0), tf.size(unk) - 2)
    has_unk = tf.gather(unk, last_piece + 1) > tf.gather(unk, tf.minimum(first_piece, tf.size(unk) - 1))
    whole_words = has_span & ((orig_chars != tok_chars) | has_unk)
    return tf.where(whole_words, words_begin, begin_byte), tf.where(whole_words, words_end, end_byte)

  def _max_context(self, w_example, w_index, w_start, w_length, room, step, n_doc, n_windows):
    """bool [W, T]: whether window w scores its j-th context token (`squad._is_max_context`): among the windows
    holding the token, the one maximising min(left, right context) + 0.01 x its length; the first on ties.

    Windows start `step` tokens apart and hold `room` tokens (the last one fewer), so a token is in at most
    ceil(room / step) of them, starting from the first window that reaches it: only those are scored, which
    keeps this [W, T, C] for contexts of any length (C = that count + 1)."""
    T = self._max_seq_length  # pylint: disable=invalid-name
    w_room, w_step = tf.gather(room, w_example)[:, tf.newaxis, tf.newaxis], tf.gather(step, w_example)
    w_step = w_step[:, tf.newaxis, tf.newaxis]
    w_docs = tf.gather(n_doc, w_example)[:, tf.newaxis, tf.newaxis]
    w_count = tf.gather(n_windows, w_example)[:, tf.newaxis, tf.newaxis]
    count = tf.reduce_max(tf.concat([(room + step - 1) // step, [0]], 0)) + 1
    j = tf.range(T)[tf.newaxis, :]
    p = (w_start[:, tf.newaxis] + j)[:, :, tf.newaxis]  # [W, T, 1] the context token
    first = tf.maximum((p - w_room + w_step) // w_step, 0)  # the first window whose end reaches p
    k = first + tf.range(count)[tf.newaxis, tf.newaxis, :]  # [W, T, C] candidate windows, in window order
    k_start = k * w_step
    k_length = tf.clip_by_value(w_docs - k_start, 0, w_room)
    k_end = k_start + k_length - 1
    holds = (k < w_count) & (k_start <= p) & (p <= k_end)
    score = (tf.cast(tf.minimum(p - k_start, k_end - p), tf.float64) + 0.01 * tf.cast(k_length, tf.float64))
    score = tf.where(holds, score, -float("inf"))
    top = tf.reduce_max(score, axis=2, keepdims=True)
    big = tf.int32.max
    best = tf.reduce_min(tf.where(tf.equal(score, top) & holds, k, big), axis=2)  # [W, T]
    return tf.equal(best, w_index[:, tf.newaxis]) & (j < w_length[:, tf.newaxis])


def _gather_or_zero(values: tf.Tensor, index: tf.Tensor, keep: tf.Tensor) -> tf.Tensor:
  """values[index] where keep, else 0 (index may be out of range there)."""
  padded = tf.concat([values, tf.zeros([1], values.dtype)], 0)
  return tf.gather(padded, tf.where(keep, index, tf.size(values)))


def export_squad(model_dir: str, export_dir: str, model_name: str = "squad", version: int | None = None,
                 n_best_size: int = squad_postprocess.N_BEST_SIZE,
                 max_answer_length: int = squad_postprocess.MAX_ANSWER_LENGTH,
                 null_score_diff_threshold: float | None = None,
                 warmup: Sequence[Mapping[str, str]] = DEFAULT_WARMUP,
                 max_request_chars: int | None = None) -> str:
  """Exports a fine-tuned SQuAD model folder (`<run_squad --output_dir>/squad_model`) to
  `<export_dir>/<model_name>/<version>/` through the shared export path; returns that path.

  The window sizes, casing, version and null_score_diff_threshold come from the folder's squad.json (where
  --do_eval stored the best threshold); `null_score_diff_threshold` overrides the stored one. A request's question
  or context field holding more than `max_request_chars` characters is refused (`limits`).
  """
  model_dir, settings, vocab_file = model_folder(model_dir, export_dir, model_name, version, folder.FOLDER)
  if null_score_diff_threshold is not None:
    settings["null_score_diff_threshold"] = float(null_score_diff_threshold)
  model = folder.load_model(model_dir)
  server = SquadServer(model, vocab_file, settings, n_best_size, max_answer_length, max_request_chars)
  manifest = {
      "task": "squad", "task_kind": "squad",
      "version_2_with_negative": bool(settings["version_2_with_negative"]),
      "null_score_diff_threshold": float(settings.get("null_score_diff_threshold") or 0.0),
      "max_seq_length": int(settings["max_seq_length"]), "doc_stride": int(settings["doc_stride"]),
      "max_query_length": int(settings["max_query_length"]), "do_lower_case": bool(settings["do_lower_case"]),
      "n_best_size": n_best_size, "max_answer_length": max_answer_length,
  }
  return server.export(export_dir, model_name, version, warmup, manifest, vocab_file)
