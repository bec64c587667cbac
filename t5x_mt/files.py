"""Files that appear whole or not at all.

Every output a command writes (configs, metrics, eval records, vocabularies,
translations) goes through here: the bytes go to a temporary file in the target's folder,
are flushed to disk, and replace the target in one rename. A crash or kill mid-write
leaves the previous file (or none), never half a file.
"""

import os
import pathlib
import tempfile


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
