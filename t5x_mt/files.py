"""Files that appear whole or not at all.

Every output a command writes (configs, metrics, eval records, vocabularies,
translations) goes through here: the bytes go to a temporary file in the target's folder,
are flushed to disk, and replace the target in one rename. A crash or kill mid-write
leaves the previous file (or none), never half a file. Outputs that are whole folders (a
cleaned corpus, an averaged run) are built beside their target and renamed into place
(`staged_folder`).
"""

from collections.abc import Iterator
import contextlib
import json
import logging
import os
import pathlib
import shutil
import tempfile

from t5x_mt.errors import UserError


def write_bytes_atomically(path: str | os.PathLike, data: bytes) -> pathlib.Path:
  """Writes `data` to `path` (creating its folder) through a temporary file and a rename."""
  path = pathlib.Path(path)
  path.parent.mkdir(parents=True, exist_ok=True)
  fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f'.{path.name}.', suffix='.tmp')
  try:
    with os.fdopen(fd, 'wb') as f:
      f.write(data)
      f.flush()
      os.fsync(f.fileno())
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(temporary, 0o666 & ~umask)  # mkstemp's 0600 would hide outputs from others.
    os.replace(temporary, path)
  except BaseException:
    pathlib.Path(temporary).unlink(missing_ok=True)
    raise
  return path


def write_text_atomically(path: str | os.PathLike, text: str) -> pathlib.Path:
  """UTF-8 text version of write_bytes_atomically."""
  return write_bytes_atomically(path, text.encode('utf-8'))


@contextlib.contextmanager
def removed_on_failure(folder: str | os.PathLike) -> Iterator[None]:
  """Removes `folder` if the block fails and the folder did not exist before it: a run
  that could not start leaves no half-made MODEL_DIR behind, and an existing one is
  never removed."""
  folder = pathlib.Path(folder)
  existed = folder.exists()
  try:
    yield
  except BaseException:
    if not existed:
      shutil.rmtree(folder, ignore_errors=True)
    raise


@contextlib.contextmanager
def staged_folder(final_path: str | os.PathLike) -> Iterator[pathlib.Path]:
  """An empty folder beside `final_path` to build a folder output in; it becomes
  `final_path` only when the block succeeds.

  A failure removes it and leaves `final_path` as it was. On success the previous
  `final_path` (if any) is renamed aside, the new folder renamed into place and the old
  one deleted, so a reader finds the old folder or the new one, never a mix. A staging
  folder left by a killed earlier attempt is cleared first.
  """
  final = pathlib.Path(final_path)
  staging = final.parent / f'.{final.name}.partial'
  shutil.rmtree(staging, ignore_errors=True)
  staging.mkdir(parents=True)
  try:
    yield staging
  except BaseException:
    shutil.rmtree(staging, ignore_errors=True)
    raise
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


def check_output(path: str | os.PathLike, flag: str, folder: bool = False) -> None:
  """Refuses an output (a file, or a `folder` to create or add to) that cannot be written.

  Checked before any work, so a typo in the output costs nothing. Missing folders on the
  way are fine (writers create them) as long as they can be created.
  """
  target = pathlib.Path(path)
  if target.exists() and target.is_dir() != folder:
    raise UserError(f'{flag}: {path} is a {"file" if folder else "folder"}, '
                    f'not a {"folder" if folder else "file"}')
  where = target if folder and target.is_dir() else target.parent
  existing = next(p for p in (where, *where.parents) if p.exists())
  if not existing.is_dir():
    raise UserError(f'{flag}: cannot create {path}: {existing} is a file')
  try:
    with tempfile.TemporaryFile(dir=existing):
      pass
  except OSError as error:
    raise UserError(f'{flag}: cannot write {path}: {existing} is not writable '
                    f'({error.strerror})') from None


def read_json_lines(path: str | os.PathLike) -> list[dict]:
  """The records of a JSON-lines log that a run appends to (metrics.jsonl).

  A last line cut short (the run was killed while appending it) is dropped with a
  warning; a damaged line before it is a UserError naming the line.
  """
  lines = pathlib.Path(path).read_text(encoding='utf-8').splitlines()
  records = []
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      records.append(json.loads(line))
    except json.JSONDecodeError:
      if number < len(lines):
        raise UserError(f'{path}:{number}: not a JSON record; repair or remove the line'
                        ) from None
      logging.warning('%s:%d: dropping an incomplete last record (the run was stopped '
                      'while writing it)', path, number)
  return records
