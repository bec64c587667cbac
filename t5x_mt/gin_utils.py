"""Gin at the launch layer: files, `--gin.NAME=VALUE` overrides, errors users can act on.

Gin files are found relative to the working directory and to the repository root, so
`--gin_file=gin/runs/demo.gin` works from anywhere and `include 'gin/models/tiny.gin'`
inside a run file resolves the same way.
"""

from collections.abc import Iterator, Sequence
import contextlib
import pathlib
import re
import tokenize
import traceback

import gin

from t5x_mt import files
from t5x_mt.errors import UserError

REPO_ROOT = pathlib.Path(__file__).resolve().parent.parent
# A run's config.gin on an object store (gs://) is read as the run's other files are.
gin.config.register_file_reader(lambda name: files.path(name).open(), files.on_object_store)


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


def check_gin_files(gin_files: Sequence[str]) -> None:
  """A UserError naming the first --gin_file found neither here nor in the repository."""
  for gin_file in gin_files:
    if not files.path(gin_file).exists() and not (REPO_ROOT / gin_file).exists():
      raise UserError(f'--gin_file: {gin_file} not found')


def parse_gin(gin_files: Sequence[str], bindings: Sequence[str],
              skip_unknown: bool = False) -> None:
  """Parses gin files, then bindings; a mistake becomes one UserError naming the file and
  line, or the binding, where it is."""
  check_gin_files(gin_files)
  gin.add_config_file_search_path(str(REPO_ROOT))
  for gin_file in gin_files:
    with _mistakes_named(gin_file, binding=None):
      gin.parse_config_file(gin_file, skip_unknown)
  for binding in bindings:
    with _mistakes_named(None, binding):
      gin.parse_config(binding, skip_unknown)


# What gin raises for a mistake in a file or binding (an ImportError only for the module
# an `import` line names).
_GIN_MISTAKES = (ValueError, KeyError, NameError, SyntaxError, OSError, ModuleNotFoundError,
                 tokenize.TokenError)
# Where gin says the mistake is, in the lines it appends to the message.
_GIN_LOCATION = re.compile(r'In file "(?P<file>[^"]*)", line (?P<line>\d+)')


@contextlib.contextmanager
def _mistakes_named(gin_file: str | None, binding: str | None) -> Iterator[None]:
  """Turns gin's error for a mistake in `gin_file` (or `binding`) into one UserError."""
  try:
    yield
  except _GIN_MISTAKES as error:
    raise UserError(f'gin: {_describe(error, gin_file, binding)}') from None


def _describe(error: Exception, gin_file: str | None, binding: str | None) -> str:
  """`<where>: <what>`: the file and line (or the binding) at fault, and gin's complaint."""
  if isinstance(error, tokenize.TokenError):  # Gin does not say which file it was reading.
    what = 'ends inside a bracket or quote left open'
    in_file = _innermost_file(error, gin_file) if binding is None else None
  elif isinstance(error, SyntaxError):  # From gin's parser, with the location in its fields.
    what = error.msg + _quoting_hint(error, binding)
    in_file = error.filename and f'{error.filename}, line {error.lineno}'
  else:
    what, *details = str(error).strip().splitlines() or [type(error).__name__]
    location = _GIN_LOCATION.search('\n'.join(details))
    in_file = location and f'{location["file"]}, line {location["line"]}'
  where = f'binding {binding!r}' if binding is not None else in_file or gin_file
  return f'{where}: {what}'


def _quoting_hint(error: SyntaxError, binding: str | None) -> str:
  """For an unquoted value gin cannot parse, how to quote it (a string, most likely)."""
  name, sep, value = ((error.text or '') if binding is None else binding).partition('=')
  name, value = name.strip(), value.strip()
  if not error.msg.startswith('Unable to parse value') or not sep or value[:1] in '\'"':
    return ''
  if binding is None:
    return f" (a string needs quotes: {name} = '{value}')"
  return f' (a string needs quotes: --gin.{name}="\'{value}\'")'


def _innermost_file(error: Exception, default: str) -> str:
  """The gin file (perhaps an included one) that was being read when `error` was raised."""
  files = [frame.f_locals['config_file'] for frame, _ in traceback.walk_tb(error.__traceback__)
           if frame.f_code is gin.parse_config_file.__code__]
  return files[-1] if files else default
