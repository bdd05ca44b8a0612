"""File helpers shared by every reader and writer: local paths and `gs://` (or any `tf.io.gfile` scheme).

Local paths go through Python's own file functions; a path with a scheme (`gs://bucket/...`) goes through
`tf.io.gfile`. TensorFlow is therefore imported only when a remote path is used, which keeps start-up of
the data scripts and their worker processes short.

Outputs are written under a temporary name and renamed into place, so a run that fails or is killed never
leaves a file that looks complete. The temporary names the writing process, so that the next writer in that folder
removes what a killed one left (`temp_path_for`).
"""

from __future__ import annotations

import fnmatch
import glob as _glob
import hashlib
import logging
import os
import posixpath
import random
import re
import shutil
import socket
import uuid
import zlib
from typing import Mapping, Sequence

log = logging.getLogger(__name__)


def cache_dir() -> str:
  """Where bert_tf keeps what it can compute again (converted released models, TensorFlow's core op list):
  $BERT_TF_CACHE, else $XDG_CACHE_HOME/bert_tf, else ~/.cache/bert_tf."""
  if os.environ.get("BERT_TF_CACHE"):
    return os.environ["BERT_TF_CACHE"]
  return os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "bert_tf")


def is_remote(path: str) -> bool:
  return "://" in path


def absolute(path: str) -> str:
  """`path` made absolute against the working directory (local paths); remote paths unchanged.

  Run directories are made absolute once, up front: TensorFlow's checkpoint state file lists paths that
  `tf.train.get_checkpoint_state` joins onto the directory, and a relative directory joined twice points
  nowhere, which made a rerun start again from step 0."""
  return path if is_remote(path) else os.path.abspath(path)


def sibling(path: str, name: str) -> str:
  """The path `name` beside `path` (in its parent folder): ("out/mrpc", "features") -> "out/features";
  ("mrpc", ...) -> "features"; ("gs://b/mrpc", ...) -> "gs://b/features"; a bucket's root keeps it inside."""
  path = path.rstrip("/")
  if is_remote(path):
    scheme, rest = path.split("://", 1)
    return f"{scheme}://{rest.rsplit('/', 1)[0] if '/' in rest else rest}/{name}"
  return os.path.join(os.path.dirname(path), name)


def _gfile():
  import tensorflow as tf

  return tf.io.gfile


def exists(path: str) -> bool:
  return _gfile().exists(path) if is_remote(path) else os.path.exists(path)


def isdir(path: str) -> bool:
  return _gfile().isdir(path) if is_remote(path) else os.path.isdir(path)


def listdir(path: str) -> list[str]:
  """The names in folder `path`, sorted; gs:// lists sub-folders with a trailing "/", dropped here."""
  if is_remote(path):
    return sorted(name.rstrip("/") for name in _gfile().listdir(path))
  return sorted(os.listdir(path))


def join(directory: str, *names: str) -> str:
  """os.path.join locally; "/" for remote paths, whatever the platform's separator."""
  if is_remote(directory):
    return "/".join([directory.rstrip("/"), *names])
  return os.path.join(directory, *names)


def open_file(path: str, mode: str = "rb"):
  """A file object for `path`: Python's `open` locally, `tf.io.gfile.GFile` for remote paths."""
  if is_remote(path):
    return _gfile().GFile(path, mode)
  return open(path, mode) if "b" in mode else open(path, mode, encoding="utf-8")


def size(path: str) -> int:
  return _gfile().stat(path).length if is_remote(path) else os.path.getsize(path)


def fingerprint(path: str, whole_up_to: int | None = None) -> str:
  """`<size>:<SHA-256 hex>` of the file's bytes: what names a file's content (a changed data or vocab file gets
  new features; a run records its inputs by it).

  Files larger than `whole_up_to` bytes (None: no limit) are hashed by their size, first and last MiB:
  `<size>:sampled:<hex>`. For pretraining shards of gigabytes, where reading every byte at each start would
  cost minutes; a file rewritten with other content changes its size or its ends in practice."""
  digest, length = hashlib.sha256(), size(path)
  with open_file(path, "rb") as f:
    if whole_up_to is None or length <= whole_up_to:
      for block in iter(lambda: f.read(1 << 20), b""):
        digest.update(block)
      return f"{length}:{digest.hexdigest()}"
    digest.update(f.read(1 << 20))
    f.seek(max(length - (1 << 20), 0))
    digest.update(f.read(1 << 20))
  return f"{length}:sampled:{digest.hexdigest()}"


def remove_tree(path: str) -> None:
  """Removes the file or folder `path` with everything under it (local or remote)."""
  if is_remote(path):
    if _gfile().isdir(path):
      _gfile().rmtree(path)
    else:
      _gfile().remove(path)
  elif os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path)
  else:
    os.remove(path)


