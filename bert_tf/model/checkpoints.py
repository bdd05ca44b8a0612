"""Our checkpoints on disk: what a checkpoint given as --init_checkpoint is (`checkpoint_kind`), the encoder
hand-off from pretraining to fine-tuning (the encoder alone, without the pretraining heads), reading an encoder
from any of our forms, and a fine-tuned task model's folder.

Written at the end of pretraining (or by `export_encoder`) under `<output_dir>/`:

  bert_config.json                        the encoder's BertConfig (google-research's format)
  encoder_checkpoint/encoder.{index,data-*}   tf.train.Checkpoint(encoder=BertEncoder), float32 weights
  encoder_savedmodel/                     a SavedModel: signature `serving_default` takes int32 [B, T]
                                          input_ids, input_mask, segment_ids and returns float32
                                          sequence_output [B, T, H] and pooled_output [B, H]; TF
                                          Serving and `saved_model_cli run` load it as it is. Its
                                          variables/ hold `encoder_variables/<i>`, the encoder's
                                          variables in order

The checkpoint forms (and a training checkpoint, whose root also holds the encoder under `encoder`) are
TensorFlow object-graph checkpoints with the encoder at `encoder`; the SavedModel's variables are read by
position. One loader reads them all. `load_encoder` (and
`restore_encoder`, for a model that already has its encoder) is what fine-tuning calls with --init_checkpoint.

Paths here are local (or gs://); a released name (hf:<id>, keras_hub:<preset>) is first turned into its converted
folder by bert_tf.model.released.local_path, which sits above this module (it converts with bert_tf.model.convert).
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.errors import first_line

# Released weights by name (bert_tf.model.released downloads and converts them): hf:<model id>, keras_hub:<preset>.
HF = "hf:"
KERAS_HUB = "keras_hub:"
ENCODER_CHECKPOINT_DIR = "encoder_checkpoint"
TRAINING_CHECKPOINTS_DIR = "checkpoints"  # a training run's checkpoints/ckpt-<step> under its --output_dir
TF1_CHECKPOINT_NAME = "bert_model.ckpt"  # google-research's released checkpoints' prefix
ENCODER_SAVEDMODEL_DIR = "encoder_savedmodel"
CONFIG_NAME = "bert_config.json"
_PREFIX = "encoder"


class _EncoderExport(tf.Module):
  """The SavedModel's root: the encoder's variables and one float32 serving signature."""

  def __init__(self, encoder):
    super().__init__()
    # The tf.Variables themselves, in `encoder.variables` order, not the Keras model: saved through Keras 3's
    # variable wrappers, the checkpoint holds copies that a Session-based loader (TF Serving, saved_model_cli
    # run) restores while the graph reads variables it never initialises (keras-team/keras#20095; see
    # bert_tf/export/serving.py). `restore_encoder` maps them back by position.
    object.__setattr__(self, "_encoder", encoder)
    self.encoder_variables = [v.value for v in encoder.variables]

  @tf.function(input_signature=[{name: tf.TensorSpec([None, None], tf.int32, name=name)
                                 for name in ("input_ids", "input_mask", "segment_ids")}])
  def serve(self, inputs):
    outputs = self._encoder(inputs, training=False)
    return {"sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
            "pooled_output": tf.cast(outputs["pooled_output"], tf.float32)}


def _float32_copy(encoder, config: BertConfig):
  """A float32 encoder with `encoder`'s weights, made outside any strategy scope: what we export, whatever
  the policy and strategy of training were."""
  from bert_tf.model.encoder import BertEncoder

  copy = BertEncoder(config, dtype="float32")
  copy.set_weights(encoder.get_weights())
  return copy


def export_encoder(encoder, config: BertConfig, output_dir: str) -> dict[str, str]:
  """Writes bert_config.json, encoder_checkpoint/ and encoder_savedmodel/ under `output_dir`; returns paths."""
  copy = _float32_copy(encoder, config)
  tf.io.gfile.makedirs(output_dir)
  config.to_json_file(os.path.join(output_dir, CONFIG_NAME))
  ckpt_dir = os.path.join(output_dir, ENCODER_CHECKPOINT_DIR)
  fileio.replace_dir(lambda d: tf.train.Checkpoint(encoder=copy).write(os.path.join(d, _PREFIX)), ckpt_dir)
  saved_dir = os.path.join(output_dir, ENCODER_SAVEDMODEL_DIR)
  module = _EncoderExport(copy)
  fileio.replace_dir(lambda d: tf.saved_model.save(module, d, signatures={"serving_default": module.serve}), saved_dir)
  logging.info("wrote the encoder to %s and %s", ckpt_dir, saved_dir)
  return {"config": os.path.join(output_dir, CONFIG_NAME), "checkpoint": os.path.join(ckpt_dir, _PREFIX),
          "savedmodel": saved_dir}


# What a checkpoint given as --init_checkpoint (or convert_checkpoint.py's --input) is: `checkpoint_kind`.
RELEASED = "released"  # hf:<model id> / keras_hub:<preset>: bert_tf.model.released downloads and converts it
HF_FOLDER = "hf"  # a Hugging Face folder (config.json, model.safetensors; an encoder or a model with a task head)
TF1 = "tf1"  # a google-research checkpoint (TF1 variable names: bert/...): converted when read
TASK_MODEL = "task_model"  # a fine-tuned model's folder (classifier/, squad_model/, ...): `save_task_model`'s
RUN_DIR = "run_dir"  # a training --output_dir (or its checkpoints/) whose newest training checkpoint is read
OURS = "ours"  # any other object checkpoint of ours: the hand-off, a converted `ours` folder, a prefix


@dataclasses.dataclass(frozen=True)
class CheckpointKind:
  """What `checkpoint_kind` found: `kind` (one of RELEASED, HF_FOLDER, TF1, TASK_MODEL, RUN_DIR, OURS) and the
  checkpoint prefix to read (None for a released name and a Hugging Face folder, which hold none)."""

  kind: str
  prefix: str | None = None


def checkpoint_kind(path: str) -> CheckpointKind | None:
  """What the checkpoint at `path` is, in the one place that says it (every reader of --init_checkpoint asks
  here); None when `path` holds no checkpoint (`resolve_checkpoint` says what is accepted). Reads file names and
  the checkpoint it finds (once: `check_readable`, ValueError when it is damaged), nothing is downloaded."""
  if is_released(path):
    return CheckpointKind(RELEASED)
  path = path.rstrip("/") or path
  if tf.io.gfile.isdir(path) and tf.io.gfile.exists(os.path.join(path, "config.json")) and \
      not tf.io.gfile.exists(os.path.join(path, CONFIG_NAME)):
    return CheckpointKind(HF_FOLDER)
  try:
    prefix = resolve_checkpoint(path)
  except FileNotFoundError:
    # A google-research model folder: bert_model.ckpt.* without a `checkpoint` state file.
    prefix = os.path.join(path, TF1_CHECKPOINT_NAME)
    if not (tf.io.gfile.isdir(path) and tf.io.gfile.exists(prefix + ".index")):
      return None
  check_readable(prefix)
  if any(name.startswith("bert/") for name, _ in tf.train.list_variables(prefix)):
    return CheckpointKind(TF1, prefix)
  if is_task_model_dir(path):
    return CheckpointKind(TASK_MODEL, prefix)
  if tf.io.gfile.isdir(path) and os.path.basename(prefix).startswith("ckpt-") and \
      os.path.dirname(prefix) in (path, os.path.join(path, TRAINING_CHECKPOINTS_DIR)):
    return CheckpointKind(RUN_DIR, prefix)
  return CheckpointKind(OURS, prefix)


# -- Damaged checkpoints ----------------------------------------------------------------------------------------
# A copy cut short or a flipped bit: what reading the index alone cannot see. `damage` reads the checkpoint whole,
# which costs less than the restore that follows it (that restore then reads from the page cache).
DAMAGED_SUFFIX = ".damaged"  # a training run sets a damaged checkpoint's files aside under <file>.damaged
_READABLE: set[tuple] = set()  # (prefix, its files' names, sizes, mtimes) read whole in this process


def checkpoint_files(prefix: str) -> list[str]:
  """The .index and .data-* files of the checkpoint at `prefix` (not the `.damaged` copies beside it)."""
  pattern = re.compile(re.escape(prefix) + r"\.(index|data-\d+-of-\d+)")
  return sorted(p for p in tf.io.gfile.glob(prefix + ".*") if pattern.fullmatch(p))


def damage(prefix: str) -> tuple[str, str] | None:
  """Why the checkpoint at `prefix` cannot be read, as (the file at fault, the reason), or None when it can.

  Opens its index and reads every tensor: a corrupt index fails on opening ("block checksum mismatch"), a truncated
  or corrupt data file only when a tensor in it is read ("Read less bytes than requested", which names no file;
  "Checksum does not match")."""
  try:
    dtypes = tf.train.load_checkpoint(prefix).get_variable_to_dtype_map()
  except (tf.errors.OpError, RuntimeError, IndexError) as e:
    return _fault(prefix, e, opening=True)
  try:
    with tf.device("/cpu:0"):
      for name, dtype in dtypes.items():
        # One tensor at a time, by the op restoring uses: the reader's get_tensor cannot return a variant (the
        # saved position of an input iterator).
        tf.raw_ops.RestoreV2(prefix=prefix, tensor_names=[name], shape_and_slices=[""], dtypes=[dtype])
  except (tf.errors.OpError, RuntimeError, IndexError) as e:
    return _fault(prefix, e, opening=False)
  return None


def _fault(prefix: str, error: BaseException, opening: bool) -> tuple[str, str]:
  """(The file at fault, the reason) for `error`, raised opening the checkpoint at `prefix` or reading a tensor of it:
  TensorFlow's messages name the file, the shard, or (a truncated data file) nothing."""
  text = re.sub(r" \[Op:\w+\]$", "", first_line(error))
  data = [p for p in checkpoint_files(prefix) if not p.endswith(".index")]
  named = re.search(r"(\S+\.data-\d+-of-\d+)\b", text)
  shard = re.search(r"\bshard (\d+)\b", text)
  if named:
    path = named.group(1)
  elif shard and int(shard.group(1)) < len(data):
    path = data[int(shard.group(1))]
  elif opening:
    path = prefix + ".index"
  else:
    path = data[0] if len(data) == 1 else prefix + ".data-*"
  if "Read less bytes than requested" in text or text.startswith("EOF reached"):  # local, gs://
    reason = f"truncated: {text}"
  elif "No such file" in text:
    reason = "missing"
  else:  # Without the file name and "Perhaps ... produced by a newer version of TensorFlow" around the cause.
    reason = re.sub(r"^(Unable to read file .*\): |TensorBundle at .*?: )", "", text)
  return path, reason


