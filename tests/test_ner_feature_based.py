"""bert_tf.tasks.ner.feature_based and run_ner's --feature_based mode: the frozen-encoder BiLSTM tagger on cached
layers and on windows alike, the layer cache, training through the shared trainer with the encoder unchanged,
and a whole run (train, dev predictions in CoNLL format scored by conlleval's metric, reload) on a tiny encoder
and a CoNLL fixture written here."""

import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.data.tokenization import FullTokenizer
from bert_tf.model import checkpoints
from bert_tf.model.encoder import BertEncoder
from bert_tf.tasks.common import layer_choice as feature_choice
from bert_tf.tasks.common.folder import float32_copy
from bert_tf.tasks.ner import data as ner
from bert_tf.tasks.ner import feature_based
from bert_tf.tasks.ner import metrics as ner_metrics
from bert_tf.tasks.ner import model as ner_model
from bert_tf.tasks.ner import run as ner_run
from bert_tf.training import finetuning

T = 13
L = 4
STRATEGY = tf.distribute.OneDeviceStrategy("/cpu:0")
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "man", "visited", "paris", "london", "and", "new",
         "york", "john", "smith", "met", "acme", "corp", "in", "berlin", "##s", "sun", "rose", ".", "eu", "says"]
# Release format (IOB1, 4 columns, -DOCSTART-): 7 sentences in 2 documents; "Acmes" is two pieces (acme ##s).
CONLL = """-DOCSTART- -X- -X- O

John NNP B-NP I-PER
Smith NNP I-NP I-PER
visited VBD B-VP O
Paris NNP B-NP I-LOC
. . O O

The DT B-NP O
man NN I-NP O
met VBD B-VP O
Acmes NNP B-NP I-ORG
Corp NNP I-NP I-ORG
in IN B-PP O
Berlin NNP B-NP I-LOC
. . O O

EU NNP B-NP I-ORG
says VBZ B-VP O

-DOCSTART- -X- -X- O

The DT B-NP O
sun NN I-NP O
rose VBD B-VP O
in IN B-PP O
New NNP B-NP I-LOC
York NNP I-NP I-LOC
. . O O

Paris NNP B-NP I-LOC
London NNP B-NP B-LOC
and CC O O
Berlin NNP B-NP I-LOC

John NNP B-NP I-PER
met VBD B-VP O
the DT B-NP O
man NN I-NP O

Acme NNP B-NP I-ORG
says VBZ B-VP O
"""


