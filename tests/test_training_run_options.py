"""bert_tf/training/run_options.py: the run options pretraining's and fine-tuning's configs share, declared,
checked and turned into a strategy once."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

import training_helpers as th
from bert_tf.tasks.pretraining.config import PretrainingConfig
from bert_tf.training import finetuning
from bert_tf.training.run_options import RunOptions

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OPTIONS = [f.name for f in dataclasses.fields(RunOptions)]


def _finetuning(**fields) -> finetuning.FinetuningConfig:
  return finetuning.FinetuningConfig(output_dir="out/task", bert_config=th.tiny_bert_config(), **fields)


def _pretraining(**fields) -> PretrainingConfig:
  return PretrainingConfig(input_file="in.tfrecord", output_dir="out/pretraining",
                                       bert_config=th.tiny_bert_config(), max_seq_length=th.T,
                                       max_predictions_per_seq=th.P, **fields)


def test_both_configs_have_every_option_with_their_own_cadence_defaults():
  cadence = ("keep_checkpoint_max", "steps_per_loop", "log_steps")
  assert [getattr(_finetuning(), name) for name in cadence] == [1, 50, 50]
  assert [getattr(_pretraining(), name) for name in cadence] == [5, 100, 100]
  for config in (_finetuning(), _pretraining()):
    assert isinstance(config, RunOptions)
    others = {name: getattr(RunOptions(), name) for name in OPTIONS if name not in cadence}
    assert {name: getattr(config, name) for name in others} == others


def test_the_options_are_keyword_only_and_the_configs_own_fields_keep_their_places():
  config = finetuning.FinetuningConfig("out/task", th.tiny_bert_config(), "ckpt", 24, dtype="mixed_bfloat16")
  assert (config.init_checkpoint, config.train_batch_size, config.dtype) == ("ckpt", 24, "mixed_bfloat16")
  with pytest.raises(TypeError):
    RunOptions("one_device")  # pylint: disable=too-many-function-args


@pytest.mark.parametrize("field,value,message", [
    ("steps_per_loop", 0, "--steps_per_loop=0: must be >= 1"),
    ("log_steps", 0, "--log_steps=0: must be >= 1"),
    ("save_checkpoints_steps", -3, "--save_checkpoints_steps=-3: must be >= 1"),
    ("keep_checkpoint_max", 0, "--keep_checkpoint_max=0: must be >= 1"),
    ("gradient_accumulation_steps", 0, "--gradient_accumulation_steps=0: must be >= 1"),
    ("dtype", "float16", "--dtype='float16': choose one of"),
    ("optimizer", "sgd", "--optimizer='sgd': choose one of"),
    ("distribution_strategy", "parameter_server", "--distribution_strategy='parameter_server': choose one of"),
    ("seed", -1, "--seed=-1: must be >= 0"),
])
def test_each_config_checks_the_options_alike(field, value, message):
  with pytest.raises(ValueError, match=message):
    RunOptions(**{field: value}).check_run_options()
  for make in (_finetuning, _pretraining):
    with pytest.raises(ValueError, match=message):
      make(**{field: value}).validate()


def test_float16_on_tpu_is_refused_and_good_options_pass():
  with pytest.raises(ValueError, match="--dtype=mixed_float16 on TPU: TPUs compute in bfloat16"):
    RunOptions(dtype="mixed_float16", distribution_strategy="tpu").check_run_options()
  RunOptions(dtype="mixed_bfloat16", distribution_strategy="tpu", optimizer="lamb", seed=0).check_run_options()


def test_learning_rate_is_each_configs_own_check():
  for make in (_finetuning, _pretraining):
    with pytest.raises(ValueError, match="--learning_rate=0.0: must be > 0"):
      make(learning_rate=0.0).validate()


def test_strategy_is_the_one_named():
  strategy = _pretraining(distribution_strategy="one_device", num_gpus=0).strategy()
  assert type(strategy).__name__ == "OneDeviceStrategy" and strategy.num_replicas_in_sync == 1
  with pytest.raises(ValueError, match="--all_reduce_alg is for --distribution_strategy=mirrored, not one_device"):
    _finetuning(distribution_strategy="one_device", all_reduce_alg="ring").strategy()


def test_the_options_and_the_scripts_flags_load_no_tensorflow():
  code = ("import sys; from bert_tf import cli; from bert_tf.training import run_options; "
          "print('tensorflow' in sys.modules)")
  shown = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, "PYTHONPATH": REPO})
  assert shown.stdout.split() == ["False"], shown.stderr[-2000:]
