"""The settings of a pretraining run: `PretrainingConfig`, the flags of scripts/run_pretraining.py, and the checks
that need no devices. The run options (strategy, devices, precision, cadence) are `RunOptions`, shared with
fine-tuning."""

from __future__ import annotations

import dataclasses

from bert_tf.config import BertConfig
from bert_tf.data.instances import DEFAULT_MASKING_RATES, check_masking_rates
from bert_tf.model import checkpoints
from bert_tf.training import run_identity, trainer
from bert_tf.training.run_options import RunOptions


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

