"""Cleaning steps: named rewrites and filters over sentence pairs, and their registry.

A step is configured once per run (its keyword arguments, from gin or a preset) and bound
once per direction, which lets it precompute what depends on the languages (a script
pattern, a Moses normaliser, a language-id model). The engines bind `bind_batch(src_lang,
tgt_lang)`, a function over a `PairBatch`: a filter returns whether to keep each pair, a
rewrite the rewritten pairs. The rule filters decide whole batches at once (numpy over
code points, one regex scan over all texts, per-text values shared through the batch, see
`t5x_mt.data.cleaning.batches`), and decide one pair as a batch of one; other steps
implement `bind(src_lang, tgt_lang)`, a function over one `Pair`, which the default
`bind_batch` calls on each pair of a batch. Steps are rebuilt from `(name, kwargs)` specs
on every worker, which is how the Apache Beam engine ships them: nothing here may hold
state that a pickled spec cannot recreate.

Steps that need the whole corpus (deduplication, conflicting translations) are declared
with kind 'corpus' and carried out by the engines (`t5x_mt.data.cleaning` locally,
`t5x_mt.data.cleaning.beam` on Beam); they are registered here so that names, presets and
reports treat every step alike.
"""

import dataclasses
import functools
import html
import re
from typing import Any, Callable, ClassVar, NamedTuple

import numpy as np
import regex

from t5x_mt.data.cleaning.batches import PairBatch
from t5x_mt.data.cleaning.batches import SEPARATOR
from t5x_mt.data.cleaning.batches import Side
from t5x_mt.core.errors import UserError


class Pair(NamedTuple):
  """One sentence pair of a direction; `scores` holds optional mined-bitext scores."""
  src: str
  tgt: str
  scores: tuple[tuple[str, float], ...] = ()


Rewrite = Callable[[Pair], Pair]
Keep = Callable[[Pair], bool]


class Step:
  """A named cleaning step; subclasses set `name`, `kind` and implement `bind` (or, for
  a `BatchFilter`, `bind_batch`)."""
  name: ClassVar[str]
  kind: ClassVar[str]  # 'rewrite', 'filter' or 'corpus'

  def bind(self, src_lang: str, tgt_lang: str) -> Callable[[Pair], Any]:
    raise NotImplementedError(f'{self.name} is carried out by the engine')

  def bind_batch(self, src_lang: str, tgt_lang: str) -> Callable[[PairBatch], Any]:
    """The step over a batch of pairs: a filter's function returns whether to keep each
    pair (a boolean array), a rewrite's the rewritten pairs. By default the per-pair
    function, called on each pair."""
    apply = self.bind(src_lang, tgt_lang)
    if self.kind == 'filter':
      return lambda batch: np.fromiter(map(apply, batch.pairs), bool, len(batch))
    return lambda batch: list(map(apply, batch.pairs))


STEPS: dict[str, type[Step]] = {}


def register_step(cls: type[Step]) -> type[Step]:
  """Class decorator: makes a step available by its `name` to presets, flags and gin."""
  STEPS[cls.name] = cls
  return cls


def step_names() -> tuple[str, ...]:
  return tuple(sorted(STEPS))


def build_step(name: str, kwargs: dict[str, Any] | None = None) -> Step:
  """The step `name` configured with `kwargs`; UserError for unknown names or arguments."""
  if name not in STEPS:
    raise UserError(f'unknown cleaning step {name!r}; known steps: {", ".join(step_names())}')
  try:
    return STEPS[name](**(kwargs or {}))
  except TypeError as e:
    raise UserError(f'cleaning step {name!r}: {e}') from None


def step_parameters(name: str) -> dict[str, Any]:
  """The default keyword arguments of step `name` (what a report records)."""
  return {field.name: field.default for field in dataclasses.fields(STEPS[name])}


# --- Text helpers shared by several steps -------------------------------------------------

# Scripts written without spaces between words: their "tokens" are characters.
UNSPACED_SCRIPTS = frozenset({'Jpan', 'Hans', 'Hant', 'Thai', 'Khmr', 'Laoo', 'Mymr', 'Tibt'})
# ISO 15924 script of a FLORES code -> Unicode Script values its text is written in.
_SCRIPT_VALUES = {'Jpan': ('Hani', 'Hira', 'Kana'), 'Hans': ('Hani',), 'Hant': ('Hani',),
                  'Hang': ('Hang', 'Hani')}


