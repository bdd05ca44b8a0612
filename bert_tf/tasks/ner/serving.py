"""A named-entity SavedModel: raw text in, each word's tag and the entities (type, characters, text) out.

Everything between the string and the entities runs in the graph, as `ner.make_windows`, `ner.predicted_tags`
and `ner_metrics.entities` do it in Python for one sentence:

  1. words and pieces with byte offsets (`GraphTokenizer.tokenize_with_offsets`: the basic tokenizer's words,
     so "U.S." is the four words "U", ".", "S", "."); a word without pieces becomes [UNK] and a word keeps at
     most T - 2 pieces, as `ner.word_pieces`;
  2. the text cut into centres of whole words of at most T - 2 pieces (greedily, `ner._centres`), each centre
     one window [CLS] left context, centre, right context [SEP] with the rest of the text as context
     (`ner.make_windows` with the text as one sentence; T = the model's max_seq_length);
  3. the encoder and tag head over all windows of the batch at once; each word's label is the argmax at its
     first piece;
  4. entities read from the labels with conlleval's rules (`ner_metrics.entities`).

A model trained with document context sees only the text it is given: send a sentence, or a paragraph (which
then serves as its own context).

Signature `serving_default` (B: batch, W: most words in a text of the batch, E: most entities):

  inputs   text            tf.string [B]     valid UTF-8 (else InvalidArgument: HTTP 400)
  outputs  num_words       int32 [B]
           words           tf.string [B, W]  the words as they are in the text ("" past num_words)
           word_start, word_end   int32 [B, W]  each word's [start, end) in characters (Python string
                                             indices; 0 past num_words)
           tags            tf.string [B, W]  each word's label, in the model's label scheme (IOB2 or BIOES),
                                             or a plain tag set's tag (e.g. "NN")
           num_entities    int32 [B]
           entity_type     tf.string [B, E]  e.g. "PER" ("" past num_entities)
           entity_start, entity_end   int32 [B, E]  [start, end) in characters, from the first word's start to
                                             the last word's end (0 past num_entities)
           entity_text     tf.string [B, E]  the text between them, as written
  (a model of a plain tag set - label_scheme "plain" in the manifest - has no entities: its outputs end at tags)

Signature `encoded` (for clients that make windows themselves; L <= max_position_embeddings):

  inputs   input_ids, input_mask, segment_ids   int32 [B, L]  (checked: `serving.checked_encoded_inputs`)
  outputs  label_id  int32 [B, L]      the argmax label of every position (meaningful at first pieces only)
           logits    float32 [B, L, K]

Written by the shared export path (`serving.export_servable`): versioned layout, atomic write, warmup
requests, manifest (task "ner", task_kind "ner", the labels and settings).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Sequence

import tensorflow as tf
import tensorflow_text as tf_text

from bert_tf.data import graph_text
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.common.serving import TaskServer, model_folder
from bert_tf.tasks.ner import folder
from bert_tf.tasks.ner import model as nf
from bert_tf.tasks.ner.data import PLAIN, SCHEMES
from bert_tf.tasks.ner.metrics import split_tag

TEXT_INPUT = "text"
DEFAULT_WARMUP: tuple[dict[str, str], ...] = (
    {TEXT_INPUT: "EU rejects German call to boycott British lamb."},
    {TEXT_INPUT: "Peter Blackburn met officials of the European Commission in Brussels on Thursday."},
)
PREFIX_CODES = {"O": 0, "B": 1, "I": 2, "E": 3, "S": 4}
_O, _B, _I, _E, _S = range(5)


class NerServer(TaskServer):
  """The SavedModel's root (`TaskServer`): a float32 `BertTokenClassifier`, its tokenizer and the serving functions.

  Args:
    model: the fine-tuned tagger (float32).
    vocab_file: its vocabulary.
    settings: the model's ner.json (`folder.read_settings`): labels, max_seq_length, do_lower_case.
  """

  def __init__(self, model: nf.BertTokenClassifier, vocab_file: str, settings: Mapping[str, Any],
               max_request_chars: int | None = None):
    super().__init__("bert_ner_server", model, vocab_file, bool(settings["do_lower_case"]), needs="NER windows",
                     max_request_chars=max_request_chars)
    vocab = self.tokenizer.vocab
    self._cls_id, self._sep_id, self._unk_id = vocab["[CLS]"], vocab["[SEP]"], vocab["[UNK]"]
    self._max_seq_length = int(settings["max_seq_length"])
    if not 3 <= self._max_seq_length <= model.config.max_position_embeddings:
      raise ValueError(f"max_seq_length={self._max_seq_length}: must be in [3, max_position_embeddings="
                       f"{model.config.max_position_embeddings}]")
    labels = list(settings["labels"])
    if len(labels) != model.num_labels:
      raise ValueError(f"ner.json has {len(labels)} labels but the model has {model.num_labels} outputs")
    self._labels = tf.constant(labels)
    # A plain tag set (part of speech, ...) has no entities: the words and their tags are the whole answer.
    self._plain = settings["label_scheme"] == PLAIN
    parts = [("O", "") if self._plain else split_tag(label) for label in labels]
    self._types = tf.constant(sorted({kind for _, kind in parts if kind}) or [""])
    types = {kind: i for i, kind in enumerate(sorted({kind for _, kind in parts if kind}))}
    self._label_prefix = tf.constant([PREFIX_CODES[prefix] for prefix, _ in parts], tf.int32)
    self._label_type = tf.constant([types.get(kind, -1) for _, kind in parts], tf.int32)
    # The tags come out as the run's predictions file writes them: the entities in the training file's scheme.
    self.tag_scheme = PLAIN if self._plain else settings.get("train_tag_scheme") or settings["label_scheme"]
    if self.tag_scheme not in (PLAIN, *SCHEMES):
      raise ValueError(f"ner.json: train_tag_scheme {self.tag_scheme!r}: expected one of {', '.join(SCHEMES)}")
    self.serve_text = tf.function(self._serve_text,
                                  input_signature=[tf.TensorSpec([None], tf.string, name=TEXT_INPUT)])
    id_specs = [tf.TensorSpec([None, None], tf.int32, name=name) for name in INPUT_NAMES]
    self.serve_encoded = tf.function(self._serve_encoded, input_signature=id_specs)

  def _serve_encoded(self, input_ids, input_mask, segment_ids):
    from bert_tf.export import serving

    features = serving.checked_encoded_inputs(self._model.config, input_ids, input_mask, segment_ids)

    def call(chunk):  # every position's logits, padded ones included: no padding_skipped here
      logits = self._model(chunk, training=False)  # [rows, L, K]
      return {"label_id": tf.argmax(logits, axis=-1, output_type=tf.int32), "logits": logits}

    return serving.in_slices(call, features, {"label_id": tf.int32, "logits": tf.float32})

  def _serve_text(self, text):
    from bert_tf.export import serving

    text = self.checked_text(TEXT_INPUT, text, allow_blank=True)  # a blank text has no words: none tagged
    batch = tf.size(text, out_type=tf.int64)
    T = self._max_seq_length  # pylint: disable=invalid-name
    budget = T - 2
    tokens = self.tokenizer.tokenize_with_offsets(text)
    words_per_text = tokens.ids.row_lengths()  # int64 [B]
    text_of_word = tokens.ids.value_rowids()  # int64 [N] (N: words of the batch)
    pieces = tokens.ids.values  # int64 [N, (P)]
    # As ner.word_pieces: [UNK] for a word without pieces, at most T - 2 pieces a word.
    empty = tf.cast(tf.equal(pieces.row_lengths(), 0), tf.int64)
    pieces = tf.concat([pieces, tf.RaggedTensor.from_row_lengths(
        tf.fill([tf.reduce_sum(empty)], tf.constant(self._unk_id, tf.int64)), empty)], axis=1)
    pieces = tf.ragged.boolean_mask(pieces, tf.ragged.range(pieces.row_lengths()) < budget)
    length = pieces.row_lengths()  # int64 [N]
    word_start = tf.cumsum(length, exclusive=True)  # [N] in the batch's piece stream
    text_pieces = tf.math.unsorted_segment_sum(length, text_of_word, batch)  # [B]
    text_start = tf.cumsum(text_pieces, exclusive=True)  # [B]

    # Centres: ner._centres, greedily over each text's words (a scan over the word axis, all texts at once).
    # One zero column more ([B, W + 1]): the scan needs a step even when no text of the batch has a word.
    lengths = tf.RaggedTensor.from_row_lengths(length, words_per_text).to_tensor()
    lengths = tf.concat([lengths, tf.zeros([batch, 1], tf.int64)], axis=1)

    def step(state, n):
      used, centre = state
      new = (used > 0) & (used + n > budget)
      return tf.where(new, n, used + n), centre + tf.cast(new, tf.int64)

    zeros = tf.zeros([batch], tf.int64)
    _, centre = tf.scan(step, tf.transpose(lengths), initializer=(zeros, zeros))  # [W, B]
    centre_in_text = tf.RaggedTensor.from_tensor(tf.transpose(centre), lengths=words_per_text).values  # [N]
    centres_per_text = tf.math.unsorted_segment_max(centre_in_text + 1, text_of_word, batch)
    centres_per_text = tf.maximum(centres_per_text, 0)  # a text without words has none ([B])
    centre_of_word = centre_in_text + tf.gather(tf.cumsum(centres_per_text, exclusive=True), text_of_word)
    num_centres = tf.reduce_sum(centres_per_text)
    lo = tf.math.unsorted_segment_min(word_start, centre_of_word, num_centres)  # [C] piece range of each centre
    hi = tf.math.unsorted_segment_max(word_start + length, centre_of_word, num_centres)
    text_of_centre = tf.repeat(tf.range(batch), centres_per_text)
    first, last = tf.gather(text_start, text_of_centre), tf.gather(text_start + text_pieces, text_of_centre)
    room = budget - (hi - lo)
    left = tf.minimum(lo - first, tf.maximum(room // 2, room - (last - hi)))
    right = tf.minimum(last - hi, room - left)
    window = tf.gather(pieces.values, tf.ragged.range(lo - left, hi + right))  # int64 [C, (<= T - 2)]
    ids = tf.concat([tf.fill([num_centres, 1], tf.constant(self._cls_id, tf.int64)), window,
                     tf.fill([num_centres, 1], tf.constant(self._sep_id, tf.int64))], axis=1)
    # One [CLS] [SEP] row when no text of the batch has a word (empty, blank or zero texts), so that the model
    # never sees an empty batch; only then: at batch 1 a second row would double the model's work.
    spare = tf.maximum(1 - num_centres, 0)  # 0 or 1
    ids = tf.concat([ids, tf.RaggedTensor.from_row_lengths(
        tf.tile(tf.constant([self._cls_id, self._sep_id], tf.int64), [spare]),
        tf.fill([spare], tf.constant(2, tf.int64)))], axis=0)  # [max(C, 1), (<= T)]
    input_ids, input_mask = tf_text.pad_model_inputs(ids, T)
    features = serving.trim_padding({"input_ids": tf.cast(input_ids, tf.int32),
                                     "input_mask": tf.cast(input_mask, tf.int32),
                                     "segment_ids": tf.zeros_like(input_ids, tf.int32)})  # [max(C, 1), L]
    # Only first pieces are read (the padded rows' work is skipped), a slice of windows at a time.
    predicted = self.run_model(features, {"label": tf.int32}, lambda logits: {
        "label": tf.argmax(logits, axis=-1, output_type=tf.int32)})["label"]  # [max(C, 1), L]
    position = 1 + tf.gather(left, centre_of_word) + word_start - tf.gather(lo, centre_of_word)  # [N]
    label = tf.gather_nd(predicted, tf.stack([centre_of_word, position], axis=1))  # int32 [N]

    begin, end = tokens.word_begin.values, tokens.word_end.values  # int64 [N] bytes
    words = Words(text_of_word, words_per_text, begin, end, graph_text.char_offsets(text, text_of_word, begin),
                  graph_text.char_offsets(text, text_of_word, end))

    def padded(values, default):
      return tf.RaggedTensor.from_row_lengths(values, words_per_text).to_tensor(default)

    outputs = {"num_words": tf.cast(words_per_text, tf.int32),
               "words": padded(graph_text.substrings(text, text_of_word, begin, end), ""),
               "word_start": padded(words.char_begin, 0), "word_end": padded(words.char_end, 0),
               "tags": padded(tf.gather(self._labels, label), "")}
    if not self._plain:
      kind = tf.gather(self._label_type, label)  # int32 [N]
      first_word, last_word = entity_words(tf.gather(self._label_prefix, label), kind, words.words_per_text)
      outputs["tags"] = padded(render_tags(first_word, last_word, tf.gather(kind, first_word), text_of_word,
                                           self._types, self.tag_scheme), "")
      outputs.update(self._entities(text, words, kind, first_word, last_word, batch))
    return outputs

  def _entities(self, text, words: "Words", kind, first_word, last_word, batch) -> dict[str, tf.Tensor]:
    rows = tf.gather(words.text_of_word, first_word)
    begin = tf.gather(words.byte_begin, first_word)
    end = tf.gather(words.byte_end, last_word)

    def padded(values, default):
      return tf.RaggedTensor.from_value_rowids(values, rows, nrows=batch).to_tensor(default)

    count = tf.math.bincount(tf.cast(rows, tf.int32), minlength=tf.cast(batch, tf.int32),
                             maxlength=tf.cast(batch, tf.int32))
    return {"num_entities": tf.cast(count, tf.int32),
            "entity_type": padded(tf.gather(self._types, tf.gather(kind, first_word)), ""),
            "entity_start": padded(tf.gather(words.char_begin, first_word), 0),
            "entity_end": padded(tf.gather(words.char_end, last_word), 0),
            "entity_text": padded(graph_text.substrings(text, rows, begin, end), "")}


def entity_words(prefix: tf.Tensor, kind: tf.Tensor, words_per_text: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """`ner_metrics.entities` in the graph, over the words of a batch of texts at once.

  Args:
    prefix: int32 [N] each word's tag prefix: 0 O, 1 B, 2 I, 3 E, 4 S (`PREFIX_CODES`).
    kind: int32 [N] its entity type's index (any value for O).
    words_per_text: int64 [B] how many of the N words each text has, in order.
  Returns: int64 [M] the first and the last word (inclusive, indices into N) of each entity, in order. An entity
    starts at a word and ends at the first end after it (the rules never open one inside another), so the
    k-th start pairs with the k-th end; texts never share one.
  """
  index = tf.range(tf.size(prefix, out_type=tf.int64))
  row_start = tf.repeat(tf.cumsum(words_per_text, exclusive=True), words_per_text)
  row_end = tf.repeat(tf.cumsum(words_per_text), words_per_text)
  is_first, is_last = tf.equal(index, row_start), tf.equal(index, row_end - 1)
  kind = tf.where(tf.equal(prefix, _O), -1, kind)  # O has no type
  prev_prefix = tf.where(is_first, _O, tf.roll(prefix, 1, axis=0))
  prev_kind = tf.where(is_first, -1, tf.roll(kind, 1, axis=0))

  def among(values, codes):
    return tf.reduce_any(tf.stack([tf.equal(values, c) for c in codes]), axis=0)

  different = tf.not_equal(kind, prev_kind)
  ends_before = tf.not_equal(prev_prefix, _O) & (among(prev_prefix, (_E, _S)) | among(prefix, (_B, _S, _O))
                                                 | different)
  starts = among(prefix, (_B, _S)) | (among(prefix, (_I, _E)) & among(prev_prefix, (_O, _E, _S))) | (
      tf.not_equal(prefix, _O) & different)
  # An entity ends at a word when one ends before the next word of its text, or when the text ends.
  ends_at = tf.where(is_last, tf.not_equal(prefix, _O), tf.roll(ends_before, -1, axis=0))
  return tf.reshape(tf.where(starts), [-1]), tf.reshape(tf.where(ends_at), [-1])


def render_tags(first: tf.Tensor, last: tf.Tensor, kind: tf.Tensor, text_of_word: tf.Tensor, types: tf.Tensor,
                scheme: str) -> tf.Tensor:
  """`ner.render` in the graph: the entities of a batch's words -> each word's tag in `scheme` (IOB1, IOB2,
  BIOES), as the run writes its predictions.

  Args:
    first, last: int64 [M] each entity's first and last word (`entity_words`: in order, never overlapping).
    kind: int32 [M] each entity's type, an index into `types` (tf.string [types]).
    text_of_word: int64 [N] each word's text in the batch (an IOB1 entity right after one of its type in the same
      text starts with B-).
  Returns tf.string [N]."""
  n = tf.size(text_of_word, out_type=tf.int64)
  m = tf.size(first, out_type=tf.int64)
  starts = tf.math.unsorted_segment_sum(tf.ones_like(first), first, n)  # [N] 1 where an entity starts
  ends = tf.math.unsorted_segment_sum(tf.ones_like(last), last, n)
  entity = tf.cumsum(starts) - 1  # [N] the entity a word belongs to, where it belongs to one
  inside = (tf.cumsum(starts) - tf.cumsum(ends, exclusive=True)) > 0
  safe = tf.clip_by_value(entity, 0, tf.maximum(m - 1, 0))
  pad = lambda values: tf.concat([values, tf.zeros([1], values.dtype)], 0)  # noqa: E731 (m may be 0)
  index = tf.range(n)
  is_first = tf.equal(index, tf.gather(pad(first), safe))
  is_last = tf.equal(index, tf.gather(pad(last), safe))
  if scheme == "IOB2":
    prefix = tf.where(is_first, "B", "I")
  elif scheme == "BIOES":
    prefix = tf.where(is_first & is_last, "S", tf.where(is_first, "B", tf.where(is_last, "E", "I")))
  else:  # IOB1: B- only where an entity follows one of its type directly, in the same text
    before = tf.maximum(safe - 1, 0)
    previous_last = tf.gather(pad(last), before)
    follows = ((safe > 0) & tf.equal(previous_last, index - 1)
               & tf.equal(tf.gather(pad(kind), before), tf.gather(pad(kind), safe))
               & tf.equal(tf.gather(text_of_word, tf.maximum(previous_last, 0)), text_of_word))
    prefix = tf.where(is_first & follows, "B", "I")
  tag = tf.strings.join([prefix, tf.gather(types, tf.gather(pad(kind), safe))], separator="-")
  return tf.where(inside, tag, "O")


class Words(NamedTuple):
  """The words of a batch (N of them), flat: their text, each text's count, byte and character offsets."""
  text_of_word: tf.Tensor  # int64 [N]
  words_per_text: tf.Tensor  # int64 [B]
  byte_begin: tf.Tensor  # int64 [N]
  byte_end: tf.Tensor
  char_begin: tf.Tensor  # int32 [N]
  char_end: tf.Tensor


def export_ner(model_dir: str, export_dir: str, model_name: str = "ner", version: int | None = None,
               warmup: Sequence[Mapping[str, str]] = DEFAULT_WARMUP,
               max_request_chars: int | None = None) -> str:
  """Exports a fine-tuned NER model folder (`<run_ner --output_dir>/ner_model`) to
  `<export_dir>/<model_name>/<version>/` through the shared export path; returns that path. A request whose
  texts hold more than `max_request_chars` characters is refused (`limits`)."""
  model_dir, settings, vocab_file = model_folder(model_dir, export_dir, model_name, version, folder.FOLDER)
  model, _ = folder.load_model(model_dir)
  server = NerServer(model, vocab_file, settings, max_request_chars)
  manifest = {"task": "ner", "task_kind": "ner", "labels": list(settings["labels"]),
              "label_scheme": settings["label_scheme"], "tag_scheme": server.tag_scheme,
              "types": list(settings["types"]),
              "max_seq_length": int(settings["max_seq_length"]), "do_lower_case": bool(settings["do_lower_case"]),
              "trained_with_document_context": bool(settings["document_context"])}
  return server.export(export_dir, model_name, version, warmup, manifest, vocab_file)
