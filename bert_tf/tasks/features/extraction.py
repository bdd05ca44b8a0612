"""Contextual features of text, as google-research's `extract_features.py` writes them; what
`scripts/extract_features.py` runs.

  input_file: one example a line, `text_a` or `text_a ||| text_b`
  --read_examples--> InputExample (unique_id = line number, from 0)
  --convert_examples_to_features--> InputFeatures: [CLS] a [SEP] (b [SEP]), truncated to max_seq_length
  --BertEncoder, each requested layer's output--> float32 [n_tokens, H] per layer
  --> output_file, one JSON line per input line:
      {"linex_index": i, "features": [{"token": "[CLS]", "layers": [{"index": -1, "values": [H floats]}, ...]},
                                      ...]}

Layer indexes count the transformer layers as google-research's `get_all_encoder_layers` does: -1 the last,
0 the first layer's output (the embeddings are not among them). Values are rounded to 6 decimals as the
reference rounds them (Python's `round(float(x), 6)`).

Reading, tokenizing and truncating are line for line the reference's (tests/test_features_extraction.py compares
every value with google-research's script on the same checkpoint). What differs is how the encoder runs: batches
of similar lengths padded to their longest line, not every line to max_seq_length; the padded positions are
masked, so the values are the same.

GELU: google-research's modeling.py computes "gelu" with the tanh approximation; bert_tf and Hugging Face with
erf (the models they train and convert use it). `gelu="auto"` runs a google-research (TF1) checkpoint as
google-research's code runs it (tanh) and any other as bert_tf runs it (erf); the two differ by up to ~1e-3 per
activation.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Iterator, Sequence

import numpy as np

from bert_tf import fileio
from bert_tf.config import BertConfig
from bert_tf.tasks.common.features import truncate_lengths

GELU_FORMS = ("auto", "erf", "tanh")
# A line is a pair when it has " ||| " in it; the greedy first group makes the last one the separator.
_PAIR = re.compile(r"^(.*) \|\|\| (.*)$")
# Lines are sorted by length within blocks of this many batches, so a batch pads little; the output keeps the
# input's order, and at most one block of results is held in memory.
_BATCHES_PER_BLOCK = 16


@dataclasses.dataclass
class InputExample:
  unique_id: int  # The line's number, from 0 (the output's "linex_index").
  text_a: str
  text_b: str | None = None


@dataclasses.dataclass
class InputFeatures:
  """One line's model input; the int lists are padded to max_seq_length as the reference pads them."""

  unique_id: int
  tokens: list[str]  # [CLS] a [SEP] (b [SEP]): the output's "token" fields.
  input_ids: list[int]
  input_mask: list[int]
  input_type_ids: list[int]


def read_examples(input_file: str) -> list[InputExample]:
  """Every line of `input_file` (UTF-8; a blank line too) as an example, stripped; `a ||| b` is a pair.

  FileNotFoundError when the file is missing, ValueError when it has no line.
  """
  if not fileio.exists(input_file):
    raise FileNotFoundError(f"--input_file={input_file}: no such file")
  if fileio.isdir(input_file):
    raise IsADirectoryError(f"--input_file={input_file} is a directory; give the text file (one example a line)")
  import tensorflow as tf

  examples = []
  # GFile's readline, as the reference's: lines end at "\n" only and it drops every "\r" (Python's text mode
  # would split a line at a lone "\r").
  with tf.io.gfile.GFile(input_file, "rb") as reader:
    while True:
      raw = reader.readline()
      if not raw:
        break
      try:
        line = raw.decode("utf-8").replace("\r", "").strip()
      except UnicodeDecodeError as e:
        raise ValueError(f"--input_file={input_file}:{len(examples) + 1}: not valid UTF-8 ({e.reason} at byte "
                         f"{e.start} of the line); re-encode the file as UTF-8") from None
      match = _PAIR.match(line)
      text_a, text_b = (line, None) if match is None else (match.group(1), match.group(2))
      examples.append(InputExample(len(examples), text_a, text_b))
  if not examples:
    raise ValueError(f"--input_file={input_file} is empty; write one example a line (`text` or `text_a ||| text_b`)")
  return examples


