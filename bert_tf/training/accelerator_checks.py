"""Checks a traced training step for accelerators without one: which ops, with their dtypes, have no GPU kernel
registered in the installed TensorFlow.

TensorFlow places an op on the GPU only when a GPU kernel is registered for its op type *and* its dtypes (a
`KernelDef`'s constraints list the allowed values of each type attribute); otherwise the placer puts it on the
CPU (soft placement) and every step copies its inputs and outputs between host and device. The CUDA build of
TensorFlow registers its GPU kernels whether or not a GPU is present, so the check runs on any machine:

  graph (and every function its library holds: While/If bodies, StatefulPartitionedCall callees, gradients)
    -> each node's (op type, {type attr: dtype}) -> the GPU (or device-independent DEFAULT) KernelDefs of that
    op type -> is there one whose constraints all admit the node's dtypes?

Kernels that keep some arguments in host memory (shapes, indices: `host_memory_arg`) still run on the GPU and
count as GPU kernels. A node with an explicit CPU device (`with tf.device("/cpu:0")`) is placed there by design
and reported apart (`Finding.pinned_to_cpu`).

`tracing_as_on_gpu` makes a model trace here as it would on a GPU machine (Keras picks cuDNN's RNN kernels
there), and `xla_compiled_ops` says which ops of a traced step XLA compiles (--jit_compile). Used by
tests/test_accelerator_checks.py and tests/task_runs.py; see docs/pretraining.md, "XLA and accelerators".
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import functools
import importlib
from unittest import mock

import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import kernels, op_def_registry

# Device types whose kernels can serve an op placed on a GPU: the GPU's own, and device-independent ones.
GPU_DEVICE_TYPES = ("GPU", "DEFAULT")


@dataclasses.dataclass(frozen=True)
class Finding:
  """One op type with one combination of dtypes that no GPU kernel accepts."""

  op: str  # the op type, e.g. "Erf"
  dtypes: tuple[tuple[str, str], ...]  # (type attr, dtype name) pairs, e.g. (("T", "bfloat16"),)
  count: int  # nodes of this kind in the graph and its functions
  pinned_to_cpu: bool  # every such node has an explicit CPU device: on the host by design
  example: str  # one node's name, to find it

  @property
  def signature(self) -> str:
    """"Erf(T=bfloat16)": the op type and its dtypes."""
    return f"{self.op}({', '.join(f'{k}={v}' for k, v in self.dtypes)})"

  def __str__(self) -> str:
    return f"{self.signature} x{self.count}{' [pinned to CPU]' if self.pinned_to_cpu else ''} e.g. {self.example}"


@functools.lru_cache(maxsize=None)
def _gpu_kernels(op: str) -> tuple:
  return tuple(k for k in kernels.get_registered_kernels_for_op(op).kernel if k.device_type in GPU_DEVICE_TYPES)


@functools.lru_cache(maxsize=None)
def _type_attr_defaults(op: str) -> dict:
  """The op's type attrs (type or list(type)) -> their default AttrValue (None when they have none)."""
  op_def = op_def_registry.get(op)
  if op_def is None:
    return {}
  return {a.name: (a.default_value if a.HasField("default_value") else None)
          for a in op_def.attr if a.type in ("type", "list(type)")}


def _types_of(value) -> list[int]:
  """An AttrValue of a type or list(type) attr -> the DataType enum values it holds."""
  if value is None:
    return []
  if value.WhichOneof("value") == "type":
    return [value.type]
  if value.WhichOneof("value") == "list":
    return list(value.list.type)
  return []


def _node_types(node) -> dict[str, list[int]]:
  """A NodeDef's type attrs (defaults filled in) -> their DataTypes."""
  found = {}
  for name, default in _type_attr_defaults(node.op).items():
    found[name] = _types_of(node.attr[name] if name in node.attr else default)
  return found


