"""scripts/run_pretraining.py end to end: a smoke run, and runs killed (SIGKILL) and preempted (SIGTERM) that a
rerun of the same command resumes to the very weights of an uninterrupted run."""

import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th

STEPS = 8


def _flags(data, config, out):
  return [f"--input_file={data}", f"--output_dir={out}", f"--bert_config_file={config}",
          f"--max_seq_length={th.T}", f"--max_predictions_per_seq={th.P}", "--train_batch_size=6",
          f"--num_train_steps={STEPS}", "--num_warmup_steps=2", "--save_checkpoints_steps=3", "--steps_per_loop=1",
          "--log_steps=2", "--distribution_strategy=one_device", "--deterministic", "--seed=5"]


def _start(args, **env):
  return subprocess.Popen([sys.executable, *args], cwd=th.REPO, env=th.python_env(**env), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def _finish(process, timeout=200):
  output, _ = process.communicate(timeout=timeout)
  return process.returncode, output


def _weights(prefix):
  reader = tf.train.load_checkpoint(prefix)
  # Model and optimizer variables (slots included); not the iterator's serialized state or the save counter.
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()
          if name.endswith("VARIABLE_VALUE") and not name.startswith(("iterator", "save_counter"))}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """An uninterrupted run, and beside it (two cores) the same command preempted at step 2, killed at step 7
  and rerun to the end."""
  root = tmp_path_factory.mktemp("run_pretraining")
  data = th.write_records(root / "data")
  config = str(root / "bert_config.json")
  th.tiny_bert_config(dropout=0.1).to_json_file(config)  # dropout on: its random state must resume too
  script = "scripts/run_pretraining.py"
  helper = os.path.join("tests", "interrupted_pretraining.py")
  whole = _start([script, *_flags(data, config, root / "whole")])
  steps = {}
  out = root / "interrupted"
  steps["term"] = _finish(_start([helper, *_flags(data, config, out)], INTERRUPT_AT_STEP=2,
                                 INTERRUPT_SIGNAL="TERM"))
  steps["term_checkpoints"] = sorted(os.listdir(out / "checkpoints"))
  steps["term_outputs"] = sorted(os.listdir(out))
  steps["kill"] = _finish(_start([helper, *_flags(data, config, out)], INTERRUPT_AT_STEP=7,
                                 INTERRUPT_SIGNAL="KILL"))
  steps["kill_checkpoints"] = sorted(os.listdir(out / "checkpoints"))
  steps["rerun"] = _finish(_start([script, *_flags(data, config, out)]))
  steps["whole"] = _finish(whole)
  return root, steps


@pytest.mark.slow
def test_smoke_run_writes_checkpoints_summaries_and_the_encoder(runs):
  root, steps = runs
  rc, output = steps["whole"]
  assert rc == 0, output[-3000:]
  assert f"step {STEPS}/{STEPS}" in output and "mlm_accuracy" in output and "sequences_per_second" in output
  out = root / "whole"
  expected = {"bert_config.json", "checkpoints", "encoder_checkpoint", "encoder_savedmodel", "train"}
  assert expected <= set(os.listdir(out))
  latest = tf.train.latest_checkpoint(str(out / "checkpoints"))
  assert latest.endswith(f"ckpt-{STEPS}")
  saved = tf.train.load_checkpoint(latest).get_variable_to_shape_map()
  assert any(name.startswith("model_state/") for name in saved)  # dropout seed states, for exact resumes
  assert "iterator/.ATTRIBUTES/ITERATOR_STATE" in saved
  tags = set()
  for event_file in tf.io.gfile.glob(str(out / "train" / "events.out.tfevents.*")):
    for event in tf.compat.v1.train.summary_iterator(event_file):
      tags |= {v.tag for v in event.summary.value}
  assert {"loss", "mlm_loss", "mlm_accuracy", "nsp_accuracy", "learning_rate", "sequences_per_second"} <= tags

  from bert_tf.training import handoff

  encoder = handoff.load_encoder(str(out))
  features = {"input_ids": tf.constant([[2, 7, 9, 3, 0]]), "input_mask": tf.constant([[1, 1, 1, 1, 0]]),
              "segment_ids": tf.zeros([1, 5], tf.int32)}
  served = tf.saved_model.load(str(out / handoff.ENCODER_SAVEDMODEL_DIR)).signatures["serving_default"](**features)
  np.testing.assert_allclose(served["pooled_output"], encoder(features)["pooled_output"], atol=1e-6)


