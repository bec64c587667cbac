"""Cleaning steps: named rewrites and filters over sentence pairs, and their registry.

A step is configured once per run (its keyword arguments, from gin or a preset) and bound
once per direction (`bind(src_lang, tgt_lang)`), which returns a plain function over a
`Pair`: a rewrite returns the (possibly changed) pair, a filter returns whether to keep it.
Binding per direction lets a step precompute what depends on the languages (a script
pattern, a Moses normaliser, a language-id model) so the per-pair call is cheap. Steps are
rebuilt from `(name, kwargs)` specs on every worker, which is how the Apache Beam engine
ships them: nothing here may hold state that a pickled spec cannot recreate.

Steps that need the whole corpus (deduplication, conflicting translations) are declared
with kind 'corpus' and carried out by the engines (`t5x_mt.data.cleaning` locally,
`t5x_mt.data.beam_cleaning` on Beam); they are registered here so that names, presets and
reports treat every step alike.
"""

import dataclasses
import html
import re
from collections import Counter
from typing import Any, Callable, ClassVar, NamedTuple

import regex

from t5x_mt.errors import UserError


class Pair(NamedTuple):
  """One sentence pair of a direction; `scores` holds optional mined-bitext scores."""
  src: str
  tgt: str
  scores: tuple[tuple[str, float], ...] = ()


Rewrite = Callable[[Pair], Pair]
Keep = Callable[[Pair], bool]


class Step:
  """A named cleaning step; subclasses set `name`, `kind` and implement `bind`."""
  name: ClassVar[str]
  kind: ClassVar[str]  # 'rewrite', 'filter' or 'corpus'

  def bind(self, src_lang: str, tgt_lang: str) -> Callable[[Pair], Any]:
    raise NotImplementedError(f'{self.name} is carried out by the engine')


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


def count_tokens(text: str, lang: str) -> int:
  """Whitespace-separated words; characters (spaces excluded) in unspaced scripts."""
  if script_of(lang) in UNSPACED_SCRIPTS:
    return sum(1 for char in text if not char.isspace())
  return len(text.split())


def _ratio(a: int, b: int) -> float:
  """max/min of two counts; infinite when one of them is zero and the other is not."""
  low, high = min(a, b), max(a, b)
  if low == 0:
    return 0.0 if high == 0 else float('inf')
  return high / low


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


def _both_sides(test: Callable[[str], bool]) -> Keep:
  """A filter keeping pairs whose two sides both pass `test`."""
  return lambda pair: test(pair.src) and test(pair.tgt)


def per_language(test_for: Callable[[str], Callable[[str], bool]], src_lang: str,
                 tgt_lang: str) -> Keep:
  """A filter keeping pairs whose sides pass the test made for each side's language."""
  src_ok, tgt_ok = test_for(src_lang), test_for(tgt_lang)
  return lambda pair: src_ok(pair.src) and tgt_ok(pair.tgt)


@register_step
@dataclasses.dataclass
class Empty(Step):
  """Drops pairs with an empty (or whitespace-only) side."""
  name: ClassVar[str] = 'empty'
  kind: ClassVar[str] = 'filter'

  def bind(self, src_lang, tgt_lang) -> Keep:
    return _both_sides(lambda text: bool(text.strip()))


_INVALID = regex.compile(r"[[\p{Cc}\p{Cs}\p{Co}\p{Cn}\uFFFD]--[\t]]", regex.V1)


def has_invalid_unicode(text: str) -> bool:
  """U+FFFD (a decoding error upstream), control, surrogate, private-use or unassigned
  code points; tab is allowed. Printable ASCII, most text, is valid without a search."""
  if text.isascii() and text.isprintable():
    return False
  return _INVALID.search(text) is not None


@register_step
@dataclasses.dataclass
class InvalidUnicode(Step):
  """NT5: drops pairs containing replacement characters, control characters, surrogates,
  private-use or unassigned code points."""
  name: ClassVar[str] = 'invalid_unicode'
  kind: ClassVar[str] = 'filter'

  def bind(self, src_lang, tgt_lang) -> Keep:
    return _both_sides(lambda text: not has_invalid_unicode(text))


@register_step
@dataclasses.dataclass
class MinChars(Step):
  """VolcTrans: drops pairs with a side shorter than `min_chars` characters."""
  name: ClassVar[str] = 'min_chars'
  kind: ClassVar[str] = 'filter'
  min_chars: int = 30

  def bind(self, src_lang, tgt_lang) -> Keep:
    return _both_sides(lambda text: len(text) >= self.min_chars)


