"""bert_tf.export.requests and scripts/predict.py: request building, local runs, and talking to a server.

No TensorFlow Serving here (no Docker, no network): requests are checked field by field against TF Serving's
documented formats, the script runs an export locally, and its --server paths talk to small stand-ins in this
process - an HTTP server and a gRPC PredictionService that answer from the loaded SavedModel. They test the
client's side of the wire (URL, JSON, protos, error handling), not TF Serving.
"""

from __future__ import annotations

import concurrent.futures
import gzip
import http.server
import json
import os
import shutil
import subprocess
import sys
import threading

import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.apis import predict_pb2

import training_helpers as th
from bert_tf.export import requests
from test_serving import LABELS, export_words

SCRIPT = "scripts/predict.py"
PAIRS = [{"sentence1": "The dog sat on the mat.", "sentence2": "A cat is running."},
         {"sentence1": "?", "sentence2": "fox"},
         {"sentence1": "Über quick brown foxes!", "sentence2": "not a dog?"}]


@pytest.fixture(scope="module")
def export(classifier_exports):
  """test_serving's tiny pair classifier, exported as <root>/export/nli/1 (once per session); its loaded serving
  signature."""
  import tensorflow_text  # noqa: F401

  version_dir = classifier_exports["nli"][2]
  signature = tf.saved_model.load(version_dir).signatures["serving_default"]
  return {"root": classifier_exports["root"], "model_dir": os.path.dirname(version_dir), "version_dir": version_dir,
          "signature": signature}


def _run(signature, columns: dict[str, list]) -> dict[str, np.ndarray]:
  return {k: v.numpy() for k, v in signature(**{k: tf.constant(v) for k, v in columns.items()}).items()}


def _assert_rows_match(rows, expected_rows):
  assert len(rows) == len(expected_rows)
  for row, expected in zip(rows, expected_rows):
    assert row["label"] == expected["label"] and row["label_id"] == expected["label_id"]
    np.testing.assert_allclose(row["probabilities"], expected["probabilities"], atol=1e-6)


# -- Requests -------------------------------------------------------------------------------------------------


def test_rest_request_is_tf_servings_row_format():
  assert requests.rest_request([{"sentence1": "a b", "sentence2": "c"}, {"sentence1": "d", "sentence2": ""}]) == {
      "signature_name": "serving_default",
      "instances": [{"sentence1": "a b", "sentence2": "c"}, {"sentence1": "d", "sentence2": ""}]}
  assert requests.rest_request([{"sentence1": "x", "sentence2": None}], signature_name="other") == {
      "signature_name": "other", "instances": [{"sentence1": "x"}]}


def test_instances_must_name_the_same_inputs():
  with pytest.raises(ValueError, match="instance 1 has inputs"):
    requests.rest_request([{"sentence1": "a", "sentence2": "b"}, {"sentence1": "c"}])
  with pytest.raises(ValueError, match="no instances"):
    requests.rest_request([])


def test_rest_url():
  assert requests.rest_url("localhost:8501", "nli") == "http://localhost:8501/v1/models/nli:predict"
  assert requests.rest_url("serving.example", "nli", 3) == (
      "http://serving.example:8501/v1/models/nli/versions/3:predict")
  assert requests.rest_url("https://h:443/", "a b") == "https://h:443/v1/models/a%20b:predict"
  with pytest.raises(ValueError, match="host:port"):
    requests.rest_url("ftp://h", "nli")


def test_grpc_request_fields_and_tensors():
  request = requests.grpc_request("nli", [{"sentence1": "a b", "sentence2": "c"}, {"sentence1": "Ü", "sentence2": ""}],
                                  "serving_default", version=4)
  assert isinstance(request, predict_pb2.PredictRequest)
  assert (request.model_spec.name, request.model_spec.signature_name, request.model_spec.version.value) == (
      "nli", "serving_default", 4)
  assert set(request.inputs) == {"sentence1", "sentence2"}
  for name, values in (("sentence1", [b"a b", "Ü".encode()]), ("sentence2", [b"c", b""])):
    proto = request.inputs[name]
    assert proto.dtype == tf.string.as_datatype_enum
    assert [d.size for d in proto.tensor_shape.dim] == [2]
    assert list(proto.string_val) == values
  assert not requests.grpc_request("nli", [{"sentence1": "x"}]).model_spec.HasField("version")
  ids = requests.grpc_request("nli", [{"input_ids": [2, 7, 3], "input_mask": [1, 1, 1], "segment_ids": [0, 0, 0]}],
                              "encoded")
  assert ids.inputs["input_ids"].dtype == tf.int32.as_datatype_enum
  assert tf.make_ndarray(ids.inputs["input_ids"]).tolist() == [[2, 7, 3]]


def test_rows_from_answers():
  rest = {"predictions": [{"label": "neutral", "label_id": 1, "probabilities": [0.2, 0.5, 0.3]}]}
  assert requests.rows_from_rest(rest) == rest["predictions"]
  assert requests.rows_from_rest({"predictions": [0.5, 1.5]}) == [{"score": 0.5}, {"score": 1.5}]
  with pytest.raises(requests.ServingError, match="no 'predictions'"):
    requests.rows_from_rest({"error": "x"})
  response = predict_pb2.PredictResponse()
  response.outputs["label"].CopyFrom(tf.make_tensor_proto([b"a", b"c"]))
  response.outputs["label_id"].CopyFrom(tf.make_tensor_proto(np.array([0, 2], np.int32)))
  response.outputs["probabilities"].CopyFrom(tf.make_tensor_proto(np.array([[1, 0], [0.5, 0.5]], np.float32)))
  assert requests.rows_from_grpc(response) == [{"label": "a", "label_id": 0, "probabilities": [1.0, 0.0]},
                                               {"label": "c", "label_id": 2, "probabilities": [0.5, 0.5]}]


