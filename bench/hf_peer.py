"""What the Hugging Face peers share: batch padding, google-research's optimizer and schedule on torch, the
training loop, batched prediction, the results file, and the matched runs' order / head files and peer run.

The peers (`glue_hf_peer.py`, `squad_hf_peer.py`, `ner_hf_peer.py`, `swag_hf_peer.py`) fine-tune a
`transformers` BERT from the same weights and hyperparameters as ours, each reading its task's data its own
way; everything below is the same for every task, so that a difference between two peers is a difference of
the task, never of the loop. The matched runs (`glue_matched.py`, `squad_matched.py`) give the peer our batch
order and head start and compare the step losses. torch and transformers are imported inside the functions:
this module imports with numpy alone (bench/requirements.txt has the rest).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import numpy as np

BIAS_CORRECTION_NOTE = (
    "torch.optim.AdamW applies Adam's bias correction (m / (1 - beta1^t), v / (1 - beta2^t)); "
    "google-research's AdamWeightDecay, which our side implements, has none. With warmup the early updates "
    "differ in size; this is an unavoidable difference of the peer.")


def argument_parser(doc: str) -> argparse.ArgumentParser:
  """A script's parser: its docstring's first paragraph as the description, the rest kept as written."""
  return argparse.ArgumentParser(description=doc.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)


def add_model_flags(parser: argparse.ArgumentParser, outputs: str) -> None:
  """--model_dir and --output_dir (`outputs`: what goes there, as its help says it)."""
  parser.add_argument("--model_dir", required=True,
                      help="Hugging Face BERT folder: config.json, model.safetensors, vocab.txt.")
  parser.add_argument("--output_dir", required=True, help=f"Where {outputs}.")


def add_optimizer_flags(parser: argparse.ArgumentParser, learning_rate: float) -> None:
  """google-research's optimizer flags and defaults (the peak learning rate the task's)."""
  parser.add_argument("--learning_rate", type=float, default=learning_rate)
  parser.add_argument("--num_train_epochs", type=float, default=3.0)
  parser.add_argument("--warmup_proportion", type=float, default=0.1)
  parser.add_argument("--weight_decay", type=float, default=0.01)
  parser.add_argument("--adam_epsilon", type=float, default=1e-6)
  parser.add_argument("--max_grad_norm", type=float, default=1.0)


def add_run_flags(parser: argparse.ArgumentParser, seed_help: str | None, log_every: int) -> None:
  """--seed, --num_threads (torch's) and --log_every."""
  parser.add_argument("--seed", type=int, default=42, help=seed_help)
  parser.add_argument("--num_threads", type=int, default=2, help="torch intra-op threads.")
  parser.add_argument("--log_every", type=int, default=log_every, help="Print the loss every N steps.")


def add_matched_flags(parser: argparse.ArgumentParser, order_help: str, head_help: str) -> None:
  """The matched runs' flags: the other implementation's batches and head start, no dropout."""
  parser.add_argument("--order_file", default=None, help=order_help)
  parser.add_argument("--head_init", default=None, help=head_help)
  parser.add_argument("--dropout", type=float, default=None,
                      help="Overrides the config's hidden and attention dropout (0 for matched runs).")


def check_flags(parser: argparse.ArgumentParser, args: argparse.Namespace, predict_batch: str,
                files: Sequence[str] = ()) -> None:
  """Refuses (parser.error) a --dropout outside [0, 1) where the peer has it, a non-positive epoch count or
  batch size (`predict_batch` names the prediction one), and a missing file among the flags named in `files`
  (unset ones pass)."""
  if getattr(args, "dropout", None) is not None and not 0 <= args.dropout < 1:
    parser.error("--dropout must be in [0, 1)")
  if min(args.num_train_epochs, args.train_batch_size, getattr(args, predict_batch)) <= 0:
    parser.error(f"--num_train_epochs, --train_batch_size and --{predict_batch} must be positive")
  for name in files:
    path = getattr(args, name)
    if path is not None and not os.path.isfile(path):
      parser.error(f"--{name}={path}: no such file")


def google_lr_factor(step: int, total_steps: int, warmup_steps: int) -> float:
  """google-research's warmup + linear decay, as a multiplier of the peak rate; `step` = updates done."""
  if warmup_steps and step < warmup_steps:
    return step / warmup_steps
  return max(0.0, 1.0 - step / total_steps)


def decays(name: str) -> bool:
  """google-research's rule: no weight decay for biases and LayerNorm parameters."""
  return not any(part in name for part in ("bias", "LayerNorm", "layer_norm"))


def make_order(num_examples: int, batch_size: int, steps: int, seed: int) -> list[list[int]]:
  """`steps` full batches of example indices: a fresh permutation each epoch, batches running on across epoch
  ends (as our shuffle().repeat().batch() pipeline does)."""
  shuffler = np.random.RandomState(seed)
  stream: list[int] = []
  while len(stream) < steps * batch_size:
    stream.extend(int(i) for i in shuffler.permutation(num_examples))
  return [stream[s * batch_size:(s + 1) * batch_size] for s in range(steps)]


def read_order(path: str, num_examples: int) -> list[list[int]]:
  """An --order_file: a JSON list of batches (lists of example indices), one per optimizer step."""
  with open(path, encoding="utf-8") as f:
    order = [[int(i) for i in batch] for batch in json.load(f)]
  if not order or any(not batch or min(batch) < 0 or max(batch) >= num_examples for batch in order):
    raise ValueError(f"{path}: needs non-empty batches of indices in [0, {num_examples})")
  return order


def pad(input_ids: Sequence[Sequence[int]], pad_id: int,
        token_type_ids: Sequence[Sequence[int]] | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
  """Rows of unpadded sequences -> (input_ids, token_type_ids, attention_mask), int64 [rows, longest row];
  segment ids 0 where `token_type_ids` is None."""
  length = max(len(ids) for ids in input_ids)
  ids_out = np.full((len(input_ids), length), pad_id, dtype=np.int64)
  types_out = np.zeros((len(input_ids), length), dtype=np.int64)
  mask_out = np.zeros((len(input_ids), length), dtype=np.int64)
  for row, ids in enumerate(input_ids):
    ids_out[row, :len(ids)] = ids
    if token_type_ids is not None:
      types_out[row, :len(ids)] = token_type_ids[row]
    mask_out[row, :len(ids)] = 1
  return ids_out, types_out, mask_out


def start_torch(num_threads: int):
  """-> (torch, transformers), with `num_threads` intra-op threads and transformers' logging quiet (the
  "newly initialized" warning is recorded in results.json instead)."""
  os.environ.setdefault("OMP_NUM_THREADS", str(num_threads))
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  torch.set_num_threads(num_threads)
  transformers.logging.set_verbosity_error()
  transformers.logging.disable_progress_bar()
  return torch, transformers


def load_model(model_class, args, head: str | None = None, show_unexpected: bool = False, **kwargs):
  """`model_class.from_pretrained(args.model_dir)` in float32 after seeding with args.seed; args.dropout (when
  the peer has it and it is set) overrides the hidden and attention dropout, args.head_init (likewise) is copied
  into the layer named `head`. Prints what was newly initialised. -> (model, loading info, newly initialised)."""
  import torch  # pylint: disable=import-outside-toplevel
  import transformers  # pylint: disable=import-outside-toplevel

  transformers.set_seed(args.seed)
  dropout = getattr(args, "dropout", None)
  overrides = {} if dropout is None else {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
  model, loading = model_class.from_pretrained(args.model_dir, dtype=torch.float32, output_loading_info=True,
                                               **kwargs, **overrides)
  if getattr(args, "head_init", None):
    layer = getattr(model, head)
    with np.load(args.head_init) as values, torch.no_grad():
      layer.weight.copy_(torch.from_numpy(values["kernel"].T.copy()))  # torch keeps [out, in]
      layer.bias.copy_(torch.from_numpy(values["bias"]))
  newly_initialized = sorted(loading.get("missing_keys", []))
  line = f"newly initialised: {', '.join(newly_initialized) or 'nothing'}"
  if show_unexpected:
    line += f"; unexpected keys: {', '.join(sorted(loading.get('unexpected_keys', []))) or 'none'}"
  print(line, flush=True)
  return model, loading, newly_initialized


def optimizer_and_schedule(model, args, total_steps: int, warmup_steps: int):
  """torch AdamW (beta 0.9 / 0.999, args.adam_epsilon, args.weight_decay but for biases and LayerNorm) and
  google-research's schedule at args.learning_rate. -> (optimizer, scheduler)."""
  import torch  # pylint: disable=import-outside-toplevel

  named = list(model.named_parameters())
  groups = [{"params": [p for n, p in named if decays(n)], "weight_decay": args.weight_decay},
            {"params": [p for n, p in named if not decays(n)], "weight_decay": 0.0}]
  optimizer = torch.optim.AdamW(groups, lr=args.learning_rate, betas=(0.9, 0.999), eps=args.adam_epsilon)
  scheduler = torch.optim.lr_scheduler.LambdaLR(
      optimizer, lambda step: google_lr_factor(step, total_steps, warmup_steps))
  return optimizer, scheduler


def train(model, args, batches: Iterable[Sequence[int]], loss_of: Callable, total_steps: int, warmup_steps: int,
          unit: str, show_lr: bool = False) -> dict:
  """Trains on the first `total_steps` batches of `batches` (lists of indices; `loss_of(indices)` -> the
  batch's loss tensor) with `optimizer_and_schedule`'s AdamW and schedule, clipping the global gradient norm at
  args.max_grad_norm, and prints a line every args.log_every steps and at the last: the mean loss of the last
  log_every steps and the `unit`s per second; with `show_lr`, the mean since the previous line and the rate of the
  line's update. -> {step_losses, steps, processed, train_seconds (the loop's wall time), train_cpu_seconds}."""
  import torch  # pylint: disable=import-outside-toplevel

  optimizer, scheduler = optimizer_and_schedule(model, args, total_steps, warmup_steps)
  max_grad_norm, log_every = args.max_grad_norm, args.log_every
  model.train()
  step_losses: list[float] = []
  processed, logged, step = 0, 0, 0
  cpu_start, start = time.process_time(), time.perf_counter()
  for indices in batches:
    if step >= total_steps:
      break
    loss = loss_of(indices)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm)
    step_lr = optimizer.param_groups[0]["lr"]  # The rate of this update.
    optimizer.step()
    scheduler.step()
    step += 1
    processed += len(indices)
    step_losses.append(loss.item())
    if step % log_every == 0 or step == total_steps:
      rate = processed / (time.perf_counter() - start)
      if show_lr:
        print(f"step {step}/{total_steps}  loss {sum(step_losses[logged:]) / (step - logged):.4f}  "
              f"lr {step_lr:.3g}  {rate:.1f} {unit}/s", flush=True)
      else:
        print(f"step {step}/{total_steps}  loss {np.mean(step_losses[-log_every:]):.4f}  {rate:.2f} {unit}/s",
              flush=True)
      logged = step
  train_seconds = time.perf_counter() - start
  return {"step_losses": step_losses, "steps": step, "processed": processed, "train_seconds": train_seconds,
          "train_cpu_seconds": time.process_time() - cpu_start}


def predict(model, num_rows: int, batch_size: int, make_batch: Callable) -> Iterator[tuple[range, object]]:
  """Runs the model in eval mode without gradients on rows [0, num_rows) in order, `batch_size` at a time:
  yields (the batch's row indices, the model's outputs for `make_batch(indices)`)."""
  import torch  # pylint: disable=import-outside-toplevel

  model.eval()
  with torch.no_grad():
    for begin in range(0, num_rows, batch_size):
      indices = range(begin, min(begin + batch_size, num_rows))
      yield indices, model(**make_batch(indices))


def predict_logits(model, num_rows: int, batch_size: int, make_batch: Callable) -> np.ndarray:
  """float64 logits of rows [0, num_rows), in order (see `predict`)."""
  return np.concatenate([outputs.logits.double().numpy()
                         for _, outputs in predict(model, num_rows, batch_size, make_batch)])


OPTIMIZER_FLAGS = ("learning_rate", "num_train_epochs", "warmup_proportion", "weight_decay", "adam_epsilon",
                   "max_grad_norm")


def hyperparameters(args, model, flags: Sequence[str]) -> dict:
  """results.json's "hyperparameters": the named flags' values in their order, then the model's dropout."""
  return {**{name: getattr(args, name) for name in flags},
          "hidden_dropout_prob": model.config.hidden_dropout_prob,
          "attention_probs_dropout_prob": model.config.attention_probs_dropout_prob}


def model_record(args, model, newly_initialized: list[str]) -> dict:
  """results.json's "model": the folder, what was newly initialised, the attention implementation."""
  return {"model_dir": os.path.abspath(args.model_dir), "newly_initialized": newly_initialized,
          "attn_implementation": model.config._attn_implementation}  # pylint: disable=protected-access


def threads(torch, num_threads: int) -> dict:
  """results.json's "threads": what torch runs with, and what was asked."""
  return {"torch_intra_op": torch.get_num_threads(), "torch_inter_op": torch.get_num_interop_threads(),
          "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"), "requested": num_threads}


def write_json_atomic(path: str, value: dict) -> None:
  temp = f"{path}.tmp-{os.getpid()}"
  with open(temp, "w", encoding="utf-8") as f:
    json.dump(value, f, indent=2, sort_keys=False)
    f.write("\n")
  os.replace(temp, path)


# Matched runs: both sides take the same batches from the same head start, without dropout.


def add_matched_run_flags(parser: argparse.ArgumentParser) -> None:
  """A matched run's --optimizer (ours), --num_threads (each side's) and --skip_peer."""
  parser.add_argument("--optimizer", default="adamw_bias_corrected",
                      help="Ours; the peer is torch.optim.AdamW, which adamw_bias_corrected matches.")
  parser.add_argument("--num_threads", type=int, default=2)
  parser.add_argument("--skip_peer", action="store_true", help="Reuse the peer's results.json from work_dir.")


def write_order_and_head(order: list[list[int]], order_file: str, model_dir: str, classes: int, seed: int,
                         head_file: str) -> None:
  """Writes the batch order (JSON) and a head start (.npz: kernel [hidden, classes] ~ N(0, 0.02) drawn by
  RandomState(seed), bias zeros) for both sides."""
  with open(order_file, "w", encoding="utf-8") as f:
    json.dump(order, f)
  with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as f:
    hidden = json.load(f)["hidden_size"]
  rng = np.random.RandomState(seed)
  np.savez(head_file, kernel=(rng.standard_normal((hidden, classes)) * 0.02).astype(np.float32),
           bias=np.zeros(classes, np.float32))


def peer_results(script: str, flags: list[str], peer_dir: str, num_threads: int, skip: bool, **env) -> dict:
  """The peer's results.json in `peer_dir`: from a run of `script` with `flags` (which name --output_dir=peer_dir)
  under `num_threads` OMP threads and the extra `env`, or, when `skip`, as an earlier run left it."""
  if not skip:
    env = dict(os.environ, OMP_NUM_THREADS=str(num_threads), PYTHONUNBUFFERED="1", **env)
    command = [sys.executable, script, *flags]
    print("peer:", " ".join(command), flush=True)
    subprocess.run(command, env=env, check=True)
  with open(os.path.join(peer_dir, "results.json"), encoding="utf-8") as f:
    return json.load(f)


def load_matched_head(model, layer: str, head_file: str):
  """Builds our Keras model on a dummy batch and sets the layer named `layer` to the head start."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  model({k: tf.zeros([1, 8], tf.int32) for k in ("input_ids", "input_mask", "segment_ids")})
  with np.load(head_file) as head:
    getattr(model, layer).set_weights([head["kernel"], head["bias"]])
  return model
