"""Batches of sentence pairs, and the per-text values cleaning filters compute over them.

Cleaning filters decide over a batch of pairs at once rather than pair by pair: numpy over
the code points of all texts of a side, or `str.find` over all of them joined. Values
several filters need (lengths, word counts, how many characters of a class a text holds)
are computed once per batch, the first time a filter asks. A filter that drops pairs
leaves a view of the batch's rows; values are computed over the whole batch (dropped rows
too) until most rows are gone, when the survivors become a batch of their own.
"""

import bisect
import functools
import itertools
import re
from typing import Callable, Hashable, Iterator, Sequence

import numpy as np

# Follows every text in `Texts.codes`; above every Unicode code point, in no character class.
SEPARATOR = 0x110000
WHITESPACE = re.compile(r'\s')  # What str.split, str.strip and str.isspace call whitespace.


@functools.cache
def _all_code_points() -> str:
  return np.arange(SEPARATOR, dtype='<u4').tobytes().decode('utf-32-le', 'surrogatepass')


@functools.cache
def char_table(char_class: re.Pattern) -> np.ndarray:
  """Whether `char_class` (a pattern matching one character) matches each code point;
  indexed by code point, with a last entry, False, for the separator."""
  table = np.zeros(SEPARATOR + 1, bool)
  table[np.fromiter((match.start() for match in char_class.finditer(_all_code_points())),
                    np.int64)] = True
  return table


