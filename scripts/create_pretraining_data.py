"""Creates BERT pretraining records (masked LM + next sentence) from raw text.

Flags are google-research/bert's, so its commands keep working; new ones add parallel sharded creation,
statistics and dynamic masking. Input: one sentence per line, a blank line between documents; plain or gzip;
local or gs://. Output: TFRecord files of tf.train.Example in google-research's format (tfrecords/README.md).

  python scripts/create_pretraining_data.py --input_file=corpus.txt --output_file=tfrecords/pretrain.tfrecord \
      --vocab_file=vocab.txt --num_workers=2

With --beam_runner the shards run as an Apache Beam pipeline (DirectRunner here, Dataflow, Flink, Spark):
docs/scale.md.
"""

import contextlib

from absl import flags, logging

from bert_tf import cli

FLAGS = flags.FLAGS
# google-research/bert's flags, with its defaults.
flags.DEFINE_string("input_file", None, "Input raw text file(s): comma-separated files or globs.")
flags.DEFINE_string("output_file", None, "Output TFRecord file(s), comma-separated.")
flags.DEFINE_string("vocab_file", None, "The WordPiece vocabulary (vocab.txt, one token a line).")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents (uncased models).")
flags.DEFINE_bool("do_whole_word_mask", False, "Mask all WordPieces of a word together.")
flags.DEFINE_integer("max_seq_length", 128, "Maximum sequence length.")
flags.DEFINE_integer("max_predictions_per_seq", 20, "Maximum number of masked LM predictions per sequence.")
flags.DEFINE_integer("random_seed", 12345, "Random seed for data generation.")
flags.DEFINE_integer("dupe_factor", 10, "Number of passes over the input, each with different masks.")
flags.DEFINE_float("masked_lm_prob", 0.15, "Masked LM probability.")
flags.DEFINE_float("short_seq_prob", 0.1, "Probability of a sequence shorter than the maximum length.")
cli.define_masking_flags()  # --mask_token_rate, --random_token_rate
# New flags.
flags.DEFINE_integer("num_workers", 1, "Worker processes (sharded mode).")
flags.DEFINE_integer("num_shards", 0, "Number of corpus shards; 0 = one per --shard_size_mb of input text. The "
                     "output depends on the shard count, never on --num_workers.")
flags.DEFINE_float("shard_size_mb", 0.5, "Target shard size when --num_shards=0.")
flags.DEFINE_bool("reference_compatible", False, "One process over the whole corpus, giving the very records "
                  "google-research's script writes for the same seed (memory grows with the corpus).")
flags.DEFINE_bool("dynamic_masking", False, "Write unmasked instances (no masked_lm_* features); training "
                  "masks them on the fly.")
flags.DEFINE_bool("preserve_special_tokens", False, "Keep [MASK], [CLS], ... typed in the text as one token.")
flags.DEFINE_string("stats_file", None, "Statistics JSON; default <first output file>.stats.json.")
flags.DEFINE_string("beam_runner", None, "Run the sharded mode's shards as an Apache Beam pipeline on this runner: "
                    "DirectRunner, DataflowRunner, FlinkRunner, SparkRunner or PortableRunner (pip install -e "
                    ".[beam]); the records are the multiprocessing mode's for the same seed and --num_shards "
                    "(docs/scale.md).")
flags.DEFINE_string("beam_pipeline_options", "", "Further Beam pipeline options, space-separated, e.g. "
                    "'--project=p --region=us-central1 --temp_location=gs://b/tmp' (DataflowRunner) or "
                    "'--direct_num_workers=2 --direct_running_mode=multi_processing' (DirectRunner).")
flags.DEFINE_string("beam_allowed_unknown_options", "", "Comma-separated names of options in "
                    "--beam_pipeline_options that Beam's Python SDK does not define but your runner takes (else "
                    "such an option is refused as a misspelling).")
flags.DEFINE_string("beam_temp_dir", None, "With --beam_runner: where shards are staged, readable and writable by "
                    "this machine and every worker (gs://... on Dataflow); default a local temporary directory, "
                    "which only the DirectRunner can use.")


def main(argv):
  del argv
  from bert_tf.data import beam_pipeline, instances, pretraining_data, text_io
  from bert_tf.training import run_lock

  for name in ("input_file", "output_file", "vocab_file"):
    if not getattr(FLAGS, name):
      raise ValueError(f"--{name} is required")
  if FLAGS.beam_runner and FLAGS.reference_compatible:
    raise ValueError("--reference_compatible holds the whole corpus in one process, which a Beam runner cannot "
                     "spread; drop --beam_runner or --reference_compatible")
  # Before reading anything: an unknown option or a missing apache-beam fails fast.
  beam_pipeline.check_beam_flags(FLAGS.beam_runner, FLAGS.beam_pipeline_options, FLAGS.beam_temp_dir,
                                 FLAGS.beam_allowed_unknown_options)
  config = instances.InstanceConfig(
      max_seq_length=FLAGS.max_seq_length, max_predictions_per_seq=FLAGS.max_predictions_per_seq,
      masked_lm_prob=FLAGS.masked_lm_prob, short_seq_prob=FLAGS.short_seq_prob, dupe_factor=FLAGS.dupe_factor,
      do_whole_word_mask=FLAGS.do_whole_word_mask, dynamic_masking=FLAGS.dynamic_masking,
      mask_token_rate=FLAGS.mask_token_rate, random_token_rate=FLAGS.random_token_rate)
  config.validate()  # Before reading anything: bad flags fail fast.
  run = pretraining_data.RunConfig(
      input_files=tuple(text_io.expand_input_files(FLAGS.input_file)),
      output_files=tuple(p.strip() for p in FLAGS.output_file.split(",") if p.strip()),
      tokenizer=pretraining_data.TokenizerSpec(FLAGS.vocab_file, FLAGS.do_lower_case,
                                               FLAGS.preserve_special_tokens),
      random_seed=FLAGS.random_seed, reference_compatible=FLAGS.reference_compatible,
      num_workers=FLAGS.num_workers, num_shards=FLAGS.num_shards, shard_size_mb=FLAGS.shard_size_mb,
      stats_file=FLAGS.stats_file)
  run.check_outputs()  # before reading anything: an output that is a folder or an input
  # One writer per output file: a second command writing one of them is refused, naming the first (both would exit
  # 0, and the last rename would win). A killed holder's lock is taken over.
  with contextlib.ExitStack() as locks:
    for flag, path in run.outputs():
      locks.enter_context(run_lock.RunLock.for_file(path, flag))
    if FLAGS.beam_runner:
      stats = beam_pipeline.create_pretraining_data_beam(run, config, FLAGS.beam_runner, FLAGS.beam_pipeline_options,
                                                         FLAGS.beam_temp_dir, progress=logging.info)
    else:
      stats = pretraining_data.create_pretraining_data(run, config, progress=logging.info)
  logging.info("wrote %d instances (%.1f%% masked, %.1f%% random next) in %.1f s (%.0f instances/s) to %s; "
               "statistics in %s", stats["instances"], 100 * stats["masked_fraction"],
               100 * stats["next_sentence_random_fraction"], stats["elapsed_seconds"],
               stats["instances_per_second"], ",".join(run.output_files), stats["stats_file"])


if __name__ == "__main__":
  cli.run(main)
