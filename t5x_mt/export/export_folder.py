"""The folder an export writes, and what it may replace there.

An export is built beside `--output_dir` and replaces the whole folder
(`files.staged_folder`). So that it never deletes a user's own files, each export lists
what it wrote in MANIFEST, and a later export writes over a folder only when it holds
nothing but MANIFEST and what MANIFEST lists (or nothing at all). Anything else is
refused before any work, and nothing is written or deleted. Every format of
`launch/export.py` writes its folder through here.
"""

import json
import os

from t5x_mt.core import files
from t5x_mt.core.errors import UserError

MANIFEST = 'export_manifest.json'
# The most names a refusal lists before it counts the rest.
_NAMES_LISTED = 4


def check_output_dir(output_dir: str) -> None:
  """Refuses an output an export cannot write (an object store: engines write a local
  folder) or one holding anything an earlier export did not write."""
  if files.on_object_store(output_dir):
    raise UserError(f'--output_dir: {output_dir}: an export is written to a local folder')
  files.check_output(output_dir, '--output_dir', folder=True)
  if not os.path.isdir(output_dir):
    return
  foreign = sorted(set(os.listdir(output_dir)) - _written_by_export(output_dir))
  if foreign:
    raise UserError(f'--output_dir: {output_dir} holds {_listing(foreign)}, which no '
                    f'earlier export listed in its {MANIFEST}; an export replaces the '
                    'whole folder: give a new or empty one')


def write_manifest(staging: files.AnyPath) -> None:
  """Lists every file of the finished export in `staging` in its MANIFEST, so that the
  next export into the same folder may replace them."""
  names = sorted(entry.name for entry in staging.iterdir())
  files.write_text_atomically(staging / MANIFEST,
                              json.dumps({'files': names}, indent=2) + '\n')


def _written_by_export(output_dir: str) -> set[str]:
  """The names an earlier export in `output_dir` wrote (MANIFEST's and itself), none
  where it has no readable MANIFEST."""
  try:
    with open(os.path.join(output_dir, MANIFEST), encoding='utf-8') as manifest:
      names = json.load(manifest)['files']
  except (OSError, ValueError, KeyError, TypeError):
    return set()
  if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
    return set()
  return {MANIFEST, *names}


def _listing(names: list[str]) -> str:
  """`names` for one line: the first few, then how many more."""
  shown = ', '.join(names[:_NAMES_LISTED])
  more = len(names) - _NAMES_LISTED
  return f'{shown} and {more} more' if more > 0 else shown
