"""bert_tf.model.convert_tasks: every fine-tuned head to Hugging Face transformers and back, on the real
all-MiniLM-L6-v2 encoder and real English text: transformers' outputs equal ours within 1e-5 and the labels are
the same, both ways; fine-tuning checkpoints convert; a Hugging Face classifier folder exports for TF Serving and
is an --init_checkpoint with its head."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
import tensorflow as tf

import assets
import training_helpers as th
from bert_tf.model import checkpoints, convert, convert_tasks, released
from test_classification_run import _config, pretrained, write_mrpc  # noqa: F401  (pretrained: a fixture)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

SENTENCES = ["The film was a quiet, moving portrait of a family in crisis.",
             "I would not recommend this restaurant to anyone; the soup was cold.",
             "Shares of Apple rose 3% after the earnings report on Tuesday.",
             "Angela Merkel met Emmanuel Macron in Berlin."]
QUESTIONS = [("Where did Merkel meet Macron?", "Angela Merkel met Emmanuel Macron in Berlin on a rainy Tuesday."),
             ("What rose after the report?", "Shares of Apple rose 3% after the earnings report on Tuesday.")]
CHOICE = ("A man sits at a piano on a stage.", ["He begins to play a slow song.", "He eats the piano keys.",
                                                 "The stage flies to the moon.", "She bows to the audience."])
CLASSIFIER_LABELS = ["negative", "positive", "neutral"]
NER_LABELS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]  # transformers' order, not ours
# (transformers class, config.json extras) of each model built below.
CLASSES = {
    "classifier": ("BertForSequenceClassification", {"id2label": dict(enumerate(CLASSIFIER_LABELS))}),
    "regression": ("BertForSequenceClassification", {"num_labels": 1, "problem_type": "regression"}),
    "squad": ("BertForQuestionAnswering", {}),
    "ner": ("BertForTokenClassification", {"id2label": dict(enumerate(NER_LABELS))}),
    "swag": ("BertForMultipleChoice", {}),
}
KINDS = {"classifier": "classification", "regression": "classification", "squad": "squad", "ner": "ner",
         "swag": "swag"}


@pytest.fixture(scope="module")
def minilm_dir():
  return assets.minilm_dir()


@pytest.fixture(scope="module")
def minilm(minilm_dir):
  return convert.load_hf(minilm_dir)


@pytest.fixture(scope="module")
def tokenizer(minilm_dir):
  return transformers.BertTokenizer(os.path.join(minilm_dir, "vocab.txt"), do_lower_case=True)


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
  """Conversions of Hugging Face folders are cached under $BERT_TF_CACHE: a test's own."""
  monkeypatch.setenv("BERT_TF_CACHE", str(tmp_path / "bert_tf_cache"))


def seeded_head(model, seed):
  """The head's weights drawn in torch from `seed`: 5 times the initial spread (as after fine-tuning), so the
  logits differ clearly between texts."""
  head = model.qa_outputs if hasattr(model, "qa_outputs") else model.classifier
  generator = torch.Generator().manual_seed(seed)
  with torch.no_grad():
    head.weight.copy_(torch.randn(head.weight.shape, generator=generator) * 0.1)
    head.bias.copy_(torch.randn(head.bias.shape, generator=generator) * 0.1)


@pytest.fixture(scope="module")
def hf_models(minilm_dir, tokenizer, tmp_path_factory):
  """name -> (folder, the transformers model): each class made from the real MiniLM encoder with a seeded
  random head, saved with save_pretrained (and the tokenizer's files) as a user of transformers saves it."""
  made = {}
  for seed, (name, (cls, extras)) in enumerate(CLASSES.items()):
    config = transformers.BertConfig.from_pretrained(minilm_dir, **extras)
    model = getattr(transformers, cls).from_pretrained(minilm_dir, config=config).eval()
    seeded_head(model, seed)
    folder = str(tmp_path_factory.mktemp(name))
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    made[name] = (folder, model)
  return made


