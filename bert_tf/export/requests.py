"""Client helpers for any model exported by `bert_tf.export.serving`: requests for TensorFlow Serving's REST and
gRPC APIs, sending them, and running the SavedModel in this process instead.

An instance is one example as a dict of the signature's inputs: strings, numbers or (nested, rectangular) lists
of them, e.g. {"sentence1": "...", "sentence2": "..."} for a classifier (sentence2 only for pair tasks) or
{"question": "...", "context": "..."} for SQuAD. Results are one dict per instance, output name -> value: e.g.
{"probabilities": [K floats], "label_id": int, "label": str} for classification, {"score": float} for
regression; an output of shape [B, ...] gives each instance its [...] part, strings decoded.

TensorFlow is imported only inside the functions that need it (gRPC tensors, running locally): building and
posting a REST request needs only the standard library, so a REST client starts in milliseconds.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import socket
import urllib.error
import urllib.parse
import urllib.request
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, TypeVar

from bert_tf import fileio

DEFAULT_SIGNATURE = "serving_default"
REST_PORT = 8501  # TF Serving's defaults (--rest_api_port, --port), also what its Docker image publishes.
GRPC_PORT = 8500
# The classifier's text inputs (bert_tf.tasks.classification.serving.TEXT_INPUTS).
TEXT_INPUTS = ("sentence1", "sentence2")
MANIFEST_PATH = os.path.join("assets.extra", "bert_tf_manifest.json")  # Where serving.py writes it.
_T = TypeVar("_T")


class ServingError(RuntimeError):
  """The server answered, with an error: unknown model or version, or a request the model rejects."""


# -- Instances ------------------------------------------------------------------------------------------------


def _clean(instances: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
  """Instances without None values; all must name the same inputs."""
  if not instances:
    raise ValueError("no instances: give at least one example")
  cleaned = [{k: v for k, v in instance.items() if v is not None} for instance in instances]
  names = set(cleaned[0])
  for i, instance in enumerate(cleaned):
    if set(instance) != names:
      raise ValueError(f"instance {i} has inputs {sorted(instance)} but instance 0 has {sorted(names)}; give "
                       "every example the same inputs (sentence2 for all or for none)")
  return cleaned


def _columns(instances: Sequence[Mapping[str, Any]]) -> dict[str, list[Any]]:
  cleaned = _clean(instances)
  return {name: [instance[name] for instance in cleaned] for name in cleaned[0]}


def _shape(value: Any, where: str) -> tuple[int, ...]:
  """The shape of a string, number or nested list; ValueError for other types and ragged lists."""
  if isinstance(value, (str, bytes, bool, int, float)):
    return ()
  if isinstance(value, (list, tuple)):
    shapes = {_shape(v, where) for v in value}
    if len(shapes) > 1:
      raise ValueError(f"{where}: a ragged list (items of shapes {sorted(shapes)}); a request holds dense "
                       "tensors, so give lists of equal lengths")
    return (len(value),) + (shapes.pop() if shapes else ())
  raise ValueError(f"{where}: {type(value).__name__} is not an input value; give a string, a number or a list")


def check_instances(instances: Sequence[Mapping[str, Any]], input_names: Sequence[str] | None = None,
                    what: str = "instance") -> list[dict[str, Any]]:
  """`instances` checked before anything is sent or run, and returned without None values.

  Every instance must give the same inputs - exactly `input_names` when given (a signature's inputs) - each a
  string, a number or a list of them, and each input the same shape in every instance: a batch is sent as one
  tensor per input, [B] for scalars, [B, ...] for lists. `what` names the instances in errors
  ("warmup_instances", "--instance", ...), followed by the example's index (from 0) when there are several.
  """
  if isinstance(instances, Mapping) or not isinstance(instances, Sequence) or not instances:
    raise ValueError(f"{what}: give a non-empty list of examples (dicts of input name -> value)")
  label = (lambda i: what) if len(instances) == 1 else (lambda i: f"{what} {i}")
  for i, instance in enumerate(instances):
    if not isinstance(instance, Mapping):
      raise ValueError(f"{label(i)}: {type(instance).__name__}, not a dict of input name -> value")
  cleaned = [{k: v for k, v in instance.items() if v is not None} for instance in instances]
  expected = set(input_names) if input_names is not None else set(cleaned[0])
  for i, instance in enumerate(cleaned):
    if set(instance) != expected:
      missing, extra = sorted(expected - set(instance)), sorted(set(instance) - expected)
      source = "the signature takes" if input_names is not None else f"{what} 0 has"
      raise ValueError(f"{label(i)}: has inputs {sorted(instance)} but {source} {sorted(expected)}"
                       + (f"; missing {missing}" if missing else "") + (f"; unexpected {extra}" if extra else ""))
  for name in sorted(expected):
    shapes = [_shape(instance[name], f"{label(i)} {name!r}") for i, instance in enumerate(cleaned)]
    for i, shape in enumerate(shapes):
      if shape != shapes[0]:
        raise ValueError(f"{label(i)}: {name!r} has shape {list(shape)} but {what} 0's has {list(shapes[0])}; "
                         "a batch is one tensor per input, so give it the same shape in every example")
  return cleaned


def read_instances(path: str, input_names: Sequence[str] | None = None) -> list[dict[str, str]]:
  """Examples from a file: `iter_instances`, all of them."""
  return list(iter_instances(path, input_names))


def iter_instances(path: str, input_names: Sequence[str] | None = None) -> Iterator[dict[str, str]]:
  """Examples from a file, one at a time as they are read: a file of any length in bounded memory.

  Without `input_names` (the classifier): JSON lines with "sentence1" (and "sentence2"; other keys are
  ignored), or TSV with one or two columns (no header). JSON lines are recognised by a first non-blank line
  starting with "{". The same when `input_names` are a classifier's (sentence1 [, sentence2]), with each
  example checked to give exactly those.

  With other `input_names` (a task's signature inputs, e.g. ("question", "context")): JSON lines, one object
  per example with exactly those keys, string values.

  Each line is checked as it is read, so a bad line raises (ValueError naming the file and line) after the
  examples before it were yielded; so does a file without examples, at the first example asked for.
  """
  lines = ((n, line) for n, line in _file_lines(path) if line.strip())
  first = next(lines, None)
  if first is None:
    raise ValueError(f"--input_file={path}: holds no examples")
  lines = itertools.chain([first], lines)
  if input_names is not None and not set(input_names) <= set(TEXT_INPUTS):
    for n, line in lines:
      yield _read_json_instance(path, n, line, input_names)
    return
  read = _read_classifier_json if first[1].lstrip().startswith("{") else _read_tsv
  names: set[str] | None = None  # the first example's inputs, which every other example must give
  for i, (n, line) in enumerate(lines):
    instance = read(path, n, line)
    if input_names is not None and set(instance) != set(input_names):
      raise ValueError(f"{path}:{n}: gives {sorted(instance)} but the model takes {sorted(input_names)}"
                       + (" (a pair task: give sentence2 too)" if len(input_names) == 2 else ""))
    if names is None:
      names = set(instance)
    elif set(instance) != names:
      raise ValueError(f"{path}:{n}: instance {i} has inputs {sorted(instance)} but instance 0 (line {first[0]}) "
                       f"has {sorted(names)}; give every example the same inputs (sentence2 for all or for none)")
    yield instance


def _read_classifier_json(path: str, n: int, line: str) -> dict[str, str]:
  record = _json_object(path, n, line)
  if not isinstance(record.get("sentence1"), str):
    raise ValueError(f'{path}:{n}: needs a "sentence1" string (and optionally "sentence2")')
  if not isinstance(record.get("sentence2", ""), str):
    raise ValueError(f'{path}:{n}: "sentence2" must be a string')
  return {k: record[k] for k in TEXT_INPUTS if k in record}


def _read_tsv(path: str, n: int, line: str) -> dict[str, str]:
  fields = line.split("\t")
  if len(fields) > 2:
    # Most often your own file, whose header names other columns than sentence1 and sentence2.
    raise ValueError(f"{path}:{n}: {len(fields)} tab-separated columns; a file without a header row gives sentence1 "
                     "and optionally sentence2 (two columns at most); a file with a header row: name its text "
                     "columns with --text_a_column (and --text_b_column for a pair)")
  return dict(zip(TEXT_INPUTS, fields))


_LINE_END = re.compile(r"\r\n?|\n")


def _file_lines(path: str) -> Iterator[tuple[int, str]]:
  """(1-based number, text without its line end) per line of a plain or gzip file, split where Python's text
  mode splits ("\\n", "\\r\\n" or a lone "\\r"), decoded a line at a time: bytes that are not UTF-8 raise
  (ValueError naming path:line) after the lines before them were yielded."""
  from bert_tf.data import text_io

  number = 0
  with text_io.open_binary(path) as f:
    for raw in f:
      try:
        text = raw.decode("utf-8")
      except UnicodeDecodeError:
        # The decoder's message names neither the file nor the line; iter_lines raises naming both.
        for _ in text_io.iter_lines(path):
          pass
        raise
      parts = _LINE_END.split(text)
      for part in parts[:-1] if parts[-1] == "" else parts:
        number += 1
        yield number, part


def first_text_line(path: str) -> str:
  """The first non-blank line of a plain or gzip file, without its line end ("" for none); ValueError naming
  path:line for bytes that are not UTF-8 up to it."""
  return next((line for _, line in _file_lines(path) if line.strip()), "")


def batches(instances: Iterable[_T], size: int, max_chars: int | None = None) -> Iterator[list[_T]]:
  """`instances` in lists of `size` (the last may be shorter), read from `instances` only as each list is asked
  for. With `max_chars` (an export's max_request_chars, `limits`), a list also ends before any text input would
  hold more characters over it than that, and an example whose text alone does is a ValueError naming it (its
  number, from 1), the input and the limit."""
  if size < 1:
    raise ValueError(f"batch size {size}: give a positive number of examples per batch")
  iterator = iter(instances)
  if max_chars is None:
    while batch := list(itertools.islice(iterator, size)):
      yield batch
    return
  batch: list[_T] = []
  totals: dict[str, int] = {}
  for number, instance in enumerate(iterator, 1):
    lengths = {name: len(value) for name, value in instance.items() if isinstance(value, str)}
    for name, length in lengths.items():
      if length > max_chars:
        raise ValueError(f"example {number}: {name} holds {length:,} characters, over the export's limit of "
                         f"{max_chars:,} (max_request_chars in its manifest); shorten it, or export with a larger "
                         "--max_request_chars")
    if batch and (len(batch) == size or any(totals.get(name, 0) + n > max_chars for name, n in lengths.items())):
      yield batch
      batch, totals = [], {}
    batch.append(instance)
    for name, length in lengths.items():
      totals[name] = totals.get(name, 0) + length
  if batch:
    yield batch


def request_limit(saved_model_dir: str) -> int | None:
  """The export's max_request_chars (characters per text input per request, `limits`) from its manifest; None for
  an export without one (written before the limit, or not by bert_tf)."""
  manifest = fileio.join(resolve_saved_model_dir(saved_model_dir), MANIFEST_PATH)
  if not fileio.exists(manifest):
    return None
  with fileio.open_file(manifest, "r") as f:
    return json.load(f).get("max_request_chars")


def columns_for(input_names: Sequence[str] | None, text_a_column: str | None = None,
                text_b_column: str | None = None) -> dict[str, str]:
  """Input name -> the column of a file with a header that gives it (`read_table_instances`).

  A classifier (`input_names` sentence1 [, sentence2], or None: a server's, unknown): sentence1 from
  `text_a_column` (default "sentence1"), sentence2 from `text_b_column` (default "sentence2"), as
  run_classifier.py's --text_a_column / --text_b_column read your files. A signature of one input (NER's
  "text"): `text_a_column`, default the input's name. Others (SQuAD's question, context): columns of the
  inputs' names."""
  if input_names is None or set(input_names) <= set(TEXT_INPUTS):
    names = list(input_names) if input_names is not None else list(TEXT_INPUTS)
    given = {"sentence1": text_a_column, "sentence2": text_b_column}
    return {name: given[name] or name for name in TEXT_INPUTS if name in names}
  if text_b_column is not None:
    raise ValueError(f"--text_b_column={text_b_column}: the model takes {sorted(input_names)}, not a text pair")
  if len(input_names) == 1:
    return {input_names[0]: text_a_column or input_names[0]}
  if text_a_column is not None:
    raise ValueError(f"--text_a_column={text_a_column}: the model takes {sorted(input_names)}; name the file's "
                     "columns after them")
  return {name: name for name in input_names}


def read_table_instances(path: str, columns: Mapping[str, str], optional: Sequence[str] = ()) -> list[dict[str, str]]:
  """Examples from a file with a header row: `iter_table_instances`, all of them."""
  return list(iter_table_instances(path, columns, optional))


def iter_table_instances(path: str, columns: Mapping[str, str],
                         optional: Sequence[str] = ()) -> Iterator[dict[str, str]]:
  """Examples from a CSV or TSV file with a header row, or JSON lines, in your own column names - a test file as
  run_classifier.py reads it (`text_io.read_table`; the extension names the format, .gz allowed) - one at a time
  as they are read; other columns (a label, an id) are ignored. `columns`: input name -> column (`columns_for`);
  an input in `optional` is left out when the file lacks its column (a classifier's sentence2, where the model is
  unknown). Errors name the file and line; the header's, and a file without examples, at the first example asked
  for; a bad row's after the examples before it were yielded."""
  from bert_tf.data import text_io

  table = text_io.read_table(path, text_io.file_format(path, "--input_file"))
  wanted = dict(columns)
  any_rows = False
  for line, row in table.rows:
    if not any_rows:
      for name in optional:
        if columns[name] not in row:
          del wanted[name]
    for name, column in wanted.items():
      if column not in row:
        at, there = (table.header_line, "the header has") if table.header is not None else (line, "it has")
        # columns_for takes a one-input model's column, such as NER's text, from --text_a_column too.
        flag = (" (--text_b_column)" if name == "sentence2" else
                " (--text_a_column)" if name == "sentence1" or len(columns) == 1 else "")
        raise ValueError(f"{path}:{at}: no column {column!r} for the model's input {name!r}{flag}; {there} "
                         f"{', '.join(repr(c) for c in (table.header or row))}")
      if not isinstance(row[column], str):
        raise ValueError(f"{path}:{line}: column {column!r} must be text, not {type(row[column]).__name__}")
    any_rows = True
    yield {name: row[column] for name, column in wanted.items()}
  if not any_rows:
    raise ValueError(f"--input_file={path}: holds no examples" + (" (only a header)" if table.header else ""))


def guess_input_names(path: str) -> list[str] | None:
  """The keys of the first example of a JSON-lines file, when it is not a classifier's (no "sentence1"): the
  input names to read it with (`read_instances`) for a client that cannot ask the model, such as one of a
  server. None for TSV, classifier files and a first line that is not a JSON object (`read_instances` then
  says what is wrong with it)."""
  try:
    record = json.loads(first_text_line(path))
  except json.JSONDecodeError:
    return None
  if not isinstance(record, dict) or not record or "sentence1" in record:
    return None
  return sorted(record)


def _json_object(path: str, n: int, line: str) -> dict[str, Any]:
  try:
    record = json.loads(line)
  except json.JSONDecodeError as e:
    raise ValueError(f"{path}:{n}: not a JSON object ({e.msg}); give one object per line") from None
  if not isinstance(record, dict):
    raise ValueError(f"{path}:{n}: a JSON {type(record).__name__}, not an object; give one object per line")
  return record


def _read_json_instance(path: str, n: int, line: str, input_names: Sequence[str]) -> dict[str, str]:
  record = _json_object(path, n, line)
  missing, extra = sorted(set(input_names) - set(record)), sorted(set(record) - set(input_names))
  if missing or extra:
    raise ValueError(f"{path}:{n}: the model takes exactly {sorted(input_names)}"
                     + (f"; missing {missing}" if missing else "") + (f"; unexpected {extra}" if extra else ""))
  for name in input_names:
    if not isinstance(record[name], str):
      raise ValueError(f"{path}:{n}: {name!r} must be a string, not {type(record[name]).__name__}")
  return {name: record[name] for name in input_names}


# -- REST -----------------------------------------------------------------------------------------------------


def rest_request(instances: Sequence[Mapping[str, Any]], signature_name: str = DEFAULT_SIGNATURE) -> dict:
  """The JSON body of a REST predict request, in TF Serving's row format: {"signature_name": ...,
  "instances": [{"sentence1": ..., "sentence2": ...}, ...]}."""
  return {"signature_name": signature_name, "instances": _clean(instances)}


def rest_url(server: str, model_name: str, version: int | None = None) -> str:
  """`host[:port]` (or an http(s):// URL) -> http://host:port/v1/models/<name>[/versions/<v>]:predict; the port
  defaults to 8501."""
  if not server:
    raise ValueError("no server: give host:port, e.g. localhost:8501")
  parsed = urllib.parse.urlsplit(server if "://" in server else f"http://{server}")
  if parsed.scheme not in ("http", "https") or not parsed.hostname:
    raise ValueError(f"server={server!r}: give host:port (e.g. localhost:8501) or an http(s):// URL")
  netloc = parsed.netloc if parsed.port else f"{parsed.netloc}:{REST_PORT}"
  path = f"/v1/models/{urllib.parse.quote(model_name, safe='')}"
  if version is not None:
    path += f"/versions/{int(version)}"
  return f"{parsed.scheme}://{netloc}{parsed.path.rstrip('/')}{path}:predict"


def post_rest(url: str, body: Mapping[str, Any], timeout: float = 30.0) -> dict:
  """POSTs `body` as JSON to `url` and returns the decoded JSON answer.

  Raises ConnectionError when nothing answers at `url` (within `timeout` seconds), ServingError when the server
  answers with an error (its message included).
  """
  request = urllib.request.Request(url, data=json.dumps(body).encode("utf-8"), method="POST",
                                   headers={"Content-Type": "application/json"})
  try:
    with urllib.request.urlopen(request, timeout=timeout) as response:
      return json.loads(response.read().decode("utf-8"))
  except urllib.error.HTTPError as e:
    text = e.read().decode("utf-8", errors="replace")
    try:
      message = json.loads(text).get("error", text)
    except (json.JSONDecodeError, AttributeError):
      message = text
    raise ServingError(f"{url}: HTTP {e.code}: {str(message).strip()[:2000]}") from None
  except (urllib.error.URLError, ConnectionError, socket.timeout, TimeoutError) as e:
    reason = getattr(e, "reason", e)
    raise ConnectionError(f"cannot reach TensorFlow Serving at {url} ({reason}); is the server running, and is "
                          f"its REST port (default {REST_PORT}) published?") from None


def rows_from_rest(response: Mapping[str, Any], output_name: str = "score") -> list[dict[str, Any]]:
  """A REST predict answer -> one dict per instance. TF Serving answers a one-output signature with bare
  values, which are named `output_name` here: a classifier's one-output signature is regression's, `score`."""
  if "predictions" not in response:
    raise ServingError(f"unexpected answer (no 'predictions'): {json.dumps(response)[:500]}")
  return [row if isinstance(row, dict) else {output_name: row} for row in response["predictions"]]


# -- gRPC -----------------------------------------------------------------------------------------------------


def _dtype_name(values: Sequence[Any]) -> str:
  """The tensor dtype for a column of instance values: strings, bools, floats if any value is one, else int32
  (the dtype of every integer input exported here: the `encoded` signature's ids)."""
  leaves, stack = [], list(values)
  while stack:
    value = stack.pop()
    if isinstance(value, (list, tuple)):
      stack.extend(value)
    else:
      leaves.append(value)
  if any(isinstance(v, (str, bytes)) for v in leaves) or not leaves:
    return "string"
  if all(isinstance(v, bool) for v in leaves):
    return "bool"
  return "float32" if any(isinstance(v, float) for v in leaves) else "int32"


def grpc_request(model_name: str, texts: Sequence[Mapping[str, Any]], signature_name: str = DEFAULT_SIGNATURE,
                 version: int | None = None, dtypes: Mapping[str, Any] | None = None):
  """A `predict_pb2.PredictRequest` for `texts`, instances as for `rest_request`: each input becomes one
  tensor over the batch, tf.string [B] for text (int32 [B, L] for the `encoded` signature's ids).

  `dtypes` (input name -> tf.DType or its name, e.g. a signature's) overrides the dtype guessed from the values
  (strings -> string, floats -> float32, other numbers -> int32)."""
  import tensorflow as tf
  from tensorflow_serving.apis import predict_pb2

  request = predict_pb2.PredictRequest()
  request.model_spec.name = model_name
  request.model_spec.signature_name = signature_name
  if version is not None:
    request.model_spec.version.value = int(version)
  for name, values in _columns(texts).items():
    dtype = tf.dtypes.as_dtype((dtypes or {}).get(name) or _dtype_name(values))
    request.inputs[name].CopyFrom(tf.make_tensor_proto(values, dtype=dtype))
  return request


def send_grpc(target: str, request, timeout: float = 30.0):
  """Sends a PredictRequest to `host:port` (TF Serving's gRPC port, default 8500); returns the PredictResponse.

  Raises ConnectionError when nothing answers (within `timeout` seconds), ServingError for an error answer.
  """
  import grpc
  from tensorflow_serving.apis import prediction_service_pb2_grpc

  with grpc.insecure_channel(target) as channel:
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    try:
      return stub.Predict(request, timeout=timeout)
    except grpc.RpcError as e:
      code = e.code()
      if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        raise ConnectionError(f"cannot reach TensorFlow Serving at {target} ({code.name}: {e.details()}); is the "
                              f"server running, and is its gRPC port (default {GRPC_PORT}) published?") from None
      raise ServingError(f"{target}: {code.name}: {e.details()}") from None


def rows_from_grpc(response) -> list[dict[str, Any]]:
  """A PredictResponse -> one dict per instance."""
  import tensorflow as tf

  return _rows({name: tf.make_ndarray(proto) for name, proto in response.outputs.items()})


# -- Local ----------------------------------------------------------------------------------------------------


def _python(value):
  if hasattr(value, "tolist"):  # numpy arrays and scalars
    value = value.tolist()
  if isinstance(value, bytes):
    return value.decode("utf-8", errors="replace")
  if isinstance(value, list):
    return [_python(v) for v in value]
  return value


def _rows(outputs: Mapping[str, Any]) -> list[dict[str, Any]]:
  """Batched outputs {name: array [B, ...]} of any rank >= 1 and dtype -> B dicts of Python values (strings
  decoded, [...] parts as nested lists)."""
  scalars = sorted(name for name, values in outputs.items() if not getattr(values, "shape", (None,)))
  if scalars:
    raise ServingError(f"outputs {scalars} are scalars, not batches [B, ...]: export outputs with a batch axis")
  batch = {len(values) for values in outputs.values()}
  if len(batch) != 1:
    raise ServingError(f"outputs of different batch sizes: { {k: len(v) for k, v in outputs.items()} }")
  return [{name: _python(values[i]) for name, values in sorted(outputs.items())} for i in range(batch.pop())]


def _refusal(error: Exception) -> str:
  """The message of a model's tf.debugging assertion ("question must be valid UTF-8"), else the error's first
  line."""
  from bert_tf.errors import first_line

  return assertion_message(error) or first_line(error)[:500]


def assertion_message(error: Exception) -> str | None:
  """The message of a tf.debugging assertion that `error` reports ("question must be valid UTF-8"), else None."""
  import re

  found = re.search(r"assertion failed: \[([^\]]*)\]", getattr(error, "message", "") or str(error))
  return found.group(1) if found else None


def version_numbers(model_dir: str) -> list[int]:
  """The numeric version folders of a model folder `<export_dir>/<model_name>`, the ones TF Serving loads (none
  when it does not exist)."""
  return [int(n) for n in fileio.listdir(model_dir) if n.isdigit()] if fileio.isdir(model_dir) else []


def resolve_saved_model_dir(path: str) -> str:
  """A version folder (holding saved_model.pb) as is; a model folder `<export_dir>/<name>` -> its highest
  numeric version, the one TF Serving would serve."""
  if fileio.exists(fileio.join(path, "saved_model.pb")):
    return path
  versions = version_numbers(path)
  if not versions:
    raise FileNotFoundError(f"--saved_model_dir={path}: holds no saved_model.pb and no numeric version folders; "
                            "give <export_dir>/<model_name> or one of its versions")
  version = fileio.join(path, str(max(versions)))
  if not fileio.exists(fileio.join(version, "saved_model.pb")):
    raise FileNotFoundError(f"--saved_model_dir={path}: its newest version {version} holds no saved_model.pb (an "
                            "empty or half-copied version folder); export again, or give another version")
  return version


def _unreadable(path: str, error: Exception) -> ValueError:
  """A SavedModel that TensorFlow cannot parse (a truncated saved_model.pb, a half-copied version)."""
  from bert_tf.errors import first_line

  return ValueError(f"--saved_model_dir={path}: cannot be loaded as a SavedModel ({first_line(error)[:300]}); a "
                    "truncated or half-copied export: export it again")


def signature_inputs(saved_model_dir: str, signature_name: str = DEFAULT_SIGNATURE) -> dict[str, str]:
  """Input name -> dtype name of a signature of an export (a version folder, or a model folder: its highest
  version), without loading the model: from the manifest bert_tf writes, else from saved_model.pb."""
  path = resolve_saved_model_dir(saved_model_dir)
  manifest = fileio.join(path, MANIFEST_PATH)
  if fileio.exists(manifest):
    with fileio.open_file(manifest, "r") as f:
      signatures = json.load(f).get("signatures", {})
    described = {key: {name: info["dtype"] for name, info in sig["inputs"].items()}
                 for key, sig in signatures.items()}
  else:
    import tensorflow as tf
    from tensorflow.python.tools import saved_model_utils

    try:
      meta_graph = saved_model_utils.get_meta_graph_def(path, "serve")
    except (OSError, RuntimeError) as e:
      raise _unreadable(path, e) from None
    described = {key: {name: tf.dtypes.as_dtype(info.dtype).name for name, info in sig.inputs.items()}
                 for key, sig in meta_graph.signature_def.items() if not key.startswith("__")}
  if signature_name not in described:
    raise ValueError(f"{saved_model_dir}: no signature {signature_name!r}; it has {sorted(described)}")
  return described[signature_name]


def run_local(saved_model_dir: str, instances: Sequence[Mapping[str, Any]],
              signature_name: str = DEFAULT_SIGNATURE) -> list[dict[str, Any]]:
  """Runs a signature of the SavedModel in this process; one dict per instance, as a server would answer.
  Outputs may have any rank >= 1 (batch first) and any dtype; strings are decoded."""
  return local_runner(saved_model_dir, signature_name)(instances)


def local_runner(saved_model_dir: str, signature_name: str = DEFAULT_SIGNATURE
                 ) -> Callable[[Sequence[Mapping[str, Any]]], list[dict[str, Any]]]:
  """Loads the SavedModel once and returns `run(instances)`, which runs one batch of instances through the
  signature as `run_local` does: for a file of examples run batch by batch (scripts/predict.py --input_file)."""
  import tensorflow as tf
  import tensorflow_text  # noqa: F401  Registers the tokenizer's ops, which the SavedModel's graph uses.

  path = resolve_saved_model_dir(saved_model_dir)
  try:
    loaded = tf.saved_model.load(path)
  except (OSError, RuntimeError, tf.errors.OpError) as e:
    raise _unreadable(path, e) from None
  if signature_name not in loaded.signatures:
    raise ValueError(f"{saved_model_dir}: no signature {signature_name!r}; it has {sorted(loaded.signatures)}")
  specs = loaded.signatures[signature_name].structured_input_signature[1]

  def run(instances: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    columns = _columns(instances)
    if set(columns) != set(specs):
      raise ValueError(f"the model's {signature_name!r} takes inputs {sorted(specs)}, the examples give "
                       f"{sorted(columns)}" + (" (a pair task: give sentence2 too)" if "sentence2" in specs else ""))
    tensors = {}
    for name, values in columns.items():
      try:
        tensors[name] = tf.constant(values, specs[name].dtype)
      except (TypeError, ValueError) as e:
        raise ValueError(f"input {name!r}: the examples' values {values!r:.200} are not {specs[name].dtype.name} "
                         f"values of one shape ({str(e).splitlines()[0][:200]})") from None
    try:
      # Called through `loaded`, which owns the variables the signature reads, so that they live as long as run.
      outputs = loaded.signatures[signature_name](**tensors)
    except tf.errors.InvalidArgumentError as e:
      # The model's own checks (invalid UTF-8, batch sizes, ids out of range): what the server answers with HTTP
      # 400, as one line.
      raise ValueError(f"the model refused the examples: {_refusal(e)}") from None
    return _rows({name: value.numpy() for name, value in outputs.items()})

  return run
