"""bert_tf.tasks.pretraining's input checks: every record file before any work, and the damaged record named
after TensorFlow's DataLossError mid-run."""

import dataclasses
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import training_helpers as th
from bert_tf.data import records
from bert_tf.tasks.pretraining import run as pretraining
from bert_tf.tasks.pretraining.config import PretrainingConfig
from bert_tf.tasks.pretraining.task import Evaluator, PretrainingTask

CONFIG_FILE = "tiny/bert_config.json"  # only named in messages


def _write(path, ids=(2, 7, 3), t=th.T, masked_id=7) -> int:
  """Three records of `ids`; returns the size of one framed record."""
  serializer = records.RecordSerializer(t, th.P, vocab_size=max([*ids, masked_id]) + 1)
  serialized = [serializer.serialize(list(ids), [0] * len(ids), [1], [masked_id], 0)] * 3
  records.write_tfrecord_file(str(path), serialized)
  return len(records.frame_record(serialized[0]))


def _config(input_file, **overrides):
  fields = dict(input_file=str(input_file), output_dir="unused", bert_config=th.tiny_bert_config(),
                bert_config_file=CONFIG_FILE, max_seq_length=th.T, max_predictions_per_seq=th.P)
  return PretrainingConfig(**{**fields, **overrides})


def test_good_records_pass(tmp_path):
  _write(tmp_path / "a.tfrecord", ids=(2, th.VOCAB - 1, 3), masked_id=th.VOCAB - 1)
  _write(tmp_path / "b.tfrecord")
  pretraining.check_records(_config(tmp_path / "*.tfrecord", vocab_file=th.write_vocab(tmp_path)))


@pytest.mark.parametrize("where", ["input_ids", "masked_lm_ids"])
def test_token_ids_past_vocab_size(tmp_path, where):
  _write(tmp_path / "a.tfrecord")
  bad = tmp_path / "b.tfrecord"
  _write(bad, ids=(2, 120, 3) if where == "input_ids" else (2, 7, 3), masked_id=130 if where == "masked_lm_ids" else 7)
  top = 120 if where == "input_ids" else 130
  with pytest.raises(ValueError) as error:
    pretraining.check_records(_config(tmp_path / "*.tfrecord"))
  assert str(error.value) == (
      f"{bad}: records hold token id {top} but {CONFIG_FILE} says vocab_size={th.VOCAB}: set \"vocab_size\" in "
      f"{CONFIG_FILE} to the vocabulary's size (the number of lines of vocab.txt), or remake the records with the "
      "model's vocabulary")


def test_vocab_file_larger_than_the_config(tmp_path):
  _write(tmp_path / "a.tfrecord")
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("".join(f"t{i}\n" for i in range(th.VOCAB + 4)))
  with pytest.raises(ValueError) as error:
    pretraining.check_records(_config(tmp_path / "*.tfrecord", vocab_file=str(vocab)))
  assert str(error.value) == (
      f"--vocab_file={vocab} has {th.VOCAB + 4} tokens (lines) but {CONFIG_FILE} says vocab_size={th.VOCAB}: set "
      f"\"vocab_size\": {th.VOCAB + 4} in {CONFIG_FILE}, or pass the vocabulary the model was made with")


def test_mixed_lengths_name_both_files(tmp_path):
  a, b = tmp_path / "a.tfrecord", tmp_path / "b.tfrecord"
  _write(a)
  _write(b, t=th.T - 2)
  with pytest.raises(ValueError) as error:
    pretraining.check_records(_config(f"{a},{b}"))
  assert str(error.value).startswith(
      f"{b} holds records of max_seq_length {th.T - 2}, max_predictions_per_seq {th.P} but {a} holds records of "
      f"max_seq_length {th.T}, max_predictions_per_seq {th.P}: ")


def test_flag_mismatch_is_reported_for_the_records(tmp_path):
  path = tmp_path / "a.tfrecord"
  _write(path)
  with pytest.raises(ValueError) as error:
    pretraining.check_records(_config(path, max_predictions_per_seq=th.P + 1))
  assert str(error.value) == (f"{path}: records have max_predictions_per_seq {th.P}; pass "
                              f"--max_predictions_per_seq={th.P}")


