"""BERT pretraining (masked LM + next sentence) as a `Task` of the shared trainer, and the run that
`scripts/run_pretraining.py` calls.

The loss is google-research's: sum(w * masked-LM cross-entropy) / (sum(w) + 1e-5) + mean(NSP cross-entropy),
over the global batch. The paper's ablations (Table 5) are options: `no_nsp` drops the NSP head and term;
`left_to_right` trains a left-to-right LM (causal attention, next-token loss over every real position
sum(w * cross-entropy) / (sum(w) + 1e-5), no NSP) on unmasked records.

Evaluation is google-research's `--do_eval`: the masked-LM accuracy and loss weighted by masked_lm_weights, the
next-sentence accuracy and loss, over up to `max_eval_steps` batches of `eval_batch_size` held-out records,
written to <output_dir>/eval_results.txt; `eval_every_steps` also evaluates during training, through the
trainer's evaluation while training (bert_tf/training/evaluation.py) as fine-tuning does.
"""

from __future__ import annotations

import dataclasses
import json
import os

import keras
import tensorflow as tf
from absl import logging

from bert_tf.config import BertConfig
from bert_tf.data.instances import DEFAULT_MASKING_RATES, check_masking_rates
from bert_tf.errors import DiskFull, first_line, is_disk_full
from bert_tf.model import checkpoints
from bert_tf.training import distribute, evaluation, inputs, optimization, run_identity, run_lock, trainer
from bert_tf.training.run_options import RunOptions

OPTIONS_NAME = "pretraining_options.json"  # in output_dir: what a resumed run must match


