"""Classifies sentences with an exported classifier, locally or through TensorFlow Serving; see docs/serving.md.

Prints one JSON line per example: its sentences and the model's outputs (label, label_id, probabilities; or
score for regression).

  # In this process, from the export (a version folder, or the model folder: its highest version):
  python scripts/predict.py --saved_model_dir=export/mrpc --sentence1="He ran." --sentence2="He was running."
  # Through TF Serving's REST port, or its gRPC port:
  python scripts/predict.py --server=localhost:8501 --model_name=mrpc --input_file=pairs.tsv
  python scripts/predict.py --server=localhost:8500 --protocol=grpc --model_name=mrpc --input_file=pairs.jsonl
  # Show the request instead of sending it (e.g. for curl -d @-):
  python scripts/predict.py --print_request --sentence1="He ran." --sentence2="He was running."
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
flags.DEFINE_string("input_file", None, "Examples: TSV with one or two columns (no header), or JSON lines with "
                    '"sentence1" and optionally "sentence2".')
flags.DEFINE_bool("print_request", False, "Print the REST JSON body (or, with --protocol=grpc, the gRPC "
                  "PredictRequest as text) and exit without sending it.")
flags.DEFINE_float("timeout", 30.0, "Seconds to wait for --server.")


def _instances() -> list[dict[str, str]]:
  if FLAGS.input_file:
    if FLAGS.sentence1 is not None or FLAGS.sentence2 is not None:
      raise ValueError("give --input_file or --sentence1/--sentence2, not both")
    try:
      return requests.read_instances(FLAGS.input_file)
    except UnicodeDecodeError:
      # The decoder's message names neither the file nor the line: find the line, and say so.
      from bert_tf.data import text_io

      for _ in text_io.iter_lines(FLAGS.input_file):
        pass
      raise
  if FLAGS.sentence1 is None:
    raise ValueError("no examples: give --sentence1 (and --sentence2 for a pair task) or --input_file")
  instance = {"sentence1": FLAGS.sentence1}
  if FLAGS.sentence2 is not None:
    instance["sentence2"] = FLAGS.sentence2
  return [instance]


def _check_flags() -> None:
  """Flag combinations, checked before anything is loaded or sent."""
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


def _predict(instances: list[dict[str, str]]) -> list[dict]:
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
    raise ValueError(f"unexpected arguments {argv[1:]}; pass sentences with --sentence1/--sentence2")
  _check_flags()
  instances = _instances()
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
