"""Translation directions: one value type, its name (`eng_Latn-hau_Latn`) and its id.

An id travels with every target token through packing (see feature_converters), so it
must be a small integer that is the same in every process: it is derived from the
languages' positions in the fixed FLORES-200 code list, never from the order tasks are
registered in (a language a vocabulary adds has the index its vocabulary gives it:
`languages.add_languages`).
"""

from collections.abc import Collection, Sequence
from typing import NamedTuple

from t5x_mt.core import languages
from t5x_mt.core.errors import UserError

_STRIDE = languages.INDEX_LIMIT  # Above every language index: src and tgt never collide.
# How directions are grouped (DRO's groups, adapters' keys): each direction on its own, or
# every direction into one target language together.
GROUPINGS = ('direction', 'target')


def check_grouping(grouping: str, setting: str) -> str:
  """`grouping` if it is one of GROUPINGS; a UserError naming `setting` otherwise."""
  if grouping not in GROUPINGS:
    raise UserError(f'{setting}: {grouping!r} is not one of {", ".join(GROUPINGS)}')
  return grouping


class Direction(NamedTuple):
  """A translation direction: source and target FLORES-200 codes.

  A (src, tgt) tuple, so it unpacks and keys dicts as pairs do. `name` is what task names,
  metrics, adapter keys and files use and `id` what travels with tokens; `parse` and
  `from_id` convert them back.
  """
  src_lang: str
  tgt_lang: str

  @classmethod
  def parse(cls, name: str, where: str) -> 'Direction':
    """The direction `<src>-<tgt>` names, both codes checked; a UserError naming `where`."""
    src_lang, sep, tgt_lang = name.strip().partition('-')
    if not sep:
      raise UserError(f'{where}: {name!r} is not <src>-<tgt>')
    return cls(languages.check_language(src_lang, where),
               languages.check_language(tgt_lang, where))

  @classmethod
  def from_id(cls, direction_id: int) -> 'Direction':
    """The direction whose `id` is `direction_id`."""
    src_index, tgt_index = divmod(int(direction_id) - 1, _STRIDE)
    return cls(languages.code_at(src_index), languages.code_at(tgt_index))

  @property
  def name(self) -> str:
    """`<src>-<tgt>`."""
    return f'{self.src_lang}-{self.tgt_lang}'

  @property
  def id(self) -> int:
    """A positive id (0 is reserved for padding) unique to the ordered language pair."""
    return (languages.language_index(self.src_lang) * _STRIDE
            + languages.language_index(self.tgt_lang) + 1)

  def key(self, grouping: str) -> str:
    """The group this direction falls in under `grouping` (one of GROUPINGS): its own name,
    or its target language."""
    check_grouping(grouping, 'direction grouping')
    return self.name if grouping == 'direction' else self.tgt_lang


def untrained_warnings(legs: Sequence[Direction], trained: Collection[str]) -> list[str]:
  """One line for each of `legs` (a translation, or the two legs of a pivoted one) that a
  run whose directions are `trained` (names) did not train on: a copy into the source's
  own language, a source it never read, or a zero-shot direction between languages it
  knows. A model translates these too, less well than what it trained on; a user should
  know before reading its output. None for a leg into a language the run never learned:
  the translator refuses those with an error.
  """
  trained_directions = [Direction.parse(name, 'directions.json') for name in trained]
  sources = sorted({direction.src_lang for direction in trained_directions})
  targets = {direction.tgt_lang for direction in trained_directions}
  if any(leg.tgt_lang not in targets for leg in legs):
    return []
  warnings = []
  for leg in legs:
    if leg.name in trained:
      continue
    if leg.src_lang == leg.tgt_lang:
      warnings.append(f'{leg.name}: source and target are the same language, which the run '
                      'never trained to copy; expect a rewording, not the input')
    elif leg.src_lang not in sources:
      warnings.append(f'{leg.name}: the run never trained on {leg.src_lang} as a source '
                      f'(it trained on {", ".join(sources)}); expect poor translations')
    else:
      warnings.append(f'{leg.name}: a zero-shot direction, which the run never trained on '
                      f'(it knows {leg.src_lang} as a source and {leg.tgt_lang} as a target); '
                      'expect weaker translations')
  return warnings


def target_index(direction_ids):
  """The target language's index (languages.language_index) of direction ids (ints or
  integer arrays)."""
  return (direction_ids - 1) % _STRIDE
