"""bert_tf.model.checkpoints: a checkpoint or a vocabulary that does not fit the BERT config is refused in one
line naming the files, the variable and both shapes (compared before anything is restored)."""

import dataclasses
import os

import pytest

import training_helpers as th
from bert_tf.model import checkpoints


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
  """A 1-layer encoder in the pretraining hand-off layout: bert_config.json, encoder_checkpoint/,
  encoder_savedmodel/."""
  from bert_tf.model.encoder import BertEncoder

  directory = tmp_path_factory.mktemp("pretrained")
  config = th.tiny_bert_config()
  checkpoints.export_encoder(BertEncoder(config), config, str(directory))
  return str(directory), config


def _write_vocab(path, size):
  path.write_text("\n".join(th.SPECIAL + [f"w{i}" for i in range(size - len(th.SPECIAL))]) + "\n")
  return str(path)


@pytest.mark.parametrize("size,error", [
    (100, None), (99, None),  # 1% fewer than vocab_size 100: a padded vocabulary (30,522 words in 30,528)
    (101, "ids from 100 up would index past the embedding table"),
    (98, "probably not the vocabulary the model was pretrained with"),
])
def test_check_vocab_fits(tmp_path, size, error):
  vocab = _write_vocab(tmp_path / "vocab.txt", size)
  config = dataclasses.replace(th.tiny_bert_config(), vocab_size=100)
  if error is None:
    assert checkpoints.check_vocab_fits(vocab, config, "m/bert_config.json") == size
    return
  with pytest.raises(ValueError, match=error) as caught:
    checkpoints.check_vocab_fits(vocab, config, "m/bert_config.json")
  message = str(caught.value)
  assert f"--vocab_file={vocab} has {size} tokens but m/bert_config.json says vocab_size=100" in message
  assert "\n" not in message


def test_check_vocab_fits_refuses_a_vocabulary_without_the_tokens_of_every_input(tmp_path):
  """Issue 40 (6): without [CLS] and [SEP] fine-tuning, extraction and export failed with KeyError: '[CLS]'."""
  tokens = th.SPECIAL + [f"w{i}" for i in range(99 - len(th.SPECIAL))]
  config = th.tiny_bert_config()
  (tmp_path / "vocab.txt").write_text("\n".join(t if t not in ("[CLS]", "[SEP]") else t.lower() for t in tokens))
  with pytest.raises(ValueError) as caught:
    checkpoints.check_vocab_fits(str(tmp_path / "vocab.txt"), config, "m/bert_config.json")
  assert str(caught.value) == (f"--vocab_file={tmp_path}/vocab.txt: has no [CLS] [SEP], which BERT needs; give the "
                               "vocab.txt the model was trained with (every BERT vocabulary holds them)")
  # [PAD] and [MASK] are pretraining's: a fine-tuned model's vocabulary may lack them.
  (tmp_path / "vocab.txt").write_text("\n".join(t if t not in ("[PAD]", "[MASK]") else t.lower() for t in tokens))
  assert checkpoints.check_vocab_fits(str(tmp_path / "vocab.txt"), config, flag=None) == 99


def test_check_vocab_fits_names_the_vocabulary_beside_the_config(tmp_path):
  model = tmp_path / "model"
  model.mkdir()
  _write_vocab(model / "vocab.txt", 99)
  config = th.tiny_bert_config()
  config.to_json_file(str(model / "bert_config.json"))
  wrong = _write_vocab(tmp_path / "vocab.txt", 31)
  with pytest.raises(ValueError, match=f"pass --vocab_file={model / 'vocab.txt'} \\(beside bert_config.json\\)"):
    checkpoints.check_vocab_fits(wrong, config, str(model / "bert_config.json"))