def convert_examples_to_features(examples: Sequence[InputExample], seq_length: int,
                                 tokenizer) -> list[InputFeatures]:
  """[CLS] a [SEP] (type 0) and b [SEP] (type 1), truncated to `seq_length`, ids padded with 0 to it."""
  features = []
  for example in examples:
    tokens_a = tokenizer.tokenize(example.text_a)
    # A b that tokenizes to nothing (say, control characters alone) makes a one-sentence example, as in the
    # reference.
    tokens_b = tokenizer.tokenize(example.text_b) if example.text_b else None
    if tokens_b:  # google-research's _truncate_seq_pair, with room for [CLS] [SEP] [SEP]
      keep_a, keep_b = truncate_lengths(len(tokens_a), len(tokens_b), seq_length - 3)
      tokens_a, tokens_b = tokens_a[:keep_a], tokens_b[:keep_b]
    else:
      tokens_a = tokens_a[:seq_length - 2]
    tokens = ["[CLS]", *tokens_a, "[SEP]"]
    types = [0] * len(tokens)
    if tokens_b:
      tokens += [*tokens_b, "[SEP]"]
      types += [1] * (len(tokens_b) + 1)
    ids = tokenizer.convert_tokens_to_ids(tokens)
    padding = [0] * (seq_length - len(ids))
    features.append(InputFeatures(example.unique_id, tokens, list(ids) + padding, [1] * len(ids) + padding,
                                  types + padding))
  return features


def parse_layers(text: str, num_hidden_layers: int) -> list[int]:
  """`--layers` ("-1,-2,-3,-4") -> the indexes, in the given order; each in [-L, L-1] for L layers."""
  try:
    indexes = [int(part) for part in text.split(",")]
  except ValueError:
    raise ValueError(f"--layers={text}: give comma-separated layer indexes, e.g. -1,-2,-3,-4") from None
  bad = [i for i in indexes if not -num_hidden_layers <= i < num_hidden_layers]
  if bad:
    raise ValueError(f"--layers={text}: {bad[0]} is out of range for a model of {num_hidden_layers} layers "
                     f"(num_hidden_layers); use -{num_hidden_layers}..-1 (from the last) or "
                     f"0..{num_hidden_layers - 1} (from the first)")
  return indexes


def round6(values: np.ndarray) -> np.ndarray:
  """float32 values -> float64, each equal to the reference's `round(float(x), 6)`, 30 times faster.

  Exact, not close: a float32 has 24 significant bits and 10**6 = 2**6 * 15625 (14 bits), so x * 1e6 is exact
  in float64; rint rounds it half to even as `round` does; and k / 1e6 is the double nearest to k / 10**6,
  which is what `round` returns.
  """
  return np.round(values.astype(np.float64), 6)


def output_line(feature: InputFeatures, layer_indexes: Sequence[int], values: Sequence[np.ndarray]) -> str:
  """The JSON line of one example; `values[j]` float32 [n_tokens, H] is layer `layer_indexes[j]`'s output."""
  rounded = [round6(layer).tolist() for layer in values]
  return json.dumps({"linex_index": feature.unique_id, "features": [
      {"token": token, "layers": [{"index": index, "values": rounded[j][i]}
                                  for j, index in enumerate(layer_indexes)]}
      for i, token in enumerate(feature.tokens)]})


def gelu_for(gelu: str, google_research_checkpoint: bool) -> str:
  """`gelu` ("auto", "erf", "tanh") resolved for a checkpoint: see the module docstring."""
  if gelu not in GELU_FORMS:
    raise ValueError(f"--gelu={gelu}: choose one of {', '.join(GELU_FORMS)}")
  if gelu == "auto":
    return "tanh" if google_research_checkpoint else "erf"
  return gelu


