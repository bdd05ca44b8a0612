"""Errors that mean "the user must change something": the scripts print them as one line and exit 1.

No TensorFlow here: `bert_tf.cli` imports this before TensorFlow loads.
"""

from __future__ import annotations


class UserError(Exception):
  """A problem the user can fix (a flag, a file, free disk space); the message says what and how."""


class OutputDirInUse(UserError):
  """Another live run holds the output directory's lock."""


class DiskFull(UserError):
  """A write failed for lack of space (or a file-size limit); partial files were removed."""


# Messages of the OS errors behind a failed write for lack of space: ENOSPC, EFBIG (a file-size limit), EDQUOT.
DISK_FULL_MESSAGES = ("No space left on device", "File too large", "Disk quota exceeded")


def first_line(error: BaseException) -> str:
  """The first non-blank line of `error`'s message, without the "{{function_node ...}} " that TensorFlow's op
  errors open with (it says nothing to a user); the error's class name when the message is empty."""
  import re

  text = getattr(error, "message", None) or str(error)
  line = next((line for line in text.splitlines() if line.strip()), type(error).__name__)
  return re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line.strip())


def is_disk_full(error: BaseException) -> bool:
  """True when `error` (an OSError or a TensorFlow OpError) says the disk or a size limit is full."""
  import errno

  if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT):
    return True
  text = str(error)
  return any(m in text for m in DISK_FULL_MESSAGES)
