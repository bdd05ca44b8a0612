"""A SWAG SavedModel: the raw context and four endings in, the four endings' probabilities and the chosen one out.

The tokenizer runs in the graph: each example's four sequences are made as the training records were
(`swag.SwagExample.pairs`, `common.features.encode`), here with `GraphTokenizer` and `encode_graph`, which give the
same ids, so a client sends sentences and cannot get the vocabulary, lower-casing, the joining of sent2 to an
ending or the truncation wrong. Written by the shared export path (`serving.export_servable`): versioned layout,
atomic write, warmup requests, manifest (task "swag", task_kind "multiple_choice").

Signature `serving_default` (B: batch):

  inputs   sent1                tf.string [B]  the context sentence
           sent2                tf.string [B]  the first words of the next sentence, which each ending completes
           ending0 .. ending3   tf.string [B]  the candidate endings
  outputs  probabilities  float32 [B, 4]  softmax over the four endings
           label_id       int32 [B]       the chosen ending's index (the highest logit, as evaluation picks)
           ending         tf.string [B]   the chosen ending's text

Sequence i of an example is [CLS] sent1 [SEP] sent2 + " " + ending_i [SEP], truncated to the model's
max_seq_length by the pair rule. Inputs of different batch sizes are an InvalidArgument error (TF Serving answers
HTTP 400), not a crash, as are invalid UTF-8, an empty or blank ending (training refuses one too) and a field over
the export's max_request_chars; an empty sent1 or sent2 is allowed.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import tensorflow as tf

from bert_tf.tasks.common.features import encode_graph
from bert_tf.tasks.common.serving import TaskServer, model_folder
from bert_tf.tasks.swag import data as swag
from bert_tf.tasks.swag import folder
from bert_tf.tasks.swag import model as sf

TEXT_INPUTS = ("sent1", "sent2", *swag.ENDING_COLUMNS)
DEFAULT_WARMUP: tuple[dict[str, str], ...] = (
    {"sent1": "A man is standing in a kitchen.", "sent2": "He", "ending0": "cracks two eggs into a bowl.",
     "ending1": "flies over the roof.", "ending2": "swims across the table.", "ending3": "sleeps on the stove."},
    {"sent1": "The girl puts on her skates.", "sent2": "She", "ending0": "reads a book.",
     "ending1": "glides onto the ice.", "ending2": "eats the skates.", "ending3": "becomes a skate."},
)


class SwagServer(TaskServer):
  """The SavedModel's root (`TaskServer`): a float32 `BertMultipleChoice`, its tokenizer and the serving function.

  Args:
    model: the fine-tuned model (float32).
    vocab_file: its vocabulary.
    settings: the model's swag.json (`folder.read_settings`): max_seq_length, do_lower_case.
  """

  def __init__(self, model: sf.BertMultipleChoice, vocab_file: str, settings: Mapping,
               max_request_chars: int | None = None):
    super().__init__("bert_swag_server", model, vocab_file, bool(settings["do_lower_case"]), needs="SWAG sequences",
                     max_request_chars=max_request_chars)
    self._max_seq_length = int(settings["max_seq_length"])
    if self._max_seq_length > model.config.max_position_embeddings:
      raise ValueError(f"max_seq_length={self._max_seq_length} exceeds the model's max_position_embeddings="
                       f"{model.config.max_position_embeddings}")
    specs = [tf.TensorSpec([None], tf.string, name=name) for name in TEXT_INPUTS]
    self.serve_text = tf.function(self._serve_text, input_signature=specs)

  def _serve_text(self, sent1, sent2, ending0, ending1, ending2, ending3):
    from bert_tf.export import serving

    endings = [ending0, ending1, ending2, ending3]
    checks = [tf.debugging.assert_equal(tf.size(sent1), tf.size(text), message=f"{name} must hold as many "
                                        "examples as sent1 (one of each input per example)")
              for name, text in zip(TEXT_INPUTS[1:], [sent2, *endings])]
    with tf.control_dependencies(checks):  # Nothing downstream runs on mismatched batches.
      # As training reads SWAG: an ending must have text, the context and sent2 may be empty.
      sent1 = self.checked_text("sent1", sent1, allow_blank=True)
      sent2 = self.checked_text("sent2", sent2, allow_blank=True)
      endings = [self.checked_text(name, ending) for name, ending in zip(swag.ENDING_COLUMNS, endings)]
    # One encoder batch for the four choices: [4B] pairs, choice-major, then [B, 4, T].
    first = tf.tile(sent1, [swag.NUM_CHOICES])
    second = tf.concat([tf.strings.join([sent2, ending], separator=" ") for ending in endings], axis=0)
    encoded = encode_graph(self.tokenizer, first, second, self._max_seq_length)  # int32 [4B, T]
    features = {name: tf.transpose(tf.reshape(value, [swag.NUM_CHOICES, -1, self._max_seq_length]), [1, 0, 2])
                for name, value in encoded.items()}  # [B, 4, T]
    features = serving.trim_padding(features)  # [B, 4, L]
    # Pooled outputs only: the padded rows' work is skipped; a slice of examples at a time.
    logits = self.run_model(features, {"logits": tf.float32},
                            lambda output: {"logits": tf.cast(output, tf.float32)})["logits"]  # [B, 4]
    label_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
    return {"probabilities": tf.nn.softmax(logits, axis=-1), "label_id": label_id,
            "ending": tf.gather(tf.stack(endings, axis=1), label_id, batch_dims=1)}


def export_swag(model_dir: str, export_dir: str, model_name: str = "swag", version: int | None = None,
                warmup: Sequence[Mapping[str, str]] = DEFAULT_WARMUP,
                max_request_chars: int | None = None) -> str:
  """Exports a fine-tuned SWAG model folder (`<run_swag --output_dir>/swag_model`) to
  `<export_dir>/<model_name>/<version>/` through the shared export path; returns that path. `version` None takes
  the next free one; `warmup`: examples (dicts of TEXT_INPUTS) for TF Serving's warmup requests. A request with a
  field of more than `max_request_chars` characters (the batch's together) is refused (`limits`)."""
  model_dir, settings, vocab_file = model_folder(model_dir, export_dir, model_name, version, folder.FOLDER)
  server = SwagServer(folder.load_model(model_dir), vocab_file, settings, max_request_chars)
  manifest = {"task": "swag", "task_kind": "multiple_choice", "num_choices": swag.NUM_CHOICES,
              "inputs": list(TEXT_INPUTS), "max_seq_length": int(settings["max_seq_length"]),
              "do_lower_case": bool(settings["do_lower_case"])}
  return server.export(export_dir, model_name, version, warmup, manifest, vocab_file)