def with_gelu(config: BertConfig, form: str) -> BertConfig:
  """`config` computing its "gelu" in `form` ("erf", bert_tf's "gelu", or "tanh", its "gelu_new"); other
  activations unchanged."""
  if config.hidden_act in ("gelu", "gelu_new"):
    return dataclasses.replace(config, hidden_act="gelu" if form == "erf" else "gelu_new")
  return config


def is_google_research_checkpoint(path: str) -> bool:
  """True when `path` (any form --init_checkpoint takes) is a checkpoint under google-research's TF1 names."""
  from bert_tf.model import checkpoints

  found = checkpoints.checkpoint_kind(path)
  return found is not None and found.kind == checkpoints.TF1


class LayerOutputs:
  """Runs `encoder` (a BertEncoder) on padded int32 batches and returns the outputs of `layer_indexes`."""

  def __init__(self, encoder, layer_indexes: Sequence[int]):
    import tensorflow as tf

    spec = {name: tf.TensorSpec([None, None], tf.int32, name=name)
            for name in ("input_ids", "input_mask", "segment_ids")}

    @tf.function(input_signature=[spec])
    def layers(inputs):
      outputs = encoder(inputs, training=False)["encoder_outputs"]
      return [tf.cast(outputs[i], tf.float32) for i in layer_indexes]

    self._layers = layers

  def __call__(self, features: Sequence[InputFeatures]) -> list[list[np.ndarray]]:
    """For each feature, float32 [n_tokens, H] per requested layer; the batch is cut to its longest line."""
    length = max(len(f.tokens) for f in features)

    def column(name):
      return np.array([getattr(f, name)[:length] for f in features], np.int32)  # [B, T]

    outputs = [o.numpy() for o in self._layers({"input_ids": column("input_ids"),
                                                 "input_mask": column("input_mask"),
                                                 "segment_ids": column("input_type_ids")})]
    return [[o[b, :len(f.tokens)] for o in outputs] for b, f in enumerate(features)]


def extract(features: Sequence[InputFeatures], layer_outputs: LayerOutputs,
            batch_size: int) -> Iterator[list[np.ndarray]]:
  """Each feature's layer outputs (as `LayerOutputs` gives them), in the order of `features`."""
  block = batch_size * _BATCHES_PER_BLOCK
  for start in range(0, len(features), block):
    part = features[start:start + block]
    order = sorted(range(len(part)), key=lambda i: len(part[i].tokens))
    results: list = [None] * len(part)
    for b in range(0, len(order), batch_size):
      chosen = order[b:b + batch_size]
      for i, values in zip(chosen, layer_outputs([part[i] for i in chosen])):
        results[i] = values
    yield from results


@dataclasses.dataclass
class FeatureExtractionConfig:
  """scripts/extract_features.py's flags (google-research's names and defaults, plus `gelu`)."""

  input_file: str
  output_file: str
  vocab_file: str | None  # None: the vocab.txt that comes with init_checkpoint
  init_checkpoint: str
  bert_config_file: str | None = None  # default: the bert_config.json beside init_checkpoint
  layers: str = "-1,-2,-3,-4"
  max_seq_length: int = 128
  do_lower_case: bool = True
  batch_size: int = 32
  gelu: str = "auto"

  def validate(self, bert_config: BertConfig, config_source: str | None) -> list[int]:
    """Checks every flag against the files and the model before any work; returns the layer indexes."""
    from bert_tf.model import checkpoints

    for name in ("input_file", "output_file", "vocab_file", "init_checkpoint"):
      if not getattr(self, name):
        raise ValueError(f"--{name} is required")
    if self.batch_size < 1:
      raise ValueError(f"--batch_size={self.batch_size}: must be at least 1")
    if self.max_seq_length < 3:
      raise ValueError(f"--max_seq_length={self.max_seq_length}: must be at least 3 ([CLS] a [SEP] b [SEP])")
    if self.max_seq_length > bert_config.max_position_embeddings:
      raise ValueError(f"--max_seq_length={self.max_seq_length} exceeds max_position_embeddings="
                       f"{bert_config.max_position_embeddings} of the BERT config; lower it")
    gelu_for(self.gelu, False)
    indexes = parse_layers(self.layers, bert_config.num_hidden_layers)
    if not fileio.exists(self.vocab_file):
      raise FileNotFoundError(f"--vocab_file={self.vocab_file}: no such file")
    checkpoints.check_vocab_fits(self.vocab_file, bert_config, config_source)
    if fileio.isdir(self.output_file):
      raise IsADirectoryError(f"--output_file={self.output_file} is a directory; give a file name")
    # The model's files as read, defaults included (scripts/extract_features.py checks --input_file up front).
    kind = checkpoints.checkpoint_kind(self.init_checkpoint)
    weights = [f"{kind.prefix}.*"] if kind and kind.prefix else [fileio.join(self.init_checkpoint, "*")]
    fileio.check_not_input("output_file", self.output_file, {
        "vocab_file": [self.vocab_file], "bert_config_file": [config_source], "init_checkpoint": weights})
    return indexes