def test_read_instances(tmp_path):
  tsv = tmp_path / "pairs.tsv"
  tsv.write_text("a dog\ta cat\n\nthe fox\t\n")
  assert requests.read_instances(str(tsv)) == [{"sentence1": "a dog", "sentence2": "a cat"},
                                               {"sentence1": "the fox", "sentence2": ""}]
  jsonl = tmp_path / "pairs.jsonl"
  jsonl.write_text('{"sentence1": "a", "sentence2": "b"}\n{"sentence1": "c", "sentence2": "d", "label": 1}\n')
  assert requests.read_instances(str(jsonl)) == [{"sentence1": "a", "sentence2": "b"},
                                                 {"sentence1": "c", "sentence2": "d"}]
  bad = tmp_path / "bad.tsv"
  bad.write_text("a\tb\tc\n")
  with pytest.raises(ValueError, match=r"bad.tsv:1: 3 tab-separated columns"):
    requests.read_instances(str(bad))
  bad.write_text('{"sentence1": "a"}\n{"text": "b"}\n')
  with pytest.raises(ValueError, match=r'bad.tsv:2: needs a "sentence1"'):
    requests.read_instances(str(bad))
  bad.write_text("a\tb\nc\n")
  with pytest.raises(ValueError, match="instance 1 has inputs"):
    requests.read_instances(str(bad))


def test_a_file_is_read_as_its_examples_are_asked_for(tmp_path):
  """iter_instances and batches: examples come before a later bad line raises; lines end where Python's text
  mode ends them (at a newline, a carriage return and newline, or a lone carriage return)."""
  a, c, e = ({"sentence1": one, "sentence2": two} for one, two in ("ab", "cd", "ef"))
  path = tmp_path / "pairs.tsv"
  path.write_bytes(b"a\tb\r\nc\td\re\tf\n\ng\th\ti\n")
  batches = requests.batches(requests.iter_instances(str(path)), 2)
  assert next(batches) == [a, c]
  with pytest.raises(ValueError, match=r"pairs.tsv:5: 3 tab-separated columns"):
    next(batches)
  path.write_bytes(b"a\tb\nc\td\ne\tf\n")
  assert list(requests.batches(requests.iter_instances(str(path)), 2)) == [[a, c], [e]]
  gzipped = tmp_path / "pairs.tsv.gz"
  gzipped.write_bytes(gzip.compress(b"\na\tb\nc\td\n"))
  assert requests.first_text_line(str(gzipped)) == "a\tb" and list(requests.iter_instances(str(gzipped))) == [a, c]
  path.write_text("\n \n")
  with pytest.raises(ValueError, match="holds no examples"):
    next(requests.iter_instances(str(path)))
  with pytest.raises(ValueError, match="batch size 0"):
    next(requests.batches([], 0))


def test_files_with_a_header_in_your_column_names(tmp_path):
  """Your own test file, as run_classifier.py reads it: CSV (quoted commas and line breaks), TSV, JSON lines."""
  csv_file = tmp_path / "test.csv"
  csv_file.write_text('id,review,title,label\n1,"Good, really.",A film,pos\n2,"Two\nlines",,neg\n')
  pair = requests.columns_for(["sentence1", "sentence2"], "review", "title")
  assert pair == {"sentence1": "review", "sentence2": "title"}
  assert requests.read_table_instances(str(csv_file), pair) == [
      {"sentence1": "Good, really.", "sentence2": "A film"}, {"sentence1": "Two\nlines", "sentence2": ""}]
  single = requests.columns_for(["sentence1"], "review")
  assert requests.read_table_instances(str(csv_file), single) == [{"sentence1": "Good, really."},
                                                                  {"sentence1": "Two\nlines"}]
  # A model of one other input (NER's text): --text_a_column, else the input's own name.
  assert requests.columns_for(["text"], "review") == {"text": "review"} and requests.columns_for(["text"]) == {
      "text": "text"}
  assert requests.columns_for(["context", "question"]) == {"context": "context", "question": "question"}
  # A server's model is unknown: sentence2 where the file has the column.
  tsv = tmp_path / "test.tsv"
  tsv.write_text("sentence1\tlabel\na dog\t1\n")
  assert requests.read_table_instances(str(tsv), requests.columns_for(None), ["sentence2"]) == [
      {"sentence1": "a dog"}]
  jsonl = tmp_path / "test.jsonl"
  jsonl.write_text('{"review": "a", "label": 1}\n{"review": 2}\n')
  with pytest.raises(ValueError, match=r"test.jsonl:2: column 'review' must be text, not int"):
    requests.read_table_instances(str(jsonl), single)
  with pytest.raises(ValueError) as info:
    requests.read_table_instances(str(csv_file), requests.columns_for(["sentence1", "sentence2"], "text"))
  assert str(info.value) == (f"{csv_file}:1: no column 'text' for the model's input 'sentence1' (--text_a_column); "
                             "the header has 'id', 'review', 'title', 'label'")
  bad = tmp_path / "bad.csv"
  bad.write_text("review,label\na,1,extra\n")
  with pytest.raises(ValueError, match=r"bad.csv:2: 3 comma-separated fields, expected 2 as in the header"):
    requests.read_table_instances(str(bad), single)
  bad.write_text("review,label\n")
  with pytest.raises(ValueError, match=r"holds no examples \(only a header\)"):
    requests.read_table_instances(str(bad), single)
  with pytest.raises(ValueError, match="--text_b_column=title: the model takes"):
    requests.columns_for(["text"], None, "title")
  # A model of one input takes its column from --text_a_column too.
  with pytest.raises(ValueError, match=r"test.csv:1: no column 'text' for the model's input 'text' "
                     r"\(--text_a_column\)"):
    requests.read_table_instances(str(csv_file), requests.columns_for(["text"]))