@pytest.mark.parametrize("form", [checkpoints.ENCODER_CHECKPOINT_DIR, checkpoints.ENCODER_SAVEDMODEL_DIR, ""])
def test_restore_names_the_variable_both_shapes_and_the_config(exported, form):
  from bert_tf.model.encoder import BertEncoder

  directory, config = exported
  path = os.path.join(directory, form) if form else directory
  wider = dataclasses.replace(config, hidden_size=21)  # 3 heads of 7
  with pytest.raises(ValueError) as caught:
    checkpoints.restore_encoder(BertEncoder(wider), path, config_source="wide/bert_config.json")
  message = str(caught.value)
  assert "does not match this encoder's bert_config.json (wide/bert_config.json): word_embeddings/embeddings: " \
         "the checkpoint has [99, 18], the model needs [99, 21]; pass the bert_config.json the checkpoint was " \
         f"trained with (probably {directory}/bert_config.json, beside it)" in message
  assert "\n" not in message and len(message) < 400


def test_restore_refuses_another_layer_count(exported):
  from bert_tf.model.encoder import BertEncoder

  directory, config = exported
  deeper = BertEncoder(dataclasses.replace(config, num_hidden_layers=2))
  with pytest.raises(ValueError, match=r"encoder_checkpoint/encoder: does not match this encoder's BERT config "
                     r"\(--bert_config_file\): the checkpoint has 1 layer, the model 2 \(num_hidden_layers\)"):
    checkpoints.restore_encoder(deeper, directory)
  with pytest.raises(ValueError, match="the SavedModel holds 19 encoder variables, the model 31"):
    checkpoints.restore_encoder(deeper, os.path.join(directory, checkpoints.ENCODER_SAVEDMODEL_DIR))


def test_restore_names_the_config_beside_the_checkpoint_when_it_is_the_models(exported):
  from bert_tf.model.encoder import BertEncoder

  directory, config = exported
  encoder = BertEncoder(config)
  assert checkpoints.restore_encoder(encoder, directory).endswith("encoder_checkpoint/encoder")
  assert checkpoints.describe_config(config, directory) == os.path.join(directory, "bert_config.json")
  assert checkpoints.describe_config(dataclasses.replace(config, vocab_size=50), directory) is None


def test_shapes_follow_the_object_graph_of_a_training_checkpoint(tmp_path):
  """In a training checkpoint the optimizer may reach an encoder variable first and store it under its own key
  (`optimizer/_trainable_variables/5/...`): the comparison follows the object graph, as restoring does."""
  import tensorflow as tf

  from bert_tf.model.encoder import BertEncoder

  config = th.tiny_bert_config()
  encoder = BertEncoder(config)
  holder = tf.Module()
  holder.weights_ = list(encoder.layer_0.variables)  # depth 3: found before encoder/layer_0/... (4)
  prefix = tf.train.Checkpoint(encoder=encoder, a=holder).write(str(tmp_path / "ckpt"))
  keys = [name for name, _ in tf.train.list_variables(prefix)]
  assert not any(k.startswith("encoder/layer_0/") for k in keys) and any(k.startswith("a/") for k in keys)
  checkpoints.restore_encoder(BertEncoder(config), prefix)
  other = BertEncoder(dataclasses.replace(config, intermediate_size=41))
  with pytest.raises(ValueError, match=r"layer_0/intermediate/kernel: the checkpoint has \[18, 37\], the model "
                     r"needs \[18, 41\]"):
    checkpoints.restore_encoder(other, prefix)


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
  """A fine-tuned classifier's folder as run_classifier.py writes it (classifier/), random weights."""
  import numpy as np

  from bert_tf.tasks.classification import classifier as classification

  config = th.tiny_bert_config()
  model = _built(classification.BertClassifier(config, 3, dtype="float32"))
  rng = np.random.default_rng(7)
  for variable in model.variables:
    variable.assign(rng.normal(size=variable.shape).astype("float32"))
  directory = tmp_path_factory.mktemp("run") / "classifier"
  spec = classification.ClassifierSpec("MNLI", ("contradiction", "entailment", "neutral"), True, 13, True)
  classification.save_classifier(model, spec, th.write_vocab(directory.parent), str(directory))
  return str(directory), model


def _built(model):
  import tensorflow as tf

  model({name: tf.zeros([1, 3], tf.int32) for name in ("input_ids", "input_mask", "segment_ids")})
  return model


def _same(a, b) -> bool:
  import numpy as np

  return all(np.array_equal(x.numpy(), y.numpy()) for x, y in zip(a.variables, b.variables))