def encode(tokenizer, name):
  """(transformers' inputs, ours: int32 arrays; [1, 4, T] for multiple choice) of the real text for `name`."""
  if name == "squad":
    enc = tokenizer([q for q, _ in QUESTIONS], [c for _, c in QUESTIONS], padding=True, return_tensors="pt")
  elif name == "swag":
    enc = tokenizer([CHOICE[0]] * 4, CHOICE[1], padding=True, return_tensors="pt")
    enc = {k: v[None] for k, v in enc.items()}
  else:
    enc = tokenizer(SENTENCES, padding=True, return_tensors="pt")
  ours = {"input_ids": enc["input_ids"], "input_mask": enc["attention_mask"], "segment_ids": enc["token_type_ids"]}
  return dict(enc), {k: v.numpy().astype(np.int32) for k, v in ours.items()}


def outputs_of_transformers(model, enc, name):
  """The model's outputs as ours gives them: logits [B, K] / [B] (regression) / [B, C]; start and end [2, B, T];
  token logits [B, T, K]."""
  with torch.no_grad():
    out = model(**enc)
  if name == "squad":
    return np.stack([out.start_logits.numpy(), out.end_logits.numpy()])
  logits = out.logits.numpy()
  return logits[:, 0] if name == "regression" else logits


def outputs_of_ours(model, features, name):
  out = model(features, training=False)
  if name == "squad":
    return np.stack([out["start_logits"].numpy(), out["end_logits"].numpy()])
  return np.asarray(out)


def assert_same_outputs(ours, theirs, features, name):
  """Within 1e-5 at every real token (padded positions of per-token heads mean nothing in either)."""
  if name in ("squad", "ner"):
    mask = features["input_mask"].astype(bool)
    ours, theirs = (np.moveaxis(x, 0, -1) if name == "squad" else x for x in (ours, theirs))
    ours, theirs = ours[mask], theirs[mask]
  assert ours.shape == theirs.shape
  np.testing.assert_allclose(ours, theirs, rtol=0, atol=1e-5)
  if name != "regression":
    np.testing.assert_array_equal(ours.argmax(-1), theirs.argmax(-1))


