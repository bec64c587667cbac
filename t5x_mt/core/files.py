"""Files that appear whole or not at all, on a local disk or an object store.

Every output a command writes (configs, metrics, eval records, vocabularies,
translations) goes through here: the bytes go to a temporary file in the target's folder,
are flushed to disk, and replace the target in one rename. A crash or kill mid-write
leaves the previous file (or none), never half a file. Outputs that are whole folders (a
cleaned corpus, an averaged run) are built beside their target and renamed into place
(`staged_folder`).

A gs://bucket/... location is on Google Cloud Storage, reached through `etils.epath`
(TensorFlow's gfile): there one object write is already whole, so it is written directly,
and a log that grows is rewritten whole since objects cannot be appended to. Local paths
stay `pathlib.Path`s and behave as above.
"""

from collections.abc import Iterator
import contextlib
import io
import json
import logging
import os
import pathlib
import shutil
import tempfile
from typing import BinaryIO

from etils import epath

from t5x_mt.core import interrupts
from t5x_mt.core.errors import UserError

# The repository's root: gin files and sample data are found relative to it from anywhere.
REPO_ROOT = pathlib.Path(__file__).resolve().parents[2]

# A local path, or a file or folder on an object store (`path`).
AnyPath = pathlib.Path | epath.Path
# The schemes whose reads and writes TensorFlow's gfile (epath's backend) brings.
_OBJECT_STORE_SCHEMES = ('gs://',)


def on_object_store(location: str | os.PathLike) -> bool:
  """True for a location on an object store (gs://)."""
  return os.fspath(location).startswith(_OBJECT_STORE_SCHEMES)


def expand(location: str | os.PathLike) -> str:
  """`location` with `~` and environment variables (`$SCRATCH`, `${RUN}`) expanded, as a
  shell would have: gin strings and `--flag=~/x` never pass through one, and a folder
  named `~` in the working directory is never what was meant."""
  location = os.path.expandvars(os.fspath(location))
  return location if on_object_store(location) else os.path.expanduser(location)


def path(location: str | os.PathLike) -> AnyPath:
  """`location` as a path that keeps its scheme: an epath for an object store, which
  reads and writes through the store's client (`pathlib` would make gs://bucket/run the
  local folder gs:/bucket/run), a `pathlib.Path` otherwise; `~` and variables expanded
  (`expand`)."""
  location = expand(location)
  if on_object_store(location):
    return epath.Path(location)
  if '://' in os.fspath(location):
    raise UserError(f'{os.fspath(location)}: unsupported scheme; a location is a local '
                    f'path or on an object store ({", ".join(_OBJECT_STORE_SCHEMES)})')
  return pathlib.Path(location)


def absolute(location: str | os.PathLike) -> AnyPath:
  """`location` made absolute (as Orbax wants it); an object-store URL already is."""
  location = path(location)
  return location if on_object_store(location) else location.absolute()


def write_bytes_atomically(target: str | os.PathLike, data: bytes) -> AnyPath:
  """Writes `data` to `target` (creating its folder) through a temporary file and a
  rename; on an object store, as one object write."""
  with atomic_writer(target) as f:
    f.write(data)
  return path(target)


@contextlib.contextmanager
def atomic_writer(target: str | os.PathLike) -> Iterator[BinaryIO]:
  """A binary file to write `target` through, piece by piece: it becomes `target` (its
  folder created) only when the block succeeds, and a failed block leaves nothing.

  Locally the pieces go to a temporary file beside `target`, renamed over it at the end;
  on an object store they are held and written as one object.
  """
  target = path(target)
  target.parent.mkdir(parents=True, exist_ok=True)
  if on_object_store(target):
    with io.BytesIO() as held:
      yield held
      target.write_bytes(held.getvalue())
    return
  temporary = None
  try:
    with interrupts.deferred():  # Ctrl-C stops nothing before the file has its name here.
      fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f'.{target.name}.',
                                       suffix='.tmp')
      f = os.fdopen(fd, 'wb')
    with f:
      yield f
      f.flush()
      os.fsync(f.fileno())
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 would hide outputs from others.
    os.replace(temporary, target)
  except BaseException:
    if temporary is not None:
      with interrupts.deferred():
        pathlib.Path(temporary).unlink(missing_ok=True)
    raise


def write_text_atomically(target: str | os.PathLike, text: str) -> AnyPath:
  """UTF-8 text version of write_bytes_atomically."""
  return write_bytes_atomically(target, text.encode('utf-8'))


def append_text(target: str | os.PathLike, text: str) -> None:
  """Adds `text` at the end of log `target` (created if missing). An object cannot be
  appended to: on an object store the log is rewritten whole, earlier records with it."""
  target = path(target)
  if on_object_store(target):
    earlier = target.read_text(encoding='utf-8') if target.exists() else ''
    write_text_atomically(target, earlier + text)
    return
  with target.open('a', encoding='utf-8') as f:
    f.write(text)


def remove_folder(folder: str | os.PathLike) -> None:
  """Removes `folder` and everything in it; a missing folder is no error."""
  folder = path(folder)
  if not on_object_store(folder):
    shutil.rmtree(folder, ignore_errors=True)
  elif folder.exists():
    folder.rmtree()