def _kernel_accepts(kernel, node, types: dict[str, list[int]]) -> bool:
  label = node.attr["_kernel"].s.decode() if "_kernel" in node.attr else ""
  if kernel.label != label:
    return False  # a labelled kernel serves only the nodes that ask for it by its label, and only those
  for constraint in kernel.constraint:
    if not constraint.HasField("allowed_values"):
      continue
    allowed = set(constraint.allowed_values.list.type)
    if not all(t in allowed for t in types.get(constraint.name, [])):
      return False
  return True


def _has_gpu_kernel(node, types) -> bool:
  return any(_kernel_accepts(k, node, types) for k in _gpu_kernels(node.op))


def _nodes(graph_def):
  """Every NodeDef of the graph and of every function in its library."""
  yield from graph_def.node
  for function in graph_def.library.function:
    yield from function.node_def


def _is_cpu(device: str) -> bool:
  return "CPU" in device.upper()


def ops_without_gpu_kernel(graph) -> list[Finding]:
  """`graph` (a tf.Graph, a GraphDef, or a concrete function) -> its ops with no GPU kernel for their dtypes,
  grouped by (op type, dtypes), most frequent first. Calls of the graph's own functions (their op type is the
  function's name) are not ops: their bodies are checked instead."""
  if hasattr(graph, "graph"):  # a ConcreteFunction
    graph = graph.graph
  graph_def = graph.as_graph_def() if isinstance(graph, tf.Graph) else graph
  functions = {f.signature.name for f in graph_def.library.function}
  groups: dict[tuple, list] = collections.defaultdict(list)
  for node in _nodes(graph_def):
    if node.op in functions:
      continue
    types = _node_types(node)
    if _has_gpu_kernel(node, types):
      continue
    key = (node.op, tuple((k, types_pb2.DataType.Name(t).removeprefix("DT_").lower())
                          for k in sorted(types) for t in types[k]))
    groups[key].append(node)
  findings = [Finding(op, dtypes, len(nodes), all(_is_cpu(n.device) for n in nodes), nodes[0].name)
              for (op, dtypes), nodes in groups.items()]
  return sorted(findings, key=lambda f: (-f.count, f.op, f.dtypes))


@contextlib.contextmanager
def tracing_as_on_gpu():
  """Within it, models trace as they would on a machine with a GPU, which this one need not have: Keras asks
  whether TensorFlow sees a GPU while tracing its LSTM and GRU layers, and on a GPU emits cuDNN's kernels
  (CudnnRNNV3) instead of its own loop. Yields TensorFlow's default strategy (one replica, no device scope) to
  build and trace under: the traced nodes carry only the devices the code itself pins them to, as on a GPU
  machine, whose placer puts the rest on the GPU. For tracing only: what is traced inside cannot run here."""
  rnn = importlib.import_module("keras.src.backend.tensorflow.rnn")
  with mock.patch.object(rnn, "_is_gpu_available", lambda: True):
    yield tf.distribute.get_strategy()


def xla_compiled_ops(graph) -> set[str]:
  """The op types XLA compiles in `graph` (as `ops_without_gpu_kernel` takes it): those in the bodies of its
  functions marked for XLA (`tf.function(jit_compile=True)`: the `_XlaMustCompile` attribute) and of every
  function they call."""
  if hasattr(graph, "graph"):
    graph = graph.graph
  graph_def = graph.as_graph_def() if isinstance(graph, tf.Graph) else graph
  functions = {f.signature.name: f for f in graph_def.library.function}

  def called(node) -> list[str]:
    names = [node.op] if node.op in functions else []
    for value in node.attr.values():  # f= of calls, body=/cond= of While, then_branch=/else_branch= of If
      names += [value.func.name] if value.func.name else []
      names += [f.name for f in value.list.func]
    return [n for n in names if n in functions]

  compiled = {name for name, f in functions.items() if f.attr["_XlaMustCompile"].b}
  compiled |= {n for node in graph_def.node if node.attr["_XlaMustCompile"].b for n in called(node)}
  pending, ops = list(compiled), set()
  while pending:
    for node in functions[pending.pop()].node_def:
      ops.add(node.op)
      for name in called(node):
        if name not in compiled:
          compiled.add(name)
          pending.append(name)
  return {op for op in ops if op not in functions}