@pytest.mark.parametrize("name", list(CLASSES))
def test_a_transformers_head_converts_to_ours_with_its_outputs_and_labels(name, hf_models, tokenizer):
  folder, model = hf_models[name]
  converted = convert_tasks.load_hf(folder)
  task = converted.task
  assert task.kind.name == KINDS[name] and task.kind.architecture == CLASSES[name][0]
  assert converted.encoder is task.model.encoder and converted.unused == []
  enc, features = encode(tokenizer, name)
  assert_same_outputs(outputs_of_ours(task.model, features, name), outputs_of_transformers(model, enc, name),
                      features, name)
  settings = task.settings
  assert settings["converted_from"] == folder and settings["do_lower_case"] is True
  if name == "classifier":
    assert settings["labels"] == CLASSIFIER_LABELS and settings["is_pair"] is False
    assert settings["max_seq_length"] == 512  # the tokenizer's model_max_length, as transformers truncates
  if name == "regression":
    assert settings["labels"] == []
  if name == "ner":
    assert settings["labels"] == NER_LABELS and settings["label_scheme"] == "IOB2"
    assert settings["types"] == ["LOC", "ORG", "PER"]
  if name == "squad":
    assert (settings["max_seq_length"], settings["doc_stride"], settings["max_query_length"]) == (384, 128, 64)
  # Written as our task's model folder, it loads as the run scripts load it.
  ours_dir = os.path.join(os.path.dirname(folder), f"{name}_ours")
  convert_tasks.save_ours(converted, ours_dir)
  assert convert_tasks.folder_kind(ours_dir) == task.kind
  again = convert_tasks.load_ours(ours_dir)
  assert again.task.settings == settings
  for a, b in zip(again.task.model.weights, task.model.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def our_model_folder(name, minilm, directory):
  """A fine-tuned model's folder as each task's run writes it (its own save function), on the MiniLM encoder with a
  seeded random head; -> (the folder, the model)."""
  from bert_tf.tasks.classification import classifier as classification

  encoder = minilm.encoder
  kind = next(k for k in convert_tasks.task_kinds() if k.name == KINDS[name])
  vocab = minilm.vocab_file
  if kind.name == "classification":
    labels = () if name == "regression" else ("contradiction", "entailment", "neutral")
    settings = {"task_name": "MNLI" if labels else "STS-B", "labels": list(labels), "is_pair": True,
                "max_seq_length": 128, "do_lower_case": True}
  elif kind.name == "squad":
    settings = {"max_seq_length": 384, "doc_stride": 128, "max_query_length": 64, "do_lower_case": True,
                "version_2_with_negative": True, "null_score_diff_threshold": -1.5}
  elif kind.name == "ner":
    settings = {"labels": ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"], "label_scheme": "IOB2", "types": ["LOC", "PER"],
                "train_tag_scheme": "IOB1", "max_seq_length": 128, "do_lower_case": True, "document_context": True}
  else:
    settings = {"max_seq_length": 80, "do_lower_case": True, "num_choices": 4}
  model = convert_tasks.build_model(kind, encoder.config, settings)
  model.encoder.set_weights(encoder.get_weights())
  rng = np.random.default_rng(11)
  layer = getattr(model, kind.layer)
  for variable in (layer.kernel, layer.bias):
    variable.assign(rng.normal(0, 0.1, variable.shape).astype(np.float32))
  folder = os.path.join(directory, kind.model_dir)
  if kind.name == "classification":
    spec = classification.ClassifierSpec(settings["task_name"], labels, True, 128, True)
    classification.save_classifier(model, spec, vocab, folder)
  else:
    text = json.dumps(settings, indent=2) + "\n"
    checkpoints.save_task_model(model, kind.settings_name, text, vocab, folder)
  return folder, model


@pytest.mark.parametrize("name", list(CLASSES))
def test_our_fine_tuned_model_converts_to_its_transformers_class_and_back(name, minilm, tokenizer, tmp_path):
  folder, model = our_model_folder(name, minilm, str(tmp_path))
  hf_dir = str(tmp_path / "hf")
  convert_tasks.save_hf(convert_tasks.load_ours(folder), hf_dir)
  cls = CLASSES[name][0]
  theirs, info = getattr(transformers, cls).from_pretrained(hf_dir, output_loading_info=True)
  assert {k: sorted(v) for k, v in info.items() if k in ("missing_keys", "unexpected_keys", "mismatched_keys")} == \
      {"missing_keys": [], "unexpected_keys": [], "mismatched_keys": []}
  enc, features = encode(tokenizer, name)
  assert_same_outputs(outputs_of_ours(model, features, name), outputs_of_transformers(theirs.eval(), enc, name),
                      features, name)
  with open(os.path.join(hf_dir, "config.json")) as f:
    values = json.load(f)
  assert values["architectures"] == [cls] and values["model_type"] == "bert"
  assert "_name_or_path" not in values and "transformers_version" not in values  # MiniLM's config had both
  if name == "classifier":
    assert theirs.config.id2label == {0: "contradiction", 1: "entailment", 2: "neutral"}
    assert values["problem_type"] == "single_label_classification" and values["finetuning_task"] == "MNLI"
  elif name == "regression":
    assert theirs.config.num_labels == 1 and values["problem_type"] == "regression"
  elif name == "ner":
    assert theirs.config.id2label == {0: "O", 1: "B-LOC", 2: "I-LOC", 3: "B-PER", 4: "I-PER"}
  else:
    assert "id2label" not in values
  with open(os.path.join(hf_dir, "tokenizer_config.json")) as f:
    assert json.load(f)["do_lower_case"] is True
  # And back: every weight exactly, and the settings transformers has no place for (bert_tf.json).
  back = convert_tasks.load_hf(hf_dir)
  with open(os.path.join(folder, back.task.kind.settings_name)) as f:
    assert {k: v for k, v in back.task.settings.items() if k != "converted_from"} == json.load(f)
  for a, b in zip(back.task.model.weights, model.weights):
    if back.task.kind.pooler or "pooler" not in a.path:  # SQuAD's and NER's classes have no pooler to carry
      np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)


def test_the_converter_script_writes_a_classifier_with_its_labels(minilm, tmp_path):
  folder, _ = our_model_folder("classifier", minilm, str(tmp_path))
  result = th.run_python(["scripts/convert_checkpoint.py", "--input_format=ours", f"--input={folder}",
                          "--output_format=hf", f"--output_dir={tmp_path / 'hf'}"])
  assert result.returncode == 0, result.stderr[-3000:]
  assert "task: classification (BertForSequenceClassification, labels contradiction, entailment, neutral)" in \
      result.stderr
  assert sorted(os.listdir(tmp_path / "hf")) == ["bert_tf.json", "config.json", "model.safetensors",
                                                 "special_tokens_map.json", "tokenizer_config.json", "vocab.txt"]
  config = transformers.AutoConfig.from_pretrained(str(tmp_path / "hf"))
  assert config.architectures == ["BertForSequenceClassification"] and config.label2id["neutral"] == 2


