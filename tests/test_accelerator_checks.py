"""bert_tf/training/accelerator_checks.py, and what it exists for: the training step of pretraining and of every
fine-tuning task, in every dtype policy, traced as a GPU machine traces it, has a GPU kernel for each op and its
dtypes, but for the host ops named below.

Outside the step, between loops, other work stays on the host by design and is not traced here: the input pipeline
itself (tf.data runs on host threads), summary writes (WriteScalarSummary and friends: CPU kernels only),
checkpoint save and restore (SaveV2, RestoreV2, MergeV2Checkpoints: CPU kernels only; variables are copied to the
host to be written), and evaluation's post-processing in numpy.
"""

import pytest
import tensorflow as tf

import task_helpers as tk
from bert_tf.training import accelerator_checks, trainer

# Ops of the traced training steps that may run on the host, by `Finding.signature` (op type and dtypes), and why.
HOST_OPS = {
    "Const(dtype=string)": "the messages of in-graph assertions: the shape check of "
    "sparse_softmax_cross_entropy_with_logits on NER's [B, T, K] logits (T known only at run time), Keras' check "
    "that an LSTM's mask is right-padded before cuDNN runs it (feature-based NER). Strings live in host memory; the "
    "Assert op reading them runs on the GPU with that input in host memory. XLA drops both assertions.",
    "IteratorGetNext": "reads the next batch of the input pipeline, whose iterator (a resource) lives on the host, "
    "where TensorFlow places the op with it; the batch is copied to the devices once per step. It has a GPU "
    "kernel (for iterators made on a GPU), so it is never a finding, and it is named here as the one op of the step "
    "that runs on the host by design.",
    "Split(T=int32)": "with several replicas on one machine, the worker's batch (int32 ids, masks, labels, read on "
    "the host) is cut into one slice per replica (trainer._split) on the host, where it already is; each replica's "
    "slice is then copied to its device. TensorFlow has no int32 Split kernel for GPUs.",
    "Split(T=int64)": "the same for int64 entries of the batch (SQuAD's and NER's unique_ids, never computed with).",
}


# The steps that hold them (the others have none): kept exact, so that HOST_OPS stays true.
HOST_OPS_OF = {"ner": {"Const(dtype=string)"}, "ner_feature_based": {"Const(dtype=string)"}}


def test_ops_without_a_gpu_kernel_for_their_dtypes_are_found_in_function_bodies_too():
  @tf.function
  def step(x, text, counts):
    ints = tf.matmul(counts, counts)  # no GPU kernel for int32 MatMul
    with tf.device("/cpu:0"):
      lengths = tf.strings.length(text)  # string ops: CPU only, here pinned there by hand
    total = tf.while_loop(lambda i, acc: i < 3, lambda i, acc: (i + 1, acc + tf.matmul(counts, counts)),
                          (0, tf.zeros_like(counts)))[1]  # in the loop body's function
    return tf.math.erf(x), lengths, ints + total

  found = accelerator_checks.ops_without_gpu_kernel(step.get_concrete_function(
      tf.TensorSpec([2], tf.float32), tf.TensorSpec([2], tf.string), tf.TensorSpec([2, 2], tf.int32)))
  assert [(f.signature, f.count, f.pinned_to_cpu) for f in found] == [
      ("MatMul(T=int32)", 2, False), ("StringLength()", 1, True)]
  assert str(found[1]).startswith("StringLength() x1 [pinned to CPU] e.g. ")


@pytest.fixture(scope="module")
def task_data(tmp_path_factory):
  directory = tmp_path_factory.mktemp("tasks")
  return {task: tk.write_data(task, directory / task) for task in tk.TASKS}


@pytest.mark.slow
@pytest.mark.parametrize("task", tk.TASKS)
def test_every_op_of_the_training_step_has_a_gpu_kernel_in_every_dtype_policy(task, task_data, tmp_path):
  # Traced, not run: the step with gradient accumulation (the micro-batch loop) under each policy.
  seen, host = set(), set()
  with accelerator_checks.tracing_as_on_gpu() as strategy:
    for dtype in trainer.DTYPES:
      run = tk.make_trainer(task, task_data[task], tmp_path / dtype, strategy, dtype=dtype, accumulation=2)
      step = run._loop_fn.get_concrete_function(run.iterator, tf.TensorSpec([], tf.int32))
      graph = step.graph.as_graph_def()
      seen |= {n.op for n in graph.node} | {n.op for f in graph.library.function for n in f.node_def}
      found = accelerator_checks.ops_without_gpu_kernel(graph)
      unexpected = [str(f) for f in found if f.signature not in HOST_OPS or f.pinned_to_cpu]
      assert not unexpected, (task, dtype, unexpected)
      host |= {f.signature for f in found}
  assert host == HOST_OPS_OF.get(task, set())
  assert "IteratorGetNext" in seen
  if task == "ner_feature_based":  # traced as on a GPU: Keras' LSTMs are cuDNN's kernel, checked with the rest
    assert {"CudnnRNNV3", "CudnnRNNBackpropV3"} <= seen