def test_script_names_the_column_flags_for_a_file_of_other_columns(export, tmp_path):
  """Your own file, whose header names other columns than sentence1 and sentence2: the error names the flags that
  choose them, before anything is printed (the model never loads)."""
  tsv, csv_file = tmp_path / "test.tsv", tmp_path / "test.csv"
  tsv.write_text("id\treview\tlabel\n1\tGood.\tpos\n")
  csv_file.write_text("id,review,label\n1,Good.,pos\n")
  from_tsv, from_csv = _scripts(*([f"--saved_model_dir={export['model_dir']}", f"--input_file={path}"]
                                  for path in (tsv, csv_file)))
  assert from_tsv.returncode == 1 and from_tsv.stdout == ""
  assert from_tsv.stderr.splitlines() == [
      f"error: {tsv}:1: 3 tab-separated columns; a file without a header row gives sentence1 and optionally "
      "sentence2 (two columns at most); a file with a header row: name its text columns with --text_a_column (and "
      "--text_b_column for a pair)"]
  assert from_csv.returncode == 1 and from_csv.stdout == ""
  assert from_csv.stderr.splitlines() == [
      f"error: {csv_file}:1: no column 'sentence1' for the model's input 'sentence1' (--text_a_column); the header "
      "has 'id', 'review', 'label'"]


def test_script_reads_your_csv_file_for_the_export(export, tmp_path):
  """The script's flags on a CSV file with a header, and a gzip TSV file read by its header (fast runs:
  --print_request loads no model); and the CSV file read for the export's inputs from its manifest, as the script
  does with --saved_model_dir (run_local on such examples: test_run_local_gives_the_signatures_outputs)."""
  csv_file = tmp_path / "test.csv"
  csv_file.write_text("label,premise,hypothesis\n" + "".join(
      f'x,"{p["sentence1"]}","{p["sentence2"]}"\n' for p in PAIRS))
  tsv_gz = tmp_path / "test.tsv.gz"  # a header of the default column names: read by it
  tsv_gz.write_bytes(gzip.compress(("label\tsentence1\tsentence2\n" + "".join(
      f"x\t{p['sentence1']}\t{p['sentence2']}\n" for p in PAIRS)).encode()))
  result, from_gz = _scripts(["--print_request", f"--input_file={csv_file}", "--text_a_column=premise",
                              "--text_b_column=hypothesis"], ["--print_request", f"--input_file={tsv_gz}"])
  assert result.returncode == 0, result.stderr[-3000:]
  assert json.loads(result.stdout)["instances"] == PAIRS
  assert from_gz.returncode == 0 and json.loads(from_gz.stdout)["instances"] == PAIRS, from_gz.stderr[-3000:]
  names = sorted(requests.signature_inputs(export["model_dir"]))
  instances = requests.read_table_instances(str(csv_file), requests.columns_for(names, "premise", "hypothesis"))
  assert names == ["sentence1", "sentence2"] and instances == PAIRS


def test_unreachable_servers_raise_connection_error():
  port = th.free_ports(1)[0]
  with pytest.raises(ConnectionError, match="cannot reach TensorFlow Serving"):
    requests.post_rest(requests.rest_url(f"127.0.0.1:{port}", "nli"), {"instances": []}, timeout=5)
  with pytest.raises(ConnectionError, match="UNAVAILABLE"):
    requests.send_grpc(f"127.0.0.1:{port}", requests.grpc_request("nli", [{"sentence1": "a"}]), timeout=5)


# -- Running locally ------------------------------------------------------------------------------------------


def test_run_local_gives_the_signatures_outputs(export):
  rows = requests.run_local(export["model_dir"], PAIRS)  # the model folder: its highest version
  outputs = _run(export["signature"], {k: [p[k] for p in PAIRS] for k in ("sentence1", "sentence2")})
  assert [row["label"] for row in rows] == [s.decode() for s in outputs["label"]]
  assert all(row["label"] in LABELS for row in rows)
  np.testing.assert_allclose([row["probabilities"] for row in rows], outputs["probabilities"], atol=1e-6)
  with pytest.raises(ValueError, match="give sentence2 too"):
    requests.run_local(export["version_dir"], [{"sentence1": "a"}])
  with pytest.raises(FileNotFoundError, match="no saved_model.pb"):
    requests.run_local(str(export["root"]), PAIRS)


# -- scripts/predict.py ---------------------------------------------------------------------------------------


def _script(*flags, timeout=240):
  return th.run_python([SCRIPT, *flags], timeout=timeout)


def _lines(result) -> list[dict]:
  assert result.returncode == 0, result.stderr[-3000:]
  return [json.loads(line) for line in result.stdout.splitlines()]


