"""Released weights by name: `hf:<model id>` (the Hugging Face Hub, e.g. `hf:bert-base-uncased`) and
`keras_hub:<preset>` (e.g. `keras_hub:bert_base_en_uncased`), wherever a checkpoint path is taken
(--init_checkpoint, and convert_checkpoint.py's --input).

Each is downloaded by its own library into its usual cache (huggingface_hub: $HF_HUB_CACHE, by default
~/.cache/huggingface/hub/models--<org>--<name>/snapshots/<revision>/; keras-hub through kagglehub:
$KAGGLEHUB_CACHE, by default ~/.cache/kagglehub/models/keras/<model>/keras/<preset>/<version>/), then converted
once into our `ours` layout (bert_tf.model.convert) under

  $BERT_TF_CACHE (default ~/.cache/bert_tf)/released/<hf|keras_hub>/<name>/<revision or version>/

which later uses read as it is. Offline (HF_HUB_OFFLINE=1, or no network) a model already in the cache is used;
one that is not is a one-line error naming the download command and the cache folder.
"""

from __future__ import annotations

import logging
import os

from bert_tf import fileio
from bert_tf.model.checkpoints import HF, KERAS_HUB

# What a BERT model needs from an HF repository (not the other frameworks' copies of the weights).
HF_FILES = ["config.json", "model.safetensors", "model.safetensors.index.json", "model-*.safetensors", "vocab.txt",
            "tokenizer_config.json", "special_tokens_map.json"]
# Taken when there, not in every repository: the tokenizer that transformers 5 saves instead of vocab.txt, and
# our settings beside a fine-tuned model we converted (bert_tf.model.convert_tasks).
HF_OPTIONAL_FILES = ["tokenizer.json", "bert_tf.json"]


def local_path(path: str) -> str:
  """`path` (without a trailing /), or for a released name the local `ours` folder of its converted weights
  (downloaded and converted on first use); for a local Hugging Face folder of a fine-tuned task model
  (BertForSequenceClassification, ...: bert_tf.model.convert_tasks), our model folder converted from it, kept
  under <cache>/converted/hf/<folder name>-<hash of its files>/ (converted again when a file changes)."""
  if path.startswith(HF):
    return _converted(HF, path[len(HF):], *_hf_snapshot(path[len(HF):]))
  if path.startswith(KERAS_HUB):
    return _converted(KERAS_HUB, path[len(KERAS_HUB):], *_keras_hub_preset(path[len(KERAS_HUB):]))
  from bert_tf.model import convert, convert_tasks

  path = path.rstrip("/")
  if convert_tasks.hf_task_kind(path) is not None:
    name = os.path.basename(os.path.abspath(path)) if "://" not in path else os.path.basename(path)
    target = os.path.join(fileio.cache_dir(), "converted", "hf", f"{name}-{_folder_hash(path)}")

    def write(folder):  # a model no script can use (`convert.checked_vocab`) is refused before the cache holds it
      convert_tasks.save_ours(convert.checked_vocab(convert_tasks.load_hf(path)), folder)

    return _converted_once(target, write, path)
  return path


def task_model_dir(path: str | None) -> str | None:
  """For a Hugging Face model with a task head (hf:<id>, or a local folder: see `local_path`), the folder of our
  fine-tuned model converted from it (what --init_checkpoint without --do_train and export take); else `path`."""
  from bert_tf.model import convert_tasks

  if path and (path.startswith(HF) or convert_tasks.hf_task_kind(path.rstrip("/")) is not None):
    local = local_path(path)
    if convert_tasks.folder_kind(local) is not None:
      return local
  return path


_HASHES: dict[tuple, str] = {}  # (folder, its files' sizes and times) -> their hash, this process's


