"""Gin at the launch layer: files, `--gin.NAME=VALUE` overrides, errors users can act on.

Gin files are found relative to the working directory and to the repository root, so
`--gin_file=gin/runs/demo.gin` works from anywhere and `include 'gin/models/tiny.gin'`
inside a run file resolves the same way.
"""

from collections.abc import Iterator, Sequence
import contextlib
import difflib
import inspect
import re
import tokenize
import traceback
from typing import Any, NamedTuple

import gin
from gin import config_parser

from t5x_mt.core import files
from t5x_mt.core.errors import UserError

REPO_ROOT = files.REPO_ROOT  # Re-exported: launch scripts find gin files from it.
# A run's config.gin on an object store (gs://) is read as the run's other files are.
gin.config.register_file_reader(lambda name: files.path(name).open(), files.on_object_store)


def split_gin_overrides(argv: Sequence[str]) -> tuple[list[str], list[str]]:
  """Separates `--gin.NAME=VALUE` arguments (as gin bindings) from the others.

  A VALUE that is a bare word or path (`--gin.SRC_LANG=eng_Latn`: the shell took the
  quotes off) is refused here, naming the flag and how to quote it.
  """
  bindings, rest = [], []
  for arg in argv:
    if arg.startswith('--gin.'):
      name, sep, value = arg[len('--gin.'):].partition('=')
      if not sep:
        raise UserError(f'{arg}: expected --gin.NAME=VALUE')
      if _BARE_STRING.fullmatch(value) and not _parses(f'{name} = {value}'):
        raise UserError(f'{arg}: a string needs quotes: {_quoted_flag(name, value)}')
      bindings.append(f'{name} = {value}')
    else:
      rest.append(arg)
  return bindings, rest


def _parses(binding: str) -> bool:
  try:
    list(config_parser.ConfigParser(binding, _MacroUse()))
  except (SyntaxError, tokenize.TokenError):
    return False
  return True


def check_gin_files(gin_files: Sequence[str]) -> None:
  """A UserError naming the first --gin_file found neither here nor in the repository."""
  for gin_file in gin_files:
    if not files.path(gin_file).exists() and not (REPO_ROOT / gin_file).exists():
      raise UserError(f'--gin_file: {gin_file} not found')


def check_recipe(gin_files: Sequence[str], bindings: Sequence[str], *,
                 inputs: bool = True) -> None:
  """Checks what gin's text alone shows, so that a command names a mistake there before
  TensorFlow starts (nothing here imports it, nor any configurable): each --gin_file and
  file it includes exists and parses, the bindings parse, and each macro defined is read
  (`parse_gin` says the same). With `inputs` (a command that reads the run's data), each
  macro that the bindings in force read is set, and one named *_FILE (SRC_FILE) names a
  file that exists.
  """
  check_gin_files(gin_files)
  use = _MacroUse.of(gin_files, bindings)
  use.check_all_read()
  if inputs:
    use.check_inputs()


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
  for gin_file in gin_files:
    with _mistakes_named(gin_file, binding=None):
      gin.parse_config_file(gin_file, skip_unknown)
  for binding in bindings:
    with _mistakes_named(None, binding):
      gin.parse_config(binding, skip_unknown)
  if not skip_unknown:
    _MacroUse.of(gin_files, bindings).check_all_read()


@contextlib.contextmanager
def isolated_config() -> Iterator[None]:
  """Runs its body on an empty gin config of its own, and leaves the process's config as it
  was: what a saved run's config.gin binds is read without replacing the bindings of the
  command that reads it.

  Gin keeps one global config and offers no way to swap it, so this saves and restores the
  parts `gin.clear_config` clears.
  """
  # pylint: disable=protected-access
  state = gin.config
  saved = ({selector: dict(values) for selector, values in state._CONFIG.items()},
           dict(state._SINGLETONS), set(state._IMPORTS), dict(state._OPERATIVE_CONFIG),
           gin.config_is_locked())
  gin.clear_config()
  try:
    yield
  finally:
    gin.clear_config()
    config, singletons, imports, operative, locked = saved
    state._CONFIG.update(config)
    state._SINGLETONS.update(singletons)
    state._IMPORTS.update(imports)
    state._OPERATIVE_CONFIG.update(operative)
    state._set_config_is_locked(locked)
  # pylint: enable=protected-access


