"""BERT pretraining (masked LM + next sentence) as a `Task` of the shared trainer, and its `Evaluator`.

The loss is google-research's: sum(w * masked-LM cross-entropy) / (sum(w) + 1e-5) + mean(NSP cross-entropy),
over the global batch. The paper's ablations (Table 5) are options: `no_nsp` drops the NSP head and term;
`left_to_right` trains a left-to-right LM (causal attention, next-token loss over every real position
sum(w * cross-entropy) / (sum(w) + 1e-5), no NSP) on unmasked records.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from bert_tf.errors import first_line
from bert_tf.tasks.pretraining.config import PretrainingConfig
from bert_tf.training import inputs, trainer


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

  def input_fix(self, latest: str | None) -> str:
    """The run record binds the records by content (`run_identity`): with no checkpoint yet it binds nothing and
    the same command starts over; after one, a resume needs the records as recorded (a changed file is refused), so
    the ways on are to start over or to start another run from the checkpoint's weights."""
    if latest is None:
      return ("no step was saved, so nothing binds the run to these records yet: fix the file (or leave it out of "
              "--input_file) and rerun; the run starts from step 0")
    return (f"the last good checkpoint is {latest}, but a resume needs the records the run recorded, so once the "
            "file is fixed or made again, rerun with --overwrite_output_dir to start over, or with another "
            f"--output_dir and --init_checkpoint={latest} to start from its weights")



# The training metrics' names (PretrainingTask.metrics) -> the names of eval_results.txt: google-research's for
# the masked LM and next sentence; next_token_* for the left-to-right LM's next-token predictions.
EVAL_NAMES = {"mlm_accuracy": "masked_lm_accuracy", "mlm_loss": "masked_lm_loss",
              "nsp_accuracy": "next_sentence_accuracy", "nsp_loss": "next_sentence_loss",
              "lm_accuracy": "next_token_accuracy", "lm_loss": "next_token_loss"}


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