def test_input_error_names_the_damaged_record(tmp_path):
  _write(tmp_path / "a.tfrecord")
  bad = tmp_path / "b.tfrecord"
  frame = _write(bad)
  data = bytearray(bad.read_bytes())
  data[2 * frame + 20] ^= 0x04
  bad.write_bytes(bytes(data))
  task = PretrainingTask(_config(tmp_path / "*.tfrecord"))
  error = tf.errors.DataLossError(None, None, "{{function_node __wrapped__IteratorGetNext_output_types_1_device_/"
                                  "job:localhost/replica:0/task:0/device:CPU:0}} corrupted record at 120 "
                                  "[Op:IteratorGetNext]\n\t [[{{node IteratorGetNext}}]]")
  assert task.input_error(error) == f"{bad}: record 2 (byte {2 * frame}) is corrupt: its data fails its checksum"
  bad.write_bytes(bytes(data[:2 * frame]))  # now whole: TensorFlow's own first line is all there is to say
  assert task.input_error(error) == "corrupted record at 120 [Op:IteratorGetNext]"


@pytest.mark.slow  # a subprocess that imports TensorFlow: about 12 s here
def test_run_pretraining_script_stops_on_a_truncated_relative_input_file(tmp_path):
  os.makedirs(tmp_path / "data")
  path = tmp_path / "data" / "cut.tfrecord"
  _write(path)
  data = path.read_bytes()
  path.write_bytes(data[:-5])
  th.tiny_bert_config().to_json_file(str(tmp_path / "bert_config.json"))
  script = os.path.join(th.REPO, "scripts", "run_pretraining.py")
  flags = ["--input_file=data/cut.tfrecord", "--output_dir=out", "--bert_config_file=bert_config.json",
           f"--max_seq_length={th.T}", f"--max_predictions_per_seq={th.P}", "--distribution_strategy=one_device"]
  result = subprocess.run([sys.executable, script, *flags], cwd=tmp_path, env=th.python_env(), capture_output=True,
                          text=True, timeout=240)
  assert result.returncode == 1, result.stderr[-2000:]
  errors = [line for line in result.stderr.splitlines() if line.startswith("error")]
  assert errors == [f"error: data/cut.tfrecord: truncated at byte {len(data) - 5} after 2 records: the writer was "
                    "interrupted; recreate it"], result.stderr[-2000:]
  assert "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "out")


def _corrupt_record(path, index: int) -> tuple[bytes, int]:
  """Flips a byte of record `index`'s data in the TFRecord file `path` (its data checksum fails); returns the file's
  bytes before and the record's offset."""
  data = bytearray(path.read_bytes())
  original, offset = bytes(data), 0
  for _ in range(index):
    offset += 16 + int.from_bytes(data[offset:offset + 8], "little")
  data[offset + 12 + 5] ^= 0xFF
  path.write_bytes(bytes(data))
  return original, offset


def _run_pretraining(cwd, *flags, steps: int = 40) -> subprocess.CompletedProcess:
  common = ["--input_file=data/records-*.tfrecord", "--bert_config_file=bert_config.json", f"--max_seq_length={th.T}",
            f"--max_predictions_per_seq={th.P}", "--train_batch_size=6", f"--num_train_steps={steps}",
            "--num_warmup_steps=0", "--save_checkpoints_steps=2", "--distribution_strategy=one_device"]
  return subprocess.run([sys.executable, os.path.join(th.REPO, "scripts", "run_pretraining.py"), *common, *flags],
                        cwd=cwd, env=th.python_env(), capture_output=True, text=True, timeout=300)


def _errors(result) -> list[str]:
  return [line for line in result.stderr.splitlines() if line.startswith("error:")]


@pytest.mark.slow
def test_a_record_corrupted_past_the_checked_sample_stops_training_naming_the_file_and_the_same_command_then_runs(
    tmp_path):
  """Record 80, past the 64 records the up-front check reads: the shuffle buffer (1,000 records) reads it at the
  first step, before any checkpoint, so nothing binds the run to the file yet: fixed, the same command runs."""
  th.write_records(tmp_path / "data", num_files=1, per_file=90)
  path = tmp_path / "data" / "records-000.tfrecord"
  original, offset = _corrupt_record(path, 80)
  th.tiny_bert_config().to_json_file(str(tmp_path / "bert_config.json"))
  result = _run_pretraining(tmp_path, "--output_dir=out")
  assert result.returncode == 1, result.stderr[-3000:]
  assert _errors(result) == [
      f"error: data/records-000.tfrecord: record 80 (byte {offset}) is corrupt: its data fails its checksum; no step "
      "was saved, so nothing binds the run to these records yet: fix the file (or leave it out of --input_file) and "
      "rerun; the run starts from step 0"], result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  assert not os.path.exists(tmp_path / "out" / ".lock") and not os.path.exists(tmp_path / "out" / "run.json")
  path.write_bytes(original)
  again = _run_pretraining(tmp_path, "--output_dir=out")
  assert again.returncode == 0, again.stderr[-3000:]
  assert "starting fresh in" in again.stderr and "step 40/40" in again.stderr


