"""bert_tf.data.beam_pipeline: Beam's DirectRunner against the one-machine paths, flags, the missing extra.

apache-beam is an optional extra that the suite installs (README: `pip install -e '.[beam]'`), so these tests
run it rather than skip without it: a suite without Beam fails here, naming the extra.
"""

import gzip
import json
import os
import subprocess
import sys

import pytest

from bert_tf.data import beam_pipeline, corpus, instances, pretraining_data, text_io, vocab_learning

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPTS = os.path.join(REPO, "scripts")
# Fields of the statistics file that differ between two runs of the same records: timings, and the output paths
# (the two runs write to different files).
RUN_FIELDS = ("elapsed_seconds", "instances_per_second", "output_files", "stats_file")


@pytest.fixture(scope="module")
def corpus_files(tmp_path_factory):
  """Thirteen real documents in two files (the second gzip), a document running across the file boundary, as
  the reader allows, plus accents, CJK and an overlong word: every word-count and shard-boundary path."""
  documents = corpus.default_corpus_documents()[:13]
  folder = tmp_path_factory.mktemp("beam_corpus")
  first = "\n\n".join("\n".join(d) for d in documents[:7]) + "\nA document that goes on in the next file.\n"
  second = "Its second sentence, in a gzip file.\n\n" + "\n\n".join("\n".join(d) for d in documents[7:])
  # A word over FullTokenizer's 200 characters becomes [UNK] whatever the vocabulary: a non-zero [UNK] rate.
  second += "\n\nEin Wort über Ångström, 東京 と 大阪.\nNoch ein Satz mit " + "z" * 230 + ".\n"
  (folder / "a.txt").write_text(first, encoding="utf-8")
  with gzip.open(folder / "b.txt.gz", "wt", encoding="utf-8") as f:
    f.write(second)
  return [str(folder / "a.txt"), str(folder / "b.txt.gz")]


@pytest.fixture(scope="module")
def vocab_file(corpus_files, tmp_path_factory):
  """A 307-token vocabulary learned on the one-machine path (odd size: no accidental fit)."""
  path = str(tmp_path_factory.mktemp("beam_vocab") / "vocab.txt")
  vocab_learning.learn_vocab_file(",".join(corpus_files), path, 307, do_lower_case=True)
  return path


def run_config(corpus_files, vocab_file, folder, **kwargs):
  return pretraining_data.RunConfig(
      input_files=tuple(corpus_files), output_files=tuple(str(folder / f"pretrain-{k}.tfrecord") for k in range(2)),
      tokenizer=pretraining_data.TokenizerSpec(vocab_file, do_lower_case=True), random_seed=7, num_shards=5,
      **kwargs)


def read_bytes(paths):
  out = []
  for path in paths:
    with open(path, "rb") as f:
      out.append(f.read())
  return out


def without_run_fields(stats: dict) -> dict:
  return {k: v for k, v in stats.items() if k not in RUN_FIELDS}