def check_readable(prefix: str) -> None:
  """Raises ValueError, one line naming the file, the reason and the fix, when the checkpoint at `prefix` is damaged
  (`damage`). A checkpoint read whole once in this process is not read again while its files stay the same."""
  files = checkpoint_files(prefix)
  key = (prefix, tuple((p, s.length, s.mtime_nsec) for p in files for s in [tf.io.gfile.stat(p)]))
  if key in _READABLE:
    return
  found = damage(prefix)
  if found is None:
    _READABLE.add(key)
    return
  path, reason = found
  folder = os.path.dirname(prefix)
  if re.fullmatch(r"ckpt-\d+", os.path.basename(prefix)) and os.path.basename(folder) == TRAINING_CHECKPOINTS_DIR:
    fix = (f"rerun the training command of {os.path.dirname(folder) or '.'}, which sets the damaged checkpoint aside "
           "and resumes from the one before, or read an older ckpt-<step> beside it")
  else:
    fix = "copy it again, or write it again with the command that made it, or give another checkpoint"
  raise ValueError(f"{path}: damaged ({reason}); {fix}")


def is_released(path: str | None) -> bool:
  """Whether `path` names released weights (hf:<model id>, keras_hub:<preset>) rather than a file or folder."""
  return bool(path) and path.startswith((HF, KERAS_HUB))