@pytest.mark.slow
def test_after_a_corrupt_record_past_a_checkpoint_the_message_names_what_continues_and_it_does(tmp_path):
  """Issue 40 (7): the message said "fix or remove the file and rerun the same command to resume", and the rerun was
  refused: the run record holds the records' fingerprint. Record 1,300 of 1,400 is read after the shuffle buffer's
  1,000 and ~50 steps, so checkpoints exist: the message names the last one and the two ways on, which both work."""
  th.write_records(tmp_path / "data", num_files=1, per_file=100)
  path = tmp_path / "data" / "records-000.tfrecord"
  path.write_bytes(path.read_bytes() * 14)  # framed records: the file repeated is 1,400 of them
  original, offset = _corrupt_record(path, 1300)
  th.tiny_bert_config().to_json_file(str(tmp_path / "bert_config.json"))
  result = _run_pretraining(tmp_path, "--output_dir=out", steps=80)
  assert result.returncode == 1, result.stderr[-3000:]
  latest = tf.train.latest_checkpoint(str(tmp_path / "out" / "checkpoints"))
  assert latest is not None, result.stderr[-3000:]
  assert _errors(result) == [
      f"error: data/records-000.tfrecord: record 1300 (byte {offset}) is corrupt: its data fails its checksum; the "
      f"last good checkpoint is {latest}, but a resume needs the records the run recorded, so once the file is fixed "
      "or made again, rerun with --overwrite_output_dir to start over, or with another --output_dir and "
      f"--init_checkpoint={latest} to start from its weights"], result.stderr[-3000:]
  path.write_bytes(original)
  import concurrent.futures
  import shutil

  shutil.copytree(tmp_path / "out", tmp_path / "copy")  # each way on from the same run, side by side
  with concurrent.futures.ThreadPoolExecutor(2) as pool:
    onwards = pool.submit(_run_pretraining, tmp_path, "--output_dir=out2", f"--init_checkpoint={latest}", steps=4)
    over = pool.submit(_run_pretraining, tmp_path, "--output_dir=copy", "--overwrite_output_dir", steps=4)
    onwards, over = onwards.result(), over.result()
  assert onwards.returncode == 0, onwards.stderr[-3000:]
  assert f"initialised the encoder from {latest}" in onwards.stderr and "step 4/4" in onwards.stderr
  assert over.returncode == 0, over.stderr[-3000:]
  assert f"starting fresh in {tmp_path / 'copy' / 'checkpoints'}" in over.stderr and "step 4/4" in over.stderr


@pytest.mark.slow
def test_a_run_refused_at_its_init_checkpoint_writes_nothing(tmp_path):
  """Issue 40 (8): an --init_checkpoint of another shape is refused after the run's checks of its output dir; the
  run withdraws its record, and the output dir it made goes too."""
  from bert_tf.model import checkpoints
  from bert_tf.model.encoder import BertEncoder

  th.write_records(tmp_path / "data", num_files=1, per_file=20)
  th.tiny_bert_config().to_json_file(str(tmp_path / "bert_config.json"))
  other = dataclasses.replace(th.tiny_bert_config(), hidden_size=2 * th.tiny_bert_config().hidden_size)
  checkpoints.export_encoder(BertEncoder(other), other, str(tmp_path / "other"))
  result = _run_pretraining(tmp_path, "--output_dir=runs/out", "--init_checkpoint=other", steps=2)
  assert result.returncode == 1 and len(_errors(result)) == 1, result.stderr[-3000:]
  assert "Traceback" not in result.stderr
  assert sorted(os.listdir(tmp_path)) == ["bert_config.json", "data", "other"], _errors(result)


