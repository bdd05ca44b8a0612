"""CoNLL-2003 named-entity recognition: what `scripts/run_ner.py` runs. Glue between the tested pieces:

  data_dir/eng.train --ner.read_conll (every split the --do_* flags ask for, before any work)--> sentences
  --ner.make_windows / ner_model.write_feature_file--> windows (TFRecords, cached under <features_dir>/ner/)
  --finetuning.train(NerTask)--> BertTokenClassifier --> <output_dir>/ner_model/

  eng.testa (--do_eval), eng.testb (--do_predict) --> windows (labelled: the loss) --finetuning.predict--> a label
  per word (at its first piece) and the loss --converted to the file's tag scheme--> <split>_predictions.txt
  (word gold predicted) --ner_metrics.evaluate (conlleval's scores)--> <split>_results.txt / .json

Outputs in --output_dir:
  checkpoints/, train/           training checkpoints and TensorBoard summaries (a rerun resumes)
  ner_model/                     the fine-tuned model: float32 weights (`model`), bert_config.json, vocab.txt and
                                 ner.json (labels, their scheme, the entity types, window settings)
  eval_predictions.txt           --do_eval: the dev file's words, gold and predicted tags (conlleval's input)
  eval_results.txt / .json       --do_eval: precision, recall, f1 (overall and per type), accuracy, and loss (the
                                 mean cross-entropy training minimises, over the labelled words) ("key = value")
  eval_conlleval.txt             --do_eval: the same scores as conlleval prints them
  test_predictions.txt, test_results.txt / .json, test_conlleval.txt   likewise for --do_predict on the test file

With --feature_based=<choice> (docs/feature_based.md), the paper's feature-based mode (section 5.3) replaces
fine-tuning: the encoder stays frozen, and `feature_based.BertFeatureTagger` trains a two-layer BiLSTM and a
classifier on one of its feature choices. The encoder's layers are computed once per window file and cached under
<features_dir>/ner_layers/ (--cache_features); the windows, loss, metric and output files are the same.

With --export_dir, ner_model/ is also exported for TensorFlow Serving (`ner.serving`: raw text in, tags
and entities out) to <export_dir>/<model_name>/<version>/.

A plain tag set (part of speech, any label per word: `ner.PLAIN`, found by --tag_scheme=auto or given as
--tag_scheme=plain) is word-level tagging: the model's labels are the training file's tags, trained and predicted
as above; the scores are word-level (accuracy, the headline, and per-tag, macro and weighted F1:
`ner_metrics.evaluate_tags`), in <split>_results.txt / .json and <split>_report.txt (instead of
<split>_conlleval.txt); ner.json holds label_scheme "plain" and the tags as labels.

Predicted tags are written in the scheme of the file they are for (IOB1 for the release), so that conlleval, or
seqeval, scores the file as it scores gold: `conlleval < eval_predictions.txt`.
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.tasks.common import layer_choice as feature_choice
from bert_tf.tasks.ner import data as ner
from bert_tf.tasks.ner import feature_based
from bert_tf.tasks.ner import metrics as ner_metrics
from bert_tf.tasks.ner import model as ner_model
from bert_tf.tasks.ner.folder import MODEL_DIR, SETTINGS_NAME, is_model_dir, load_model, read_settings, save_model
from bert_tf.training import driver, finetuning, run_identity

# Which file each --do_* flag reads, and the prefix of what it writes.
_SPLITS = {"train": "train", "eval": "dev", "test": "test"}
# conlleval's overall scores, headline (entity F1, --metric_for_best's default) first; per-type ones
# (<TYPE>_f1, ...: `metric_names`) depend on the dev file.
METRIC_NAMES = ("f1", "precision", "recall", "accuracy", "macro_f1", "weighted_f1")
# A plain tag set's word-level scores (ner_metrics.evaluate_tags), headline (accuracy) first; per tag <TAG>_f1.
PLAIN_METRIC_NAMES = ("accuracy", "macro_f1", "weighted_f1", "macro_precision", "macro_recall")
TYPE_METRICS = ("f1", "precision", "recall")  # of each entity type: PER_f1, ...


def metric_names(label_scheme: str, types: tuple[str, ...] = ()) -> tuple[str, ...]:
  """The scores a model with labels in `label_scheme` (IOB2, BIOES or ner.PLAIN) reports, headline first
  (--metric_for_best's default and choices): a plain tag set's word-level scores, or the entity scores and then
  each of the entity `types`' f1, precision and recall; then the loss."""
  if label_scheme == ner.PLAIN:
    return (*PLAIN_METRIC_NAMES, finetuning.LOSS)
  return (*METRIC_NAMES, *(f"{kind}_{name}" for kind in types for name in TYPE_METRICS), finetuning.LOSS)


@dataclasses.dataclass
class NerConfig(finetuning.TaskRunConfig):
  """One NER run: the task's flags and the shared fine-tuning ones (`finetuning`)."""

  data_dir: str
  tag_scheme: str = "auto"  # of the data files: auto, IOB1, IOB2, BIOES, plain (not entities: e.g. POS tags)
  label_scheme: str = "IOB2"  # of the model's labels: IOB2 or BIOES (a plain tag set's labels are its tags)
  document_context: bool = False  # the paper's maximal document context, else one sentence a window
  feature_based: str | None = None  # a feature_choice.CHOICES: frozen encoder, BiLSTM tagger (section 5.3)
  cache_features: bool = True  # feature-based: the encoder's layers computed once per window file and reused

  def validate(self) -> None:
    """Checks that need neither devices nor data; raises ValueError naming the flag and the fix."""
    self.finetuning.validate()
    if not (self.do_train or self.do_eval or self.do_predict):
      raise ValueError("nothing to do: pass at least one of --do_train, --do_eval, --do_predict")
    if self.tag_scheme != "auto" and self.tag_scheme not in ner.TAG_SCHEMES:
      raise ValueError(f"--tag_scheme={self.tag_scheme}: choose auto or one of {', '.join(ner.TAG_SCHEMES)}")
    if self.label_scheme not in ner.LABEL_SCHEMES:
      raise ValueError(f"--label_scheme={self.label_scheme}: choose one of {', '.join(ner.LABEL_SCHEMES)}")
    if self.max_seq_length < 3:
      raise ValueError(f"--max_seq_length={self.max_seq_length}: too short to hold [CLS] word [SEP]")
    # auto: either kind's names until the files say which; a per-type score (PER_f1) waits for the dev file
    # (`check_metric_for_best` checks again once the files are read).
    metric = self.finetuning.metric_for_best or ""
    per_type = (metric,) if metric.rpartition("_")[0] and metric.rpartition("_")[2] in TYPE_METRICS else ()
    names = {ner.PLAIN: PLAIN_METRIC_NAMES, "auto": tuple(dict.fromkeys(METRIC_NAMES + PLAIN_METRIC_NAMES))}
    self.finetuning.check_evaluation(self.do_train, self.do_eval,
                                     names.get(self.tag_scheme, METRIC_NAMES) + per_type + (finetuning.LOSS,))
    self.check_length_and_vocab()
    if not self.do_train and not is_model_dir(self.finetuning.init_checkpoint):
      raise ValueError("--do_eval/--do_predict without --do_train need a fine-tuned model: "
                       f"--init_checkpoint=<a run's output_dir>/{MODEL_DIR}")
    if self.export_dir and not self.do_train and not is_model_dir(self.finetuning.init_checkpoint):
      raise ValueError(f"--export_dir needs a trained model: pass --do_train, or --init_checkpoint=<a run's "
                       f"output_dir>/{MODEL_DIR}")
    if self.feature_based is not None:
      feature_choice.check_choice(self.feature_based, self.finetuning.bert_config.num_hidden_layers,
                                  "--feature_based")
      if self.do_train and not self.finetuning.init_checkpoint:
        raise ValueError("--feature_based trains on a pretrained encoder's features and never changes the encoder: "
                         "pass --init_checkpoint=<the pretrained model>")
      if self.export_dir:
        raise ValueError("--export_dir serves fine-tuned taggers only (export.ner_serving); drop --export_dir for "
                         "a --feature_based run")


# -- Inputs ---------------------------------------------------------------------------------------------------


def read_inputs(config: NerConfig, settings: dict | None = None,
                say: Callable[[str], None] = logging.info) -> dict[str, ner.ConllFile]:
  """Reads and checks every file the flags ask for before any work: {"train": ..., "eval": ..., "test": ...}.
  `settings`: the ner.json of the model to evaluate (None: the training file says what the model learns).
  Raises naming the file and line (see `ner.read_conll`), or a tag the model does not know (an entity type, or
  a plain tag), or a file of entity tags for a model of plain tags or the other way round."""
  wanted = [split for split, on in (("train", config.do_train), ("eval", config.do_eval),
                                    ("test", config.do_predict)) if on]
  inputs = {}
  plain = None if settings is None else settings["label_scheme"] == ner.PLAIN
  source = "the training file" if config.do_train else f"the model ({config.finetuning.init_checkpoint})"
  for split in wanted:
    # A plain model's files are read as plain tags: an O among its tags is a tag like any other.
    scheme = ner.PLAIN if plain and config.tag_scheme == "auto" else config.tag_scheme
    conll = ner.read_conll(ner.split_file(config.data_dir, _SPLITS[split]), scheme)
    counts = f"{len(conll.sentences)} sentences, {conll.num_words} words, {conll.num_documents} document(s)"
    if conll.scheme == ner.PLAIN:
      tags = ner.plain_labels([conll])
      say(f"{conll.path}: {counts}, plain tags (not entities): {len(tags)} tags {', '.join(tags[:20])}"
          + (", ..." if len(tags) > 20 else ""))
    else:
      say(f"{conll.path}: {counts}, {conll.scheme} tags, types {', '.join(conll.types) or '(none)'}")
    if conll.irregular:
      say(f"{conll.path}: {conll.irregular} tag(s) that {conll.scheme} does not allow (first: "
          f"{conll.first_irregular}), read as conlleval reads them")
    if plain is None:
      plain = conll.scheme == ner.PLAIN
    elif plain != (conll.scheme == ner.PLAIN):
      raise ValueError(f"{conll.path}: holds {'plain tags (not entities)' if not plain else 'entity tags'}, but "
                       f"{source} has {'plain tags' if plain else 'entity tags'}; give every file the same kind "
                       f"of tags")
    inputs[split] = conll
  if "train" in inputs:
    train = inputs["train"]
    labels = labels_of(train, config.label_scheme)
    if plain and len(labels) < 2:
      raise ValueError(f"{train.path}: holds one tag ({labels[0]}); nothing to learn: give two or more")
    if not plain and not train.types:
      raise ValueError(f"{train.path}: holds no entity tags (every tag is O); nothing to learn")
    types = train.types
  else:
    labels, types = tuple(settings["labels"]), tuple(settings["types"])
  for split in ("eval", "test"):
    if split in inputs and plain:
      ner.check_tags(inputs[split], labels, source)
    elif split in inputs:
      ner.check_types(inputs[split], types, "the training file" if config.do_train else "the model")
  return inputs


def labels_of(train: ner.ConllFile, label_scheme: str) -> tuple[str, ...]:
  """The model's labels for the training file: its tags (sorted) for a plain tag set, else O and its types'
  tags in `label_scheme`."""
  if train.scheme == ner.PLAIN:
    return ner.plain_labels([train])
  return ner.labels_for(train.types, label_scheme)


def check_metric_for_best(config: NerConfig, dev: ner.ConllFile) -> None:
  """--metric_for_best among the scores evaluating on `dev` gives (`metric_names` of the run's label scheme and
  the dev file's entity types)."""
  metric, names = config.finetuning.metric_for_best, metric_names(config.label_scheme, dev.types)
  if config.finetuning.eval_every_steps and metric is not None and metric not in names:
    raise ValueError(f"--metric_for_best={metric}: evaluating on {dev.path} gives {', '.join(names)}")


def _feature_file(config: NerConfig, conll: ner.ConllFile, tokenizer, labels, say):
  """(the cached feature file of `conll`, its windows), labelled with the ids of `labels` (None: unlabelled).
  Every file is labelled (dev and test for their loss): a dev or test file with the training file's content
  reuses its features."""
  label_ids = {label: i for i, label in enumerate(labels)} if labels else None
  target = ner_model.feature_file_path(config.features_dir, conll.path, config.vocab_file, config.do_lower_case,
                                config.max_seq_length, config.document_context, config.label_scheme,
                                config.tag_scheme, list(labels or ()))
  windows = ner.make_windows(conll.sentences, tokenizer, config.max_seq_length, config.document_context,
                             label_ids, config.label_scheme)
  start = time.perf_counter()
  info, reused = ner_model.cached_feature_file(target, lambda: windows)
  if reused:
    say(f"{conll.path}: reusing features {target} ({info.num_windows} windows)")
  else:
    say(f"{conll.path}: wrote features {target}: {info.num_windows} windows of {len(conll.sentences)} sentences "
        f"in {time.perf_counter() - start:.1f} s")
  return info, windows


def _layer_file(config: NerConfig, encoder, windows: ner_model.NerFeatureFile, say) -> feature_based.LayerFile:
  """The cached layers of the window file `windows` computed by the frozen `encoder`."""
  start = time.perf_counter()
  info, reused = feature_based.cached_layer_file(encoder, windows, config.features_dir,
                                       config.finetuning.predict_batch_size, say)
  if reused:
    say(f"{windows.path}: reusing encoder layers {info.path}")
  else:
    say(f"{windows.path}: wrote encoder layers {info.path} ({info.num_windows} windows, {info.num_layers} layers "
        f"of {info.hidden_size}) in {time.perf_counter() - start:.1f} s")
  return info


def _pretrained_encoder(config: NerConfig):
  """A float32 `BertEncoder` with --init_checkpoint's weights: what the cached training layers are computed
  by (the trainer loads the same weights into its model's frozen encoder)."""
  from bert_tf.model.encoder import BertEncoder

  encoder = BertEncoder(config.finetuning.bert_config, dtype="float32")
  finetuning.init_encoder(encoder, config.finetuning.init_checkpoint, config.config_source)
  return encoder


# -- The fine-tuned model -------------------------------------------------------------------------------------


def _settings(config: NerConfig, labels: tuple[str, ...], types: tuple[str, ...], train_scheme: str,
              model=None) -> dict:
  settings = {"labels": list(labels), "label_scheme": config.label_scheme, "types": list(types),
              "train_tag_scheme": train_scheme, "max_seq_length": config.max_seq_length,
              "do_lower_case": config.do_lower_case, "document_context": config.document_context}
  if isinstance(model, feature_based.BertFeatureTagger):
    settings.update(feature_based=model.choice, lstm_units=model.lstm_units)
  return settings


# -- Steps ----------------------------------------------------------------------------------------------------


def predict(model, config: NerConfig, conll: ner.ConllFile, labels: tuple[str, ...], strategy, tokenizer,
            say, kept: dict | None = None) -> tuple[list[list[str]], float]:
  """(each sentence's predicted tags, in the scheme of `conll`'s file; the loss training minimises on its windows:
  `NerTask`'s mean cross-entropy over the labelled words, from the same pass). `kept`: a run's dict for what its
  later calls on `conll` reuse (evaluation while training): the windows and feature file, made or read once, and
  the prediction function of `model` (and its encoder's cached layers), made once."""
  kept = {} if kept is None else kept
  if "features" not in kept:
    kept["features"] = _feature_file(config, conll, tokenizer, labels, say)
  loss_task = ner_model.NerTask(config.finetuning.bert_config, len(labels), None, config.max_seq_length)
  if kept.get("model") is not model:
    kept.update(model=model, outputs=ner_model.ner_predictions(model, config.max_seq_length, loss_task),
                layers=None)
  info, windows = kept["features"]
  batch_size = finetuning.eval_batch_size_for(config.finetuning.predict_batch_size, strategy)
  if isinstance(model, feature_based.BertFeatureTagger) and config.cache_features:
    kept["layers"] = kept["layers"] or _layer_file(config, model.encoder, info, say)
    dataset = feature_based.layer_dataset(kept["layers"], batch_size, is_training=False, pad_to_batch=True)
  else:
    dataset = ner_model.ner_dataset(info.path, batch_size, config.max_seq_length, is_training=False,
                                    dynamic_padding=config.dynamic_padding_on, pad_to_batch=True,
                                    length_multiple=config.length_multiple)
  ids, sums = finetuning.predict(kept["outputs"], dataset, strategy, description=f"predicting {conll.path}",
                                 num_examples=len(windows), with_sums=True)  # [N, T]
  if len(ids) != len(windows):
    raise ValueError(f"{info.path}: {len(ids)} windows predicted, {len(windows)} expected; remove the file to "
                     "have it written again")
  tags = ner.predicted_tags(windows, ids.astype(int), conll.sentences, labels)
  loss = finetuning.mean_loss(loss_task, sums)
  if config.label_scheme == ner.PLAIN:
    return tags, loss
  return [ner.convert_tags(row, conll.scheme) for row in tags], loss


def score(conll: ner.ConllFile, predicted: list[list[str]], label_scheme: str) -> tuple[dict, str]:
  """(the scores of `predicted` against `conll`'s tags, flat as in *_results.json; their report): conlleval's
  for entities, word-level (`ner_metrics.evaluate_tags`) for a plain tag set."""
  gold = [s.tags for s in conll.sentences]
  if label_scheme == ner.PLAIN:
    evaluation = ner_metrics.evaluate_tags(gold, predicted)
    return evaluation.as_dict(), ner_metrics.tag_report(evaluation)
  evaluation = ner_metrics.evaluate(gold, predicted)
  return evaluation.as_dict(), ner_metrics.conlleval_report(evaluation)


def write_predictions(path: str, conll: ner.ConllFile, predicted: list[list[str]]) -> str:
  """`word gold predicted` a line, a blank line after each sentence: conlleval's input."""
  lines = []
  for sentence, tags in zip(conll.sentences, predicted):
    lines += [f"{w} {g} {p}\n" for w, g, p in zip(sentence.words, sentence.tags, tags)] + ["\n"]
  fileio.write_text_atomic(path, "".join(lines))
  return path


def write_results(output_dir: str, prefix: str, values: dict, report: str, report_name: str = "conlleval") -> None:
  """<prefix>_results.txt / .json (`driver.write_results`) and the scores' report, <prefix>_<report_name>.txt."""
  driver.write_results(output_dir, values, f"{prefix}_results")
  fileio.write_text_atomic(os.path.join(output_dir, f"{prefix}_{report_name}.txt"), report)


def _check_trained_mode(config: NerConfig, settings: dict) -> None:
  """--feature_based and --export_dir against the mode the model of --init_checkpoint was trained in."""
  model_dir = config.finetuning.init_checkpoint
  trained = settings.get("feature_based")
  if config.feature_based is not None and config.feature_based != trained:
    raise ValueError(f"--feature_based={config.feature_based}, but {model_dir} is "
                     f"{'feature-based on ' + trained if trained else 'a fine-tuned tagger'}; drop --feature_based "
                     "to evaluate it as it was trained")
  if trained and config.export_dir:
    raise ValueError(f"--export_dir serves fine-tuned taggers only; {model_dir} is feature-based ({trained})")


# -- What a run is --------------------------------------------------------------------------------------------

# What a run writes in its output dir besides run_identity.COMMON_OUTPUTS and ner_model/ (eval_ and test_ files).
_OUTPUTS = tuple(f"{split}_{kind}" for split in ("eval", "test")
                 for kind in ("predictions.txt", "results.txt", "results.json", "conlleval.txt", "report.txt"))


def run_identity_of(config: NerConfig, train: ner.ConllFile) -> run_identity.RunIdentity:
  """What defines a training run (`run_identity`): the training file's content, its tag scheme, the model's
  labels and their scheme, the windows (length, document context), casing, vocabulary, the feature-based choice
  and the fine-tuning settings that shape the weights."""
  settings = {"train_file": run_identity.file_entry(train.path), "tag_scheme": train.scheme,  # as read (auto: found)
              "label_scheme": config.label_scheme, "labels": list(labels_of(train, config.label_scheme)),
              "max_seq_length": config.max_seq_length, "document_context": config.document_context,
              "do_lower_case": config.do_lower_case, "feature_based": config.feature_based,
              "vocab_file": run_identity.file_entry(config.vocab_file),
              **run_identity.finetuning_settings(config.finetuning)}
  return run_identity.RunIdentity("ner", settings, {"num_train_epochs": config.finetuning.num_train_epochs})


# -- The task's hooks on the driver ---------------------------------------------------------------------------


class NerRun(driver.TaskRun):
  """NER's hooks on `driver.run_finetuning` (see the module docstring). `labels`: the model's, set by `training`
  (the training file's) or `load` (the fine-tuned model's)."""

  model_dir = MODEL_DIR
  outputs = _OUTPUTS
  saved_model_noun = "trained model"  # fine-tuned, or (--feature_based) a tagger on a frozen encoder

  def __init__(self, config: NerConfig):
    super().__init__(config)
    self.labels: tuple[str, ...] = ()

  def read_inputs(self, say) -> None:
    """Without --do_train, the fine-tuned model's settings first (its casing and mode against the flags), then
    every CoNLL file (`read_inputs`); the label scheme becomes the data's (a plain tag set) or the model's, and
    --metric_for_best is checked against the dev file's scores."""
    config = self.config
    settings = None if config.do_train else read_settings(config.finetuning.init_checkpoint)
    if settings is not None and settings["do_lower_case"] != config.do_lower_case:
      raise ValueError(f"--do_lower_case={config.do_lower_case}, but {config.finetuning.init_checkpoint} was trained "
                       f"with do_lower_case={settings['do_lower_case']}; pass the same casing")
    if settings is not None:
      _check_trained_mode(config, settings)
    self.inputs = read_inputs(config, settings, say)
    if config.do_train and self.inputs["train"].scheme == ner.PLAIN:
      say(f"{self.inputs['train'].path}: a plain tag set: word-level tagging, each tag a label of its own "
          "(--label_scheme applies to entities only), scored by word-level accuracy and F1")
      self.config = dataclasses.replace(config, label_scheme=ner.PLAIN)
    elif settings is not None and settings["label_scheme"] != config.label_scheme:
      self.config = dataclasses.replace(config, label_scheme=settings["label_scheme"])
    if "eval" in self.inputs:
      check_metric_for_best(self.config, self.inputs["eval"])

  def metric_names(self) -> tuple[str, ...]:
    dev = self.inputs.get("eval")
    return metric_names(self.config.label_scheme, dev.types if dev is not None else ())

  def run_identity(self) -> run_identity.RunIdentity:
    return run_identity_of(self.config, self.inputs["train"])

  def training(self, context) -> driver.Training:
    """Fine-tuning on the training file's windows (with --feature_based, the tagger on the frozen encoder's
    features: its layers cached with --cache_features). An epoch is one pass over the windows (one per sentence,
    more for a sentence longer than a window)."""
    config, ft, conll = self.config, self.ft, self.inputs["train"]
    self.labels = labels = labels_of(conll, config.label_scheme)
    info, _ = _feature_file(config, conll, context.tokenizer, labels, context.say)
    if config.feature_based:
      layers = (_layer_file(config, _pretrained_encoder(config), info, context.say) if config.cache_features
                else None)
      task = feature_based.NerFeatureTask(ft.bert_config, len(labels), config.feature_based, info.path,
                                          config.max_seq_length, layers=layers, seed=ft.seed, dtype=ft.dtype,
                                          dynamic_padding=config.dynamic_padding_on,
                                          length_multiple=config.length_multiple)
    else:
      task = ner_model.NerTask(ft.bert_config, len(labels), info.path, config.max_seq_length, seed=ft.seed,
                               dtype=ft.dtype, dynamic_padding=config.dynamic_padding_on,
                               length_multiple=config.length_multiple)
    head = None if config.feature_based else (SETTINGS_NAME, {"labels": list(labels)})
    context.say(finetuning.epoch_line(info.num_windows, len(conll.sentences), "sentences", ft.train_batch_size))
    return driver.Training(task, info.num_windows, head=head, unit="windows",
                           facts={"train_sentences": len(conll.sentences), "train_windows": info.num_windows})

  def _predict(self, model, split: str, context) -> tuple[list[list[str]], float]:
    """`predict` on the split's file; its features and `model`'s prediction function kept for the run."""
    return predict(model, self.config, self.inputs[split], self.labels, context.strategy, context.tokenizer,
                   context.say, context.kept.setdefault(split, {}))

  def evaluate_while_training(self, model, context) -> dict:
    """The scores on the dev file (conlleval's, or word-level ones) and the loss."""
    predicted, loss = self._predict(model, "eval", context)
    return {**score(self.inputs["eval"], predicted, self.config.label_scheme)[0], finetuning.LOSS: loss}

  def save(self, model, directory: str, context) -> None:
    train = self.inputs["train"]
    save_model(model, _settings(self.config, self.labels, train.types, train.scheme, model), self.config.vocab_file,
               directory)

  def load(self, directory: str, context):
    model, settings = load_model(directory)
    self.labels = tuple(settings["labels"])
    return model

  def evaluate(self, model, model_dir: str, context) -> None:
    self._score_split(model, "eval", context)

  def predict(self, model, model_dir: str, context) -> None:
    self._score_split(model, "test", context)

  def _score_split(self, model, split: str, context) -> None:
    """--do_eval (eval: the dev file) and --do_predict (test: the test file) alike: the split's predictions
    (conlleval's input), its scores and their report (chief), into `context.summary[split]`."""
    config, conll, say = self.config, self.inputs[split], context.say
    start = time.perf_counter()
    predicted, loss = self._predict(model, split, context)
    seconds = time.perf_counter() - start
    scores, report = score(conll, predicted, config.label_scheme)
    values = {**scores, finetuning.LOSS: loss, f"{split}_sentences": len(conll.sentences),
              "predict_seconds": round(seconds, 2), **context.training_facts()}
    if context.chief:
      path = write_predictions(os.path.join(config.output_dir, f"{split}_predictions.txt"), conll, predicted)
      write_results(config.output_dir, split, values, report,
                    "report" if config.label_scheme == ner.PLAIN else "conlleval")
      say(f"{len(predicted)} sentences -> {path}")
    say(f"{conll.path} ({_SPLITS[split]}): loss {loss:.4f}\n" + report.rstrip())
    context.summary[split] = values

  def export(self, model_dir: str, context) -> str:
    from bert_tf.tasks.ner import serving as ner_serving

    return ner_serving.export_ner(model_dir, self.config.export_dir, self.config.model_name or "ner",
                                  max_request_chars=self.config.max_request_chars)


def run_ner(config: NerConfig, strategy: tf.distribute.Strategy | None = None,
            say: Callable[[str], None] = logging.info) -> dict:
  """Does what the --do_* flags ask (see the module docstring); returns a summary. Every input is checked before
  any work: the flags and the vocabulary against the BERT config, then the CoNLL files."""
  return driver.run_finetuning(NerRun(config), strategy, say)