@register_step
@dataclasses.dataclass
class MaxChars(Step):
  """NT5: drops pairs with a side longer than `max_chars` characters."""
  name: ClassVar[str] = 'max_chars'
  kind: ClassVar[str] = 'filter'
  max_chars: int = 500

  def bind(self, src_lang, tgt_lang) -> Keep:
    return _both_sides(lambda text: len(text) <= self.max_chars)


_URL_OR_EMAIL = re.compile(
    r'(?:\b(?:https?|ftp)://|\bwww\.\w|\b[\w.+-]+@[\w-]+\.[\w.-]*[A-Za-z]{2,})', re.IGNORECASE)


@register_step
@dataclasses.dataclass
class UrlOrEmail(Step):
  """VolcTrans: drops pairs where either side holds a URL (http://, https://, ftp://,
  www.) or an e-mail address."""
  name: ClassVar[str] = 'url_or_email'
  kind: ClassVar[str] = 'filter'

  def bind(self, src_lang, tgt_lang) -> Keep:
    def no_address(text: str) -> bool:
      if '@' not in text and '://' not in text and 'ww.' not in text.lower():
        return True  # Every match of _URL_OR_EMAIL contains one of these.
      return _URL_OR_EMAIL.search(text) is None
    return _both_sides(no_address)


@register_step
@dataclasses.dataclass
class LongWord(Step):
  """Drops pairs with a word longer than `max_chars` characters (VolcTrans 100, NT5 40).
  Unspaced scripts (Chinese, Japanese, Thai...) are exempt: a whole clause is one 'word'."""
  name: ClassVar[str] = 'long_word'
  kind: ClassVar[str] = 'filter'
  max_chars: int = 100

  def bind(self, src_lang, tgt_lang) -> Keep:
    def short_words(lang):
      if script_of(lang) in UNSPACED_SCRIPTS:
        return lambda text: True
      return lambda text: len(text) <= self.max_chars or all(
          len(word) <= self.max_chars for word in text.split())
    return per_language(short_words, src_lang, tgt_lang)


_CODE = re.compile(
    r'(?:\b(?:if|for|while|switch)\s*\(|==|!=|&&|\|\||\+\+|\+=|->|=>|::|'
    r'\.(?:get|set)[A-Z]\w*\(|\bfunction\s*\(|\breturn\s+[\w(]+\s*;|;\s*$|\{\s*\}|</?\w+[^>]*>|'
    r'\bvar\s+\w+\s*=|\bdef\s+\w+\(|\bimport\s+[\w.]+;|#include\b)')
# Every pattern of _CODE contains one of these; most prose contains none, and this one
# character class is much faster to rule out than _CODE's alternation.
_MAY_BE_CODE = re.compile(r'[(=&|+>:;{}#<]|\.[gs]et[A-Z]|\b(?:var|def|import)\b')


@register_step
@dataclasses.dataclass
class ProgrammingCode(Step):
  """VolcTrans: drops pairs where either side looks like program text: keywords followed
  by '(' (`if (`), operators (`==`, `&&`, `->`), accessor calls (`.getAttribute(`),
  markup tags or a trailing ';'."""
  name: ClassVar[str] = 'programming_code'
  kind: ClassVar[str] = 'filter'

  def bind(self, src_lang, tgt_lang) -> Keep:
    return _both_sides(
        lambda text: _MAY_BE_CODE.search(text) is None or _CODE.search(text) is None)


_DIGITS = re.compile(r'\d+')


def numbers_in(text: str) -> frozenset[int]:
  """The numbers written with digits of any script (٣ and 3 are both 3)."""
  return frozenset(int(run) for run in _DIGITS.findall(text))


@register_step
@dataclasses.dataclass
class NumberMismatch(Step):
  """VolcTrans and Lan-Bridge: drops pairs whose sides hold different sets of numbers
  written with digits (digit runs are compared, so 1,000.5 and 1 000,5 agree). With
  `mode` 'subset' the numbers of one side need only appear on the other, which lets a
  translation spell a number out in words (Yoruba 'ọdún mẹ́tàla' for '13 years')."""
  name: ClassVar[str] = 'number_mismatch'
  kind: ClassVar[str] = 'filter'
  mode: str = 'exact'

  def __post_init__(self):
    if self.mode not in ('exact', 'subset'):
      raise TypeError(f"mode must be 'exact' or 'subset', not {self.mode!r}")

  def bind(self, src_lang, tgt_lang) -> Keep:
    subset = self.mode == 'subset'

    def keep(pair: Pair) -> bool:
      has_src, has_tgt = _DIGITS.search(pair.src), _DIGITS.search(pair.tgt)
      if not has_src and not has_tgt:
        return True
      if not (has_src and has_tgt):
        return subset
      src_numbers, tgt_numbers = numbers_in(pair.src), numbers_in(pair.tgt)
      if subset:
        return src_numbers <= tgt_numbers or tgt_numbers <= src_numbers
      return src_numbers == tgt_numbers
    return keep


