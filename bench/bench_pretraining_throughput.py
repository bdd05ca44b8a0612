"""Benchmark: pretraining step throughput and model-FLOPs utilisation (MFU), ours against two peers, one run.

For each config (default mini = L4/H256/A4 and small = L4/H512/A8, vocab 30,522), sequence length T = 128,
global batch B = 32, P = 20 masked positions, float32, on this machine's CPU, it times one full training step
- forward, the pretraining loss (mean masked-LM cross-entropy + mean NSP cross-entropy), backward, and an
AdamW update (the project's `AdamWeightDecay`: clip to global norm 1.0, decoupled weight decay 0.01, constant
learning rate) - inside one `tf.function`, with and without `jit_compile=True` (XLA), of:

  ours       bert_tf.model.pretraining.BertPretrainer + pretraining_loss
  keras_hub  keras_hub.models.BertBackbone + keras_hub.layers.MaskedLMHead (tied to the token embedding)
             + a 2-class Dense on the pooled output
  tfm        official.nlp.modeling.models.BertPretrainerV2 on networks.BertEncoder (tf_keras), with the
             Model Garden's usual NSP head (layers.ClassificationHead, inner_dim H, tanh, dropout 0.1)

All three get the same synthetic batch (fixed seed: random ids, padded tails, two segments, masked positions /
ids / weights with padded prediction slots, NSP labels), the same loss function and the same optimizer class.
Real lengths are uniform in [T/2, T] by default (73% real tokens; records of the embedded corpus have 77%);
`--min_length=T` gives a batch without padding, where ours' skipping of padded rows gains nothing.
Each keeps its own defaults otherwise (the peers' GELU is the tanh approximation, ours the exact erf form of
google-research; all use dropout 0.1).

Timing. Every case is traced / compiled and run for `--warmup` steps first. The timed steps are then taken in
`--rounds` rounds; within a round the cases take ONE step each in turn, over and over, so that load from other
processes on this shared machine (which changes within seconds) falls on all of them alike. In a round each
case takes up to ceil(`--steps` / `--rounds`) steps and stops early once its own timed seconds in the round
reach `--seconds` / `--rounds` (never fewer than one step a round). sequences/s = timed steps x B / timed
seconds (the sum of the case's own step times); the per-round range, the load average and the process's CPU
use (CPU seconds / wall seconds / cores: below 1 means other processes took cores from us) are reported with
it.

FLOPs (multiply-add = 2 FLOPs; matmuls only; elementwise work, softmax, LayerNorm, gathers are not counted):
  forward  = 2 * L * (4 H^2 + 2 H I) * B * T          encoder matmuls (QKV, attention output, FFN in and out)
           + 2 * 2 * L * B * T^2 * H                   attention scores Q K^T and context P V
           + 2 * B * P * (H^2 + H * V)                 masked-LM head at the P masked positions
           + 2 * B * (H^2 + 2 H)                       pooler + NSP
  training = 3 * forward                               (backward = 2 x forward)
  MFU      = training FLOPs per step / step time / matmul peak
The matmul peak is the best sustained float32 `tf.linalg.matmul` rate on square matrices of `--peak_sizes`
(TensorFlow's default threading, all cores), measured before and after the run and, at the best size, for
`--probe_seconds` before every round; the peak is the best of all of them, since other users' load can only
lower it. "MFU vs round probe" divides each round's rate by the probe taken just before it, under about the
same load, and gives the median over rounds: a figure less sensitive to the machine being shared.

Precision, XLA and the peak. `--dtype=mixed_bfloat16|mixed_float16` builds every model under that Keras dtype
policy (the matmuls in bfloat16 / float16, the variables and the loss in float32; mixed_float16 with the project's
dynamic `LossScaleOptimizer`, as training uses) and times the probes in the compute dtype. `--jit_compile` times
the XLA step only (`--no-jit_compile` the plain one; the default `--xla=both` times both). `--peak_tflops=X` or
`--chip=NAME` (accelerators.CHIPS: the dense datasheet peaks of H100, H200, A100, L4, TPU v5e/v5p) replaces the
measured matmul peak as the MFU denominator: on a GPU, utilisation against the chip's dense peak of the precision
the matmuls run in (TF32 for float32, TensorFlow's default on Ampere and later).

  python bench/bench_pretraining_throughput.py [--configs=mini,small] [--peers=keras_hub,tfm] [--xla=both]
      [--batch_size=32] [--seq_length=128] [--steps=20] [--seconds=20] [--json=report.json]
      [--dtype=float32] [--jit_compile | --no-jit_compile] [--peak_tflops=989.4 | --chip=h100_sxm]

Prints a JSON report, then a markdown table. Targets: ours >= 1.25x the faster peer and MFU >= 70%.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import accelerators  # noqa: E402  pylint: disable=wrong-import-position

IMPLEMENTATIONS = ("ours", "keras_hub", "tfm")
DTYPES = accelerators.DTYPES
COMPUTE_DTYPES = {"float32": tf.float32, "mixed_bfloat16": tf.bfloat16, "mixed_float16": tf.float16}
TARGET_RATIO = 1.25
TARGET_MFU = 0.70
FLOPS_FORMULA = ("training = 3 x forward; forward = 2*L*(4H^2 + 2HI)*B*T + 2*2*L*B*T^2*H + 2*B*P*(H^2 + H*V) "
                 "+ 2*B*(H^2 + 2H); MFU = training FLOPs per step / step time / matmul peak")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  p.add_argument("--configs", default="mini,small", help="comma-separated BertConfig presets")
  p.add_argument("--peers", default="keras_hub,tfm",
                 help="comma-separated peers among keras_hub,tfm; empty to time ours only")
  p.add_argument("--xla", default="both", choices=("both", "on", "off"), help="jit_compile of the step")
  p.add_argument("--batch_size", type=int, default=32)
  p.add_argument("--seq_length", type=int, default=128)
  p.add_argument("--max_predictions_per_seq", type=int, default=20)
  p.add_argument("--vocab_size", type=int, default=30522)
  p.add_argument("--steps", type=int, default=20, help="timed steps per case (or --seconds, first reached)")
  p.add_argument("--seconds", type=float, default=20.0, help="timed seconds per case (or --steps)")
  p.add_argument("--rounds", type=int, default=4, help="rounds over the cases that share the timing")
  p.add_argument("--warmup", type=int, default=2, help="untimed steps per case after tracing")
  p.add_argument("--peak_sizes", default="1024,1536,2048", help="square matmul sizes for the peak")
  p.add_argument("--peak_seconds", type=float, default=3.0, help="seconds of matmuls per peak size")
  p.add_argument("--probe_seconds", type=float, default=1.0,
                 help="seconds of matmul timed before each round, under that round's load")
  p.add_argument("--seed", type=int, default=12345)
  p.add_argument("--min_length", type=int, default=None,
                 help="shortest real length of a sequence (default seq_length // 2); = seq_length for a batch "
                      "without padding")
  p.add_argument("--json", default=None, help="also write the JSON report to this file")
  p.add_argument("--dtype", default="float32", choices=DTYPES, help="Keras dtype policy of every model")
  p.add_argument("--jit_compile", default=None, action=argparse.BooleanOptionalAction,
                 help="time the XLA step only (--no-jit_compile: the plain step only); default: --xla")
  p.add_argument("--peak_tflops", type=float, default=None,
                 help="MFU against this dense peak (TFLOPS) instead of the measured matmul peak")
  p.add_argument("--chip", default=None, choices=sorted(accelerators.CHIPS),
                 help="MFU against this chip's dense datasheet peak for --dtype (bench/accelerators.py)")
  args = p.parse_args(argv)
  if args.jit_compile is not None:
    if args.xla != "both" and args.xla != ("on" if args.jit_compile else "off"):
      p.error(f"--xla={args.xla} contradicts --{'' if args.jit_compile else 'no-'}jit_compile; give one of them")
    args.xla = "on" if args.jit_compile else "off"
  if args.peak_tflops is not None and args.chip:
    p.error("--peak_tflops and --chip both give the peak; pass one")
  if args.peak_tflops is not None and args.peak_tflops <= 0:
    p.error(f"--peak_tflops={args.peak_tflops} must be > 0")
  if args.dtype == "mixed_float16" and "tfm" in args.peers.split(","):
    p.error("--dtype=mixed_float16 with the tfm peer: tf_keras models cannot use this project's Keras 3 loss scaling; "
            "leave tfm out of --peers (or use --dtype=mixed_bfloat16)")
  args.configs = [c for c in args.configs.split(",") if c]
  args.peers = [c for c in args.peers.split(",") if c]
  unknown = [c for c in args.peers if c not in IMPLEMENTATIONS[1:]]
  if unknown:
    p.error(f"--peers: unknown {unknown}; choose among {list(IMPLEMENTATIONS[1:])}")
  if not 4 <= args.seq_length <= 512:
    p.error(f"--seq_length={args.seq_length} must be in [4, 512] (max_position_embeddings)")
  if not 1 <= args.max_predictions_per_seq <= args.seq_length:
    p.error(f"--max_predictions_per_seq={args.max_predictions_per_seq} must be in [1, --seq_length]")
  if args.min_length is None:
    args.min_length = args.seq_length // 2
  if not 2 <= args.min_length <= args.seq_length:
    p.error(f"--min_length={args.min_length} must be in [2, --seq_length]")
  if args.rounds < 1 or args.steps < 1 or args.seconds <= 0:
    p.error("--rounds and --steps must be >= 1 and --seconds > 0")
  args.peak_sizes = [int(s) for s in args.peak_sizes.split(",") if s]
  return args


def load_average() -> list[float]:
  return [round(x, 2) for x in os.getloadavg()]


# ----------------------------------------------------------------------------------------------------------
# Inputs and FLOPs


def synthetic_batch(batch: int, length: int, predictions: int, vocab: int, seed: int,
                    min_length: int | None = None) -> dict[str, np.ndarray]:
  """One pretraining batch shaped like a TFRecord batch: int32 [B, T] ids / mask / segments, int32 [B, P]
  masked positions and ids, float32 [B, P] weights, int32 [B, 1] NSP labels.

  Each sequence has a real length in [min_length, T] (default T/2; the rest is padding), [CLS] first, a second
  segment from a random split point, and round(0.15 * length) masked positions (at most P; the other slots are
  padding, position 0 with weight 0).
  """
  rng = np.random.default_rng(seed)
  ids = np.zeros([batch, length], np.int32)
  mask = np.zeros([batch, length], np.int32)
  segments = np.zeros([batch, length], np.int32)
  positions = np.zeros([batch, predictions], np.int32)
  lm_ids = np.zeros([batch, predictions], np.int32)
  weights = np.zeros([batch, predictions], np.float32)
  for b in range(batch):
    n = int(rng.integers(length // 2 if min_length is None else min_length, length + 1))
    ids[b, :n] = rng.integers(min(1000, vocab // 2), vocab, n)
    ids[b, 0] = min(101, vocab - 1)  # [CLS]
    mask[b, :n] = 1
    segments[b, int(rng.integers(2, max(3, n - 1))):n] = 1
    k = min(predictions, max(1, round(0.15 * n)))
    chosen = np.sort(rng.choice(np.arange(1, n), size=k, replace=False))
    positions[b, :k] = chosen
    lm_ids[b, :k] = ids[b, chosen]
    weights[b, :k] = 1.0
  return {
      "input_ids": ids, "input_mask": mask, "segment_ids": segments, "masked_lm_positions": positions,
      "masked_lm_ids": lm_ids, "masked_lm_weights": weights,
      "next_sentence_labels": rng.integers(0, 2, [batch, 1]).astype(np.int32),
  }


def training_flops(layers: int, hidden: int, inter: int, vocab: int, batch: int, length: int,
                   predictions: int) -> dict[str, float]:
  """The FLOP count of the module docstring, by part; `training` = 3 x `forward`."""
  tokens = batch * length
  parts = {
      "encoder_matmuls": 2.0 * layers * (4 * hidden * hidden + 2 * hidden * inter) * tokens,
      "attention": 2.0 * 2 * layers * batch * length * length * hidden,
      "mlm_head": 2.0 * batch * predictions * (hidden * hidden + hidden * vocab),
      "pooler_nsp": 2.0 * batch * (hidden * hidden + 2 * hidden),
  }
  parts["forward"] = sum(parts.values())
  parts["training"] = 3.0 * parts["forward"]
  return parts


def matmul_rate(n: int, seconds: float, block_seconds: float = 0.5, dtype=tf.float32) -> float:
  """Best GFLOP/s of `tf.linalg.matmul` [n, n] x [n, n] in `dtype` over blocks of ~block_seconds for ~seconds."""
  a = tf.cast(tf.random.normal([n, n], seed=1), dtype)
  b = tf.cast(tf.random.normal([n, n], seed=2), dtype)
  # Return one element: the product is computed in full and nothing big is copied out.
  product = tf.function(lambda a, b: tf.linalg.matmul(a, b)[0, 0])
  product(a, b).numpy()
  t0 = time.perf_counter()
  product(a, b).numpy()
  per_block = max(1, int(block_seconds / (time.perf_counter() - t0)))
  best, end = 0.0, time.perf_counter() + seconds
  while time.perf_counter() < end:
    t0 = time.perf_counter()
    for _ in range(per_block):
      product(a, b).numpy()
    best = max(best, per_block * 2.0 * n ** 3 / (time.perf_counter() - t0) / 1e9)
  return best


def matmul_peak(sizes: list[int], seconds: float, dtype=tf.float32) -> dict:
  """Best sustained matmul GFLOP/s in `dtype` over square sizes `sizes`, TF's default threading (all cores)."""
  rates = {n: round(matmul_rate(n, seconds, dtype=dtype), 1) for n in sizes}
  return {"gflops": max(rates.values()), "by_size": rates, "load_average": load_average(),
          "intra_op_threads": tf.config.threading.get_intra_op_parallelism_threads() or "default",
          "inter_op_threads": tf.config.threading.get_inter_op_parallelism_threads() or "default"}