def resolve_checkpoint(path: str) -> str:
  """Any accepted form of --init_checkpoint -> the checkpoint prefix to read.

  Accepts: a checkpoint prefix (`.../ckpt-1000`, `.../encoder_checkpoint/encoder`); an encoder_checkpoint/
  or encoder_savedmodel/ directory; a pretraining --output_dir (its encoder_checkpoint/, else the newest
  training checkpoint); an output directory of scripts/convert_checkpoint.py (`ours`, its encoder/); a
  fine-tuned task model's folder (classifier/, squad_model/, ...: its `model`); a fine-tuning --output_dir
  (its newest training checkpoint); a directory with a `checkpoint` state file. A released model by name
  (`hf:<model id>`, `keras_hub:<preset>`) is its folder from bert_tf.model.released.local_path.
  """
  path = path.rstrip("/") or path
  if tf.io.gfile.exists(path + ".index"):
    return path
  if tf.io.gfile.isdir(path):
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
      return os.path.join(path, "variables", "variables")
    for prefix in (_PREFIX, TASK_MODEL_PREFIX):  # encoder_checkpoint/encoder; a task model's folder's `model`
      if tf.io.gfile.exists(os.path.join(path, prefix + ".index")):
        return os.path.join(path, prefix)
    # encoder_checkpoint/: our hand-off; encoder/: scripts/convert_checkpoint.py's `ours` layout;
    # checkpoints/: a pretraining --output_dir that has not finished.
    for sub in (ENCODER_CHECKPOINT_DIR, "encoder", "checkpoints"):
      if tf.io.gfile.isdir(os.path.join(path, sub)):
        return resolve_checkpoint(os.path.join(path, sub))
    latest = tf.train.latest_checkpoint(path)
    if latest:
      return latest
  raise FileNotFoundError(
      f"--init_checkpoint={path}: not a checkpoint prefix (no {path}.index) nor a directory holding "
      f"{ENCODER_CHECKPOINT_DIR}/, {ENCODER_SAVEDMODEL_DIR}/ (saved_model.pb), a fine-tuned model "
      f"({TASK_MODEL_PREFIX}.index) or a `checkpoint` state file")