def test_fine_tuning_checkpoints_convert_with_their_own_weights(tmp_path, pretrained):
  from bert_tf.tasks.classification import run as classification_run

  data = write_mrpc(tmp_path / "MRPC")
  config = _config(tmp_path, pretrained, data, do_train=True, do_eval=True, save_checkpoints_steps=6,
                   keep_checkpoint_max=5, eval_every_steps=6, keep_best_checkpoint=True)
  classification_run.run_classifier(config, say=lambda line: None)
  out = tmp_path / "out"
  best = [n[:-len(".index")] for n in os.listdir(out / "best") if n.endswith(".index")]
  assert len(best) == 1
  for source, prefix in ((str(out), str(out / "checkpoints" / "ckpt-6")),
                         (str(out / "best" / best[0]), str(out / "best" / best[0]))):
    converted = convert_tasks.load_ours(source, step=6 if source == str(out) else None)
    assert converted.task.settings["labels"] == ["0", "1"] and converted.task.settings["task_name"] == "MRPC"
    hf_dir = str(tmp_path / f"hf_{os.path.basename(prefix)}")
    convert_tasks.save_hf(converted, hf_dir)
    theirs = transformers.BertForSequenceClassification.from_pretrained(hf_dir)
    reader = tf.train.load_checkpoint(prefix)
    kernel = [reader.get_tensor(n) for n, _ in tf.train.list_variables(prefix) if n.startswith("model/classifier/_k")]
    np.testing.assert_array_equal(theirs.classifier.weight.detach().numpy(), kernel[0].T)
  # A run that has not written classifier/ yet cannot say what its labels are: one line says so.
  shutil.rmtree(out / "classifier")
  with pytest.raises(FileNotFoundError) as caught:
    convert_tasks.load_ours(str(out / "checkpoints" / "ckpt-6"))
  assert "a classification fine-tuning checkpoint, but its run" in str(caught.value)
  assert "\n" not in str(caught.value)


def test_a_hugging_face_classifier_exports_and_serves_its_labels(hf_models, tokenizer, tmp_path):
  folder, model = hf_models["classifier"]
  result = th.run_python(["scripts/export_classifier.py", f"--classifier_dir={folder}",
                          f"--export_dir={tmp_path / 'export'}", "--model_name=sentiment"],
                         timeout=600, BERT_TF_CACHE=str(tmp_path / "cache"))
  assert result.returncode == 0, result.stderr[-3000:]
  serve = tf.saved_model.load(str(tmp_path / "export" / "sentiment" / "1")).signatures["serving_default"]
  served = serve(sentence1=tf.constant(SENTENCES))
  enc, _ = encode(tokenizer, "classifier")
  expected = [model.config.id2label[i] for i in outputs_of_transformers(model, enc, "classifier").argmax(-1)]
  assert [label.decode() for label in served["label"].numpy()] == expected
  assert len(set(expected)) > 1  # The seeded head tells the sentences apart.


def test_run_classifier_predicts_with_a_hugging_face_classifier_as_it_is(hf_models, tokenizer, tmp_path):
  folder, model = hf_models["classifier"]
  (tmp_path / "test.csv").write_text("sentence1\n" + "".join(f'"{text}"\n' for text in SENTENCES))
  result = th.run_python(["scripts/run_classifier.py", f"--init_checkpoint={folder}", "--do_predict",
                          f"--test_file={tmp_path / 'test.csv'}", f"--output_dir={tmp_path / 'out'}"],
                         timeout=600, BERT_TF_CACHE=str(tmp_path / "cache"))
  assert result.returncode == 0, result.stderr[-3000:]
  rows = (tmp_path / "out" / "test_predictions.csv").read_text().splitlines()
  enc, _ = encode(tokenizer, "classifier")
  expected = [model.config.id2label[i] for i in outputs_of_transformers(model, enc, "classifier").argmax(-1)]
  assert rows == ["index,prediction"] + [f"{i},{label}" for i, label in enumerate(expected)]