class _MacroReference(NamedTuple):
  """`%NAME` where gin's text reads a macro."""
  name: str


class _MacroUse(config_parser.ParserDelegate):
  """Gin's reading of files and bindings without the configurables: the macros that
  statements define and read, and the statements in force (the last of each binding)."""

  def __init__(self):
    self.definitions: dict[str, str] = {}  # Where each macro's definition in force is.
    self.read: set[str] = set()  # Read by any statement, even one a later one replaces.
    # (scope, selector, parameter) -> (the statement in force, its place, the macros it reads)
    self._in_force: dict[tuple[str, str, str],
                         tuple[config_parser.BindingStatement, str, list[str]]] = {}
    self._reading: list[str] = []  # The macros of the statement being parsed.

  @classmethod
  def of(cls, gin_files: Sequence[str], bindings: Sequence[str]) -> '_MacroUse':
    """The use of the files (and those they include), then of the bindings; a mistake in
    them is a UserError as `parse_gin` names it."""
    use = cls()
    for gin_file in gin_files:
      use.read_file(gin_file)
    for binding in bindings:
      use.read_text(binding, f'binding {binding!r}', binding=binding)
    return use

  def configurable_reference(self, scoped_configurable_name, evaluate):
    return scoped_configurable_name

  def macro(self, macro_name):
    self.read.add(macro_name)
    self._reading.append(macro_name)
    return _MacroReference(macro_name)

  def read_file(self, gin_file: str) -> None:
    """Reads a gin file's statements, and its includes' where it includes them; a file
    is found where gin finds it: here, else in the repository."""
    path = files.path(gin_file)
    with (path if path.exists() else files.path(str(REPO_ROOT / gin_file))).open() as text:
      for statement in self._statements(text, gin_file, None):
        if isinstance(statement, config_parser.IncludeStatement):
          self._include(statement, gin_file)
        elif isinstance(statement, config_parser.BindingStatement):
          self._note(statement, f'{gin_file}, line {statement.location.line_num}')

  def _include(self, statement: config_parser.IncludeStatement, gin_file: str) -> None:
    included = statement.filename
    if not files.path(included).exists() and not (REPO_ROOT / included).exists():
      raise UserError(f'gin: {gin_file}, line {statement.location.line_num}: includes '
                      f'{included}, found neither here nor in the repository')
    self.read_file(included)

  def read_text(self, text: str, where: str, binding: str | None = None) -> None:
    for statement in self._statements(text, None, binding):
      if isinstance(statement, config_parser.BindingStatement):
        self._note(statement, where)

  def _statements(self, text, gin_file: str | None, binding: str | None):
    """The statements of `text`, each once gin parsed it (its macros in `_reading`)."""
    statements = iter(config_parser.ConfigParser(text, self))
    while True:
      self._reading = []
      with _mistakes_named(gin_file, binding):
        statement = next(statements, None)
      if statement is None:
        return
      yield statement

  def _note(self, statement: config_parser.BindingStatement, where: str) -> None:
    """A macro's latest definition goes last, as the one in force."""
    key = (statement.scope, statement.selector, statement.arg_name)
    self._in_force.pop(key, None)
    self._in_force[key] = (statement, where, self._reading)
    if not statement.arg_name:
      self.definitions.pop(_macro_name(key), None)
      self.definitions[_macro_name(key)] = where

  def check_all_read(self) -> None:
    """A UserError naming the first macro that no statement reads, where its definition in
    force is (a binding, or a file and line) and the closest macro that is read.

    A macro read only by a binding that a later file overrides still counts as read: the
    recipe that defines it is right, the one that derives from it just does not use it.
    """
    unread = [name for name in self.definitions if name not in self.read]
    if unread:
      raise UserError(f'gin: {self.definitions[unread[0]]}: no binding reads the macro '
                      f'{unread[0]}{_did_you_mean(unread[0], self.read)}')

  def check_inputs(self) -> None:
    """A UserError naming the first macro that a binding in force reads (itself, or through
    the macros it reads) but nothing sets, and where it is read; then one naming the first
    such macro called *_FILE whose file does not exist. Gin's own (`%gin.REQUIRED`) are set.
    """
    definitions = {_macro_name(key): value for key, value in self._in_force.items()
                   if not key[2]}
    pending = [(name, where) for key, (_, where, reads) in self._in_force.items() if key[2]
               for name in reads]
    needed = {}
    while pending:
      name, where = pending.pop(0)
      if name in needed:
        continue
      needed[name] = where
      if name in definitions:
        _, defined_at, reads = definitions[name]
        pending += [(read, defined_at) for read in reads]
      elif '.' not in name:
        raise UserError(f'gin: the macro {name} is not set ({where} reads it); give it '
                        f'with --gin.{name}=...')
    for name in needed:
      value = _macro_value(name, definitions)
      if (name.endswith('_FILE') and isinstance(value, str) and not files.on_object_store(value)
          and not files.path(files.expand(value)).is_file()):
        raise UserError(f'{name}: {files.expand(value)}: no such file')