# End punctuation classes: a side ending in one must be matched by the other.
_END_CLASSES = {'?': '?？؟\u037e', '!': '!！', ':': ':：', '...': '…'}


_CLOSING = re.compile(r'[\s"\'»”’)\]]+$')


def end_punctuation(text: str) -> str | None:
  """The class of the sentence-final mark ('?', '!', ':', '...') or None."""
  text = _CLOSING.sub('', text)
  if text.endswith('...') or text.endswith('…'):
    return '...'
  if not text:
    return None
  for mark, members in _END_CLASSES.items():
    if text[-1] in members:
      return mark
  return None


@register_step
@dataclasses.dataclass
class EndPunctuationMismatch(Step):
  """VolcTrans and Lan-Bridge: drops pairs where one side ends with ':', '!', '?' or an
  ellipsis and the other does not end with the same mark (full-width, Arabic and Greek
  forms count as the same mark; closing quotes are looked through)."""
  name: ClassVar[str] = 'end_punctuation_mismatch'
  kind: ClassVar[str] = 'filter'

  def bind(self, src_lang, tgt_lang) -> Keep:
    return lambda pair: end_punctuation(pair.src) == end_punctuation(pair.tgt)


@register_step
@dataclasses.dataclass
class ParenthesisMismatch(Step):
  """Lan-Bridge: drops pairs whose sides hold different numbers of '(' (or '（')."""
  name: ClassVar[str] = 'parenthesis_mismatch'
  kind: ClassVar[str] = 'filter'

  def bind(self, src_lang, tgt_lang) -> Keep:
    return lambda pair: count_parentheses(pair.src) == count_parentheses(pair.tgt)


def has_repeated_unit(text: str, copies: int, min_length: int = 3) -> bool:
  """Whether some unit of `min_length`+ characters occurs `copies` times in a row.

  Such a run repeats the unit's first `min_length` characters `copies` times, so only
  n-grams that frequent are followed up (a backreference regex is 10x slower).
  """
  grams = Counter(zip(*(text[offset:] for offset in range(min_length))))
  for gram, count in grams.items():
    if count < copies:
      continue
    gram, starts = ''.join(gram), []
    start = text.find(gram)
    while start >= 0:
      starts.append(start)
      start = text.find(gram, start + 1)
    for number, first in enumerate(starts):
      for later in starts[number + 1:]:
        period = later - first
        if first + copies * period > len(text):
          break
        if period >= min_length and text[first:first + period] * copies == text[
            first:first + copies * period]:
          return True
  return False


@register_step
@dataclasses.dataclass
class RepeatedUnits(Step):
  """Lan-Bridge: drops pairs with a character repeated more than `max_char_repeats` times
  in a row, a 2-character unit more than `max_pair_repeats` times, or a longer unit more
  than `max_unit_repeats` times (counting every occurrence in the run)."""
  name: ClassVar[str] = 'repeated_units'
  kind: ClassVar[str] = 'filter'
  max_char_repeats: int = 4
  max_pair_repeats: int = 3
  max_unit_repeats: int = 2

  def bind(self, src_lang, tgt_lang) -> Keep:
    short_units = re.compile(
        rf'(.)\1{{{self.max_char_repeats},}}|(..)\2{{{self.max_pair_repeats},}}', re.DOTALL)
    copies = self.max_unit_repeats + 1
    return _both_sides(lambda text: short_units.search(text) is None
                       and not has_repeated_unit(text, copies))


@register_step
@dataclasses.dataclass
class TokenCount(Step):
  """Keeps pairs whose sides both hold `min_tokens`..`max_tokens` tokens (words;
  characters in unspaced scripts). Lan-Bridge 5..150, NT5 ..150 words, M2M ..250,
  Tencent 4..512."""
  name: ClassVar[str] = 'token_count'
  kind: ClassVar[str] = 'filter'
  min_tokens: int = 1
  max_tokens: int = 250

  def bind(self, src_lang, tgt_lang) -> Keep:
    def fits(lang):
      return lambda text: self.min_tokens <= count_tokens(text, lang) <= self.max_tokens
    return per_language(fits, src_lang, tgt_lang)