def makedirs_for(path: str) -> None:
  head = os.path.dirname(path)
  if head:
    if is_remote(head):
      _gfile().makedirs(head)
    else:
      os.makedirs(head, exist_ok=True)


def remove(path: str) -> None:
  if is_remote(path):
    _gfile().remove(path)
  else:
    os.remove(path)


def copy(source: str, destination: str) -> None:
  if is_remote(source) or is_remote(destination):
    _gfile().copy(source, destination, overwrite=True)
  else:
    shutil.copyfile(source, destination)


def create_new(path: str, text: str) -> bool:
  """Writes `text` to `path` only if nothing is there: True if this call created it, False if it existed.

  Exclusive where the store allows it: locally O_CREAT | O_EXCL; on gs:// one upload with the precondition
  `ifGenerationMatch=0`, which Cloud Storage checks atomically (through google-cloud-storage: tf.io.gfile has no
  conditional write). Other schemes check, then write, so two callers at the same moment could both succeed."""
  if path.startswith("gs://"):
    from google.api_core import exceptions
    from google.cloud import storage

    bucket, _, name = path[len("gs://"):].partition("/")
    # project=None: object calls need none; credentials are the same Application Default Credentials that
    # TensorFlow's gs:// uses (or none at all with STORAGE_EMULATOR_HOST).
    blob = storage.Client(project=None).bucket(bucket).blob(name)
    # The upload draws its multipart boundary from Python's global `random`. Training seeds that stream first
    # (keras.utils.set_random_seed) and takes its lock after, so the draw would change the run's weights.
    state = random.getstate()
    try:
      blob.upload_from_string(text.encode("utf-8"), content_type="application/json", if_generation_match=0)
    except exceptions.PreconditionFailed:
      return False
    finally:
      random.setstate(state)
    return True
  if is_remote(path):
    if exists(path):
      return False
    with open_file(path, "w") as f:
      f.write(text)
    return True
  try:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
  except FileExistsError:
    return False
  with os.fdopen(fd, "w", encoding="utf-8") as f:
    f.write(text)
  return True


# The names `temp_path_for` gives (and ones without the owner tag), for a sweep by a process holding the folder's lock.
TEMP_NAME = re.compile(r"^\..+\.tmp-[0-9a-f]{8}(\.owner-[0-9a-f]{8}-\d+)?$")


def temp_path_for(path: str) -> str:
  """A hidden sibling of `path` that `commit` later renames onto it, unique per call and named after this process:
  `.<name>.tmp-<8 hex>.owner-<machine>-<pid>` (`owner_tag`). Locally it first removes what writers that no longer
  run left in that folder (`remove_dead_temporaries`): every command that writes somewhere cleans up there after
  the runs that were killed before it."""
  head, tail = os.path.split(path)
  if not is_remote(path):
    remove_dead_temporaries(head or ".")
  return os.path.join(head, f".{tail}.tmp-{uuid.uuid4().hex[:8]}.{owner_tag()}")


def commit(temp: str, path: str) -> None:
  if is_remote(path):
    _gfile().rename(temp, path, overwrite=True)
  else:
    os.replace(temp, path)


def discard(temp: str) -> None:
  if exists(temp):
    remove(temp)


def replace_dir(build, final: str) -> None:
  """Writes a directory with `build(path)` under a temporary name, then renames it into place (local paths);
  object stores have no directory rename, so there it is written in place."""
  gfile = _gfile()
  if "://" in final:
    if gfile.exists(final):
      gfile.rmtree(final)
    build(final)
    return
  temp = temp_path_for(final)
  try:
    build(temp)
    if gfile.exists(final):
      gfile.rmtree(final)
    gfile.rename(temp, final)
  finally:
    if gfile.exists(temp):
      gfile.rmtree(temp)


def write_text_atomic(path: str, text: str) -> None:
  makedirs_for(path)
  temp = temp_path_for(path)
  try:
    with open_file(temp, "w") as f:
      f.write(text)
    commit(temp, path)
  except BaseException:
    discard(temp)
    raise


def glob(pattern: str) -> list[str]:
  return sorted(_gfile().glob(pattern) if is_remote(pattern) else _glob.glob(pattern))


def expand_globs(patterns: str, what: str = "--input_file") -> list[str]:
  """Comma-separated globs -> the sorted files each matches, in pattern order.

  Raises FileNotFoundError naming the pattern that matched nothing.
  """
  files: list[str] = []
  for pattern in (p.strip() for p in patterns.split(",")):
    if not pattern:
      continue
    matched = glob(pattern)
    if not matched:
      raise FileNotFoundError(f"{what}: {pattern!r} matches no file")
    files.extend(matched)
  if not files:
    raise FileNotFoundError(f"{what} is empty; give one or more comma-separated files or globs")
  return files