def read_paths(path: str) -> list[str]:
  """What reading the checkpoint at `path` (any form `resolve_checkpoint` takes) reads, as
  `fileio.check_not_input` takes it: `path` itself and the files of the prefix it resolves to, so that an output
  folder that holds that prefix (a run folder's checkpoints/, where its newest ckpt-N lies) counts as holding the
  input. A released name, or a path that is no checkpoint (yet), is itself alone."""
  if is_released(path):
    return [path]
  try:
    prefix = resolve_checkpoint(path)
  except (FileNotFoundError, tf.errors.OpError):
    return [path]
  return [path, f"{prefix}.*"]


def check_checkpoint_path(path: str, flag: str = "--init_checkpoint") -> None:
  """What every script checks first of its --init_checkpoint: that `path` is something to read weights from.

  Raises FileNotFoundError when neither `path` nor `path`.index (a checkpoint prefix) exists, and ValueError for
  an empty folder or a file that is not a checkpoint prefix (its .index or .data-* file, a model.safetensors:
  the message names what to give instead); one line, naming `flag`=`path` first. A released name (hf:,
  keras_hub:) is left to bert_tf.model.released; what a non-empty folder holds, to the loaders.
  """
  if is_released(path):
    return
  path = path.rstrip("/") or path
  if tf.io.gfile.isdir(path):
    if not tf.io.gfile.listdir(path):
      raise ValueError(f"{flag}={path} is an empty folder; give the pretrained model's folder (a pretraining "
                       "--output_dir, a converted or Hugging Face model, a fine-tuned model) or a checkpoint prefix")
    return
  if tf.io.gfile.exists(path + ".index"):
    return
  if not tf.io.gfile.exists(path):
    raise FileNotFoundError(f"{flag}={path} does not exist (nor {os.path.basename(path)}.index, a checkpoint "
                            "prefix); check the path")
  import re

  part = re.fullmatch(r"(.+)\.(index|meta|data-\d+-of-\d+)", path)
  folder = os.path.dirname(path)
  if part and tf.io.gfile.exists(part.group(1) + ".index"):
    fix = f"give the checkpoint's prefix, {flag}={part.group(1)}"
  elif folder and any(tf.io.gfile.exists(os.path.join(folder, name)) for name in (CONFIG_NAME, "config.json")):
    fix = f"give the model's folder, {flag}={folder}"
  else:
    fix = "give a checkpoint prefix (the name before .index) or the model's folder"
  raise ValueError(f"{flag}={path} is a file that is not a checkpoint; {fix}")


def find_vocab(path: str) -> str | None:
  """The vocab.txt that comes with the model at `path` (any form --init_checkpoint takes), or None: in the folder
  `path` names (a converted or Hugging Face model, `hf:<id>`, a fine-tuned model's classifier/ or squad_model/,
  a google-research folder, a pretraining --output_dir that has one), else beside the bert_config.json that
  `find_config` reads for it (a checkpoint prefix's folder, a converted model's encoder/ or a pretraining run's
  encoder_checkpoint/ one level down). A released name: give released.local_path's folder."""
  path = path.rstrip("/") or path
  folders = [path] if tf.io.gfile.isdir(path) else []
  config = find_config(path)
  if config:
    folders.append(os.path.dirname(config))
  for folder in folders:
    vocab = os.path.join(folder, "vocab.txt")
    if tf.io.gfile.exists(vocab) and not tf.io.gfile.isdir(vocab):
      return vocab
  return None


