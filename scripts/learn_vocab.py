"""Learns a WordPiece vocab.txt from text files (one sentence a line, plain or gzip, local or gs://).

  python scripts/learn_vocab.py --input_file='corpus/*.txt' --vocab_file=out/vocab.txt --vocab_size=8000
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
flags.mark_flags_as_required(["input_file", "vocab_file"])


def main(argv):
  if len(argv) > 1:
    raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
  # Imported here, after cli.run has quietened TensorFlow (the learner loads it).
  from bert_tf.data import vocab_learning

  learned = vocab_learning.learn_vocab_file(FLAGS.input_file, FLAGS.vocab_file, FLAGS.vocab_size,
                                            FLAGS.do_lower_case)
  size = len(learned.tokens)
  print(f"wrote {FLAGS.vocab_file}: {size} tokens (asked for at most {FLAGS.vocab_size}) from {learned.num_lines} "
        f"lines; [UNK] rate on the training text: {learned.unk_rate:.6f}")
  if size < 0.95 * FLAGS.vocab_size:
    print(f"note: the text has too few distinct words for {FLAGS.vocab_size} tokens; more text gives a fuller "
          "vocabulary")


if __name__ == "__main__":
  cli.run(main)
