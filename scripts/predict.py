"""Runs an exported model of any task, locally or through TensorFlow Serving; see docs/serving.md.

Prints one JSON line per example: its inputs and the model's outputs (a classifier: label, label_id,
probabilities, or score for regression; SQuAD: answer, score, start_char, end_char, null_score_diff; ...).

  # In this process, from the export (a version folder, or the model folder: its highest version):
  python scripts/predict.py --saved_model_dir=export/mrpc --sentence1="He ran." --sentence2="He was running."
  python scripts/predict.py --saved_model_dir=export/squad --question="Who ran?" --context="He ran."
  python scripts/predict.py --saved_model_dir=export/squad --instance='{"question": "Who?", "context": "He."}'
  # Through TF Serving's REST port, or its gRPC port:
  python scripts/predict.py --server=localhost:8501 --model_name=mrpc --input_file=pairs.tsv
  python scripts/predict.py --server=localhost:8500 --protocol=grpc --model_name=mrpc --input_file=pairs.jsonl
  # Show the request instead of sending it (e.g. for curl -d @-):
  python scripts/predict.py --print_request --sentence1="He ran." --sentence2="He was running."

Examples come one way: --sentence1/--sentence2 (a classifier), --question/--context (SQuAD), --instance (JSON
objects of any signature's inputs) or --input_file. Your own test file (CSV or TSV with a header row, as
run_classifier.py reads it) works as it is: name its text columns with --text_a_column / --text_b_column:

  python scripts/predict.py --saved_model_dir=export/reviews --input_file=test.csv --text_a_column=review

With --saved_model_dir the examples are checked against the signature's inputs (from the export's manifest)
before the model is loaded.
"""

import json
import sys

from absl import flags

from bert_tf import cli
from bert_tf.export import requests

FLAGS = flags.FLAGS
flags.DEFINE_string("saved_model_dir", None, "Run this export here: <export_dir>/<model_name>[/<version>].")
flags.DEFINE_string("server", None, "TF Serving's host:port: the REST port (8501) or, with --protocol=grpc, "
                    "the gRPC port (8500).")
flags.DEFINE_string("model_name", None, "The model's name on the server (with --server, or --protocol=grpc).")
flags.DEFINE_integer("model_version", None, "A version on the server; default the one it serves (the newest).")
flags.DEFINE_enum("protocol", "rest", ["rest", "grpc"], "How to talk to --server.")
flags.DEFINE_string("sentence1", None, "One example's first (or only) sentence.")
flags.DEFINE_string("sentence2", None, "One example's second sentence (pair tasks).")
flags.DEFINE_string("question", None, "SQuAD: one example's question (with --context).")
flags.DEFINE_string("context", None, "SQuAD: one example's passage (with --question).")
flags.DEFINE_multi_string("instance", None, "One example as a JSON object of the signature's inputs, e.g. "
                          '\'{"question": "Who ran?", "context": "He ran."}\'; repeat the flag for several.')
flags.DEFINE_string("input_file", None, "Examples: TSV with one or two columns (no header), or JSON lines with "
                    '"sentence1" and optionally "sentence2" (a classifier), or JSON lines with exactly the '
                    "signature's inputs (any task); or your own CSV/TSV file with a header row (a .csv file; a .tsv "
                    "file whose first line names a column; any with --text_a_column/--text_b_column), its other "
                    "columns (e.g. the label) ignored.")
flags.DEFINE_string("text_a_column", None, "--input_file's column of the (first) text, as run_classifier.py's flag "
                    "(default sentence1; for a model of one text input, such as NER's, that input's name).")
flags.DEFINE_string("text_b_column", None, "--input_file's column of the second text (pair tasks; default "
                    "sentence2).")
flags.DEFINE_bool("print_request", False, "Print the REST JSON body (or, with --protocol=grpc, the gRPC "
                  "PredictRequest as text) and exit without sending it.")
flags.DEFINE_float("timeout", 30.0, "Seconds to wait for --server.")

_SOURCES = ("--input_file", "--instance", "--sentence1/--sentence2", "--question/--context")


def _source() -> str:
  """The one way examples are given, checked before anything is read."""
  given = {"--input_file": FLAGS.input_file is not None, "--instance": bool(FLAGS.instance),
           "--sentence1/--sentence2": FLAGS.sentence1 is not None or FLAGS.sentence2 is not None,
           "--question/--context": FLAGS.question is not None or FLAGS.context is not None}
  named = [source for source in _SOURCES if given[source]]
  if len(named) > 1:
    raise ValueError(f"give examples one way: {' or '.join(named)}, not both")
  if not named:
    raise ValueError("no examples: give --sentence1 (and --sentence2 for a pair task), --question and --context "
                     "(SQuAD), --instance (a JSON object) or --input_file")
  if named[0] == "--sentence1/--sentence2" and FLAGS.sentence1 is None:
    raise ValueError("--sentence2 without --sentence1: give --sentence1 too")
  if named[0] == "--question/--context" and (FLAGS.question is None or FLAGS.context is None):
    raise ValueError("--question and --context go together (a SQuAD example): give both")
  return named[0]


def _parse_instance(text: str, i: int) -> dict:
  label = "--instance" if len(FLAGS.instance) == 1 else f"--instance {i}"  # as check_instances names them
  try:
    instance = json.loads(text)
  except json.JSONDecodeError as e:
    raise ValueError(f"{label}: not JSON ({e.msg}); give one object, e.g. "
                     '\'{"question": "...", "context": "..."}\'') from None
  if not isinstance(instance, dict) or not instance:
    raise ValueError(f"{label}: give a non-empty JSON object of input name -> value")
  return instance


