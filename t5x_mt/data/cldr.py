"""The embedded default corpus: multi-way parallel text rendered from Unicode CLDR data.

`babel` ships the CLDR locale data, so this corpus needs no files and no network: for each
WMT22 African-task language that CLDR covers, it renders dates, lists of language names,
quantities with units, relative times and the names of languages and territories. Each
row {FLORES code: text} holds the languages whose *own* CLDR data can render it: text that
a locale would only inherit from CLDR's root (placeholder month names 'M01', patterns such
as '+{0} d') is left out, never filled in from English. So a language gets as many rows as
CLDR really has for it, and the corpus is imbalanced the way real data is (eng_Latn and
fra_Latn render everything; nya_Latn and ssw_Latn little beyond dates).

A WMT22 language that CLDR has no locale for is not in the corpus at all: `CLDR_MISSING`
names them (Umbundu, umb_Latn, has none). That gap lies in CLDR itself, not in a run's
settings, so it is logged at debug level rather than warned about by every command.

Validation and test rows are compositions never seen in training, built from parts that are:
dates in years absent from training, unit quantities with numbers absent from training,
relative times whose (count, unit, direction) never occurs in training, and lists whose set
of language names never occurs as a training list. Names of languages and territories are
single words to memorise, so they are training rows only.

A fourth split, 'long', holds lists of more language names than any training list has
(`LONG_LIST_LENGTHS` against `LIST_LENGTHS`): sentences longer than every one trained on,
built from trained names and patterns, to measure how a model generalises to lengths beyond
its training (docs/methods.md#model). Its draws never touch the other splits' generators,
so those stay as they were.

All texts are NFC with plain spaces: CLDR writes no-break and narrow no-break spaces inside
numbers and dates, which SentencePiece's NFKC normalisation maps to ' ' anyway, and real
corpora (FLORES-200, NTREX-128) use ' ' (and ’ where CLDR's Hausa has a prime ′).
"""

import datetime
import functools
import itertools
import logging
import math
import pickle
import random
import re
import time
import unicodedata
from decimal import Decimal
from typing import Any, Callable, Hashable, Sequence

import babel
import babel.dates
import babel.lists
import babel.localedata
import babel.units

from t5x_mt.data.corpus_types import MultiwayCorpus
from t5x_mt.core.errors import UserError
from t5x_mt.core.languages import CLDR_LOCALE_TO_FLORES
from t5x_mt.core.languages import WMT22_AFRICAN

_FLORES_TO_LOCALE = {flores: locale for locale, flores in CLDR_LOCALE_TO_FLORES.items()}
# FLORES codes of the WMT22 African set that babel's CLDR data has, and those it lacks.
CLDR_LANGUAGES: tuple[str, ...] = tuple(
    code for code in WMT22_AFRICAN if babel.localedata.exists(_FLORES_TO_LOCALE[code]))
CLDR_MISSING: tuple[str, ...] = tuple(c for c in WMT22_AFRICAN if c not in CLDR_LANGUAGES)

KINDS = ('dates', 'lists', 'units', 'relative_times', 'names')
SPLITS = ('train', 'validation', 'test')

FIRST_YEAR, LAST_YEAR = 1900, 2019  # Dates come from these years.
HELD_OUT_YEARS = 6  # Years per evaluation split, never used in training dates.
DATE_STYLES = ('full', 'long')
UNITS = ('length-kilometer', 'length-meter', 'mass-kilogram', 'mass-tonne', 'volume-liter',
         'area-square-meter', 'speed-kilometer-per-hour', 'temperature-celsius',
         'digital-megabyte', 'digital-gigabyte')
# Quantities: integers, halves and some large numbers (whose digit grouping differs by
# locale); none is a year in [FIRST_YEAR, LAST_YEAR], so no number looks like a test year.
QUANTITIES = (tuple(Decimal(n) for n in range(1, 101))
              + tuple(Decimal(n) + Decimal('0.5') for n in range(10))
              + tuple(Decimal(n) for n in range(150, 1000, 50))
              + tuple(Decimal(n) for n in (1200, 1500, 2500, 5000, 10000, 25000)))
ALWAYS_TRAINED_QUANTITIES = (Decimal(1), Decimal(2))  # Keep singular/dual forms in training.
HELD_OUT_QUANTITIES = 8  # Numbers per evaluation split, never used in training units.
TIME_UNITS = ('year', 'month', 'week', 'day', 'hour', 'minute')
TIME_COUNTS = tuple(range(1, 61))
TIME_DIRECTIONS = ('future', 'past', 'none')  # 'none': a duration ('3 days').
# Language names listed in 'lists' rows: the WMT22 languages and some widely spoken ones.
# ('luo' is left out: French CLDR has no name for it.)
LISTED_LANGUAGES = ('af', 'am', 'ar', 'de', 'en', 'es', 'ff', 'fr', 'ha', 'hi', 'ig', 'it',
                    'ja', 'lg', 'ln', 'nso', 'ny', 'om', 'pt', 'ru', 'rw', 'sn', 'so',
                    'sw', 'tn', 'ts', 'wo', 'xh', 'yo', 'zh', 'zu')