# ----------------------------------------------------------------------------------------------------------
# The three models. Each builder takes the BertConfig and a Keras dtype policy name and returns (forward,
# trainable variables); forward maps the batch dict of tensors to {"mlm_logits": [B, P, V], "nsp_logits": [B, 2]}
# in training mode (logits in the compute dtype; the loss casts them to float32).


def build_ours(config, dtype: str = "float32"):
  from bert_tf.model.pretraining import BertPretrainer

  model = BertPretrainer(config, dtype=dtype)

  def forward(features):
    return model(features, training=True)

  return forward, model.trainable_variables


def build_keras_hub(config, dtype: str = "float32"):
  import keras
  import keras_hub

  init = keras.initializers.TruncatedNormal(stddev=config.initializer_range)
  backbone = keras_hub.models.BertBackbone(
      vocabulary_size=config.vocab_size, num_layers=config.num_hidden_layers,
      num_heads=config.num_attention_heads, hidden_dim=config.hidden_size,
      intermediate_dim=config.intermediate_size, dropout=config.hidden_dropout_prob,
      max_sequence_length=config.max_position_embeddings, num_segments=config.type_vocab_size, dtype=dtype)
  mlm_head = keras_hub.layers.MaskedLMHead(
      vocabulary_size=config.vocab_size, token_embedding=backbone.token_embedding,
      intermediate_activation="gelu", kernel_initializer=init, layer_norm_epsilon=1e-12, name="mlm_head",
      dtype=dtype)
  nsp_head = keras.layers.Dense(2, kernel_initializer=init, name="nsp_head", dtype=dtype)
  inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
            for name in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
  encoded = backbone({k: inputs[k] for k in ("token_ids", "segment_ids", "padding_mask")})
  model = keras.Model(inputs, {
      "mlm_logits": mlm_head(encoded["sequence_output"], mask_positions=inputs["mask_positions"]),
      "nsp_logits": nsp_head(encoded["pooled_output"])})

  def forward(features):
    return model({"token_ids": features["input_ids"], "segment_ids": features["segment_ids"],
                  "padding_mask": features["input_mask"],
                  "mask_positions": features["masked_lm_positions"]}, training=True)

  return forward, model.trainable_variables