def test_a_hugging_face_task_model_is_an_init_checkpoint_with_its_head_and_labels(hf_models, tmp_path):
  from bert_tf.tasks.classification import classifier as classification
  from bert_tf.tasks.classification import run as classification_run
  from bert_tf.training import finetuning

  folder, _ = hf_models["classifier"]
  bert_config = finetuning.bert_config_for(None, folder)
  ft = finetuning.FinetuningConfig(output_dir=str(tmp_path / "out"), bert_config=bert_config,
                                   init_checkpoint=folder)
  config = classification_run.ClassifierConfig(task_name=None, data_dir=None,
                                               vocab_file=os.path.join(folder, "vocab.txt"), finetuning=ft)
  local = config.finetuning.init_checkpoint  # our classifier/ converted from it, cached
  assert local.startswith(str(tmp_path / "bert_tf_cache" / "converted" / "hf")) and local != folder
  assert released.task_model_dir(folder) == local and released.local_path(folder) == local
  model, spec, _ = classification.load_classifier(local)
  assert spec.labels == tuple(CLASSIFIER_LABELS) and bert_config == model.config
  # Fine-tuning on the same labels takes its head (a Hugging Face model has no task name of ours) ...
  fresh = classification.BertClassifier(bert_config, 3)
  fresh({name: tf.zeros([1, 2], tf.int32) for name in ("input_ids", "input_mask", "segment_ids")})
  head = (classification.SPEC_NAME, {"task_name": "sentiment", "labels": CLASSIFIER_LABELS})
  assert finetuning.init_encoder(fresh.encoder, folder, model=fresh, head=head).endswith("(encoder and task head)")
  for a, b in zip(fresh.weights, model.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy(), err_msg=a.path)
  # ... other labels its encoder alone, as from a classifier fine-tuned here.
  other = (classification.SPEC_NAME, {"task_name": "sentiment", "labels": ["neg", "pos", "neutral"]})
  assert not finetuning.init_encoder(fresh.encoder, folder, model=fresh, head=other).endswith("task head)")


def test_a_hugging_face_classifier_by_model_id_converts_to_a_classifier_folder(hf_models, tmp_path, monkeypatch):
  from huggingface_hub import constants

  from test_convert import hf_cache_with

  folder, _ = hf_models["classifier"]
  hf_cache_with(folder, tmp_path / "hub", "bert-tf-tests/sentiment")
  monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
  monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
  local = released.task_model_dir("hf:bert-tf-tests/sentiment")
  assert convert_tasks.folder_kind(local).name == "classification"
  with open(os.path.join(local, "classifier.json")) as f:
    spec = json.load(f)
  assert spec["task_name"] == "sentiment" and spec["labels"] == CLASSIFIER_LABELS
  assert spec["converted_from"] == "hf:bert-tf-tests/sentiment"
  assert released.task_model_dir("hf:bert-tf-tests/sentiment") == local  # converted once


def test_heads_without_a_counterpart_are_refused_in_one_line(hf_models, minilm, tmp_path):
  folder, _ = hf_models["classifier"]
  multi = tmp_path / "multi"
  shutil.copytree(folder, multi)
  values = json.loads((multi / "config.json").read_text())
  (multi / "config.json").write_text(json.dumps({**values, "problem_type": "multi_label_classification"}))
  with pytest.raises(ValueError, match=r"multi_label_classification \(a sigmoid per label\) has no classifier here"):
    convert_tasks.load_hf(str(multi))
  ner_folder, _ = our_model_folder("ner", minilm, str(tmp_path))
  settings = json.loads((tmp_path / "ner_model" / "ner.json").read_text())
  (tmp_path / "ner_model" / "ner.json").write_text(json.dumps({**settings, "feature_based": "last_hidden"}))
  converted = convert_tasks.load_ours(ner_folder)
  with pytest.raises(ValueError) as caught:
    convert_tasks.save_hf(converted, str(tmp_path / "hf"))
  assert str(caught.value).startswith("a feature-based NER tagger (--feature_based: a BiLSTM on the frozen")
  assert not os.path.exists(tmp_path / "hf")
  convert_tasks.save_ours(converted, str(tmp_path / "encoder_alone"))  # its encoder still converts
  assert sorted(os.listdir(tmp_path / "encoder_alone")) == ["bert_config.json", "encoder", "vocab.txt"]