def script_of(lang: str) -> str:
  """The ISO 15924 script subtag of a FLORES-200 code ('amh_Ethi' -> 'Ethi')."""
  return lang.split('_')[1]


_WHITESPACE = re.compile(r'\s+')


def tidy_spaces(text: str) -> str:
  return _WHITESPACE.sub(' ', text).strip()


# --- Rewrites ------------------------------------------------------------------------------


@register_step
@dataclasses.dataclass
class HtmlUnescape(Step):
  """Replaces HTML entities (&amp; &#233; &nbsp;) by their characters, up to `rounds` times
  for doubly escaped web text (&amp;amp;)."""
  name: ClassVar[str] = 'html_unescape'
  kind: ClassVar[str] = 'rewrite'
  rounds: int = 2

  def bind(self, src_lang, tgt_lang) -> Rewrite:
    def unescape(text: str) -> str:
      for _ in range(self.rounds):
        if '&' not in text:
          break
        text = html.unescape(text)
      return text
    return lambda pair: pair._replace(src=unescape(pair.src), tgt=unescape(pair.tgt))


# Languages for which Moses has punctuation rules of their own; others get English rules.
_MOSES_LANGS = {'eng': 'en', 'fra': 'fr', 'deu': 'de', 'spa': 'es', 'ces': 'cs'}


@register_step
@dataclasses.dataclass
class MosesPunctuation(Step):
  """Moses' normalize-punctuation rules (sacremoses): unicode quotes, dashes and ellipses
  to ASCII, spacing around punctuation, per-language quote and number rules."""
  name: ClassVar[str] = 'moses_punctuation'
  kind: ClassVar[str] = 'rewrite'

  def bind(self, src_lang, tgt_lang) -> Rewrite:
    import sacremoses  # pylint: disable=g-import-not-at-top  (only cleaning needs it)
    def normaliser(lang):
      moses_lang = _MOSES_LANGS.get(lang.split('_')[0], 'en')
      return sacremoses.MosesPunctNormalizer(
          lang=moses_lang, pre_replace_unicode_punct=True, post_remove_control_chars=True)
    src_norm, tgt_norm = normaliser(src_lang), normaliser(tgt_lang)
    return lambda pair: pair._replace(src=src_norm.normalize(pair.src).strip(),
                                      tgt=tgt_norm.normalize(pair.tgt).strip())


@register_step
@dataclasses.dataclass
class Whitespace(Step):
  """Collapses runs of whitespace (tabs, line breaks, no-break spaces) into one space and
  strips both ends: one pair per line, one space between words (Tencent's reformatting)."""
  name: ClassVar[str] = 'whitespace'
  kind: ClassVar[str] = 'rewrite'

  def bind(self, src_lang, tgt_lang) -> Rewrite:
    return lambda pair: pair._replace(src=tidy_spaces(pair.src), tgt=tidy_spaces(pair.tgt))


@register_step
@dataclasses.dataclass
class TraditionalToSimplified(Step):
  """Converts Traditional Chinese characters to Simplified (OpenCC 't2s') on sides whose
  language is written in Simplified script (zho_Hans); other sides are left alone."""
  name: ClassVar[str] = 'traditional_to_simplified'
  kind: ClassVar[str] = 'rewrite'

  def bind(self, src_lang, tgt_lang) -> Rewrite:
    if 'Hans' not in (script_of(src_lang), script_of(tgt_lang)):
      return lambda pair: pair
    import opencc  # pylint: disable=g-import-not-at-top  (only Chinese needs it)
    convert = opencc.OpenCC('t2s').convert
    src_convert = convert if script_of(src_lang) == 'Hans' else (lambda text: text)
    tgt_convert = convert if script_of(tgt_lang) == 'Hans' else (lambda text: text)
    return lambda pair: pair._replace(src=src_convert(pair.src), tgt=tgt_convert(pair.tgt))


_OPENING = re.compile(r'[(（]')
_PARENTHESISED = re.compile(r'\s*[(（][^()（）]*[)）]')


def count_parentheses(text: str) -> int:
  return len(_OPENING.findall(text))