def build_tfm(config, dtype: str = "float32"):
  import warnings

  import tf_keras
  from official.nlp.modeling import layers, models, networks

  # tf_keras layers take the global policy; the Model Garden builds its BERT this way under mixed precision.
  tf_keras.mixed_precision.set_global_policy(dtype)

  init = tf_keras.initializers.TruncatedNormal(stddev=config.initializer_range)
  encoder = networks.BertEncoder(
      vocab_size=config.vocab_size, hidden_size=config.hidden_size,
      num_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
      max_sequence_length=config.max_position_embeddings, type_vocab_size=config.type_vocab_size,
      inner_dim=config.intermediate_size, output_dropout=config.hidden_dropout_prob,
      attention_dropout=config.attention_probs_dropout_prob, initializer=init)
  nsp_head = layers.ClassificationHead(
      inner_dim=config.hidden_size, num_classes=2, dropout_rate=config.hidden_dropout_prob,
      initializer=init, name="next_sentence")
  model = models.BertPretrainerV2(
      encoder, mlm_activation=tf_keras.activations.gelu, mlm_initializer=init,
      classification_heads=[nsp_head])

  # BertPretrainerV2 hands its whole input dict, masked_lm_positions included, to the encoder, which warns.
  warnings.filterwarnings("ignore", message="Input dict contained keys", category=UserWarning)

  def forward(features):
    outputs = model({"input_word_ids": features["input_ids"], "input_mask": features["input_mask"],
                     "input_type_ids": features["segment_ids"],
                     "masked_lm_positions": features["masked_lm_positions"]}, training=True)
    return {"mlm_logits": outputs["mlm_logits"], "nsp_logits": outputs["next_sentence"]}

  return forward, model.trainable_variables


