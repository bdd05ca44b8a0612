"""The shared training flags of the scripts, and what their failures print (bert_tf/cli.py)."""

import dataclasses
import os

import pytest
from absl import flags

from bert_tf import cli
from bert_tf.training import distribute, optimization, run_options, trainer


def parsed(*argv):
  values = flags.FlagValues()
  cli.define_training_flags(steps_per_loop=7, log_steps=3, flag_values=values)
  values(["prog", *argv])
  return values


def test_choices_are_the_library_ones():
  parsed_values = parsed()
  for flag, choices in (("distribution_strategy", distribute.STRATEGIES), ("optimizer", optimization.OPTIMIZERS),
                        ("dtype", trainer.DTYPES), ("all_reduce_alg", distribute.ALL_REDUCE_ALGS),
                        ("collective_implementation", distribute.COLLECTIVE_IMPLEMENTATIONS)):
    assert parsed_values[flag].parser.enum_values == list(choices), flag


def test_the_flags_values_are_the_run_options_but_seed_and_keep_checkpoint_max():
  """Scripts define --seed (and run_pretraining.py --keep_checkpoint_max) with their own help."""
  fields = {f.name for f in dataclasses.fields(run_options.RunOptions)}
  assert fields - set(cli.training_flag_values(parsed())) == {"seed", "keep_checkpoint_max"}
  assert set(cli.training_flag_values(parsed())) <= fields