class Texts:
  """Texts and values derived from them, each computed on first use.

  `codes` holds the code points of every text, each followed by SEPARATOR; text i is
  `codes[starts[i]:starts[i] + lengths[i]]`, and `joined[starts[i]:...]` likewise, with a
  line break for the separator.
  """

  def __init__(self, texts: list[str]):
    self.texts = texts
    self._values: dict[Hashable, np.ndarray] = {}  # Per text: `select` keeps their rows.
    self._per_code: dict[str, np.ndarray] = {}  # Like `codes`: `select` keeps their rows.
    self._runs: dict[re.Pattern, tuple[np.ndarray, np.ndarray]] = {}

  def __len__(self) -> int:
    return len(self.texts)

  def _value(self, key: Hashable, compute: Callable[[], np.ndarray]) -> np.ndarray:
    if key not in self._values:
      self._values[key] = compute()
    return self._values[key]

  @property
  def lengths(self) -> np.ndarray:
    return self._value('lengths', lambda: np.fromiter(map(len, self.texts), np.int64,
                                                      len(self.texts)))

  @property
  def starts(self) -> np.ndarray:
    return self._value('starts', lambda: np.cumsum(self.lengths + 1) - (self.lengths + 1))

  @property
  def ends(self) -> np.ndarray:
    """Where each text's separator is."""
    return self.starts + self.lengths

  @functools.cached_property
  def joined(self) -> str:
    return '\n'.join(self.texts) + '\n'

  @functools.cached_property
  def _start_list(self) -> list[int]:
    return self.starts.tolist()

  def _code_value(self, key: str, compute: Callable[[], np.ndarray]) -> np.ndarray:
    if key not in self._per_code:
      self._per_code[key] = compute()
    return self._per_code[key]

  @property
  def codes(self) -> np.ndarray:
    def encode():
      codes = np.frombuffer(self.joined.encode('utf-32-le', 'surrogatepass'), np.uint32)
      codes = codes.copy()
      codes[self.ends] = SEPARATOR
      return codes
    return self._code_value('codes', encode)

  @property
  def _breaks(self) -> np.ndarray:
    """Per code point: whitespace or a separator."""
    def find():
      breaks = np.take(char_table(WHITESPACE), self.codes)
      breaks[self.ends] = True
      return breaks
    return self._code_value('breaks', find)

  def _per_text(self, flags: np.ndarray) -> np.ndarray:
    """How many of each text's code points (and its separator) `flags` marks."""
    return np.add.reduceat(flags, self.starts, dtype=np.int64)

  def count(self, char_class: re.Pattern) -> np.ndarray:
    """How many characters of each text `char_class` matches (len(findall(text)))."""
    return self._value(char_class, lambda: self._per_text(
        np.take(char_table(char_class), self.codes)))

  @property
  def nonspace(self) -> np.ndarray:
    """Characters that are not whitespace, per text."""
    return self._value('nonspace', lambda: self.lengths + 1 - self._per_text(self._breaks))

  @property
  def words(self) -> np.ndarray:
    """len(text.split()): runs of characters that are not whitespace, per text."""
    def count_words():
      word_starts = ~self._breaks
      word_starts[1:] &= self._breaks[:-1]
      return self._per_text(word_starts)
    return self._value('words', count_words)

  def longest_word(self) -> np.ndarray:
    """The length of each text's longest word (run of characters not whitespace)."""
    def longest():
      breaks = np.flatnonzero(self._breaks)
      # The run before each break; every text has one, at least, before its separator.
      runs = np.diff(breaks, prepend=-1) - 1
      return np.maximum.reduceat(runs, np.searchsorted(breaks, self.starts))
    return self._value('longest_word', longest)

  def last_codes(self, count: int, trailing: re.Pattern) -> np.ndarray:
    """The code points of the last `count` characters of each text once the characters
    of class `trailing` at its end are cut off (column -1 is the last), SEPARATOR where
    fewer are left."""
    table, ends = char_table(trailing), self.ends.copy()
    cutting = np.flatnonzero(self.lengths > 0)
    while len(cutting):  # Cut one character off the texts that end with one of `trailing`.
      cutting = cutting[np.take(table, self.codes[ends[cutting] - 1])]
      ends[cutting] -= 1
      cutting = cutting[ends[cutting] > self.starts[cutting]]
    back = np.arange(-count, 0)
    inside = back >= (self.starts - ends)[:, None]
    return np.where(inside, self.codes[np.where(inside, ends[:, None] + back, 0)], SEPARATOR)

  def runs_of(self, char_class: re.Pattern) -> tuple[np.ndarray, np.ndarray]:
    """The characters of class `char_class` of every text in one array, each as
    2 * code point + 1 if it starts a run of them, else 2 * code point; and the offset
    of each text's in that array (text i has `count(char_class)[i]`)."""
    def runs():
      inside = np.take(char_table(char_class), self.codes)
      positions = np.flatnonzero(inside)
      run_starts = ~inside[positions - 1]  # Before position 0: the last code, a separator.
      counts = self.count(char_class)
      return 2 * self.codes[positions] + run_starts, np.cumsum(counts) - counts
    if char_class not in self._runs:
      self._runs[char_class] = runs()
    return self._runs[char_class]

  def containing(self, literal: str) -> np.ndarray:
    """Whether each text contains `literal` (which holds no line break)."""
    def find():
      found, starts, position = np.zeros(len(self), bool), self._start_list, 0
      while (position := self.joined.find(literal, position)) >= 0:
        text = bisect.bisect_right(starts, position) - 1
        found[text] = True
        if text + 1 == len(starts):
          break
        position = starts[text + 1]
      return found
    return self._value(('containing', literal), find)

  def repeating(self, stretches: Sequence[tuple[int, int]]) -> np.ndarray:
    """Whether each text has, for some (period, run) of `stretches`, `run` consecutive
    positions i where text[i] == text[i + period]: a stretch of `run + period` characters
    repeating with that period. Periods must be consecutive and `run >= period` (fewer
    positions may compare a text's end with the next text's start)."""
    pad = max(period + run for period, run in stretches)  # Past every position compared.
    codes = np.concatenate([self.codes, np.full(pad, SEPARATOR, np.uint32)])
    windows: dict[int, np.ndarray] = {}  # By width; stale for found texts, harmlessly.
    found = np.zeros(len(self), bool)
    texts, lengths, starts = np.arange(len(self)), self.lengths, self.starts
    for block, periods, runs in _period_groups(stretches):
      # Texts found, or too short for the stretches, leave when they are most of `codes`.
      live = ~found[texts] & (lengths >= (runs + periods).min())
      if 2 * (lengths[live] + 1).sum() < len(codes) - pad:
        codes = codes[np.concatenate([np.repeat(live, lengths + 1), np.ones(pad, bool)])]
        texts, lengths, windows = texts[live], lengths[live], {}
        starts = np.cumsum(lengths + 1) - (lengths + 1)
      width = min(block, 3)
      if width not in windows:
        windows[width] = _windows(codes, width)
      positions = _stretches(codes, windows[width], width, len(codes) - pad, block, periods,
                             runs)
      hits = np.unique(np.searchsorted(starts, positions, 'right') - 1)
      found[texts[hits]] = True
      for hit in hits:  # Found texts need no more search.
        codes[starts[hit]:starts[hit] + lengths[hit]] = SEPARATOR
    return found

  def select(self, rows: np.ndarray) -> 'Texts':
    """The texts of `rows` (increasing), with the values already derived for them."""
    texts = Texts([self.texts[row] for row in rows.tolist()])
    texts._values = {key: value[rows] for key, value in self._values.items()
                     if key != 'starts'}
    if self._per_code:
      kept = np.zeros(len(self), bool)
      kept[rows] = True
      kept = np.repeat(kept, self.lengths + 1)  # The rows' code points and separators.
      texts._per_code = {key: value[kept] for key, value in self._per_code.items()}
    return texts