@register_step
@dataclasses.dataclass
class TokenRatio(Step):
  """Drops pairs whose token counts differ by more than a factor `max_ratio` (Lan-Bridge
  and M2M 3, NT5 4; Tencent keeps ratios below 3)."""
  name: ClassVar[str] = 'token_ratio'
  kind: ClassVar[str] = 'filter'
  max_ratio: float = 3.0

  def bind(self, src_lang, tgt_lang) -> Keep:
    return lambda pair: _ratio(count_tokens(pair.src, src_lang),
                               count_tokens(pair.tgt, tgt_lang)) <= self.max_ratio


@register_step
@dataclasses.dataclass
class CharRatio(Step):
  """NT5: drops pairs whose character lengths differ by more than a factor `max_ratio`."""
  name: ClassVar[str] = 'char_ratio'
  kind: ClassVar[str] = 'filter'
  max_ratio: float = 6.0

  def bind(self, src_lang, tgt_lang) -> Keep:
    return lambda pair: _ratio(len(pair.src), len(pair.tgt)) <= self.max_ratio


@register_step
@dataclasses.dataclass
class CharsPerWord(Step):
  """NT5: drops pairs with a side averaging more than `max_chars_per_word` characters per
  word (run-together text, base64, hashes). Unspaced scripts are exempt."""
  name: ClassVar[str] = 'chars_per_word'
  kind: ClassVar[str] = 'filter'
  max_chars_per_word: float = 12.0

  def bind(self, src_lang, tgt_lang) -> Keep:
    def ok(lang):
      if script_of(lang) in UNSPACED_SCRIPTS:
        return lambda text: True
      return lambda text: (len(text.replace(' ', ''))
                           <= self.max_chars_per_word * max(1, len(text.split())))
    return per_language(ok, src_lang, tgt_lang)


@register_step
@dataclasses.dataclass
class Identical(Step):
  """NT5: drops pairs whose sides are the same text (ignoring case and spacing)."""
  name: ClassVar[str] = 'identical'
  kind: ClassVar[str] = 'filter'

  def bind(self, src_lang, tgt_lang) -> Keep:
    return lambda pair: (pair.src.casefold().split() != pair.tgt.casefold().split())


_PUNCTUATION = regex.compile(r'[\p{P}\p{S}]')


def punctuation_fraction(text: str) -> float:
  """Punctuation and symbol characters over non-space characters."""
  visible = len(''.join(text.split()))
  if not visible:
    return 0.0
  return len(_PUNCTUATION.findall(text)) / visible


@register_step
@dataclasses.dataclass
class PunctuationRatio(Step):
  """M2M-100/TenTrans: drops pairs with a side of which more than `max_fraction` of the
  non-space characters are punctuation or symbols."""
  name: ClassVar[str] = 'punctuation_ratio'
  kind: ClassVar[str] = 'filter'
  max_fraction: float = 0.5

  def bind(self, src_lang, tgt_lang) -> Keep:
    return _both_sides(lambda text: punctuation_fraction(text) <= self.max_fraction)


def script_pattern(lang: str) -> regex.Pattern:
  """Letters and marks outside the scripts `lang` is written in."""
  scripts = _SCRIPT_VALUES.get(script_of(lang), (script_of(lang),))
  allowed = ''.join(rf'\p{{sc={script}}}' for script in scripts)
  return regex.compile(rf'[\p{{L}}\p{{M}}--[{allowed}\p{{sc=Zyyy}}\p{{sc=Zinh}}]]', regex.V1)


_LETTERS = regex.compile(r'[\p{L}\p{M}]')


@register_step
@dataclasses.dataclass
class ForeignScript(Step):
  """Lan-Bridge: drops pairs with a side of which more than `max_fraction` of the letters
  are outside its language's script (the FLORES code's script subtag; Jpan counts Han,
  Hiragana and Katakana). Digits, punctuation and spaces are not letters."""
  name: ClassVar[str] = 'foreign_script'
  kind: ClassVar[str] = 'filter'
  max_fraction: float = 0.4

  def bind(self, src_lang, tgt_lang) -> Keep:
    def ok(lang):
      foreign = script_pattern(lang)
      if script_of(lang) == 'Latn':
        # Latin text that is pure ASCII has no foreign letters: skip the regex.
        return lambda text: text.isascii() or self._fraction(foreign, text) <= self.max_fraction
      return lambda text: self._fraction(foreign, text) <= self.max_fraction
    return per_language(ok, src_lang, tgt_lang)

  @staticmethod
  def _fraction(foreign: regex.Pattern, text: str) -> float:
    letters = len(_LETTERS.findall(text))
    return len(foreign.findall(text)) / letters if letters else 0.0


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
