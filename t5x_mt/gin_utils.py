"""Gin at the launch layer: files, `--gin.NAME=VALUE` overrides, errors users can act on.

Gin files are found relative to the working directory and to the repository root, so
`--gin_file=gin/runs/demo.gin` works from anywhere and `include 'gin/models/tiny.gin'`
inside a run file resolves the same way.
"""

from collections.abc import Sequence
import pathlib

import gin

from t5x_mt.errors import UserError

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent


def split_gin_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """Separates `--gin.NAME=VALUE` arguments (as gin bindings) from the others."""
  bindings, rest = [], []
  for arg in argv:
    if arg.startswith('--gin.'):
      name, sep, value = arg[len('--gin.'):].partition('=')
      if not sep:
        raise UserError(f'{arg}: expected --gin.NAME=VALUE')
      bindings.append(f'{name} = {value}')
    else:
      rest.append(arg)
  return bindings, rest


def parse_gin(gin_files: Sequence[str], bindings: Sequence[str],
              skip_unknown: bool = False) -> None:
  """Parses gin files, then bindings; a typo becomes one UserError naming file and line."""
  gin.add_config_file_search_path(str(REPO_ROOT))
  for gin_file in gin_files:
    if not pathlib.Path(gin_file).exists() and not (REPO_ROOT / gin_file).exists():
      raise UserError(f'--gin_file: {gin_file} not found')
  try:
    gin.parse_config_files_and_bindings(list(gin_files), list(bindings),
                                        skip_unknown=skip_unknown, finalize_config=False)
  except (ValueError, KeyError, NameError, SyntaxError, IOError) as error:
    raise UserError(f'gin: {_first_line(error)}') from None


def _first_line(error: Exception) -> str:
  text = str(error).strip()
  lines = [line for line in text.splitlines() if line.strip()]
  return ' '.join(lines[:2]) if lines else type(error).__name__
