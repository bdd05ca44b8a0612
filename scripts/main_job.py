"""The main job on the embedded default corpus (see bert_tf/main_job.py). Run from the repository root:

  python scripts/main_job.py [--work_dir=out/main_job] [--num_workers=2]
"""

from absl import flags

from bert_tf import cli

FLAGS = flags.FLAGS
flags.DEFINE_string("work_dir", "out/main_job", "Where the corpus, vocabulary and later outputs go.")
flags.DEFINE_string("records_dir", "tfrecords", "Where the pretraining records go.")
flags.DEFINE_integer("num_workers", 2, "Worker processes for record creation.")


def main(argv):
  del argv
  from bert_tf import fileio, main_job

  for name in ("work_dir", "records_dir"):  # one line now, not a traceback at the first write
    fileio.check_writable(name, FLAGS[name].value)
  main_job.run(main_job.MainJobConfig(work_dir=FLAGS.work_dir, records_dir=FLAGS.records_dir,
                                      num_workers=FLAGS.num_workers))


if __name__ == "__main__":
  cli.run(main)
