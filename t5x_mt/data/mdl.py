"""The MDL repeat-pattern filter (VolcTrans): web noise compresses too well.

For a sentence s of n units (characters, or whitespace tokens) and a segmentation
s = w1 w2 ... wm into pieces,

  cost(w) = C * sum over distinct pieces w of |w|  -  sum_i ln p(w_i | w_{i-1}),

with p(b | a) = #ab / #a the bigram estimate on the segmentation itself (w_0 = <s>; #a
counts the occurrences of a that a piece follows, so each p(. | a) sums to one) and C = 2.
MDL(s) is the minimum over segmentations. The one-piece segmentation costs exactly C * n,
so MDL(s) / n <= C always; text built from a few repeated units (spam listings, "mm mm
mm", a product name ten times) costs far less, because each repeated unit is paid for once
and predicts its successor well. A side is noisy if MDL(s) / n < threshold.

The minimum over all 2^(n-1) segmentations is out of reach, but every segmentation is an
upper bound on MDL, so any segmentation under the threshold proves the flag: the search
below never flags wrongly, it can only miss. It is a greedy search over the segmentations
repeated substrings induce: candidate units come from a suffix array (adjacent suffixes'
common prefixes, cut to their period where they overlap); each round cuts out of the
current non-unit pieces the candidate that lowers the cost most, until none does.

The threshold is per unit and in nats; `threshold` is calibrated on FLORES-200 dev (see
the README's cleaning section).
"""

import dataclasses
import math
from collections import Counter
from typing import ClassVar, Sequence

from t5x_mt.data.cleaning_steps import Keep
from t5x_mt.data.cleaning_steps import Step
from t5x_mt.data.cleaning_steps import register_step

PIECE_COST = 2.0
_START = None  # w_0: no piece equals it
_TOKEN_CODE_POINTS = 0xF0000  # Supplementary Private Use Area-A: 65,534 token ids


_XLOGX = [0.0]  # _XLOGX[k] = k ln k, grown on demand


def _xlogx_table(size: int) -> list[float]:
  while len(_XLOGX) <= size:
    _XLOGX.append(len(_XLOGX) * math.log(len(_XLOGX)))
  return _XLOGX


def segmentation_cost(pieces: Sequence[str], piece_cost: float = PIECE_COST) -> float:
  """The MDL objective of one segmentation (nats).

  The code length -sum_ab #ab ln(#ab / #a) equals sum_a #a ln #a - sum_ab #ab ln #ab,
  since the bigrams starting with a number #a: two sums over a table of k ln k.
  """
  dictionary = piece_cost * sum(map(len, set(pieces)))
  previous = [_START, *pieces[:-1]]
  table = _xlogx_table(len(pieces))
  histories = Counter(previous).values()
  bigrams = Counter(zip(previous, pieces)).values()
  code_length = (sum(map(table.__getitem__, histories))
                 - sum(map(table.__getitem__, bigrams)))
  return dictionary + code_length


def _candidate_units(text: str, max_candidates: int) -> list[str]:
  """Repeated substrings, most text covered by repeats first.

  Adjacent suffixes in sorted order share their longest repeated prefixes; where the two
  occurrences overlap (a period shorter than the common prefix), the period is the unit.
  """
  n = len(text)
  suffixes = sorted(range(n), key=lambda i: text[i:])
  units = set()
  for first, second in zip(suffixes, suffixes[1:]):
    common = 0
    limit = n - max(first, second)
    while common < limit and text[first + common] == text[second + common]:
      common += 1
    if common == 0:
      continue
    length = min(common, abs(second - first))
    units.add(text[first:first + length])
    if length > 1:
      units.add(text[first:first + length].strip() or text[first:first + length])
  counts = {unit: text.count(unit) for unit in units}
  maximal = []  # A unit inside a longer one that occurs as often adds nothing: drop it.
  for unit in sorted((unit for unit in units if counts[unit] >= 2), key=len, reverse=True):
    if not any(unit in longer and counts[longer] == counts[unit] for longer in maximal):
      maximal.append(unit)
  maximal.sort(key=lambda unit: (-(counts[unit] - 1) * len(unit), unit))
  return maximal[:max_candidates]


def _cut(pieces: list[str], unit: str, fixed: frozenset[str]) -> list[str]:
  """Splits every piece not in `fixed` at the occurrences of `unit`, keeping `unit`."""
  result = []
  for piece in pieces:
    if piece in fixed or unit not in piece:
      result.append(piece)
      continue
    parts = piece.split(unit)
    for index, part in enumerate(parts):
      if index:
        result.append(unit)
      if part:
        result.append(part)
  return result