# -- Outputs that would destroy an input -----------------------------------------------------------------------
# Every script checks its outputs against its inputs before any work: a rename onto an input (or a folder that
# held one replaced or emptied) would leave a command that exits 0 and a corpus, vocabulary or model that is gone.


def resolved(path: str) -> str:
  """The one spelling of the file `path` names: locally os.path.realpath (links, `..`, relative and absolute
  spellings); a remote URL with its scheme in lower case and `.`, `..` and repeated `/` taken out."""
  if is_remote(path):
    scheme, rest = path.split("://", 1)
    return f"{scheme.lower()}://{posixpath.normpath('/' + rest).lstrip('/')}"
  return os.path.realpath(path)


def _within(path: str, folder: str) -> bool:
  """Whether resolved `path` is resolved `folder` or lies under it."""
  return path == folder or path.startswith(folder.rstrip("/") + "/")


def _named(value: str | Sequence[str] | None) -> list[tuple[str, str]]:
  """(as given, resolved) of each path an input flag names: a string is comma-separated files or globs (as
  --input_file takes them), a sequence holds one path or glob each. A local glob names the files it matches; a
  remote one stays a pattern (listing a bucket would load TensorFlow), matched by `_matches`. Released names
  (hf:<id>, keras_hub:<preset>) name no local file."""
  items = value.split(",") if isinstance(value, str) else list(value or ())
  named = []
  for item in (i.strip() for i in items if i):
    if not item or item.startswith(("hf:", "keras_hub:")):
      continue
    if _glob.has_magic(item) and not is_remote(item):
      named.extend((match, resolved(match)) for match in sorted(_glob.glob(item)))
    else:
      named.append((item, resolved(item)))
  return named


def _matches(pattern: str, path: str) -> bool:
  """Whether resolved `path` is, or (a remote glob) is matched by, resolved `pattern`; a remote `*` stays within
  one folder, as tf.io.gfile.glob's does."""
  if pattern == path:
    return True
  if not (is_remote(pattern) and _glob.has_magic(pattern)):
    return False
  parts, names = pattern.split("/"), path.split("/")
  return len(parts) == len(names) and all(fnmatch.fnmatchcase(n, p) for n, p in zip(names, parts))


def find_input(output: str, inputs: Mapping[str, str | Sequence[str] | None],
               inside: bool = False) -> tuple[str, str, bool] | None:
  """The first of `inputs` that `output` is or, with `inside`, that lies in the folder `output`: (its flag, its
  path as given, whether it is `output` itself); None when there is none.

  `inputs`: each input flag (without "--") -> its value: comma-separated files or globs, or a sequence of paths
  or globs (what a flag stands for: a checkpoint prefix's files); None skipped. Paths compare as `resolved`
  spells them, so a link, a `..` or a relative spelling of an input is that input."""
  target = resolved(output)
  for flag, value in inputs.items():
    for given, path in _named(value):
      if _matches(path, target):
        return flag, given, True
      if inside and _within(path, target):
        return flag, given, False
  return None


def check_not_input(output_flag: str, output: str | None, inputs: Mapping[str, str | Sequence[str] | None],
                    replaces: str | None = None) -> None:
  """ValueError, in one line naming both flags, when writing --`output_flag`=`output` (None or "": nothing to
  check) would destroy one of `inputs` (as `find_input` takes them): `output` is an input, or, for an output
  folder that `replaces` says what replaces or empties whole ("--overwrite_output_dir"), an input lies in it."""
  found = find_input(output, inputs, inside=bool(replaces)) if output else None
  if found is None:
    return
  flag, given, same = found
  if not replaces:
    raise ValueError(f"--{output_flag}={output} is --{flag}'s {given}: writing it would destroy the input; "
                     f"give another --{output_flag}")
  raise ValueError(f"--{output_flag}={output} {'is' if same else 'holds'} --{flag}'s {given}, which {replaces} "
                   f"would remove; give another --{output_flag}")


def check_output_file(flag: str, path: str | None) -> None:
  """Before the work: IsADirectoryError when local `path` (--`flag`'s, without "--") is a folder,
  NotADirectoryError when a folder on its way is a file, and NotWritable when its folder cannot be written
  (`check_writable`), where the rename at the end would fail after all the work. Of a remote path only that its
  store can be reached is checked."""
  if not path:
    return
  if is_remote(path):
    check_writable(flag, path, posixpath.dirname(path))
    return
  if os.path.isdir(path):
    raise IsADirectoryError(f"--{flag}={path} is a folder; give the name of a file to write (in it or elsewhere)")
  folder = os.path.dirname(os.path.abspath(path))
  while not os.path.isdir(folder):
    if os.path.exists(folder):
      raise NotADirectoryError(f"--{flag}={path} lies under {folder}, which is a file; give a path in a folder")
    folder = os.path.dirname(folder)
  check_writable(flag, path, folder)