def _config():
  return BertConfig.from_preset("tiny", vocab_size=len(VOCAB), num_hidden_layers=L, hidden_size=14,
                                num_attention_heads=2, intermediate_size=23, max_position_embeddings=T + 2,
                                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  """conll/ (the fixture as eng.train, eng.testa, eng.testb), model/ (a tiny random encoder in the pretraining
  hand-off layout and the vocabulary)."""
  directory = tmp_path_factory.mktemp("ner_feature_based")
  os.makedirs(directory / "conll")
  for name in ("eng.train", "eng.testa", "eng.testb"):
    (directory / "conll" / name).write_text(CONLL)
  tf.keras.utils.set_random_seed(5)
  checkpoints.export_encoder(BertEncoder(_config()), _config(), str(directory / "model"))
  (directory / "model" / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  return directory


def _windows(workdir, labelled=True):
  conll = ner.read_conll(str(workdir / "conll" / "eng.train"))
  labels = ner.labels_for(conll.types, "IOB2")
  windows = ner.make_windows(conll.sentences, FullTokenizer(str(workdir / "model" / "vocab.txt")), T, False,
                             {label: i for i, label in enumerate(labels)} if labelled else None)
  return conll, labels, windows


def _inputs(windows):
  return {name: tf.constant([getattr(w, name) for w in windows], tf.int32)
          for name in ("input_ids", "input_mask", "segment_ids")}


def test_tagger_on_cached_layers_equals_tagger_on_windows_and_ignores_padding():
  tf.keras.utils.set_random_seed(1)
  model = feature_based.build(feature_based.BertFeatureTagger(_config(), 7, "weighted_sum_all"))
  assert model.lstm_units == 14 and not model.encoder.trainable
  assert model.encoder.trainable_weights == [] and model.encoder.weights
  head = [w for layer in (model.features, model.lstm_1, model.lstm_2, model.tag_output) for w in layer.weights]
  assert {id(w) for w in model.trainable_weights} == {id(w) for w in head} and len(head) == 16
  rng = np.random.RandomState(2)
  mask = np.array([[1] * 9 + [0] * 4, [1] * 5 + [0] * 8, [1] * 13], np.int32)  # B=3, T=13
  inputs = {"input_ids": tf.constant(rng.randint(5, len(VOCAB), size=(3, T)) * mask), "input_mask": tf.constant(mask),
            "segment_ids": tf.zeros([3, T], tf.int32)}
  logits = model(inputs, training=False).numpy()
  assert logits.shape == (3, T, 7) and logits.dtype == np.float32
  outputs = model.encoder(inputs, training=False)
  layers = tf.stack(feature_choice.stacked_outputs(outputs), axis=2)  # [B, T, L+1, H]
  np.testing.assert_allclose(
      model({feature_based.LAYERS_KEY: layers, "input_mask": inputs["input_mask"]}).numpy(), logits, atol=1e-6)
  # The second window alone, cut to its 5 real tokens: the masked LSTMs give its real positions the same logits.
  alone = model({k: v[1:2, :5] for k, v in inputs.items()}).numpy()
  np.testing.assert_allclose(alone[0], logits[1, :5], atol=1e-5)
  # Dropout is never applied in the encoder: the same features in training mode.
  np.testing.assert_array_equal(model.encoder_outputs(inputs)["embedding_output"].numpy(),
                                outputs["embedding_output"].numpy())
  config = model.get_config()
  assert (config["choice"], config["lstm_units"], config["num_labels"]) == ("weighted_sum_all", 14, 7)
  copy = float32_copy(model)
  np.testing.assert_array_equal(copy(inputs).numpy(), logits)
  with pytest.raises(ValueError, match="unknown feature choice; choose one of embeddings"):
    feature_based.BertFeatureTagger(_config(), 7, "sum")


def test_rows_of_padding_give_cudnns_lstm_a_mask_it_accepts():
  # On a GPU Keras' LSTMs are cuDNN's, which assert that every row's mask is right-padded and not empty; the rows
  # of padding that fill evaluation batches (pad_to_batch) have no token. Keras asked here as on a GPU: cuDNN fails
  # on the CPU, and Keras falls back to its own loop after the mask was checked.
  import importlib
  from unittest import mock

  from bert_tf.training import accelerator_checks

  rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
  checked, original = [], rnn._assert_valid_mask

  def recording(mask):
    checked.append(bool(~rnn._has_fully_masked_sequence(mask) & rnn._is_sequence_right_padded(mask)))
    return original(mask)

  tf.keras.utils.set_random_seed(1)
  model = feature_based.build(feature_based.BertFeatureTagger(_config(), 3, "last_hidden", lstm_units=4))
  mask = np.array([[1] * 9 + [0] * 4, [1] * 5 + [0] * 8, [0] * 13], np.int32)  # the last row: padding
  inputs = {"input_ids": tf.constant(7 * mask), "input_mask": tf.constant(mask),
            "segment_ids": tf.zeros([3, T], tf.int32)}
  with accelerator_checks.tracing_as_on_gpu(), mock.patch.object(rnn, "_assert_valid_mask", recording):
    logits = model(inputs).numpy()
  assert checked == [True] * 4  # 2 BiLSTMs x 2 directions
  np.testing.assert_allclose(model({k: v[:2] for k, v in inputs.items()}).numpy(), logits[:2], atol=1e-6)


def test_layer_file_holds_each_windows_real_tokens_and_is_named_by_the_weights(workdir, tmp_path):
  _, _, windows = _windows(workdir)
  info = ner_model.write_feature_file(windows, str(tmp_path / "w.tfrecord"))
  tf.keras.utils.set_random_seed(3)
  encoder = BertEncoder(_config())
  # What a killed write left (its process is gone) is removed; a live writer's temporary file stays.
  from test_run_lock import dead_owner_tag

  cache = tmp_path / "f" / "ner_layers"
  cache.mkdir(parents=True)
  (cache / f".x.tfrecord.tmp-0123abcd.{dead_owner_tag()}").write_bytes(b"\0" * 1000)
  (cache / f".y.tfrecord.tmp-0123abcd.{fileio.owner_tag()}").write_bytes(b"\0" * 10)
  layers, reused = feature_based.cached_layer_file(encoder, info, str(tmp_path / "f"), batch_size=3)
  assert sorted(os.listdir(cache)) == sorted([os.path.basename(layers.path), os.path.basename(layers.path) + ".json",
                                              f".y.tfrecord.tmp-0123abcd.{fileio.owner_tag()}"])
  assert not reused and layers.num_windows == len(windows) == 7
  assert (layers.num_layers, layers.hidden_size, layers.num_words) == (L + 1, 14, info.num_words)
  assert layers.path.startswith(f"{tmp_path}/f/ner_layers/")
  batches = list(feature_based.layer_dataset(layers, 4, is_training=False, pad_to_batch=True))
  assert [b["is_real_example"].numpy().tolist() for b in batches] == [[1, 1, 1, 1], [1, 1, 1, 0]]
  assert [int(i) for b in batches for i, real in zip(b["unique_ids"].numpy(), b["is_real_example"].numpy())
          if real] == list(range(7))
  expected = encoder(_inputs(windows), training=False)
  stacked = tf.stack(feature_choice.stacked_outputs(expected), axis=2).numpy()  # [N, T, L+1, H]
  row = 0
  for batch in batches:
    for i in range(int(batch["is_real_example"].numpy().sum())):
      n = sum(windows[row].input_mask)
      assert batch["input_mask"].numpy()[i].tolist()[:n] == [1] * n and not batch["input_mask"].numpy()[i, n:].any()
      assert batch["label_ids"].numpy()[i, :n].tolist() == windows[row].label_ids[:n]
      assert batch["label_mask"].numpy()[i, :n].tolist() == windows[row].label_mask[:n]
      np.testing.assert_allclose(batch[feature_based.LAYERS_KEY].numpy()[i, :n], stacked[row, :n], atol=1e-5)
      row += 1
  assert row == 7

  # Training batches: full, shuffled, repeated, and each of windows on one side of the bucket boundary (9).
  lengths = {i: sum(w.input_mask) for i, w in enumerate(windows)}
  assert sorted(lengths.values()) == [4, 4, 6, 6, 7, 9, 11]
  for batch in feature_based.layer_dataset(layers, 2, is_training=True, seed=4).take(12):
    mine = [lengths[int(i)] for i in batch["unique_ids"].numpy()]
    assert len(mine) == 2 and len({n < 9 for n in mine}) == 1, mine
    assert batch[feature_based.LAYERS_KEY].shape[1] == max(mine)
  # Under --jit_compile lengths round up to a multiple of 8 (at most T); without dynamic padding (TPUs) every batch
  # has T positions, in its static shape too; the windows' own positions are unchanged.
  for multiple, static in ((8, False), (1, True)):
    dataset = feature_based.layer_dataset(layers, 2, is_training=True, seed=4, length_multiple=multiple,
                                          static_length=static)
    if static:
      assert dataset.element_spec[feature_based.LAYERS_KEY].shape.as_list() == [2, T, L + 1, 14]
    for batch, plain in zip(dataset.take(6), feature_based.layer_dataset(layers, 2, is_training=True, seed=4).take(6)):
      longest = max(lengths[int(i)] for i in batch["unique_ids"].numpy())
      expected = T if static else (8 if longest <= 8 else T)  # 16 > T = 13
      assert {k: v.shape[1] for k, v in batch.items() if v.shape.rank >= 2} == dict.fromkeys(
          ["input_mask", "label_ids", "label_mask", feature_based.LAYERS_KEY], expected)
      n = plain["input_mask"].shape[1]
      for key in plain:
        np.testing.assert_array_equal(batch[key].numpy()[:, :n] if plain[key].shape.rank >= 2 else batch[key].numpy(),
                                      plain[key].numpy())
      assert not batch["input_mask"].numpy()[:, n:].any()

  assert feature_based.cached_layer_file(encoder, info, str(tmp_path / "f"), batch_size=3) == (layers, True)
  twin = BertEncoder(_config(), name="encoder")  # same weights under another name: the same layers
  twin.set_weights(encoder.get_weights())
  assert feature_based.encoder_fingerprint(twin) == layers.encoder_fingerprint
  encoder.word_embeddings.embeddings.assign_add(tf.ones_like(encoder.word_embeddings.embeddings) * 1e-3)
  other = feature_based.layer_file_path(str(tmp_path / "f"), info.path, feature_based.encoder_fingerprint(encoder))
  assert other != layers.path and feature_based.encoder_fingerprint(encoder) != layers.encoder_fingerprint


def test_training_through_the_shared_trainer_leaves_the_encoder_unchanged(workdir, tmp_path):
  _, labels, windows = _windows(workdir)
  info = ner_model.write_feature_file(windows, str(tmp_path / "w.tfrecord"))
  config = finetuning.FinetuningConfig(output_dir=str(tmp_path / "out"), bert_config=_config(),
                                       init_checkpoint=str(workdir / "model"), train_batch_size=3,
                                       learning_rate=1e-2, num_train_epochs=4, warmup_proportion=0.0,
                                       distribution_strategy="one_device", steps_per_loop=3, log_steps=3)
  # The encoder in the loop.
  task = feature_based.NerFeatureTask(_config(), len(labels), "concat_last_four", info.path, T)
  run, result = finetuning.train(task, config, info.num_windows, STRATEGY)
  assert result.step == 9 and not result.interrupted
  assert result.history[-1]["loss"] < result.history[0]["loss"]
  pretrained = BertEncoder(_config())
  finetuning.init_encoder(pretrained, str(workdir / "model"))
  for trained, original in zip(run.model.encoder.weights, pretrained.weights):
    np.testing.assert_array_equal(trained.numpy(), original.numpy(), err_msg=trained.path)
  assert all(not np.allclose(w.numpy(), 0) for w in run.model.tag_output.weights[:1])


def test_run_ner_feature_based_trains_predicts_in_conll_format_and_reloads(workdir, tmp_path):
  def config(**kwargs):
    ft = finetuning.FinetuningConfig(output_dir=str(tmp_path / "out"), bert_config=_config(),
                                     init_checkpoint=kwargs.pop("init", str(workdir / "model")),
                                     train_batch_size=3, predict_batch_size=5, learning_rate=1e-2,
                                     num_train_epochs=3, warmup_proportion=0.0, distribution_strategy="one_device",
                                     steps_per_loop=7, log_steps=7)
    return ner_run.NerConfig(data_dir=str(workdir / "conll"), vocab_file=str(workdir / "model" / "vocab.txt"),
                             finetuning=ft, max_seq_length=T, features_dir=str(tmp_path / "features"),
                             tag_scheme="IOB1", **kwargs)

  lines = []
  summary = ner_run.run_ner(config(do_train=True, do_eval=True, feature_based="second_to_last_hidden"), STRATEGY,
                            say=lines.append)
  assert summary["train_steps"] == 7
  # eng.testa, a copy of eng.train, has its windows (every file's are labelled: the loss), so the frozen encoder's
  # layers are computed once.
  assert sum("wrote encoder layers" in line for line in lines) == 1
  assert any("reusing encoder layers" in line for line in lines)
  predictions = (tmp_path / "out" / "eval_predictions.txt").read_text().split("\n\n")
  conll = ner.read_conll(str(workdir / "conll" / "eng.testa"))
  assert len([p for p in predictions if p.strip()]) == len(conll.sentences) == 7
  first = [line.split(" ") for line in predictions[0].split("\n")]
  assert [w for w, _, _ in first] == ["John", "Smith", "visited", "Paris", "."]
  assert [g for _, g, _ in first] == ["I-PER", "I-PER", "O", "I-LOC", "O"]
  predicted = [[line.split(" ")[2] for line in p.split("\n") if line] for p in predictions if p.strip()]
  assert all(t == "O" or t[:2] in ("I-", "B-") for row in predicted for t in row)  # back in the file's IOB1
  evaluation = ner_metrics.evaluate([s.tags for s in conll.sentences], predicted)
  assert summary["eval"]["f1"] == evaluation.overall.f1
  settings = ner_run.read_settings(str(tmp_path / "out" / "ner_model"))
  assert (settings["feature_based"], settings["lstm_units"]) == ("second_to_last_hidden", 14)

  # The saved model alone, predicting on the windows (no cache): the same tags.
  again = ner_run.run_ner(config(do_eval=True, cache_features=False, init=str(tmp_path / "out" / "ner_model"),
                                 feature_based="second_to_last_hidden"), STRATEGY, say=lines.append)
  assert again["eval"]["f1"] == summary["eval"]["f1"]
  # The evaluation loss (the trained loss on the dev windows' labelled words) alike from layers and windows.
  assert again["eval"]["loss"] == pytest.approx(summary["eval"]["loss"], abs=1e-5) and summary["eval"]["loss"] > 0
  assert (tmp_path / "out" / "eval_predictions.txt").read_text().split("\n\n") == predictions
  with pytest.raises(ValueError, match="is feature-based on second_to_last_hidden; drop --feature_based"):
    ner_run.run_ner(config(do_eval=True, init=str(tmp_path / "out" / "ner_model"), feature_based="last_hidden"),
                    STRATEGY)
  with pytest.raises(ValueError, match="--feature_based='top': unknown feature choice; choose one of"):
    config(do_train=True, feature_based="top").validate()
  with pytest.raises(ValueError, match="--feature_based trains on a pretrained encoder's features"):
    config(do_train=True, feature_based="last_hidden", init=None).validate()
  with pytest.raises(ValueError, match="--export_dir serves fine-tuned taggers only"):
    config(do_train=True, feature_based="last_hidden", export_dir=str(tmp_path / "e")).validate()


def test_script_rejects_an_unknown_choice_before_any_work(workdir, tmp_path):
  result = subprocess.run(
      [sys.executable, os.path.join(th.REPO, "scripts", "run_ner.py"), f"--data_dir={workdir / 'conll'}",
       f"--vocab_file={workdir / 'model' / 'vocab.txt'}", f"--init_checkpoint={workdir / 'model'}",
       f"--output_dir={tmp_path / 'out'}", f"--max_seq_length={T}", "--do_train", "--feature_based=last_layer"],
      env=th.python_env(), capture_output=True, text=True, timeout=600)
  assert result.returncode != 0
  assert "--feature_based='last_layer': unknown feature choice; choose one of embeddings, second_to_last_hidden" \
      in result.stderr
  assert not (tmp_path / "out").exists()