def search_segmentation(text: str, piece_cost: float = PIECE_COST, max_candidates: int = 12,
                        max_rounds: int = 6, stop_below: float = -math.inf,
                        give_up_above: float = math.inf) -> tuple[float, list[str]]:
  """(cost, pieces) of the cheapest segmentation the greedy repeat search finds.

  An upper bound on MDL(text). A filter needs only to know whether the cost gets under a
  threshold, so it may pass that as `stop_below` (stop once under it) and as
  `give_up_above` (stop once the rounds left, each gaining no more than the last, could
  not get under it: greedy gains shrink from round to round).
  """
  pieces = [text]
  best = segmentation_cost(pieces, piece_cost)
  gain = math.inf
  candidates = _candidate_units(text, max_candidates)
  fixed: frozenset[str] = frozenset()
  for round_number in range(max_rounds):
    if best < stop_below or not candidates:
      break
    if round_number and best - gain * (max_rounds - round_number) > give_up_above:
      break  # Even rounds as good as the last could not get under `give_up_above`.
    round_best, round_pieces, round_unit = best, None, None
    for unit in candidates:
      cut = _cut(pieces, unit, fixed)
      if len(cut) == len(pieces):
        continue
      cost = segmentation_cost(cut, piece_cost)
      if cost < round_best:
        round_best, round_pieces, round_unit = cost, cut, unit
    if round_pieces is None:
      break
    gain = best - round_best
    best, pieces = round_best, round_pieces
    fixed = fixed | {round_unit}
    candidates = [unit for unit in candidates if unit != round_unit]
  return best, pieces


def brute_force_mdl(text: str, piece_cost: float = PIECE_COST) -> tuple[float, list[str]]:
  """The exact minimum over all 2^(n-1) segmentations (tests only: n up to ~14)."""
  n = len(text)
  best_cost, best_pieces = math.inf, [text]
  for mask in range(1 << max(n - 1, 0)):
    pieces, start = [], 0
    for position in range(1, n):
      if mask >> (position - 1) & 1:
        pieces.append(text[start:position])
        start = position
    pieces.append(text[start:])
    cost = segmentation_cost(pieces, piece_cost)
    if cost < best_cost:
      best_cost, best_pieces = cost, pieces
  return best_cost, best_pieces


def as_units(text: str, unit: str) -> str:
  """`text` as a string with one code point per unit: itself for 'chars'; for 'tokens',
  each distinct whitespace token mapped to one private-use code point."""
  if unit == 'chars':
    return text
  ids: dict[str, int] = {}
  return ''.join(chr(_TOKEN_CODE_POINTS + ids.setdefault(token, len(ids)) % 65534)
                 for token in text.split())


def mdl_per_unit(text: str, unit: str = 'chars', piece_cost: float = PIECE_COST,
                 stop_below: float = -math.inf) -> float:
  """The searched MDL upper bound divided by the number of units (C for no repeats).

  With `stop_below` (per unit) the search stops once it is under it.
  """
  units = as_units(text, unit)
  if not units:
    return piece_cost
  cost, _ = search_segmentation(units, piece_cost, stop_below=stop_below * len(units))
  return cost / len(units)


@register_step
@dataclasses.dataclass
class MdlRepeat(Step):
  """VolcTrans: drops pairs with a side whose MDL per unit is below `threshold` (nats per
  character by default): text made of a few repeated units. Sides shorter than
  `min_units` are never flagged, since a handful of characters cannot show a pattern."""
  name: ClassVar[str] = 'mdl_repeat'
  kind: ClassVar[str] = 'filter'
  threshold: float = 1.25
  unit: str = 'chars'
  min_units: int = 12
  piece_cost: float = PIECE_COST

  def __post_init__(self):
    if self.unit not in ('chars', 'tokens'):
      raise TypeError(f"unit must be 'chars' or 'tokens', not {self.unit!r}")

  def is_noisy(self, text: str) -> bool:
    units = as_units(text, self.unit)
    if len(units) < self.min_units:
      return False
    target = self.threshold * len(units)
    cost, _ = search_segmentation(units, self.piece_cost, stop_below=target,
                                  give_up_above=target)
    return cost < self.threshold * len(units)

  def bind(self, src_lang, tgt_lang) -> Keep:
    return lambda pair: not (self.is_noisy(pair.src) or self.is_noisy(pair.tgt))