@pytest.mark.slow
def test_direct_runner_records_are_the_multiprocessing_modes_byte_for_byte(corpus_files, vocab_file, tmp_path):
  config = instances.InstanceConfig(max_seq_length=48, max_predictions_per_seq=7, dupe_factor=3)
  (tmp_path / "mp").mkdir()
  (tmp_path / "beam").mkdir()
  (tmp_path / "script").mkdir()
  # Two worker processes, five shards over two output files: shards 0, 2, 4 go to file 0, in that order.
  mp_run = run_config(corpus_files, vocab_file, tmp_path / "mp", num_workers=2)
  mp_stats = pretraining_data.create_pretraining_data(mp_run, config, progress=lambda message: None)
  beam_run = run_config(corpus_files, vocab_file, tmp_path / "beam", num_workers=2)
  beam_stats = beam_pipeline.create_pretraining_data_beam(beam_run, config, "DirectRunner",
                                                          progress=lambda message: None)

  expected = read_bytes(mp_run.output_files)
  assert all(len(data) > 10_000 for data in expected)
  assert read_bytes(beam_run.output_files) == expected
  assert beam_stats["num_shards"] == 5 and beam_stats["instances"] == mp_stats["instances"] > 100
  with open(mp_stats["stats_file"]) as f, open(beam_stats["stats_file"]) as g:
    assert without_run_fields(json.load(g)) == without_run_fields(json.load(f))
  assert os.listdir(tmp_path / "beam") == os.listdir(tmp_path / "mp")  # No staged or temporary file left.

  # The script's flags reach the same pipeline; Beam's own options pass through (two worker processes).
  outputs = [str(tmp_path / "script" / f"pretrain-{k}.tfrecord") for k in range(2)]
  subprocess.run([sys.executable, os.path.join(SCRIPTS, "create_pretraining_data.py"),
                  f"--input_file={','.join(corpus_files)}", f"--output_file={','.join(outputs)}",
                  f"--vocab_file={vocab_file}", "--max_seq_length=48", "--max_predictions_per_seq=7",
                  "--dupe_factor=3", "--random_seed=7", "--num_shards=5", "--num_workers=2",
                  "--beam_runner=DirectRunner", f"--beam_temp_dir={tmp_path / 'staging'}",
                  "--beam_pipeline_options=--direct_num_workers=2 --direct_running_mode=multi_processing"],
                 check=True, capture_output=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert read_bytes(outputs) == expected
  assert os.listdir(tmp_path / "staging") == []  # The run's staging directory under --beam_temp_dir is gone.


@pytest.mark.slow
def test_beam_word_count_gives_the_one_machine_vocabulary(corpus_files, vocab_file, tmp_path):
  lines = [line for path in corpus_files for _, line in text_io.iter_lines(path)]
  for do_lower_case in (True, False):
    expected = vocab_learning.count_words(lines, do_lower_case)
    counts = beam_pipeline.count_words_beam(corpus_files, do_lower_case, "DirectRunner")
    assert counts == expected and len(expected) > 1000
  # Cased and uncased differ, so the comparison above can tell the flag was used.
  assert vocab_learning.count_words(lines, True) != vocab_learning.count_words(lines, False)

  # learn_vocab_file with the Beam count: the same vocabulary, [UNK] rate (from the counts, the text never read
  # again) and line count as the one-machine path, which tokenizes the text.
  one_machine = vocab_learning.learn_vocab_file(",".join(corpus_files), str(tmp_path / "one.txt"), 307, True)
  on_beam = vocab_learning.learn_vocab_file(",".join(corpus_files), str(tmp_path / "beam.txt"), 307, True,
                                            counter=beam_pipeline.beam_word_counter("DirectRunner"))
  assert on_beam == one_machine
  assert one_machine.unk_rate > 0 and one_machine.num_lines == sum(1 for line in lines if line)

  # The script with --beam_runner writes the vocabulary of the one-machine path (the fixture's, same size).
  beam_vocab = str(tmp_path / "beam_vocab.txt")
  subprocess.run([sys.executable, os.path.join(SCRIPTS, "learn_vocab.py"), f"--input_file={','.join(corpus_files)}",
                  f"--vocab_file={beam_vocab}", "--vocab_size=307", "--do_lower_case", "--beam_runner=DirectRunner"],
                 check=True, capture_output=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  with open(beam_vocab, encoding="utf-8") as f, open(vocab_file, encoding="utf-8") as g:
    tokens = f.read().splitlines()
    assert tokens == g.read().splitlines()
  assert 290 < len(tokens) <= 307


def test_missing_extra_names_the_install_command(monkeypatch, corpus_files, tmp_path):
  monkeypatch.setitem(sys.modules, "apache_beam", None)  # `import apache_beam` now raises ImportError.
  with pytest.raises(beam_pipeline.BeamNotInstalledError, match=r"pip install -e \.\[beam\]"):
    beam_pipeline.check_beam_flags("DirectRunner")
  with pytest.raises(beam_pipeline.BeamNotInstalledError, match=r"pip install -e \.\[beam\]"):
    beam_pipeline.count_words_beam(corpus_files, True)
  # Without --beam_runner nothing needs Beam.
  beam_pipeline.check_beam_flags(None)

  # The script: one line on stderr, exit status 1, nothing written. apache_beam is hidden in the child the same way.
  output = tmp_path / "out.tfrecord"
  hide_beam = ("import runpy, sys; sys.modules['apache_beam'] = None; sys.argv = sys.argv[1:]; "
               "runpy.run_path(sys.argv[0], run_name='__main__')")
  result = subprocess.run([sys.executable, "-c", hide_beam, os.path.join(SCRIPTS, "create_pretraining_data.py"),
                           f"--input_file={corpus_files[0]}", f"--output_file={output}", "--vocab_file=v.txt",
                           "--beam_runner=DirectRunner"], capture_output=True, text=True,
                          env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert result.returncode == 1
  assert result.stderr.strip().splitlines()[-1].startswith("error: --beam_runner needs Apache Beam")
  assert "pip install -e .[beam]" in result.stderr and "Traceback" not in result.stderr
  assert not output.exists()


@pytest.mark.parametrize("runner, options, temp_dir, message", [
    ("Direct", "", None, r"--beam_runner=Direct: unknown; give one of DirectRunner, DataflowRunner"),
    (None, "--direct_num_workers=2", None, r"need --beam_runner"),
    ("DirectRunner", "--runner=DataflowRunner", None, r"names --runner: give the runner as --beam_runner only"),
    ("DirectRunner", "direct_num_workers=2", None, r"'direct_num_workers=2' is not an option"),
    ("DirectRunner", "--direct_num_workers=2 multi_processing", None, r"'multi_processing' is not an option"),
    ("DirectRunner", "--project='unclosed", None, r"No closing quotation"),
    ("DataflowRunner", "--project=p", None, r"--beam_runner=DataflowRunner needs --beam_temp_dir"),
    ("DirectRunner", "--direct_num_workrs=2 --save_main_session --projct p", None,
     r"Beam knows no option --direct_num_workrs, --projct \(misspelled\?\)"),
])
def test_bad_flags_are_refused_up_front(runner, options, temp_dir, message):
  with pytest.raises(ValueError, match=message):
    beam_pipeline.check_beam_flags(runner, options, temp_dir)


def test_a_run_removes_the_work_dirs_of_killed_runs(tmp_path):
  from bert_tf import fileio
  from test_run_lock import dead_owner_tag

  left = tmp_path / f"bert_tf_beam_{dead_owner_tag()}_0123456789ab"
  (left / "staged").mkdir(parents=True)
  live = tmp_path / f"bert_tf_beam_{fileio.owner_tag()}_ba9876543210"
  untagged = tmp_path / "bert_tf_beam_0123456789ab"  # whose process cannot be told: left alone
  live.mkdir(), untagged.mkdir()
  work = beam_pipeline._make_work_dir(str(tmp_path))
  assert os.path.basename(work).startswith(f"bert_tf_beam_{fileio.owner_tag()}_")
  assert sorted(os.listdir(tmp_path)) == sorted([live.name, untagged.name, os.path.basename(work)])


def test_good_flags_pass_and_reach_beam():
  # Both spellings of an option's value, and quoting, as on a shell command line.
  options = "--direct_num_workers 3 --direct_running_mode=multi_threading --job_name='bert tf'"
  beam_pipeline.check_beam_flags("DirectRunner", options)
  beam_pipeline.check_beam_flags("DataflowRunner", "--project=p", "gs://bucket/tmp")
  beam_pipeline.check_beam_flags("PortableRunner", "--job_endpoint=h:8099 --my_runners_option=3", "/shared/tmp",
                                 allowed_unknown="my_runners_option")
  parsed = beam_pipeline.pipeline_options("DirectRunner", options).get_all_options()
  assert (parsed["runner"], parsed["direct_num_workers"], parsed["direct_running_mode"], parsed["job_name"]) == (
      "DirectRunner", 3, "multi_threading", "bert tf")


def test_reference_compatible_is_refused(corpus_files, vocab_file, tmp_path):
  run = run_config(corpus_files, vocab_file, tmp_path, reference_compatible=True)
  with pytest.raises(ValueError, match="drop --beam_runner or --reference_compatible"):
    beam_pipeline.create_pretraining_data_beam(run, instances.InstanceConfig(), "DirectRunner")
  assert os.listdir(tmp_path) == []


def test_an_output_file_without_records_is_refused_before_writing(vocab_file, tmp_path):
  # One short document in five shards: shards 1-4 are empty, so output file 1 (shards 1 and 3) would be empty.
  text = tmp_path / "one.txt"
  text.write_text("The only document.\nIts second sentence.\n", encoding="utf-8")
  run = run_config([str(text)], vocab_file, tmp_path)
  with pytest.raises(ValueError, match=r"1 of the 2 output files would hold no record .*pretrain-1.tfrecord"):
    beam_pipeline.create_pretraining_data_beam(run, instances.InstanceConfig(dupe_factor=1), "DirectRunner",
                                               progress=lambda message: None)
  assert sorted(os.listdir(tmp_path)) == ["one.txt"]