BUILDERS = {"ours": build_ours, "keras_hub": build_keras_hub, "tfm": build_tfm}


def make_optimizer(dtype: str = "float32"):
  """The project's AdamW (google-research's equations, clipping to norm 1); Keras 3 or tf_keras variables.
  Under mixed_float16, wrapped in the project's dynamic LossScaleOptimizer, as `create_optimizer` does."""
  from bert_tf.training.optimization import AdamWeightDecay, LossScaleOptimizer

  optimizer = AdamWeightDecay(learning_rate=1e-4, weight_decay_rate=0.01, clip_norm=1.0)
  return LossScaleOptimizer(optimizer) if dtype == "mixed_float16" else optimizer


def make_train_step(forward, variables, optimizer, jit_compile: bool):
  """forward + pretraining_loss + backward + optimizer update in one tf.function; returns the (unscaled) loss."""
  from bert_tf.model.pretraining import pretraining_loss

  def step(features):
    with tf.GradientTape() as tape:
      loss = pretraining_loss(features, forward(features))
      scaled = optimizer.scale_loss(loss)  # x the dynamic loss scale under mixed_float16, else the loss itself
    grads = tape.gradient(scaled, variables)
    # tfm computes its encoder's own pooler although the NSP head does not use it: no gradient there.
    pairs = [(g, v) for g, v in zip(grads, variables) if g is not None]
    optimizer.apply([g for g, _ in pairs], [v for _, v in pairs])
    return loss

  return tf.function(step, jit_compile=jit_compile)


