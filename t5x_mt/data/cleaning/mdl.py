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
below never flags wrongly, it can only miss. Its candidate units are the maximal repeats
of a suffix array (and their periods where occurrences overlap). A greedy pass cuts them
out of the text, each time the one that lowers the cost most, through earlier cuts too;
then a beam over the same cuts and a descent over piece-level changes (split a piece
where part of it is already a piece, merge a pair, break a piece into characters) look
for cheaper segmentations. On strings of up to 14 characters it finds the exact optimum
of nearly all repeat patterns (the tests compare it with brute force).

The descent also finds what a bigram model of a long sentence's own characters saves, on
clean text as much as on noise, and costs far more than the greedy pass; the filter runs
it only where the greedy pass lands within `search_margin` of the threshold.

The threshold is per unit and in nats; `threshold` is calibrated on FLORES-200 dev (see
bench/README.md, MDL section).
"""

import dataclasses
import heapq
import math
from collections import Counter
from typing import ClassVar, Sequence

from t5x_mt.data.cleaning.steps import Keep
from t5x_mt.data.cleaning.steps import Step
from t5x_mt.data.cleaning.steps import register_step

PIECE_COST = 2.0
BEAM_WIDTH = 4
MAX_CANDIDATES = 12
_TOKEN_CODE_POINTS = 0xF0000  # Supplementary Private Use Area-A: 65,534 token ids


_XLOGX = [0.0]  # _XLOGX[k] = k ln k, grown on demand


def _xlogx_table(size: int) -> list[float]:
  while len(_XLOGX) <= size:
    _XLOGX.append(len(_XLOGX) * math.log(len(_XLOGX)))
  return _XLOGX


def segmentation_cost(pieces: Sequence[str], piece_cost: float = PIECE_COST) -> float:
  """The MDL objective of one segmentation (nats).

  The code length -sum_ab #ab ln(#ab / #a) equals sum_a #a ln #a - sum_ab #ab ln #ab,
  since the bigrams starting with a number #a: two sums over a table of k ln k. The
  histories are every piece but the last, and <s> once (1 ln 1 = 0).
  """
  counts = Counter(pieces)
  table = _xlogx_table(len(pieces))
  last = counts[pieces[-1]]
  histories = sum(map(table.__getitem__, counts.values())) - table[last] + table[last - 1]
  bigrams = sum(map(table.__getitem__, Counter(zip(pieces, pieces[1:])).values()))
  return piece_cost * sum(map(len, counts)) + histories - bigrams


def _common_prefixes(text: str, suffixes: list[int]) -> list[int]:
  """lcp[k]: the common prefix length of the suffixes at sorted ranks k - 1 and k (Kasai:
  each next suffix in text order keeps all but one character of the previous match)."""
  n = len(text)
  rank = [0] * n
  for position, start in enumerate(suffixes):
    rank[start] = position
  lcp, common = [0] * n, 0
  for start, position in enumerate(rank):
    if not position:
      common = 0
      continue
    other = suffixes[position - 1]
    limit = n - (start if start > other else other)
    while common < limit and text[start + common] == text[other + common]:
      common += 1
    lcp[position] = common
    if common:
      common -= 1
  return lcp


def _changes_ahead(before: list) -> list[int]:
  """changes[k]: the first rank j > k whose preceding character differs from rank j - 1's
  (len(before) if none), so an interval [first, last] has two different preceding
  characters exactly when changes[first] <= last. The text's first suffix has none,
  which differs from every character."""
  changes = [len(before)] * len(before)
  for rank in range(len(before) - 2, -1, -1):
    changes[rank] = rank + 1 if before[rank + 1] != before[rank] else changes[rank + 1]
  return changes


def _maximal_repeats(text: str) -> list[str]:
  """Every substring that occurs twice or more (overlaps allowed) and can be extended
  neither left nor right without losing an occurrence: the intervals of the suffix array
  whose common prefix is longer than their parent's (right-maximal), walked bottom-up
  with a stack, whose suffixes are not all preceded by the same character."""
  n = len(text)
  if n < 2:
    return []
  tails = [text[start:] for start in range(n)]
  suffixes = sorted(range(n), key=tails.__getitem__)
  lcp = _common_prefixes(text, suffixes) + [0]
  changes = _changes_ahead([text[start - 1] if start else None for start in suffixes])
  stack, repeats = [(0, 0)], []  # (common prefix length, first rank)
  for rank in range(1, n + 1):
    depth, first = lcp[rank], rank - 1
    while depth < stack[-1][0]:
      length, first = stack.pop()
      if changes[first] < rank:
        repeats.append(tails[suffixes[first]][:length])
    if depth > stack[-1][0]:
      stack.append((depth, first))
  return repeats


def _candidate_units(text: str, max_candidates: int) -> list[str]:
  """Repeated substrings, most text covered by repeats first.

  Each maximal repeat, its period where its first two occurrences overlap ('abab' in
  'ababab' gives 'ab'), and both without surrounding spaces.
  """
  units = set()
  for repeat in _maximal_repeats(text):
    first = text.find(repeat)
    units.add(repeat)
    units.add(text[first:min(text.find(repeat, first + 1), first + len(repeat))])
  units.update([stripped for stripped in map(str.strip, units) if stripped])
  scored = sorted([((text.count(unit) - 1) * len(unit), unit) for unit in units], reverse=True)
  return [unit for value, unit in scored[:max_candidates] if value > 0]


def _cut(pieces: list[str], unit: str) -> list[str]:
  """Splits every piece at the occurrences of `unit`, keeping `unit`."""
  result = []
  for piece in pieces:
    if piece == unit or unit not in piece:
      result.append(piece)
      continue
    for index, part in enumerate(piece.split(unit)):
      if index:
        result.append(unit)
      if part:
        result.append(part)
  return result


def _split_piece(pieces: list[str], piece: str, parts: Sequence[str]) -> list[str]:
  """Replaces every occurrence of `piece` with `parts`."""
  result = []
  for other in pieces:
    if other == piece:
      result.extend(parts)
    else:
      result.append(other)
  return result


def _merge_pair(pieces: list[str], first: str, second: str) -> list[str]:
  """Joins every occurrence of `first` followed by `second`, left to right."""
  result, index = [], 0
  while index < len(pieces):
    if index + 1 < len(pieces) and pieces[index] == first and pieces[index + 1] == second:
      result.append(first + second)
      index += 2
    else:
      result.append(pieces[index])
      index += 1
  return result


def _refinements(pieces: list[str]):
  """Segmentations one piece-level change away: split a piece everywhere where a part is
  already a piece (or into two equal halves), merge a pair of pieces everywhere, or
  break a piece into characters everywhere."""
  kinds = set(pieces)
  for piece in kinds:
    for at in range(1, len(piece)):
      head, tail = piece[:at], piece[at:]
      if head in kinds or tail in kinds or head == tail:
        yield _split_piece(pieces, piece, (head, tail))
    if len(piece) > 2:
      yield _split_piece(pieces, piece, piece)
  for first, second in set(zip(pieces, pieces[1:])):
    yield _merge_pair(pieces, first, second)


def _refine(cost: float, pieces: list[str], piece_cost: float,
            stop_below: float) -> tuple[float, list[str]]:
  """Steepest descent over `_refinements` until none lowers the cost."""
  while cost >= stop_below:
    best, best_pieces = cost, None
    for neighbour in _refinements(pieces):
      neighbour_cost = segmentation_cost(neighbour, piece_cost)
      if neighbour_cost < best - 1e-9:
        best, best_pieces = neighbour_cost, neighbour
    if best_pieces is None:
      break
    cost, pieces = best, best_pieces
  return cost, pieces


def _greedy_cuts(text: str, units: list[str], piece_cost: float, stop_below: float,
                 give_up_above: float) -> tuple[float, list[str]]:
  """Cuts the unit that lowers the cost most until none does.

  Lazily: a unit's gain is re-evaluated only when it tops the queue of earlier gains,
  which assumes that cutting one unit does not make another more useful. On the same
  assumption the queue's gains together bound what is left to gain: the search gives up
  once even they could not bring the cost under `give_up_above`.
  """
  pieces = [text]
  cost = segmentation_cost(pieces, piece_cost)
  queue = [(segmentation_cost(_cut(pieces, unit), piece_cost) - cost, unit) for unit in units]
  queue = [entry for entry in queue if entry[0] < 0]
  heapq.heapify(queue)
  pending = sum(gain for gain, _ in queue)
  while queue and stop_below <= cost and cost + pending <= give_up_above:
    stale, unit = heapq.heappop(queue)
    cut = _cut(pieces, unit)
    gain = segmentation_cost(cut, piece_cost) - cost
    pending -= stale
    if gain >= 0:
      continue
    if queue and gain > queue[0][0]:
      heapq.heappush(queue, (gain, unit))
      pending += gain
      continue
    cost, pieces = cost + gain, cut
  return cost, pieces


def _beam_cuts(text: str, units: list[str], piece_cost: float,
               width: int) -> list[tuple[float, list[str]]]:
  """The `width` cheapest segmentations reachable by cutting units, best first: each round
  cuts every unit out of every segmentation in the beam and keeps the cheapest, until the
  beam stops changing."""
  beam = {(text,): segmentation_cost([text], piece_cost)}
  while True:
    pool = dict(beam)
    for pieces in beam:
      for unit in units:
        cut = tuple(_cut(list(pieces), unit))
        if cut not in pool:
          pool[cut] = segmentation_cost(cut, piece_cost)
    kept = dict(sorted(pool.items(), key=lambda item: item[1])[:width])
    if kept.keys() == beam.keys():
      return [(cost, list(pieces)) for pieces, cost in kept.items()]
    beam = kept


def search_segmentation(text: str, piece_cost: float = PIECE_COST,
                        beam_width: int = BEAM_WIDTH, max_candidates: int = MAX_CANDIDATES,
                        stop_below: float = -math.inf,
                        give_up_above: float = math.inf) -> tuple[float, list[str]]:
  """(cost, pieces) of the cheapest segmentation the search finds: an upper bound on MDL.

  A greedy pass cuts repeated units out of the text; a beam over the same cuts and a
  descent over piece-level changes (`_refinements`) from each segmentation in the beam
  and from the greedy one then look for cheaper ones. A filter needs only to know whether
  the cost gets under a threshold: it may pass that as `stop_below` (stop once under it)
  and a looser bound as `give_up_above` (no search beyond the greedy pass above it).
  """
  units = _candidate_units(text, max_candidates)
  best = _greedy_cuts(text, units, piece_cost, stop_below, give_up_above)
  if best[0] < stop_below or best[0] > give_up_above:
    return best
  starts = {tuple(pieces): cost for cost, pieces in
            [best, *_beam_cuts(text, units, piece_cost, beam_width)]}
  for pieces, cost in starts.items():
    refined = _refine(cost, list(pieces), piece_cost, stop_below)
    best = min(best, refined, key=lambda found: found[0])
    if best[0] < stop_below:
      break
  return best


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
                 stop_below: float = -math.inf, give_up_above: float = math.inf) -> float:
  """The searched MDL upper bound divided by the number of units (C for no repeats).

  `stop_below` and `give_up_above` (per unit) are `search_segmentation`'s bounds.
  """
  units = as_units(text, unit)
  if not units:
    return piece_cost
  cost, _ = search_segmentation(units, piece_cost, stop_below=stop_below * len(units),
                                give_up_above=give_up_above * len(units))
  return cost / len(units)


def repeat_count(units: str) -> int:
  """How many times the shortest unit that tiles `units` (whitespace ignored) repeats."""
  compact = ''.join(units.split())
  if not compact:
    return 0
  return len(compact) // (compact + compact).find(compact, 1)


@register_step
@dataclasses.dataclass
class MdlRepeat(Step):
  """VolcTrans: drops pairs with a side whose MDL per unit is below `threshold` (nats per
  character by default): text made of a few repeated units.

  Sides shorter than `min_units` are too short for MDL per unit, whose dictionary term
  dominates there; they are noise when they are one unit repeated `min_repeats` times or
  more ('ok ok ok'). Twice is not enough: reduplication forms words ('bongobongo').
  The search escalates only for sides that its greedy pass puts within `search_margin`
  (per unit) of the threshold; the rest are kept without further search.
  """
  name: ClassVar[str] = 'mdl_repeat'
  kind: ClassVar[str] = 'filter'
  threshold: float = 1.3
  unit: str = 'chars'
  min_units: int = 12
  min_repeats: int = 3
  search_margin: float = 0.1
  piece_cost: float = PIECE_COST

  def __post_init__(self):
    if self.unit not in ('chars', 'tokens'):
      raise TypeError(f"unit must be 'chars' or 'tokens', not {self.unit!r}")

  def is_noisy(self, text: str) -> bool:
    units = as_units(text, self.unit)
    if len(units) < self.min_units:
      return repeat_count(units) >= self.min_repeats
    return mdl_per_unit(units, 'chars', self.piece_cost, stop_below=self.threshold,
                        give_up_above=self.threshold + self.search_margin) < self.threshold

  def bind(self, src_lang, tgt_lang) -> Keep:
    return lambda pair: not (self.is_noisy(pair.src) or self.is_noisy(pair.tgt))