def restore_encoder(encoder, path: str, config_source: str | None = None) -> str:
  """Loads encoder weights from any form `resolve_checkpoint` accepts into `encoder`; returns the prefix read.

  Every encoder variable must be found with its shape, and the checkpoint must have as many layers as the
  encoder (heads and optimizer state in the file are ignored); else ValueError, one line naming the variable
  and both shapes, compared before anything is read. `config_source` names the encoder's bert_config.json in
  that message (default: the one beside `path` when it is the encoder's config).
  """
  prefix = resolve_checkpoint(path)
  shapes = dict(tf.train.list_variables(prefix))
  if any(name.startswith(_SAVEDMODEL_VARIABLES + "/") for name in shapes):
    return _restore_by_position(encoder, prefix, shapes, config_source or describe_config(encoder.config, path),
                                path)
  root = find_encoder_root(prefix)
  if root is None:
    hint = (" It looks like a google-research (TF1) checkpoint; convert it first with "
            "scripts/convert_checkpoint.py --input_format=tf1 --output_format=ours."
            if any(n.startswith("bert/") for n in shapes) else "")
    raise ValueError(f"{prefix}: holds no BERT encoder (no `encoder` object, at the root or in `model`).{hint}")
  problem = object_checkpoint_mismatch(encoder, prefix, root=root)
  if problem:
    raise ValueError(mismatch_message(prefix, problem, config_source or describe_config(encoder.config, path),
                                      path))
  try:
    status = checkpoint_of(encoder, root).read(prefix)
    status.expect_partial()
    status.assert_existing_objects_matched()
  except (AssertionError, ValueError) as e:  # Not expected after the comparison above; TF's first line only.
    first = str(e).strip().splitlines()[0][:300] if str(e).strip() else type(e).__name__
    raise ValueError(f"{prefix}: does not match this encoder: {first}") from None
  return prefix


# Where an object checkpoint keeps the encoder: at the root (the hand-off, `ours`, pretraining checkpoints, which
# also hold the heads at the root), or inside the task model (a fine-tuned model's folder, fine-tuning checkpoints).
ENCODER_ROOTS = (_PREFIX, "model/" + _PREFIX)


