"""Fine-tuned task models to Hugging Face and back, head and labels included.

Each task's head is one dense layer, and each has a transformers class that computes the same thing. Each task
package supplies its own mapping (a `TaskKind`, from its registered task's `hf_head()`: bert_tf.registry), so
that this module knows no task; `task_kinds()` lists them. Today's:

  task (our folder, settings)           ours (layer, kernel)             transformers class (head tensor)
  classification (classifier/,          classifier [H, K] on the pooled  BertForSequenceClassification
    classifier.json)                    [CLS]; K = 1: regression         (classifier.weight [K, H], with pooler)
  squad (squad_model/, squad.json)      span_output [H, 2] on every      BertForQuestionAnswering
                                        token: column 0 start, 1 end     (qa_outputs.weight [2, H], no pooler)
  ner (ner_model/, ner.json)            tag_output [H, K] on every       BertForTokenClassification
                                        token (read at a word's first    (classifier.weight [K, H], no pooler)
                                        piece, no CRF)
  swag (swag_model/, swag.json)         choice_score [H, 1] on each      BertForMultipleChoice
                                        choice's pooled [CLS]            (classifier.weight [1, H], with pooler)

Dropout before the head is inactive at inference in both, so the logits are the same function of the weights.
Labels: a classifier's labels (ClassifierSpec.labels, in id order) and a tagger's are config.json's `id2label`
(and `label2id`); a regression model is `problem_type` "regression" with one output. transformers' generic names
`LABEL_<i>` (a model saved without label names) read as the labels "<i>", the class ids, which is how GLUE and
integer-labelled files name them here. What has no counterpart is refused in one line: a multi-label classifier
(sigmoids, not a softmax), a regression of several outputs, and NER's feature-based tagger (a BiLSTM).

The settings that transformers' config has no place for (a classifier's pair input and max_seq_length, SQuAD's
window sizes, version and null threshold, the tag scheme) are written beside the weights as `bert_tf.json`,
which transformers ignores; read back when its labels agree with config.json. Without it (a model fine-tuned
with transformers) they are the run scripts' defaults; the casing is tokenizer_config.json's `do_lower_case` (else
read from the vocabulary), a classifier's max_seq_length the tokenizer's model_max_length (at most
max_position_embeddings), and a classifier is a pair model when config.json's `finetuning_task` is a GLUE pair
task. A folder converted from Hugging Face records where from (`converted_from` in its settings).

Fine-tuning checkpoints (<run>/checkpoints/ckpt-N, <run>/best/ckpt-N) convert with the settings and
bert_config.json of the run's model folder (<run>/classifier/, ...), which the run writes when it ends.

`load_ours`, `load_hf` and `SAVERS` wrap bert_tf.model.convert's: an encoder (with or without the pretraining
heads) goes through them unchanged.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Any, Callable

import numpy as np
import tensorflow as tf

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints, convert

HF_SETTINGS_NAME = "bert_tf.json"  # Our settings, beside a Hugging Face folder's weights.


def _no_label_fields(settings: dict[str, Any]) -> dict[str, Any]:
  return {}


def _no_refusal(settings: dict[str, Any]) -> str | None:
  return None


def _one_window(settings: dict[str, Any]) -> list[int]:
  return [1, 2]


@dataclasses.dataclass(frozen=True)
class TaskKind:
  """A task whose fine-tuned model has a transformers class: what its task package supplies."""

  name: str  # written as bert_tf.json's "task" beside a Hugging Face folder
  settings_name: str  # the settings file of its model folder
  model_dir: str  # that folder's name under a run's --output_dir
  script: str  # the script that writes it
  architecture: str  # transformers' class
  layer: str  # the head's attribute on our model (a keras Dense)
  hf_head: str  # the head's name in transformers' state dict
  pooler: bool  # whether transformers' class has the pooler
  # (config, settings) -> the task's float32 model, unbuilt; its settings (its labels) say how many outputs.
  build: Callable[[BertConfig, dict[str, Any]], Any]
  # (config.json's values, the head's outputs, the model's name, config.json's path, the longest sequence, the
  # casing) -> the settings of the model folder (before bert_tf.json's); ValueError for a head ours cannot keep.
  hf_settings: Callable[..., dict[str, Any]]
  outputs: int | None = None  # the head's outputs when fixed (SQuAD's start and end: 2); None: from the labels
  label_fields: Callable[[dict[str, Any]], dict[str, Any]] = _no_label_fields  # config.json's label keys
  refusal: Callable[[dict[str, Any]], str | None] = _no_refusal  # why a folder's model has no transformers class
  input_shape: Callable[[dict[str, Any]], list[int]] = _one_window  # of one int32 input, to build the model


def task_kinds() -> tuple[TaskKind, ...]:
  """The head mapping of every registered task that has one (each task package's `hf_head()`), by task name."""
  from bert_tf import registry

  return tuple(kind for kind in (task.hf_head() for task in registry.tasks()) if kind is not None)


@dataclasses.dataclass
class TaskModel:
  """A fine-tuned model (float32) and its folder's settings (a classifier's: ClassifierSpec's fields)."""

  kind: TaskKind
  model: Any  # keras.Model with `.encoder`; None when `refusal` says why it has no Hugging Face class
  settings: dict[str, Any]
  refusal: str | None = None

  def describe(self) -> str:
    labels = self.settings.get("labels")
    named = f", labels {', '.join(labels)}" if labels else (", regression" if labels == [] else "")
    return f"{self.kind.name} ({self.kind.architecture}{named})"


# -- Building a task's model ----------------------------------------------------------------------------------


def build_model(kind: TaskKind, config: BertConfig, settings: dict[str, Any]):
  """A float32 model of `kind` for `settings` (its labels say how many outputs), its variables made."""
  from bert_tf.model.encoder import INPUT_NAMES

  model = kind.build(config, settings)
  model({name: tf.zeros(kind.input_shape(settings), tf.int32) for name in INPUT_NAMES})
  return model


def folder_kind(directory: str) -> TaskKind | None:
  """The task of a fine-tuned model's folder (by its settings file), None for anything else."""
  if not checkpoints.is_task_model_dir(directory):
    return None
  return next((k for k in task_kinds() if tf.io.gfile.exists(os.path.join(directory, k.settings_name))), None)


# -- Ours ------------------------------------------------------------------------------------------------------


def _checkpoint_kind(prefix: str) -> TaskKind | None:
  """The task whose head a fine-tuning checkpoint or task model (`model/<head layer>`) holds, else None."""
  if checkpoints.find_encoder_root(prefix) is None:
    return None
  kinds = task_kinds()
  found = checkpoints.has_objects(prefix, [f"model/{kind.layer}" for kind in kinds])
  return next((kind for kind, has in zip(kinds, found) if has), None)


def _run_folder(prefix: str, kind: TaskKind) -> str:
  """The model folder (classifier/, ...) of the run whose fine-tuning checkpoint `prefix` is
  (<run>/checkpoints/ckpt-N, <run>/best/ckpt-N; each run of a learning-rate search has its own)."""
  run = os.path.dirname(os.path.dirname(prefix))
  folder = os.path.join(run, kind.model_dir)
  if folder_kind(folder) == kind:
    return folder
  raise FileNotFoundError(
      f"{prefix}: a {kind.name} fine-tuning checkpoint, but its run ({run}) has no {kind.model_dir}/ yet, whose "
      f"{kind.settings_name} and bert_config.json say what the head means; run {kind.script} again with the same "
      "flags to finish the run (it resumes), then convert the checkpoint")


def load_ours(path: str, dtype=None, step: int | None = None) -> convert.Converted:
  """`convert.load_ours`, and for a fine-tuned model's folder (classifier/, squad_model/, ner_model/, swag_model/)
  or a fine-tuning checkpoint (checkpoints/ckpt-N or best/ckpt-N of a run, or that run's --output_dir: its newest
  training checkpoint, or --step's), the whole task model (`Converted.task`)."""
  prefix = convert.our_prefix(path, step)
  kind = _checkpoint_kind(prefix)
  if kind is None:
    return convert.load_ours(path, dtype=dtype, step=step)
  directory = os.path.dirname(prefix)
  in_folder = os.path.basename(prefix) == checkpoints.TASK_MODEL_PREFIX and folder_kind(directory) == kind
  folder = directory if in_folder else _run_folder(prefix, kind)
  settings = checkpoints.read_settings_file(os.path.join(folder, kind.settings_name))
  vocab_file = convert._vocab_beside(folder)  # pylint: disable=protected-access
  config_path = os.path.join(folder, checkpoints.CONFIG_NAME)
  config = BertConfig.from_json_file(config_path)
  refusal = kind.refusal(settings)
  if refusal:  # Its encoder still converts to ours or tf1.
    from bert_tf.model.encoder import BertEncoder

    encoder = BertEncoder(config, dtype="float32")
    checkpoints.restore_encoder(encoder, prefix, config_path)
    return convert.Converted(config, encoder, vocab_file=vocab_file, task=TaskModel(kind, None, settings, refusal))
  model = build_model(kind, config, settings)
  written_by = f"{kind.script} (<output_dir>/{kind.model_dir}/)"
  checkpoints.restore_task_model(model, folder, written_by)
  if not in_folder:
    problem = checkpoints.object_checkpoint_mismatch(model.encoder, prefix, root=checkpoints.ENCODER_ROOTS[1])
    if problem:
      raise ValueError(checkpoints.mismatch_message(prefix, problem, config_path))
    try:
      tf.train.Checkpoint(model=model).read(prefix).expect_partial().assert_existing_objects_matched()
    except (AssertionError, ValueError) as e:
      raise ValueError(f"{prefix}: its head does not fit {folder}'s {kind.settings_name} "
                       f"({str(e).strip().splitlines()[0][:200]}); convert a checkpoint of the run that wrote "
                       f"{folder}") from None
  return convert.Converted(model.config, model.encoder, vocab_file=vocab_file, task=TaskModel(kind, model, settings))


def save_ours(converted: convert.Converted, output_dir: str) -> str:
  """`convert.save_ours`; a task model as its task's model folder (what `<output_dir>/classifier/` holds, and
  export and --init_checkpoint take). Returns the checkpoint prefix."""
  task = converted.task
  if task is None or task.model is None:
    if task is not None:
      logging.warning("%s: writing the encoder alone", task.refusal)
    return convert.save_ours(converted, output_dir)
  if not converted.vocab_file:
    raise ValueError(f"a {task.kind.name} model's folder needs its vocab.txt, and the source has none; pass "
                     "--vocab_file")
  text = json.dumps(task.settings, indent=2) + "\n"
  checkpoints.save_task_model(task.model, task.kind.settings_name, text, converted.vocab_file, output_dir)
  return os.path.join(output_dir, checkpoints.TASK_MODEL_PREFIX)


def save_tf1(converted: convert.Converted, output_dir: str) -> str:
  """`convert.save_tf1`: the encoder (google-research's checkpoints have no head of ours), said for a task model."""
  if converted.task is not None:
    logging.warning("tf1 holds the encoder: the %s head is not written (convert to hf or ours to keep it)",
                    converted.task.kind.name)
  return convert.save_tf1(converted, output_dir)


# -- Hugging Face ------------------------------------------------------------------------------------------------


def _read_json(path: str) -> dict | None:
  """A JSON object file, or None when absent or not an object."""
  if not tf.io.gfile.exists(path):
    return None
  with tf.io.gfile.GFile(path, "rb") as f:
    try:
      values = json.loads(f.read().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError):
      return None
  return values if isinstance(values, dict) else None


def hf_task_kind(directory: str) -> TaskKind | None:
  """The task of a Hugging Face folder whose config.json names one of `task_kinds()`' classes (in `architectures`);
  None for anything else (an encoder, another class, a folder of ours, not a folder)."""
  found = checkpoints.checkpoint_kind(directory) if directory else None
  if found is None or found.kind != checkpoints.HF_FOLDER:
    return None
  values = _read_json(os.path.join(directory, "config.json")) or {}
  architectures = values.get("architectures") or []
  return next((kind for kind in task_kinds() if kind.architecture in architectures), None)


def labels_of(values: dict, outputs: int, source: str) -> list[str]:
  """The label of each of a head's `outputs` from config.json's id2label; `LABEL_<i>` (transformers' name for an
  unnamed id) and a missing id2label give "<i>"."""
  id2label = values.get("id2label") or {}
  try:
    names = {int(i): str(name) for i, name in id2label.items()}
  except (AttributeError, TypeError, ValueError):
    raise ValueError(f"{source}: id2label must map ids to names, got {id2label!r}") from None
  if names and sorted(names) != list(range(outputs)):
    raise ValueError(f"{source}: id2label names the ids {sorted(names)} but the head has {outputs} outputs")
  labels = [names.get(i, f"LABEL_{i}") for i in range(outputs)]
  if all(label == f"LABEL_{i}" for i, label in enumerate(labels)):
    labels = [str(i) for i in range(outputs)]
  if len(set(labels)) != len(labels):
    raise ValueError(f"{source}: id2label names two ids alike ({', '.join(labels)})")
  return labels


def _hf_settings(kind: TaskKind, values: dict, directory: str, outputs: int, name: str,
                 config: BertConfig, vocab_file: str | None) -> dict[str, Any]:
  """The settings file of a task model converted from the Hugging Face folder `directory` (see the module
  docstring); ValueError, one line, for a head whose meaning ours cannot keep."""
  source = os.path.join(directory, "config.json")
  tokenizer = _read_json(os.path.join(directory, "tokenizer_config.json")) or {}
  do_lower_case = tokenizer.get("do_lower_case")
  if not isinstance(do_lower_case, bool):
    do_lower_case = not convert.vocab_is_cased(vocab_file) if vocab_file else True
  longest = config.max_position_embeddings
  if isinstance(tokenizer.get("model_max_length"), int) and 2 < tokenizer["model_max_length"] < longest:
    longest = tokenizer["model_max_length"]
  if kind.outputs and outputs != kind.outputs:
    raise ValueError(f"{directory}: a {kind.architecture} head has {kind.outputs} output(s), this one {outputs}")
  settings = kind.hf_settings(values, outputs, name, source, longest, do_lower_case)
  ours = _read_json(os.path.join(directory, HF_SETTINGS_NAME))
  if ours and ours.get("task") == kind.name and isinstance(ours.get("settings"), dict):
    if ours["settings"].get("labels") == settings.get("labels"):
      settings = dict(ours["settings"])
    else:
      logging.warning("%s: its labels differ from config.json's id2label (the model was changed after it was "
                      "written); using config.json's", os.path.join(directory, HF_SETTINGS_NAME))
  return {**settings, checkpoints.CONVERTED_FROM: name}


def load_hf(directory: str, dtype=None, name: str | None = None) -> convert.Converted:
  """`convert.load_hf`, and for a folder of BertForSequenceClassification, BertForQuestionAnswering,
  BertForTokenClassification or BertForMultipleChoice the whole task model (`Converted.task`), its settings
  derived as the module docstring says. `name` (default: `directory`) is the model's name: `hf:<id>`."""
  kind = hf_task_kind(directory)
  if kind is None:
    return convert.load_hf(directory, dtype=dtype)
  name = name or directory.rstrip("/")
  config_path = os.path.join(directory, "config.json")
  values = _read_json(config_path)
  if values is None:  # convert.load_hf says what is wrong with it
    return convert.load_hf(directory, dtype=dtype)
  config = convert.hf_config_to_bert_config(values, source=config_path)
  config.extras = {k: v for k, v in config.extras.items() if k not in convert.HF_SOURCE_KEYS}
  state = dict(convert.read_hf_state(directory))
  head = {leaf: state.pop(f"{kind.hf_head}.{leaf}", None) for leaf in ("weight", "bias")}
  missing = [f"{kind.hf_head}.{leaf}" for leaf, value in head.items() if value is None]
  if missing:
    raise convert.MissingTensorsError(f"{directory}: config.json names {kind.architecture}, but its weights have no "
                                      f"{' or '.join(missing)}")
  vocab_file = convert.hf_vocab(directory)
  outputs = int(head["weight"].shape[0])
  settings = _hf_settings(kind, values, directory, outputs, name, config, vocab_file)
  model = build_model(kind, config, settings)
  weights, unused = convert.hf_to_tf1_names(state)
  links = convert.tf1_links(model.encoder)["encoder"]
  if not kind.pooler:  # transformers' class has none: ours keeps its initial pooler, which this task never reads
    for link in links:
      if link.names[0].startswith("bert/pooler/") and link.names[0] not in weights:
        weights[link.names[0]] = link.to_tf1()[link.names[0]]
  unused += convert.set_tf1_weights({"encoder": links}, weights, source=directory, config_source=config_path)
  layer = getattr(model, kind.layer)
  kernel = np.asarray(head["weight"]).T  # torch's [K, H] -> keras' [H, K]
  bias = np.asarray(head["bias"])
  if bias.shape != (outputs,) or kernel.shape != tuple(layer.kernel.shape):
    raise ValueError(f"{directory}: {kind.hf_head}.weight {list(head['weight'].shape)} and .bias {list(bias.shape)} "
                     f"do not make a head on hidden_size {config.hidden_size}")
  layer.kernel.assign(kernel.astype(np.float32))
  layer.bias.assign(bias.astype(np.float32))
  return convert.Converted(config, model.encoder, vocab_file=vocab_file, unused=sorted(unused),
                           task=TaskModel(kind, model, settings))


def label_fields(labels: list[str]) -> dict[str, Any]:
  """config.json's id2label and label2id for a head's `labels`, in id order."""
  return {"id2label": {str(i): label for i, label in enumerate(labels)},
          "label2id": {label: i for i, label in enumerate(labels)}}


def save_hf(converted: convert.Converted, output_dir: str) -> str:
  """`convert.save_hf`; a task model as its transformers class with its head and labels (config.json written
  fresh: our config, the class, the labels), and its settings as bert_tf.json. Returns model.safetensors' path."""
  task = converted.task
  if task is None:
    return convert.save_hf(converted, output_dir)
  if task.refusal:
    raise ValueError(task.refusal)
  kind, model = task.kind, task.model
  values = convert.hf_config(converted.config, architecture=kind.architecture)
  values.update(kind.label_fields(task.settings))
  weights = convert.get_tf1_weights({"encoder": convert.tf1_links(model.encoder)["encoder"]})
  if not kind.pooler:  # transformers' class has none (it would report the tensors as unexpected)
    weights = {name: value for name, value in weights.items() if not name.startswith("bert/pooler/")}
  state = convert.tf1_to_hf_names(weights, bert_prefix="bert.")
  layer = getattr(model, kind.layer)
  state[f"{kind.hf_head}.weight"] = np.ascontiguousarray(np.asarray(layer.kernel.numpy()).T)  # [K, H]
  state[f"{kind.hf_head}.bias"] = np.asarray(layer.bias.numpy())
  settings = {k: v for k, v in task.settings.items() if k != checkpoints.CONVERTED_FROM}
  tf.io.gfile.makedirs(output_dir)
  fileio.write_text_atomic(os.path.join(output_dir, HF_SETTINGS_NAME),
                           json.dumps({"task": kind.name, "settings": settings}, indent=2) + "\n")
  return convert.write_hf_folder(converted, values, state, output_dir,
                                 do_lower_case=task.settings.get("do_lower_case"))


LOADERS: dict[str, Callable[..., convert.Converted]] = {**convert.LOADERS, "hf": load_hf, "ours": load_ours}
SAVERS: dict[str, Callable[[convert.Converted, str], str]] = {"tf1": save_tf1, "ours": save_ours, "hf": save_hf}