def test_a_full_disk_at_the_encoder_export_says_training_is_saved_and_what_to_free(tmp_path, monkeypatch):
  import errno

  from bert_tf.errors import DiskFull
  from bert_tf.model import checkpoints

  data = th.write_records(tmp_path / "data", num_files=1, per_file=5)

  def no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")

  monkeypatch.setattr(checkpoints, "export_encoder", no_space)
  config = PretrainingConfig(
      input_file=data, output_dir=str(tmp_path / "out"), bert_config=th.tiny_bert_config(), max_seq_length=th.T,
      max_predictions_per_seq=th.P, train_batch_size=2, num_train_steps=2, num_warmup_steps=0,
      distribution_strategy="one_device")
  with pytest.raises(DiskFull) as error:
    pretraining.run_pretraining(config)
  message = str(error.value)
  assert message.startswith(f"no room to write the encoder under {tmp_path / 'out'} (OSError: [Errno 28] No space "
                            "left on device): it needs about ")
  assert message.endswith(f"training finished and is saved in {tmp_path / 'out' / 'checkpoints' / 'ckpt-2'}: "
                          "free space and rerun the same command, which only writes the encoder")
  assert not os.path.exists(tmp_path / "out" / ".lock")


# -- Evaluation (google-research's --do_eval) ------------------------------------------------------------------


def _log_softmax(logits):
  logits = np.asarray(logits, np.float64)
  shifted = logits - logits.max(-1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(-1, keepdims=True))


def _eval_features(rng, n):
  mask = (np.arange(th.T)[None, :] < rng.integers(4, th.T + 1, n)[:, None]).astype(np.int32)
  return {"input_ids": (rng.integers(5, th.VOCAB, (n, th.T)) * mask).astype(np.int32), "input_mask": mask,
          "segment_ids": np.zeros((n, th.T), np.int32),
          "masked_lm_positions": rng.integers(1, 4, (n, th.P)).astype(np.int32),
          "masked_lm_ids": rng.integers(0, th.VOCAB, (n, th.P)).astype(np.int32),
          # Not only 0 and 1: the accuracy and the loss must be weighted as google-research's metrics are.
          "masked_lm_weights": rng.choice(np.array([0.0, 0.5, 1.0, 2.0], np.float32), (n, th.P)),
          "next_sentence_labels": rng.integers(0, 2, (n, 1)).astype(np.int32)}


@pytest.mark.parametrize("objective", ["bert", "no_nsp"])
def test_evaluation_is_google_researchs_weighted_metrics_over_max_eval_steps_batches(objective):
  import keras

  keras.utils.set_random_seed(3)
  task = PretrainingTask(_config("unused", no_nsp=objective == "no_nsp"))
  model = task.build_model()
  rng = np.random.default_rng(1)
  features = _eval_features(rng, 11)  # batches of 3: 3, 3, 3, 2; max_steps=3 reads 9
  # About half the labels the model's own predictions, so that the accuracies are neither 0 nor 1.
  predicted = np.argmax(model(features, training=False)["mlm_logits"], -1)
  features["masked_lm_ids"] = np.where(rng.random(predicted.shape) < 0.5, predicted,
                                       features["masked_lm_ids"]).astype(np.int32)
  dataset = tf.data.Dataset.from_tensor_slices(features).batch(3)
  results = Evaluator(task).evaluate(model, dataset, max_steps=3)

  f = {k: v[:9] for k, v in features.items()}
  outputs = model(f, training=False)
  log_probs = _log_softmax(outputs["mlm_logits"])  # [9, P, V]
  w = f["masked_lm_weights"].astype(np.float64)
  mlm_loss = -np.take_along_axis(log_probs, f["masked_lm_ids"][..., None], -1)[..., 0]  # [9, P]
  mlm_correct = log_probs.argmax(-1) == f["masked_lm_ids"]
  expected = {"masked_lm_accuracy": (w * mlm_correct).sum() / w.sum(),
              "masked_lm_loss": (w * mlm_loss).sum() / w.sum()}
  batch_losses = [(w[b:b + 3] * mlm_loss[b:b + 3]).sum() / (w[b:b + 3].sum() + 1e-5) for b in (0, 3, 6)]
  if objective == "bert":
    nsp_log_probs = _log_softmax(outputs["nsp_logits"])
    labels = f["next_sentence_labels"][:, 0]
    nsp_loss = -nsp_log_probs[np.arange(9), labels]
    expected.update(next_sentence_accuracy=np.mean(nsp_log_probs.argmax(-1) == labels),
                    next_sentence_loss=nsp_loss.mean())
    batch_losses = [loss + nsp_loss[b:b + 3].mean() for loss, b in zip(batch_losses, (0, 3, 6))]
  expected["loss"] = np.mean(batch_losses)
  assert results.keys() == expected.keys()
  assert expected["masked_lm_accuracy"] != mlm_correct.mean()  # the weights matter on these features
  for name in ("masked_lm_accuracy", "next_sentence_accuracy"):  # ratios of exact sums
    assert results.get(name) == expected.get(name), name
  for name in ("masked_lm_loss", "next_sentence_loss", "loss"):
    if name in expected:
      np.testing.assert_allclose(results[name], expected[name], rtol=2e-6, err_msg=name)


