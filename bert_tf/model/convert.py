"""Weight conversion between our `BertEncoder`/`BertPretrainer` and google-research TF1 checkpoints and
Hugging Face BERT directories.

Every conversion goes through one table of google-research's TF1 names (`tf1_links`): a Hugging Face
state dict is first renamed to TF1 names (`hf_to_tf1_names`), and our variables map to TF1 names one to one,
except that our fused `attention_qkv` kernel [H, 3H] is the concatenation of the TF1 query, key and value
kernels along the output axis (split back exactly on export), and the NSP kernel [H, 2] is the transpose of
`cls/seq_relationship/output_weights` [2, H].

Layouts on disk:
  ours: <dir>/bert_config.json, <dir>/vocab.txt (when the source had one),
        <dir>/encoder/ckpt-1.{index,data-00000-of-00001} + <dir>/encoder/checkpoint, written by
        tf.train.Checkpoint(encoder=..., [mlm_head=..., nsp_head=...]); the heads only when the source had
        them. `tf.train.Checkpoint(encoder=encoder).read(prefix)` reads the encoder alone, as
        bert_tf.model.checkpoints.restore_encoder(encoder, <dir>) does for fine-tuning.
  tf1:  <dir>/bert_model.ckpt.{index,data-00000-of-00001} (TF1 variable names, as google-research
        releases them; no graph), <dir>/bert_config.json, <dir>/vocab.txt.
  hf:   <dir>/config.json, <dir>/model.safetensors (or sharded, with model.safetensors.index.json when read),
        <dir>/vocab.txt; written with tokenizer_config.json and special_tokens_map.json, as transformers'
        from_pretrained loads it (BertModel; BertForPreTraining with both heads).
  keras_hub: a keras-hub BERT preset (read only): its BertBackbone's weights and its vocabulary.

`load_ours` also reads pretraining output directories (the newest checkpoints/ckpt-N with the heads, or --step's)
and fine-tuned task models (the encoder at `model/encoder`); bert_tf.model.released turns released names
(`hf:<model id>`, `keras_hub:<preset>`) into `ours` folders, converted once.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import re
import struct
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import tensorflow as tf

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.model import checkpoints
from bert_tf.model.checkpoints import TF1_CHECKPOINT_NAME, TRAINING_CHECKPOINTS_DIR
from bert_tf.model.encoder import BertEncoder
from bert_tf.model.pretraining import BertPretrainer

BERT_CONFIG_NAME = "bert_config.json"
VOCAB_NAME = "vocab.txt"
ENCODER_DIR = "encoder"  # Subdirectory of an `ours` output holding the checkpoint.
HEADS = ("mlm_head", "nsp_head")
HEAD_SCOPES = {"mlm_head": "cls/predictions/", "nsp_head": "cls/seq_relationship/"}  # Their TF1 scopes.


# ---------------------------------------------------------------------------------------------------------
# The TF1 name table.


@dataclasses.dataclass
class Link:
  """One of our variables and the TF1 tensors it is made of.

  With several `names`, the variable is their concatenation along the last axis (fused query/key/value).
  With `transpose`, the TF1 tensor is the variable's transpose.
  """

  names: tuple[str, ...]
  variable: Any  # keras.Variable
  transpose: bool = False

  def part_shapes(self) -> list[tuple[int, ...]]:
    """The shape each TF1 tensor must have."""
    shape = tuple(self.variable.shape)
    if self.transpose:
      shape = shape[::-1]
    if len(self.names) > 1:
      shape = shape[:-1] + (shape[-1] // len(self.names),)
    return [shape] * len(self.names)

  def to_tf1(self) -> dict[str, np.ndarray]:
    value = np.asarray(self.variable.numpy())
    parts = np.split(value, len(self.names), axis=-1) if len(self.names) > 1 else [value]
    return {name: (part.T if self.transpose else part).copy() for name, part in zip(self.names, parts)}

  def from_tf1(self, weights: dict[str, np.ndarray]) -> np.ndarray:
    """The variable's value from TF1 tensors; raises ValueError naming a tensor of the wrong shape."""
    parts = []
    for name, expected in zip(self.names, self.part_shapes()):
      value = np.asarray(weights[name])
      if value.shape != expected:
        raise ValueError(f"{name}: the checkpoint has {list(value.shape)}, the model ({self.variable.path}) "
                         f"needs {list(expected)}")
      parts.append(value.T if self.transpose else value)
    value = np.concatenate(parts, axis=-1) if len(parts) > 1 else parts[0]
    return value.astype(self.variable.dtype, copy=False)


def _dense(prefix: str, layer) -> list[Link]:
  return [Link((f"{prefix}/kernel",), layer.kernel), Link((f"{prefix}/bias",), layer.bias)]


def _layer_norm(prefix: str, layer) -> list[Link]:
  return [Link((f"{prefix}/gamma",), layer.gamma), Link((f"{prefix}/beta",), layer.beta)]