def check_writable(flag: str, path: str | None, folder: str | None = None) -> None:
  """Before the work: NotWritable, one line naming --`flag`=`path`, when the folder the output is written in
  (`folder`; default `path`, an output folder), or the nearest folder above it that exists (where it would be made),
  cannot be written: its permissions, a read-only file system. Tried by making a file there and removing it, so
  that what the system decides is what counts (root, access control lists, a read-only mount). A remote path is
  looked up instead, so that a store that cannot be reached fails here rather than after the work."""
  import errno
  import tempfile

  from bert_tf.errors import NotWritable

  if not path:
    return
  folder = folder or path
  if is_remote(folder):
    exists(folder)  # cli.run says what an unreachable store raises in one line
    return
  folder = os.path.abspath(folder)
  while not os.path.isdir(folder) and os.path.dirname(folder) != folder:
    folder = os.path.dirname(folder)
  try:
    handle, probe = tempfile.mkstemp(prefix=".bert_tf-write-test-", dir=folder)
  except OSError as e:
    if e.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
      raise
    where = "" if folder == os.path.abspath(path) else f"{folder} "
    raise NotWritable(f"--{flag}={path}: {where}is not writable ({e.strerror}); give a folder you may write to, or "
                      "change its permissions") from None
  os.close(handle)
  os.remove(probe)


# -- Leftovers of killed writers -------------------------------------------------------------------------------


def process_start(pid: int) -> int | None:
  """The process's start time in clock ticks since boot (field 22 of /proc/<pid>/stat), or None."""
  try:
    with open(f"/proc/{pid}/stat", "rb") as f:
      stat = f.read().decode("utf-8", "replace")
  except OSError:
    return None
  # The command name (field 2) is in parentheses and may hold spaces: split after its closing one.
  return int(stat.rsplit(")", 1)[1].split()[19])


def process_alive(pid: int, start: int | None) -> bool:
  """Whether the process `pid` of this host runs, and is the one that started at `start` (`process_start`; None:
  any process of that pid): a reused pid has another start time."""
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:  # Another user's live process.
    return True
  return start is None or process_start(pid) in (None, start)


_OWNER = re.compile(r"owner-([0-9a-f]{8})-(\d+)")


def _machine() -> str:
  """The first part of an owner tag: a hash of the host name and the pid namespace, since two containers of one
  host that share a folder each number their processes on their own."""
  try:
    namespace = os.readlink("/proc/self/ns/pid")
  except OSError:  # not Linux: the host name alone
    namespace = ""
  return f"{zlib.crc32(f'{socket.gethostname()} {namespace}'.encode()):08x}"


def owner_tag() -> str:
  """`owner-<machine>-<pid>`, for the name of a temporary file or folder this process writes, so that a later
  run can remove it once this process is gone (`remove_dead_leftovers`)."""
  return f"owner-{_machine()}-{os.getpid()}"


def remove_dead_leftovers(directory: str, prefix: str) -> list[str]:
  """Removes the entries of local `directory` named `prefix`... with an `owner_tag` of a process of this machine
  that is no longer running (killed mid-write); returns them. Other machines' and live processes' entries stay, and
  so does one this user may not remove (another user's, in a shared folder such as /tmp)."""
  if not os.path.isdir(directory):
    return []
  machine = _machine()
  removed = []
  for name in sorted(os.listdir(directory)):
    found = _OWNER.search(name)
    if not name.startswith(prefix) or not found or found.group(1) != machine or \
        process_alive(int(found.group(2)), None):
      continue
    path = os.path.join(directory, name)
    try:
      if os.path.isdir(path):
        shutil.rmtree(path)
      else:
        os.remove(path)
    except (FileNotFoundError, PermissionError):  # another run removed it first; another user's
      continue
    removed.append(path)
  return removed


def remove_dead_temporaries(folder: str) -> list[str]:
  """Removes the temporaries (`temp_path_for`'s names, and the files named after one) in local `folder` that a
  process of this machine left and that no longer runs (a killed run's), logging one line for each; returns them.
  Those of every output, not one: feature files are named by their settings, so the rerun that would write the same
  name again may never come. Another machine's temporaries, and those of a process that runs, stay."""
  removed = remove_dead_leftovers(folder, ".")
  for path in removed:
    pid = _OWNER.search(os.path.basename(path)).group(2)
    log.warning("removed %s, left by process %s that is no longer running", path, pid)
  return removed