def _period_groups(stretches: Sequence[tuple[int, int]]
                   ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
  """(block, periods, runs) of stretches searched together: periods p to p + block - 1,
  where every stretch of `run` positions holds an aligned block of `block` positions,
  [k * block, (k + 1) * block)."""
  stretches = list(stretches)
  while stretches:
    block, size = (stretches[0][1] + 1) // 2, 1
    while size < len(stretches) and size < min(block, (stretches[size][1] + 1) // 2):
      block, size = min(block, (stretches[size][1] + 1) // 2), size + 1
    periods, runs = np.array(stretches[:size]).T
    yield block, periods, runs
    stretches = stretches[size:]


def _windows(codes: np.ndarray, width: int) -> np.ndarray:
  """A hash of codes[i:i + width] per position i: equal windows hash alike."""
  windows = codes.copy()
  for offset in range(1, width):
    np.left_shift(windows[:-offset], 11, out=windows[:-offset])
    np.bitwise_xor(windows[:-offset], codes[offset:], out=windows[:-offset])
  return windows


def _stretches(codes: np.ndarray, windows: np.ndarray, width: int, end: int, block: int,
               periods: np.ndarray, runs: np.ndarray) -> np.ndarray:
  """Positions before `end` in `codes` within stretches of `runs[r]` consecutive
  positions i where codes[i] == codes[i + periods[r]] (not separators), for any r: at
  least one position in each. `windows` (`_windows` of codes, `width` <= `block`) screen
  aligned blocks."""
  blocks = -(-end // block)
  head = windows[:blocks * block:block, None]
  # Column r of row k: the window periods[r] after the start of block k.
  tails = windows[periods[0]:periods[0] + blocks * block].reshape(blocks, block)
  rows, columns = np.divmod(np.flatnonzero(tails[:, :len(periods)] == head), len(periods))
  starts, periods, spares = rows * block, periods[columns], runs[columns] - block
  # Windows further into the block, while many blocks are left.
  for offset in range(width, block - width + 1, width):
    if len(starts) <= block:
      break
    same = windows[starts + offset] == windows[starts + offset + periods]
    starts, periods, spares = starts[same], periods[same], spares[same]
  whole = _repeats(codes, periods[:, None], starts[:, None] + np.arange(block)).all(1)
  starts, periods, spares = starts[whole], periods[whole], spares[whole]
  steps = np.arange(spares.max(initial=0))
  wanted = steps < spares[:, None]
  left = _leading_repeats(codes, periods[:, None], starts[:, None] - 1 - steps, wanted)
  right = _leading_repeats(codes, periods[:, None], starts[:, None] + block + steps, wanted)
  return starts[left + right >= spares]


def _repeats(codes: np.ndarray, periods: np.ndarray, positions: np.ndarray) -> np.ndarray:
  """Whether codes[i] == codes[i + period] at each position i (False outside codes and at
  separators)."""
  inside = (positions >= 0) & (positions + periods < len(codes))
  at = np.where(inside, positions, 0)
  return inside & (codes[at] == codes[np.where(inside, at + periods, 0)]) & (
      codes[at] != SEPARATOR)


def _leading_repeats(codes: np.ndarray, periods: np.ndarray, positions: np.ndarray,
                     wanted: np.ndarray) -> np.ndarray:
  """Per row of `positions`, how many from the first on are `_repeats` and `wanted`."""
  if not positions.shape[1]:
    return np.zeros(len(positions), np.int64)
  repeats = _repeats(codes, periods, positions) & wanted
  return np.where(repeats.all(1), positions.shape[1], repeats.argmin(1))


class Side:
  """The source or the target texts of a batch: some rows of a `Texts`.

  Its methods are those of `Texts`, for its rows; the per-text values they return are
  computed over all the rows of the `Texts`, and kept for the rows a later view needs.
  """

  def __init__(self, texts: Texts, rows: np.ndarray | None = None):
    self._texts, self._rows = texts, rows

  def __len__(self) -> int:
    return len(self._texts) if self._rows is None else len(self._rows)

  def text(self, index: int) -> str:
    return self._texts.texts[index if self._rows is None else self._rows[index]]

  def _view(self, values: np.ndarray) -> np.ndarray:
    return values if self._rows is None else values[self._rows]

  @property
  def lengths(self) -> np.ndarray:
    return self._view(self._texts.lengths)

  @property
  def nonspace(self) -> np.ndarray:
    return self._view(self._texts.nonspace)

  @property
  def words(self) -> np.ndarray:
    return self._view(self._texts.words)

  def count(self, char_class: re.Pattern) -> np.ndarray:
    return self._view(self._texts.count(char_class))

  def longest_word(self) -> np.ndarray:
    return self._view(self._texts.longest_word())

  def last_codes(self, count: int, trailing: re.Pattern) -> np.ndarray:
    return self._view(self._texts.last_codes(count, trailing))

  def runs_of(self, char_class: re.Pattern) -> tuple[np.ndarray, np.ndarray]:
    runs, offsets = self._texts.runs_of(char_class)
    return runs, self._view(offsets)

  def containing(self, literal: str) -> np.ndarray:
    return self._view(self._texts.containing(literal))

  def repeating(self, stretches: Sequence[tuple[int, int]]) -> np.ndarray:
    return self._view(self._texts.repeating(stretches))

  def select(self, keep: np.ndarray) -> 'Side':
    """The rows where `keep` is True; a `Texts` of their own once they are under half."""
    rows = np.flatnonzero(keep) if self._rows is None else self._rows[keep]
    if 2 * len(rows) < len(self._texts):
      return Side(self._texts.select(rows))
    return Side(self._texts, rows)


class PairBatch:
  """Sentence pairs of one direction (`cleaning_steps.Pair`), with their two sides."""

  def __init__(self, pairs: Sequence, src: Side | None = None, tgt: Side | None = None):
    self.pairs = list(pairs)
    self.src = src or Side(Texts([pair.src for pair in self.pairs]))
    self.tgt = tgt or Side(Texts([pair.tgt for pair in self.pairs]))

  def __len__(self) -> int:
    return len(self.pairs)

  def select(self, keep: np.ndarray) -> 'PairBatch':
    return PairBatch(list(itertools.compress(self.pairs, keep.tolist())),
                     self.src.select(keep), self.tgt.select(keep))