def test_left_to_right_evaluation_reports_next_token_accuracy_and_loss():
  import keras

  keras.utils.set_random_seed(4)
  task = PretrainingTask(_config("unused", left_to_right=True))
  model = task.build_model()
  features = {k: v for k, v in _eval_features(np.random.default_rng(2), 5).items()
              if k in ("input_ids", "input_mask", "segment_ids")}
  results = Evaluator(task).evaluate(model, tf.data.Dataset.from_tensor_slices(features).batch(5),
                                                max_steps=100)
  log_probs = _log_softmax(model(features, training=False)["lm_logits"])[:, :-1]  # position t predicts t+1
  labels, w = features["input_ids"][:, 1:], features["input_mask"][:, 1:].astype(np.float64)
  loss = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
  assert set(results) == {"next_token_accuracy", "next_token_loss", "loss"}
  assert results["next_token_accuracy"] == (w * (log_probs.argmax(-1) == labels)).sum() / w.sum()
  np.testing.assert_allclose(results["next_token_loss"], (w * loss).sum() / w.sum(), rtol=2e-6)


def test_eval_results_are_google_researchs_key_value_lines(tmp_path):
  path = pretraining.write_eval_results(str(tmp_path), {"masked_lm_loss": 2.5, "global_step": 8,
                                                        "masked_lm_accuracy": 0.125})
  assert open(path).read() == "global_step = 8\nmasked_lm_accuracy = 0.125\nmasked_lm_loss = 2.5\n"


def _eval_summary_steps(output_dir) -> dict[str, list[int]]:
  """tag -> the steps of its TensorBoard scalars under <output_dir>/eval, one per event written."""
  steps = {}
  for path in sorted(tf.io.gfile.glob(os.path.join(str(output_dir), "eval", "events.out.tfevents.*"))):
    for event in tf.compat.v1.train.summary_iterator(path):
      for value in event.summary.value:
        steps.setdefault(value.tag, []).append(event.step)
  return steps


def test_eval_every_steps_can_be_added_to_a_resumed_run_and_do_eval_takes_the_last_evaluation(tmp_path):
  data = th.write_records(tmp_path / "data", num_files=1, per_file=7)
  out = tmp_path / "out"

  def run(**fields):
    return pretraining.run_pretraining(_config(
        data, output_dir=str(out), train_batch_size=3, num_warmup_steps=0, distribution_strategy="one_device",
        export_encoder=False, eval_batch_size=4, max_eval_steps=2, steps_per_loop=1, **fields))

  first = run(num_train_steps=2)
  assert first.evaluation is None and not os.path.exists(out / "eval")
  # Resumed from ckpt-2, which holds no evaluation state: pretraining keeps no best model, so that is no loss.
  resumed = run(num_train_steps=5, eval_every_steps=2, do_eval=True)
  assert resumed.steps_run == 3 and [h["step"] for h in resumed.evaluation["eval_history"]] == [4, 5]
  assert resumed.evaluation["best_step"] is None and not resumed.evaluation["stopped_early"]
  # The last step's evaluation while training is --do_eval's: evaluated once, as every evaluation is reported.
  steps = _eval_summary_steps(out)
  assert set(steps) == {"eval/loss", "eval/masked_lm_accuracy", "eval/masked_lm_loss",
                        "eval/next_sentence_accuracy", "eval/next_sentence_loss"}
  assert all(s == [4, 5] for s in steps.values())
  after_training = (out / "eval_results.txt").read_text()
  assert after_training.startswith("global_step = 5\nloss = ")
  last = resumed.evaluation["eval_history"][-1]
  assert resumed.metrics["masked_lm_accuracy"] == last["masked_lm_accuracy"]
  # --do_eval alone evaluates the same checkpoint afresh: the very same numbers.
  os.remove(out / "eval_results.txt")
  alone = run(num_train_steps=5, do_train=False, do_eval=True)
  assert (out / "eval_results.txt").read_text() == after_training and alone.step == 5
  assert sorted(_eval_summary_steps(out)["eval/masked_lm_loss"]) == [4, 5, 5]