def _scripts(*runs: list[str]) -> list:
  """predict.py once per list of flags, two at a time (two cores): the runs are independent of each other."""
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    return list(pool.map(lambda flags: _script(*flags), runs))


@pytest.mark.slow
def test_script_runs_an_export_locally(export, tmp_path):
  pairs = tmp_path / "pairs.tsv"
  pairs.write_text("".join(f"{p['sentence1']}\t{p['sentence2']}\n" for p in PAIRS))
  from_file, from_flags = _scripts([f"--saved_model_dir={export['model_dir']}", f"--input_file={pairs}"],
                                   [f"--saved_model_dir={export['version_dir']}", "--sentence1=a dog",
                                    "--sentence2=a cat"])
  lines = _lines(from_file)
  assert [{k: line[k] for k in ("sentence1", "sentence2")} for line in lines] == PAIRS
  _assert_rows_match(lines, requests.run_local(export["version_dir"], PAIRS))
  one = _lines(from_flags)
  assert len(one) == 1 and one[0]["label"] in LABELS and set(one[0]) == {
      "sentence1", "sentence2", "label", "label_id", "probabilities"}


def _pairs_tsv(path, n: int) -> list[dict]:
  """`n` different pairs (each row's words spell its number) written to `path` as a headerless TSV file."""
  words = ["the", "dog", "cat", "sat", "on", "mat", "run", "fox", "zebra", "quick"]
  pairs = []
  for i in range(n):
    spelled = " ".join(words[int(digit)] for digit in str(i))
    pairs.append({"sentence1": f"{spelled} sat on the mat.", "sentence2": f"a {spelled[::-1]}"})
  path.write_text("".join(f"{p['sentence1']}\t{p['sentence2']}\n" for p in pairs))
  return pairs