def test_a_fine_tuned_model_folder_gives_its_encoder_to_any_task(classifier_dir):
  """classifier/, squad_model/, ...: `model` with the encoder at model/encoder (it was refused as "not written by
  bert_tf"); the encoder alone goes to another task, and the config beside it is found."""
  from bert_tf.model.encoder import BertEncoder
  from bert_tf.tasks.classification import classifier as classification
  from bert_tf.tasks.squad import model as squad_finetuning
  from bert_tf.training import finetuning

  directory, fine_tuned = classifier_dir
  assert checkpoints.resolve_checkpoint(directory) == os.path.join(directory, "model")
  assert checkpoints.find_encoder_root(os.path.join(directory, "model")) == "model/encoder"
  assert finetuning.bert_config_for(None, directory) == fine_tuned.config
  encoder = BertEncoder(fine_tuned.config)
  checkpoints.restore_encoder(encoder, directory)
  assert _same(encoder, fine_tuned.encoder)

  # SQuAD from an MNLI classifier: the encoder, not the head (no squad.json there).
  span = _built(squad_finetuning.BertSpanLabeler(fine_tuned.config, dtype="float32"))
  head = span.span_output.kernel.numpy()
  finetuning.init_encoder(span.encoder, directory, model=span, head=("squad.json", {}))
  assert _same(span.encoder, fine_tuned.encoder) and (span.span_output.kernel.numpy() == head).all()
  assert checkpoints.task_head_mismatch(span, directory, "squad.json", {}) == "no squad.json (a model of another task)"

  # The same task and labels: the head too. Other labels: the encoder only, and the reason.
  again = _built(classification.BertClassifier(fine_tuned.config, 3, dtype="float32"))
  labels = ["contradiction", "entailment", "neutral"]
  source = finetuning.init_encoder(again.encoder, directory, model=again,
                                   head=(classification.SPEC_NAME, {"task_name": "MNLI", "labels": labels}))
  assert source == f"{directory} (encoder and task head)" and _same(again, fine_tuned)
  other = _built(classification.BertClassifier(fine_tuned.config, 3, dtype="float32"))
  kernel = other.classifier.kernel.numpy()
  reordered = {"task_name": "MNLI", "labels": labels[::-1]}
  finetuning.init_encoder(other.encoder, directory, model=other, head=(classification.SPEC_NAME, reordered))
  assert _same(other.encoder, fine_tuned.encoder) and (other.classifier.kernel.numpy() == kernel).all()
  assert checkpoints.task_head_mismatch(other, directory, classification.SPEC_NAME, reordered) == (
      f"its labels ['contradiction', 'entailment', 'neutral'] differ from this run's ['neutral', 'entailment', "
      f"'contradiction'] ({directory}/classifier.json)")
  two = _built(classification.BertClassifier(fine_tuned.config, 2, dtype="float32"))
  assert checkpoints.task_head_mismatch(two, directory, classification.SPEC_NAME, {}) == (
      "classifier/kernel: the folder has [18, 3], this model needs [18, 2]")


def test_a_model_fine_tuned_with_dropout_gives_its_head_too(tmp_path):
  """Dropout > 0 (every real config) adds a Keras SeedGenerator state to model.variables that no checkpoint holds:
  it is not part of the head, so the same task and labels still take the head (it was "its model has no
  seed_generator_N/seed_generator_state", the encoder only)."""
  import numpy as np

  from bert_tf.tasks.classification import classifier as classification
  from bert_tf.training import finetuning

  config = th.tiny_bert_config(dropout=0.1)
  fine_tuned = _built(classification.BertClassifier(config, 2, dtype="float32"))
  fine_tuned.classifier.kernel.assign(np.random.default_rng(5).normal(size=(18, 2)).astype("float32"))
  directory = str(tmp_path / "classifier")
  spec = classification.ClassifierSpec("own", ("no", "yes"), True, 13, True)
  classification.save_classifier(fine_tuned, spec, th.write_vocab(tmp_path), directory)
  again = _built(classification.BertClassifier(config, 2, dtype="float32"))
  assert any("seed_generator" in v.path for v in again.variables)  # what made the check fail
  head = (classification.SPEC_NAME, {"task_name": "own", "labels": ["no", "yes"]})
  assert checkpoints.task_head_mismatch(again, directory, *head) is None
  source = finetuning.init_encoder(again.encoder, directory, model=again, head=head)
  assert source == f"{directory} (encoder and task head)"
  assert (again.classifier.kernel.numpy() == fine_tuned.classifier.kernel.numpy()).all()


