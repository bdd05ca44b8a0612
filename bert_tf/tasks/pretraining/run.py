"""The pretraining run that `scripts/run_pretraining.py` calls: `run_pretraining(config)`, pretraining's hooks
(`PretrainingRun`) on the driver every task runs on (bert_tf/training/driver.py):

  validate --> every input file checked (`check_records`: before any work) --> strategy --> the run lock (one run
  per output dir) --> what the output dir's run is (`run_identity`: a rerun that would change it is refused, more
  steps resume) --> seed --> train (`PretrainingTask` through the shared trainer, --num_train_steps; the encoder
  from --init_checkpoint unless a checkpoint is resumed; kill and resume exact) --> the encoder hand-off
  (encoder_checkpoint/, encoder_savedmodel/, bert_config.json: what fine-tuning's --init_checkpoint reads) -->
  --do_eval (without --do_train: of the newest checkpoint in the output dir, with no lock and no strategy).

Evaluation is google-research's `--do_eval`: the masked-LM accuracy and loss weighted by masked_lm_weights, the
next-sentence accuracy and loss, over up to `max_eval_steps` batches of `eval_batch_size` held-out records,
written to <output_dir>/eval_results.txt; `eval_every_steps` also evaluates during training, through the
trainer's evaluation while training (bert_tf/training/evaluation.py) as fine-tuning does.
"""

from __future__ import annotations

import dataclasses
import json
import os

import tensorflow as tf
from absl import logging

from bert_tf.errors import DiskFull, first_line, is_disk_full
from bert_tf.model import checkpoints
from bert_tf.tasks.pretraining.config import PretrainingConfig
from bert_tf.tasks.pretraining.task import Evaluator, PretrainingTask
from bert_tf.training import driver, evaluation, inputs, optimization, run_identity, run_lock, trainer

OPTIONS_NAME = "pretraining_options.json"  # in output_dir: what a resumed run must match
EVAL_RESULTS_NAME = "eval_results.txt"  # in output_dir, google-research's `key = value` lines


def write_eval_results(output_dir: str, results: dict[str, float]) -> str:
  """Writes <output_dir>/eval_results.txt as google-research does (`key = value`, sorted by key), whole or not at
  all; returns its path."""
  from bert_tf import fileio

  path = os.path.join(output_dir, EVAL_RESULTS_NAME)
  fileio.write_text_atomic(path, "".join(f"{key} = {results[key]}\n" for key in sorted(results)))
  return path


def _do_eval(task: PretrainingTask, model, output_dir: str, step: int,
             evaluated: dict | None = None) -> dict[str, float]:
  """--do_eval of `model` at training step `step`: evaluates it (unless `evaluated`, the values of the
  evaluation while training at that step, already has), reports it as evaluations while training are
  (`evaluation.EvalReport`), and writes <output_dir>/eval_results.txt; returns its results."""
  if evaluated is None:
    evaluated = Evaluator(task)(model)
    evaluation.EvalReport(output_dir).write(step, evaluated)
  results = {**evaluated, "global_step": step}
  logging.info("wrote %s", write_eval_results(output_dir, results))
  return results