@dataclasses.dataclass
class PretrainingConfig(RunOptions):
  """One pretraining run; field names are the script's flags (google-research's where it had them). The run
  options (strategy, devices, precision, cadence: `RunOptions`, whose defaults are pretraining's) are
  keyword-only."""

  input_file: str
  output_dir: str
  bert_config: BertConfig
  bert_config_file: str | None = None  # where bert_config was read from, for messages
  init_checkpoint: str | None = None
  max_seq_length: int = 128
  max_predictions_per_seq: int = 20
  train_batch_size: int = 32  # global, per optimizer update
  learning_rate: float = 1e-4
  num_train_steps: int = 100000
  num_warmup_steps: int = 10000
  dynamic_masking: bool = False
  do_whole_word_mask: bool = False  # with dynamic_masking: mask a word's "##" pieces together
  vocab_file: str | None = None
  export_encoder: bool = True
  # With dynamic_masking: the shares of the chosen positions replaced by [MASK] and by a random token (the rest
  # keep theirs); google-research's 80/10/10 by default (the paper's Table 8 varies them).
  mask_token_rate: float = 0.8
  random_token_rate: float = 0.1
  no_nsp: bool = False  # masked LM only: no next-sentence head or loss; the records' labels are not read
  # A left-to-right LM (the paper's "LTR & No NSP"): the model's config gets causal_attention, the loss is the
  # next-token cross-entropy, there is no NSP; reads unmasked records (create_pretraining_data.py
  # --dynamic_masking) as they are.
  left_to_right: bool = False
  # google-research's --do_train / --do_eval; evaluation reads eval_input_file (default: input_file, as
  # google-research's), one pass in file order, at most max_eval_steps batches of eval_batch_size.
  do_train: bool = True
  do_eval: bool = False
  eval_input_file: str | None = None
  eval_batch_size: int = 8
  max_eval_steps: int = 100
  eval_every_steps: int = 0  # also evaluate every this many steps during training (0: never)

  def validate(self) -> None:
    """Checks that need no TensorFlow devices; raises ValueError naming the flag and the fix."""
    run_identity.check_output_dir(self.output_dir)
    if self.init_checkpoint:  # first: a path that does not exist, an empty folder, a file that is no checkpoint
      checkpoints.check_checkpoint_path(self.init_checkpoint)
    positions = self.bert_config.max_position_embeddings
    if self.max_seq_length > positions:
      # The position embedding table has no row past max_position_embeddings - 1.
      raise ValueError(f"--max_seq_length={self.max_seq_length} exceeds max_position_embeddings={positions} "
                       f"in {self.bert_config_source()}: lower --max_seq_length (and write records of that "
                       f"length) or use a config with max_position_embeddings >= {self.max_seq_length}")
    if not 1 <= self.max_predictions_per_seq <= self.max_seq_length:
      raise ValueError(f"--max_predictions_per_seq={self.max_predictions_per_seq}: must be in [1, "
                       f"--max_seq_length={self.max_seq_length}]")
    if not (self.do_train or self.do_eval):
      raise ValueError("--do_train=false and no --do_eval: nothing to do; pass --do_train and/or --do_eval")
    for name in ("eval_batch_size", "max_eval_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"--{name}={getattr(self, name)}: must be >= 1")
    if self.eval_every_steps < 0:
      raise ValueError(f"--eval_every_steps={self.eval_every_steps}: must be >= 0 (0: no evaluation during "
                       "training)")
    if self.num_train_steps < 1:
      raise ValueError(f"--num_train_steps={self.num_train_steps}: must be >= 1")
    if not 0 <= self.num_warmup_steps <= self.num_train_steps:
      raise ValueError(f"--num_warmup_steps={self.num_warmup_steps}: must be in [0, --num_train_steps="
                       f"{self.num_train_steps}]")
    if self.learning_rate <= 0:
      raise ValueError(f"--learning_rate={self.learning_rate}: must be > 0")
    self.check_run_options()
    if self.dynamic_masking and not self.vocab_file:
      raise ValueError("--dynamic_masking needs --vocab_file (for the [MASK], [CLS], [SEP], [PAD] ids)")
    check_masking_rates(self.mask_token_rate, self.random_token_rate)
    if not self.dynamic_masking and (self.mask_token_rate, self.random_token_rate) != DEFAULT_MASKING_RATES:
      raise ValueError("--mask_token_rate / --random_token_rate need --dynamic_masking: static records were "
                       "masked when they were written; pass the rates to create_pretraining_data.py instead, or "
                       "write unmasked records (--dynamic_masking there) and add --dynamic_masking here")
    if self.left_to_right and self.dynamic_masking:
      raise ValueError("--left_to_right reads unmasked records as they are and predicts every next token; drop "
                       "--dynamic_masking (the records stay those written with create_pretraining_data.py "
                       "--dynamic_masking)")
    if self.bert_config.causal_attention and not self.left_to_right:
      raise ValueError(f"{self.bert_config_source()} says causal_attention (a left-to-right model): add "
                       "--left_to_right, or use a config without causal_attention")
    if self.do_whole_word_mask and not self.dynamic_masking:
      raise ValueError("--do_whole_word_mask needs --dynamic_masking: static records were masked when they "
                       "were written; pass --do_whole_word_mask to create_pretraining_data.py instead, or write "
                       "unmasked records (--dynamic_masking there) and add --dynamic_masking here")

  @property
  def next_sentence(self) -> bool:
    """Whether the model has the next-sentence head and loss."""
    return not (self.no_nsp or self.left_to_right)

  @property
  def objective(self) -> str:
    """"bert" (masked LM + NSP), "no_nsp" (masked LM) or "left_to_right": what pretraining_options.json says."""
    return "left_to_right" if self.left_to_right else "no_nsp" if self.no_nsp else "bert"

  def model_config(self) -> BertConfig:
    """The BertConfig of the model: bert_config, with causal_attention for a left-to-right run. What the run
    writes to <output_dir>/bert_config.json, so that fine-tuning builds the same (causal) encoder."""
    if self.left_to_right and not self.bert_config.causal_attention:
      return dataclasses.replace(self.bert_config, causal_attention=True)
    return self.bert_config

  @property
  def eval_input(self) -> str:
    """The evaluation records: eval_input_file, else the training records (google-research's default)."""
    return self.eval_input_file or self.input_file

  def bert_config_source(self) -> str:
    """The config's file for messages, or the flag's name when the config was built in code."""
    return self.bert_config_file or "--bert_config_file"

  def trainer_config(self) -> trainer.TrainerConfig:
    return trainer.TrainerConfig(
        output_dir=self.output_dir, global_batch_size=self.train_batch_size, num_train_steps=self.num_train_steps,
        gradient_accumulation_steps=self.gradient_accumulation_steps, steps_per_loop=self.steps_per_loop,
        save_checkpoints_steps=self.save_checkpoints_steps, keep_checkpoint_max=self.keep_checkpoint_max,
        log_steps=self.log_steps, jit_compile=self.jit_compile)


class PretrainingTask(trainer.Task):
  """Masked LM + next-sentence prediction on google-research's pretraining records; or masked LM alone
  (`no_nsp`), or a left-to-right LM (`left_to_right`)."""

  def __init__(self, config: PretrainingConfig, masking: inputs.MaskingConfig | None = None):
    self.config = config
    self.masking = masking

  def build_model(self) -> keras.Model:
    from bert_tf.model.pretraining import BertPretrainer

    # The policy goes to the model, not keras' global setting, so nothing else in the process changes.
    return BertPretrainer(self.config.model_config(), dtype=self.config.dtype,
                          next_sentence=self.config.next_sentence)

  def build_dataset(self, batch_size, input_context):
    c = self.config
    return inputs.pretraining_dataset(c.input_file, batch_size, c.max_seq_length, c.max_predictions_per_seq,
                                      input_context=input_context, seed=c.seed, masking=self.masking,
                                      unmasked=c.left_to_right)

  def build_eval_dataset(self) -> tf.data.Dataset:
    """The evaluation batches: eval_input, one pass in file order, eval_batch_size records each (the last
    batch may be short); dynamic masking masks them the same way at every evaluation."""
    c = self.config
    return inputs.pretraining_dataset(c.eval_input, c.eval_batch_size, c.max_seq_length, c.max_predictions_per_seq,
                                      is_training=False, seed=c.seed, masking=self.masking,
                                      unmasked=c.left_to_right)

  def normalizers(self, features):
    from bert_tf.model.pretraining import next_token_weights

    if self.config.left_to_right:
      return {"lm_weight_sum": tf.reduce_sum(next_token_weights(features["input_mask"]))}
    normalizers = {"mlm_weight_sum": tf.reduce_sum(features["masked_lm_weights"])}
    if self.config.next_sentence:
      normalizers["nsp_count"] = tf.cast(tf.shape(features["next_sentence_labels"])[0], tf.float32)
    return normalizers

  def loss_terms(self, features, outputs):
    from bert_tf.model.pretraining import pretraining_loss_terms

    return pretraining_loss_terms(features, outputs)

  def loss(self, terms, normalizers):
    if self.config.left_to_right:
      return terms["lm_loss_sum"] / (normalizers["lm_weight_sum"] + 1e-5)
    loss = terms["mlm_loss_sum"] / (normalizers["mlm_weight_sum"] + 1e-5)
    if self.config.next_sentence:
      loss += terms["nsp_loss_sum"] / normalizers["nsp_count"]
    return loss

  def metrics(self, sums):
    if self.config.left_to_right:
      weights = max(sums["lm_weight_sum"], 1e-5)
      return {"lm_loss": sums["lm_loss_sum"] / weights, "lm_accuracy": sums["lm_correct_sum"] / weights}
    weights = max(sums["mlm_weight_sum"], 1e-5)
    metrics = {"mlm_loss": sums["mlm_loss_sum"] / weights, "mlm_accuracy": sums["mlm_correct_sum"] / weights}
    if self.config.next_sentence:
      count = max(sums["nsp_count"], 1.0)
      metrics.update(nsp_loss=sums["nsp_loss_sum"] / count, nsp_accuracy=sums["nsp_correct_sum"] / count)
    return metrics

  def checkpoint_items(self, model):
    # The encoder and heads also sit at the root, as in scripts/convert_checkpoint.py's `ours` checkpoints,
    # so `handoff.restore_encoder` and `convert.load_ours` read a training checkpoint directly.
    items = {"model": model, "encoder": model.encoder, "mlm_head": model.mlm_head}
    if model.nsp_head is not None:
      items["nsp_head"] = model.nsp_head
    return items

  def input_error(self, error: Exception) -> str:
    """One line for an error (tf.errors.DataLossError, ...) raised while reading the input mid-training: the
    damaged file and record, found by re-reading every input file and checking every CRC (TensorFlow's message
    names neither), or else the first line of TensorFlow's message."""
    from bert_tf import fileio
    from bert_tf.data import records

    try:
      found = records.find_corrupt_record(fileio.expand_globs(self.config.input_file))
    except (OSError, ValueError, tf.errors.OpError):  # Files gone or unreadable now: TensorFlow's words must do.
      found = None
    if found:
      return found
    return first_line(error)


# The training metrics' names (PretrainingTask.metrics) -> the names of eval_results.txt: google-research's for
# the masked LM and next sentence; next_token_* for the left-to-right LM's next-token predictions.
EVAL_NAMES = {"mlm_accuracy": "masked_lm_accuracy", "mlm_loss": "masked_lm_loss",
              "nsp_accuracy": "next_sentence_accuracy", "nsp_loss": "next_sentence_loss",
              "lm_accuracy": "next_token_accuracy", "lm_loss": "next_token_loss"}
EVAL_RESULTS_NAME = "eval_results.txt"  # in output_dir, google-research's `key = value` lines


class Evaluator:
  """Evaluates a pretraining model on the task's evaluation batches, as google-research's `--do_eval` does; the
  `evaluate` of the trainer's `Evaluation` with --eval_every_steps.

  Every metric is one ratio over all evaluated batches: masked_lm_accuracy = sum(w * correct) / sum(w) and
  masked_lm_loss = sum(w * cross-entropy) / sum(w) with w = masked_lm_weights (so padding slots count for
  nothing), next_sentence_* over the examples (`PretrainingTask.metrics`); `loss` is the training loss averaged
  over the batches (the Estimator's `loss`). It reads its own dataset and runs the model with training=False:
  neither the training input iterator nor any random state (dropout seeds) moves, so evaluating during
  training leaves the training run, and a kill and resume of it, bit for bit unchanged.
  """

  def __init__(self, task: PretrainingTask):
    self.task = task
    self._model = self._batch_fn = None

  def __call__(self, model: keras.Model) -> dict[str, float]:
    """`max_eval_steps` batches of the evaluation records -> the results eval_results.txt holds but
    global_step."""
    return self.evaluate(model, self.task.build_eval_dataset(), self.task.config.max_eval_steps)

  def _batch(self, model, features):
    outputs = tf.nest.map_structure(lambda x: tf.cast(x, tf.float32), model(features, training=False))
    terms = {k: tf.cast(v, tf.float32) for k, v in self.task.loss_terms(features, outputs).items()}
    normalizers = {k: tf.cast(v, tf.float32) for k, v in self.task.normalizers(features).items()}
    return dict(terms, **normalizers, loss=self.task.loss(terms, normalizers))

  def evaluate(self, model: keras.Model, dataset: tf.data.Dataset, max_steps: int) -> dict[str, float]:
    """Up to `max_steps` batches of `dataset` -> the results eval_results.txt holds but global_step."""
    if model is not self._model:  # one traced function per model, reused at every evaluation
      self._model = model
      self._batch_fn = tf.function(lambda features: self._batch(model, features),
                                   reduce_retracing=True)  # the last batch may be short
    sums: dict[str, float] = {}
    losses = []
    for features in dataset.take(max_steps):
      values = {k: float(v) for k, v in self._batch_fn(features).items()}
      losses.append(values.pop("loss"))
      sums = {k: sums.get(k, 0.0) + v for k, v in values.items()}
    if not losses:
      raise ValueError(f"--eval_input_file={self.task.config.eval_input}: no records to evaluate")
    results = {EVAL_NAMES[k]: v for k, v in self.task.metrics(sums).items()}
    return {**results, "loss": sum(losses) / len(losses)}


def write_eval_results(output_dir: str, results: dict[str, float]) -> str:
  """Writes <output_dir>/eval_results.txt as google-research does (`key = value`, sorted by key), whole or not at
  all; returns its path."""
  from bert_tf import fileio

  path = os.path.join(output_dir, EVAL_RESULTS_NAME)
  fileio.write_text_atomic(path, "".join(f"{key} = {results[key]}\n" for key in sorted(results)))
  return path


def _do_eval(task: PretrainingTask, model: keras.Model, output_dir: str, step: int,
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
  (`interrupted` after a SIGTERM), whose metrics include the evaluation's results (`Evaluator`) with do_eval."""
  config.validate()
  checked = []
  if config.do_train:
    checked.append(config.input_file)
  if config.do_eval or (config.do_train and config.eval_every_steps):
    checked.append(config.eval_input)
  for input_file in dict.fromkeys(checked):
    check_records(config, input_file)
  masking = None
  if config.dynamic_masking:
    masking = inputs.MaskingConfig.from_vocab_file(config.vocab_file, whole_word_mask=config.do_whole_word_mask,
                                                   mask_token_rate=config.mask_token_rate,
                                                   random_token_rate=config.random_token_rate)
    if masking.vocab_size > config.bert_config.vocab_size:
      raise ValueError(f"--vocab_file has {masking.vocab_size} tokens but --bert_config_file says vocab_size="
                       f"{config.bert_config.vocab_size}")
  keras.utils.set_random_seed(config.seed)
  if not config.do_train:
    return _evaluate_latest(config, masking)
  if strategy is None:
    strategy = config.strategy()
  # One run per output directory; taken after the inputs were checked, so bad input writes nothing.
  with run_lock.RunLock(config.output_dir, enabled=distribute.is_chief(strategy)):
    return _pretrain(config, strategy, masking, trainer_cls)


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
      "init_checkpoint": run_identity.checkpoint_name(config.init_checkpoint),
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


def run_options(config: PretrainingConfig) -> dict:
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
  """The options <output_dir>/pretraining_options.json records (see `run_options`), or None where a run wrote
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
  wanted = run_options(config)
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


def _pretrain(config, strategy, masking, trainer_cls) -> trainer.TrainResult:
  from bert_tf import fileio

  input_files = fileio.expand_globs(config.input_file)
  if not config.overwrite_output_dir and run_identity.read(config.output_dir) is None:
    check_resume_options(config)  # a directory from before run records: its checkpoint or options file tells
  run_identity.start_run(config.output_dir, run_identity_of(config, input_files), config.overwrite_output_dir,
                         distribute.is_chief(strategy), outputs=_OUTPUTS,
                         model_dirs=(checkpoints.ENCODER_CHECKPOINT_DIR,),
                         inputs=(config.init_checkpoint, config.vocab_file, *input_files))
  task = PretrainingTask(config, masking)
  steps = config.num_train_steps
  # No best model or early stopping: evaluations are reported, and the last one is --do_eval's.
  every = config.eval_every_steps
  run = trainer_cls(
      task, strategy,
      lambda: optimization.create_optimizer(config.optimizer, config.learning_rate, steps,
                                            config.num_warmup_steps, dtype=config.dtype),
      config.trainer_config(), evaluation.Evaluation(Evaluator(task), None, every) if every else None)
  if distribute.is_chief(strategy):
    tf.io.gfile.makedirs(config.output_dir)
    config.model_config().to_json_file(os.path.join(config.output_dir, checkpoints.CONFIG_NAME))
  if config.init_checkpoint and run.checkpointer.latest() is None:
    from bert_tf.model import released

    # hf:<id> / keras_hub:<preset>: the folder they were converted into.
    prefix = checkpoints.restore_encoder(run.model.encoder, released.local_path(config.init_checkpoint))
    logging.info("initialised the encoder from %s", prefix)
  result = run.train()
  if config.export_encoder and not result.interrupted and distribute.is_chief(strategy):
    try:
      checkpoints.export_encoder(run.model.encoder, config.model_config(), config.output_dir)
    except (OSError, tf.errors.OpError) as e:
      if not is_disk_full(e):
        raise
      # export_encoder removed its temporaries; the training checkpoint is complete, so a rerun only exports.
      needed = 2 * sum(v.shape.num_elements() * 4 for v in run.model.encoder.variables)  # checkpoint + SavedModel
      raise DiskFull(f"no room to write the encoder under {config.output_dir} ({e.__class__.__name__}: "
                     f"{first_line(e)[:200]}): it needs about {needed / 2**20:.1f} MiB free; "
                     f"training finished and is saved in {run.checkpointer.latest()}: free space and rerun the "
                     "same command, which only writes the encoder") from None
  if config.do_eval and not result.interrupted and distribute.is_chief(strategy):
    history = result.evaluation["eval_history"] if result.evaluation else []
    evaluated = None
    if history and history[-1]["step"] == result.step:  # --eval_every_steps evaluated the last step
      evaluated = {k: v for k, v in history[-1].items() if k != "step"}
    results = _do_eval(task, run.model, config.output_dir, result.step, evaluated)
    result = dataclasses.replace(result, metrics={**result.metrics, **results})
  return result


def _evaluate_latest(config: PretrainingConfig, masking) -> trainer.TrainResult:
  """--do_eval without --do_train: evaluates the newest checkpoint in <output_dir>/checkpoints (google-research
  evaluates its output_dir's newest) and writes eval_results.txt. Takes no run lock: a training run may go on
  in the same directory."""
  from bert_tf import fileio

  directory = fileio.absolute(os.path.join(config.output_dir, "checkpoints"))
  latest = tf.train.latest_checkpoint(directory)
  if latest is None:
    raise ValueError(f"--do_eval without --do_train: {directory} holds no checkpoint to evaluate; add --do_train, "
                     "or pass the --output_dir of a pretraining run")
  check_resume_options(config)
  task = PretrainingTask(config, masking)
  model = task.build_model()
  step = tf.Variable(0, dtype=tf.int64, trainable=False)
  tf.train.Checkpoint(model=model, step=step).restore(latest).expect_partial().assert_existing_objects_matched()
  logging.info("evaluating %s", latest)
  results = _do_eval(task, model, config.output_dir, int(step.numpy()))
  return trainer.TrainResult(int(step.numpy()), results, interrupted=False)