def test_a_truncated_task_model_or_settings_file_is_one_error_naming_the_file(tmp_path):
  """A fine-tuned model folder cut short (an interrupted copy): its weights and its settings file are named, with
  what to do, instead of a traceback (export_squad.py, run_squad.py --do_predict)."""
  import glob

  import tensorflow as tf

  from bert_tf.config import BertConfig
  from bert_tf.model.encoder import INPUT_NAMES
  from bert_tf.tasks.squad import model as squad_model
  from bert_tf.tasks.squad import run as squad_run

  config = BertConfig.from_preset("tiny", vocab_size=9, num_hidden_layers=1, hidden_size=6, num_attention_heads=3,
                                  intermediate_size=7, max_position_embeddings=11)
  model = squad_model.BertSpanLabeler(config, dtype="float32")
  model({name: tf.zeros([1, 2], tf.int32) for name in INPUT_NAMES})
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "a", "b", "c", "d", "e"]) + "\n")
  folder = str(tmp_path / "squad_model")
  squad_run.save_model(model, {"max_seq_length": 11, "doc_stride": 2, "max_query_length": 3}, str(vocab), folder)
  (data,) = glob.glob(os.path.join(folder, "*.data-*"))
  with open(data, "r+b") as f:
    f.truncate(os.path.getsize(data) // 2)
  with pytest.raises(ValueError, match=r"squad_model/\S+: its weights cannot be read \(.*\); the folder is truncated "
                     r"or corrupt: write it again with run_squad.py"):
    squad_run.load_model(folder)
  settings = os.path.join(folder, squad_run.SETTINGS_NAME)
  with open(settings, "r+b") as f:
    f.truncate(10)
  with pytest.raises(ValueError, match=f"^{settings}: not valid JSON"):
    squad_run.read_settings(folder)


# -- What --init_checkpoint is, checked first; the vocabulary that comes with it (issue 30: 5, 9) ----------------


def test_an_init_checkpoint_that_is_not_there_empty_or_a_file_is_named_first(exported, tmp_path):
  directory, _ = exported
  for good in (directory, directory + "/", os.path.join(directory, checkpoints.ENCODER_CHECKPOINT_DIR, "encoder"),
               "hf:bert-tf-tests/not-downloaded"):  # a released name is released.local_path's to check
    checkpoints.check_checkpoint_path(good)

  def refused(path, error=ValueError, flag="--init_checkpoint"):
    with pytest.raises(error) as caught:
      checkpoints.check_checkpoint_path(str(path), flag)
    return str(caught.value)

  assert refused(tmp_path / "nothing", FileNotFoundError) == (
      f"--init_checkpoint={tmp_path}/nothing does not exist (nor nothing.index, a checkpoint prefix); check the path")
  (tmp_path / "empty").mkdir()
  assert refused(tmp_path / "empty", flag="--input") == (
      f"--input={tmp_path}/empty is an empty folder; give the pretrained model's folder (a pretraining --output_dir, "
      "a converted or Hugging Face model, a fine-tuned model) or a checkpoint prefix")
  (tmp_path / "notes.txt").write_text("no weights\n")
  assert refused(tmp_path / "notes.txt") == (
      f"--init_checkpoint={tmp_path}/notes.txt is a file that is not a checkpoint; give a checkpoint prefix (the name "
      "before .index) or the model's folder")
  prefix = os.path.join(directory, checkpoints.ENCODER_CHECKPOINT_DIR, "encoder")
  assert refused(prefix + ".index") == (
      f"--init_checkpoint={prefix}.index is a file that is not a checkpoint; give the checkpoint's prefix, "
      f"--init_checkpoint={prefix}")
  assert refused(os.path.join(directory, "bert_config.json")) == (
      f"--init_checkpoint={directory}/bert_config.json is a file that is not a checkpoint; give the model's folder, "
      f"--init_checkpoint={directory}")


def test_the_vocabulary_that_comes_with_each_form_of_init_checkpoint(exported, classifier_dir, tmp_path,
                                                                     monkeypatch):
  import shutil

  from bert_tf.model import convert, released

  directory, _ = exported
  assert checkpoints.find_vocab(directory) is None  # a pretraining --output_dir without one
  pretrain = tmp_path / "pretrain"
  shutil.copytree(directory, pretrain)
  vocab = th.write_vocab(pretrain)
  for path in (pretrain, pretrain / checkpoints.ENCODER_CHECKPOINT_DIR, pretrain / checkpoints.ENCODER_CHECKPOINT_DIR /
               "encoder", pretrain / checkpoints.ENCODER_SAVEDMODEL_DIR):
    assert checkpoints.find_vocab(str(path)) == vocab, path
  # A fine-tuned model's folder.
  assert checkpoints.find_vocab(classifier_dir[0]) == os.path.join(classifier_dir[0], "vocab.txt")
  # convert_checkpoint.py's three layouts, each with the vocab.txt it copies.
  converted = convert.load_ours(str(pretrain))
  for fmt, forms in (("ours", ("", "encoder", "encoder/ckpt-1")), ("tf1", ("", "bert_model.ckpt")), ("hf", ("",))):
    folder = tmp_path / fmt
    convert.SAVERS[fmt](converted, str(folder))
    for form in forms:
      assert checkpoints.find_vocab(str(folder / form).rstrip("/")) == str(folder / "vocab.txt"), (fmt, form)
  # hf:<id>: the folder it was converted into (released.local_path's, which fine-tuning asks first).
  from bert_tf.training import finetuning

  monkeypatch.setattr(released, "local_path", lambda path: str(tmp_path / "ours") if path == "hf:org/m" else path)
  assert finetuning.vocab_file_for(None, "hf:org/m") == str(tmp_path / "ours" / "vocab.txt")


def test_checkpoint_kind_says_what_each_form_of_init_checkpoint_is(exported, classifier_dir, tmp_path):
  """The one classification of --init_checkpoint: every form a user has, and the prefix each is read from."""
  import shutil

  import tensorflow as tf

  from bert_tf.model import convert
  from bert_tf.model.encoder import BertEncoder

  directory, _ = exported
  kind = checkpoints.checkpoint_kind
  handoff_prefix = os.path.join(directory, checkpoints.ENCODER_CHECKPOINT_DIR, "encoder")
  assert kind("hf:org/m") == checkpoints.CheckpointKind(checkpoints.RELEASED)
  assert kind("keras_hub:bert_tiny_en_uncased") == checkpoints.CheckpointKind(checkpoints.RELEASED)
  for form in (directory, directory + "/", os.path.join(directory, checkpoints.ENCODER_CHECKPOINT_DIR), handoff_prefix):
    assert kind(form) == checkpoints.CheckpointKind(checkpoints.OURS, handoff_prefix), form
  saved = os.path.join(directory, checkpoints.ENCODER_SAVEDMODEL_DIR)
  assert kind(saved) == checkpoints.CheckpointKind(checkpoints.OURS, os.path.join(saved, "variables", "variables"))
  assert kind(classifier_dir[0]) == checkpoints.CheckpointKind(checkpoints.TASK_MODEL,
                                                                os.path.join(classifier_dir[0], "model"))
  # A training --output_dir: its newest checkpoints/ckpt-N (the run has no hand-off yet), or that checkpoints/.
  run = tmp_path / "run"
  run.mkdir()
  shutil.copy(os.path.join(directory, checkpoints.CONFIG_NAME), run)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(encoder=BertEncoder(th.tiny_bert_config())),
                                       str(run / "checkpoints"), 2)
  manager.save(checkpoint_number=3)
  newest = str(run / "checkpoints" / "ckpt-3")
  for form in (str(run), str(run / "checkpoints")):
    assert kind(form) == checkpoints.CheckpointKind(checkpoints.RUN_DIR, newest), form
  assert kind(newest) == checkpoints.CheckpointKind(checkpoints.OURS, newest)  # one checkpoint, by its prefix
  # google-research's folder (no `checkpoint` state file) and prefix; a Hugging Face folder.
  converted = convert.load_ours(directory)
  convert.SAVERS["tf1"](converted, str(tmp_path / "tf1"))
  tf1_prefix = str(tmp_path / "tf1" / "bert_model.ckpt")
  for form in (str(tmp_path / "tf1"), tf1_prefix):
    assert kind(form) == checkpoints.CheckpointKind(checkpoints.TF1, tf1_prefix), form
  convert.SAVERS["hf"](converted, str(tmp_path / "hf"))
  assert kind(str(tmp_path / "hf")) == checkpoints.CheckpointKind(checkpoints.HF_FOLDER)
  # Nothing to read.
  (tmp_path / "empty").mkdir()
  assert kind(str(tmp_path / "empty")) is None
  assert kind(str(tmp_path / "nothing")) is None