# Runs argv[2:] as a child of this small process and writes the child's peak RSS (KB) to argv[1]. A process's
# ru_maxrss starts at its parent's when the parent's memory is big (it survives fork and exec): a child of the
# pytest worker would report the worker's peak, not its own.
_MEASURE = """
import os, sys
pid = os.fork()
if pid == 0:
  os.execv(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
  f.write(str(usage.ru_maxrss))
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run_measured(flags: list[str], stdout_path) -> tuple[subprocess.CompletedProcess, float]:
  """predict.py in a fresh process, its output into `stdout_path`; and its peak RSS in MB, the kernel's figure
  for that process alone (`_MEASURE`; Linux counts ru_maxrss in KB)."""
  peak = f"{stdout_path}.maxrss"
  with open(stdout_path, "w") as out:
    done = subprocess.run([sys.executable, "-I", "-S", "-c", _MEASURE, peak, sys.executable, SCRIPT, *flags],
                          cwd=th.REPO, env=th.python_env(), stdout=out, stderr=subprocess.PIPE, text=True,
                          timeout=240)
  with open(peak) as f:
    return subprocess.CompletedProcess(done.args, done.returncode, "", done.stderr), int(f.read()) / 1024


@pytest.mark.slow
def test_script_streams_a_long_file_in_bounded_memory(export, tmp_path):
  """predict.py --saved_model_dir --input_file as a user runs it, on 2,000 and 20,000 rows: the longer file's
  peak RSS is within 30 MB of the shorter's (read and run as one batch, the 20,000 rows took about 100 MB more
  than the 2,000 with this model), and each file's every row comes out once, in its order, with the model's outputs."""
  sizes = (2000, 20000)
  pairs = {n: _pairs_tsv(tmp_path / f"pairs{n}.tsv", n) for n in sizes}
  with concurrent.futures.ThreadPoolExecutor(2) as pool:  # two cores; peak RSS is per process
    runs = dict(zip(sizes, pool.map(lambda n: _run_measured(
        [f"--saved_model_dir={export['model_dir']}", f"--input_file={tmp_path / f'pairs{n}.tsv'}"],
        tmp_path / f"out{n}.jsonl"), sizes)))
  for n in sizes:
    result, _ = runs[n]
    assert result.returncode == 0, result.stderr[-3000:]
    with open(tmp_path / f"out{n}.jsonl") as f:
      lines = [json.loads(line) for line in f]
    assert [{k: line[k] for k in ("sentence1", "sentence2")} for line in lines] == pairs[n]
    expected = np.concatenate([
        _run(export["signature"], {k: [p[k] for p in pairs[n][i:i + 1000]] for k in ("sentence1", "sentence2")})[
            "probabilities"] for i in range(0, n, 1000)])
    # Batches of other sizes than the script's: the same outputs up to float rounding (serving.trim_padding).
    np.testing.assert_allclose([line["probabilities"] for line in lines], expected, atol=1e-5)
  (_, short_mb), (_, long_mb) = runs[2000], runs[20000]
  assert long_mb - short_mb < 30, f"peak RSS {short_mb:.0f} MB at 2,000 rows, {long_mb:.0f} MB at 20,000"


def test_script_prints_the_rest_request():
  result = _script("--print_request", "--sentence1=a b", "--sentence2=Ü")
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout) == {"signature_name": "serving_default",
                                       "instances": [{"sentence1": "a b", "sentence2": "Ü"}]}


def test_script_prints_the_grpc_request(tmp_path):
  lines = tmp_path / "in.jsonl"
  lines.write_text('{"sentence1": "a b", "sentence2": "c"}\n{"sentence1": "d", "sentence2": "e"}\n')
  result = _script("--print_request", "--protocol=grpc", "--model_name=nli", "--model_version=2",
                   f"--input_file={lines}")
  assert result.returncode == 0, result.stderr
  printed = text_format.Parse(result.stdout, predict_pb2.PredictRequest())
  assert printed == requests.grpc_request("nli", requests.read_instances(str(lines)), version=2)


@pytest.mark.parametrize("flags, message", [
    ([], "--saved_model_dir"),
    (["--sentence1=a"], "give --saved_model_dir (run the export here) or --server"),
    (["--server=localhost:8501", "--sentence1=a"], "--model_name"),
    (["--saved_model_dir=x", "--server=localhost:8501", "--model_name=m", "--sentence1=a"], "one of them"),
    (["--saved_model_dir=x"], "--sentence1"),
    (["--saved_model_dir=x", "--protocol=grpc", "--sentence1=a"], "--protocol"),
    (["--print_request", "--protocol=grpc", "--sentence1=a"], "--model_name"),
    (["--server=h:1", "--model_name=m", "--model_version=0", "--sentence1=a"], "--model_version"),
    (["--saved_model_dir=x", "--sentence1=a", "--input_file=f"], "--input_file"),
    (["--saved_model_dir=x", "--sentence1=a", "--batch_size=0"], "--batch_size=0: give a positive number"),
    (["--print_request", "--sentence1=a", "--batch_size=8"], "--batch_size applies to running them"),
])
def test_script_names_the_flag_at_fault(flags, message):
  result = _script(*flags, timeout=60)
  assert result.returncode == 1
  assert message in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("name,content", [("pairs.tsv", b"a dog\tthe cat\nok\tfine\n\xff\xfe bad\tx\n"),
                                          ("pairs.jsonl", b'{"sentence1": "a"}\n\n{"sentence1": "caf\xe9"}\n')])
def test_script_names_the_file_and_line_that_is_not_utf8(tmp_path, name, content):
  """Run as a user runs it: from the file's folder, with a relative path."""
  (tmp_path / name).write_bytes(content)
  result = subprocess.run([sys.executable, os.path.join(th.REPO, SCRIPT), "--print_request", f"--input_file={name}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
  assert result.returncode == 1 and result.stdout == ""
  reason = "invalid start byte at byte 0" if name.endswith(".tsv") else "invalid continuation byte at byte 18"
  assert result.stderr.splitlines() == [
      f"error: {name}:3: not valid UTF-8 ({reason} of the line); re-encode the file as UTF-8"]


@pytest.mark.parametrize("protocol", ["rest", "grpc"])
def test_script_reports_an_unreachable_server(protocol):
  port = th.free_ports(1)[0]
  result = _script(f"--server=127.0.0.1:{port}", f"--protocol={protocol}", "--model_name=nli", "--sentence1=a",
                   "--timeout=5", timeout=120)
  assert result.returncode == 1
  assert f"error: --server=127.0.0.1:{port}: cannot reach TensorFlow Serving" in result.stderr
  assert "Traceback" not in result.stderr


# -- The script against stand-ins for TF Serving --------------------------------------------------------------


class _StandIn:
  """Answers TF Serving's REST and gRPC predict calls for model `nli` from the loaded serving signature."""

  def __init__(self, signature):
    self.signature = signature
    self.requests: list = []

  def predict(self, model: str, signature_name: str, columns: dict[str, list]) -> dict[str, np.ndarray]:
    self.requests.append((model, signature_name, columns))
    if model != "nli":
      raise LookupError(f"Servable not found for request: Latest({model})")
    return _run(self.signature, columns)


def _rest_server(stand_in: _StandIn):
  class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
      # /v1/models/<name>[/versions/<v>]:predict
      model = self.path.split("/v1/models/")[1].split(":")[0].split("/")[0]
      body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
      columns = {k: [i[k] for i in body["instances"]] for k in body["instances"][0]}
      try:
        outputs = stand_in.predict(model, body["signature_name"], columns)
        rows = requests._rows(outputs)  # pylint: disable=protected-access
        status, answer = 200, {"predictions": rows}
      except LookupError as e:
        status, answer = 404, {"error": str(e)}
      except tf.errors.InvalidArgumentError as e:
        status, answer = 400, {"error": e.message}
      data = json.dumps(answer).encode()
      self.send_response(status)
      self.send_header("Content-Type", "application/json")
      self.send_header("Content-Length", str(len(data)))
      self.end_headers()
      self.wfile.write(data)

    def log_message(self, *args):
      pass

  server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  return server


def _grpc_server(stand_in: _StandIn):
  import grpc
  from tensorflow_serving.apis import prediction_service_pb2_grpc

  class Servicer(prediction_service_pb2_grpc.PredictionServiceServicer):
    def Predict(self, request, context):  # noqa: N802
      columns = {k: tf.make_ndarray(v).tolist() for k, v in request.inputs.items()}
      try:
        outputs = stand_in.predict(request.model_spec.name, request.model_spec.signature_name, columns)
      except LookupError as e:
        context.abort(grpc.StatusCode.NOT_FOUND, str(e))
      response = predict_pb2.PredictResponse()
      for name, value in outputs.items():
        response.outputs[name].CopyFrom(tf.make_tensor_proto(value))
      return response

  server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=2))
  prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(Servicer(), server)
  port = server.add_insecure_port("127.0.0.1:0")
  server.start()
  return server, port