@register_step
@dataclasses.dataclass
class ParenthesisedText(Step):
  """VolcTrans: where the sides hold different numbers of parentheses, deletes every
  parenthesised span from both sides (the unmatched gloss is usually the only difference).
  *(choice)* both sides, so that what remains stays parallel."""
  name: ClassVar[str] = 'parenthesised_text'
  kind: ClassVar[str] = 'rewrite'

  def bind(self, src_lang, tgt_lang) -> Rewrite:
    def rewrite(pair: Pair) -> Pair:
      if count_parentheses(pair.src) == count_parentheses(pair.tgt):
        return pair
      return pair._replace(src=tidy_spaces(_PARENTHESISED.sub('', pair.src)),
                           tgt=tidy_spaces(_PARENTHESISED.sub('', pair.tgt)))
    return rewrite


# --- Filters -------------------------------------------------------------------------------

KeepMask = Callable[[PairBatch], np.ndarray]
SideTest = Callable[[Side], np.ndarray]


class BatchFilter(Step):
  """A filter that decides over whole batches of pairs (`bind_batch`); deciding one pair
  is deciding a batch of one."""
  kind: ClassVar[str] = 'filter'

  def bind(self, src_lang, tgt_lang) -> Keep:
    keep = self.bind_batch(src_lang, tgt_lang)
    return lambda pair: bool(keep(PairBatch([pair]))[0])

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    raise NotImplementedError


def per_language(test_for: Callable[[str], Callable[[str], bool]], src_lang: str,
                 tgt_lang: str) -> Keep:
  """A filter keeping pairs whose sides pass the test made for each side's language."""
  src_ok, tgt_ok = test_for(src_lang), test_for(tgt_lang)
  return lambda pair: src_ok(pair.src) and tgt_ok(pair.tgt)


def both_sides(test: SideTest) -> KeepMask:
  """Keeps the pairs whose two sides both pass `test` (a boolean per text of a side)."""
  return lambda batch: test(batch.src) & test(batch.tgt)


def per_language_sides(test_for: Callable[[str], SideTest], src_lang: str,
                       tgt_lang: str) -> KeepMask:
  """Keeps the pairs whose sides pass the test made for each side's language."""
  src_ok, tgt_ok = test_for(src_lang), test_for(tgt_lang)
  return lambda batch: src_ok(batch.src) & tgt_ok(batch.tgt)


def everywhere(side: Side) -> np.ndarray:
  return np.ones(len(side), bool)


def decide_suspects(batch: PairBatch, suspects: np.ndarray, keep: Keep) -> np.ndarray:
  """Keeps every pair but the `suspects`, which `keep` decides one by one."""
  decisions = np.ones(len(batch), bool)
  for index in np.flatnonzero(suspects).tolist():
    decisions[index] = keep(batch.pairs[index])
  return decisions


def decide_texts(side: Side, suspects: np.ndarray, ok: Callable[[str], bool]) -> np.ndarray:
  """True for every text of `side` but the `suspects`, which `ok` decides one by one."""
  decisions = np.ones(len(side), bool)
  for index in np.flatnonzero(suspects).tolist():
    decisions[index] = ok(side.text(index))
  return decisions


def same_runs(src: Side, tgt: Side, char_class: re.Pattern) -> np.ndarray:
  """Whether the two sides of each pair hold the same runs of characters of `char_class`
  (the same characters, split into runs alike)."""
  (src_runs, src_offsets), (tgt_runs, tgt_offsets) = src.runs_of(char_class), tgt.runs_of(
      char_class)
  lengths = src.count(char_class)
  same = lengths == tgt.count(char_class)
  pairs = np.flatnonzero(same & (lengths > 0))
  lengths = lengths[pairs]
  firsts = np.cumsum(lengths) - lengths  # Where each pair's characters start below.
  within = np.arange(lengths.sum()) - np.repeat(firsts, lengths)
  equal = (src_runs[np.repeat(src_offsets[pairs], lengths) + within]
           == tgt_runs[np.repeat(tgt_offsets[pairs], lengths) + within])
  same[pairs] = np.logical_and.reduceat(equal, firsts) if len(pairs) else []
  return same


def tokens(side: Side, lang: str) -> np.ndarray:
  """Whitespace-separated words per text; characters (spaces excluded) in unspaced
  scripts."""
  return side.nonspace if script_of(lang) in UNSPACED_SCRIPTS else side.words


