"""Optimizers and the learning-rate schedule of BERT pretraining, as Keras 3 optimizers.

`AdamWeightDecay` is google-research/bert's `AdamWeightDecayOptimizer` (optimization.py), equation for equation:

  m <- beta_1 m + (1 - beta_1) g
  v <- beta_2 v + (1 - beta_2) g^2
  update <- m / (sqrt(v) + epsilon)            # no bias correction: the reference has none
  update <- update + weight_decay_rate * w     # only where `decays(w)`; decoupled, added before the lr
  w <- w - lr * update

`Lamb` (You et al., 2019) adds bias correction and scales each variable's update by the trust ratio
||w|| / ||update|| (1 when either norm is 0, and for variables that do not decay).

Weight-decay rule: a variable decays iff it has rank >= 2 and its name is not `bias` - that is, weight
matrices and embedding tables decay; biases (of any rank) and LayerNorm `gamma`/`beta` (rank 1) do not. For
BERT this is exactly the set google-research excludes by name ("LayerNorm", "layer_norm", "bias").

Gradients are clipped to global norm `clip_norm` (1.0) before the update. Unlike Keras' built-in optimizers,
these do NOT sum gradients across replicas: the trainer sums them first (so that clipping sees the norm of
the global gradient, and a LossScaleOptimizer's finiteness check agrees on every replica), and passes the
sums. Used outside `trainer.py` under a multi-replica strategy, all-reduce the gradients yourself.
"""

from __future__ import annotations

import os

import keras
import tensorflow as tf

from bert_tf.training.choices import OPTIMIZERS

# OPTIMIZERS (--optimizer's choices): "adamw_bias_corrected" is AdamW with Adam's bias correction exactly as
# torch.optim.AdamW (and so Hugging Face) computes it; the TF Model Garden's Keras AdamW differs only in adding
# epsilon before the correction. Without the correction (google-research) early updates are larger: at step t the
# update is (1 - beta_1^t) / sqrt(1 - beta_2^t) times the corrected one, 5.3x at step 34, 1.8x at step 343.

# mixed_float16: finite updates in a row after which the dynamic loss scale doubles (Keras' own default), unless
# the environment variable below says otherwise (read by `create_optimizer`, so every script honours it).
LOSS_SCALE_GROWTH_STEPS = 2000
LOSS_SCALE_GROWTH_STEPS_ENV = "BERT_TF_LOSS_SCALE_GROWTH_STEPS"


def decays(variable) -> bool:
  """The weight-decay rule above: rank >= 2 and not named `bias` (a Keras variable's own name, or the last
  component of a tf.Variable's)."""
  name = variable.name.split("/")[-1].split(":")[0]
  return len(variable.shape) >= 2 and not name.endswith("bias")