@pytest.mark.slow
def test_script_talks_rest_and_grpc(export, tmp_path):
  stand_in = _StandIn(export["signature"])
  expected = requests.run_local(export["version_dir"], PAIRS)
  pairs = tmp_path / "pairs.jsonl"
  pairs.write_text("".join(json.dumps(p) + "\n" for p in PAIRS))
  rest = _rest_server(stand_in)
  grpc_server, grpc_port = _grpc_server(stand_in)
  try:
    rest_lines = _lines(_script(f"--server=127.0.0.1:{rest.server_address[1]}", "--model_name=nli",
                                f"--input_file={pairs}"))
    grpc_lines = _lines(_script(f"--server=127.0.0.1:{grpc_port}", "--protocol=grpc", "--model_name=nli",
                                f"--input_file={pairs}", "--batch_size=2"))
    missing = _script(f"--server=127.0.0.1:{rest.server_address[1]}", "--model_name=other", "--sentence1=a")
  finally:
    rest.shutdown()
    grpc_server.stop(0)
  _assert_rows_match(rest_lines, expected)
  _assert_rows_match(grpc_lines, expected)
  columns = {k: [p[k] for p in PAIRS] for k in ("sentence1", "sentence2")}
  assert [(m, s) for m, s, _ in stand_in.requests[:3]] == [("nli", "serving_default")] * 3
  assert stand_in.requests[0][2] == columns
  # gRPC in --batch_size=2 requests: the first two examples, then the third.
  assert [{k: [x.decode() for x in v] for k, v in request[2].items()} for request in stand_in.requests[1:3]] == [
      {k: v[:2] for k, v in columns.items()}, {k: v[2:] for k, v in columns.items()}]
  assert missing.returncode == 1 and "HTTP 404: Servable not found" in missing.stderr


def test_script_sends_a_file_in_batches_and_stops_at_a_bad_row(export, tmp_path):
  """Through a server (REST: the script imports no TensorFlow), --batch_size=3: one request per batch, each
  batch's lines printed as it is answered, in order; a bad row stops the run with one line naming it, after the
  lines of the batches before it."""
  stand_in = _StandIn(export["signature"])
  good, bad = tmp_path / "good.tsv", tmp_path / "bad.tsv"
  pairs = _pairs_tsv(good, 7)
  rows = good.read_text().splitlines()
  rows[5] += "\textra"  # line 6: three columns
  bad.write_text("\n".join(rows) + "\n")
  rest = _rest_server(stand_in)
  try:
    server = [f"--server=127.0.0.1:{rest.server_address[1]}", "--model_name=nli", "--batch_size=3"]
    answered = _lines(_script(*server, f"--input_file={good}", timeout=60))
    sent = [len(columns["sentence1"]) for _, _, columns in stand_in.requests]
    stopped = _script(*server, f"--input_file={bad}", timeout=60)
  finally:
    rest.shutdown()
  assert sent == [3, 3, 1]
  assert [{k: line[k] for k in ("sentence1", "sentence2")} for line in answered] == pairs
  _assert_rows_match(answered, requests.run_local(export["version_dir"], pairs))
  assert stopped.returncode == 1 and len(stand_in.requests) == 4  # the first batch only
  assert [json.loads(line) for line in stopped.stdout.splitlines()] == answered[:3]
  assert stopped.stderr.splitlines() == [
      f"error: {bad}:6: 3 tab-separated columns; a file without a header row gives sentence1 and optionally "
      "sentence2 (two columns at most); a file with a header row: name its text columns with --text_a_column (and "
      "--text_b_column for a pair)"]


# -- Any task's inputs and outputs ----------------------------------------------------------------------------

QA = [{"question": "who ran?", "context": "the dog ran"}, {"question": "Über", "context": "fox"}]


@pytest.fixture(scope="module")
def word_export(tmp_path_factory):
  """test_serving's WordServer (question/context in; answer, words, tokens out) exported as <root>/words/1."""
  return export_words(str(tmp_path_factory.mktemp("words")))


def test_read_instances_with_input_names(tmp_path):
  names = ["question", "context"]
  good = tmp_path / "qa.jsonl"
  good.write_text('{"question": "who?", "context": "a b"}\n\n{"context": "c", "question": ""}\n')
  assert requests.read_instances(str(good), names) == [{"question": "who?", "context": "a b"},
                                                       {"question": "", "context": "c"}]
  bad = tmp_path / "bad.jsonl"
  for content, error in [
      ('{"question": "a", "context": "b"}\n{"question": "c"}\n',
       r"bad.jsonl:2: the model takes exactly \['context', 'question'\]; missing \['context'\]"),
      ('{"question": "a", "context": "b", "label": 1}\n', r"bad.jsonl:1: .*; unexpected \['label'\]"),
      ('{"question": "a", "context": "b"}\n\n{"question": 3, "context": "b"}\n',
       r"bad.jsonl:3: 'question' must be a string, not int"),
      ('{"question": "a", "context": "b"}\n{"question": "a", \n', r"bad.jsonl:2: not a JSON object"),
      ('["a", "b"]\n', r"bad.jsonl:1: a JSON list, not an object"),
      ("who?\ta b\n", r"bad.jsonl:1: not a JSON object"),  # TSV is the classifier's format only
  ]:
    bad.write_text(content)
    with pytest.raises(ValueError, match=error):
      requests.read_instances(str(bad), names)
  # A classifier's names: today's formats, each example checked against them.
  tsv = tmp_path / "pairs.tsv"
  tsv.write_text("a dog\ta cat\nthe fox\n")
  with pytest.raises(ValueError, match=r"pairs.tsv:2: gives \['sentence1'\] but the model takes .*give sentence2"):
    requests.read_instances(str(tsv), ["sentence1", "sentence2"])
  with pytest.raises(ValueError, match=r"pairs.tsv:1: gives \['sentence1', 'sentence2'\] but the model takes "
                     r"\['sentence1'\]"):
    requests.read_instances(str(tsv), ["sentence1"])
  jsonl = tmp_path / "pairs.jsonl"
  jsonl.write_text('{"sentence1": "a", "sentence2": "b", "label": 1}\n')  # other keys ignored, as without names
  assert requests.read_instances(str(jsonl), ["sentence1", "sentence2"]) == [{"sentence1": "a", "sentence2": "b"}]