@pytest.mark.parametrize("field, value, message", [
    ("max_eval_steps", 0, "--max_eval_steps=0: must be >= 1"),
    ("eval_batch_size", 0, "--eval_batch_size=0: must be >= 1"),
    ("eval_every_steps", -1, "--eval_every_steps=-1: must be >= 0"),
    ("do_train", False, "nothing to do")])
def test_bad_evaluation_flags_are_named(field, value, message):
  with pytest.raises(ValueError, match=message):
    _config("unused", **{field: value}).validate()


def test_a_missing_or_empty_init_checkpoint_is_named_before_any_other_flag(tmp_path):
  """Issue 30 (5): what is wrong with --init_checkpoint comes first (here before a too long --max_seq_length)."""
  with pytest.raises(FileNotFoundError) as caught:
    _config("unused", init_checkpoint=str(tmp_path / "nothing"), max_seq_length=999).validate()
  assert str(caught.value) == (f"--init_checkpoint={tmp_path}/nothing does not exist (nor nothing.index, a "
                               "checkpoint prefix); check the path")
  (tmp_path / "empty").mkdir()
  with pytest.raises(ValueError, match=f"^--init_checkpoint={tmp_path}/empty is an empty folder; "):
    _config("unused", init_checkpoint=str(tmp_path / "empty")).validate()


def test_pretraining_runs_on_the_shared_driver_with_its_own_hooks(tmp_path, monkeypatch):
  """run_pretraining is the driver every fine-tuning task runs on (`driver.run_finetuning`), with pretraining's
  hooks, called in the driver's order: training then --do_eval, and --do_eval alone through `load` with no lock
  and no run record."""
  import dataclasses

  from bert_tf.training import driver, run_lock

  calls = []
  for name in ("read_inputs", "strategy", "lock", "start_runs", "tokenizer", "training", "fit", "save", "load",
               "evaluate"):
    def hook(self, *args, _name=name, _original=getattr(pretraining.PretrainingRun, name), **kwargs):
      calls.append(_name)
      return _original(self, *args, **kwargs)

    monkeypatch.setattr(pretraining.PretrainingRun, name, hook)
  driven = []
  monkeypatch.setattr(driver, "train_and_evaluate",
                      lambda run, context, _original=driver.train_and_evaluate: driven.append(type(run).__name__)
                      or _original(run, context))
  data = th.write_records(tmp_path / "data", num_files=1, per_file=5)
  out = tmp_path / "out"
  config = _config(data, output_dir=str(out), train_batch_size=2, num_train_steps=3, num_warmup_steps=0,
                   distribution_strategy="one_device", eval_batch_size=2, max_eval_steps=1, steps_per_loop=1,
                   do_eval=True)
  trained = pretraining.run_pretraining(config)
  assert calls == ["read_inputs", "strategy", "lock", "start_runs", "tokenizer", "training", "fit", "save",
                   "evaluate"]
  assert driven == ["PretrainingRun"]
  assert trained.step == 3 and not trained.interrupted and "masked_lm_accuracy" in trained.metrics
  assert sorted(os.listdir(out / "encoder_checkpoint")) == ["encoder.data-00000-of-00001", "encoder.index"]
  record = (out / "run.json").read_text()
  calls.clear()
  evaluate_only = _config(data, output_dir=str(out), do_train=False, do_eval=True, eval_batch_size=2,
                          max_eval_steps=1)
  with run_lock.RunLock(str(out)):  # a training run holds the directory: evaluation alone may go on beside it
    evaluated = pretraining.run_pretraining(evaluate_only)
    with pytest.raises(run_lock.OutputDirInUse):
      pretraining.run_pretraining(dataclasses.replace(evaluate_only, do_train=True, num_train_steps=4,
                                                        num_warmup_steps=0, train_batch_size=2))
  assert calls == ["read_inputs", "strategy", "lock", "tokenizer", "load", "evaluate", "read_inputs", "strategy",
                   "lock"]
  assert evaluated.step == 3 and evaluated.metrics == {key: trained.metrics[key] for key in evaluated.metrics}
  assert (out / "run.json").read_text() == record
