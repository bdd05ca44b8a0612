"""The shared training flags of the scripts (bert_tf/cli.py)."""

import pytest
from absl import flags

from bert_tf import cli
from bert_tf.training import distribute, optimization, trainer


def parsed(*argv):
  values = flags.FlagValues()
  cli.define_training_flags(steps_per_loop=7, log_steps=3, flag_values=values)
  values(["prog", *argv])
  return values


def test_choices_are_the_library_ones():
  assert cli.STRATEGIES == tuple(distribute.STRATEGIES)
  assert cli.OPTIMIZERS == tuple(optimization.OPTIMIZERS)
  assert cli.DTYPES == tuple(trainer.DTYPES)
  parsed_values = parsed()
  assert parsed_values["all_reduce_alg"].parser.enum_values == list(distribute.ALL_REDUCE_ALGS)
  assert parsed_values["collective_implementation"].parser.enum_values == list(distribute.COLLECTIVE_IMPLEMENTATIONS)


def test_defaults_become_config_fields():
  assert cli.training_flag_values(parsed()) == dict(
      distribution_strategy="mirrored", steps_per_loop=7, save_checkpoints_steps=1000, log_steps=3, num_gpus=None,
      all_reduce_alg=None, collective_implementation="auto", tpu_name=None, tpu_zone=None, gcp_project=None, optimizer="adamw", dtype="float32", jit_compile=False,
      gradient_accumulation_steps=1, overwrite_output_dir=False)


def test_google_research_aliases_are_resolved():
  values = cli.training_flag_values(parsed("--use_tpu", "--tpu_name=local", "--iterations_per_loop=11"))
  assert values["distribution_strategy"] == "tpu" and values["steps_per_loop"] == 11
  assert values["tpu_name"] == "local"


@pytest.mark.parametrize("argv,message", [
    (["--use_tpu", "--distribution_strategy=mirrored"], "--use_tpu contradicts"),
    (["--iterations_per_loop=5", "--steps_per_loop=5"], "same setting"),
])
def test_contradicting_aliases_name_both_flags(argv, message):
  with pytest.raises(ValueError, match=message):
    cli.training_flag_values(parsed(*argv))


def test_unknown_choice_is_rejected_by_the_parser():
  with pytest.raises(flags.IllegalFlagValueError, match="adam_w"):
    parsed("--optimizer=adam_w")


def test_evaluation_flags_are_the_finetuning_config_fields_with_its_defaults():
  import dataclasses

  from bert_tf.training import finetuning

  values = flags.FlagValues()
  cli.define_evaluation_flags(flag_values=values)
  values(["prog", "--eval_every_steps=7", "--keep_best_checkpoint"])
  got = cli.evaluation_flag_values(values)
  assert got == dict(eval_every_steps=7, keep_best_checkpoint=True, metric_for_best=None, early_stopping_patience=0)
  fields = {f.name: f.default for f in dataclasses.fields(finetuning.FinetuningConfig)}
  assert all(name in fields for name in got)
  defaults = flags.FlagValues()
  cli.define_evaluation_flags(flag_values=defaults)
  defaults(["prog"])
  assert cli.evaluation_flag_values(defaults) == {name: fields[name] for name in cli.EVALUATION_FLAGS}


def test_the_shared_flags_are_key_flags_of_the_defining_script():
  values = flags.FlagValues()
  cli.define_training_flags(steps_per_loop=7, log_steps=3, flag_values=values)
  shared = {"save_checkpoints_steps", "optimizer", "dtype", "distribution_strategy", "steps_per_loop", "use_tpu"}
  assert shared <= {flag.name for flag in values.get_key_flags_for_module(__name__)}
  assert "--save_checkpoints_steps: Checkpoint every this many updates." in values.module_help(__name__)
  cli.define_evaluation_flags(flag_values=values)
  assert set(cli.EVALUATION_FLAGS) <= {flag.name for flag in values.get_key_flags_for_module(__name__)}


@pytest.mark.parametrize("script", ["run_pretraining", "run_classifier", "run_squad", "run_ner", "run_swag"])
def test_help_of_each_training_script_lists_the_shared_flags(script):
  import os
  import subprocess
  import sys

  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  shown = subprocess.run([sys.executable, os.path.join(repo, "scripts", f"{script}.py"), "--help"],
                         capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": repo}).stdout
  # --eval_every_steps: every script has it (run_pretraining.py its own); the rest are fine-tuning's.
  evaluation = ("eval_every_steps",) if script == "run_pretraining" else cli.EVALUATION_FLAGS
  for name in ("save_checkpoints_steps", "optimizer", "dtype", "gradient_accumulation_steps", "deterministic",
               *evaluation):
    assert f"  --{name}" in shown or f"  --[no]{name}" in shown, (script, name)