LIST_LENGTHS = (2, 3, 4)
LONG_LIST_LENGTHS = (10, 11, 12)  # Names per list of the 'long' split.

_SECONDS = dict(babel.dates.TIMEDELTA_UNITS)
_SPACES = re.compile(r'[^\S\n]+')  # Any Unicode space (incl. U+00A0, U+202F) but newline.

Row = dict[str, str]


def _own_data(locale_id: str) -> dict[str, Any]:
  """The data CLDR gives `locale_id` itself, without what it inherits from CLDR root.

  Read from babel's data file, not with `babel.localedata.load(merge_inherited=False)`:
  that call stores the unmerged data in babel's cache, where every later `babel.Locale`
  of that id would find it (and fail to format dates).
  """
  with open(babel.localedata.resolve_locale_filename(locale_id), 'rb') as data_file:
    return pickle.load(data_file)


class _Locale:
  """A CLDR locale: babel's merged view (for formatting) and its own data (for checks)."""

  def __init__(self, locale_id: str):
    self.flores = CLDR_LOCALE_TO_FLORES[locale_id]
    self.babel = babel.Locale.parse(locale_id)
    self.own = _own_data(locale_id)

  def own_get(self, *keys: Any) -> Any:
    """The own-data value at a path of keys, or None if the locale does not define it."""
    value = self.own
    for key in keys:
      if not isinstance(value, dict) or key not in value:
        return None
      value = value[key]
    return value

  def covers_plural(self, patterns: dict[str, str] | None, value: Any,
                         other_ok: bool) -> bool:
    """Whether own `patterns` cover `value`'s plural form (or 'other' where babel uses it)."""
    if not patterns:
      return False
    form = self.babel.plural_form(value)
    return form in patterns or (other_ok and 'other' in patterns)


def _clean(text: str) -> str:
  """NFC, plain single spaces, and ’ for the prime (′) CLDR's Hausa writes in sa′o′i."""
  text = unicodedata.normalize('NFC', text).replace('\u2032', '\u2019')
  return _SPACES.sub(' ', text).strip()


@functools.cache
def _locales() -> tuple[_Locale, ...]:
  """The CLDR locales of CLDR_LANGUAGES (loaded once: babel's data never changes)."""
  if CLDR_MISSING:
    logging.debug('CLDR (babel %s) has no data for %s: the cldr corpus leaves them out',
                  babel.__version__, ', '.join(CLDR_MISSING))
  return tuple(_Locale(_FLORES_TO_LOCALE[code]) for code in CLDR_LANGUAGES)


# Renderers: (locale, composition) -> text, or None where the locale's own data lacks it.


def _render_date(loc: _Locale, composition: tuple[datetime.date, str]) -> str | None:
  """Needs the locale's own month and weekday names; the pattern may be CLDR root's.

  Root's pattern ('y MMMM d, EEEE') is what CLDR resolves for locales without one of their
  own (kin, nya, sna, ssw, tsn, tso): word order is generic there, the words are not.
  """
  day, style = composition
  if not (loc.own_get('months', 'format', 'wide') and loc.own_get('days', 'format', 'wide')):
    return None  # Root would write 'M07' and 'Mon'.
  return babel.dates.format_date(day, style, locale=loc.babel)


def _render_list(loc: _Locale, composition: tuple[str, ...]) -> str | None:
  """Needs the locale's own 2-item and closing conjunctions: root's have no 'and' word.

  (Yoruba's CLDR has only a 2-item pattern, and it glues words: '{0} àti{1}'.)
  """
  if not (loc.own_get('list_patterns', 'standard', '2')
          and loc.own_get('list_patterns', 'standard', 'end')):
    return None
  names = [loc.own_get('languages', code) for code in composition]
  if None in names:
    return None
  return babel.lists.format_list(names, style='standard', locale=loc.babel)


def _render_unit(loc: _Locale, composition: tuple[Decimal, str]) -> str | None:
  """The long form, or the short one where the locale has no long one (as CLDR resolves)."""
  quantity, unit = composition
  for length in ('long', 'short'):
    patterns = loc.own_get('unit_patterns', unit, length)
    if loc.covers_plural(patterns, quantity, other_ok=False):
      return babel.units.format_unit(quantity, unit, length=length, locale=loc.babel)
  return None  # babel would fall back to root's '{0} km'.


