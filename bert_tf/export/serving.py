"""The one export path for TensorFlow Serving, which every task's SavedModel goes through.

`export_servable` writes any task's `tf.Module` (the classifier, SQuAD, SWAG and NER call it from their
`bert_tf/tasks/<task>/serving.py`): the versioned layout, the atomic write, the warmup requests, the op audit and
the manifest are the same for every task; a task brings its module, its signatures (raw text in, tokenized in
the graph), its warmup examples and its own manifest fields ("task", "task_kind" and whatever its clients
need). Layout, the one TensorFlow Serving polls (`--model_base_path=<export_dir>/<model_name>`):

  <export_dir>/<model_name>/<version>/
    saved_model.pb, variables/             the task's signatures (`serving_default`: text in)
    assets.extra/tf_serving_warmup_requests   PredictionLog records TF Serving replays at load time
    assets.extra/bert_tf_manifest.json        task, labels, signatures, versions, custom ops, serving image
    assets.extra/vocab.txt                    for clients of `encoded` that tokenize themselves (optional for
                                              other tasks)

A version is written under a hidden temporary name (`.<version>.tmp-*`, which Serving ignores: it loads
numeric names only) and renamed into place, so Serving never loads half a model. Object stores (gs://) have
no directory rename: there the finished version is copied object by object, `saved_model.pb` last, so a
Serving poll that comes too early finds no SavedModel and retries (docs/gcs.md).

What every task's signatures share: each batch runs at its own length, padded to its longest sequence rounded
up to a multiple of 8 (`trim_padding`), not to max_seq_length, with the same outputs within 1e-6; an `encoded`
signature (ids in) checks its inputs with `checked_encoded_inputs`.

saved_model_cli (TensorFlow 2.20) has no option to load op libraries. `show --dir <version> --all` works (it
reads the protos; its list of concrete functions says N/A because of the custom ops). `run` fails for every
signature with "Op type not registered 'RegexSplitWithOffsets'", since importing the graph needs every op of
the function library. It runs when tensorflow_text is imported first:

  python -c "$SAVED_MODEL_CLI_WITH_TF_TEXT" run --dir <version> --tag_set serve \
      --signature_def serving_default --input_exprs 'sentence1=["a b"];sentence2=["c"]'

with SAVED_MODEL_CLI_WITH_TF_TEXT below (tests/test_serving.py runs exactly this).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import site
import subprocess
import sys
from typing import Any, Callable, Mapping, Sequence

import tensorflow as tf
import tensorflow_text as tf_text
from absl import logging

from bert_tf import errors, fileio
from bert_tf.export import requests as serving_requests
from bert_tf.training import checkpointing, run_lock

SERVING_SIGNATURE = "serving_default"
ENCODED_SIGNATURE = "encoded"
ASSETS_EXTRA = "assets.extra"
WARMUP_FILE = "tf_serving_warmup_requests"  # The name and place TF Serving looks for.
MANIFEST_FILE = "bert_tf_manifest.json"
VOCAB_FILE = "vocab.txt"
MAX_WARMUP_RECORDS = 1000  # TF Serving's limit.
# `python -c` code that is saved_model_cli with tensorflow-text's ops registered; arguments follow the code.
SAVED_MODEL_CLI_WITH_TF_TEXT = ("import sys, tensorflow_text; from tensorflow.python.tools import saved_model_cli; "
                                "sys.argv[0] = 'saved_model_cli'; saved_model_cli.main()")


# -- Padding: each batch is cut to its longest request ---------------------------------------------------------

# The serving functions pad a batch to its longest sequence rounded up to this, not to max_seq_length: a
# batch-1 request of 20 tokens costs the encoder 24 positions, not 128 (about half the time for MiniLM at
# 128; bench/README.md, "Serving speed"). Rounding up bounds the number of shapes the ops see (16 at T=128):
# fewer oneDNN primitives to create and cache, fewer compilations where a server turns XLA on; it costs at most
# 7 positions.
LENGTH_MULTIPLE = 8


def trim_padding(features: Mapping[str, tf.Tensor], multiple: int = LENGTH_MULTIPLE) -> dict[str, tf.Tensor]:
  """int32 [..., T] input_ids, input_mask, segment_ids -> [..., L]: cut after the last real token of the
  longest sequence (input_mask's last 1 anywhere in the batch), rounded up to a multiple of `multiple`, at most
  T, at least 1.

  Exact: the positions cut are padding in every sequence, which attention gives zero weight (a bias of -10000
  underflows to 0 in the softmax), so every real position's output is the padded computation's, up to the
  order of float additions (within 1e-6 here). Used by every task's text signature whose outputs do not have
  the padded length."""
  mask = features["input_mask"]
  width = tf.shape(mask)[-1]
  positions = tf.range(1, width + 1)  # [T]: the length a sequence has if its last real token is here
  last = tf.reduce_max(tf.where(mask > 0, positions, 0))  # 0 for an empty batch or all-padding
  length = tf.minimum((tf.maximum(last, 1) + multiple - 1) // multiple * multiple, width)
  return {name: value[..., :length] for name, value in features.items()}


# -- Bounded memory: the encoder runs a request's sequences a slice at a time -----------------------------------

# Sequences are run through the encoder at most this many tokens (rows x padded length) at a time, so the
# activations of one step - attention's [rows, heads, L, L] scores above all - have a size that does not grow
# with the request: a long document's hundreds of windows cost the time of all of them and the memory of one
# slice. A batch of 32 sequences of 128 tokens (4,096) runs in one step, as it would unsliced.
ENCODER_TOKENS_PER_STEP = 16384


def in_slices(fn: Callable[[dict[str, tf.Tensor]], dict[str, tf.Tensor]], features: Mapping[str, tf.Tensor],
              output_dtypes: Mapping[str, tf.DType], tokens_per_step: int | None = None) -> dict[str, tf.Tensor]:
  """`fn(features)`, computed on consecutive slices of rows, one after the other, and concatenated.

  features: int32 [N, ..., L] tensors (input_ids, input_mask, segment_ids; SWAG's are [N, choices, L]); each
    step takes max(1, tokens_per_step // (tokens of a row)) rows of them.
  fn: the model's call on such a slice -> {name: [rows, ...]} of `output_dtypes`.
  Returns {name: [N, ...]}: what `fn` gives on all N rows at once, row for row (each row's result does not
  depend on the others'). N = 0 runs `fn` once on the empty slice. `tokens_per_step` None:
  ENCODER_TOKENS_PER_STEP as it is when the signature is traced."""
  tokens_per_step = tokens_per_step or ENCODER_TOKENS_PER_STEP
  shape = tf.shape(features["input_ids"])
  rows, width = shape[0], tf.reduce_prod(shape[1:])  # width: the tokens of one row
  step = tf.maximum(tokens_per_step // tf.maximum(width, 1), 1)
  steps = tf.maximum((rows + step - 1) // step, 1)
  arrays = {name: tf.TensorArray(dtype, size=steps, infer_shape=False) for name, dtype in output_dtypes.items()}
  tails = {}  # each output's static shape past the rows, read while the body is traced, for the signature

  def body(i, arrays):
    begin = i * step
    size = tf.minimum(step, rows - begin)
    outputs = fn({name: value[begin:begin + size] for name, value in features.items()})
    tails.update((name, outputs[name].shape[1:]) for name in arrays)
    return i + 1, {name: arrays[name].write(i, outputs[name]) for name in arrays}

  # One step at a time (parallel_iterations=1): steps running side by side would add up their memory again.
  _, arrays = tf.while_loop(lambda i, _: i < steps, body, (tf.constant(0), arrays), parallel_iterations=1)
  results = {}
  for name, array in arrays.items():
    results[name] = array.concat()
    results[name].set_shape(tf.TensorShape([None]).concatenate(tails[name]))
  return results


# -- Requests: what a text signature refuses ------------------------------------------------------------------

def checked_text(name: str, text: tf.Tensor, max_chars: int, allow_blank: bool = False) -> tf.Tensor:
  """A text signature's input `name` (tf.string [B]) behind in-graph checks, each an InvalidArgument error naming
  the field (TF Serving answers HTTP 400 / INVALID_ARGUMENT): valid UTF-8; at most `max_chars` characters over
  the whole batch (the export's limit, in its manifest as max_request_chars); and unless `allow_blank`, no row
  that is empty or holds only whitespace and control characters (training refuses such rows too), the first such
  row named."""
  from bert_tf.data.graph_tokenizer import _RE_VALID_UTF8

  valid = tf.reduce_all(tf.strings.regex_full_match(text, _RE_VALID_UTF8))
  checks = [tf.debugging.Assert(valid, [f"{name} must be valid UTF-8"])]
  with tf.control_dependencies(checks):  # the length is only counted in valid UTF-8
    chars = tf.reduce_sum(tf.strings.length(text, unit="UTF8_CHAR"))
    # One string as the assertion's data: a client reads one bracketed message ("assertion failed: [...]").
    checks.append(tf.debugging.Assert(chars <= max_chars, [tf.strings.format(
        f"{name}: {{}} characters in this request, over the request limit of {max_chars:,} set at export "
        f"(max_request_chars in the manifest); send fewer or shorter texts, or export with a larger "
        f"--max_request_chars", chars)]))
  if not allow_blank:
    # Whitespace and control characters: what the tokenizer drops; a row of them alone has no token.
    blank = tf.strings.regex_full_match(text, "(?s)[\\s\\p{Z}\\p{Cc}\\p{Cf}\\x{FFFD}]*")
    rows = tf.range(tf.size(blank))
    first = tf.reduce_min(tf.where(blank, rows, tf.size(blank)))  # the first blank row (any batch, even empty)
    checks.append(tf.debugging.Assert(~tf.reduce_any(blank), [tf.strings.format(
        f"{name} is empty or blank (only whitespace or control characters) in row {{}} of the batch (counting "
        "from 0); send text there", first)]))
  with tf.control_dependencies(checks):
    return tf.identity(text)


# -- The `encoded` signature's checks, shared by every task ---------------------------------------------------


def checked_encoded_inputs(config: Any, input_ids: tf.Tensor, input_mask: tf.Tensor,
                           segment_ids: tf.Tensor) -> dict[str, tf.Tensor]:
  """The `encoded` signature's int32 [B, L] inputs, behind in-graph checks against the model's `config`
  (a BertConfig): equal shapes, 1 <= L <= max_position_embeddings, ids in [0, vocab_size), segment ids in
  [0, type_vocab_size), mask values 0 or 1. A bad request fails with InvalidArgument naming the input (on GPUs
  an out-of-range gather returns zeros silently, so the checks are not redundant). Every task's `encoded`
  signature calls this."""
  shape = tf.shape(input_ids)
  checks = [
      tf.debugging.assert_equal(tf.shape(input_mask), shape,
                                message="input_mask must have the shape of input_ids [batch, length]"),
      tf.debugging.assert_equal(tf.shape(segment_ids), shape,
                                message="segment_ids must have the shape of input_ids [batch, length]"),
      tf.debugging.assert_positive(shape[1], message="sequences must hold at least one token ([CLS])"),
      tf.debugging.assert_less_equal(
          shape[1], config.max_position_embeddings,
          message=f"sequence length must be at most max_position_embeddings={config.max_position_embeddings}"),
      tf.debugging.assert_non_negative(input_ids, message="input_ids must be >= 0"),
      tf.debugging.assert_less(input_ids, config.vocab_size,
                               message=f"input_ids must be < vocab_size={config.vocab_size}"),
      tf.debugging.assert_non_negative(segment_ids, message="segment_ids must be >= 0"),
      tf.debugging.assert_less(segment_ids, config.type_vocab_size,
                               message=f"segment_ids must be < type_vocab_size={config.type_vocab_size}"),
      tf.debugging.assert_non_negative(input_mask, message="input_mask must be 0 or 1"),
      tf.debugging.assert_less_equal(input_mask, 1, message="input_mask must be 0 or 1"),
  ]
  with tf.control_dependencies(checks):  # Nothing downstream runs on a request that fails them.
    return {"input_ids": tf.identity(input_ids), "input_mask": tf.identity(input_mask),
            "segment_ids": tf.identity(segment_ids)}


# -- Versions and the atomic write ----------------------------------------------------------------------------


def next_version(model_dir: str) -> int:
  """1 + the largest numeric version under `<export_dir>/<model_name>`, or 1 when there is none."""
  return max(serving_requests.version_numbers(model_dir), default=0) + 1


# A served model's name: its folder under the model root, and a segment of TF Serving's REST path
# /v1/models/<name>, which takes any characters but '/' and ':'. Kept to characters that need no quoting in a URL
# or a shell; a leading '.' would make a hidden folder ("." and ".." no folder at all).
MODEL_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


def check_name_and_version(model_name: str, version: int | None) -> None:
  """ValueError unless `model_name` is a plain folder name (MODEL_NAME) and `version` None or a positive int; a
  task's export calls it before loading anything."""
  if not isinstance(model_name, str) or not MODEL_NAME.fullmatch(model_name):
    raise ValueError(f"model_name={model_name!r}: give a plain folder name (A-Z, a-z, 0-9, '-', '_', and '.' after "
                     "the first character)")
  # bool is an int in Python; True as a version is a mistake, not version 1.
  if version is not None and (not isinstance(version, int) or isinstance(version, bool) or version < 1):
    raise ValueError(f"version={version!r}: must be a positive integer (TF Serving loads numeric folders)")


def check_export_dir(export_dir: str, model_name: str) -> None:
  """ValueError when `<export_dir>/<model_name>`, or a folder above it, is a file (local paths); a task's export
  calls it before loading anything."""
  if fileio.is_remote(export_dir):
    return
  path = os.path.abspath(os.path.join(export_dir, model_name))
  while not os.path.isdir(path):
    if os.path.exists(path):
      raise ValueError(f"--export_dir={export_dir}: {path} is a file, not a folder; give a folder (TF Serving's "
                       "model root, created if missing)")
    if os.path.dirname(path) == path:
      break
    path = os.path.dirname(path)


def _write_new_dir(build: Callable[[str], None], final: str) -> None:
  """`build(path)` under a hidden temporary name (`.<version>.tmp-*`: Serving loads numeric names only), then
  published as `final`, which must not exist (it could be a version that Serving is serving). Locally the publish
  is one rename; object stores (gs://) have no rename, so there it is `_publish_objects`."""
  if tf.io.gfile.exists(final):
    raise ValueError(f"{final} already exists and TF Serving may be serving it; pass another version, or none "
                     "to take the next free one")
  temp = fileio.temp_path_for(final)
  try:
    build(temp)
    if fileio.is_remote(final):
      _publish_objects(temp, final)
    else:
      os.rename(temp, final)  # Fails, rather than merging, if another export took this version meanwhile.
  finally:
    if tf.io.gfile.exists(temp):
      tf.io.gfile.rmtree(temp)


def _publish_objects(temp: str, final: str) -> None:
  """Copies the complete version at `temp` to `final` object by object (a server-side copy on GCS), with
  `saved_model.pb` last. A Serving poll that sees the numeric folder before then finds no SavedModel, fails that
  load and retries it later (TF Serving retries failed loads; under its default policy the previous version
  keeps serving meanwhile); once `saved_model.pb` exists, every file it refers to is already in place."""
  if tf.io.gfile.exists(final):  # Checked again, as close to the copy as possible: no atomic test-and-set here.
    raise ValueError(f"{final} was written by another export meanwhile; export again to take the next version")
  files = [f"{folder.rstrip('/')}/{name}" for folder, _, names in tf.io.gfile.walk(temp) for name in names]
  graph = f"{temp}/saved_model.pb"
  for path in sorted(files, key=lambda p: (p == graph, p)):
    tf.io.gfile.copy(path, final + path[len(temp):], overwrite=False)


# -- Warmup ---------------------------------------------------------------------------------------------------


def check_warmup_instances(instances: Sequence[Mapping[str, Any]],
                           input_names: Sequence[str] | None = None) -> list[dict[str, Any]]:
  """A task's warmup examples checked against its serving signature's `input_names` (all of them, nothing
  else; strings, numbers or lists, each input the same shape in every example), and their number against TF
  Serving's limit. Returns them without None values. A task's export calls this before building anything; a
  warmup request that fails makes TF Serving refuse to load the version."""
  cleaned = serving_requests.check_instances(instances, input_names, what="warmup_instances")
  records = len(cleaned) + (len(cleaned) > 1)
  if records > MAX_WARMUP_RECORDS:
    raise ValueError(f"{len(cleaned)} warmup examples make {records} requests; TF Serving reads at most "
                     f"{MAX_WARMUP_RECORDS}: give fewer")
  return cleaned


def traced_as_saved(function: Any) -> Any:
  """The concrete function of a signature function (a tf.function with an input_signature, or a concrete function
  as it is), traced as `tf.saved_model.save` traces it.

  tf.saved_model.save traces a module's functions in its save context, and a tf.function's cache keeps traces of
  that context apart from others: a signature traced outside it before the save (to read its inputs, to run the
  warmup requests) was traced twice, and the serving signature's trace (tokenizer, encoder, head) is most of an
  export's time for a small model. Traced here in the same context, it is traced once: the save takes this trace
  from the function's cache, so the warmup requests run the very graph the SavedModel holds. TensorFlow has no
  public name for that context; `save_context` is its module in TensorFlow 2.20 (pinned: requirements.txt)."""
  from tensorflow.python.saved_model import save_context, save_options

  if isinstance(function, tf.types.experimental.ConcreteFunction):
    return function
  try:
    with save_context.save_context(save_options.SaveOptions()):
      return function.get_concrete_function()
  except (AttributeError, TypeError, ValueError) as e:
    raise ValueError(f"signature function {function!r}: give a tf.function with an input_signature (or a "
                     f"concrete function) ({errors.first_line(e)})") from None


def signature_input_specs(function: Any) -> dict[str, tf.TensorSpec]:
  """Input name -> TensorSpec of a signature function (a tf.function with an input_signature, or a concrete
  function), named as the saved signature will name them: the TensorSpec's name, else the argument's."""
  concrete = traced_as_saved(function)
  args, kwargs = concrete.structured_input_signature
  specs = {spec.name: spec for spec in args}
  specs.update({name: spec for name, spec in kwargs.items()})
  return specs


def _run_warmup(function: Any, specs: Mapping[str, tf.TensorSpec], instances: Sequence[Mapping[str, Any]],
                signature_name: str) -> None:
  """Runs the batch of all warmup examples through the in-memory signature: TF Serving refuses to load a version
  whose warmup request fails, so a failing one is an export error, not a deployment one."""
  concrete = traced_as_saved(function)
  try:
    concrete(**{name: tf.constant([instance[name] for instance in instances], spec.dtype)
                for name, spec in specs.items()})
  except (tf.errors.OpError, TypeError, ValueError) as e:
    # An in-graph check's own message (a blank text, the request limit) says more than the error's first line.
    raise ValueError(f"warmup_instances: {signature_name!r} fails on them "
                     f"({serving_requests.assertion_message(e) or errors.first_line(e)}); TF Serving "
                     "would refuse to load the version: give examples the signature accepts") from None


def write_warmup_requests(path: str, model_name: str, instances: Sequence[Mapping[str, Any]],
                          signature_name: str = SERVING_SIGNATURE,
                          dtypes: Mapping[str, Any] | None = None) -> int:
  """Writes TF Serving's warmup file: a TFRecord of PredictionLog(predict_log=PredictLog(request=...)) for
  `signature_name`, one request per instance and, with several instances, one holding them all (so a batch
  shape is warmed too). `dtypes`: input name -> dtype, the signature's (default: guessed from the values).
  Returns the number of records."""
  from tensorflow_serving.apis import prediction_log_pb2

  batches = [[instance] for instance in instances]
  if len(instances) > 1:
    batches.append(list(instances))
  if len(batches) > MAX_WARMUP_RECORDS:
    raise ValueError(f"{len(instances)} warmup texts make {len(batches)} requests; TF Serving reads at most "
                     f"{MAX_WARMUP_RECORDS}: give fewer")
  with tf.io.TFRecordWriter(path) as writer:
    for batch in batches:
      request = serving_requests.grpc_request(model_name, batch, signature_name, dtypes=dtypes)
      log = prediction_log_pb2.PredictionLog(predict_log=prediction_log_pb2.PredictLog(request=request))
      # `inputs` is a protobuf map, whose default serialization order varies between processes: the
      # deterministic form makes the same export the same bytes (a re-export can be compared or skipped).
      writer.write(log.SerializeToString(deterministic=True))
  return len(batches)


# -- The manifest ---------------------------------------------------------------------------------------------

# Run with `python -I` (no PYTHONPATH, no current directory): a process in which only TensorFlow itself has
# registered ops, so whatever it does not know is an op that the server must link in separately. It prints
# every op it has registered.
_CORE_OP_CHECK = """
import json
import tensorflow
from tensorflow.core.framework import op_def_pb2
from tensorflow.python.client import pywrap_tf_session
ops = op_def_pb2.OpList()
ops.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
print(json.dumps(sorted(op.name for op in ops.op)))
"""


def saved_model_op_types(saved_model_dir: str) -> set[str]:
  """Op types of every node of the SavedModel's graphs and of all functions in their libraries (nested calls
  included: every function the graph can call is in the library). Calls of library functions are left out."""
  from tensorflow.core.protobuf import saved_model_pb2

  saved_model = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as f:
    saved_model.ParseFromString(f.read())
  ops: set[str] = set()
  for meta_graph in saved_model.meta_graphs:
    library = meta_graph.graph_def.library
    functions = {function.signature.name for function in library.function}
    ops.update(node.op for node in meta_graph.graph_def.node)
    for function in library.function:
      ops.update(node.op for node in function.node_def)
    ops -= functions
  return ops


@functools.lru_cache(maxsize=None)
def core_op_types() -> frozenset[str]:
  """Every op type that a Python process importing only `tensorflow` (not tensorflow_text) registers.

  Asking costs a TensorFlow start-up (seconds of CPU), and the answer depends only on the TensorFlow
  installation, so it is kept in <fileio.cache_dir()>/core_ops/<key>.json, the key naming this interpreter,
  TensorFlow's version and folder, and the size and modification time of each of its op-registering libraries
  and plugins (`_core_ops_key`): reinstalling or upgrading TensorFlow asks again. A kept list is used only when
  it is plausible (`_kept_core_ops`); else it is said in one warning line, asked again and written over (whole or
  not at all). A cache that cannot be written is passed over (asked again, and not kept)."""
  key = _core_ops_key()
  path = os.path.join(fileio.cache_dir(), "core_ops", f"{key}.json")
  try:
    kept = _kept_core_ops(path, key)
  except FileNotFoundError:
    kept = None  # none kept yet
  except (OSError, ValueError) as e:
    logging.warning("%s: %s; listing core TensorFlow's op types again", path, e)
    kept = None
  if kept is not None:
    return kept
  ops = _ask_core_op_types()
  listed = sorted(ops)
  try:
    fileio.write_text_atomic(path, json.dumps({"key": key, "tensorflow": tf.__version__, "ops": listed,
                                               "sha256": _digest(listed)}))
  except OSError as e:
    logging.debug("core op list not cached at %s: %s", path, e)
  return ops


# Ops every TensorFlow registers: a core list without one of them is not one.
_ALWAYS_CORE = ("Const", "Identity", "MatMul", "NoOp", "Placeholder")


def _digest(ops: Sequence[str]) -> str:
  return hashlib.sha256("\n".join(ops).encode("utf-8")).hexdigest()


def _kept_core_ops(path: str, key: str) -> frozenset[str]:
  """The core op list kept at `path`; ValueError saying why it is not plausible (a damaged or hand-made file would
  make a manifest call tensorflow-text's ops core TensorFlow's, or the reverse): it must parse, carry this `key` and
  TensorFlow version and the SHA-256 of its list, hold the ops every TensorFlow has, and only ops this process has
  registered (it imports TensorFlow and tensorflow-text: core TensorFlow's are among them)."""
  from tensorflow.core.framework import op_def_pb2
  from tensorflow.python.client import pywrap_tf_session

  with open(path, encoding="utf-8") as f:
    try:
      kept = json.load(f)
    except ValueError as e:
      raise ValueError(f"not JSON ({e})") from None
  ops = kept.get("ops") if isinstance(kept, dict) else None
  if not isinstance(ops, list) or not ops or not all(isinstance(op, str) for op in ops):
    raise ValueError("no list of op names")
  if kept.get("key") != key or kept.get("tensorflow") != tf.__version__:
    raise ValueError("written for another TensorFlow installation")
  if kept.get("sha256") != _digest(ops):
    raise ValueError("its list does not match its SHA-256" if "sha256" in kept else "no SHA-256 of its list")
  missing = [op for op in _ALWAYS_CORE if op not in ops]
  if missing:
    raise ValueError(f"lacks {', '.join(missing)}, which every TensorFlow registers")
  registered = op_def_pb2.OpList()
  registered.ParseFromString(pywrap_tf_session.TF_GetBuffer(pywrap_tf_session.TF_GetAllOpList()))
  unknown = set(ops) - {op.name for op in registered.op}
  if unknown:
    shown = ", ".join(sorted(unknown)[:3]) + (", ..." if len(unknown) > 3 else "")
    raise ValueError(f"lists {len(unknown)} op types this TensorFlow does not register ({shown})")
  return frozenset(ops)


def _core_ops_key() -> str:
  """What the core op list depends on: the interpreter, TensorFlow's version and folder, and the libraries that
  register ops when it is imported (its own shared objects, and the plugins of every tensorflow-plugins folder
  that TensorFlow loads at import), each by name, size and modification time."""
  tf_dir = os.path.dirname(os.path.realpath(tf.__file__))
  libraries = [os.path.join(tf_dir, name) for name in os.listdir(tf_dir)]
  libraries += [os.path.join(tf_dir, "python", name) for name in os.listdir(os.path.join(tf_dir, "python"))]
  # TensorFlow's __init__ loads every tensorflow-plugins folder of its site-packages folders.
  site_dirs = getattr(site, "getsitepackages", list)()  # some virtualenvs' site module has none
  for site_dir in {os.path.dirname(tf_dir), *site_dirs, *(p for p in sys.path if "site-packages" in p)}:
    plugins = os.path.join(site_dir, "tensorflow-plugins")
    if os.path.isdir(plugins):
      libraries += [os.path.join(plugins, name) for name in os.listdir(plugins)]
  parts = [os.path.realpath(sys.executable), tf.__version__, tf_dir]
  for library in sorted(libraries):
    if ".so" in os.path.basename(library) or library.endswith((".dylib", ".dll", ".pyd")):
      try:
        stat = os.stat(library)
      except OSError:  # a dangling link: nothing TensorFlow can load
        continue
      parts.append(f"{library}:{stat.st_size}:{stat.st_mtime_ns}")
  return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()[:32]


def _ask_core_op_types() -> frozenset[str]:
  """The op types that a fresh `python -I` process importing only `tensorflow` registers."""
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
  result = subprocess.run([sys.executable, "-I", "-c", _CORE_OP_CHECK], capture_output=True, text=True, env=env,
                          timeout=600)
  if result.returncode != 0:
    raise RuntimeError(f"listing core TensorFlow's op types failed:\n{result.stderr[-3000:]}")
  return frozenset(json.loads(result.stdout.strip().splitlines()[-1]))


def ops_missing_from_core(op_types: Sequence[str]) -> list[str]:
  """The op types that a Python process importing only `tensorflow` (not tensorflow_text) has not registered."""
  return sorted(set(op_types) - core_op_types())


def _signature_summary(saved_model_dir: str) -> dict[str, Any]:
  """Input and output names, dtypes and shapes (-1: any) of each signature, read back from the SavedModel."""
  from tensorflow.python.tools import saved_model_utils

  meta_graph = saved_model_utils.get_meta_graph_def(saved_model_dir, "serve")

  def describe(infos):
    return {name: {"dtype": tf.dtypes.as_dtype(info.dtype).name,
                   "shape": [dim.size for dim in info.tensor_shape.dim]}
            for name, info in sorted(infos.items())}

  # `__saved_model_init_op` is TensorFlow's own entry (the initializer), not a signature clients call.
  return {key: {"inputs": describe(sig.inputs), "outputs": describe(sig.outputs)}
          for key, sig in sorted(meta_graph.signature_def.items()) if not key.startswith("__")}


# The fields every export's manifest has, computed by `export_servable`; a task's fields may not use these names.
COMMON_MANIFEST_KEYS = ("model_name", "version", "signatures", "warmup_records", "vocab_file", "tensorflow",
                        "tensorflow_text", "custom_ops", "serving_image", "note", "fingerprint")
# The task kinds exported today; `task_kind` tells a client which outputs to expect (the signatures say how).
TASK_KINDS = ("classification", "regression", "squad", "multiple_choice", "ner")
_CUSTOM_OPS_NOTE = (
    "custom_ops are ops of this graph that core TensorFlow does not register: tensorflow-text's. The TensorFlow "
    "Serving model server links the tensorflow-text ops of its own TensorFlow version "
    "(tensorflow_serving/model_servers/BUILD), so serve with the image of the `tensorflow` version above; another "
    "version may lack an op or attribute and fail to load the model. In Python, `import tensorflow_text` before "
    "tf.saved_model.load.")
_CORE_OPS_NOTE = (
    "custom_ops is empty: every op of this graph is core TensorFlow's. Serve with the image of the `tensorflow` "
    "version above (or a newer one).")


def common_manifest(saved_model_dir: str, model_name: str, version: int, num_warmup_records: int,
                    vocab_copied: bool, fingerprint: str | None = None) -> dict[str, Any]:
  """The manifest fields every export has, read from the SavedModel at `saved_model_dir` (COMMON_MANIFEST_KEYS;
  vocab_file only when a vocabulary was copied; `fingerprint`: `export_fingerprint`'s)."""
  custom_ops = ops_missing_from_core(sorted(saved_model_op_types(saved_model_dir)))
  return {
      "model_name": model_name,
      "version": version,
      "signatures": _signature_summary(saved_model_dir),
      "warmup_records": num_warmup_records,
      **({"vocab_file": f"{ASSETS_EXTRA}/{VOCAB_FILE}"} if vocab_copied else {}),
      "tensorflow": tf.__version__,
      "tensorflow_text": tf_text.__version__,
      "custom_ops": custom_ops,
      "serving_image": f"tensorflow/serving:{tf.__version__}",
      "note": _CUSTOM_OPS_NOTE if custom_ops else _CORE_OPS_NOTE,
      "fingerprint": fingerprint,
  }


def export_fingerprint(server: tf.Module, signature_names: Sequence[str], warmup: Sequence[Mapping[str, Any]],
                       warmup_signature: str, manifest: Mapping[str, Any], vocab_file: str | None) -> str | None:
  """SHA-256 of what a version written by `export_servable` serves: the values of every variable `server` tracks
  (the weights; not the random state of Keras' seed generators, which differs on every load and serving never
  reads), the task's manifest fields, the signature names, the warmup requests, the vocabulary's bytes and
  the versions of TensorFlow, tensorflow-text and bert_tf that build the graph. Two exports with the same
  fingerprint write the same model; None when `server` tracks no variable (nothing to tell weights by)."""
  import numpy as np

  from bert_tf import __version__

  # Keras' SeedGenerator states (dropout's) start from a fresh random seed at every load and play no part in
  # serving (dropout is off): hashing them gave every export of one folder a new fingerprint, so a new version.
  variables = [v for v in server.variables if not _is_seed_state(v)]
  if not variables:
    return None
  digest = hashlib.sha256(json.dumps(
      {"manifest": manifest, "signatures": sorted(signature_names), "warmup": list(warmup),
       "warmup_signature": warmup_signature, "tensorflow": tf.__version__, "tensorflow_text": tf_text.__version__,
       "bert_tf": __version__}, sort_keys=True, default=str).encode())
  for variable in variables:  # tf.Module lists them in a fixed order (attribute names, sorted)
    value = np.ascontiguousarray(variable.numpy())
    digest.update(f"{value.dtype.str}{value.shape}".encode())
    digest.update(value.tobytes())
  if vocab_file is not None:
    with tf.io.gfile.GFile(vocab_file, "rb") as f:
      digest.update(f.read())
  return digest.hexdigest()


def _is_seed_state(variable) -> bool:
  """Whether `variable` is a Keras SeedGenerator's state ("<generator>/seed_generator_state:0")."""
  return variable.name.split(":")[0].rsplit("/", 1)[-1] == "seed_generator_state"


def _same_as_newest(model_dir: str, fingerprint: str | None) -> str | None:
  """The newest version of `model_dir` when it is whole (saved_model.pb) and its manifest holds `fingerprint`."""
  versions = serving_requests.version_numbers(model_dir)
  if fingerprint is None or not versions:
    return None
  newest = os.path.join(model_dir, str(max(versions)))
  try:
    same = read_manifest(newest).get("fingerprint") == fingerprint
  except (OSError, ValueError, tf.errors.NotFoundError):
    return None
  return newest if same and tf.io.gfile.exists(os.path.join(newest, "saved_model.pb")) else None


def _check_task_manifest(manifest: Mapping[str, Any]) -> None:
  if not isinstance(manifest, Mapping):
    raise ValueError(f"manifest: a {type(manifest).__name__}; give a dict of the task's fields")
  for key in ("task", "task_kind"):
    if not isinstance(manifest.get(key), str) or not manifest[key]:
      raise ValueError(f"manifest: needs a non-empty string {key!r} (task: the task's name, e.g. 'squad' or "
                       f"'mrpc'; task_kind: what its outputs are, one of {list(TASK_KINDS)} or a new kind)")
  clashes = sorted(set(manifest) & set(COMMON_MANIFEST_KEYS))
  if clashes:
    raise ValueError(f"manifest: {clashes} are computed by the export (COMMON_MANIFEST_KEYS); rename the "
                     "task's fields")
  try:
    json.dumps(manifest)
  except (TypeError, ValueError) as e:
    raise ValueError(f"manifest: not JSON-serializable ({e}); give strings, numbers, lists and dicts") from None


def _merge_manifest(task: Mapping[str, Any], common: Mapping[str, Any]) -> dict[str, Any]:
  """Name and version first, then the task's fields, then the rest of the common ones."""
  head = {key: common[key] for key in ("model_name", "version")}
  return {**head, **task, **{k: v for k, v in common.items() if k not in head}}


# -- Export ---------------------------------------------------------------------------------------------------


def export_servable(server: tf.Module, signatures: Mapping[str, Any], export_dir: str, model_name: str,
                    version: int | None, warmup_instances: Sequence[Mapping[str, Any]],
                    manifest: Mapping[str, Any], vocab_file: str | None = None,
                    warmup_signature: str = SERVING_SIGNATURE) -> str:
  """Writes `<export_dir>/<model_name>/<version>/` for TensorFlow Serving, for any task; returns that path.

  Args:
    server: the SavedModel's root; it must track every variable the signatures read.
    signatures: signature name -> tf.function with an input_signature (or a concrete function) of `server`,
      as `tf.saved_model.save` takes them; must hold `warmup_signature`. Outputs must be batched [B, ...].
    export_dir: TF Serving's model root (local or gs://).
    model_name: the name clients use (REST URL, gRPC model_spec.name); a folder name, no "/".
    version: a positive integer; None takes 1 + the largest existing version (or 1), unless the newest version
      already serves exactly this export (`export_fingerprint`, in its manifest): then nothing is written and
      that version's path is returned (a rerun of a finished run publishes no duplicate). An existing version is
      never overwritten.
    warmup_instances: at least one example, each a dict of `warmup_signature`'s inputs (strings, numbers or
      lists); written as warmup requests, one per example and one batch of all (see
      `check_warmup_instances`). Checked against the signature's inputs, and run through it once (as a
      batch) before anything is written.
    manifest: the task's fields, JSON-serializable; must hold "task" and "task_kind" (TASK_KINDS) and none of
      COMMON_MANIFEST_KEYS, which are added here.
    vocab_file: copied to assets.extra/vocab.txt when given (the manifest then names it in "vocab_file").
    warmup_signature: the signature the warmup requests call.

  Locally the version is written under a hidden temporary name and renamed into place (TF Serving loads
  numeric names only, so it never sees half a model); on gs:// it is written in place. One export at a time
  holds the model folder's `.lock` (another is refused, naming it); the hidden folder of an export that was
  killed is removed by the next export to the same model.
  """
  check_name_and_version(model_name, version)
  check_export_dir(export_dir, model_name)
  _check_task_manifest(manifest)
  if not isinstance(signatures, Mapping) or warmup_signature not in signatures:
    names = sorted(signatures) if isinstance(signatures, Mapping) else signatures
    raise ValueError(f"signatures {names}: no {warmup_signature!r} for the warmup requests; add it or pass "
                     "warmup_signature=")
  specs = signature_input_specs(signatures[warmup_signature])
  warmup = check_warmup_instances(warmup_instances, list(specs))
  _run_warmup(signatures[warmup_signature], specs, warmup, warmup_signature)
  if vocab_file is not None and not tf.io.gfile.exists(vocab_file):
    raise FileNotFoundError(f"vocab_file={vocab_file}: no such file")
  model_dir = os.path.join(export_dir, model_name)

  def build(path: str) -> None:
    tf.saved_model.save(server, path, signatures=dict(signatures))
    extra = os.path.join(path, ASSETS_EXTRA)
    tf.io.gfile.makedirs(extra)
    if vocab_file is not None:
      tf.io.gfile.copy(vocab_file, os.path.join(extra, VOCAB_FILE), overwrite=True)
    records = write_warmup_requests(os.path.join(extra, WARMUP_FILE), model_name, warmup, warmup_signature,
                                    dtypes={name: spec.dtype for name, spec in specs.items()})
    common = common_manifest(path, model_name, version, records, vocab_copied=vocab_file is not None,
                             fingerprint=fingerprint)
    with tf.io.gfile.GFile(os.path.join(extra, MANIFEST_FILE), "w") as f:
      f.write(json.dumps(_merge_manifest(manifest, common), indent=2) + "\n")

  fingerprint = export_fingerprint(server, list(signatures), warmup, warmup_signature, manifest, vocab_file)
  tf.io.gfile.makedirs(model_dir)
  # One export at a time per model folder (`.lock`, which TF Serving ignores: it loads numeric names only), so
  # the hidden version folders an export killed mid-write left are known dead and removed here.
  # Its flags name the folder (export.py, export_<task>.py and every run script's --export_dir share them).
  with run_lock.RunLock(model_dir, instead="give another --model_name or --export_dir"):
    for path in checkpointing.remove_export_leftovers(model_dir):
      logging.warning("removed %s, left by an interrupted export", path)
    if version is None:
      same = _same_as_newest(model_dir, fingerprint)
      if same is not None:
        logging.info("%s already serves this model (the same weights, settings and warmup; fingerprint %s): "
                     "published no new version", same, fingerprint[:12])
        return same
      version = next_version(model_dir)
    _check_same_kind_as_before(model_dir, model_name, version, manifest)
    final = os.path.join(model_dir, str(version))
    _write_new_dir(build, final)
  logging.info("exported %s version %d to %s", model_name, version, final)
  return final


def _check_same_kind_as_before(model_dir: str, model_name: str, version: int, manifest: Mapping[str, Any]) -> None:
  """ValueError when the newest version below `version` was exported here as another kind of task (or another
  pair/single input): TF Serving would serve the new version under the same name, and every client of
  `model_name` would get other inputs and outputs. Versions without a manifest (not written here) pass."""
  below = [v for v in serving_requests.version_numbers(model_dir) if v < version]
  if not below:
    return
  previous = os.path.join(model_dir, str(max(below)))
  try:
    before = read_manifest(previous)
  except (OSError, ValueError, tf.errors.NotFoundError):
    return
  keys = ("task_kind", "is_pair")
  if any(before.get(k) != manifest.get(k) for k in keys):
    def describe(m):
      return ", ".join(f"{k} {m.get(k)!r}" for k in keys if k in m) + f" (task {m.get('task')!r})"

    raise ValueError(f"{previous} was exported as {describe(before)}; version {version} would be "
                     f"{describe(manifest)}, and TF Serving would answer clients of {model_name!r} with it. Give "
                     "another --model_name (or remove the old versions)")


def read_manifest(saved_model_dir: str) -> dict[str, Any]:
  with tf.io.gfile.GFile(os.path.join(saved_model_dir, ASSETS_EXTRA, MANIFEST_FILE), "r") as f:
    return json.loads(f.read())
