r"""Converts BERT weights between google-research TF1 checkpoints, Hugging Face directories and ours.

  python scripts/convert_checkpoint.py --input_format=hf --input=/path/to/hf_dir \
      --output_format=ours --output_dir=/tmp/bert_ours
  python scripts/convert_checkpoint.py --input_format=tf1 \
      --input=/path/uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=/path/uncased_L-12_H-768_A-12/bert_config.json --output_format=ours --output_dir=...
  python scripts/convert_checkpoint.py --input_format=ours --input=/tmp/bert_ours --output_format=tf1 \
      --output_dir=/tmp/bert_tf1

  python scripts/convert_checkpoint.py --input_format=ours --input=out/pretrain --output_format=hf \
      --output_dir=/tmp/bert_hf

  python scripts/convert_checkpoint.py --input_format=ours --input=out/sms/classifier --output_format=hf \
      --output_dir=/tmp/sms_hf    # BertForSequenceClassification, with its labels
  python scripts/convert_checkpoint.py --input_format=hf --input=/tmp/hf_ner --output_format=ours \
      --output_dir=/tmp/ner_model   # a BertForTokenClassification as our ner_model/ folder

Output layouts (see bert_tf/model/convert.py): `ours` writes <output_dir>/encoder/ckpt-1 (encoder, plus the
pretraining heads when the input had them), bert_config.json and vocab.txt; `tf1` writes
<output_dir>/bert_model.ckpt under google-research's variable names, bert_config.json and vocab.txt; `hf` writes
config.json, model.safetensors, vocab.txt and the tokenizer files that transformers' from_pretrained loads.
A fine-tuned model (classifier, SQuAD, NER, SWAG; bert_tf/model/convert_tasks.py) keeps its head and labels: `hf`
writes its transformers class (BertForSequenceClassification, BertForQuestionAnswering,
BertForTokenClassification, BertForMultipleChoice) and bert_tf.json, `ours` its task's model folder (what
export_*.py and --init_checkpoint take); `tf1` writes its encoder.
"""

from __future__ import annotations

from absl import flags, logging

from bert_tf import cli

# Spelled out rather than read from bert_tf.model.convert, whose import loads TensorFlow: that must wait until
# cli.run has quietened it (and --help needs no TensorFlow). tests/test_convert.py checks they are the library's.
INPUT_FORMATS = ("hf", "keras_hub", "ours", "tf1")
OUTPUT_FORMATS = ("hf", "ours", "tf1")

FLAGS = flags.FLAGS
flags.DEFINE_enum("input_format", None, list(INPUT_FORMATS), "Format of --input.")
flags.DEFINE_string("input", None, "tf1: checkpoint prefix or its directory; hf: model directory, or a model id "
                    "as hf:<id> (e.g. hf:bert-base-uncased, downloaded into the Hugging Face cache); ours: a "
                    "directory written by this script with --output_format=ours, a pretraining --output_dir "
                    "(its newest checkpoints/ckpt-N, with the heads), a fine-tuned model's folder (written "
                    "with its task head: classifier/ as hf's BertForSequenceClassification, ...), a fine-tuning "
                    "checkpoint (<output_dir>/checkpoints/ckpt-N, best/ckpt-N), or a checkpoint prefix; "
                    "keras_hub: a keras-hub BERT preset (bert_base_en_uncased, or keras_hub:bert_base_en_uncased, "
                    "downloaded by keras-hub) or a preset folder.")
flags.DEFINE_integer("step", None, "ours input only: the training checkpoint ckpt-<step> of a pretraining or "
                     "fine-tuning --output_dir (default: the newest).")
flags.DEFINE_enum("output_format", "ours", list(OUTPUT_FORMATS), "Format to write.")
flags.DEFINE_string("output_dir", None, "Folder to write: new or empty (created if missing), else refused unless "
                    "--overwrite_output_dir.")
flags.DEFINE_bool("overwrite_output_dir", False, "Replace a non-empty --output_dir: what it held is removed, so no "
                  "file of an earlier conversion (or anything else) stays beside the new one.")
flags.DEFINE_string("bert_config_file", None, "tf1 input only: its bert_config.json (default: the one "
                    "beside the checkpoint).")
flags.DEFINE_string("vocab_file", None, "tf1 and ours inputs: vocab.txt to copy (default: the one beside the "
                    "checkpoint, if any; a pretraining --output_dir has none, and transformers needs one for the "
                    "tokenizer of an hf output).")
flags.mark_flags_as_required(["input_format", "input", "output_dir"])


def main(argv):
  if len(argv) > 1:
    raise ValueError(f"unexpected arguments: {' '.join(argv[1:])}")
  if FLAGS.input_format != "tf1" and FLAGS.bert_config_file:
    raise ValueError(f"--bert_config_file applies to --input_format=tf1 only; a {FLAGS.input_format} input carries "
                     "its own")
  if FLAGS.input_format == "hf" and FLAGS.vocab_file:
    raise ValueError("--vocab_file applies to --input_format=tf1 and ours; an hf input carries its own")
  from bert_tf.model import checkpoints, convert, convert_tasks, released

  # Before anything is read (a download, a conversion): a file, or a folder holding something, is refused.
  convert.check_output_dir(FLAGS.output_dir, FLAGS.overwrite_output_dir, FLAGS.input,
                           {"vocab_file": [FLAGS.vocab_file], "bert_config_file": [FLAGS.bert_config_file]})
  if FLAGS.input_format != "keras_hub" and not checkpoints.is_released(FLAGS.input):  # a preset is a name
    checkpoints.check_checkpoint_path(FLAGS.input, "--input")  # does not exist, an empty folder, not a checkpoint

  if FLAGS.step is not None and FLAGS.input_format != "ours":
    raise ValueError(f"--step applies to --input_format=ours (a pretraining --output_dir), not {FLAGS.input_format}")
  if checkpoints.is_released(FLAGS.input):
    scheme = FLAGS.input.split(":", 1)[0]
    if FLAGS.input_format != scheme:
      raise ValueError(f"--input={FLAGS.input} is a released model; pass --input_format={scheme} with it")
    # Downloaded and converted once, cached (a model with a task head as its task's model folder).
    converted = convert_tasks.load_ours(released.local_path(FLAGS.input))
  elif FLAGS.input_format == "tf1":
    converted = convert.load_tf1(FLAGS.input, FLAGS.bert_config_file, FLAGS.vocab_file)
  elif FLAGS.input_format == "ours":
    converted = convert_tasks.load_ours(FLAGS.input, step=FLAGS.step)
    converted.vocab_file = FLAGS.vocab_file or converted.vocab_file
  else:
    converted = convert_tasks.LOADERS[FLAGS.input_format](FLAGS.input)
  if converted.unused:
    logging.warning("%d input tensor(s) not converted: %s", len(converted.unused),
                    ", ".join(converted.unused[:20]))
  path = convert.write_output(convert_tasks.SAVERS[FLAGS.output_format], converted, FLAGS.output_dir)
  what = f"task: {converted.task.describe()}" if converted.task else f"heads: {', '.join(converted.heads) or 'none'}"
  logging.info("wrote %s (%s; %s)", path, FLAGS.output_format, what)


if __name__ == "__main__":
  cli.run(main)
