"""Shared plumbing of the `scripts/`: logging set-up and turning user errors into a message and exit code 1."""

from __future__ import annotations

import logging
import os
import signal
import sys
from typing import Callable

# Exceptions that mean "the input or the flags are wrong": shown as one line, without a traceback.
USER_ERRORS = (FileNotFoundError, NotADirectoryError, PermissionError, ValueError, UnicodeDecodeError)


def quiet_tensorflow() -> None:
  """Keeps TensorFlow's C++ start-up chatter out of the progress display."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def run(main: Callable[[list[str]], None]) -> None:
  """`absl.app.run(main)`, with user errors reported as `error: ...` and exit status 1, and SIGTERM turned into
  an exception so that `finally` blocks remove temporary outputs."""
  from absl import app

  quiet_tensorflow()

  def on_sigterm(signum, frame):
    raise SystemExit(128 + signum)

  signal.signal(signal.SIGTERM, on_sigterm)

  def wrapped(argv):
    logging.getLogger("tensorflow").setLevel(logging.ERROR)
    try:
      main(argv)
    except USER_ERRORS as e:
      print(f"error: {e}", file=sys.stderr)
      sys.exit(1)

  app.run(wrapped)
