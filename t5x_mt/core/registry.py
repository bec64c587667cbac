"""Named registries: the extension points a setting names by string.

A registry maps each name a user may write (in gin, on a flag) to the object that carries
the idea out, so that the modules which need it ask the object instead of comparing
strings, and a new entry is one module plus one `register` call. Entries are objects with
a `name`; the registry is the only module-level state their packages keep.
"""

from collections.abc import Iterator
from typing import Generic, Protocol, TypeVar

from t5x_mt.core.errors import UserError


class Named(Protocol):
  name: str


Entry = TypeVar('Entry', bound=Named)


class Registry(Generic[Entry]):
  """Entries by name; `what` says what an entry is, for the error naming the known ones."""

  def __init__(self, what: str):
    self.what = what
    self._entries: dict[str, Entry] = {}

  def register(self, entry: Entry) -> Entry:
    """Makes `entry` available by its name; a second entry of one name is a bug."""
    if entry.name in self._entries:
      raise ValueError(f'{self.what} {entry.name!r} is registered already')
    self._entries[entry.name] = entry
    return entry

  def get(self, name: str) -> Entry:
    """The entry called `name`; a UserError listing the registered names otherwise."""
    if name not in self._entries:
      raise UserError(f'unknown {self.what} {name!r}; registered: {", ".join(self.names())}')
    return self._entries[name]

  def names(self) -> tuple[str, ...]:
    """The registered names, sorted."""
    return tuple(sorted(self._entries))

  def __iter__(self) -> Iterator[Entry]:
    return iter(self._entries.values())