def _has_header(path: str, columns: dict[str, str]) -> bool:
  """Whether --input_file is read by its header row (your own file, as run_classifier.py reads it): a .csv file,
  any file with --text_a_column or --text_b_column, a .tsv file whose first line names one of `columns`."""
  name = path.lower()[:-3] if path.lower().endswith(".gz") else path.lower()
  if name.endswith(".csv") or FLAGS.text_a_column is not None or FLAGS.text_b_column is not None:
    return True
  if not name.endswith(".tsv") or path.lower().endswith(".gz"):
    return False
  from bert_tf import fileio

  with fileio.open_file(path, "r") as f:
    first = next((line for line in f if line.strip()), "")
  return bool(set(first.lstrip("\ufeff").rstrip("\r\n").split("\t")) & set(columns.values()))


def _instances(source: str, input_names: list[str] | None) -> list[dict]:
  if source == "--input_file":
    try:
      columns = requests.columns_for(input_names, FLAGS.text_a_column, FLAGS.text_b_column)
      if _has_header(FLAGS.input_file, columns):
        # A server's inputs are unknown: sentence2 where the file has its column.
        optional = ("sentence2",) if input_names is None and FLAGS.text_b_column is None else ()
        return requests.check_instances(requests.read_table_instances(FLAGS.input_file, columns, optional),
                                        input_names, what=FLAGS.input_file)
      return requests.read_instances(FLAGS.input_file, input_names or requests.guess_input_names(FLAGS.input_file))
    except UnicodeDecodeError:
      # The decoder's message names neither the file nor the line: find the line, and say so.
      from bert_tf.data import text_io

      for _ in text_io.iter_lines(FLAGS.input_file):
        pass
      raise
  if source == "--instance":
    instances = [_parse_instance(text, i) for i, text in enumerate(FLAGS.instance)]
  elif source == "--question/--context":
    instances = [{"question": FLAGS.question, "context": FLAGS.context}]
  else:
    instances = [{"sentence1": FLAGS.sentence1}]
    if FLAGS.sentence2 is not None:
      instances[0]["sentence2"] = FLAGS.sentence2
  return requests.check_instances(instances, input_names, what=source)


def _check_flags() -> None:
  """Flag combinations, checked before anything is loaded or sent."""
  if (FLAGS.text_a_column is not None or FLAGS.text_b_column is not None) and FLAGS.input_file is None:
    raise ValueError("--text_a_column/--text_b_column name --input_file's columns: give --input_file")
  if FLAGS.model_version is not None and FLAGS.model_version < 1:
    raise ValueError(f"--model_version={FLAGS.model_version}: versions are positive integers")
  if FLAGS.print_request:
    if FLAGS.protocol == "grpc" and not FLAGS.model_name:
      raise ValueError("--print_request --protocol=grpc: give --model_name (the request names the model)")
    return
  if bool(FLAGS.saved_model_dir) == bool(FLAGS.server):
    raise ValueError("give --saved_model_dir (run the export here) or --server (ask TF Serving), one of them")
  if FLAGS.server and not FLAGS.model_name:
    raise ValueError(f"--server={FLAGS.server}: give --model_name, the model's name on the server")
  if FLAGS.saved_model_dir and (FLAGS["protocol"].present or FLAGS.model_version is not None):
    raise ValueError("--protocol and --model_version apply to --server, not to --saved_model_dir")


def _predict(instances: list[dict]) -> list[dict]:
  if FLAGS.saved_model_dir:
    return requests.run_local(FLAGS.saved_model_dir, instances)
  try:
    if FLAGS.protocol == "rest":
      url = requests.rest_url(FLAGS.server, FLAGS.model_name, FLAGS.model_version)
      return requests.rows_from_rest(requests.post_rest(url, requests.rest_request(instances), FLAGS.timeout))
    request = requests.grpc_request(FLAGS.model_name, instances, version=FLAGS.model_version)
    return requests.rows_from_grpc(requests.send_grpc(FLAGS.server, request, FLAGS.timeout))
  except (ConnectionError, requests.ServingError) as e:
    raise ValueError(f"--server={FLAGS.server}: {e}") from None


def main(argv):
  if len(argv) > 1:
    raise ValueError(f"unexpected arguments {argv[1:]}; pass sentences with --sentence1/--sentence2, or "
                     "examples with --instance")
  _check_flags()
  source = _source()
  # Locally the signature's inputs are known before the model loads (the manifest), so examples are checked
  # against them; a server checks them itself.
  input_names = None
  if FLAGS.saved_model_dir and not FLAGS.print_request:
    input_names = sorted(requests.signature_inputs(FLAGS.saved_model_dir))
  instances = _instances(source, input_names)
  if FLAGS.print_request:
    if FLAGS.protocol == "rest":
      print(json.dumps(requests.rest_request(instances), ensure_ascii=False))
    else:
      print(requests.grpc_request(FLAGS.model_name, instances, version=FLAGS.model_version), end="")
    return
  rows = _predict(instances)
  if len(rows) != len(instances):
    raise ValueError(f"got {len(rows)} results for {len(instances)} examples")
  for instance, row in zip(instances, rows):
    print(json.dumps({**instance, **row}, ensure_ascii=False))
  sys.stdout.flush()


if __name__ == "__main__":
  cli.run(main)