def test_damage_names_the_file_and_the_reason_of_each_kind_of_damage(tmp_path):
  """Issue 40 (4, 6): a damaged checkpoint was a traceback; a truncated data file's named no file."""
  import tensorflow as tf

  def written(name):
    return tf.train.Checkpoint(a=tf.Variable(tf.ones([7, 13])), b=tf.Variable([2.0, 3.0])).write(
        str(tmp_path / name / "ckpt-3"))

  intact = written("intact")
  assert checkpoints.damage(intact) is None
  assert checkpoints.checkpoint_files(intact) == [f"{intact}.data-00000-of-00001", f"{intact}.index"]
  found = {}
  for how in ("flipped_index", "cut_index", "cut_data", "flipped_data", "no_data"):
    prefix = written(how)
    index, data = f"{prefix}.index", f"{prefix}.data-00000-of-00001"
    if how == "flipped_index":
      th.damage_checkpoint(prefix, "index")
    elif how == "cut_index":
      os.truncate(index, 20)
    elif how == "cut_data":
      th.damage_checkpoint(prefix, "data")
    elif how == "flipped_data":
      with open(data, "r+b") as f:
        f.seek(100)
        f.write(b"\x55")
    else:
      os.remove(data)
    found[how] = checkpoints.damage(prefix)
  prefix = str(tmp_path / "{}" / "ckpt-3")
  path, reason = found.pop("flipped_data")
  assert path == prefix.format("flipped_data") + ".data-00000-of-00001"
  assert reason.startswith("Checksum does not match: stored "), reason
  assert found == {
      "flipped_index": (prefix.format("flipped_index") + ".index", "block checksum mismatch"),
      "cut_index": (prefix.format("cut_index") + ".index", "file is too short to be an sstable"),
      "cut_data": (prefix.format("cut_data") + ".data-00000-of-00001",
                   "truncated: Read less bytes than requested"),
      "no_data": (prefix.format("no_data") + ".data-00000-of-00001", "missing")}