def load_encoder(init_checkpoint: str, bert_config: BertConfig, gelu: str = "auto",
                 config_source: str | None = None):
  """A float32 BertEncoder with the weights of `init_checkpoint` (a bert_tf checkpoint or output directory,
  encoder_savedmodel/, a google-research checkpoint, a Hugging Face directory), "gelu" computed as `gelu` says.
  Returns (encoder, a description of the weights' source)."""
  from bert_tf.model.encoder import BertEncoder
  from bert_tf.training import finetuning

  form = gelu_for(gelu, is_google_research_checkpoint(init_checkpoint))
  encoder = BertEncoder(with_gelu(bert_config, form), dtype="float32")
  source = finetuning.init_encoder(encoder, init_checkpoint, config_source)
  return encoder, f"{source}, gelu={form}"


def run(config: FeatureExtractionConfig, say=print) -> dict:
  """Writes `config.output_file` whole or not at all; returns a summary (lines, tokens, seconds)."""
  import time

  from bert_tf.data.tokenization import FullTokenizer
  from bert_tf.model import checkpoints
  from bert_tf.training import finetuning

  for name in ("input_file", "init_checkpoint"):
    if not getattr(config, name):
      raise ValueError(f"--{name} is required")
  bert_config = finetuning.bert_config_for(config.bert_config_file, config.init_checkpoint)
  if not config.vocab_file and config.output_file:  # else validate names the missing --output_file first
    config = dataclasses.replace(config, vocab_file=finetuning.vocab_file_for(None, config.init_checkpoint))
  config_source = config.bert_config_file or checkpoints.find_config(config.init_checkpoint)
  layer_indexes = config.validate(bert_config, config_source)
  examples = read_examples(config.input_file)
  tokenizer = FullTokenizer(config.vocab_file, do_lower_case=config.do_lower_case)
  features = convert_examples_to_features(examples, config.max_seq_length, tokenizer)
  encoder, source = load_encoder(config.init_checkpoint, bert_config, config.gelu, config_source)
  say(f"{len(features):,} lines from {config.input_file}; weights {source}; layers {layer_indexes}")

  start = time.time()
  layer_outputs = LayerOutputs(encoder, layer_indexes)
  fileio.makedirs_for(config.output_file)
  temp = fileio.temp_path_for(config.output_file)
  try:
    with fileio.open_file(temp, "w") as writer:
      for feature, values in zip(features, extract(features, layer_outputs, config.batch_size)):
        writer.write(output_line(feature, layer_indexes, values) + "\n")
    fileio.commit(temp, config.output_file)
  except BaseException:
    fileio.discard(temp)
    raise
  seconds = time.time() - start
  tokens = sum(len(f.tokens) for f in features)
  say(f"wrote {config.output_file}: {len(features):,} lines, {tokens:,} tokens in {seconds:.1f} s")
  return {"output_file": config.output_file, "lines": len(features), "tokens": tokens, "layers": layer_indexes,
          "seconds": round(seconds, 2), "weights": source}