def check_records(config: PretrainingConfig, input_file: str | None = None) -> None:
  """Every input file (of `input_file`, default config.input_file) must be whole TFRecords of the pretraining
  schema, of the shape the flags say, with token ids below the config's vocab_size; raises ValueError naming the
  file and the fix.

  Cheap on large inputs: reads each file's record headers and its first records' data
  (`records.check_record_files`), not every record.
  """
  from bert_tf import fileio
  from bert_tf.data import records

  infos = records.check_record_files(fileio.expand_globs(input_file or config.input_file))
  first = infos[0].path  # All files share one shape.
  seq, predictions, dynamic = infos[0].shape
  source = config.bert_config_source()
  positions = config.bert_config.max_position_embeddings
  if seq > positions:  # Checked before the length itself: matching --max_seq_length to these records can't help.
    raise ValueError(f"{first}: records have max_seq_length {seq}, which exceeds max_position_embeddings="
                     f"{positions} in {source}: write records of at most {positions} "
                     f"tokens or use a config with max_position_embeddings >= {seq}")
  if seq != config.max_seq_length:
    raise ValueError(f"{first}: records have max_seq_length {seq}; pass --max_seq_length={seq}")
  if config.left_to_right:
    if not dynamic:  # masked_lm_* features: input_ids hold [MASK] and random tokens, not the text
      raise ValueError(f"{first}: records are masked, and --left_to_right predicts every next token of the text: "
                       "write unmasked records with create_pretraining_data.py --dynamic_masking")
  elif dynamic != config.dynamic_masking:
    fix = "add --dynamic_masking and --vocab_file" if dynamic else "drop --dynamic_masking"
    raise ValueError(f"{first}: records are {'un' if dynamic else ''}masked; {fix}")
  if not dynamic and predictions != config.max_predictions_per_seq:
    raise ValueError(f"{first}: records have max_predictions_per_seq {predictions}; pass "
                     f"--max_predictions_per_seq={predictions}")
  vocab_size = config.bert_config.vocab_size
  if config.vocab_file:
    if not fileio.exists(config.vocab_file):
      raise FileNotFoundError(f"--vocab_file={config.vocab_file} does not exist")
    with fileio.open_file(config.vocab_file, "rb") as f:
      lines = f.read().split(b"\n")
    tokens = len(lines) - (lines[-1] == b"")  # The last line's newline starts no token.
    if tokens > vocab_size:
      raise ValueError(f"--vocab_file={config.vocab_file} has {tokens} tokens (lines) but {source} says "
                       f"vocab_size={vocab_size}: set \"vocab_size\": {tokens} in {source}, or pass the "
                       "vocabulary the model was made with")
  # An id past the embedding table fails the first step that meets it on CPU; on GPU the lookup reads zeros and
  # training goes on, silently wrong.
  worst = max(infos, key=lambda info: info.max_token_id)
  if worst.max_token_id >= vocab_size:
    raise ValueError(f"{worst.path}: records hold token id {worst.max_token_id} but {source} says vocab_size="
                     f"{vocab_size}: set \"vocab_size\" in {source} to the vocabulary's size (the number of "
                     "lines of vocab.txt), or remake the records with the model's vocabulary")


def run_pretraining(config: PretrainingConfig, strategy: tf.distribute.Strategy | None = None,
                    trainer_cls=trainer.Trainer) -> trainer.TrainResult:
  """With do_train, pretrains, resuming from `<output_dir>/checkpoints` when there is one, and at the end writes
  the encoder hand-off (bert_tf/model/checkpoints.py) under output_dir; with do_eval, then evaluates (without
  do_train: the newest checkpoint there) and writes <output_dir>/eval_results.txt. Returns the trainer's result
  (`interrupted` after a SIGTERM), whose metrics include the evaluation's results (`Evaluator`) with do_eval.

  The run is the shared driver's (`driver.run_finetuning`) with pretraining's hooks (`PretrainingRun`)."""
  return driver.run_finetuning(PretrainingRun(config, trainer_cls), strategy)["result"]


# What a run writes in its output dir besides run_identity.COMMON_OUTPUTS: the hand-off, and the options file of
# runs from before run records.
_OUTPUTS = (checkpoints.CONFIG_NAME, checkpoints.ENCODER_CHECKPOINT_DIR, checkpoints.ENCODER_SAVEDMODEL_DIR,
            OPTIONS_NAME)


def run_identity_of(config: PretrainingConfig, input_files: list[str]) -> run_identity.RunIdentity:
  """What defines a pretraining run (`run_identity`): the records (`input_files`, what --input_file matched: their
  sizes and ends, as shards may be gigabytes), the model config, --init_checkpoint, the objective and masking,
  lengths and the optimisation settings; num_train_steps is resumable."""
  settings = {
      "input_file": run_identity.files_entry(config.input_file, input_files),
      "init_checkpoint": run_identity.checkpoint_entry(config.init_checkpoint),
      "bert_config": config.model_config().to_dict(), "max_seq_length": config.max_seq_length,
      "max_predictions_per_seq": config.max_predictions_per_seq, "no_nsp": config.no_nsp,
      "left_to_right": config.left_to_right, "dynamic_masking": config.dynamic_masking,
      "do_whole_word_mask": config.do_whole_word_mask, "mask_token_rate": config.mask_token_rate,
      "random_token_rate": config.random_token_rate,
      "vocab_file": run_identity.file_entry(config.vocab_file) if config.dynamic_masking else None,
      "train_batch_size": config.train_batch_size, "learning_rate": config.learning_rate,
      "num_warmup_steps": config.num_warmup_steps, "optimizer": config.optimizer, "dtype": config.dtype,
      "gradient_accumulation_steps": config.gradient_accumulation_steps, "seed": config.seed}
  return run_identity.RunIdentity("pretraining", settings, {"num_train_steps": config.num_train_steps})


