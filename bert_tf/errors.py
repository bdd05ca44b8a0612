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


class NotWritable(UserError):
  """An output's folder cannot be written: its permissions, or a read-only file system."""


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


# What TensorFlow's gs:// file system and google-cloud-storage say when they cannot reach Cloud Storage or get a
# token for it: libcurl's connection errors (after TensorFlow's retries), requests' and google-auth's.
_UNREACHABLE_MESSAGES = ("Error executing an HTTP request", "Could not connect to server", "Couldn't resolve host",
                         "Failed to connect to", "Connection refused", "Max retries exceeded", "Failed to resolve",
                         "Name or service not known", "authentication bearer token", "Could not find credentials",
                         "default credentials were not found")


def access_message(error: BaseException) -> str | None:
  """One line for a file operation the system refused (an OSError of EACCES, EPERM or EROFS, or TensorFlow's
  PermissionDeniedError, "<path>; Read-only file system") naming the path and the fix; None for another error."""
  import errno

  fix = "give a path you may write to, or change the permissions of its folder"
  if isinstance(error, OSError) and error.filename:
    if error.errno == errno.EROFS:
      return f"{error.filename}: not writable ({error.strerror}); {fix}"
    if error.errno in (errno.EACCES, errno.EPERM):  # a read or a write
      return f"{error.filename}: {error.strerror}; give a path you may use, or change its and its folder's permissions"
  if not type(error).__module__.startswith("tensorflow"):
    return None
  line = first_line(error)
  if type(error).__name__ == "PermissionDeniedError" or "Read-only file system" in line:
    head, _, reason = line.rpartition("; ")
    path = head.rsplit(": ", 1)[-1]  # "Failed to create a directory: <path>" or "<path>"
    return f"{path}: not writable ({reason}); {fix}" if head else f"{line}: not writable; {fix}"
  return None


def unreachable_message(error: BaseException, argv: list[str]) -> str | None:
  """One line for a gs:// path that could not be reached (TensorFlow's gs:// file system or google-cloud-storage
  could not connect, or got no credentials) naming the flag of `argv` that holds the path (or else the path, or else
  the first gs:// flag) and the likely causes; None for another error."""
  import re

  text = f"{type(error).__module__}.{type(error).__name__}: {error}"
  if not any(m in text for m in _UNREACHABLE_MESSAGES):
    return None
  flags = [a for a in argv if a.startswith("-") and "=gs://" in a]
  found = re.findall(r"gs://[^\s'\",;]+", text)
  if not found and not flags:
    return None
  subject = found[0] if found else flags[0]
  for flag in flags:
    value = flag.split("=", 1)[1]
    # The flag's path, a folder above it (a glob lists the bucket), or a file beside it (a temporary of its write).
    if any(path.startswith(value) or value.startswith(path) or path.rsplit("/", 1)[0] == value.rsplit("/", 1)[0]
           for path in found):
      subject = flag
      break
  return (f"{subject}: Cloud Storage could not be reached ({first_line(error)}); check the network, the credentials "
          "(gcloud auth application-default login, or GOOGLE_APPLICATION_CREDENTIALS) and, for an emulator, "
          "STORAGE_EMULATOR_HOST")
