"""Prints decoded pretraining instances (tokens, [MASK]s, labels) and statistics of TFRecord files.

  python scripts/inspect_tfrecords.py --input_file='tfrecords/*.tfrecord' --vocab_file=vocab.txt
"""

import json

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "TFRecord file(s): comma-separated files or globs.")
flags.DEFINE_string("vocab_file", None, "The vocabulary the records were made with.")
flags.DEFINE_integer("max_examples", 3, "How many instances to print.")
flags.DEFINE_bool("statistics", True, "Also read every record and print file statistics.")


def main(argv):
  del argv
  from bert_tf import fileio
  from bert_tf.data import describe, tokenization

  if not FLAGS.input_file or not FLAGS.vocab_file:
    raise ValueError("--input_file and --vocab_file are required")
  files = fileio.expand_globs(FLAGS.input_file)
  vocab = tokenization.load_vocab(FLAGS.vocab_file)
  describe.check_vocabulary(files, vocab, FLAGS.vocab_file)
  inv_vocab = {i: t for t, i in vocab.items()}
  for k, example in enumerate(describe.iter_parsed(files)):
    if k >= FLAGS.max_examples:
      break
    print(f"--- instance {k}")
    print(describe.decode_instance(example, inv_vocab))
  if FLAGS.statistics:
    print(json.dumps(describe.file_statistics(files), indent=2))


if __name__ == "__main__":
  cli.run(main)