def resume_options(config: PretrainingConfig) -> dict:
  """What <output_dir>/pretraining_options.json recorded before run records (run_identity): the options a
  resumed run must repeat (the objective; with dynamic masking the rates, which the checkpoint cannot show)."""
  options = {"objective": config.objective}
  if config.dynamic_masking:
    options.update(mask_token_rate=config.mask_token_rate, random_token_rate=config.random_token_rate)
  return options


_OBJECTIVE_FLAGS = {"bert": "neither --no_nsp nor --left_to_right", "no_nsp": "--no_nsp",
                    "left_to_right": "--left_to_right"}
_RESUME_FIX = "rerun with that run's flags to resume it, or use another --output_dir"


def recorded_options(output_dir: str) -> dict | None:
  """The options <output_dir>/pretraining_options.json records (see `resume_options`), or None where a run wrote
  none (one from before that file, or after it: run.json holds them now)."""
  from bert_tf import fileio

  path = os.path.join(output_dir, OPTIONS_NAME)
  if not fileio.exists(path):
    return None
  with fileio.open_file(path, "r") as f:
    return json.load(f)


def check_resume_options(config: PretrainingConfig) -> None:
  """Raises ValueError when output_dir holds a checkpoint of a run with other options (objective, masking
  rates): resuming it would load weights into another model, or silently change the training data.

  The options come from pretraining_options.json; a directory from before that file says no more than whether
  its checkpoint has a next-sentence head.
  """
  latest = tf.train.latest_checkpoint(os.path.join(config.output_dir, "checkpoints"))
  if latest is None:
    return
  path = os.path.join(config.output_dir, OPTIONS_NAME)
  wanted = resume_options(config)
  recorded = recorded_options(config.output_dir)
  if recorded is None:
    has_nsp = any(name.startswith("nsp_head/") for name, _ in tf.train.list_variables(latest))
    if has_nsp != config.next_sentence:
      there = _OBJECTIVE_FLAGS["bert"] if has_nsp else "--no_nsp or --left_to_right"
      raise ValueError(f"{config.output_dir} holds checkpoints of a run with {there} ({latest} "
                       f"{'has a' if has_nsp else 'has no'} next-sentence head); this run has "
                       f"{_OBJECTIVE_FLAGS[config.objective]}: {_RESUME_FIX}")
    return
  if recorded == wanted:
    return
  objective = recorded.get("objective")
  if objective != wanted["objective"]:
    there = _OBJECTIVE_FLAGS.get(objective, objective)
    raise ValueError(f"{config.output_dir} holds checkpoints of a run with {there} ({latest}); this run has "
                     f"{_OBJECTIVE_FLAGS[wanted['objective']]}: {_RESUME_FIX}")
  differ = ", ".join(f"--{k}={recorded.get(k)} there, {wanted.get(k)} here" for k in sorted({*recorded, *wanted})
                     if recorded.get(k) != wanted.get(k))
  raise ValueError(f"{config.output_dir} holds checkpoints of a run with other masking options ({differ}; "
                   f"{path}): {_RESUME_FIX}")


