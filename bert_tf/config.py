"""`BertConfig`: the one model configuration, read from and written to google-research's `bert_config.json`.

The field names are google-research's and are used unchanged in code, flags and docs. Keys that other
producers add (Hugging Face's `directionality`, `pooler_*`, `model_type`, ...) are kept in `extras` and written
back, so a config read and written again loses nothing.

One field is ours: `causal_attention` (a left-to-right model, the paper's "LTR & No NSP" ablation). It is
written only when true, so google-research's configs read and write back unchanged, and read as false when
absent.
"""

from __future__ import annotations

import dataclasses
import json
import os
from typing import Any

# The named sizes of Turc et al. (2019) and the paper: (num_hidden_layers, hidden_size, num_attention_heads).
PRESETS: dict[str, tuple[int, int, int]] = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

HIDDEN_ACTS = ("gelu", "gelu_new", "relu", "tanh")

# Fields that are not google-research's: absent from its bert_config.json (read as this default) and written
# only when they differ from it.
OPTIONAL_FIELDS = {"causal_attention": False}


@dataclasses.dataclass
class BertConfig:
  """Hyperparameters of a BERT encoder; defaults are BERT-base's."""

  vocab_size: int = 30522
  hidden_size: int = 768
  num_hidden_layers: int = 12
  num_attention_heads: int = 12
  intermediate_size: int = 3072  # 4 * hidden_size in every published BERT.
  hidden_act: str = "gelu"  # "gelu" is the exact erf form; "gelu_new" the tanh approximation.
  hidden_dropout_prob: float = 0.1
  attention_probs_dropout_prob: float = 0.1
  max_position_embeddings: int = 512
  type_vocab_size: int = 2
  initializer_range: float = 0.02  # stddev of the truncated normal used for every weight matrix.
  # True: every position attends only to itself and the positions before it (a left-to-right language model),
  # in pretraining, fine-tuning and export alike; the pooler then reads the last real token (encoder.py).
  causal_attention: bool = False
  extras: dict[str, Any] = dataclasses.field(default_factory=dict)

  def __post_init__(self):
    self.validate()

  def validate(self, source: str = "BertConfig") -> None:
    """Raises ValueError naming the field at fault and what to change."""
    for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "max_position_embeddings", "type_vocab_size"):
      value = getattr(self, name)
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{source}: {name} must be a positive integer, got {value!r}")
    if self.hidden_size % self.num_attention_heads:
      raise ValueError(
          f"{source}: hidden_size ({self.hidden_size}) must be a multiple of num_attention_heads "
          f"({self.num_attention_heads})")
    if self.hidden_act not in HIDDEN_ACTS:
      raise ValueError(f"{source}: hidden_act {self.hidden_act!r} is not one of {HIDDEN_ACTS}")
    for name in ("hidden_dropout_prob", "attention_probs_dropout_prob"):
      value = getattr(self, name)
      if not 0.0 <= value < 1.0:
        raise ValueError(f"{source}: {name} must be in [0, 1), got {value!r}")
    if self.initializer_range <= 0:
      raise ValueError(f"{source}: initializer_range must be > 0, got {self.initializer_range!r}")
    if not isinstance(self.causal_attention, bool):
      raise ValueError(f"{source}: causal_attention must be true or false, got {self.causal_attention!r}")

  @property
  def head_size(self) -> int:
    return self.hidden_size // self.num_attention_heads

  @classmethod
  def from_preset(cls, name: str, **overrides) -> "BertConfig":
    """A named size (`tiny` ... `large`) with intermediate_size 4H; `overrides` replace any field."""
    if name not in PRESETS:
      raise ValueError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
    layers, hidden, heads = PRESETS[name]
    fields = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                  intermediate_size=4 * hidden)
    fields.update(overrides)
    return cls(**fields)

  @classmethod
  def from_dict(cls, values: dict[str, Any], source: str = "config") -> "BertConfig":
    known = {f.name for f in dataclasses.fields(cls)} - {"extras"}
    missing = sorted(known - set(values) - set(OPTIONAL_FIELDS))
    if missing:
      raise ValueError(f"{source}: missing keys {missing}; a bert_config.json has all of "
                       f"{sorted(known - set(OPTIONAL_FIELDS))}")
    config = cls.__new__(cls)
    for name in known:
      setattr(config, name, values.get(name, OPTIONAL_FIELDS.get(name)))
    config.extras = {k: v for k, v in values.items() if k not in known}
    config.validate(source)
    return config

  def to_dict(self) -> dict[str, Any]:
    values = dataclasses.asdict(self)
    extras = values.pop("extras")
    for name, default in OPTIONAL_FIELDS.items():
      if values[name] == default:
        del values[name]  # google-research's keys alone, as its bert_config.json has them
    return {**dict(sorted(values.items())), **extras}

  @classmethod
  def from_json_file(cls, path: str | os.PathLike) -> "BertConfig":
    from bert_tf import fileio

    path = os.fspath(path)
    if not fileio.exists(path):
      raise FileNotFoundError(f"bert config file {path} does not exist")
    with fileio.open_file(path, "r") as f:
      try:
        values = json.load(f)
      except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from None
    return cls.from_dict(values, source=path)

  def to_json_string(self) -> str:
    return json.dumps(self.to_dict(), indent=2) + "\n"

  def to_json_file(self, path: str | os.PathLike) -> None:
    from bert_tf import fileio

    fileio.write_text_atomic(os.fspath(path), self.to_json_string())