def ratio(a: np.ndarray, b: np.ndarray) -> np.ndarray:
  """max/min of two counts per pair; infinite when one is zero and the other is not."""
  low, high = np.minimum(a, b), np.maximum(a, b)
  return np.divide(high, low, out=np.where(high > 0, np.inf, 0.0), where=low > 0)


def fraction(part: np.ndarray, whole: np.ndarray) -> np.ndarray:
  """part / whole per text, 0 where whole is 0."""
  return np.divide(part, whole, out=np.zeros(len(part)), where=whole > 0)


@register_step
@dataclasses.dataclass
class Empty(BatchFilter):
  """Drops pairs with an empty (or whitespace-only) side."""
  name: ClassVar[str] = 'empty'

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return both_sides(lambda side: side.nonspace > 0)


# U+FFFD (a decoding error upstream), control, surrogate, private-use or unassigned code
# points; tab is allowed.
_INVALID = regex.compile(r"[[\p{Cc}\p{Cs}\p{Co}\p{Cn}\uFFFD]--[\t]]", regex.V1)


@register_step
@dataclasses.dataclass
class InvalidUnicode(BatchFilter):
  """NT5: drops pairs containing replacement characters, control characters, surrogates,
  private-use or unassigned code points."""
  name: ClassVar[str] = 'invalid_unicode'

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return both_sides(lambda side: side.count(_INVALID) == 0)


@register_step
@dataclasses.dataclass
class MinChars(BatchFilter):
  """VolcTrans: drops pairs with a side shorter than `min_chars` characters."""
  name: ClassVar[str] = 'min_chars'
  min_chars: int = 30

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return both_sides(lambda side: side.lengths >= self.min_chars)


@register_step
@dataclasses.dataclass
class MaxChars(BatchFilter):
  """NT5: drops pairs with a side longer than `max_chars` characters."""
  name: ClassVar[str] = 'max_chars'
  max_chars: int = 500

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return both_sides(lambda side: side.lengths <= self.max_chars)


_URL_OR_EMAIL = re.compile(
    r'(?:\b(?:https?|ftp)://|\bwww\.\w|\b[\w.+-]+@[\w-]+\.[\w.-]*[A-Za-z]{2,})', re.IGNORECASE)
# Every match of _URL_OR_EMAIL holds one of these: '@', '://', or 'www.' in some case
# (no character but 'w' and 'W' matches 'w' ignoring case).
_ADDRESS_MARKS = ('@', '://', 'w.', 'W.')


@register_step
@dataclasses.dataclass
class UrlOrEmail(BatchFilter):
  """VolcTrans: drops pairs where either side holds a URL (http://, https://, ftp://,
  www.) or an e-mail address."""
  name: ClassVar[str] = 'url_or_email'

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    def no_address(side: Side) -> np.ndarray:
      suspects = np.logical_or.reduce([side.containing(mark) for mark in _ADDRESS_MARKS])
      return decide_texts(side, suspects, lambda text: _URL_OR_EMAIL.search(text) is None)
    return both_sides(no_address)


@register_step
@dataclasses.dataclass
class LongWord(BatchFilter):
  """Drops pairs with a word longer than `max_chars` characters (VolcTrans 100, NT5 40).
  Unspaced scripts (Chinese, Japanese, Thai...) are exempt: a whole clause is one 'word'."""
  name: ClassVar[str] = 'long_word'
  max_chars: int = 100

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    def short_words(lang):
      if script_of(lang) in UNSPACED_SCRIPTS:
        return everywhere
      return lambda side: side.longest_word() <= self.max_chars
    return per_language_sides(short_words, src_lang, tgt_lang)


# The lookahead holds the first character of every alternative: search skips other
# positions without trying the alternatives.
_CODE = re.compile(
    r'(?=[ifwsr=!&|+\-:.;{<vd#])'
    r'(?:\b(?:if|for|while|switch)\s*\(|==|!=|&&|\|\||\+\+|\+=|->|=>|::|'
    r'\.(?:get|set)[A-Z]\w*\(|\bfunction\s*\(|\breturn\s+[\w(]+\s*;|;\s*$|\{\s*\}|</?\w+[^>]*>|'
    r'\bvar\s+\w+\s*=|\bdef\s+\w+\(|\bimport\s+[\w.]+;|#include\b)')