def tf1_links(encoder: BertEncoder, pretrainer: BertPretrainer | None = None) -> dict[str, list[Link]]:
  """Our variables and their TF1 names, by group: "encoder", and "mlm_head", "nsp_head" with a pretrainer."""
  links = [
      Link(("bert/embeddings/word_embeddings",), encoder.word_embeddings.embeddings),
      Link(("bert/embeddings/token_type_embeddings",), encoder.token_type_embeddings.embeddings),
      Link(("bert/embeddings/position_embeddings",), encoder.position_embeddings.embeddings),
      *_layer_norm("bert/embeddings/LayerNorm", encoder.embeddings_layer_norm),
  ]
  for k, block in enumerate(encoder.transformer_layers):
    p = f"bert/encoder/layer_{k}"
    qkv = tuple(f"{p}/attention/self/{part}" for part in ("query", "key", "value"))
    links += [
        Link(tuple(f"{n}/kernel" for n in qkv), block.attention_qkv.kernel),
        Link(tuple(f"{n}/bias" for n in qkv), block.attention_qkv.bias),
        *_dense(f"{p}/attention/output/dense", block.attention_output),
        *_layer_norm(f"{p}/attention/output/LayerNorm", block.attention_layer_norm),
        *_dense(f"{p}/intermediate/dense", block.intermediate),
        *_dense(f"{p}/output/dense", block.output_dense),
        *_layer_norm(f"{p}/output/LayerNorm", block.output_layer_norm),
    ]
  links += _dense("bert/pooler/dense", encoder.pooler)
  groups = {"encoder": links}
  if pretrainer is not None:
    mlm, nsp = pretrainer.mlm_head, pretrainer.nsp_head
    groups["mlm_head"] = [
        *_dense("cls/predictions/transform/dense", mlm.transform),
        *_layer_norm("cls/predictions/transform/LayerNorm", mlm.transform_layer_norm),
        Link(("cls/predictions/output_bias",), mlm.output_bias),
    ]
    groups["nsp_head"] = [
        Link(("cls/seq_relationship/output_weights",), nsp.kernel, transpose=True),
        Link(("cls/seq_relationship/output_bias",), nsp.bias),
    ]
  return groups


class MissingTensorsError(KeyError, ValueError):
  """Tensors the model needs are missing from the source. A KeyError (a name not found) and a ValueError (bad
  input, which the scripts report in one line), shown without KeyError's quotes."""

  def __str__(self) -> str:
    return str(self.args[0]) if self.args else ""


def _missing_message(missing: list[str], source: str) -> str:
  shown = ", ".join(missing[:20]) + (f", ... ({len(missing) - 20} more)" if len(missing) > 20 else "")
  return f"{source}: missing {len(missing)} tensor(s) the model needs: {shown}"


def set_tf1_weights(links: dict[str, list[Link]], weights: dict[str, np.ndarray],
                    source: str = "checkpoint", config_source: str | None = None) -> list[str]:
  """Assigns every linked variable from TF1-named `weights`; returns the names of `weights` left unused.

  Raises ValueError, one line naming `source`, the tensor and both shapes, when a tensor has the wrong shape
  or the encoder's layer count differs from the checkpoint's (`config_source`, the model's bert_config.json,
  is named as the likely culprit); MissingTensorsError listing the TF1 names missing from `weights`. In every
  case nothing is assigned.
  """
  if "encoder" in links:
    model_layers = sum(1 for link in links["encoder"] if link.names[0].endswith("/attention/self/query/kernel"))
    problem = checkpoints.layer_count_mismatch(model_layers, weights, r"bert/encoder/layer_(\d+)/")
    if problem:
      raise ValueError(checkpoints.mismatch_message(source, problem, config_source))
  missing = sorted(n for group in links.values() for link in group for n in link.names if n not in weights)
  if missing:
    raise MissingTensorsError(_missing_message(missing, source))
  try:
    values = [(link, link.from_tf1(weights)) for group in links.values() for link in group]
  except ValueError as e:
    raise ValueError(checkpoints.mismatch_message(source, str(e), config_source)) from None
  for link, value in values:
    link.variable.assign(value)
  used = {n for group in links.values() for link in group for n in link.names}
  return sorted(set(weights) - used)


def get_tf1_weights(links: dict[str, list[Link]]) -> dict[str, np.ndarray]:
  """Every linked variable under its TF1 name(s), as numpy arrays in TF1 layout."""
  out: dict[str, np.ndarray] = {}
  for group in links.values():
    for link in group:
      out.update(link.to_tf1())
  return out


# ---------------------------------------------------------------------------------------------------------
# Reading and writing tensor files.


def read_tf1_checkpoint(path: str) -> dict[str, np.ndarray]:
  """All tensors of a TF checkpoint (prefix, or a directory holding one) by name."""
  prefix = find_tf1_checkpoint(path)
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def find_tf1_checkpoint(path: str) -> str:
  """A checkpoint prefix from a prefix or a directory; FileNotFoundError saying what was looked for."""
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest:
      return latest
    candidate = os.path.join(path, TF1_CHECKPOINT_NAME)
    if tf.io.gfile.exists(candidate + ".index"):
      return candidate
    raise FileNotFoundError(f"{path}: no checkpoint state file and no {TF1_CHECKPOINT_NAME}.index; "
                            "give the checkpoint prefix (e.g. .../bert_model.ckpt)")
  if not tf.io.gfile.exists(path + ".index"):
    raise FileNotFoundError(f"checkpoint {path}: {path}.index does not exist; give the prefix without the "
                            ".index/.data suffix")
  return path


def write_tf1_checkpoint(weights: dict[str, np.ndarray], prefix: str) -> None:
  """Writes a name-based (TF1-style, no object graph) checkpoint that `tf.compat.v1.train.Saver` and
  `tf.train.load_checkpoint` read. Written under a temporary prefix and renamed into place."""
  fileio.makedirs_for(prefix)
  temp = fileio.temp_path_for(prefix)
  names = sorted(weights)
  tf.raw_ops.SaveV2(prefix=temp, tensor_names=names, shape_and_slices=[""] * len(names),
                    tensors=[tf.constant(weights[n]) for n in names])
  # The data file first: a reader looks for the index, so it must appear last.
  fileio.commit(temp + ".data-00000-of-00001", prefix + ".data-00000-of-00001")
  fileio.commit(temp + ".index", prefix + ".index")