class PretrainingRun(driver.TaskRun):
  """Pretraining's hooks on the shared driver (`driver.run_finetuning`): the records checked up front, steps
  instead of epochs, the run lock, the encoder from --init_checkpoint, the encoder hand-off as the trained model's
  folder, google-research's --do_eval; no tokenizer, prediction or export. The driver's summary holds the
  trainer's result under "result" (what `run_pretraining` returns)."""

  saved_model_noun = "pretrained encoder (fine-tuning's --init_checkpoint)"
  outputs = _OUTPUTS
  model_dir = checkpoints.ENCODER_CHECKPOINT_DIR  # what says the run saved weights (`run_identity.has_weights`)
  do_predict = False
  export_dir = None

  def __init__(self, config: PretrainingConfig, trainer_cls=trainer.Trainer):
    super().__init__(config)
    self.trainer_cls = trainer_cls
    self.masking: inputs.MaskingConfig | None = None
    self.task: PretrainingTask | None = None

  @property
  def options(self) -> PretrainingConfig:
    return self.config

  def read_inputs(self, say) -> None:
    """Every input file checked (`check_records`), the dynamic masking's vocabulary read; without --do_train,
    the output dir's newest checkpoint (what is evaluated) found and its options matched."""
    config = self.config
    checked = []
    if config.do_train:
      checked.append(config.input_file)
    if config.do_eval or (config.do_train and config.eval_every_steps):
      checked.append(config.eval_input)
    for input_file in dict.fromkeys(checked):
      check_records(config, input_file)
    if config.do_train:
      from bert_tf import fileio

      self.inputs["train"] = fileio.expand_globs(config.input_file)  # the record files --input_file matched
    if config.dynamic_masking:
      self.masking = inputs.MaskingConfig.from_vocab_file(
          config.vocab_file, whole_word_mask=config.do_whole_word_mask, mask_token_rate=config.mask_token_rate,
          random_token_rate=config.random_token_rate)
      if self.masking.vocab_size > config.bert_config.vocab_size:
        raise ValueError(f"--vocab_file has {self.masking.vocab_size} tokens but --bert_config_file says "
                         f"vocab_size={config.bert_config.vocab_size}")
    if not config.do_train:
      self.inputs["checkpoint"] = self._latest()
      check_resume_options(config)

  def strategy(self) -> tf.distribute.Strategy:
    """--do_eval without --do_train evaluates on no strategy (the default one): it may run beside a training
    run of the same directory, which holds the devices."""
    return self.config.strategy() if self.config.do_train else tf.distribute.get_strategy()

  def lock(self, chief: bool):
    """One training run per output directory, taken once the inputs were checked (bad input writes nothing);
    evaluation alone takes none: a training run may go on in the same directory."""
    return run_lock.RunLock(self.config.output_dir, enabled=chief) if self.config.do_train else super().lock(chief)

  def run_identity(self) -> run_identity.RunIdentity:
    return run_identity_of(self.config, self.inputs["train"])

  def evaluation_outputs(self) -> tuple[str, ...]:
    return (EVAL_RESULTS_NAME,)  # the rest of `outputs` (bert_config.json, ...) is written by training only

  def input_files(self) -> dict[str, list[str | None]]:
    config = self.config
    return {"input_file": self.inputs.get("train", []), "eval_input_file": config.eval_input_file,
            "init_checkpoint": checkpoints.read_paths(config.init_checkpoint) if config.init_checkpoint else [],
            "vocab_file": [config.vocab_file], "bert_config_file": [config.bert_config_file]}

  def start_runs(self, say, chief: bool) -> list[run_identity.Recorded]:
    """The driver's, after `check_resume_options` for a directory from before run records (its checkpoint or
    options file tells what run it holds)."""
    config = self.config
    if not config.overwrite_output_dir and run_identity.read(config.output_dir) is None:
      check_resume_options(config)
    return super().start_runs(say, chief)

  def check_init_checkpoint(self) -> None:
    """--init_checkpoint is checked as a path by `validate`, and against the model when it is restored, before
    the first step (`checkpoints.restore_encoder`)."""

  def tokenizer(self):
    return None  # the records hold token ids

  def training(self, context: driver.Context) -> driver.Training:
    self.task = PretrainingTask(self.config, self.masking)
    return driver.Training(self.task, None, unit="sequences")

  def evaluate_while_training(self, model, context: driver.Context) -> dict[str, float]:
    if "evaluator" not in context.kept:
      context.kept["evaluator"] = Evaluator(self.task)
    return context.kept["evaluator"](model)

  def fit(self, training: driver.Training, evaluate, context: driver.Context):
    """--num_train_steps (warmup --num_warmup_steps); evaluation while training with --eval_every_steps (reported:
    no best model or early stopping; the last is --do_eval's); the encoder from --init_checkpoint unless a
    checkpoint is resumed. The chief writes the model's bert_config.json before the first step."""
    config = self.config
    every = config.eval_every_steps
    run = self.trainer_cls(
        training.task, context.strategy,
        lambda: optimization.create_optimizer(config.optimizer, config.learning_rate, config.num_train_steps,
                                              config.num_warmup_steps, dtype=config.dtype),
        config.trainer_config(), evaluation.Evaluation(evaluate, None, every) if every else None)
    if config.init_checkpoint and run.checkpointer.latest() is None:
      from bert_tf.model import released

      # hf:<id> / keras_hub:<preset>: the folder they were converted into.
      prefix = checkpoints.restore_encoder(run.model.encoder, released.local_path(config.init_checkpoint))
      logging.info("initialised the encoder from %s", prefix)
    if context.chief:  # once --init_checkpoint fits: a run refused there writes nothing
      config.model_config().to_json_file(os.path.join(config.output_dir, checkpoints.CONFIG_NAME))
    result = run.train()
    context.kept["trainer"] = run
    context.summary["result"] = result
    return run, result

  def trained_dir(self) -> str:
    return self.config.output_dir  # the hand-off's folders and bert_config.json: fine-tuning's --init_checkpoint

  @property
  def saves(self) -> bool:
    return self.config.export_encoder

  def save(self, model, directory: str, context: driver.Context) -> None:
    """The encoder hand-off (`checkpoints.export_encoder`); a full disk is one line saying how much room to make
    (the training checkpoint is complete, so a rerun only exports)."""
    config = self.config
    try:
      checkpoints.export_encoder(model.encoder, config.model_config(), directory)
    except (OSError, tf.errors.OpError) as e:
      if not is_disk_full(e):
        raise
      # export_encoder removed its temporaries.
      needed = 2 * sum(v.shape.num_elements() * 4 for v in model.encoder.variables)  # checkpoint + SavedModel
      raise DiskFull(f"no room to write the encoder under {directory} ({e.__class__.__name__}: "
                     f"{first_line(e)[:200]}): it needs about {needed / 2**20:.1f} MiB free; "
                     f"training finished and is saved in {context.kept['trainer'].checkpointer.latest()}: free "
                     "space and rerun the same command, which only writes the encoder") from None

  def _latest(self) -> str:
    from bert_tf import fileio

    directory = fileio.absolute(os.path.join(self.config.output_dir, "checkpoints"))
    latest = tf.train.latest_checkpoint(directory)
    if latest is None:
      raise ValueError(f"--do_eval without --do_train: {directory} holds no checkpoint to evaluate; add "
                       "--do_train, or pass the --output_dir of a pretraining run")
    checkpoints.check_readable(latest)
    return latest

  def loaded_dir(self) -> str:
    return self.config.output_dir

  def load(self, directory: str, context: driver.Context):
    """--do_eval without --do_train: the model of the newest checkpoint in <output_dir>/checkpoints
    (google-research evaluates its output_dir's newest)."""
    latest = self.inputs["checkpoint"]
    self.task = PretrainingTask(self.config, self.masking)
    model = self.task.build_model()
    step = tf.Variable(0, dtype=tf.int64, trainable=False)
    tf.train.Checkpoint(model=model, step=step).restore(latest).expect_partial().assert_existing_objects_matched()
    logging.info("evaluating %s", latest)
    context.summary["result"] = trainer.TrainResult(int(step.numpy()), {}, interrupted=False)
    return model

  def evaluate(self, model, model_dir: str, context: driver.Context) -> None:
    """google-research's --do_eval, on the chief: eval_results.txt of the trained (or loaded) model; the
    evaluation while training at the last step, when there was one, is not repeated."""
    if not context.chief:
      return
    result = context.summary["result"]
    history = result.evaluation["eval_history"] if result.evaluation else []
    evaluated = None
    if history and history[-1]["step"] == result.step:  # --eval_every_steps evaluated the last step
      evaluated = {k: v for k, v in history[-1].items() if k != "step"}
    results = _do_eval(self.task, model, self.config.output_dir, result.step, evaluated)
    context.summary["result"] = dataclasses.replace(result, metrics={**result.metrics, **results})