def _render_relative_time(loc: _Locale, composition: tuple[int, str, str]) -> str | None:
  """'in 3 days' / '3 days ago' (CLDR relative-time fields) or '3 days' (a duration)."""
  count, unit, direction = composition
  if direction == 'none':
    own = loc.own_get('unit_patterns', f'duration-{unit}')
    patterns = own and (own.get('long') or own.get('short'))
  else:
    patterns = loc.own_get('date_fields', unit, direction)
  if not loc.covers_plural(patterns, count, other_ok=True):
    return None  # Root would write '+3 d'.
  sign = -1 if direction == 'past' else 1
  return babel.dates.format_timedelta(
      datetime.timedelta(seconds=sign * count * _SECONDS[unit]), granularity=unit,
      threshold=float('inf'), add_direction=direction != 'none', format='long',
      locale=loc.babel)


def _rows(compositions: Sequence[Any], render: Callable[[_Locale, Any], str | None]
          ) -> list[Row]:
  """One row per composition over the locales that render it (eng_Latn always does)."""
  rows = []
  for composition in compositions:
    row = {}
    for loc in _locales():
      text = render(loc, composition)
      if text is not None and text.strip():
        row[loc.flores] = _clean(text)
    if len(row) >= 2:
      rows.append(row)
  return rows


# Compositions: which dates, quantities, ... go to which split.


def _sample_unique(draw: Callable[[], Hashable], count: int,
                   capacity: int, what: str, key: Callable[[Any], Hashable] = lambda c: c,
                   exclude: frozenset = frozenset()) -> list[Any]:
  """`count` distinct draws (distinct under `key`, none in `exclude`), in draw order."""
  if count > capacity:
    raise UserError(f'cldr corpus: {count} {what} requested, at most {capacity} possible')
  seen, chosen = set(exclude), []
  while len(chosen) < count:
    composition = draw()
    if key(composition) not in seen:
      seen.add(key(composition))
      chosen.append(composition)
  return chosen


def _date_compositions(rng: random.Random, counts: dict[str, int]) -> dict[str, list[Any]]:
  """Dates in (full or long) style; each evaluation split has its own unseen years."""
  years = list(range(FIRST_YEAR, LAST_YEAR + 1))
  rng.shuffle(years)
  years_by_split = {'validation': years[:HELD_OUT_YEARS],
                    'test': years[HELD_OUT_YEARS:2 * HELD_OUT_YEARS],
                    'train': years[2 * HELD_OUT_YEARS:]}

  def sampler(split_years: list[int]) -> Callable[[], tuple[datetime.date, str]]:
    return lambda: (datetime.date(rng.choice(split_years), 1, 1)
                    + datetime.timedelta(days=rng.randrange(365)), rng.choice(DATE_STYLES))

  return {split: _sample_unique(sampler(sorted(years_by_split[split])), counts[split],
                                365 * len(years_by_split[split]) * len(DATE_STYLES),
                                f'{split} dates')
          for split in SPLITS}


def _unit_compositions(rng: random.Random, counts: dict[str, int]) -> dict[str, list[Any]]:
  """(quantity, unit); each evaluation split has its own quantities unseen in training."""
  candidates = [q for q in QUANTITIES if q not in ALWAYS_TRAINED_QUANTITIES]
  rng.shuffle(candidates)
  held = 2 * HELD_OUT_QUANTITIES
  quantities = {'validation': candidates[:HELD_OUT_QUANTITIES],
                'test': candidates[HELD_OUT_QUANTITIES:held],
                'train': list(ALWAYS_TRAINED_QUANTITIES) + candidates[held:]}
  return {split: _sample_unique(
              lambda q=quantities[split]: (rng.choice(q), rng.choice(UNITS)),
              counts[split], len(quantities[split]) * len(UNITS), f'{split} unit quantities')
          for split in SPLITS}


def _relative_time_compositions(rng: random.Random, counts: dict[str, int]
                                ) -> dict[str, list[Any]]:
  """(count, unit, direction) triples; evaluation triples never occur in training."""
  triples = list(itertools.product(TIME_COUNTS, TIME_UNITS, TIME_DIRECTIONS))
  rng.shuffle(triples)
  held = counts['validation'] + counts['test']
  if held + counts['train'] > len(triples):
    raise UserError(f'cldr corpus: {held + counts["train"]} relative times requested, at most '
                    f'{len(triples)} possible')
  return {'validation': triples[:counts['validation']],
          'test': triples[counts['validation']:held],
          'train': triples[held:held + counts['train']]}


