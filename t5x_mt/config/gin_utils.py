"""Gin at the launch layer: files, `--gin.NAME=VALUE` overrides, errors users can act on.

Gin files are found relative to the working directory and to the repository root, so
`--gin_file=gin/runs/demo.gin` works from anywhere and `include 'gin/models/tiny.gin'`
inside a run file resolves the same way.
"""

from collections.abc import Iterator, Sequence
import contextlib
import difflib
import inspect
import pathlib
import re
import tokenize
import traceback

import gin
from gin import config_parser

from t5x_mt.core import files
from t5x_mt.core.errors import UserError

REPO_ROOT = files.REPO_ROOT  # Re-exported: launch scripts find gin files from it.
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
  line, or the binding, where it is.

  Unless `skip_unknown` (a run's own config.gin, read by another command), a macro that no
  binding reads is a mistake too: gin would accept `TRAIN_STEP = 5` and the run would go
  on with TRAIN_STEPS unchanged.
  """
  check_gin_files(gin_files)
  gin.add_config_file_search_path(str(REPO_ROOT))
  parsed_files = []
  for gin_file in gin_files:
    with _mistakes_named(gin_file, binding=None):
      parsed_files.append(gin.parse_config_file(gin_file, skip_unknown))
  for binding in bindings:
    with _mistakes_named(None, binding):
      gin.parse_config(binding, skip_unknown)
  if not skip_unknown:
    _check_macros_are_read(parsed_files, bindings)


def _check_macros_are_read(parsed_files: Sequence[gin.config.ParsedConfigFileIncludesAndImports],
                           bindings: Sequence[str]) -> None:
  """A UserError naming the first macro that no statement reads, where its definition in
  force is (a binding, or a file and line) and the closest macro that is read.

  A macro read only by a binding that a later file overrides still counts as read: the
  recipe that defines it is right, the one that derives from it just does not use it.
  """
  use = _MacroUse()
  for parsed in parsed_files:
    use.read_file(parsed)
  for binding in bindings:
    use.read_text(binding, f'binding {binding!r}')
  unread = [name for name in use.definitions if name not in use.read]
  if unread:
    raise UserError(f'gin: {use.definitions[unread[0]]}: no binding reads the macro '
                    f'{unread[0]}{_did_you_mean(unread[0], use.read)}')


class _MacroUse(config_parser.ParserDelegate):
  """The macros that statements define (where, in the order gin reads them) and read."""

  def __init__(self):
    self.definitions: dict[str, str] = {}
    self.read: set[str] = set()

  def configurable_reference(self, scoped_configurable_name, evaluate):
    return scoped_configurable_name

  def macro(self, macro_name):
    self.read.add(macro_name)
    return macro_name

  def read_file(self, parsed: gin.config.ParsedConfigFileIncludesAndImports) -> None:
    """Reads a parsed file's statements, and its includes' where gin read them."""
    includes = iter(parsed.includes)
    for statement in config_parser.ConfigParser(_read_gin_file(parsed.filename), self):
      if isinstance(statement, config_parser.IncludeStatement):
        self.read_file(next(includes))
      else:
        self._note(statement, f'{parsed.filename}, line {statement.location.line_num}')

  def read_text(self, text: str, where: str) -> None:
    for statement in config_parser.ConfigParser(text, self):
      self._note(statement, where)

  def _note(self, statement, where: str) -> None:
    """A macro's latest definition goes last, as the one in force."""
    if isinstance(statement, config_parser.BindingStatement) and not statement.arg_name:
      self.definitions.pop(statement.selector, None)
      self.definitions[statement.selector] = where


def _read_gin_file(gin_file: str) -> str:
  """A gin file's text, found where gin found it: here, else in the repository."""
  path = files.path(gin_file)
  return (path if path.exists() else files.path(str(REPO_ROOT / gin_file))).read_text()


def _did_you_mean(name: str, known: Sequence[str]) -> str:
  """` (did you mean X?)` for the known name closest to `name`, case aside; else ''."""
  by_folded = {candidate.casefold(): candidate for candidate in known}
  closest = difflib.get_close_matches(name.casefold(), by_folded, n=1, cutoff=0.6)
  return f' (did you mean {by_folded[closest[0]]}?)' if closest else ''


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
    if suggestion := _closest_configurable_name(what):
      what = what.rstrip('.') + suggestion
    location = _GIN_LOCATION.search('\n'.join(details))
    in_file = location and f'{location["file"]}, line {location["line"]}'
  where = f'binding {binding!r}' if binding is not None else in_file or gin_file
  return f'{where}: {what}'


_UNKNOWN_CONFIGURABLE = re.compile(r"No configurable matching '(?P<selector>[^']*)'")
_UNKNOWN_PARAMETER = re.compile(
    r"Configurable '(?P<selector>[^']*)' doesn't have a parameter named '(?P<name>[^']*)'")


def _closest_configurable_name(complaint: str) -> str:
  """For gin's complaint about an unknown configurable or parameter, the closest known one."""
  if match := _UNKNOWN_CONFIGURABLE.search(complaint):
    known = [selector for selector, _ in gin.config._REGISTRY.items()]  # pylint: disable=protected-access
    return _did_you_mean(match['selector'], known)
  if match := _UNKNOWN_PARAMETER.search(complaint):
    configurable = gin.config._REGISTRY.get_match(match['selector'])  # pylint: disable=protected-access
    return _did_you_mean(match['name'], list(inspect.signature(configurable.wrapped).parameters))
  return ''


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
