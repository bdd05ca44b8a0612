r"""Writes BERT's contextual features of each input line as JSON lines, as google-research's extract_features.py.

  python scripts/extract_features.py --input_file=input.txt --output_file=features.jsonl \
      --vocab_file=$BERT_DIR/vocab.txt --bert_config_file=$BERT_DIR/bert_config.json \
      --init_checkpoint=$BERT_DIR/bert_model.ckpt --layers=-1,-2,-3,-4 --max_seq_length=128 --batch_size=8

input.txt: one example a line, `text` or `text_a ||| text_b`. The output has one line per input line,
{"linex_index": i, "features": [{"token": ..., "layers": [{"index": -1, "values": [...]}, ...]}, ...]}.
google-research's flags keep their names and defaults; --init_checkpoint also takes what
scripts/run_classifier.py takes (a bert_tf checkpoint or pretraining output directory, encoder_savedmodel/, a
Hugging Face directory). See docs/features.md.
"""

from __future__ import annotations

import json

from absl import flags, logging

from bert_tf import cli

FLAGS = flags.FLAGS
# google-research's flags.
flags.DEFINE_string("input_file", None, "Text file: one example a line, `text` or `text_a ||| text_b`.")
flags.DEFINE_string("output_file", None, "Where the JSON lines go (written whole or not at all).")
flags.DEFINE_string("layers", "-1,-2,-3,-4", "Layers to output, comma-separated: -1 the last, 0 the first "
                    "transformer layer.")
flags.DEFINE_string("bert_config_file", None, "bert_config.json of the model (default: the one beside "
                    "--init_checkpoint).")
flags.DEFINE_integer("max_seq_length", 128, "WordPieces per line, [CLS] and [SEP] included; longer lines are "
                     "truncated.")
flags.DEFINE_string("init_checkpoint", None, "The model's weights (see above).")
flags.DEFINE_string("vocab_file", None, "vocab.txt of the model (default: the one that comes with "
                    "--init_checkpoint: in its folder or beside its bert_config.json).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models; --nodo_lower_case for "
                  "cased ones).")
flags.DEFINE_integer("batch_size", 32, "Lines per batch.")
flags.DEFINE_bool("use_one_hot_embeddings", False, "Accepted for google-research's command lines; no effect "
                  "(both lookups give the same values).")
flags.DEFINE_bool("use_tpu", False, "Accepted for google-research's command lines; only False (runs on CPU or GPU).")
flags.DEFINE_string("master", None, "Accepted for google-research's command lines; TPU only, so unused.")
flags.DEFINE_integer("num_tpu_cores", 8, "Accepted for google-research's command lines; TPU only, so unused.")
# New.
flags.DEFINE_enum("gelu", "auto", ["auto", "erf", "tanh"], "How \"gelu\" is computed: auto = tanh for a "
                  "google-research checkpoint (as its modeling.py), erf otherwise (as bert_tf and Hugging Face).")


def main(argv):
  del argv
  if FLAGS.use_tpu:
    raise ValueError("--use_tpu: feature extraction runs on CPU or GPU here; drop --use_tpu (and --master)")
  from bert_tf import fileio

  # Before TensorFlow loads: the output must not replace a folder or the text; the model's files, which the
  # flags may leave to defaults, are checked by the config's `validate`.
  fileio.check_output_file("output_file", FLAGS.output_file)
  fileio.check_not_input("output_file", FLAGS.output_file, {"input_file": [FLAGS.input_file]})
  import tensorflow as tf

  from bert_tf.tasks.features import extraction as feature_extraction

  # From Ampere on, GPUs would run float32 matmuls in TF32 (a 10-bit mantissa), about 1e-3 off the values of
  # google-research's script; features are for comparing with it, so full float32.
  tf.config.experimental.enable_tensor_float_32_execution(False)

  config = feature_extraction.FeatureExtractionConfig(
      input_file=FLAGS.input_file, output_file=FLAGS.output_file, vocab_file=FLAGS.vocab_file,
      init_checkpoint=FLAGS.init_checkpoint, bert_config_file=FLAGS.bert_config_file, layers=FLAGS.layers,
      max_seq_length=FLAGS.max_seq_length, do_lower_case=FLAGS.do_lower_case, batch_size=FLAGS.batch_size,
      gelu=FLAGS.gelu)
  logging.set_verbosity(logging.INFO)
  summary = feature_extraction.run(config, say=lambda line: logging.info("%s", line))
  print(json.dumps(summary))


if __name__ == "__main__":
  cli.run(main)