def test_defaults_become_config_fields():
  assert cli.training_flag_values(parsed()) == dict(
      distribution_strategy="mirrored", steps_per_loop=7, save_checkpoints_steps=1000, log_steps=3, num_gpus=None,
      all_reduce_alg=None, collective_implementation="auto", tpu_name=None, tpu_zone=None, gcp_project=None,
      optimizer="adamw", dtype="float32", jit_compile=False,
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


def _finetuning_flags(*argv, **options):
  values = flags.FlagValues()
  cli.define_finetuning_flags("squad", unit="window", do_train="T.", do_eval="E.", do_predict="P.",
                              flag_values=values, **options)
  values(["prog", *argv])
  return values


def test_finetuning_flags_have_google_researchs_defaults_and_the_tasks():
  values = _finetuning_flags()
  assert {name: values[name].value for name in (
      "max_seq_length", "train_batch_size", "eval_batch_size", "predict_batch_size", "learning_rate",
      "num_train_epochs", "warmup_proportion", "do_lower_case", "seed", "dynamic_padding", "model_name",
      "save_checkpoints_steps", "steps_per_loop", "log_steps")} == dict(
          max_seq_length=128, train_batch_size=32, eval_batch_size=8, predict_batch_size=8, learning_rate=5e-5,
          num_train_epochs=3.0, warmup_proportion=0.1, do_lower_case=True, seed=12345, dynamic_padding=True,
          model_name=None, save_checkpoints_steps=1000, steps_per_loop=50, log_steps=50)
  assert "max_train_examples" not in values
  values = _finetuning_flags(max_seq_length=384, train_batch_size=13, learning_rate=2e-5, model_name="squad",
                             eval_batch_size=False, max_train_examples=True,
                             helps={"export_dir": "Answers, exported."})
  assert (values.max_seq_length, values.train_batch_size, values.learning_rate, values.model_name) == \
      (384, 13, 2e-5, "squad")
  assert "eval_batch_size" not in values and values.max_train_examples == 0
  shown = " ".join(values.module_help(__name__).split())  # absl wraps the help at 80 columns
  assert "--export_dir: Answers, exported." in shown and "--[no]do_eval: E." in shown
  assert "--output_dir: Where checkpoints, results, predictions and squad_model/ go." in shown
  assert "--max_seq_length: Tokens per window after WordPiece" in shown


def test_finetuning_flags_are_key_flags_of_the_defining_script_training_and_evaluation_flags_included():
  keys = {flag.name for flag in _finetuning_flags().get_key_flags_for_module(__name__)}
  assert {"output_dir", "init_checkpoint", "learning_rate", "seed", "export_dir", "model_name", "optimizer",
          "use_tpu", *cli.EVALUATION_FLAGS} <= keys


def test_help_for_a_flag_that_is_not_shared_is_refused():
  with pytest.raises(ValueError, match="help for doc_stride: not a shared fine-tuning flag"):
    _finetuning_flags(helps={"doc_stride": "Tokens."})


def test_the_finetuning_config_is_built_from_the_flags(tmp_path):
  from bert_tf.training import finetuning
  from tests import training_helpers as th

  th.tiny_bert_config().to_json_file(str(tmp_path / "bert_config.json"))
  (tmp_path / "vocab.txt").write_text("[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nthe\n")
  common = [f"--bert_config_file={tmp_path / 'bert_config.json'}", f"--vocab_file={tmp_path / 'vocab.txt'}"]
  with pytest.raises(ValueError, match="^--output_dir is required$"):
    cli.finetuning_config(dict, flag_values=_finetuning_flags(*common))
  given = _finetuning_flags(*common, f"--output_dir={tmp_path / 'out'}", "--learning_rate=3e-5", "--do_train",
                            "--max_seq_length=37", "--eval_batch_size=5", "--seed=7", "--eval_every_steps=3",
                            "--nodynamic_padding", eval_batch_size=True)
  with pytest.raises(ValueError, match="^--features_dir is required: a folder for the features$"):
    cli.finetuning_config(dict, require={"features_dir": "a folder for the features"}, flag_values=given)
  built = cli.finetuning_config(dict, flag_values=given, doc_stride=11)
  ft = built.pop("finetuning")
  assert isinstance(ft, finetuning.FinetuningConfig)
  assert (ft.output_dir, ft.learning_rate, ft.eval_batch_size, ft.seed, ft.eval_every_steps, ft.train_batch_size) \
      == (str(tmp_path / "out"), 3e-5, 5, 7, 3, 32)
  assert ft.bert_config == th.tiny_bert_config()
  assert built == dict(vocab_file=str(tmp_path / "vocab.txt"), bert_config_file=str(tmp_path / "bert_config.json"),
                       do_lower_case=True, do_train=True, do_eval=False, do_predict=False, max_seq_length=37,
                       features_dir=None, dynamic_padding=False, export_dir=None, model_name=None,
                       max_request_chars=500_000, doc_stride=11)


def test_an_export_is_not_written_into_the_model_it_reads(tmp_path):
  model = tmp_path / "out" / "classifier"
  model.mkdir(parents=True)
  os.symlink(model, tmp_path / "link")
  for export_dir in (tmp_path / "out", tmp_path / "export", "gs://bucket/export"):  # beside it or elsewhere: fine
    cli.check_export_dir_outside(str(export_dir), str(model), "classifier_dir")
  for export_dir in (tmp_path / "link", tmp_path / "link" / "export"):
    with pytest.raises(ValueError) as caught:
      cli.check_export_dir_outside(str(export_dir), str(model), "classifier_dir")
    assert str(caught.value) == (f"--export_dir={export_dir} lies in --classifier_dir's {model}: the export would "
                                 "be written into the model it reads; give another --export_dir")


def test_the_run_scripts_define_only_their_tasks_own_flags():
  """The flags every fine-tuning script has are cli.define_finetuning_flags'; a script defines no such flag."""
  import os
  import re

  shared = set(_finetuning_flags(max_train_examples=True))
  repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  for script in ("run_classifier", "run_squad", "run_ner", "run_swag"):
    with open(os.path.join(repo, "scripts", f"{script}.py"), encoding="utf-8") as f:
      own = re.findall(r"DEFINE_\w+\(\s*\"(\w+)\"", f.read())
    assert own and not set(own) & shared, (script, sorted(set(own) & shared))


def test_the_masking_flags_have_google_researchs_rates_and_say_when_they_apply():
  values = flags.FlagValues()
  cli.define_masking_flags("--dynamic_masking", flag_values=values)
  values(["prog", "--random_token_rate=0.05"])
  assert (values.mask_token_rate, values.random_token_rate) == (0.8, 0.05)
  assert {"mask_token_rate", "random_token_rate"} <= {flag.name for flag in values.get_key_flags_for_module(__name__)}
  assert values["mask_token_rate"].help.startswith("With --dynamic_masking: share of the masked-LM positions")
  static = flags.FlagValues()
  cli.define_masking_flags(flag_values=static)
  assert static["random_token_rate"].help.startswith("Share replaced by a random token")


_EXIT_PROBE = """
import atexit, gc, sys
from bert_tf import cli

class Cycle:
  def __init__(self, path):
    self.path, self.me = path, self
  def __del__(self):
    with open(self.path, "w") as f:
      f.write("finalized")

def main(argv):
  Cycle(sys.argv[1])  # garbage in a reference cycle: only the collector frees it
  if sys.argv[2] == "fail":
    raise ValueError("--x: bad")

atexit.register(lambda: print("frozen", gc.get_freeze_count() > 0))
cli.run(main)
"""


@pytest.mark.parametrize("outcome", ["ok", "fail"])
def test_a_command_collects_once_and_skips_the_collections_of_the_shutdown(tmp_path, outcome):
  import subprocess
  import sys

  import training_helpers as th

  marker = tmp_path / "finalized.txt"
  done = subprocess.run([sys.executable, "-c", _EXIT_PROBE, str(marker), outcome], cwd=tmp_path, env=th.python_env(),
                        capture_output=True, text=True, timeout=60)
  assert done.returncode == (0 if outcome == "ok" else 1), done.stderr
  assert done.stdout.strip() == "frozen True"
  assert marker.read_text() == "finalized"  # garbage of the run is finalized by the one collection
  if outcome == "fail":
    assert done.stderr.strip() == "error: --x: bad"


_START_PROBE = """
import gc, sys
from absl import flags, logging
from bert_tf import cli

cli.define_training_flags(steps_per_loop=1, log_steps=1)
flags.FLAGS(["prog"])
before = gc.get_freeze_count()
cli.start_training()
print(before, gc.get_freeze_count() > 1000, logging.get_verbosity() == logging.INFO)
"""


def test_start_training_sets_the_start_ups_objects_aside_from_the_collector():
  import subprocess
  import sys

  import training_helpers as th

  done = subprocess.run([sys.executable, "-c", _START_PROBE], env=th.python_env(), capture_output=True, text=True,
                        timeout=60)
  assert done.returncode == 0, done.stderr
  assert done.stdout.split() == ["0", "True", "True"]


# -- What the system refuses: one line naming the path, never a traceback ----------------------------------------


def test_system_errors_are_one_line_naming_the_path_and_bugs_keep_their_traceback():
  """cli.run's catch-all, for what only the work meets (the scripts check writability before it)."""
  import errno

  import tensorflow as tf

  fix = "give a path you may write to, or change the permissions of its folder"
  assert cli.system_error_line(OSError(errno.EROFS, "Read-only file system", "/ro/out/x.tmp"), []) == (
      f"/ro/out/x.tmp: not writable (Read-only file system); {fix}")
  assert cli.system_error_line(tf.errors.PermissionDeniedError(None, None, "/ro/x; Read-only file system"), []) == (
      f"/ro/x: not writable (Read-only file system); {fix}")
  assert cli.system_error_line(PermissionError(errno.EACCES, "Permission denied", "/etc/x"), []) == (
      "/etc/x: Permission denied; give a path you may use, or change its and its folder's permissions")
  unreachable = tf.errors.AbortedError(None, None, "All 10 retry attempts failed. The last failure: Error executing an "
                                       "HTTP request: libcurl code 6 meaning 'Couldn't resolve host name'\n\t when "
                                       "reading gs://b/")
  assert cli.system_error_line(unreachable, ["--vocab_file=v.txt", "--input_file=gs://b/*.txt"]) == (
      "--input_file=gs://b/*.txt: Cloud Storage could not be reached (All 10 retry attempts failed. The last failure: "
      "Error executing an HTTP request: libcurl code 6 meaning 'Couldn't resolve host name'); check the network, the "
      "credentials (gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS) and, for an emulator, "
      "STORAGE_EMULATOR_HOST")
  assert cli.system_error_line(KeyError("[CLS]"), []) is None
  assert cli.system_error_line(tf.errors.AbortedError(None, None, "gs://b/x: cancelled"), []) is None


def _read_only(folder):
  """The command prefix that runs a command with `folder` read-only, as a user meets it: as root (whom permission
  bits do not stop) a read-only bind mount of it in a mount namespace of the command's own (EROFS, as on a
  read-only disk); otherwise the folder's mode 0o555 (EACCES). Skips where neither can be had."""
  import subprocess

  if os.geteuid() != 0:
    os.chmod(folder, 0o555)
    return [], "Permission denied"
  prefix = ["unshare", "--mount", "sh", "-c", 'mount --bind -o ro "$0" "$0" && exec "$@"', str(folder)]
  try:
    probe = subprocess.run([*prefix, "touch", os.path.join(folder, "probe")], capture_output=True, text=True)
  except FileNotFoundError:
    probe = None
  if probe is None or "Read-only file system" not in probe.stderr:
    pytest.skip("running as root, and a read-only bind mount (unshare --mount) is not allowed here")
  return prefix, "Read-only file system"


def test_every_script_that_writes_refuses_a_read_only_folder_in_one_line_before_any_work(tmp_path):
  """Issue 40 (6): read-only output folders were OSError: [Errno 30] or PermissionDeniedError tracebacks, some after
  all the work. Each script tries its output's folder first (fileio.check_writable)."""
  import concurrent.futures
  import subprocess
  import sys

  import training_helpers as th
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  (tmp_path / "ro").mkdir()
  (tmp_path / "corpus.txt").write_text("The cat sat.\nIt ran.\n\nA dog ran.\nIt sat.\n")
  th.write_vocab(tmp_path)
  th.write_records(tmp_path / "records", num_files=1)
  checkpoints.export_encoder(BertEncoder(th.tiny_bert_config()), th.tiny_bert_config(), str(tmp_path / "model"))
  (tmp_path / "MRPC").mkdir()
  (tmp_path / "MRPC" / "train.tsv").write_text("Quality\t#1 ID\t#2 ID\t#1 String\t#2 String\n1\t1\t2\tw5 w6\tw7\n")
  before = sorted(os.listdir(tmp_path))
  prefix, reason = _read_only(tmp_path / "ro")
  commands = {  # script: (its arguments, the flag and value that name the read-only folder)
      "learn_vocab.py": (["--input_file=corpus.txt", "--vocab_size=200"], "--vocab_file=ro/vocab.txt"),
      "create_pretraining_data.py": (["--input_file=corpus.txt", "--vocab_file=vocab.txt"],
                                     "--output_file=ro/records/p.tfrecord"),
      "extract_features.py": (["--input_file=corpus.txt", "--init_checkpoint=model", "--layers=-1",
                               "--max_seq_length=13"], "--output_file=ro/features.jsonl"),
      "run_classifier.py": (["--task_name=MRPC", "--data_dir=MRPC", "--init_checkpoint=model", "--do_train",
                             "--max_seq_length=13"], "--output_dir=ro/classifier"),
      "run_pretraining.py": (["--input_file=records/*.tfrecord", "--bert_config_file=model/bert_config.json",
                              f"--max_seq_length={th.T}", f"--max_predictions_per_seq={th.P}",
                              "--num_train_steps=1"], "--output_dir=ro/pretraining"),
      "convert_checkpoint.py": (["--input_format=ours", "--input=model"], "--output_dir=ro/converted"),
      "export.py": (["--model_dir=model"], "--export_dir=ro/export"),
      "main_job.py": (["--records_dir=records"], "--work_dir=ro/main_job"),
  }

  def run(script):
    args, output = commands[script]
    return subprocess.run([*prefix, sys.executable, os.path.join(th.REPO, "scripts", script), *args, output],
                          cwd=tmp_path, env=th.python_env(), capture_output=True, text=True, timeout=300)

  try:
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
      results = dict(zip(commands, pool.map(run, commands)))
  finally:
    os.chmod(tmp_path / "ro", 0o755)
  folder = os.path.realpath(tmp_path / "ro")
  for script, result in results.items():
    expected = (f"error: {commands[script][1]}: {folder} is not writable ({reason}); give a folder you may write to, "
                "or change its permissions")
    assert (result.returncode, result.stderr.strip().splitlines()[-1]) == (1, expected), result.stderr[-3000:]
    assert "Traceback" not in result.stderr, script
  assert sorted(os.listdir(tmp_path)) == before and os.listdir(tmp_path / "ro") == []  # nothing written