def test_guess_input_names(tmp_path):
  path = tmp_path / "in.jsonl"
  for content, names in [('\n{"question": "a", "context": "b"}\n', ["context", "question"]),
                         ('{"sentence1": "a", "label": 1}\n', None), ("a\tb\n", None), ("[1]\n", None),
                         ("{bad\n", None)]:
    path.write_text(content)
    assert requests.guess_input_names(str(path)) == names


def test_check_instances():
  assert requests.check_instances([{"a": "x", "b": [1.5, 2]}, {"a": "y", "b": [0, 1], "c": None}], ["b", "a"]) == [
      {"a": "x", "b": [1.5, 2]}, {"a": "y", "b": [0, 1]}]
  with pytest.raises(ValueError, match=r"--instance: has inputs \['a'\] but the signature takes \['a', 'b'\]; "
                     r"missing \['b'\]"):  # one example: no index
    requests.check_instances([{"a": "x"}], ["a", "b"], what="--instance")
  with pytest.raises(ValueError, match=r"--instance 1: has inputs \['a', 'c'\] .*; unexpected \['c'\]"):
    requests.check_instances([{"a": "x", "b": "y"}, {"a": "x", "c": "y"}], ["a", "b"], what="--instance")
  with pytest.raises(ValueError, match=r"instance 1: has inputs \['a', 'b'\] but instance 0 has \['a'\]"):
    requests.check_instances([{"a": "x"}, {"a": "y", "b": "z"}])
  with pytest.raises(ValueError, match="instance: give a non-empty list"):
    requests.check_instances({"a": "x"})


def test_rows_from_rest_names_a_bare_value_output():
  assert requests.rows_from_rest({"predictions": ["A", "B"]}, output_name="answer") == [{"answer": "A"},
                                                                                       {"answer": "B"}]
  assert requests.rows_from_rest({"predictions": [{"answer": "A", "score": 2.5}]}, output_name="answer") == [
      {"answer": "A", "score": 2.5}]


def test_grpc_request_dtypes_follow_values_or_the_signature():
  request = requests.grpc_request("m", [{"s": "a", "i": [1, 2], "f": [0.5, 1], "b": True}])
  assert {name: tf.dtypes.as_dtype(proto.dtype).name for name, proto in request.inputs.items()} == {
      "s": "string", "i": "int32", "f": "float32", "b": "bool"}
  forced = requests.grpc_request("m", [{"i": [1, 2]}], dtypes={"i": tf.int64})
  assert forced.inputs["i"].dtype == tf.int64.as_datatype_enum
  assert tf.make_ndarray(forced.inputs["i"]).tolist() == [[1, 2]]


def test_run_local_gives_string_and_2d_outputs_of_any_task(word_export):
  rows = requests.run_local(word_export, QA)
  assert rows == [{"answer": "WHO RAN?", "tokens": ["the", "dog", "ran"], "words": 13},
                  {"answer": "ÜBER", "tokens": ["fox", "", ""], "words": 11}]
  assert requests.run_local(word_export, [{"text": "a b"}], signature_name="count") == [{"words": 2}]
  with pytest.raises(ValueError, match=r"takes inputs \['context', 'question'\], the examples give \['question'\]"):
    requests.run_local(word_export, [{"question": "a"}])
  with pytest.raises(ValueError, match=r"input 'question': the examples' values \[3\] are not string values"):
    requests.run_local(word_export, [{"question": 3, "context": "a"}])


def test_signature_inputs_from_the_manifest_or_the_saved_model(word_export, tmp_path):
  expected = {"question": "string", "context": "string"}
  assert requests.signature_inputs(os.path.dirname(word_export)) == expected  # the model folder: version 1
  assert requests.signature_inputs(word_export, "count") == {"text": "string"}
  copy = tmp_path / "1"
  shutil.copytree(word_export, copy)
  os.remove(copy / "assets.extra" / "bert_tf_manifest.json")  # an export not written by bert_tf
  assert requests.signature_inputs(str(copy)) == expected
  with pytest.raises(ValueError, match=r"no signature 'encoded'; it has \['count', 'serving_default'\]"):
    requests.signature_inputs(str(copy), "encoded")