def _folder_hash(directory: str) -> str:
  """12 hex digits of SHA-256 over the files of a Hugging Face folder that a conversion reads."""
  import hashlib

  import tensorflow as tf

  names = sorted(n for n in tf.io.gfile.listdir(directory) if n.endswith((".json", ".safetensors", ".txt")))
  stats = tuple((n, tf.io.gfile.stat(os.path.join(directory, n)).length,
                 tf.io.gfile.stat(os.path.join(directory, n)).mtime_nsec) for n in names)
  key = (os.path.abspath(directory) if "://" not in directory else directory, stats)
  if key not in _HASHES:
    digest = hashlib.sha256()
    for name in names:
      digest.update(name.encode() + b"\0")
      with tf.io.gfile.GFile(os.path.join(directory, name), "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
          digest.update(block)
    _HASHES[key] = digest.hexdigest()[:12]
  return _HASHES[key]


def _converted(scheme: str, name: str, source: str, revision: str, load) -> str:
  """The `ours` folder of `name` at `revision` in our cache, converted from `source` with `load` if absent (a
  task model's folder for a Hugging Face model with a task head: bert_tf.model.convert_tasks)."""
  from bert_tf.model import convert, convert_tasks

  target = os.path.join(fileio.cache_dir(), "released", scheme.rstrip(":"), name.replace("/", "--"), revision)
  # A task model converted before task heads were (encoder/ alone) is converted again.
  again = scheme == HF and convert_tasks.hf_task_kind(source) is not None and convert_tasks.folder_kind(target) is None
  return _converted_once(target, lambda d: convert_tasks.save_ours(convert.checked_vocab(load(source)), d),
                         f"{scheme}{name} ({source})", again)


def _converted_once(target: str, write, source: str, again: bool = False) -> str:
  """`target`, written by `write(folder)` unless a finished conversion is there (or `again`)."""
  from bert_tf.model import convert, convert_tasks

  if not again and (fileio.exists(os.path.join(target, convert.ENCODER_DIR, "checkpoint"))
                    or convert_tasks.folder_kind(target) is not None):
    return target
  logging.info("converting %s into %s", source, target)
  # Written under a temporary name and renamed: a conversion cut short is never taken for a finished one.
  fileio.replace_dir(write, target)
  return target


def _offline_error(name: str, cache: str, folder: str, command: str, variable: str,
                   reason: Exception) -> FileNotFoundError:
  """One line: `name` is not in `cache` (here, at `folder` under it), and how to bring it there from a machine with
  network: `command` fills `folder` under that machine's cache ($`variable`), which is copied to the same place
  here."""
  first = str(reason).strip().splitlines()[0] if str(reason).strip() else type(reason).__name__
  where = os.path.join(cache, folder)
  return FileNotFoundError(f"{name}: not in the cache ({where}) and it could not be downloaded here ({first}); "
                           f"where there is network, run `{command}`, then copy the folder it fills there, {folder} "
                           f"under that machine's {variable} cache, to {where} here (or set {variable} to a cache "
                           "that holds it)")


def _hf_snapshot(model_id: str) -> tuple[str, str, object]:
  """(snapshot folder, revision, loader) of a Hugging Face model, downloaded by huggingface_hub if needed."""
  import huggingface_hub
  from huggingface_hub import constants

  try:
    folder = huggingface_hub.snapshot_download(model_id, allow_patterns=HF_FILES + HF_OPTIONAL_FILES)
  except Exception as e:  # pylint: disable=broad-except  # Offline, unknown id, no network: all said the same way.
    raise _offline_error(
        f"{HF}{model_id}", constants.HF_HUB_CACHE, "models--" + model_id.replace("/", "--"),
        f"hf download {model_id} {' '.join(f for f in HF_FILES if '*' not in f and 'index' not in f)}",
        "HF_HUB_CACHE", e) from None
  import functools

  from bert_tf.model import convert_tasks

  return folder, os.path.basename(folder.rstrip("/")), functools.partial(convert_tasks.load_hf,
                                                                           name=f"{HF}{model_id}")


def _keras_hub_preset(preset: str) -> tuple[str, str, object]:
  """(preset, its version, loader) of a keras-hub BERT preset; keras-hub downloads it on conversion."""
  import keras_hub

  from bert_tf.model import convert

  presets = keras_hub.models.BertBackbone.presets
  if preset not in presets:
    raise ValueError(f"{KERAS_HUB}{preset}: not a keras-hub BERT preset; choose one of {', '.join(sorted(presets))}")
  handle = presets[preset]["kaggle_handle"]  # kaggle://keras/bert/keras/<preset>/<version>
  version = handle.rsplit("/", 1)[-1]

  def load(name):
    try:
      return convert.load_keras_hub(name)
    except Exception as e:  # pylint: disable=broad-except  # Offline or no network: said the same way.
      import kagglehub.config

      folder = os.path.join("models", *handle.removeprefix("kaggle://").split("/"))
      command = (f"python -c \"import keras_hub; keras_hub.models.BertBackbone.from_preset('{name}'); "
                 f"keras_hub.models.BertTokenizer.from_preset('{name}')\"")
      raise _offline_error(f"{KERAS_HUB}{name}", kagglehub.config.get_cache_folder(), folder, command,
                           "KAGGLEHUB_CACHE", e) from None

  return preset, version, load