# Every match of _CODE holds one of these characters or '::'; most prose holds none, and
# ruling them out is much faster than searching for _CODE's alternation.
_CODE_MARKS = re.compile(r'[(=&|+>;{<#]')


@register_step
@dataclasses.dataclass
class ProgrammingCode(BatchFilter):
  """VolcTrans: drops pairs where either side looks like program text: keywords followed
  by '(' (`if (`), operators (`==`, `&&`, `->`), accessor calls (`.getAttribute(`),
  markup tags or a trailing ';'."""
  name: ClassVar[str] = 'programming_code'

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    def no_code(side: Side) -> np.ndarray:
      suspects = (side.count(_CODE_MARKS) > 0) | side.containing('::')
      return decide_texts(side, suspects, lambda text: _CODE.search(text) is None)
    return both_sides(no_code)


_DIGIT = re.compile(r'\d')
_DIGITS = re.compile(r'\d+')


def numbers_in(text: str) -> frozenset[int]:
  """The numbers written with digits of any script (٣ and 3 are both 3)."""
  return frozenset(int(run) for run in _DIGITS.findall(text))


@register_step
@dataclasses.dataclass
class NumberMismatch(BatchFilter):
  """VolcTrans and Lan-Bridge: drops pairs whose sides hold different sets of numbers
  written with digits (digit runs are compared, so 1,000.5 and 1 000,5 agree). With
  `mode` 'subset' the numbers of one side need only appear on the other, which lets a
  translation spell a number out in words (Yoruba 'ọdún mẹ́tàla' for '13 years')."""
  name: ClassVar[str] = 'number_mismatch'
  mode: str = 'exact'

  def __post_init__(self):
    if self.mode not in ('exact', 'subset'):
      raise TypeError(f"mode must be 'exact' or 'subset', not {self.mode!r}")

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    subset = self.mode == 'subset'

    def keep(pair: Pair) -> bool:
      src_numbers, tgt_numbers = numbers_in(pair.src), numbers_in(pair.tgt)
      if not (src_numbers and tgt_numbers):
        return subset
      if subset:
        return src_numbers <= tgt_numbers or tgt_numbers <= src_numbers
      return src_numbers == tgt_numbers
    # Sides with the same runs of digits in the same order (none, often) hold the same
    # numbers; the others are compared number by number.
    return lambda batch: decide_suspects(
        batch, ~same_runs(batch.src, batch.tgt, _DIGIT), keep)


# End punctuation classes: a side ending in one must be matched by the other.
_END_CLASSES = {'?': '?？؟\u037e', '!': '!！', ':': ':：', '...': '…'}
_CLOSING = re.compile(r'[\s"\'»”’)\]]')  # Looked through at the end of a text.
# Per code point, 1 + the number of its class in _END_CLASSES, or 0.
_END_MARKS = np.zeros(SEPARATOR + 1, np.int8)
for number, members in enumerate(_END_CLASSES.values(), start=1):
  _END_MARKS[[ord(member) for member in members]] = number
_ELLIPSIS = list(_END_CLASSES).index('...') + 1


def end_marks(side: Side) -> np.ndarray:
  """Per text, 1 + the number in _END_CLASSES of the class of its final mark, closing
  characters looked through ('...' counts as '…'), or 0 if it ends with none."""
  *dots, last = side.last_codes(3, _CLOSING).T
  ellipsis = (last == ord('.')) & (dots[0] == ord('.')) & (dots[1] == ord('.'))
  return np.where(ellipsis, _ELLIPSIS, np.take(_END_MARKS, last))


@register_step
@dataclasses.dataclass
class EndPunctuationMismatch(BatchFilter):
  """VolcTrans and Lan-Bridge: drops pairs where one side ends with ':', '!', '?' or an
  ellipsis and the other does not end with the same mark (full-width, Arabic and Greek
  forms count as the same mark; closing quotes are looked through)."""
  name: ClassVar[str] = 'end_punctuation_mismatch'

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return lambda batch: end_marks(batch.src) == end_marks(batch.tgt)


@register_step
@dataclasses.dataclass
class ParenthesisMismatch(BatchFilter):
  """Lan-Bridge: drops pairs whose sides hold different numbers of '(' (or '（')."""
  name: ClassVar[str] = 'parenthesis_mismatch'

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return lambda batch: batch.src.count(_OPENING) == batch.tgt.count(_OPENING)