# ----------------------------------------------------------------------------------------------------------
# Timing


class Case:
  """One (implementation, XLA) pair of a config and its timing so far."""

  def __init__(self, impl: str, xla: bool, step, params: int):
    self.impl, self.xla, self.step, self.params = impl, xla, step, params
    self.steps, self.seconds, self.cpu_seconds, self.round_rates = 0, 0.0, 0.0, []
    self.loss = float("nan")
    self.compile_seconds = 0.0

  def step_once(self, features) -> float:
    """One timed step; adds it to the running totals and returns its seconds."""
    start, cpu_start = time.perf_counter(), time.process_time()
    self.loss = float(self.step(features).numpy())
    elapsed = time.perf_counter() - start
    self.steps += 1
    self.seconds += elapsed
    self.cpu_seconds += time.process_time() - cpu_start
    return elapsed


def run_round(cases: list[Case], features, max_steps: int, max_seconds: float, batch: int) -> None:
  """One round: the cases step in turn, one step each, until each has `max_steps` steps or `max_seconds` of
  its own step time (at least one step each); appends each case's rate in the round to `round_rates`."""
  steps, seconds = [0] * len(cases), [0.0] * len(cases)
  while True:
    active = [i for i in range(len(cases))
              if steps[i] == 0 or (steps[i] < max_steps and seconds[i] < max_seconds)]
    if not active:
      break
    for i in active:
      seconds[i] += cases[i].step_once(features)
      steps[i] += 1
  for case, n, t in zip(cases, steps, seconds):
    case.round_rates.append(n * batch / t)