@pytest.mark.slow
def test_script_runs_any_tasks_export_locally(word_export, tmp_path):
  expected = requests.run_local(word_export, QA)
  lines = tmp_path / "qa.jsonl"
  lines.write_text("".join(json.dumps(q) + "\n" for q in QA))
  one, two, squad, from_file = (_lines(result) for result in _scripts(
      [f"--saved_model_dir={word_export}", f"--instance={json.dumps(QA[0])}"],
      [f"--saved_model_dir={os.path.dirname(word_export)}", *[f"--instance={json.dumps(q)}" for q in QA]],
      [f"--saved_model_dir={word_export}", "--question=Über", "--context=fox"],
      [f"--saved_model_dir={word_export}", f"--input_file={lines}"]))
  assert one == [{**QA[0], **expected[0]}]
  assert two == [{**q, **row} for q, row in zip(QA, expected)]
  assert squad == [{**QA[1], "answer": "ÜBER", "tokens": ["fox"], "words": 11}]  # alone: no padding
  assert from_file == two


@pytest.mark.parametrize("flags, message", [
    (["--instance={\"question\": \"a\"}"], "--instance: has inputs ['question'] but the signature takes "
                                           "['context', 'question']; missing ['context']"),
    (["--instance={\"question\": \"a\", \"context\": \"b\"}", "--instance={\"question\": \"a\"}"],
     "--instance 1: has inputs ['question']"),
    (["--sentence1=a"], "--sentence1/--sentence2: has inputs ['sentence1'] but the signature takes"),
    (["--instance=[1]"], "--instance: give a non-empty JSON object"),
    (["--instance={\"question\": \"a\", \"context\": \"b\"}", "--instance={bad"], "--instance 1: not JSON"),
    (["--question=a"], "--question and --context go together"),
    (["--instance={\"a\": 1}", "--question=a", "--context=b"], "give examples one way: --instance or "
                                                               "--question/--context, not both"),
])
def test_script_checks_examples_against_the_signature_before_loading(word_export, flags, message):
  result = _script(f"--saved_model_dir={word_export}", *flags, timeout=60)
  assert result.returncode == 1, result.stderr[-2000:]
  assert message in result.stderr and "Traceback" not in result.stderr


def test_script_prints_a_request_of_any_inputs():
  result = _script("--print_request", "--question=Who?", "--context=He ran.")
  assert result.returncode == 0, result.stderr
  assert json.loads(result.stdout) == {"signature_name": "serving_default",
                                       "instances": [{"question": "Who?", "context": "He ran."}]}


def test_an_empty_or_truncated_version_is_one_error_naming_it(export, tmp_path):
  model_dir = tmp_path / "nli"
  (model_dir / "1").mkdir(parents=True)
  with pytest.raises(FileNotFoundError, match=f"its newest version {model_dir / '1'} holds no saved_model.pb"):
    requests.signature_inputs(str(model_dir))
  result = _script(f"--saved_model_dir={model_dir}", "--sentence1=a", "--sentence2=b", timeout=120)
  assert result.returncode == 1 and "Traceback" not in result.stderr
  assert result.stderr.strip().splitlines()[-1] == (
      f"error: --saved_model_dir={model_dir}: its newest version {model_dir / '1'} holds no saved_model.pb (an empty "
      "or half-copied version folder); export again, or give another version")
  shutil.rmtree(model_dir / "1")
  shutil.copytree(export["version_dir"], model_dir / "1")
  with open(model_dir / "1" / "saved_model.pb", "r+b") as f:
    f.truncate(100)
  with pytest.raises(ValueError, match=f"^--saved_model_dir={model_dir / '1'}: cannot be loaded as a SavedModel "
                     r"\(.*\); a truncated or half-copied export: export it again"):
    requests.run_local(str(model_dir), PAIRS)
  os.remove(model_dir / "1" / requests.MANIFEST_PATH)  # inputs then come from saved_model.pb itself
  with pytest.raises(ValueError, match="cannot be loaded as a SavedModel"):
    requests.signature_inputs(str(model_dir))


def test_batches_stay_under_an_exports_request_limit(export, tmp_path):
  """With the export's max_request_chars (its manifest), a batch ends before a text input would exceed it, and an
  example over it alone is named (library); scripts/predict.py says so in one line before the model loads."""
  examples = [{"sentence1": "ab", "sentence2": "c"}, {"sentence1": "abc", "sentence2": ""},
              {"sentence1": "d", "sentence2": "efgh"}, {"sentence1": "i", "sentence2": "j"}]
  assert list(requests.batches(examples, 3, max_chars=5)) == [examples[:2], examples[2:]]
  assert list(requests.batches(examples, 2, max_chars=100)) == [examples[:2], examples[2:]]
  with pytest.raises(ValueError, match=r"^example 2: sentence1 holds 6 characters, over the export's limit of 5 "
                                       r"\(max_request_chars in its manifest\)"):
    list(requests.batches([examples[0], {"sentence1": "abcdef", "sentence2": ""}], 3, max_chars=5))
  assert requests.request_limit(export["model_dir"]) == 500_000
  big = tmp_path / "big.jsonl"
  big.write_text(json.dumps({"sentence1": "a dog", "sentence2": "sat"}) + "\n"
                 + json.dumps({"sentence1": "dog " * 125_001, "sentence2": "sat"}) + "\n")
  refused = _script(f"--saved_model_dir={export['model_dir']}", f"--input_file={big}")
  assert refused.returncode == 1 and refused.stdout == ""
  assert refused.stderr.strip().splitlines()[-1] == (
      "error: example 2: sentence1 holds 500,004 characters, over the export's limit of 500,000 (max_request_chars "
      "in its manifest); shorten it, or export with a larger --max_request_chars")