def test_check_readable_is_one_line_with_the_fix_and_reads_a_checkpoint_once(tmp_path, monkeypatch):
  import tensorflow as tf

  variable = tf.Variable([1.0, 2.0])
  encoder = tf.train.Checkpoint(v=variable).write(str(tmp_path / "encoder_checkpoint" / "encoder"))
  training = tf.train.Checkpoint(v=variable).write(str(tmp_path / "run" / "checkpoints" / "ckpt-8"))
  reads = []
  monkeypatch.setattr(checkpoints, "damage", lambda prefix, read=checkpoints.damage: reads.append(prefix) or
                      read(prefix))
  checkpoints.check_readable(encoder)
  checkpoints.check_readable(encoder)
  assert reads == [encoder]  # the second asks no read: its files are the same
  th.damage_checkpoint(encoder, "data")
  with pytest.raises(ValueError) as caught:
    checkpoints.check_readable(encoder)
  assert str(caught.value) == (
      f"{encoder}.data-00000-of-00001: damaged (truncated: Read less bytes than requested); copy it again, or write "
      "it again with the command that made it, or give another checkpoint")
  th.damage_checkpoint(training, "index")
  with pytest.raises(ValueError) as caught:
    checkpoints.check_readable(training)
  assert str(caught.value) == (
      f"{training}.index: damaged (block checksum mismatch); rerun the training command of {tmp_path / 'run'}, "
      "which sets the damaged checkpoint aside and resumes from the one before, or read an older ckpt-<step> "
      "beside it")