def _list_compositions(rng: random.Random, counts: dict[str, int]) -> dict[str, list[Any]]:
  """Lists of language codes; an evaluation list's set of names is never a training list's."""
  def draw() -> tuple[str, ...]:
    return tuple(rng.sample(LISTED_LANGUAGES, rng.choice(LIST_LENGTHS)))

  capacity = sum(len(list(itertools.combinations(LISTED_LANGUAGES, n))) for n in LIST_LENGTHS)
  chosen: dict[str, list[Any]] = {}
  used: frozenset = frozenset()
  for split in ('validation', 'test', 'train'):
    chosen[split] = _sample_unique(draw, counts[split], capacity - len(used),
                                   f'{split} lists', key=frozenset, exclude=used)
    used |= {frozenset(c) for c in chosen[split]}
  return chosen


def _long_list_compositions(rng: random.Random, count: int) -> list[tuple[str, ...]]:
  """`count` distinct lists of LONG_LIST_LENGTHS names, longer than any training list."""
  capacity = sum(math.comb(len(LISTED_LANGUAGES), n) for n in LONG_LIST_LENGTHS)
  return _sample_unique(
      lambda: tuple(rng.sample(LISTED_LANGUAGES, rng.choice(LONG_LIST_LENGTHS))), count,
      capacity, 'long lists', key=frozenset)


def _name_rows() -> list[Row]:
  """Names of languages and territories as each locale's own CLDR data gives them.

  A name spelled exactly as in English is left out for the other locales: it is most often
  an untranslated entry, and at best a copy task (the lists rows still use such names).
  """
  english = next(loc for loc in _locales() if loc.flores == 'eng_Latn')

  def own_name(loc: _Locale, field_and_key: tuple[str, str]) -> str | None:
    name = loc.own_get(*field_and_key)
    if loc is not english and name == english.own_get(*field_and_key):
      return None
    return name

  keys = [(field, key) for field in ('languages', 'territories')
          for key in sorted(english.own[field])]
  return _rows(keys, own_name)


_COMPOSERS = {'dates': (_date_compositions, _render_date),
              'lists': (_list_compositions, _render_list),
              'units': (_unit_compositions, _render_unit),
              'relative_times': (_relative_time_compositions, _render_relative_time)}


def cldr_rows(seed: int = 0, train_rows_per_kind: int = 800,
              eval_rows_per_kind: int = 20) -> dict[str, dict[str, list[Row]]]:
  """{split: {kind: rows}}: the CLDR corpus before it is flattened, for statistics and tests.

  Each generated kind has `train_rows_per_kind` compositions in 'train' and
  `eval_rows_per_kind` in 'validation' and in 'test' (a composition no locale but eng/fra
  can render is dropped, so counts can fall short by a few); 'names' is train-only and
  holds every language and territory name English CLDR has. 'long' holds
  `eval_rows_per_kind` lists of LONG_LIST_LENGTHS names and nothing else.
  """
  counts = {'train': train_rows_per_kind, 'validation': eval_rows_per_kind,
            'test': eval_rows_per_kind}
  if min(counts.values()) < 0:
    raise UserError(f'cldr corpus: row counts must be >= 0, got {counts}')
  result: dict[str, dict[str, list[Row]]] = {split: {} for split in SPLITS}
  for kind, (compose, render) in _COMPOSERS.items():
    compositions = compose(random.Random(f'cldr/{kind}/{seed}'), counts)
    for split in SPLITS:
      result[split][kind] = _rows(compositions[split], render)
  result['train']['names'] = _name_rows()
  for split in ('validation', 'test'):
    result[split]['names'] = []
  long_lists = _long_list_compositions(random.Random(f'cldr/long_lists/{seed}'),
                                       eval_rows_per_kind)
  result['long'] = {kind: [] for kind in KINDS}
  result['long']['lists'] = _rows(long_lists, _render_list)
  return result


def cldr_corpus(seed: int = 0, train_rows_per_kind: int = 800,
                eval_rows_per_kind: int = 20) -> MultiwayCorpus:
  """The CLDR corpus as splits 'train', 'validation', 'test' and 'long' (see `cldr_rows`).

  Deterministic in `seed`; the default sizes suit the CPU demo (about 4,100 eng_Latn
  training rows, 80 validation, 80 test and 20 long rows) and take about a second to
  render.
  """
  start = time.perf_counter()
  by_kind = cldr_rows(seed, train_rows_per_kind, eval_rows_per_kind)
  rows = {split: [row for kind in KINDS for row in by_kind[split][kind]] for split in by_kind}
  logging.info('Rendered the CLDR corpus (%s rows) in %.1f s',
               ', '.join(f'{split} {len(split_rows)}' for split, split_rows in rows.items()),
               time.perf_counter() - start)
  return MultiwayCorpus('cldr', rows)