def _macro_name(key: tuple[str, str, str]) -> str:
  """How gin names the macro a statement keyed (scope, selector, '') defines."""
  scope, selector, _ = key
  return f'{scope}/{selector}' if scope else selector


def _macro_value(name: str, definitions: dict) -> Any:
  """The value macro `name` is set to, through the macros it names (`A = %B`)."""
  value, seen = _MacroReference(name), set()
  while (isinstance(value, _MacroReference) and value.name in definitions
         and value.name not in seen):
    seen.add(value.name)
    value = definitions[value.name][0].value
  return value


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
    what = _unparsable_value(error, binding)
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


# A value that gin cannot parse but a string's quotes would make one: a word, a path.
_BARE_STRING = re.compile(r'[^\'"()\[\]{},@%#\s]+(?: [^\'"()\[\]{},@%#\s]+)*')
# How gin names the word it could not parse.
_UNPARSED_TOKEN = re.compile(r"Failed to parse token '(?P<token>.*)'")


def _unparsable_value(error: SyntaxError, binding: str | None) -> str:
  """Gin's complaint about a statement it cannot parse; for an unquoted string (which it
  reports as an ast node), how to quote it."""
  name, sep, value = ((error.text or '') if binding is None else binding).partition('=')
  name, value = name.strip(), value.strip()
  unparsed_value = error.msg.startswith(('Unable to parse value', 'malformed node'))
  if unparsed_value and sep and _BARE_STRING.fullmatch(value):
    return 'a string needs quotes: ' + (f"{name} = '{value}'" if binding is None
                                         else _quoted_flag(name, value))
  if token := _UNPARSED_TOKEN.search(error.msg):
    return f"cannot parse {token['token']} (a string needs quotes: '{token['token']}')"
  return error.msg.splitlines()[0]


def _quoted_flag(name: str, value: str) -> str:
  """--gin.NAME="'VALUE'": the shell's quotes around gin's."""
  return f'--gin.{name}="\'{value}\'"'


def _innermost_file(error: Exception, default: str) -> str:
  """The gin file (perhaps an included one) that was being read when `error` was raised."""
  files = [frame.f_locals['config_file'] for frame, _ in traceback.walk_tb(error.__traceback__)
           if frame.f_code is gin.parse_config_file.__code__]
  return files[-1] if files else default
