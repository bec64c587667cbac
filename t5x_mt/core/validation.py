"""Checks of configuration values, so a wrong gin binding fails before any work starts.

gin passes values through unchecked: `LEARNING_RATE = 'fast'` or a misspelt activation
would otherwise surface as a traceback deep inside tracing, after MODEL_DIR was written.
Each check names the setting as a user writes it in gin.
"""

from collections.abc import Collection
from typing import Any

from t5x_mt.core.errors import UserError


def choice(name: str, value: Any, choices: Collection[str]) -> str:
  """`value` if it is one of `choices`."""
  if not isinstance(value, str) or value not in choices:
    raise UserError(f'{name}: {value!r} is not one of {", ".join(map(repr, sorted(choices)))}')
  return value


def integer(name: str, value: Any, minimum: int | None = None) -> int:
  """`value` if it is an int (not a bool) of at least `minimum`."""
  if isinstance(value, bool) or not isinstance(value, int):
    raise UserError(f'{name}: must be an integer, got {value!r}')
  if minimum is not None and value < minimum:
    raise UserError(f'{name}: must be >= {minimum}, got {value}')
  return value


def number(name: str, value: Any, *, above: float | None = None,
           at_least: float | None = None, below: float | None = None,
           at_most: float | None = None) -> float:
  """`value` as a float if it is a real number within the given bounds."""
  if isinstance(value, bool) or not isinstance(value, (int, float)):
    raise UserError(f'{name}: must be a number, got {value!r}')
  if above is not None and not value > above:
    raise UserError(f'{name}: must be > {above}, got {value}')
  if at_least is not None and not value >= at_least:
    raise UserError(f'{name}: must be >= {at_least}, got {value}')
  if below is not None and not value < below:
    raise UserError(f'{name}: must be < {below}, got {value}')
  if at_most is not None and not value <= at_most:
    raise UserError(f'{name}: must be <= {at_most}, got {value}')
  return float(value)
