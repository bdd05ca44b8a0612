"""bert_tf.tasks.common.serving: `TaskServer` tracks the model's tf.Variables and not the Keras model, refuses a
vocabulary without [CLS] / [SEP] where the task needs them and lists its signatures; `model_folder` checks the
name, version and export_dir before it reads the folder and names the script that writes a missing one."""

from __future__ import annotations

import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.export import serving
from bert_tf.model.encoder import INPUT_NAMES
from bert_tf.tasks.common.folder import ModelFolder
from bert_tf.tasks.common.serving import TaskServer, model_folder


@pytest.fixture(scope="module")
def model():
  from bert_tf.tasks.squad.model import BertSpanLabeler

  made = BertSpanLabeler(th.tiny_bert_config(), dtype="float32")
  made({name: tf.zeros([1, 3], tf.int32) for name in INPUT_NAMES})
  return made


def _vocab(tmp_path, tokens=th.SPECIAL):
  path = tmp_path / "vocab.txt"
  path.write_text("".join(f"{token}\n" for token in [*tokens, "w0", "w1"]))
  return str(path)


class _Server(TaskServer):

  def __init__(self, model, vocab_file, needs=None, encoded=False):
    super().__init__("toy_server", model, vocab_file, True, needs=needs)
    self.serve_text = tf.function(lambda text: {"n": tf.size(text)}, input_signature=[tf.TensorSpec([None], tf.string)])
    if encoded:
      self.serve_encoded = tf.function(lambda ids: {"n": tf.size(ids)},
                                       input_signature=[tf.TensorSpec([None, None], tf.int32)])


def test_the_server_tracks_the_variables_not_the_keras_model(model, tmp_path):
  server = _Server(model, _vocab(tmp_path))
  assert server._model is model  # pylint: disable=protected-access
  weights = [v for v in server.variables if v.dtype == tf.float32]  # the tokenizer's tables hold none
  assert len(model.variables) > 0
  assert sorted(id(v) for v in weights) == sorted(id(v.value) for v in model.variables)
  assert "_model" not in dict(server._trackable_children())  # pylint: disable=protected-access
  assert server.tokenizer.do_lower_case


def test_signatures_are_the_text_one_and_encoded_where_the_server_has_it(model, tmp_path):
  vocab = _vocab(tmp_path)
  assert list(_Server(model, vocab).signatures()) == [serving.SERVING_SIGNATURE]
  both = _Server(model, vocab, encoded=True)
  assert both.signatures() == {serving.SERVING_SIGNATURE: both.serve_text,
                               serving.ENCODED_SIGNATURE: both.serve_encoded}


def test_a_vocabulary_without_cls_or_sep_is_refused_where_the_task_needs_them(model, tmp_path):
  vocab = _vocab(tmp_path, [t for t in th.SPECIAL if t != "[SEP]"])
  with pytest.raises(ValueError, match=r"vocab.txt: has no \[SEP\] token, which toy windows need$"):
    _Server(model, vocab, needs="toy windows")
  assert _Server(model, vocab).tokenizer is not None  # a task that makes no windows does not ask


def test_model_folder_checks_the_name_first_and_names_the_script_of_a_missing_folder(tmp_path):
  folder = ModelFolder("toy_model", "toy.json", "run_toy.py")
  missing = str(tmp_path / "nowhere")
  with pytest.raises(ValueError, match="model_name='a/b': give a plain folder name"):
    model_folder(missing, str(tmp_path / "export"), "a/b", None, folder)
  with pytest.raises(ValueError, match="version=0: must be a positive integer"):
    model_folder(missing, str(tmp_path / "export"), "toy", 0, folder)
  with pytest.raises(FileNotFoundError, match=rf"^{missing}: no toy.json; give a folder written by run_toy.py "
                     r"\(<output_dir>/toy_model\)$"):
    model_folder(missing, str(tmp_path / "export"), "toy", None, folder)
  (tmp_path / "toy_model").mkdir()
  (tmp_path / "toy_model" / "toy.json").write_text('{"max_seq_length": 9}')
  assert model_folder(str(tmp_path / "toy_model"), str(tmp_path / "export"), "toy", 2, folder) == \
      (str(tmp_path / "toy_model"), {"max_seq_length": 9}, str(tmp_path / "toy_model" / "vocab.txt"))