def _object_graph(prefix: str):
  from tensorflow.core.protobuf import trackable_object_graph_pb2

  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(tf.train.load_checkpoint(prefix).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  return graph


def _node_at(graph, root: str) -> int | None:
  """The node id of the object at path `root` ("model/encoder") of an object graph, or None."""
  node = 0
  for name in root.split("/"):
    node = next((c.node_id for c in graph.nodes[node].children if c.local_name == name), None)
    if node is None:
      return None
  return node


def find_encoder_root(prefix: str) -> str | None:
  """Which of ENCODER_ROOTS holds the encoder in the object checkpoint at `prefix`; None for another kind of
  checkpoint (a name-based TF1 one, or one without an encoder)."""
  if "_CHECKPOINTABLE_OBJECT_GRAPH" not in tf.train.load_checkpoint(prefix).get_variable_to_shape_map():
    return None
  graph = _object_graph(prefix)
  return next((root for root in ENCODER_ROOTS if _node_at(graph, root) is not None), None)


def has_objects(prefix: str, paths) -> list[bool]:
  """Whether the object checkpoint at `prefix` holds an object at each of `paths` ("model/classifier")."""
  graph = _object_graph(prefix)
  return [_node_at(graph, path) is not None for path in paths]


def checkpoint_of(encoder, root: str = _PREFIX, **objects) -> tf.train.Checkpoint:
  """A tf.train.Checkpoint that reads `encoder` from `root` (one of ENCODER_ROOTS), and `objects` at the root."""
  if root == _PREFIX:
    return tf.train.Checkpoint(encoder=encoder, **objects)
  return tf.train.Checkpoint(model=tf.train.Checkpoint(encoder=encoder), **objects)


_SAVEDMODEL_VARIABLES = "encoder_variables"
_VALUE_SUFFIX = "/.ATTRIBUTES/VARIABLE_VALUE"


def _shape(values) -> str:
  return "[" + ", ".join(str(int(v)) for v in values) + "]"


def _layer_count(names, pattern: str) -> int:
  """1 + the largest layer index among `names` matching `pattern` (a regex with one group), 0 if none."""
  import re

  found = [int(m.group(1)) for m in map(re.compile(pattern).match, names) if m]
  return max(found) + 1 if found else 0


def layer_count_mismatch(num_layers: int, names, pattern: str) -> str | None:
  """What differs when a checkpoint's layer_<i> names count other than `num_layers` layers, else None."""
  have = _layer_count(names, pattern)
  if have != num_layers:
    return (f"the checkpoint has {have} layer{'s' * (have != 1)}, the model {num_layers} "
            "(num_hidden_layers)")
  return None


def _attribute_paths(encoder) -> dict[str, tuple[str, ...]]:
  """Variable path -> the attribute names that lead to it from the encoder (or any model), as tf.train.Checkpoint
  names the objects of its graph. They differ from variable paths: `layer_0/output/kernel` is reached by
  `layer_0`, `output_dense`, `_kernel`."""
  paths = {id(v): v.path for v in encoder.variables}
  found: dict[str, tuple[str, ...]] = {}
  seen: set[int] = set()

  def walk(obj, names):
    if id(obj) in seen:
      return
    seen.add(id(obj))
    if id(obj) in paths:
      found[paths[id(obj)]] = names
      return
    for name, child in obj._trackable_children(save_type="checkpoint").items():  # pylint: disable=protected-access
      walk(child, names + (name,))

  walk(encoder, ())
  return found


def _saved_shape(graph, shapes: dict, path: str) -> tuple[int, ...] | None:
  """The shape of the variable at object path `path` ("model/encoder/layer_0/_kernel") of a checkpoint's object
  graph, as `shapes` (its variable-to-shape map) has it; None when the checkpoint has no such variable."""
  node = _node_at(graph, path)
  key = next((a.checkpoint_key for a in graph.nodes[node].attributes if a.name == "VARIABLE_VALUE"),
             None) if node is not None else None
  return tuple(shapes[key]) if key in shapes else None


def object_checkpoint_mismatch(encoder, prefix: str, root: str = _PREFIX) -> str | None:
  """What keeps the object checkpoint at `prefix` (the encoder at `root`, e.g. "model/encoder" for a saved
  classifier) from fitting `encoder`, or None:
  another layer count, a missing variable, or the first variable of another shape.

  Follows the checkpoint's object graph, as restoring does (a training checkpoint may store an encoder variable
  under the optimizer's key), and reads shapes only.
  """
  shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  graph = _object_graph(prefix)
  top = _node_at(graph, root)
  if top is None:
    return f"the checkpoint has no `{root}` object"
  names = [c.local_name for c in graph.nodes[top].children]
  layers = layer_count_mismatch(encoder.config.num_hidden_layers, [n + "/" for n in names], r"layer_(\d+)/")
  if layers:
    return layers
  attribute_paths = _attribute_paths(encoder)
  for variable in encoder.variables:
    if variable.path not in attribute_paths:  # Not reachable by attributes: left to tf.train.Checkpoint.
      continue
    saved = _saved_shape(graph, shapes, f"{root}/{'/'.join(attribute_paths[variable.path])}")
    if saved is None:
      return f"the checkpoint has no {variable.path}"
    if saved != tuple(variable.shape):
      return f"{variable.path}: the checkpoint has {_shape(saved)}, the model needs {_shape(variable.shape)}"
  return None


def describe_config(config: BertConfig, checkpoint: str | None) -> str | None:
  """The bert_config.json `config` was read from, when it is the one beside `checkpoint` (where
  --bert_config_file defaults to); None when unknown."""
  found = find_config(checkpoint) if checkpoint else None
  try:
    if found and BertConfig.from_json_file(found) == config:
      return found
  except (OSError, ValueError):
    pass
  return None


def mismatch_message(source: str, problem: str, config_source: str | None, checkpoint: str | None = None) -> str:
  """One line: `source` (a checkpoint) does not fit the encoder's config, what differs, and what to pass."""
  named = f"bert_config.json ({config_source})" if config_source else "BERT config (--bert_config_file)"
  hint = "pass the bert_config.json the checkpoint was trained with"
  beside = find_config(checkpoint) if checkpoint else None
  if beside and beside != config_source:
    hint += f" (probably {beside}, beside it)"
  return f"{source}: does not match this encoder's {named}: {problem}; {hint}"


def _restore_by_position(encoder, prefix: str, shapes: dict[str, list[int]], config_source: str | None,
                         path: str) -> str:
  """Loads an encoder SavedModel's `encoder_variables` (saved in `encoder.variables` order) into `encoder`."""
  count = len({n.split("/")[1] for n in shapes if n.startswith(_SAVEDMODEL_VARIABLES + "/")})
  variables = encoder.variables
  if count != len(variables):
    raise ValueError(mismatch_message(
        prefix, f"the SavedModel holds {count} encoder variables, the model {len(variables)} (another "
        "num_hidden_layers?)", config_source, path))
  keys = [f"{_SAVEDMODEL_VARIABLES}/{i}{_VALUE_SUFFIX}" for i in range(count)]
  for variable, key in zip(variables, keys):
    if tuple(shapes[key]) != tuple(variable.shape):
      raise ValueError(mismatch_message(
          prefix, f"{variable.path}: the checkpoint has {_shape(shapes[key])}, the model needs "
          f"{_shape(variable.shape)}", config_source, path))
  reader = tf.train.load_checkpoint(prefix)
  for variable, key in zip(variables, keys):
    variable.assign(reader.get_tensor(key))
  return prefix


def check_vocab_fits(vocab_file: str, bert_config: BertConfig, config_source: str | None = None,
                     flag: str | None = "--vocab_file") -> int:
  """Raises ValueError when `vocab_file` cannot be the vocabulary of a model with `bert_config`; returns its size.

  More tokens than vocab_size: ids past the embedding table. More than 1% fewer: the vocabulary of another
  model (1,042 tokens for a 30,522-token model); published vocabularies padded to a round size (30,528
  embeddings for 30,522 words) stay within 1%. Without [UNK], [CLS] or [SEP] (`tokenization.MODEL_TOKENS`): no
  input of the model can be written. `config_source` (the bert_config.json) and `flag` (the flag that gave
  `vocab_file`; None when it came with the model) name the inputs in the message.
  """
  from bert_tf.data import tokenization

  vocab = tokenization.load_vocab(vocab_file)
  size = len(vocab)
  want = bert_config.vocab_size
  named = config_source or "the BERT config"
  subject = f"{flag}={vocab_file}" if flag else vocab_file
  if size > want:
    fix = (f"pass the vocab.txt the model was pretrained with as {flag}, or the bert_config.json that goes with "
           "this vocabulary" if flag else "use the vocab.txt the model was trained with")
    raise ValueError(f"{subject} has {size:,} tokens but {named} says vocab_size={want:,}: ids from {want:,} up "
                     f"would index past the embedding table; {fix}")
  if size < 0.99 * want:
    beside = os.path.join(os.path.dirname(config_source), "vocab.txt") if config_source else None
    if not flag:
      fix = "use the vocab.txt the model was trained with"
    elif beside and os.path.abspath(beside) != os.path.abspath(vocab_file) and fileio.exists(beside):
      fix = f"pass {flag}={beside} (beside {os.path.basename(config_source)})"
    else:
      fix = f"pass the vocab.txt the model was pretrained with as {flag}"
    raise ValueError(f"{subject} has {size:,} tokens but {named} says vocab_size={want:,}: it is probably not the "
                     f"vocabulary the model was pretrained with; {fix}")
  tokenization.check_special_tokens(vocab, subject, tokenization.MODEL_TOKENS, tokenization.MODEL_VOCAB_FIX)
  return size


def find_config(path: str) -> str | None:
  """bert_config.json in `path` (a directory) or beside it, up to two levels up."""
  path = path.rstrip("/")
  candidates = [path] if tf.io.gfile.isdir(path) else []
  head = os.path.dirname(path)
  for _ in range(3):
    candidates.append(head)
    head = os.path.dirname(head)
  for directory in candidates:
    config = os.path.join(directory, CONFIG_NAME)
    if directory and tf.io.gfile.exists(config):
      return config
  return None


def load_encoder(path: str, config: BertConfig | None = None, dtype=None):
  """A `BertEncoder` with the weights at `path` (any form `resolve_checkpoint` accepts).

  `config` defaults to the bert_config.json found beside the checkpoint.
  """
  from bert_tf.model.encoder import BertEncoder

  if config is None:
    config_path = find_config(path)
    if config_path is None:
      raise FileNotFoundError(f"no {CONFIG_NAME} in or beside {path}; pass the config (--bert_config_file)")
    config = BertConfig.from_json_file(config_path)
  encoder = BertEncoder(config, dtype=dtype)
  restore_encoder(encoder, path)
  return encoder


# -- A fine-tuned task model's folder ---------------------------------------------------------------------------
# What every task's run leaves in <output_dir>/<task>_model/ (classifier/ for GLUE) and what prediction alone and
# export load: bert_config.json, vocab.txt, the task's settings file, and the float32 weights of the whole model.
TASK_MODEL_PREFIX = "model"
# The settings key that a folder converted from a Hugging Face model (bert_tf.model.convert_tasks) has: its source.
CONVERTED_FROM = "converted_from"


def save_task_model(float32_model, settings_name: str, settings_text: str, vocab_file: str, directory: str) -> str:
  """Writes `float32_model` (a task model with a `.config` BertConfig, in float32 whatever the training policy),
  its config, `vocab_file` and the task's settings (`settings_text` into `settings_name`) as `directory`, whole
  or not at all (an older folder there is replaced only once the new one is complete). Returns `directory`."""

  def build(path):
    tf.io.gfile.makedirs(path)
    float32_model.config.to_json_file(os.path.join(path, CONFIG_NAME))
    fileio.copy(vocab_file, os.path.join(path, "vocab.txt"))
    fileio.write_text_atomic(os.path.join(path, settings_name), settings_text)
    tf.train.Checkpoint(model=float32_model).write(os.path.join(path, TASK_MODEL_PREFIX))

  fileio.replace_dir(build, directory)
  return directory


def is_task_model_dir(path: str | None) -> bool:
  """Whether `path` is a folder `save_task_model` wrote (classifier/, squad_model/, ner_model/, swag_model/)."""
  return bool(path) and tf.io.gfile.exists(os.path.join(path, TASK_MODEL_PREFIX + ".index")) and \
      tf.io.gfile.exists(os.path.join(path, CONFIG_NAME))


def task_head_mismatch(model, directory: str, settings_name: str, settings: dict) -> str | None:
  """Why the task head (the variables of `model` outside `model.encoder`) of the task model's folder `directory`
  cannot be `model`'s, or None when it can: the folder must hold `settings_name` (the settings file of
  `model`'s task) with `settings`' values (e.g. the same labels in the same order), and every head variable of
  `model`, with its shape."""

  path = os.path.join(directory, settings_name)
  if not tf.io.gfile.exists(path):
    return f"no {settings_name} (a model of another task)"
  with tf.io.gfile.GFile(path) as f:
    theirs = json.load(f)
  for key, value in settings.items():
    # A model converted from Hugging Face (convert_tasks) has no task name of ours: its labels say what its head is.
    if key == "task_name" and theirs.get(CONVERTED_FROM):
      continue
    if theirs.get(key) != value:
      return f"its {key} {theirs.get(key)!r} differ from this run's {value!r} ({path})"
  encoder_variables = {id(v) for v in model.encoder.variables}
  paths = _attribute_paths(model)
  # Only what a checkpoint saves: a Dropout with rate > 0 adds a SeedGenerator state to model.variables that
  # tf.train.Checkpoint never writes (counting it refused the head of every model fine-tuned with dropout).
  head = [v for v in model.variables if id(v) not in encoder_variables and v.path in paths]
  prefix = os.path.join(directory, TASK_MODEL_PREFIX)
  shapes = tf.train.load_checkpoint(prefix).get_variable_to_shape_map()
  graph = _object_graph(prefix)
  for variable in head:
    saved = _saved_shape(graph, shapes, "/".join(("model",) + paths[variable.path]))
    name = variable.path.removeprefix(model.name + "/")
    if saved is None:
      return f"its model has no {name}"
    if saved != tuple(variable.shape):
      return f"{name}: the folder has {_shape(saved)}, this model needs {_shape(variable.shape)}"
  return None if head else "this model has no head variables"


def read_settings_file(path: str) -> dict:
  """A task model's settings (squad.json, ner.json, swag.json): a JSON object, else a ValueError naming `path`."""
  with fileio.open_file(path, "rb") as f:
    data = f.read()
  try:
    settings = json.loads(data.decode("utf-8"))
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not valid JSON ({e}); the file is truncated or was edited by hand: write the "
                     "model folder again (its run script's --do_train) or repair the file") from None
  if not isinstance(settings, dict):
    raise ValueError(f"{path}: a JSON {type(settings).__name__}, not an object of settings")
  return settings


def restore_task_model(model, directory: str, written_by: str) -> None:
  """Reads the weights of `save_task_model`'s folder `directory` into `model` (built, of the same task and
  config). A folder whose weights do not fit its bert_config.json is a ValueError naming `written_by` (e.g.
  "run_squad.py (<output_dir>/squad_model/)"), the tool that writes a matching one."""
  config_path = os.path.join(directory, CONFIG_NAME)
  prefix = os.path.join(directory, TASK_MODEL_PREFIX)
  try:
    problem = object_checkpoint_mismatch(model.encoder, prefix, root="model/encoder")
    if problem:
      raise ValueError(f"{prefix}: does not match {config_path}: {problem}; the files of {directory} do not "
                       f"belong together: use a folder written by {written_by}")
    tf.train.Checkpoint(model=model).read(prefix).assert_existing_objects_matched().expect_partial()
  except (IndexError, tf.errors.OpError) as e:
    # A truncated model.data-* reads as "Read less bytes than requested" (IndexError) or a DataLossError.
    raise ValueError(f"{prefix}: its weights cannot be read ({first_line(e)}); the folder is truncated or "
                     f"corrupt: write it again with {written_by}") from None
