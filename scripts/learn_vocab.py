"""Learns a WordPiece vocab.txt from text files (one sentence a line, plain or gzip, local or gs://).

  python scripts/learn_vocab.py --input_file='corpus/*.txt' --vocab_file=out/vocab.txt --vocab_size=8000

With --beam_runner the words are counted by an Apache Beam pipeline, one input file per element (docs/scale.md).
"""

from __future__ import annotations

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("input_file", None, "Comma-separated files or globs of training text.")
flags.DEFINE_string("vocab_file", None, "Where to write the vocabulary, one token a line.")
flags.DEFINE_integer("vocab_size", 8000, "Largest vocabulary size; the result is within 5% below it when the text "
                     "has enough distinct words.")
flags.DEFINE_bool("do_lower_case", True, "Learn an uncased vocabulary (lower-cased, accents stripped).")
flags.DEFINE_string("beam_runner", None, "Count the words as an Apache Beam pipeline on this runner (DirectRunner, "
                    "DataflowRunner, FlinkRunner, SparkRunner or PortableRunner; pip install -e .[beam]), one input "
                    "file per element; the vocabulary is the one-machine count's (docs/scale.md).")
flags.DEFINE_string("beam_pipeline_options", "", "Further Beam pipeline options, space-separated, e.g. "
                    "'--project=p --region=us-central1 --temp_location=gs://b/tmp'.")
flags.DEFINE_string("beam_allowed_unknown_options", "", "Comma-separated names of options in "
                    "--beam_pipeline_options that Beam's Python SDK does not define but your runner takes (else "
                    "such an option is refused as a misspelling).")
flags.DEFINE_string("beam_temp_dir", None, "With --beam_runner: where the counts are staged, readable and writable "
                    "by this machine and every worker (gs://... on Dataflow); default a local temporary directory.")
flags.mark_flags_as_required(["input_file", "vocab_file"])


def main(argv):
  if len(argv) > 1:
    raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
  from bert_tf import fileio

  # Before anything is read: the vocabulary must not replace a folder or one of the texts it is learnt from.
  fileio.check_output_file("vocab_file", FLAGS.vocab_file)
  fileio.check_not_input("vocab_file", FLAGS.vocab_file, {"input_file": FLAGS.input_file})
  # Imported here, after cli.run has quietened TensorFlow (the learner loads it).
  from bert_tf.data import beam_pipeline, vocab_learning

  # Before reading anything: an unknown option or a missing apache-beam fails fast.
  beam_pipeline.check_beam_flags(FLAGS.beam_runner, FLAGS.beam_pipeline_options, FLAGS.beam_temp_dir,
                                 FLAGS.beam_allowed_unknown_options)
  counter = None
  if FLAGS.beam_runner:
    counter = beam_pipeline.beam_word_counter(FLAGS.beam_runner, FLAGS.beam_pipeline_options, FLAGS.beam_temp_dir)
  learned = vocab_learning.learn_vocab_file(FLAGS.input_file, FLAGS.vocab_file, FLAGS.vocab_size,
                                            FLAGS.do_lower_case, counter=counter)
  size = len(learned.tokens)
  print(f"wrote {FLAGS.vocab_file}: {size} tokens (asked for at most {FLAGS.vocab_size}) from {learned.num_lines} "
        f"lines; [UNK] rate on the training text: {learned.unk_rate:.6f}")
  if size < 0.95 * FLAGS.vocab_size:
    print(f"note: the text has too few distinct words for {FLAGS.vocab_size} tokens; more text gives a fuller "
          "vocabulary")


if __name__ == "__main__":
  cli.run(main)