@keras.saving.register_keras_serializable(package="bert_tf")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """google-research's schedule: `lr * step / num_warmup_steps` while step < num_warmup_steps, else
  `lr * (1 - min(step, num_train_steps) / num_train_steps)`.

  `step` is the number of updates already applied, so the first update uses lr 0 when there is warmup. The
  decay runs from step 0, not from the end of warmup (as the reference's polynomial_decay does), so just
  after warmup the rate is `lr * (1 - num_warmup_steps / num_train_steps)`, and it reaches 0 at
  num_train_steps.
  """

  def __init__(self, learning_rate: float, num_train_steps: int, num_warmup_steps: int = 0):
    if num_train_steps < 1:
      raise ValueError(f"num_train_steps must be >= 1, got {num_train_steps}")
    self.learning_rate = float(learning_rate)
    self.num_train_steps = int(num_train_steps)
    self.num_warmup_steps = int(num_warmup_steps)

  def __call__(self, step):
    step = tf.cast(step, tf.float32)
    done = tf.minimum(step, float(self.num_train_steps)) / float(self.num_train_steps)
    decayed = self.learning_rate * (1.0 - done)
    if not self.num_warmup_steps:
      return decayed
    warmup = self.learning_rate * step / float(self.num_warmup_steps)
    return tf.where(step < float(self.num_warmup_steps), warmup, decayed)

  def get_config(self):
    return {"learning_rate": self.learning_rate, "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps}


class _ClippedOptimizer(keras.optimizers.Optimizer):
  """Shared by both optimizers: Adam's two moments, global-norm clipping of already-summed gradients, our own
  weight decay."""

  def __init__(self, learning_rate, weight_decay_rate: float, clip_norm: float | None, name: str,
               beta_1: float = 0.9, beta_2: float = 0.999, epsilon: float = 1e-6, **kwargs):
    # Keras' own `weight_decay` would decay every variable; ours follows `decays` and sits in update_step.
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self.weight_decay_rate = float(weight_decay_rate)
    self.clip_norm = clip_norm
    self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon

  def _update_moments(self, gradient, variable):
    """Updates m and v of `variable`; returns (its index, m, v)."""
    i = self._get_variable_index(variable)
    m, v = self._m[i], self._v[i]
    g = tf.cast(gradient, variable.dtype)
    self.assign(m, self.beta_1 * m + (1.0 - self.beta_1) * g)
    self.assign(v, self.beta_2 * v + (1.0 - self.beta_2) * tf.square(g))
    return i, m, v

  def build(self, var_list):
    if self.built:
      return
    super().build(var_list)
    # Decided once on the Keras variables: inside update_step a mirrored variable arrives as its per-device
    # component, whose name ("bias/replica_1") no longer says what it is.
    self._decays = [decays(v) for v in var_list]
    self._m, self._v = self.add_optimizer_variables(var_list, ["m", "v"])

  def _all_reduce_sum_gradients(self, grads_and_vars):
    return list(grads_and_vars)  # Already summed by the caller; see the module docstring.

  def _backend_apply_gradients(self, grads, trainable_variables):
    grads = [tf.convert_to_tensor(g) for g in grads]  # IndexedSlices (embedding lookups) -> dense.
    if self.clip_norm:
      grads, _ = tf.clip_by_global_norm(grads, self.clip_norm)
    self._backend_update_step(grads, trainable_variables, self.learning_rate)

  def get_config(self):
    config = super().get_config()
    config.update(weight_decay_rate=self.weight_decay_rate, clip_norm=self.clip_norm, beta_1=self.beta_1,
                  beta_2=self.beta_2, epsilon=self.epsilon)
    return config


def _handle(variable):
  """The resource handle of a Keras variable (or of the per-device tf.Variable a strategy passes)."""
  return variable.handle if isinstance(variable, tf.Variable) else variable.value.handle


@keras.saving.register_keras_serializable(package="bert_tf")
class AdamWeightDecay(_ClippedOptimizer):
  """google-research's AdamWeightDecayOptimizer (see the module docstring for the equations)."""

  def __init__(self, learning_rate=1e-4, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
               clip_norm=1.0, bias_correction: bool = False, name="adam_weight_decay", **kwargs):
    super().__init__(learning_rate, weight_decay_rate, clip_norm, name, beta_1, beta_2, epsilon, **kwargs)
    self.bias_correction = bool(bias_correction)

  def get_config(self):
    return {**super().get_config(), "bias_correction": self.bias_correction}

  def update_step(self, gradient, variable, learning_rate):
    i = self._get_variable_index(variable)
    lr = tf.cast(learning_rate, variable.dtype)
    if self.weight_decay_rate and self._decays[i]:
      # w - lr (adam + wd w) = (w - lr wd w) - lr adam: the Adam direction does not depend on w.
      self.assign_sub(variable, lr * self.weight_decay_rate * variable)
    # TensorFlow's fused Adam kernel does the moments and the step in one pass over memory (2.5x faster than
    # the same arithmetic as separate ops on CPU): w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps).
    # Powers of 0 make the factor 1: no bias correction, as the reference. With the correction, eps scaled by
    # sqrt(1 - b2^t) makes that exactly torch.optim.AdamW's w -= lr m_hat / (sqrt(v_hat) + eps); the kernel's
    # own form would add eps / sqrt(1 - b2^t) (31x eps at step 1) to sqrt(v_hat), damping early updates.
    epsilon = tf.constant(self.epsilon, lr.dtype)
    if self.bias_correction:
      t = tf.cast(self.iterations + 1, lr.dtype)  # `iterations` counts the updates already applied.
      powers = tf.pow(tf.constant(self.beta_1, lr.dtype), t), tf.pow(tf.constant(self.beta_2, lr.dtype), t)
      epsilon = epsilon * tf.sqrt(1.0 - powers[1])
    else:
      powers = tf.zeros([], lr.dtype), tf.zeros([], lr.dtype)
    tf.raw_ops.ResourceApplyAdam(
        var=_handle(variable), m=_handle(self._m[i]), v=_handle(self._v[i]), beta1_power=powers[0],
        beta2_power=powers[1], lr=lr, beta1=tf.constant(self.beta_1, lr.dtype),
        beta2=tf.constant(self.beta_2, lr.dtype), epsilon=epsilon,
        grad=tf.cast(gradient, variable.dtype))


@keras.saving.register_keras_serializable(package="bert_tf")
class Lamb(_ClippedOptimizer):
  """LAMB: bias-corrected Adam direction plus decoupled weight decay, scaled per variable by the trust ratio
  ||w|| / ||update||. Variables that do not decay (biases, LayerNorm) get no decay and ratio 1."""

  def __init__(self, learning_rate=1e-4, weight_decay_rate=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
               clip_norm=1.0, name="lamb", **kwargs):
    super().__init__(learning_rate, weight_decay_rate, clip_norm, name, beta_1, beta_2, epsilon, **kwargs)

  def update_step(self, gradient, variable, learning_rate):
    i, m, v = self._update_moments(gradient, variable)
    t = tf.cast(self.iterations + 1, variable.dtype)
    m_hat = m / (1.0 - tf.pow(tf.cast(self.beta_1, variable.dtype), t))
    v_hat = v / (1.0 - tf.pow(tf.cast(self.beta_2, variable.dtype), t))
    update = m_hat / (tf.sqrt(v_hat) + self.epsilon)
    ratio = 1.0
    if self._decays[i]:
      if self.weight_decay_rate:
        update += self.weight_decay_rate * variable
      w_norm = tf.norm(variable)
      u_norm = tf.norm(update)
      ratio = tf.where((w_norm > 0) & (u_norm > 0), w_norm / tf.maximum(u_norm, 1e-30), 1.0)
    self.assign_sub(variable, tf.cast(learning_rate, variable.dtype) * ratio * update)


def create_optimizer(optimizer: str = "adamw", learning_rate: float = 1e-4, num_train_steps: int = 1,
                     num_warmup_steps: int = 0, weight_decay_rate: float = 0.01, clip_norm: float = 1.0,
                     dtype: str = "float32",
                     loss_scale_growth_steps: int | None = None) -> keras.optimizers.Optimizer:
  """The optimizer of a BERT run: AdamW or LAMB on the warmup-then-linear-decay schedule.

  With dtype "mixed_float16" it is wrapped in a dynamic `keras.optimizers.LossScaleOptimizer` (bfloat16 has
  float32's range and needs no loss scaling): the loss scale starts at 2**15, halves on every update skipped for
  non-finite gradients and doubles after `loss_scale_growth_steps` finite ones in a row (default: the environment
  variable BERT_TF_LOSS_SCALE_GROWTH_STEPS, else Keras' 2000). Create it under the strategy's scope.
  """
  if loss_scale_growth_steps is None:
    loss_scale_growth_steps = loss_scale_growth_steps_from_env()
  if loss_scale_growth_steps < 1:
    raise ValueError(f"loss_scale_growth_steps={loss_scale_growth_steps}: must be >= 1")
  if optimizer not in OPTIMIZERS:
    raise ValueError(f"--optimizer={optimizer!r}: choose one of {OPTIMIZERS}")
  schedule = WarmupLinearDecay(learning_rate, num_train_steps, num_warmup_steps)
  if optimizer == "lamb":
    opt = Lamb(learning_rate=schedule, weight_decay_rate=weight_decay_rate, clip_norm=clip_norm)
  else:
    opt = AdamWeightDecay(learning_rate=schedule, weight_decay_rate=weight_decay_rate, clip_norm=clip_norm,
                          bias_correction=optimizer == "adamw_bias_corrected")
  if dtype == "mixed_float16":
    opt = LossScaleOptimizer(opt, dynamic_growth_steps=loss_scale_growth_steps)
  return opt


def loss_scale_growth_steps_from_env() -> int:
  """BERT_TF_LOSS_SCALE_GROWTH_STEPS as an integer >= 1, or LOSS_SCALE_GROWTH_STEPS when unset; ValueError naming
  the variable otherwise."""
  text = os.environ.get(LOSS_SCALE_GROWTH_STEPS_ENV, "").strip()
  if not text:
    return LOSS_SCALE_GROWTH_STEPS
  if not text.isdigit() or int(text) < 1:
    raise ValueError(f"{LOSS_SCALE_GROWTH_STEPS_ENV}={text!r}: must be an integer >= 1 (finite updates in a row "
                     "before mixed_float16's loss scale doubles), or unset for 2000")
  return int(text)


@keras.saving.register_keras_serializable(package="bert_tf")
class LossScaleOptimizer(keras.optimizers.LossScaleOptimizer):
  """Keras 3's dynamic loss scaling, except that an update skipped for overflow still counts as a step.

  Keras 3 leaves `iterations` alone on a skipped update, so the learning-rate schedule (and Adam's bias
  correction) would lag the trainer's step by the number of skips, and a run would end above a learning rate of
  0. tf.keras 2's loss-scale optimizer, which the TF Model Garden uses, counted skipped updates; so does this one:
  the schedule is a function of the step alone, as google-research's is of its global step.
  """

  def _stateful_handle_non_finite_grads(self):
    super()._stateful_handle_non_finite_grads()
    self.inner_optimizer.iterations.assign_add(1)


def inner_optimizer(optimizer: keras.optimizers.Optimizer) -> keras.optimizers.Optimizer:
  """The optimizer that updates the weights: unwraps a LossScaleOptimizer."""
  return getattr(optimizer, "inner_optimizer", optimizer)


def current_learning_rate(optimizer: keras.optimizers.Optimizer) -> float:
  inner = inner_optimizer(optimizer)
  return float(inner._get_current_learning_rate())  # pylint: disable=protected-access
