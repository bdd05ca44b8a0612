"""The encoder hand-off from pretraining to fine-tuning: the encoder alone, without the pretraining heads.

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
"""

from __future__ import annotations

import os

import tensorflow as tf
from absl import logging

from bert_tf import fileio
from bert_tf.config import BertConfig

ENCODER_CHECKPOINT_DIR = "encoder_checkpoint"
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


def _replace_dir(build, final: str) -> None:
  """Writes a directory with `build(path)` under a temporary name, then renames it into place (local paths);
  object stores have no directory rename, so there it is written in place."""
  if "://" in final:
    if tf.io.gfile.exists(final):
      tf.io.gfile.rmtree(final)
    build(final)
    return
  temp = fileio.temp_path_for(final)
  try:
    build(temp)
    if tf.io.gfile.exists(final):
      tf.io.gfile.rmtree(final)
    tf.io.gfile.rename(temp, final)
  finally:
    if tf.io.gfile.exists(temp):
      tf.io.gfile.rmtree(temp)


def export_encoder(encoder, config: BertConfig, output_dir: str) -> dict[str, str]:
  """Writes bert_config.json, encoder_checkpoint/ and encoder_savedmodel/ under `output_dir`; returns paths."""
  copy = _float32_copy(encoder, config)
  tf.io.gfile.makedirs(output_dir)
  config.to_json_file(os.path.join(output_dir, CONFIG_NAME))
  ckpt_dir = os.path.join(output_dir, ENCODER_CHECKPOINT_DIR)
  _replace_dir(lambda d: tf.train.Checkpoint(encoder=copy).write(os.path.join(d, _PREFIX)), ckpt_dir)
  saved_dir = os.path.join(output_dir, ENCODER_SAVEDMODEL_DIR)
  module = _EncoderExport(copy)
  _replace_dir(lambda d: tf.saved_model.save(module, d, signatures={"serving_default": module.serve}), saved_dir)
  logging.info("wrote the encoder to %s and %s", ckpt_dir, saved_dir)
  return {"config": os.path.join(output_dir, CONFIG_NAME), "checkpoint": os.path.join(ckpt_dir, _PREFIX),
          "savedmodel": saved_dir}


def resolve_checkpoint(path: str) -> str:
  """Any accepted form of --init_checkpoint -> the checkpoint prefix to read.

  Accepts: a checkpoint prefix (`.../ckpt-1000`, `.../encoder_checkpoint/encoder`); an encoder_checkpoint/
  or encoder_savedmodel/ directory; a pretraining --output_dir (its encoder_checkpoint/, else the newest
  training checkpoint); an output directory of scripts/convert_checkpoint.py (`ours`, its encoder/); a
  directory with a `checkpoint` state file.
  """
  path = path.rstrip("/")
  if tf.io.gfile.exists(path + ".index"):
    return path
  if tf.io.gfile.isdir(path):
    if tf.io.gfile.exists(os.path.join(path, "saved_model.pb")):
      return os.path.join(path, "variables", "variables")
    if tf.io.gfile.exists(os.path.join(path, _PREFIX + ".index")):
      return os.path.join(path, _PREFIX)
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
      f"{ENCODER_CHECKPOINT_DIR}/, {ENCODER_SAVEDMODEL_DIR}/ (saved_model.pb) or a `checkpoint` state file")


def restore_encoder(encoder, path: str) -> str:
  """Loads encoder weights from any form `resolve_checkpoint` accepts into `encoder`; returns the prefix read.

  Every encoder variable must be found (heads and optimizer state in the file are ignored).
  """
  prefix = resolve_checkpoint(path)
  names = [name for name, _ in tf.train.list_variables(prefix)]
  if any(name.startswith(_SAVEDMODEL_VARIABLES + "/") for name in names):
    return _restore_by_position(encoder, prefix, names)
  if not any(name.startswith(_PREFIX + "/") for name in names):
    hint = (" It looks like a google-research (TF1) checkpoint; convert it first with "
            "scripts/convert_checkpoint.py --input_format=tf1 --output_format=ours."
            if any(n.startswith("bert/") for n in names) else "")
    raise ValueError(f"{prefix}: holds no `encoder` object, so it was not written by bert_tf.{hint}")
  try:
    status = tf.train.Checkpoint(encoder=encoder).read(prefix)  # shape mismatches raise here
    status.expect_partial()
    status.assert_existing_objects_matched()  # variables missing from the file raise here
  except (AssertionError, ValueError) as e:
    raise ValueError(f"{prefix}: does not match this encoder (is bert_config.json the same?): "
                     f"{str(e)[:500]}") from None
  return prefix


_SAVEDMODEL_VARIABLES = "encoder_variables"


def _restore_by_position(encoder, prefix: str, names: list[str]) -> str:
  """Loads an encoder SavedModel's `encoder_variables` (saved in `encoder.variables` order) into `encoder`."""
  reader = tf.train.load_checkpoint(prefix)
  count = len({n.split("/")[1] for n in names if n.startswith(_SAVEDMODEL_VARIABLES + "/")})
  variables = encoder.variables
  if count != len(variables):
    raise ValueError(f"{prefix}: holds {count} encoder variables but this encoder has {len(variables)} "
                     "(is bert_config.json the same?)")
  values = [reader.get_tensor(f"{_SAVEDMODEL_VARIABLES}/{i}/.ATTRIBUTES/VARIABLE_VALUE") for i in range(count)]
  for variable, value in zip(variables, values):
    if tuple(variable.shape) != value.shape:
      raise ValueError(f"{prefix}: does not match this encoder (is bert_config.json the same?): "
                       f"{variable.path} has shape {tuple(variable.shape)}, the SavedModel {value.shape}")
  for variable, value in zip(variables, values):
    variable.assign(value)
  return prefix


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