@register_step
@dataclasses.dataclass
class RepeatedUnits(BatchFilter):
  """Lan-Bridge: drops pairs with a character repeated more than `max_char_repeats` times
  in a row, a 2-character unit more than `max_pair_repeats` times, or a longer unit more
  than `max_unit_repeats` times (counting every occurrence in the run)."""
  name: ClassVar[str] = 'repeated_units'
  max_char_repeats: int = 4
  max_pair_repeats: int = 3
  max_unit_repeats: int = 2

  def __post_init__(self):
    for name in ('max_char_repeats', 'max_pair_repeats', 'max_unit_repeats'):
      if getattr(self, name) < 1:
        raise TypeError(f'{name} must be at least 1, not {getattr(self, name)}')

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    def no_repeats(side: Side) -> np.ndarray:
      # A unit of `period` characters repeated n + 1 times in a row is a stretch where
      # text[i] == text[i + period] at n * period consecutive positions.
      copies = self.max_unit_repeats + 1
      units = ((period, self.max_unit_repeats * period)
               for period in range(3, side.lengths.max() // copies + 1))
      return ~side.repeating([(1, self.max_char_repeats), (2, 2 * self.max_pair_repeats),
                              *units])
    return both_sides(no_repeats)


@register_step
@dataclasses.dataclass
class TokenCount(BatchFilter):
  """Keeps pairs whose sides both hold `min_tokens`..`max_tokens` tokens (words;
  characters in unspaced scripts). Lan-Bridge 5..150, NT5 ..150 words, M2M ..250,
  Tencent 4..512."""
  name: ClassVar[str] = 'token_count'
  min_tokens: int = 1
  max_tokens: int = 250

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    def fits(lang):
      def test(side):
        count = tokens(side, lang)
        return (self.min_tokens <= count) & (count <= self.max_tokens)
      return test
    return per_language_sides(fits, src_lang, tgt_lang)


@register_step
@dataclasses.dataclass
class TokenRatio(BatchFilter):
  """Drops pairs whose token counts differ by more than a factor `max_ratio` (Lan-Bridge
  and M2M 3, NT5 4; Tencent keeps ratios below 3)."""
  name: ClassVar[str] = 'token_ratio'
  max_ratio: float = 3.0

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return lambda batch: ratio(tokens(batch.src, src_lang),
                               tokens(batch.tgt, tgt_lang)) <= self.max_ratio


@register_step
@dataclasses.dataclass
class CharRatio(BatchFilter):
  """NT5: drops pairs whose character lengths differ by more than a factor `max_ratio`."""
  name: ClassVar[str] = 'char_ratio'
  max_ratio: float = 6.0

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return lambda batch: ratio(batch.src.lengths, batch.tgt.lengths) <= self.max_ratio


_SPACE = re.compile(' ')


@register_step
@dataclasses.dataclass
class CharsPerWord(BatchFilter):
  """NT5: drops pairs with a side averaging more than `max_chars_per_word` characters per
  word (run-together text, base64, hashes). Unspaced scripts are exempt."""
  name: ClassVar[str] = 'chars_per_word'
  max_chars_per_word: float = 12.0

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    def ok(lang):
      if script_of(lang) in UNSPACED_SCRIPTS:
        return everywhere
      return lambda side: (side.lengths - side.count(_SPACE)
                           <= self.max_chars_per_word * np.maximum(1, side.words))
    return per_language_sides(ok, src_lang, tgt_lang)


@register_step
@dataclasses.dataclass
class Identical(BatchFilter):
  """NT5: drops pairs whose sides are the same text (ignoring case and spacing)."""
  name: ClassVar[str] = 'identical'

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    # Case folding keeps whitespace and makes none, so sides that fold to the same words
    # have as many words.
    return lambda batch: decide_suspects(
        batch, batch.src.words == batch.tgt.words,
        lambda pair: pair.src.casefold().split() != pair.tgt.casefold().split())


_PUNCTUATION = regex.compile(r'[\p{P}\p{S}]')


@register_step
@dataclasses.dataclass
class PunctuationRatio(BatchFilter):
  """M2M-100/TenTrans: drops pairs with a side of which more than `max_fraction` of the
  non-space characters are punctuation or symbols."""
  name: ClassVar[str] = 'punctuation_ratio'
  max_fraction: float = 0.5

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    return both_sides(lambda side: fraction(side.count(_PUNCTUATION), side.nonspace)
                      <= self.max_fraction)


@functools.cache
def script_pattern(lang: str) -> regex.Pattern:
  """Letters and marks outside the scripts `lang` is written in (one pattern per
  language, so that its `char_table` is built once)."""
  scripts = _SCRIPT_VALUES.get(script_of(lang), (script_of(lang),))
  allowed = ''.join(rf'\p{{sc={script}}}' for script in scripts)
  return regex.compile(rf'[\p{{L}}\p{{M}}--[{allowed}\p{{sc=Zyyy}}\p{{sc=Zinh}}]]', regex.V1)


_LETTERS = regex.compile(r'[\p{L}\p{M}]')


def check_known_script(lang: str, where: str) -> None:
  """A UserError naming `where` unless the script subtag of `lang` is one Unicode knows."""
  try:
    script_pattern(lang)
  except regex.error:
    raise UserError(f'{where}: {script_of(lang)!r} in {lang} is not an ISO 15924 script '
                    'that Unicode knows (Latn, Ethi, Arab, ...)') from None


def check_script(lines: list[str], lang: str, where: str) -> None:
  """A UserError naming `where` unless `lines` are written in `lang`'s (known) script, as
  `ForeignScript` judges a sentence: at most its default share of the letters outside it."""
  foreign_pattern = script_pattern(lang)
  letters = sum(len(_LETTERS.findall(line)) for line in lines)
  foreign = sum(len(foreign_pattern.findall(line)) for line in lines)
  if foreign > ForeignScript.max_fraction * letters:
    raise UserError(f'{where}: {foreign / letters:.0%} of its letters are outside the '
                    f'{script_of(lang)} script that {lang} names')


@register_step
@dataclasses.dataclass
class ForeignScript(BatchFilter):
  """Lan-Bridge: drops pairs with a side of which more than `max_fraction` of the letters
  are outside its language's script (the FLORES code's script subtag; Jpan counts Han,
  Hiragana and Katakana). Digits, punctuation and spaces are not letters."""
  name: ClassVar[str] = 'foreign_script'
  max_fraction: float = 0.4

  def bind_batch(self, src_lang, tgt_lang) -> KeepMask:
    def ok(lang):
      foreign = script_pattern(lang)
      return lambda side: (fraction(side.count(foreign), side.count(_LETTERS))
                           <= self.max_fraction)
    return per_language_sides(ok, src_lang, tgt_lang)


@register_step
@dataclasses.dataclass
class MinedScores(Step):
  """VolcTrans, mined bitext: keeps pairs whose LASER margin score is at least
  `min_laser` and language score at least `min_language_score`, where the input carries
  those scores (columns 'laser' and 'language_score'); pairs without them pass."""
  name: ClassVar[str] = 'mined_scores'
  kind: ClassVar[str] = 'filter'
  min_laser: float = 1.06
  min_language_score: float = 0.95

  def bind(self, src_lang, tgt_lang) -> Keep:
    minimum = {'laser': self.min_laser, 'language_score': self.min_language_score}
    return lambda pair: all(value >= minimum[key] for key, value in pair.scores
                            if key in minimum)


@register_step
@dataclasses.dataclass
class Duplicates(Step):
  """Drops every repeat of a pair whose normalised source and target (NFKC, case-folded,
  letters and digits only) were already seen, keeping the first. Locally an exact set of
  128-bit hashes, or a Bloom filter of false-positive rate `bloom_error_rate` when that is
  set (for corpora whose hashes do not fit in memory); on Beam, a distributed group-by."""
  name: ClassVar[str] = 'duplicates'
  kind: ClassVar[str] = 'corpus'
  bloom_error_rate: float | None = None


@register_step
@dataclasses.dataclass
class ConflictingTranslations(Step):
  """VolcTrans: drops every pair whose normalised source occurs with more than one
  normalised target, or whose target occurs with more than one source (ambiguous
  alignments such as one UI string translated two ways). Runs after `duplicates`'s
  position in the step list, on the pairs that survived what came before."""
  name: ClassVar[str] = 'conflicting_translations'
  kind: ClassVar[str] = 'corpus'