# safetensors dtype codes -> numpy dtypes. BF16 needs ml_dtypes, which TensorFlow already depends on.
def _safetensors_dtypes() -> dict[str, Any]:
  import ml_dtypes

  return {"F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
          "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8,
          "BOOL": np.bool_}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
  """All tensors of a `.safetensors` file by name.

  The format is an 8-byte little-endian header length, a JSON header {name: {dtype, shape,
  data_offsets: [begin, end]}} (offsets relative to the end of the header), then the raw little-endian data.
  """
  dtypes = _safetensors_dtypes()
  with tf.io.gfile.GFile(path, "rb") as f:
    blob = f.read()
  if len(blob) < 8:
    raise ValueError(f"{path}: too short to be a safetensors file")
  (header_size,) = struct.unpack("<Q", blob[:8])
  try:
    header = json.loads(blob[8:8 + header_size])
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise ValueError(f"{path}: not a safetensors file (bad header: {e})") from None
  base = 8 + header_size
  out = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    if info["dtype"] not in dtypes:
      raise ValueError(f"{path}: tensor {name} has dtype {info['dtype']}, not one of {sorted(dtypes)}")
    begin, end = info["data_offsets"]
    if base + end > len(blob):
      raise ValueError(f"{path}: tensor {name} ends at byte {base + end} but the file has {len(blob)}; the file is "
                       "truncated (an interrupted download or copy?): fetch it again")
    dtype = np.dtype(dtypes[info["dtype"]]).newbyteorder("<")
    array = np.frombuffer(blob, dtype=dtype, count=(end - begin) // dtype.itemsize, offset=base + begin)
    out[name] = array.reshape(info["shape"])
  return out


_SAFETENSORS_CODES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64"}


def write_safetensors(tensors: dict[str, np.ndarray], path: str) -> None:
  """Writes `tensors` as one `.safetensors` file (the layout `read_safetensors` reads, with torch's metadata
  {"format": "pt"}, which transformers asks for), under a temporary name renamed into place."""
  header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
  offset = 0
  for name in sorted(tensors):
    value = tensors[name]
    if value.dtype not in _SAFETENSORS_CODES:
      raise ValueError(f"{name}: dtype {value.dtype} is not one of {sorted(map(str, _SAFETENSORS_CODES))}")
    header[name] = {"dtype": _SAFETENSORS_CODES[value.dtype], "shape": list(value.shape),
                    "data_offsets": [offset, offset + value.nbytes]}
    offset += value.nbytes
  encoded = json.dumps(header, separators=(",", ":")).encode()
  encoded += b" " * (-len(encoded) % 8)  # The data starts 8-byte aligned, as safetensors' own writer pads it.
  fileio.makedirs_for(path)
  temp = fileio.temp_path_for(path)
  try:
    with fileio.open_file(temp, "wb") as f:
      f.write(struct.pack("<Q", len(encoded)) + encoded)
      for name in sorted(tensors):
        f.write(np.ascontiguousarray(tensors[name]).astype(tensors[name].dtype.newbyteorder("<")).tobytes())
    fileio.commit(temp, path)
  except BaseException:
    fileio.discard(temp)
    raise


# ---------------------------------------------------------------------------------------------------------
# Hugging Face names and config.

_HF_LAYER_NORM = {"weight": "gamma", "bias": "beta", "gamma": "gamma", "beta": "beta"}
# HF tensors that carry no weights of ours: a buffer, and the decoder matrix tied to the word embeddings.
_HF_IGNORED = {"embeddings.position_ids", "cls.predictions.decoder.weight"}


def hf_to_tf1_names(state: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
  """Renames an HF `BertModel`/`BertForPreTraining` state dict to TF1 names, transposing torch Linear
  weights ([out, in] -> [in, out]). Returns (weights, names of `state` that have no TF1 counterpart)."""
  out: dict[str, np.ndarray] = {}
  unused = []
  for name, value in state.items():
    key = name[len("bert."):] if name.startswith("bert.") else name
    if key in _HF_IGNORED:
      continue
    parts = key.split(".")
    if parts[0] in ("embeddings", "encoder", "pooler"):
      path = "bert/" + re.sub(r"(^|/)layer/(\d+)(/|$)", r"\1layer_\2\3", "/".join(parts[:-1]))
    elif key in ("cls.predictions.bias", "cls.predictions.decoder.bias"):
      out["cls/predictions/output_bias"] = value
      continue
    elif parts[:2] == ["cls", "seq_relationship"] and parts[-1] in ("weight", "bias"):
      # torch's [2, H] weight is already TF1's output_weights layout.
      out["cls/seq_relationship/output_" + ("weights" if parts[-1] == "weight" else "bias")] = value
      continue
    elif parts[:2] == ["cls", "predictions"] and parts[2:3] == ["transform"]:
      path = "/".join(parts[:-1])
    else:
      unused.append(name)
      continue
    leaf = parts[-1]
    if parts[-2] == "LayerNorm" and leaf in _HF_LAYER_NORM:
      out[f"{path}/{_HF_LAYER_NORM[leaf]}"] = value
    elif parts[-2].endswith("_embeddings") and leaf == "weight":
      out[path] = value
    elif leaf == "weight" and value.ndim == 2:
      out[f"{path}/kernel"] = value.T
    elif leaf == "bias":
      out[f"{path}/bias"] = value
    else:
      unused.append(name)
  return out, unused


def tf1_to_hf_names(weights: dict[str, np.ndarray], bert_prefix: str = "") -> dict[str, np.ndarray]:
  """TF1-named weights -> HF state dict names (the inverse of `hf_to_tf1_names`), kernels transposed to torch's
  [out, in]. Encoder names get `bert_prefix` ("bert." for BertForPreTraining, "" for BertModel)."""
  out: dict[str, np.ndarray] = {}
  for name, value in weights.items():
    if name == "cls/predictions/output_bias":
      out["cls.predictions.bias"] = value
      continue
    if name.startswith("cls/seq_relationship/output_"):  # TF1's [2, H] is torch's layout already.
      out["cls.seq_relationship." + ("weight" if name.endswith("_weights") else "bias")] = value
      continue
    scope, leaf = name.rsplit("/", 1)
    if scope.startswith("bert/"):
      scope = bert_prefix + re.sub(r"(^|/)layer_(\d+)(/|$)", r"\1layer/\2\3", scope[len("bert/"):])
    path = scope.replace("/", ".")
    if leaf.endswith("_embeddings"):
      out[f"{path}.{leaf}.weight"] = value
    elif leaf in ("gamma", "beta"):
      out[f"{path}.{'weight' if leaf == 'gamma' else 'bias'}"] = value
    elif leaf == "kernel":
      out[f"{path}.weight"] = np.ascontiguousarray(value.T)
    elif leaf == "bias":
      out[f"{path}.bias"] = value
    else:
      raise ValueError(f"{name}: no Hugging Face name for this TF1 tensor")
  return out


# HF activation names that are ours under another name.
_HF_ACTS = {"gelu_pytorch_tanh": "gelu_new", "gelu_fast": "gelu_new"}


def hf_config_to_bert_config(values: dict[str, Any], source: str = "config.json") -> BertConfig:
  """An HF BERT `config.json` dict -> BertConfig; keys we do not use are kept in `extras`.

  HF omits nothing we need in practice, but a missing key takes BERT-base's default, which is also HF's.
  """
  model_type = values.get("model_type", "bert")
  if model_type != "bert":
    raise ValueError(f"{source}: model_type is {model_type!r}; only 'bert' checkpoints convert")
  position_type = values.get("position_embedding_type", "absolute")
  if position_type != "absolute":
    raise ValueError(f"{source}: position_embedding_type {position_type!r} is not supported (absolute only)")
  merged = {**BertConfig().to_dict(), **values}
  merged["hidden_act"] = _HF_ACTS.get(merged["hidden_act"], merged["hidden_act"])
  return BertConfig.from_dict(merged, source=source)


def read_hf_state(directory: str) -> dict[str, np.ndarray]:
  """The tensors of an HF directory's `model.safetensors` (or its shards)."""
  single = os.path.join(directory, "model.safetensors")
  index = single + ".index.json"
  if tf.io.gfile.exists(single):
    return read_safetensors(single)
  if tf.io.gfile.exists(index):
    with tf.io.gfile.GFile(index) as f:
      shards = sorted(set(json.load(f)["weight_map"].values()))
    state = {}
    for shard in shards:
      state.update(read_safetensors(os.path.join(directory, shard)))
    return state
  raise FileNotFoundError(
      f"{directory}: no model.safetensors (or model.safetensors.index.json); a directory with only "
      "pytorch_model.bin must first be re-saved with transformers' save_pretrained(safe_serialization=True)")


# ---------------------------------------------------------------------------------------------------------
# Whole models.


@dataclasses.dataclass
class Converted:
  """A converted model: `encoder`, and `pretrainer` (whose `.encoder` is `encoder`) when the source had
  pretraining heads; `heads` names the heads whose weights came from the source."""

  config: BertConfig
  encoder: BertEncoder
  pretrainer: BertPretrainer | None = None
  heads: tuple[str, ...] = ()
  vocab_file: str | None = None
  unused: list[str] = dataclasses.field(default_factory=list)  # Source tensors that were not loaded.
  # A fine-tuned task model (bert_tf.model.convert_tasks.TaskModel: its head, settings and labels), whose
  # `.model.encoder` is `encoder`; None for an encoder (with or without the pretraining heads).
  task: Any = None


def from_tf1_weights(weights: dict[str, np.ndarray], config: BertConfig, source: str = "checkpoint",
                     vocab_file: str | None = None, dtype=None, config_source: str | None = None) -> Converted:
  """Builds our models from TF1-named weights; the heads present in `weights` are loaded too.

  A head group is loaded when any of its tensors is present, and must then be complete.
  """
  heads = tuple(h for h in HEADS if any(n.startswith(HEAD_SCOPES[h]) for n in weights))
  encoder = BertEncoder(config, dtype=dtype)
  pretrainer = BertPretrainer(config, encoder=encoder, dtype=dtype) if heads else None
  links = {k: v for k, v in tf1_links(encoder, pretrainer).items() if k == "encoder" or k in heads}
  unused = set_tf1_weights(links, weights, source=source, config_source=config_source)
  for head in HEADS:
    if pretrainer is not None and head not in heads:
      logging.warning("%s: no %s weights; that head keeps its random initialisation", source, head)
  return Converted(config, encoder, pretrainer, heads, vocab_file, unused)


def _vocab_beside(directory: str) -> str | None:
  path = os.path.join(directory, VOCAB_NAME)
  return path if tf.io.gfile.exists(path) else None


def hf_vocab(directory: str) -> str | None:
  """The vocabulary of a Hugging Face folder: its vocab.txt, else the WordPiece vocabulary of its tokenizer.json
  (transformers 5 saves a BERT tokenizer as that file alone) written as a vocab.txt into a temporary folder;
  None when it has neither."""
  found = _vocab_beside(directory)
  path = os.path.join(directory, "tokenizer.json")
  if found or not tf.io.gfile.exists(path):
    return found
  with tf.io.gfile.GFile(path, "rb") as f:
    try:
      model = json.loads(f.read().decode("utf-8")).get("model") or {}
    except (json.JSONDecodeError, UnicodeDecodeError, AttributeError):
      model = {}
  vocab = model.get("vocab") if model.get("type") == "WordPiece" else None
  if not isinstance(vocab, dict) or sorted(vocab.values()) != list(range(len(vocab))):
    logging.warning("%s: not a WordPiece vocabulary with ids 0..N-1; no vocab.txt for this model", path)
    return None
  import tempfile

  target = os.path.join(tempfile.mkdtemp(prefix="bert_tf_hf_vocab_"), VOCAB_NAME)
  fileio.write_text_atomic(target, "".join(token + "\n" for token in sorted(vocab, key=vocab.get)))
  return target


def load_tf1(checkpoint: str, bert_config_file: str | None = None, vocab_file: str | None = None,
             dtype=None) -> Converted:
  """A google-research checkpoint (prefix or directory). `bert_config_file` and `vocab_file` default to
  the files of those names beside the checkpoint."""
  prefix = find_tf1_checkpoint(checkpoint)
  checkpoints.check_readable(prefix)
  directory = os.path.dirname(prefix)
  if bert_config_file is None:
    bert_config_file = os.path.join(directory, BERT_CONFIG_NAME)
    if not tf.io.gfile.exists(bert_config_file):
      raise FileNotFoundError(f"no {BERT_CONFIG_NAME} beside {prefix}; pass --bert_config_file")
  config = BertConfig.from_json_file(bert_config_file)
  return from_tf1_weights(read_tf1_checkpoint(prefix), config, source=prefix,
                          vocab_file=vocab_file or _vocab_beside(directory), dtype=dtype,
                          config_source=bert_config_file)


def load_hf(directory: str, dtype=None) -> Converted:
  """An HF BERT directory: config.json, model.safetensors, vocab.txt."""
  config_path = os.path.join(directory, "config.json")
  if not tf.io.gfile.exists(config_path):
    raise FileNotFoundError(f"{directory}: no config.json; is this a Hugging Face model directory?")
  with tf.io.gfile.GFile(config_path, "rb") as f:
    try:
      values = json.loads(f.read().decode("utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
      raise ValueError(f"{config_path}: not a JSON config ({e}); give the model's Hugging Face config.json") from None
  if not isinstance(values, dict):
    raise ValueError(f"{config_path}: a JSON {type(values).__name__}, not an object; give the model's Hugging Face "
                     "config.json")
  config = hf_config_to_bert_config(values, source=config_path)
  weights, unused = hf_to_tf1_names(read_hf_state(directory))
  converted = from_tf1_weights(weights, config, source=directory, vocab_file=hf_vocab(directory),
                               dtype=dtype, config_source=config_path)
  converted.unused = sorted(unused + converted.unused)
  return converted


# keras-hub's BertBackbone variable paths (transformer_layer_<k>/...) -> google-research's names.
_KERAS_HUB_NAMES = {
    "token_embedding/embeddings": "bert/embeddings/word_embeddings",
    "position_embedding/embeddings": "bert/embeddings/position_embeddings",
    "segment_embedding/embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings_layer_norm": "bert/embeddings/LayerNorm",
    "self_attention_layer/query": "attention/self/query",
    "self_attention_layer/key": "attention/self/key",
    "self_attention_layer/value": "attention/self/value",
    "self_attention_layer/attention_output": "attention/output/dense",
    "self_attention_layer_norm": "attention/output/LayerNorm",
    "feedforward_intermediate_dense": "intermediate/dense",
    "feedforward_output_dense": "output/dense",
    "feedforward_layer_norm": "output/LayerNorm",
    "pooled_dense": "bert/pooler/dense",
}


def keras_hub_to_tf1_names(backbone) -> dict[str, np.ndarray]:
  """A keras-hub `BertBackbone`'s weights under TF1 names: the per-head attention kernels [H, heads, head_size]
  and [heads, head_size, H] (and biases [heads, head_size]) flattened to TF1's [H, H] and [H]."""
  hidden = backbone.hidden_dim
  out = {}
  for variable in backbone.weights:
    path = variable.path.removeprefix(backbone.name + "/")
    layer = re.match(r"transformer_layer_(\d+)/(.*)", path)
    scope, leaf = (layer.group(2) if layer else path).rsplit("/", 1)
    if leaf == "embeddings":
      scope, leaf = f"{scope}/{leaf}", ""
    if scope not in _KERAS_HUB_NAMES:
      raise ValueError(f"{variable.path}: a keras-hub BertBackbone variable with no google-research counterpart")
    name = _KERAS_HUB_NAMES[scope] if not layer else f"bert/encoder/layer_{layer.group(1)}/{_KERAS_HUB_NAMES[scope]}"
    value = np.asarray(variable.numpy())
    if leaf in ("kernel", "bias") and scope.startswith("self_attention_layer/"):
      value = value.reshape((hidden, hidden) if leaf == "kernel" else (hidden,))
    out[f"{name}/{leaf}" if leaf else name] = value
  return out


def load_keras_hub(preset: str, dtype=None) -> Converted:
  """A keras-hub BERT preset (a name such as `bert_base_en_uncased`, downloaded by keras-hub into kagglehub's
  cache, or a preset folder): its backbone and its vocabulary. The encoder uses the tanh GELU (`gelu_new`),
  as keras-hub's BertBackbone computes it."""
  import tempfile

  import keras_hub

  backbone = keras_hub.models.BertBackbone.from_preset(preset)
  tokenizer = keras_hub.models.BertTokenizer.from_preset(preset)
  config = BertConfig(vocab_size=backbone.vocabulary_size, hidden_size=backbone.hidden_dim,
                      num_hidden_layers=backbone.num_layers, num_attention_heads=backbone.num_heads,
                      intermediate_size=backbone.intermediate_dim, hidden_act="gelu_new",
                      hidden_dropout_prob=backbone.dropout, attention_probs_dropout_prob=backbone.dropout,
                      max_position_embeddings=backbone.max_sequence_length, type_vocab_size=backbone.num_segments)
  vocab_file = os.path.join(tempfile.mkdtemp(prefix="bert_tf_keras_hub_"), VOCAB_NAME)
  fileio.write_text_atomic(vocab_file, "".join(token + "\n" for token in tokenizer.get_vocabulary()))
  return from_tf1_weights(keras_hub_to_tf1_names(backbone), config, source=f"keras_hub:{preset}",
                          vocab_file=vocab_file, dtype=dtype)




def _training_checkpoint(directory: str, step: int | None) -> str | None:
  """ckpt-<step> (the newest without `step`) of a training checkpoint directory, or None when it has none;
  FileNotFoundError naming the steps there when `step` is not one of them."""
  state = tf.train.get_checkpoint_state(directory)
  if state is None:
    return None
  if step is None:
    return tf.train.latest_checkpoint(directory)
  prefix = os.path.join(directory, f"ckpt-{step}")
  if not tf.io.gfile.exists(prefix + ".index"):
    steps = [p.rsplit("-", 1)[-1] for p in state.all_model_checkpoint_paths]
    raise FileNotFoundError(f"--step={step}: {directory} has no ckpt-{step}; its checkpoints are at steps "
                            f"{', '.join(steps) or 'none'}")
  return prefix


def our_checkpoint(path: str, step: int | None = None) -> tuple[str, str]:
  """(checkpoint prefix, its bert_config.json) of anything `load_ours` reads; see there."""
  prefix = our_prefix(path, step)
  config = checkpoints.find_config(prefix)
  if config is None:
    raise FileNotFoundError(f"{prefix}: no {BERT_CONFIG_NAME} in or beside it")
  return prefix, config


def our_prefix(path: str, step: int | None = None) -> str:
  """The checkpoint prefix of anything `load_ours` reads (a fine-tuning run's checkpoints too); FileNotFoundError
  saying what is accepted when `path` holds no object checkpoint of bert_tf's."""
  path = path.rstrip("/")
  prefix = None
  if tf.io.gfile.exists(path + ".index"):
    if step is not None:
      raise ValueError(f"--step={step} picks a checkpoint of a training directory; --input={path} is one already")
    prefix = path
  elif tf.io.gfile.isdir(path):
    # A training run's directory (its checkpoints/ have the heads), or that checkpoints/ directory itself.
    for directory in (os.path.join(path, TRAINING_CHECKPOINTS_DIR), path):
      if prefix is None and tf.io.gfile.isdir(directory):
        prefix = _training_checkpoint(directory, step)
    if prefix is None and step is not None:
      raise FileNotFoundError(f"--step={step}: {path} has no training checkpoints ({TRAINING_CHECKPOINTS_DIR}/)")
    if prefix is None:
      try:
        prefix = checkpoints.resolve_checkpoint(path)
      except FileNotFoundError:
        prefix = None
  if prefix is not None:
    checkpoints.check_readable(prefix)
  if prefix is None or checkpoints.find_encoder_root(prefix) is None:
    raise FileNotFoundError(
        f"{path}: no checkpoint of bert_tf's here: give a directory written by scripts/convert_checkpoint.py "
        f"(its {ENCODER_DIR}/), a pretraining --output_dir (its {TRAINING_CHECKPOINTS_DIR}/, with the heads, or "
        "encoder_checkpoint/), a fine-tuned model's folder, or a checkpoint prefix (.../ckpt-1000)")
  return prefix


def load_ours(path: str, dtype=None, step: int | None = None) -> Converted:
  """Our object checkpoints: an `ours` directory (see the module docstring); a pretraining --output_dir (the
  newest checkpoints/ckpt-N, or ckpt-<step>, with the pretraining heads; encoder_checkpoint/ when it has no
  checkpoints/); a fine-tuned task model's folder or a fine-tuning --output_dir (the encoder); or a checkpoint
  prefix. The heads are loaded when the checkpoint has them (as root objects `mlm_head`, `nsp_head`)."""
  prefix, config_path = our_checkpoint(path, step)
  config = BertConfig.from_json_file(config_path)
  root = checkpoints.find_encoder_root(prefix)
  roots = {name.split("/")[0] for name, _ in tf.train.list_variables(prefix)}
  heads = tuple(h for h in HEADS if h in roots and root == checkpoints.ENCODER_ROOTS[0])  # Pretraining's.
  encoder = BertEncoder(config, dtype=dtype)
  pretrainer = BertPretrainer(config, encoder=encoder, dtype=dtype) if heads else None
  problem = checkpoints.object_checkpoint_mismatch(encoder, prefix, root=root)
  if problem:
    raise ValueError(checkpoints.mismatch_message(prefix, problem, config_path))
  status = checkpoints.checkpoint_of(encoder, root, **{h: getattr(pretrainer, h) for h in heads}).read(prefix)
  status.expect_partial().assert_existing_objects_matched()
  return Converted(config, encoder, pretrainer, heads, _vocab_beside(os.path.dirname(config_path)))


def _write_config_and_vocab(converted: Converted, output_dir: str, bert_config: bool = True) -> None:
  if bert_config:
    converted.config.to_json_file(os.path.join(output_dir, BERT_CONFIG_NAME))
  if converted.vocab_file:
    target = os.path.join(output_dir, VOCAB_NAME)
    if os.path.abspath(converted.vocab_file) != os.path.abspath(target):
      tf.io.gfile.copy(converted.vocab_file, target, overwrite=True)
  else:
    logging.warning("no %s in the source; %s has none either", VOCAB_NAME, output_dir)


def save_ours(converted: Converted, output_dir: str) -> str:
  """Writes the `ours` layout; returns the checkpoint prefix (<output_dir>/encoder/ckpt-1)."""
  directory = os.path.join(output_dir, ENCODER_DIR)
  tf.io.gfile.makedirs(directory)
  objects = {"encoder": converted.encoder}
  objects.update({h: getattr(converted.pretrainer, h) for h in converted.heads})
  prefix = tf.train.Checkpoint(**objects).write(os.path.join(directory, "ckpt-1"))
  # The state file (as tf.train.CheckpointManager writes it) lets tf.train.latest_checkpoint find it.
  fileio.write_text_atomic(os.path.join(directory, "checkpoint"),
                           'model_checkpoint_path: "ckpt-1"\nall_model_checkpoint_paths: "ckpt-1"\n')
  _write_config_and_vocab(converted, output_dir)
  return prefix


def save_tf1(converted: Converted, output_dir: str) -> str:
  """Writes the `tf1` layout under google-research's names; returns the checkpoint prefix."""
  links = {k: v for k, v in tf1_links(converted.encoder, converted.pretrainer).items()
           if k == "encoder" or k in converted.heads}
  prefix = os.path.join(output_dir, TF1_CHECKPOINT_NAME)
  write_tf1_checkpoint(get_tf1_weights(links), prefix)
  _write_config_and_vocab(converted, output_dir)
  return prefix


# transformers' class for each set of heads we write.
HF_ARCHITECTURES = {(): "BertModel", ("mlm_head",): "BertForMaskedLM", ("nsp_head",): "BertForNextSentencePrediction",
                    HEADS: "BertForPreTraining"}
_SPECIAL_TOKENS = {"unk_token": "[UNK]", "sep_token": "[SEP]", "pad_token": "[PAD]", "cls_token": "[CLS]",
                   "mask_token": "[MASK]"}


# Keys of a source's config.json that describe that file or its head, not the encoder: never carried into a
# config.json we write (transformers writes its own version and dtype when it saves; the labels are the head's).
HF_SOURCE_KEYS = frozenset({"_name_or_path", "transformers_version", "architectures", "model_type", "id2label",
                            "label2id", "num_labels", "_num_labels", "problem_type", "finetuning_task", "torch_dtype",
                            "dtype"})


def hf_config(config: BertConfig, heads: tuple[str, ...] = (), architecture: str | None = None) -> dict[str, Any]:
  """The HF `config.json` of `config`: our field names are HF's; keys a source added (extras) are kept, except
  `HF_SOURCE_KEYS`; `model_type` and `architectures` (`architecture`, else the class of `heads`) say what
  transformers builds."""
  if config.causal_attention:
    raise ValueError("causal_attention: a left-to-right model (its pooler reads the last real token) has no "
                     "Hugging Face BERT counterpart; convert it to ours or tf1")
  values = {k: v for k, v in config.to_dict().items() if k not in HF_SOURCE_KEYS}
  values.update(model_type="bert", architectures=[architecture or HF_ARCHITECTURES[heads]])
  values.setdefault("layer_norm_eps", 1e-12)  # Our LayerNorm's epsilon, google-research's (and HF's default).
  return values


def vocab_is_cased(vocab_file: str) -> bool:
  """Whether a WordPiece vocabulary keeps case: some token other than a bracketed special ([CLS], [unused0])
  has an upper-case letter. google-research's uncased vocabularies have none."""
  from bert_tf.data.tokenization import load_vocab

  return any(token != token.lower() for token in load_vocab(vocab_file)
             if not (token.startswith("[") and token.endswith("]")))


def save_hf(converted: Converted, output_dir: str) -> str:
  """Writes the `hf` layout (config.json, model.safetensors, vocab.txt, tokenizer_config.json,
  special_tokens_map.json) that transformers' `from_pretrained` loads as it is: BertModel, and
  BertForPreTraining (BertForMaskedLM without NSP) when the source had heads. model.safetensors comes last,
  under a temporary name, so an interrupted write never leaves a folder that loads. Returns its path."""
  heads = tuple(h for h in HEADS if h in converted.heads)
  values = hf_config(converted.config, heads)
  links = {k: v for k, v in tf1_links(converted.encoder, converted.pretrainer).items()
           if k == "encoder" or k in heads}
  state = tf1_to_hf_names(get_tf1_weights(links), bert_prefix="bert." if heads else "")
  # The position-id buffer older transformers saved (all-MiniLM-L6-v2 has it): written so a round trip gives
  # back every tensor; transformers 5 reads past it.
  state[("bert." if heads else "") + "embeddings.position_ids"] = np.arange(
      converted.config.max_position_embeddings, dtype=np.int64)[None]
  return write_hf_folder(converted, values, state, output_dir)


def write_hf_folder(converted: Converted, values: dict[str, Any], state: dict[str, np.ndarray], output_dir: str,
                    do_lower_case: bool | None = None) -> str:
  """Writes `values` as config.json, the vocabulary of `converted` with the tokenizer files (`do_lower_case`,
  default: whether the vocabulary is uncased) and `state` as model.safetensors, last; returns its path."""
  tf.io.gfile.makedirs(output_dir)
  fileio.write_text_atomic(os.path.join(output_dir, "config.json"), json.dumps(values, indent=2) + "\n")
  _write_config_and_vocab(converted, output_dir, bert_config=False)
  if converted.vocab_file:
    if do_lower_case is None:
      do_lower_case = not vocab_is_cased(converted.vocab_file)
    tokenizer = {"tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case,
                 "model_max_length": converted.config.max_position_embeddings, **_SPECIAL_TOKENS}
    fileio.write_text_atomic(os.path.join(output_dir, "tokenizer_config.json"), json.dumps(tokenizer, indent=2) + "\n")
    fileio.write_text_atomic(os.path.join(output_dir, "special_tokens_map.json"),
                             json.dumps(_SPECIAL_TOKENS, indent=2) + "\n")
  path = os.path.join(output_dir, "model.safetensors")
  write_safetensors(state, path)
  return path


LOADERS: dict[str, Callable[..., Converted]] = {"tf1": load_tf1, "hf": load_hf, "ours": load_ours,
                                                "keras_hub": load_keras_hub}
SAVERS: dict[str, Callable[[Converted, str], str]] = {"tf1": save_tf1, "ours": save_ours, "hf": save_hf}


# -- convert_checkpoint.py's --output_dir ---------------------------------------------------------------------


def check_output_dir(output_dir: str, overwrite: bool = False, source: str | None = None,
                     inputs: Mapping[str, str | Sequence[str] | None] | None = None) -> None:
  """Before anything is read: --output_dir is a folder (created if missing), empty unless `overwrite`
  (--overwrite_output_dir), and then holds neither `source` (--input, with the checkpoint files it resolves to:
  `checkpoints.read_paths`) nor any of `inputs` (other flags -> their paths, as `fileio.check_not_input` takes
  them): `write_output` replaces the folder whole, so no file of an earlier conversion (or anything else) stays
  beside the new one. One-line NotADirectoryError / ValueError / NotWritable naming the flags."""
  if fileio.exists(output_dir) and not fileio.isdir(output_dir):
    raise NotADirectoryError(f"--output_dir={output_dir} is a file; give a folder (created if missing)")
  # Locally the folder is written beside it, under a temporary name, and renamed: its parent is written.
  fileio.check_writable("output_dir", output_dir,
                        output_dir if fileio.is_remote(output_dir) else os.path.dirname(os.path.abspath(output_dir)))
  entries = sorted(fileio.listdir(output_dir)) if fileio.isdir(output_dir) else []
  if not entries:
    return
  if not overwrite:
    shown = ", ".join(entries[:3]) + (f" and {len(entries) - 3} more" if len(entries) > 3 else "")
    raise ValueError(f"--output_dir={output_dir} is not empty (it holds {shown}); give a new or empty folder, or "
                     "pass --overwrite_output_dir to replace it and all it holds")
  read = {"input": checkpoints.read_paths(source) if source else None, **(inputs or {})}
  fileio.check_not_input("output_dir", output_dir, read, replaces="--overwrite_output_dir")


def checked_vocab(converted: Converted) -> Converted:
  """`converted`, once its vocabulary (if it has one) is found to hold [UNK], [CLS] and [SEP]; else a one-line
  ValueError naming the file. A model whose vocabulary lacks them converts to a folder nothing can use: our
  fine-tuning, extraction and export refuse it, and transformers' BertTokenizer would silently give [CLS] the id
  of [UNK]. ([PAD] and [MASK] may be missing: a fine-tuned model's vocabulary needs neither.)"""
  from bert_tf.data import tokenization

  if converted.vocab_file:
    tokenization.check_special_tokens(tokenization.load_vocab(converted.vocab_file), converted.vocab_file,
                                      tokenization.MODEL_TOKENS, tokenization.MODEL_VOCAB_FIX)
  return converted


def write_output(save: Callable[[Converted, str], str], converted: Converted, output_dir: str) -> str:
  """`save(converted, folder)` (one of SAVERS) into a new folder that then replaces `output_dir` whole (locally:
  written under a temporary name and renamed, so an interrupted conversion leaves the old folder or none), once
  its vocabulary is checked (`checked_vocab`). Returns the path `save` returned, under `output_dir`."""
  checked_vocab(converted)
  written = []
  fileio.replace_dir(lambda folder: written.append((folder, save(converted, folder))), output_dir)
  folder, path = written[0]
  return os.path.join(output_dir, os.path.relpath(path, folder))
