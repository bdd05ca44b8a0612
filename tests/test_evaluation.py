"""bert_tf.training.evaluation through the shared trainer: evaluations on their steps, the best weights kept,
early stopping, and a run killed after an evaluation that resumes to the uninterrupted run's weights and state.
The tiny pretraining task stands for any task: the mechanism is the trainer's, a task only supplies `evaluate`."""

import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.tasks.pretraining.config import PretrainingConfig
from bert_tf.tasks.pretraining.task import PretrainingTask
from bert_tf.training import evaluation, optimization, trainer

STRATEGY = tf.distribute.OneDeviceStrategy("/cpu:0")
STEPS = 9


@pytest.fixture(scope="module")
def data(tmp_path_factory):
  return th.write_records(tmp_path_factory.mktemp("data"), num_files=2)


class Killed(Exception):
  """Stands for a SIGKILL: nothing after the last saved checkpoint survives."""


class KilledAt(trainer.Trainer):
  kill_at = None

  def _after_loop(self, step):
    if step == self.kill_at:
      raise Killed(step)


def _run(data, output_dir, scores, kill_at=None, keep_best=True, patience=0, every=2, metric="accuracy"):
  """A tiny pretraining run (dropout on) evaluated every `every` steps; `metric` (the best's) at step s is
  scores[s], and `checksum` (the sum of the squared weights) shows which weights each evaluation saw."""
  keras.utils.set_random_seed(5)
  config = PretrainingConfig(
      input_file=data, output_dir=str(output_dir), bert_config=th.tiny_bert_config(dropout=0.1),
      max_seq_length=th.T, max_predictions_per_seq=th.P, train_batch_size=3, num_train_steps=STEPS,
      num_warmup_steps=1, learning_rate=1e-2, save_checkpoints_steps=5, steps_per_loop=4, log_steps=3, seed=11)
  holder = {}

  def evaluate(model):
    step = int(holder["run"].step.numpy())
    return {metric: scores[step], "checksum": _checksum(model), "label": "not a number"}

  run = KilledAt(PretrainingTask(config), STRATEGY,
                 lambda: optimization.create_optimizer("adamw", 1e-2, STEPS, 1), config.trainer_config(),
                 evaluation.Evaluation(evaluate, metric, every, keep_best, patience))
  run.kill_at = kill_at
  holder["run"] = run
  return run, run.train()


def _checksum(model):
  return float(sum(np.sum(np.square(w.numpy(), dtype=np.float64)) for w in model.weights))


def _weights(model):
  return [w.numpy() for w in model.variables]


def test_a_run_killed_after_an_evaluation_resumes_to_the_same_weights_and_best_state(data, tmp_path):
  # Evaluations at 2, 4, 6, 8 and 9 (the end); the best at 6, after the checkpoint at 5; the kill at 8 comes
  # before that step's evaluation.
  scores = {2: 0.5, 4: 0.4, 6: 0.8, 8: 0.7, 9: 0.6}
  whole, result = _run(data, tmp_path / "whole", scores)
  assert [h["step"] for h in result.evaluation["eval_history"]] == [2, 4, 6, 8, 9]
  assert result.evaluation["best_step"] == 6 and result.evaluation["best_metric"] == 0.8
  assert not result.evaluation["stopped_early"] and result.steps_run == STEPS
  assert "label" not in result.evaluation["eval_history"][0]  # numbers only
  # The kept weights are step 6's (the checksum it was evaluated with), not the last step's.
  history = result.evaluation["eval_history"]
  assert _checksum(whole.model) == history[2]["checksum"] != history[4]["checksum"]
  assert sorted(os.listdir(tmp_path / "whole" / evaluation.BEST_DIR)) == ["ckpt-6.data-00000-of-00001",
                                                                            "ckpt-6.index"]

  with pytest.raises(Killed):
    _run(data, tmp_path / "out", scores, kill_at=8)
  assert os.path.exists(tmp_path / "out" / "best" / "ckpt-6.index")  # written before the kill, not yet committed
  resumed, result2 = _run(data, tmp_path / "out", scores)
  assert result2.steps_run == STEPS - 5  # resumed from ckpt-5
  assert result2.evaluation == result.evaluation  # every evaluation (checksums too), the best, bit for bit
  for a, b in zip(_weights(resumed.model), _weights(whole.model)):
    np.testing.assert_array_equal(a, b)
  for a, b in zip(_weights(resumed.optimizer), _weights(whole.optimizer)):
    np.testing.assert_array_equal(a, b)
  assert sorted(os.listdir(tmp_path / "out" / "best")) == sorted(os.listdir(tmp_path / "whole" / "best"))

  # TensorBoard: the evaluations under eval/, in <output_dir>/eval.
  events = tf.io.gfile.glob(str(tmp_path / "whole" / "eval" / "events.out.tfevents.*"))
  tags = {(e.step, v.tag) for path in events for e in tf.compat.v1.train.summary_iterator(path)
          for v in e.summary.value}
  assert {(s, "eval/accuracy") for s in scores} <= tags


