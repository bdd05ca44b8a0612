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
before the model is loaded. --input_file is read, run and printed --batch_size examples at a time, so a file of
any length runs in bounded memory: its header and first batch are checked before the model loads (or a request
is sent), a bad row further on stops the run with an error naming its line, after the earlier batches' lines.
"""

import itertools
import json
import sys
from typing import Callable, Iterator

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
flags.DEFINE_integer("batch_size", 64, "Examples per run of the model, or per request to --server: --input_file is "
                     "read, run and printed this many examples at a time, in its order.")

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
  if not name.endswith(".tsv"):
    return False
  return bool(set(requests.first_text_line(path).lstrip("\ufeff").split("\t")) & set(columns.values()))


def _instances(source: str, input_names: list[str] | None) -> Iterator[dict]:
  """The examples, in order; --input_file's read as they are asked for (each row checked as it is read)."""
  if source == "--input_file":
    columns = requests.columns_for(input_names, FLAGS.text_a_column, FLAGS.text_b_column)
    if _has_header(FLAGS.input_file, columns):
      # A server's inputs are unknown: sentence2 where the file has its column.
      optional = ("sentence2",) if input_names is None and FLAGS.text_b_column is None else ()
      return requests.iter_table_instances(FLAGS.input_file, columns, optional)
    return requests.iter_instances(FLAGS.input_file, input_names or requests.guess_input_names(FLAGS.input_file))
  if source == "--instance":
    instances = [_parse_instance(text, i) for i, text in enumerate(FLAGS.instance)]
  elif source == "--question/--context":
    instances = [{"question": FLAGS.question, "context": FLAGS.context}]
  else:
    instances = [{"sentence1": FLAGS.sentence1}]
    if FLAGS.sentence2 is not None:
      instances[0]["sentence2"] = FLAGS.sentence2
  return iter(requests.check_instances(instances, input_names, what=source))


def _check_flags() -> None:
  """Flag combinations, checked before anything is loaded or sent."""
  if (FLAGS.text_a_column is not None or FLAGS.text_b_column is not None) and FLAGS.input_file is None:
    raise ValueError("--text_a_column/--text_b_column name --input_file's columns: give --input_file")
  if FLAGS.model_version is not None and FLAGS.model_version < 1:
    raise ValueError(f"--model_version={FLAGS.model_version}: versions are positive integers")
  if FLAGS.batch_size < 1:
    raise ValueError(f"--batch_size={FLAGS.batch_size}: give a positive number of examples (default 64)")
  if FLAGS.print_request:
    if FLAGS["batch_size"].present:
      raise ValueError("--print_request prints one request of all the examples; --batch_size applies to running "
                       "them: leave it out")
    if FLAGS.protocol == "grpc" and not FLAGS.model_name:
      raise ValueError("--print_request --protocol=grpc: give --model_name (the request names the model)")
    return
  if bool(FLAGS.saved_model_dir) == bool(FLAGS.server):
    raise ValueError("give --saved_model_dir (run the export here) or --server (ask TF Serving), one of them")
  if FLAGS.server and not FLAGS.model_name:
    raise ValueError(f"--server={FLAGS.server}: give --model_name, the model's name on the server")
  if FLAGS.saved_model_dir and (FLAGS["protocol"].present or FLAGS.model_version is not None):
    raise ValueError("--protocol and --model_version apply to --server, not to --saved_model_dir")


def _predictor() -> Callable[[list[dict]], list[dict]]:
  """instances -> one result per instance: the export loaded once in this process, or requests to --server."""
  if FLAGS.saved_model_dir:
    return requests.local_runner(FLAGS.saved_model_dir)

  def ask_server(instances: list[dict]) -> list[dict]:
    try:
      if FLAGS.protocol == "rest":
        url = requests.rest_url(FLAGS.server, FLAGS.model_name, FLAGS.model_version)
        return requests.rows_from_rest(requests.post_rest(url, requests.rest_request(instances), FLAGS.timeout))
      request = requests.grpc_request(FLAGS.model_name, instances, version=FLAGS.model_version)
      return requests.rows_from_grpc(requests.send_grpc(FLAGS.server, request, FLAGS.timeout))
    except (ConnectionError, requests.ServingError) as e:
      raise ValueError(f"--server={FLAGS.server}: {e}") from None

  return ask_server


def main(argv):
  if len(argv) > 1:
    raise ValueError(f"unexpected arguments {argv[1:]}; pass sentences with --sentence1/--sentence2, or "
                     "examples with --instance")
  _check_flags()
  source = _source()
  # Locally the signature's inputs are known before the model loads (the manifest), so examples are checked
  # against them; a server checks them itself.
  input_names = limit = None
  if FLAGS.saved_model_dir and not FLAGS.print_request:
    input_names = sorted(requests.signature_inputs(FLAGS.saved_model_dir))
    # The export's own limit on a request's text: batches stay under it, and a longer example is named here.
    limit = requests.request_limit(FLAGS.saved_model_dir)
  batches = requests.batches(_instances(source, input_names), FLAGS.batch_size, limit)
  # The first batch is read, and so the file's header and first rows checked, before the model loads or a
  # request is sent.
  first = next(batches)
  if FLAGS.print_request:
    instances = first + [instance for batch in batches for instance in batch]
    if FLAGS.protocol == "rest":
      print(json.dumps(requests.rest_request(instances), ensure_ascii=False))
    else:
      print(requests.grpc_request(FLAGS.model_name, instances, version=FLAGS.model_version), end="")
    return
  predict = _predictor()
  for instances in itertools.chain([first], batches):
    rows = predict(instances)
    if len(rows) != len(instances):
      raise ValueError(f"got {len(rows)} results for {len(instances)} examples")
    print("\n".join(json.dumps({**instance, **row}, ensure_ascii=False) for instance, row in zip(instances, rows)))
    # Each batch's lines reach a pipe or a file now, not when the whole input is done.
    sys.stdout.flush()


if __name__ == "__main__":
  cli.run(main)
