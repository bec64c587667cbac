"""N-best lists in Moses' line format, the one reranking tools read.

One line per hypothesis:

    0 ||| the translation ||| forward=-3.2 forward_normalized=-0.8 length=4 ||| -0.8

the 0-based index of its source sentence, the hypothesis, its features as `name=value`
pairs separated by spaces, and its total score. A sentence's hypotheses are consecutive
lines, best first; the indices run 0, 1, ... n-1 without gaps, so a list lines up with
its source file. Values are written with `repr` precision, so reading a list back gives
the very floats that were written.
"""

from collections.abc import Iterable, Mapping, Sequence
import dataclasses
import math
import os

from t5x_mt.core import files
from t5x_mt.data import readers
from t5x_mt.core.errors import UserError

SEPARATOR = ' ||| '
_FIELDS = ('index', 'hypothesis', 'features', 'total')
# The features of a beam search hypothesis (translate.py --nbest): the summed
# log-probability of its pieces, EOS included; that over length^alpha, the beam's ranking
# score and the line's total; its generated pieces, EOS included.
FORWARD = 'forward'
FORWARD_NORMALIZED = 'forward_normalized'
LENGTH = 'length'


@dataclasses.dataclass(frozen=True)
class Entry:
  """One hypothesis of an n-best list: its text, its features by name, its total."""
  hypothesis: str
  features: dict[str, float]
  total: float


def format_entry(index: int, hypothesis: str, features: Mapping[str, float],
                 total: float) -> str:
  """One n-best line (newline included) for hypothesis `hypothesis` of sentence `index`.

  A hypothesis holding the field separator or a line break, or a feature name that is
  not one word, would make the line unreadable: it is refused.
  """
  if '|||' in hypothesis or any(c in hypothesis for c in '\r\n'):
    raise UserError(f'n-best hypothesis of sentence {index} holds "|||" or a line break, '
                    f'which the n-best format cannot carry: {hypothesis!r}')
  for name, value in features.items():
    if not name or any(c.isspace() for c in name) or '=' in name or '|' in name:
      raise UserError(f'n-best feature name {name!r} is not one word without "=" or "|"')
    if not math.isfinite(value):
      raise UserError(f'n-best feature {name} of sentence {index} is {value}; the format '
                      f'holds finite numbers only')
  if not math.isfinite(total):
    raise UserError(f'n-best total of sentence {index} is {total}; the format holds '
                    f'finite numbers only')
  pairs = ' '.join(f'{name}={_number(value)}' for name, value in features.items())
  return f'{index}{SEPARATOR}{hypothesis}{SEPARATOR}{pairs}{SEPARATOR}{_number(total)}\n'


def search_features(log_prob: float, score: float, length: int) -> dict[str, float]:
  """The features of a beam search hypothesis with summed log-probability `log_prob`,
  ranking score `score` and `length` pieces, in the order they are written."""
  return {FORWARD: log_prob, FORWARD_NORMALIZED: score, LENGTH: length}


def _number(value: float) -> str:
  """`value` as the shortest text that reads back as the same float (an int as an int)."""
  if isinstance(value, int):
    return str(value)
  return repr(float(value))


def write(path: str | os.PathLike, entries: Iterable[Sequence[Entry]]) -> None:
  """Writes n-best list `entries` (one sequence of entries per sentence, best first) to
  `path` whole or not at all."""
  with files.atomic_writer(path) as f:
    for index, sentence_entries in enumerate(entries):
      for entry in sentence_entries:
        f.write(format_entry(index, entry.hypothesis, entry.features,
                             entry.total).encode('utf-8'))


def read(path: str | os.PathLike) -> list[list[Entry]]:
  """The n-best list in file `path`, one list of entries per source sentence.

  A missing or unreadable file, a line that does not parse, or indices that are not 0,
  1, ... in order, is a UserError naming the file, the line and the field.
  """
  sentences: list[list[Entry]] = []
  for number, line in enumerate(readers.iter_lines(path), start=1):
    index, entry = _parse_line(line, f'{path}:{number}')
    if index == len(sentences) - 1:
      sentences[-1].append(entry)
    elif index == len(sentences):
      sentences.append([entry])
    else:
      expected = (f'{len(sentences) - 1} or {len(sentences)}' if sentences else '0')
      raise UserError(f'{path}:{number}: field index: {index} where {expected} was '
                      f'expected; indices run 0, 1, ... in order')
  return sentences


def _parse_line(line: str, where: str) -> tuple[int, Entry]:
  """The index and entry of one n-best line; `where` names it in errors."""
  fields = line.split(SEPARATOR)
  if len(fields) != len(_FIELDS):
    raise UserError(f'{where}: {len(fields)} fields where 4 were expected '
                    f'(index ||| hypothesis ||| features ||| total)')
  index_text, hypothesis, features_text, total_text = fields
  try:
    index = int(index_text)
  except ValueError:
    raise UserError(f'{where}: field index: {index_text!r} is not an integer') from None
  if index < 0:
    raise UserError(f'{where}: field index: {index} is negative')
  features = {}
  for pair in features_text.split():
    name, equals, value = pair.partition('=')
    if not equals or not name:
      raise UserError(f'{where}: field features: {pair!r} is not name=value')
    if name in features:
      raise UserError(f'{where}: field features: {name} appears twice')
    features[name] = _parse_number(value, where, f'feature {name}')
  return index, Entry(hypothesis, features, _parse_number(total_text, where, 'total'))


def _parse_number(text: str, where: str, field: str) -> float:
  """`text` as a finite float, else a UserError naming `field`."""
  try:
    value = float(text)
  except ValueError:
    raise UserError(f'{where}: field {field}: {text!r} is not a number') from None
  if not math.isfinite(value):
    raise UserError(f'{where}: field {field}: {text!r} is not a finite number')
  return value