def test_early_stopping_ends_the_run_normally_and_a_rerun_stays_stopped(data, tmp_path):
  scores = {2: 0.5, 4: 0.5, 6: 0.4, 8: 0.9, 9: 0.9}  # 4 and 6 do not improve on 2: stop at 6
  run, result = _run(data, tmp_path, scores, keep_best=False, patience=2)
  assert (result.step, result.interrupted, result.exit_code) == (6, False, 0)
  assert result.evaluation["stopped_early"] and result.evaluation["best_step"] == 2
  assert tf.train.latest_checkpoint(str(tmp_path / "checkpoints")).endswith("ckpt-6")
  assert not os.path.exists(tmp_path / "best")  # without --keep_best_checkpoint: the last weights
  weights = _weights(run.model)
  again, result2 = _run(data, tmp_path, scores, keep_best=False, patience=2)
  assert (result2.step, result2.steps_run, result2.evaluation) == (6, 0, result.evaluation)
  for a, b in zip(_weights(again.model), weights):
    np.testing.assert_array_equal(a, b)


def test_patience_running_out_at_the_last_step_is_a_normal_finish_not_an_early_stop(data, tmp_path):
  scores = {2: 0.5, 4: 0.6, 6: 0.7, 8: 0.6, 9: 0.6}  # the second evaluation without improvement is the last
  _, result = _run(data, tmp_path, scores, keep_best=False, patience=2)
  assert (result.step, result.evaluation["stopped_early"], result.evaluation["best_step"]) == (9, False, 6)


def test_a_loss_is_best_lowest_and_stops_early_when_it_stops_falling(data, tmp_path):
  # --metric_for_best=loss (every task's evaluation loss): the lowest is the best; 4 and 6 do not fall below 2.
  scores = {2: 0.5, 4: 0.7, 6: 0.5, 8: 0.1, 9: 0.2}
  run, result = _run(data, tmp_path / "stopped", scores, keep_best=True, patience=2, metric="loss")
  assert (result.step, result.evaluation["stopped_early"], result.evaluation["best_step"]) == (6, True, 2)
  assert _checksum(run.model) == result.evaluation["eval_history"][0]["checksum"]  # step 2's weights kept
  _, result = _run(data, tmp_path / "whole", scores, keep_best=False, metric="loss")
  history = result.evaluation["eval_history"]
  assert [h["loss"] for h in history] == [0.5, 0.7, 0.5, 0.1, 0.2]
  assert (result.evaluation["best_step"], result.evaluation["best_metric"]) == (8, min(h["loss"] for h in history))


@pytest.mark.parametrize("keep_best, patience, refused", [(True, 0, "--keep_best_checkpoint"),
                                                         (False, 2, "--early_stopping_patience"),
                                                         (True, 2,
                                                          "--keep_best_checkpoint and --early_stopping_patience"),
                                                         (False, 0, None)])
def test_a_checkpoint_without_evaluation_state_is_refused_only_when_the_best_or_early_stopping_need_it(
    tmp_path, keep_best, patience, refused):
  model = keras.Sequential([keras.Input([3]), keras.layers.Dense(2)])
  tracker = evaluation.EvalTracker(evaluation.Evaluation(lambda m: {}, "accuracy", 5, keep_best, patience), model,
                                   STRATEGY, str(tmp_path))
  plain = tf.train.Checkpoint(model=model).write(str(tmp_path / "plain" / "ckpt-3"))
  if refused:
    with pytest.raises(ValueError) as error:
      tracker.check_checkpoint(plain)
    assert str(error.value) == (f"{plain} was saved by a run without --eval_every_steps, and {refused} decide from "
                                f"every evaluation since the first step: resume it without {refused}, or start over "
                                "in a new --output_dir")
  else:  # the evaluations start with the resumed run (test_pretraining resumes one)
    tracker.check_checkpoint(plain)
  tracker.check_checkpoint(tf.train.Checkpoint(evaluation=tracker.variable).write(str(tmp_path / "ok" / "ckpt-3")))
  tracker.check_checkpoint(None)


def test_keeping_the_best_or_stopping_early_needs_a_metric():
  with pytest.raises(ValueError, match="--keep_best_checkpoint and --early_stopping_patience need --metric_for_best"):
    evaluation.Evaluation(lambda m: {}, None, 5, keep_best=True)
  with pytest.raises(ValueError, match="need --metric_for_best"):
    evaluation.Evaluation(lambda m: {}, None, 5, early_stopping_patience=1)


def test_a_value_beyond_float32_is_logged_but_not_written_as_a_scalar(tmp_path, caplog):
  import logging

  report = evaluation.EvalReport(str(tmp_path))
  with caplog.at_level(logging.INFO, logger="absl"):
    report.write(3, {"best_f1": 51.3, "best_f1_thresh": 1.7976931348623157e308})
  assert "eval at step 3: best_f1 51.3  best_f1_thresh 1.798e+308" in caplog.text
  from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

  events = EventAccumulator(str(tmp_path / "eval"), size_guidance={"tensors": 0})
  events.Reload()
  assert events.Tags()["tensors"] == ["eval/best_f1"]

