"""What the tasks' SavedModels share before `bert_tf.export.serving.export_servable` writes them: `TaskServer`, the
SavedModel's root (the model's variables tracked so that TF Serving restores them, the graph tokenizer, the
signatures), and `model_folder`, the checks and reads before a task's model folder is exported."""

from __future__ import annotations

import os
from typing import Any, Mapping, Sequence

import tensorflow as tf

from bert_tf.data.graph_tokenizer import GraphTokenizer
from bert_tf.export import limits, serving
from bert_tf.model import released
from bert_tf.model.encoder import padding_skipped
from bert_tf.tasks.common.folder import ModelFolder


class TaskServer(tf.Module):
  """The SavedModel's root of a task: a float32 model, its tokenizer and the serving functions, which the task's
  subclass sets: `serve_text` (the `serving_default` signature) and, where the task has one, `serve_encoded`
  (`encoded`: ids in).

  Args:
    name: the module's name ("bert_squad_server").
    model: the fine-tuned model (float32), as `self._model`.
    vocab_file: its vocabulary, as `self.tokenizer` (a `GraphTokenizer`).
    do_lower_case: the tokenizer's casing, as the model was trained.
    needs: what [CLS] and [SEP] make for the task ("SQuAD windows"): a vocabulary without them is refused, naming
      it and that; None: not checked.
    max_request_chars: the most characters a text field may hold in one request, the batch's texts together
      (None: `limits.MAX_REQUEST_CHARS`); more is refused in the graph (`checked_text`). In the manifest.
  """

  def __init__(self, name: str, model, vocab_file: str, do_lower_case: bool, needs: str | None = None,
               max_request_chars: int | None = None):
    super().__init__(name=name)
    self.max_request_chars = limits.check_max_request_chars(
        limits.MAX_REQUEST_CHARS if max_request_chars is None else max_request_chars, "max_request_chars")
    # A Keras 3 variable wraps a tf.Variable, and saving it through the Keras model writes two variables: the
    # one the functions read, and a copy that only the object graph restores. TF Serving restores with the
    # checkpoint's restore op in a Session, which leaves the first one uninitialized ("Could not find
    # variable ..." at the first request; keras-team/keras#20095). So the module tracks the tf.Variables
    # themselves and keeps the model out of the object graph (object.__setattr__ skips tracking).
    object.__setattr__(self, "_model", model)
    self.model_variables = [variable.value for variable in model.variables]
    self.tokenizer = GraphTokenizer(vocab_file, do_lower_case=do_lower_case)
    for token in ("[CLS]", "[SEP]") if needs else ():
      if token not in self.tokenizer.vocab:
        raise ValueError(f"{vocab_file}: has no {token} token, which {needs} need")

  def checked_text(self, name: str, text: tf.Tensor, allow_blank: bool = False) -> tf.Tensor:
    """The text input `name` (tf.string [B]) behind the export's checks (`serving.checked_text`): valid UTF-8, at
    most max_request_chars over the batch, and unless `allow_blank` no empty or blank row."""
    return serving.checked_text(name, text, self.max_request_chars, allow_blank)

  def run_model(self, features: Mapping[str, tf.Tensor], output_dtypes: Mapping[str, tf.DType],
                outputs: Any = None) -> dict[str, tf.Tensor]:
    """The model on int32 [N, L] `features`, its real tokens only (`padding_skipped`), a slice of rows at a time
    (`serving.in_slices`): memory bounded whatever N. `outputs(model_output) -> {name: [rows, ...]}` of
    `output_dtypes` (default: the model's output as {"logits": ...})."""
    outputs = outputs or (lambda output: {"logits": output})

    def call(chunk):
      return outputs(self._model(chunk, training=False))

    with padding_skipped(self._model):  # the padded positions' row-wise work is skipped: no head reads them
      return serving.in_slices(call, features, output_dtypes)

  def signatures(self) -> dict[str, Any]:
    """{signature name: serving function}: `serving_default` and, where the server has one, `encoded`."""
    encoded = getattr(self, "serve_encoded", None)
    return {serving.SERVING_SIGNATURE: self.serve_text, **({serving.ENCODED_SIGNATURE: encoded} if encoded else {})}

  def export(self, export_dir: str, model_name: str, version: int | None, warmup: Sequence[Mapping[str, Any]],
             manifest: Mapping[str, Any], vocab_file: str | None) -> str:
    """`serving.export_servable` of this module with its `signatures()` and the task's `manifest` fields; returns
    the version's path."""
    manifest = {**manifest, "max_request_chars": self.max_request_chars}
    # The warmup examples run as one batch: each text cut to its share of the limit, so that an export with a
    # small --max_request_chars still warms up (the default examples are a few thousand characters).
    share = max(self.max_request_chars // max(len(warmup), 1), 1)
    warmup = [{name: value[:share] if isinstance(value, str) else value for name, value in instance.items()}
              for instance in warmup]
    return serving.export_servable(self, self.signatures(), export_dir, model_name, version, warmup,
                                   manifest, vocab_file=vocab_file)


def model_folder(model_dir: str, export_dir: str, model_name: str, version: int | None,
                 folder: ModelFolder) -> tuple[str, dict, str]:
  """What comes before a task's model folder is exported: the name, version and export_dir checked (before any
  model is loaded), a Hugging Face model of the task's head converted (`released.task_model_dir`), and the
  folder's settings read; a folder without them is a FileNotFoundError naming the script that writes one.
  Returns (the local folder, its settings, its vocab.txt)."""
  serving.check_name_and_version(model_name, version)
  serving.check_export_dir(export_dir, model_name)
  model_dir = released.task_model_dir(model_dir)  # A Hugging Face model of the task's head: ours converted from it.
  if not folder.is_model_dir(model_dir):
    raise FileNotFoundError(f"{model_dir}: no {folder.settings_name}; give a folder written by {folder.script} "
                            f"(<output_dir>/{folder.model_dir})")
  return model_dir, folder.read_settings(model_dir), os.path.join(model_dir, "vocab.txt")
