"""Search methods by name: what `--search=NAME` and `decoding.DecodeSettings.search` choose.

A method is a `SearchMethod`:
  name      what a user writes: --search=NAME, decoding.DecodeSettings.search = 'NAME'.
  settings  its frozen settings dataclass, every field declared with `setting` (default,
            help, check). Each field is a setting of every command that decodes
            (--FIELD, its help its flag's) and of `DecodeSettings` (gin:
            decoding.DecodeSettings.FIELD), so field names are unique across methods.
  implementation  the module whose `decode(settings, problem, outputs)` searches: the
            `outputs` hypotheses per source of a `common.SearchProblem` (`common.NBest`),
            best first, within its rules (banned tokens, forced prefix, output limits)
            and scored by its length penalty. It is imported when a search first runs,
            so that commands declare every method's settings as flags without loading
            JAX.
  most_outputs  most_outputs(settings) -> the most hypotheses per source it gives, or
            None where it gives any number (n-best lists, MBR).

A new method is a module of this package with its settings and its `SearchMethod`, the
module of its search (`decode`, over `common`), and one `register` call in the package's
`__init__`; prediction, the Translator, the commands' flags, gin and the CTranslate2
translator learn it from here.
"""

from collections.abc import Callable
import dataclasses
import importlib
from typing import Any, TYPE_CHECKING

from t5x_mt.core.errors import UserError
from t5x_mt.core.registry import Registry

if TYPE_CHECKING:  # The search modules load JAX; the registry does not.
  from t5x_mt.decoding.search.common import NBest
  from t5x_mt.decoding.search.common import SearchProblem

# Where gin binds the decoding settings, methods' settings included.
BINDING = 'decoding.DecodeSettings'


def binding_name(field: str) -> str:
  """A decoding setting as gin binds it: 'decoding.DecodeSettings.<field>'."""
  return f'{BINDING}.{field}'


# Checks a setting's value, given the name the user wrote it under; raises a UserError.
Check = Callable[[str, Any], Any]


def setting(default: Any, help: str, check: Check) -> Any:  # pylint: disable=redefined-builtin
  """A field of a method's settings: its default, the help of its flag, and its check
  (`core.validation` functions take the name and the value)."""
  return dataclasses.field(default=default, metadata={'help': help, 'check': check})


def check_settings(settings: Any) -> None:
  """Checks every field of a method's settings, naming each as gin binds it."""
  for field in dataclasses.fields(settings):
    field.metadata['check'](binding_name(field.name), getattr(settings, field.name))


def check_setting(field: str, value: Any, name: str) -> None:
  """Checks `value` of a method's setting `field`, naming it `name` (a flag)."""
  setting_fields()[field][1].metadata['check'](name, value)


def check_method_settings(values: Any) -> None:
  """Checks every method's settings among the attributes of `values` (a
  `with_method_settings` class), naming each as gin binds it."""
  for field in setting_fields():
    check_setting(field, getattr(values, field), binding_name(field))


@dataclasses.dataclass(frozen=True)
class SearchMethod:
  """A registered search method (see the module docstring)."""
  name: str
  settings: type
  implementation: str
  most_outputs: Callable[[Any], int | None] = lambda settings: None

  def decode(self, settings: Any, problem: 'SearchProblem', outputs: int) -> 'NBest':
    """`outputs` hypotheses per source of `problem`, best first (see the module docstring)."""
    return importlib.import_module(self.implementation).decode(settings, problem, outputs)

  def check_outputs(self, settings: Any, outputs: int) -> None:
    """A UserError naming --nbest when `outputs` hypotheses per source are more than
    this method gives with `settings`."""
    most = self.most_outputs(settings)
    if most is not None and outputs > most:
      raise UserError(f'--nbest: at most {most} with {self.name} search here, got {outputs}')

  def settings_from(self, values: Any) -> Any:
    """This method's settings from the attributes of the same names of `values`."""
    return self.settings(**{field.name: getattr(values, field.name)
                            for field in dataclasses.fields(self.settings)})


REGISTRY: Registry[SearchMethod] = Registry('search method')
get = REGISTRY.get
names = REGISTRY.names


def register(method: SearchMethod) -> SearchMethod:
  """Makes `method` available by its name; a name or setting taken twice is a bug."""
  taken = set(setting_fields())
  for field in dataclasses.fields(method.settings):
    if field.name in taken or not {'help', 'check'} <= set(field.metadata):
      raise ValueError(f'search method {method.name!r}: setting {field.name!r} is taken '
                       'by another method, or not declared with `setting`')
  return REGISTRY.register(method)


def method_of(settings: Any) -> SearchMethod:
  """The method whose settings `settings` are."""
  for method in REGISTRY:
    if type(settings) is method.settings:  # pylint: disable=unidiomatic-typecheck
      return method
  raise ValueError(f'{settings!r} are no registered search method\'s settings')


def setting_fields() -> dict[str, tuple[SearchMethod, dataclasses.Field]]:
  """Every method's settings by field name: (its method, the field)."""
  return {field.name: (method, field) for method in REGISTRY
          for field in dataclasses.fields(method.settings)}


def with_method_settings(cls: type) -> type:
  """Class decorator: frozen dataclass `cls`, which names a method in its `search` field,
  with every registered method's settings as fields of its own (their defaults, help and
  checks), so that gin binds them and flags give them under one name each."""
  fields = [(name, field.type, dataclasses.field(default=field.default,
                                                  metadata=field.metadata))
            for name, (_, field) in setting_fields().items()]
  clash = set(setting_fields()) & {field.name for field in dataclasses.fields(cls)}
  if clash:
    raise ValueError(f'{cls.__name__} has fields of search methods\' settings: {clash}')
  return dataclasses.make_dataclass(
      cls.__name__, fields, bases=(cls,), frozen=True,
      namespace={'__doc__': cls.__doc__, '__module__': cls.__module__,
                 '__qualname__': cls.__qualname__})
