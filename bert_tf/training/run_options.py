"""How a training run runs, as against what it trains: the strategy and devices, precision, XLA, gradient
accumulation, the optimizer, the seed and the loop / log / checkpoint cadence. One keyword-only dataclass,
`RunOptions`, that pretraining's and fine-tuning's configs both derive from, so each option is declared, checked
and turned into a strategy once; `bert_tf.cli.define_training_flags` defines its flags, and
`bert_tf.cli.training_flag_values` reads them into these fields.

Imports TensorFlow only to make the strategy (the choices of its flags: bert_tf/training/choices.py).
"""

from __future__ import annotations

import dataclasses

from bert_tf.training.choices import DTYPES, OPTIMIZERS, STRATEGIES


@dataclasses.dataclass(kw_only=True)
class RunOptions:
  """The run options every training config has; field names are the scripts' flags. A config that wants
  another default redeclares the field: `steps_per_loop: int = dataclasses.field(default=50, kw_only=True)`."""

  # The choices of distribution_strategy, all_reduce_alg, collective_implementation, optimizer and dtype, and
  # what each means: bert_tf/training/choices.py.
  distribution_strategy: str = "mirrored"
  num_gpus: int | None = None  # None: every GPU TensorFlow sees, else the CPU; 0: the CPU
  all_reduce_alg: str | None = None  # mirrored only; None: MirroredStrategy's default
  collective_implementation: str = "auto"  # multi_worker_mirrored only
  tpu_name: str | None = None
  tpu_zone: str | None = None
  gcp_project: str | None = None
  optimizer: str = "adamw"
  dtype: str = "float32"
  jit_compile: bool = False  # XLA-compile each replica's training step
  gradient_accumulation_steps: int = 1  # micro-batches per optimizer update
  steps_per_loop: int = 100  # optimizer updates per host call
  log_steps: int = 100  # a progress line and TensorBoard summaries every this many updates
  save_checkpoints_steps: int = 1000
  keep_checkpoint_max: int = 5  # training checkpoints kept
  seed: int = 12345  # initialisation, dropout and data order
  # Start over: remove what earlier runs wrote in output_dir (run_identity.start_over); else a rerun resumes, and
  # one with other weight-defining settings is refused (run_identity.start_run).
  overwrite_output_dir: bool = False

  def check_run_options(self) -> None:
    """Checks that need no devices; raises ValueError naming the flag and the fix. (`strategy()` checks what
    depends on the devices: GPUs that are not there, a TPU that cannot be reached.)"""
    for name in ("save_checkpoints_steps", "keep_checkpoint_max", "steps_per_loop", "log_steps",
                 "gradient_accumulation_steps"):
      if getattr(self, name) < 1:
        raise ValueError(f"--{name}={getattr(self, name)}: must be >= 1")
    if self.dtype not in DTYPES:
      raise ValueError(f"--dtype={self.dtype!r}: choose one of {DTYPES}")
    if self.dtype == "mixed_float16" and self.distribution_strategy == "tpu":
      raise ValueError("--dtype=mixed_float16 on TPU: TPUs compute in bfloat16; use --dtype=mixed_bfloat16")
    if self.optimizer not in OPTIMIZERS:
      raise ValueError(f"--optimizer={self.optimizer!r}: choose one of {OPTIMIZERS}")
    if self.distribution_strategy not in STRATEGIES:
      raise ValueError(f"--distribution_strategy={self.distribution_strategy!r}: choose one of {STRATEGIES}")
    if self.seed < 0:
      raise ValueError(f"--seed={self.seed}: must be >= 0")

  def strategy(self):
    """The `tf.distribute.Strategy` these options name (`distribute.get_strategy`; ValueError saying what to
    change)."""
    from bert_tf.training import distribute

    return distribute.get_strategy(self.distribution_strategy, self.num_gpus, self.tpu_name, self.tpu_zone,
                                   self.gcp_project, self.all_reduce_alg, self.collective_implementation)

