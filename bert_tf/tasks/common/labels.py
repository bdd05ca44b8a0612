"""A label set in a stable order: what a classifier's and a tagger's label ids are, when the user gives no list."""

from __future__ import annotations

import re
from typing import Sequence

_INTEGER = re.compile(r"[+-]?\d+")


def sorted_labels(labels: Sequence[str]) -> tuple[str, ...]:
  """The distinct labels, sorted: numerically when every one is an integer, else as strings."""
  distinct = set(labels)
  if all(_INTEGER.fullmatch(label) for label in distinct):
    return tuple(sorted(distinct, key=lambda label: (int(label), label)))
  return tuple(sorted(distinct))