@pytest.mark.slow
def test_preempted_and_killed_runs_resume_to_the_uninterrupted_weights(runs):
  root, steps = runs
  rc, output = steps["term"]
  assert rc == 143, output[-3000:]
  assert "stopped at step 2" in output
  assert "ckpt-2.index" in steps["term_checkpoints"]  # saved on SIGTERM, off the every-3-steps schedule
  assert "encoder_checkpoint" not in steps["term_outputs"]  # the hand-off is for finished runs only
  rc, output = steps["kill"]
  assert rc == -signal.SIGKILL, output[-3000:]
  assert "resuming at step 2" in output
  assert {"ckpt-3.index", "ckpt-6.index"} <= set(steps["kill_checkpoints"])
  assert "ckpt-7.index" not in steps["kill_checkpoints"]
  rc, output = steps["rerun"]
  assert rc == 0, output[-3000:]
  assert "resuming at step 6" in output
  whole = _weights(str(root / "whole" / "checkpoints" / f"ckpt-{STEPS}"))
  resumed = _weights(str(root / "interrupted" / "checkpoints" / f"ckpt-{STEPS}"))
  assert whole.keys() == resumed.keys() and len(whole) > 10
  for name in whole:
    np.testing.assert_array_equal(resumed[name], whole[name], err_msg=name)


def test_bad_flags_exit_1_with_a_message_naming_the_flag(tmp_path):
  data = th.write_records(tmp_path / "data", num_files=1, per_file=2)
  config = str(tmp_path / "bert_config.json")
  th.tiny_bert_config().to_json_file(config)
  flags = [f"--input_file={data}", f"--output_dir={tmp_path / 'out'}", f"--bert_config_file={config}",
           "--max_seq_length=12", f"--max_predictions_per_seq={th.P}"]
  result = th.run_python(["scripts/run_pretraining.py", *flags])
  assert result.returncode == 1
  assert "error:" in result.stderr and "--max_seq_length=13" in result.stderr, result.stderr[-2000:]


@pytest.mark.parametrize("case", ["flag", "records", "whole_word_mask"])
def test_lengths_over_the_position_embeddings_and_static_whole_word_masking_exit_1(tmp_path, case):
  data = th.write_records(tmp_path / "data", num_files=1, per_file=2)  # records of length T = 13
  config = str(tmp_path / "bert_config.json")
  positions = {"flag": th.T + 3, "records": th.T - 1, "whole_word_mask": th.T + 3}[case]
  bert_config = th.tiny_bert_config()
  bert_config.max_position_embeddings = positions
  bert_config.to_json_file(config)
  flags = [f"--input_file={data}", f"--output_dir={tmp_path / 'out'}", f"--bert_config_file={config}",
           f"--max_predictions_per_seq={th.P}", "--distribution_strategy=one_device"]
  flags += {"flag": [f"--max_seq_length={th.T + 4}"], "records": [f"--max_seq_length={th.T - 1}"],
            "whole_word_mask": [f"--max_seq_length={th.T}", "--do_whole_word_mask"]}[case]
  result = th.run_python(["scripts/run_pretraining.py", *flags])
  assert result.returncode == 1, result.stderr[-2000:]
  expected = {
      "flag": f"error: --max_seq_length={th.T + 4} exceeds max_position_embeddings={positions} in {config}: ",
      "records": f"records have max_seq_length {th.T}, which exceeds max_position_embeddings={positions} in "
                 f"{config}: ",
      "whole_word_mask": "error: --do_whole_word_mask needs --dynamic_masking: "}[case]
  assert expected in result.stderr, result.stderr[-2000:]
  assert not os.path.exists(tmp_path / "out")  # failed before anything was written