@contextlib.contextmanager
def removed_on_failure(folder: str | os.PathLike) -> Iterator[None]:
  """Removes `folder` if the block fails and the folder did not exist before it: a run
  that could not start leaves no half-made MODEL_DIR behind, and an existing one is
  never removed."""
  existed = path(folder).exists()
  try:
    yield
  except BaseException:
    if not existed:
      with interrupts.deferred():
        remove_folder(folder)
    raise


@contextlib.contextmanager
def staged_folder(final_path: str | os.PathLike) -> Iterator[AnyPath]:
  """An empty folder beside `final_path` to build a folder output in; it becomes
  `final_path` only when the block succeeds.

  A failure, Ctrl-C included, removes it and leaves `final_path` as it was. On success
  the previous `final_path` (if any) is renamed aside, the new folder renamed into place
  and the old one deleted, so a reader finds the old folder or the new one, never a mix;
  a Ctrl-C waits for these steps (`interrupts.deferred`). A staging folder left by a
  killed earlier attempt is cleared first.

  An object store cannot rename a folder: there the output is built at `final_path`
  itself, which a failure removes if it did not exist before.
  """
  if on_object_store(final_path):
    with removed_on_failure(final_path):
      yield path(final_path)
    return
  final = pathlib.Path(final_path)
  staging = final.parent / f'.{final.name}.partial'
  try:
    with interrupts.deferred():
      shutil.rmtree(staging, ignore_errors=True)
      staging.mkdir(parents=True)
    yield staging
  except BaseException:
    with interrupts.deferred():
      shutil.rmtree(staging, ignore_errors=True)
    raise
  with interrupts.deferred():
    _replace_folder(staging, final)


def _replace_folder(new: pathlib.Path, final: pathlib.Path) -> None:
  """Puts folder `new` at `final`, removing what was there."""
  if not final.exists():
    os.replace(new, final)
    return
  previous = final.parent / f'.{final.name}.previous'
  shutil.rmtree(previous, ignore_errors=True)
  os.replace(final, previous)
  os.replace(new, final)
  shutil.rmtree(previous)


def check_input(location: str | os.PathLike, flag: str, folder: bool = False) -> None:
  """Refuses an input (a file, or a `folder`) that is not there, naming `flag`.

  Checked before anything loads, so a typo costs a moment, not TensorFlow's start. A
  file may be any readable thing but a folder (a pipe: `--input=<(zcat f.gz)`). A location
  on an object store is left to whoever reads it: looking it up would start the store's
  client.
  """
  if on_object_store(expand(location)):
    return
  target = path(location)
  if folder and not target.is_dir():
    raise UserError(f'{flag}: {location} is not a directory')
  if not folder and not target.exists():
    raise UserError(f'{flag}: {location}: no such file')
  if not folder and target.is_dir():
    raise UserError(f'{flag}: {location} is a folder, not a file')


def check_output(output: str | os.PathLike, flag: str, folder: bool = False) -> None:
  """Refuses an output (a file, or a `folder` to create or add to) that cannot be written.

  Checked before any work, so a typo in the output costs nothing. Missing folders on the
  way are fine (writers create them) as long as they can be created.

  On an object store only the output's kind is checked, with one look-up that also fails
  for a missing bucket or credentials: write permission there belongs to the bucket, and
  probing it would leave an object behind, so a refused write shows at the first one.
  """
  target = path(output)
  if on_object_store(target):
    _check_kind(output, flag, folder, _looked_up(target, flag))
    return
  _check_kind(output, flag, folder, target.exists())
  where = target if folder and target.is_dir() else target.parent
  existing = next(p for p in (where, *where.parents) if p.exists())
  if not existing.is_dir():
    raise UserError(f'{flag}: cannot create {output}: {existing} is a file')
  try:
    with tempfile.TemporaryFile(dir=existing):
      pass
  except OSError as error:
    raise UserError(f'{flag}: cannot write {output}: {existing} is not writable '
                    f'({error.strerror})') from None


def check_new_folder(output: str | os.PathLike, flag: str) -> None:
  """Refuses a folder output that exists with something in it: a command that writes a
  whole folder (`staged_folder`) would replace it."""
  target = path(output)
  if target.exists() and any(target.iterdir()):
    raise UserError(f'{flag}: {output} exists and is not empty')


def _looked_up(target: epath.Path, flag: str) -> bool:
  """Whether object-store `target` exists; an error of the store (no such bucket, no
  credentials) is one line naming the flag."""
  try:
    return target.exists()
  except Exception as error:  # pylint: disable=broad-except
    first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
    raise UserError(f'{flag}: cannot reach {target}: {first_line}') from None


def _check_kind(output: str | os.PathLike, flag: str, folder: bool, exists: bool) -> None:
  """Refuses an existing file where a folder is wanted, or the other way round."""
  if exists and path(output).is_dir() != folder:
    raise UserError(f'{flag}: {output} is a {"file" if folder else "folder"}, '
                    f'not a {"folder" if folder else "file"}')


def read_json_lines(log: str | os.PathLike) -> list[dict]:
  """The records of a JSON-lines log that a run appends to (metrics.jsonl).

  A last line cut short (the run was killed while appending it) is dropped with a
  warning; a damaged line before it is a UserError naming the line.
  """
  lines = path(log).read_text(encoding='utf-8').splitlines()
  records = []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError:
      if number < len(lines):
        raise UserError(f'{log}:{number}: not a JSON record; repair or remove the line'
                        ) from None
      logging.warning('%s:%d: dropping an incomplete last record (the run was stopped '
                      'while writing it)', log, number)
  return records