def bench_config(name: str, args, probe_size: int) -> tuple[list[dict], dict[str, float], list[float]]:
  """Times every case of one preset; returns (rows without MFU, FLOPs by part, matmul probes by round)."""
  import keras

  from bert_tf.config import BertConfig

  config = BertConfig.from_preset(name, vocab_size=args.vocab_size)
  batch = synthetic_batch(args.batch_size, args.seq_length, args.max_predictions_per_seq, config.vocab_size,
                          args.seed, args.min_length)
  features = {k: tf.constant(v) for k, v in batch.items()}
  flops = training_flops(config.num_hidden_layers, config.hidden_size, config.intermediate_size,
                         config.vocab_size, args.batch_size, args.seq_length, args.max_predictions_per_seq)
  xla_modes = {"both": (False, True), "on": (True,), "off": (False,)}[args.xla]
  load_before = load_average()

  cases = []
  for impl in ("ours", *args.peers):
    keras.utils.set_random_seed(args.seed)  # Python, NumPy and TensorFlow seeds.
    forward, variables = BUILDERS[impl](config, args.dtype)
    optimizer = make_optimizer(args.dtype)
    optimizer.build(variables)  # Slots made eagerly, shared by the case's XLA and non-XLA steps.
    params = sum(int(np.prod(v.shape)) for v in variables)
    for xla in xla_modes:
      case = Case(impl, xla, make_train_step(forward, variables, optimizer, xla), params)
      start = time.perf_counter()
      case.step(features).numpy()  # trace (and compile)
      case.compile_seconds = time.perf_counter() - start
      for _ in range(args.warmup):
        case.step(features).numpy()
      print(f"[{name}] {impl:9s} xla={'on ' if xla else 'off'} params={params / 1e6:.2f}M "
            f"first step {case.compile_seconds:.1f}s", file=sys.stderr, flush=True)
      cases.append(case)

  per_round_steps = max(1, -(-args.steps // args.rounds))
  per_round_seconds = args.seconds / args.rounds
  probes = []
  for r in range(args.rounds):
    # What the matmul reaches under the load of this round: MFU against it cancels other users' load.
    probes.append(matmul_rate(probe_size, args.probe_seconds, dtype=COMPUTE_DTYPES[args.dtype]))
    run_round(cases, features, per_round_steps, per_round_seconds, args.batch_size)
    print(f"[{name}] round {r + 1}/{args.rounds}: matmul {probes[-1]:.0f} GFLOP/s; " + ", ".join(
        f"{c.impl}{'+xla' if c.xla else ''} {c.round_rates[-1]:.1f}" for c in cases) + " seq/s "
          f"(load {load_average()})", file=sys.stderr, flush=True)
  load_after = load_average()

  rows = []
  for case in cases:
    step_s = case.seconds / case.steps
    round_mfu = [rate / args.batch_size * flops["training"] / 1e9 / probe
                 for rate, probe in zip(case.round_rates, probes)]
    rows.append({
        "config": name, "layers": config.num_hidden_layers, "hidden": config.hidden_size,
        "heads": config.num_attention_heads, "implementation": case.impl, "xla": case.xla,
        "trainable_params": case.params, "timed_steps": case.steps, "timed_seconds": round(case.seconds, 2),
        "first_step_seconds": round(case.compile_seconds, 1), "step_ms": round(1e3 * step_s, 1),
        "sequences_per_s": round(case.steps * args.batch_size / case.seconds, 2),
        "round_sequences_per_s": [round(x, 2) for x in case.round_rates],
        "gflops_achieved": round(flops["training"] / step_s / 1e9, 1),
        "mfu_vs_round_probe_median": round(float(np.median(round_mfu)), 4),
        # Below 1.0 the process did not keep every core busy: other users' load (or idle gaps).
        "cpu_utilisation": round(case.cpu_seconds / case.seconds / os.cpu_count(), 2),
        "final_loss": round(case.loss, 4),
        "load_average_before": load_before, "load_average_after": load_after,
    })
  fastest_peer = max((r["sequences_per_s"] for r in rows if r["implementation"] != "ours"), default=None)
  for r in rows:
    r["ratio_to_faster_peer"] = round(r["sequences_per_s"] / fastest_peer, 3) if fastest_peer else None
  return rows, flops, [round(p, 1) for p in probes]


def markdown(rows: list[dict]) -> str:
  lines = ["| config | implementation | XLA | sequences/s | per round | GFLOP/s | MFU % "
           "| MFU % vs round probe | CPU use | x faster peer |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|"]
  for r in rows:
    spread = f"{min(r['round_sequences_per_s']):.1f}-{max(r['round_sequences_per_s']):.1f}"
    ratio = "" if r["ratio_to_faster_peer"] is None else f"{r['ratio_to_faster_peer']:.2f}"
    lines.append(f"| {r['config']} (L{r['layers']}/H{r['hidden']}/A{r['heads']}) | {r['implementation']} | "
                 f"{'on' if r['xla'] else 'off'} | {r['sequences_per_s']:.2f} | {spread} | "
                 f"{r['gflops_achieved']:.1f} | {100 * r['mfu']:.1f} | "
                 f"{100 * r['mfu_vs_round_probe_median']:.1f} | {r['cpu_utilisation']:.2f} | {ratio} |")
  return "\n".join(lines)


def given_peak_tflops(args) -> tuple[float | None, str]:
  """The MFU denominator the flags give (TFLOPS, and where it came from), or (None, "measured ...")."""
  if args.peak_tflops is None and not args.chip:
    return None, f"measured {args.dtype} matmul peak of this machine"
  tf32 = tf.config.experimental.tensor_float_32_execution_enabled()
  return accelerators.resolve_peak(args.chip, args.peak_tflops, None, args.dtype, tf32)


def main(argv=None):
  args = parse_args(argv)
  started = time.time()
  load_start = load_average()
  compute_dtype = COMPUTE_DTYPES[args.dtype]
  peaks = [matmul_peak(args.peak_sizes, args.peak_seconds, compute_dtype)]
  probe_size = max(peaks[0]["by_size"], key=peaks[0]["by_size"].get)
  print(f"matmul peak {peaks[0]['gflops']} GFLOP/s {peaks[0]['by_size']} (load {load_average()})",
        file=sys.stderr, flush=True)
  rows, flops_by_config, probes = [], {}, {}
  for name in args.configs:
    config_rows, flops, probes[name] = bench_config(name, args, probe_size)
    rows += config_rows
    flops_by_config[name] = {k: round(v / 1e9, 3) for k, v in flops.items()}
  peaks.append(matmul_peak(args.peak_sizes, args.peak_seconds, compute_dtype))
  # The machine's peak is the best it showed at any time in the run; other users' load only lowers it.
  measured_peak = max([p["gflops"] for p in peaks] + [x for v in probes.values() for x in v])
  given_peak, peak_source = given_peak_tflops(args)
  peak = 1000.0 * given_peak if given_peak else measured_peak
  verdicts = {}
  for r in rows:
    r["mfu"] = round(r["gflops_achieved"] / peak, 4)
    r["mfu_vs_measured_matmul_peak"] = round(r["gflops_achieved"] / measured_peak, 4)
  for name in args.configs:
    ours = max((r for r in rows if r["config"] == name and r["implementation"] == "ours"),
               key=lambda r: r["sequences_per_s"])
    verdicts[name] = {
        "ours_best_xla": ours["xla"], "ours_sequences_per_s": ours["sequences_per_s"],
        "ratio_to_faster_peer": ours["ratio_to_faster_peer"], "mfu": ours["mfu"],
        "mfu_vs_round_probe_median": ours["mfu_vs_round_probe_median"],
        "meets_ratio_target": (None if ours["ratio_to_faster_peer"] is None
                               else ours["ratio_to_faster_peer"] >= TARGET_RATIO),
        "meets_mfu_target": ours["mfu"] >= TARGET_MFU,
    }
  report = {
      "benchmark": "pretraining_throughput",
      "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                  "tensorflow": tf.__version__, "python": platform.python_version()},
      "settings": {"batch_size": args.batch_size, "seq_length": args.seq_length, "min_length": args.min_length,
                   "max_predictions_per_seq": args.max_predictions_per_seq, "vocab_size": args.vocab_size,
                   "dtype": args.dtype, "xla": args.xla,
                   "tensor_float_32": tf.config.experimental.tensor_float_32_execution_enabled(),
                   "optimizer": "bert_tf AdamWeightDecay (lr 1e-4, wd 0.01, clip 1.0)"
                                + (", dynamic loss scale" if args.dtype == "mixed_float16" else ""),
                   "steps": args.steps, "seconds": args.seconds, "rounds": args.rounds, "seed": args.seed},
      "flops_formula": FLOPS_FORMULA,
      "gflop_per_step": flops_by_config,
      "matmul_peak_gflops": measured_peak,
      "mfu_peak_gflops": peak, "mfu_peak_source": peak_source,
      "matmul_peak_measurements": peaks,
      "matmul_probes_by_round": {"size": probe_size, **probes},
      "targets": {"ratio_to_faster_peer": TARGET_RATIO, "mfu": TARGET_MFU},
      "verdict": verdicts,
      "rows": rows,
      "load_average_start": load_start, "load_average_end": load_average(),
      "wall_seconds": round(time.time() - started, 1),
  }
  text = json.dumps(report, indent=2)
  print(text)
  if args.json:
    with open(args.json, "w") as f:
      f.write(text + "\n")
  print()
  print(f"matmul peak {measured_peak:.1f} GFLOP/s (best of {[p['gflops'] for p in peaks]} and the per-round probes "
        f"{probes}); MFU against {peak:.1f} GFLOP/s ({peak_source}); B={args.batch_size} T={args.seq_length} "
        f"P={args.max_predictions_per_seq} {args.dtype}; "
        f"load average {load_start} -> {report['load_average_end']}; {report['wall_seconds']:.0f} s")
  print(f"FLOPs: {FLOPS_FORMULA}")
  print("MFU % vs round probe: median over rounds of the round's rate against a matmul timed just before it, "
        "under the same load.")
  print()
  print(markdown(rows))
  print()
  for name, v in verdicts.items():
    ratio = "n/a (no peer)" if v["ratio_to_faster_peer"] is None else f"{v['ratio_to_faster_peer']:.2f}x"
    print(f"{name}: ours (XLA {'on' if v['ours_best_xla'] else 'off'}) {ratio} the faster peer "
          f"(target {TARGET_RATIO}x: {'met' if v['meets_ratio_target'] else 'NOT met'}), "
          f"MFU {100 * v['mfu']:.1f}% (target {100 * TARGET_MFU:.0f}%: "
          f"{'met' if v['meets_mfu_target'] else 'NOT met'}; {100 * v['mfu_vs_round_probe_median']:.1f}% "
          f"against the per-round probe)")


if __name__ == "__main__":
  main()
