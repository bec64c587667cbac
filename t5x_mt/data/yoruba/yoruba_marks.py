"""Yoruba tone marks and underdots as data: stripping them, and writing them one per character.

Yoruba marks high and low tone with an acute and a grave accent (a macron, rarely, for
mid tone; mid tone is usually left bare) and writes ẹ, ọ and ṣ with a dot below. Text
comes precomposed (é, ọ), decomposed (e + U+0301) or mixed, and some letters have no
precomposed form at all (ẹ́ is ẹ + U+0301), so marks are read from the canonical
decomposition of each character cluster (a character and the combining characters after
it) and never from code points as they stand.

A restorer reads stripped text and gives each letter that can carry marks one of eight
markings (`MARKINGS`: no mark, a tone, the dot, or the dot and a tone). Its decoder writes
the marked line one character for each character of the stripped line
(`decoder_target`): a marked letter is its precomposed character where Unicode has one
(ọ, é, ń) and a private-use character where it has none (ẹ́, ọ̀, m̀), so output step i is
always input character i. Only a bare letter that takes marks (`allowed_markings`) may
get one, so that marked output always strips back to its input.
"""

from collections.abc import Sequence
import itertools
import re
import unicodedata

from t5x_mt.data import tags

LANGUAGE = 'yor_Latn'
ACUTE, GRAVE, MACRON, DOT_BELOW = '\u0301', '\u0300', '\u0304', '\u0323'
YORUBA_MARKS = frozenset((ACUTE, GRAVE, MACRON, DOT_BELOW))
TONES = ('', ACUTE, GRAVE, MACRON)
# Each marking as its combining marks in canonical order (the dot below, combining class
# 220, before a tone, 230): index = tone + 4 * dot.
MARKINGS = tuple(dot + tone for dot in ('', DOT_BELOW) for tone in TONES)
NO_MARK = 0
TONE_LETTERS = frozenset('aeiounmAEIOUNM')  # Vowels and the syllabic nasals ń, ḿ.
DOT_LETTERS = frozenset('eosEOS')
# A line trains a restorer only when at least this share of its vowels carries a tone:
# the corpora mix fully marked text with lines typed without tones (or with dots alone),
# which would teach a restorer to leave letters bare.
MIN_TONED_VOWEL_SHARE = 0.3
# A restorer reads text at most this many characters at a time (`chunks`); its training
# lines are cut into such chunks too.
CHUNK_CHARACTERS = 62
_VOWELS = frozenset('aeiouAEIOU')
_NO_MARKING = (NO_MARK,)
# Each letter that takes marks: the indices of the markings it takes.
_LETTER_MARKINGS = {
    letter: tuple(marking for marking, marks in enumerate(MARKINGS)
                  if (letter in TONE_LETTERS or marks.removeprefix(DOT_BELOW) == '')
                  and (letter in DOT_LETTERS or DOT_BELOW not in marks))
    for letter in TONE_LETTERS | DOT_LETTERS}
# Characters below this one have no canonical decomposition: they carry no mark.
_FIRST_DECOMPOSABLE = '\u00c0'
# Every combining character comes at or after this one.
_FIRST_COMBINING = '\u0300'
# The reserved pieces of a vocabulary (language tags, TBD<i>, ...) spelt out in text.
_RESERVED_PIECES = re.compile('|'.join(map(re.escape, tags.special_symbols())))
# Where the marked letters without a code point of their own are written for the decoder.
_FIRST_PRIVATE_USE = 0xE000


def _decoder_letters() -> dict[tuple[str, int], str]:
  """{(letter, marking): the one character the decoder writes for it}: the precomposed
  letter where Unicode has one, else the next private-use character."""
  letters, private = {}, itertools.count(_FIRST_PRIVATE_USE)
  for letter in sorted(_LETTER_MARKINGS):
    for marking in _LETTER_MARKINGS[letter]:
      composed = unicodedata.normalize('NFC', letter + MARKINGS[marking])
      letters[(letter, marking)] = composed if len(composed) == 1 else chr(next(private))
  return letters


_DECODER_LETTERS = _decoder_letters()


def clusters(text: str) -> list[str]:
  """`text` cut before every character that is not a combining character."""
  pieces: list[str] = []
  for char in text:
    if pieces and char >= _FIRST_COMBINING and unicodedata.combining(char):
      pieces[-1] += char
    else:
      pieces.append(char)
  return pieces


def chunks(text: str, limit: int) -> list[str]:
  """`text` cut into pieces of at most `limit` characters that join back into it, each
  ending after its last space where it has one in reach, none before a combining
  character (which belongs with the one before it)."""
  pieces = []
  while len(text) > limit:
    cut = text.rfind(' ', 0, limit) + 1 or limit
    while cut > 1 and text[cut] >= _FIRST_COMBINING and unicodedata.combining(text[cut]):
      cut -= 1
    pieces.append(text[:cut])
    text = text[cut:]
  return pieces + [text]


def has_marks(text: str) -> bool:
  """Whether any character of `text`, decomposed, carries a Yoruba mark."""
  return any(char in YORUBA_MARKS for char in unicodedata.normalize('NFD', text))


def _split_cluster(cluster: str) -> tuple[str, str]:
  """(the cluster without Yoruba marks, those marks in canonical order); a cluster without
  marks comes back exactly as it was."""
  if len(cluster) == 1 and cluster < _FIRST_DECOMPOSABLE:
    return cluster, ''
  decomposed = unicodedata.normalize('NFD', cluster)
  marks = ''.join(char for char in decomposed if char in YORUBA_MARKS)
  if not marks:
    return cluster, ''
  bare = ''.join(char for char in decomposed if char not in YORUBA_MARKS)
  return unicodedata.normalize('NFC', bare), marks


def strip_marks(text: str) -> str:
  """`text` without Yoruba marks; every cluster that carries none is left as it was."""
  return ''.join(_split_cluster(cluster)[0] for cluster in clusters(text))


def split_marks(text: str) -> tuple[str, list[str]]:
  """(`strip_marks(text)`, the marks of each of its characters): a cluster's marks go to
  its first character, in canonical order ('' where there are none)."""
  stripped, marks = [], []
  for cluster in clusters(text):
    bare, cluster_marks = _split_cluster(cluster)
    stripped.append(bare)
    marks.extend([cluster_marks] + [''] * (len(bare) - 1) if bare else [])
  return ''.join(stripped), marks


def allowed_markings(stripped: str) -> list[tuple[int, ...]]:
  """The marking indices each character of unmarked `stripped` may take: a letter's tones
  and dot if it takes them and no combining character follows it, else none but NO_MARK."""
  allowed = []
  for index, char in enumerate(stripped):
    markings = _LETTER_MARKINGS.get(char, _NO_MARKING)
    after = stripped[index + 1:index + 2]
    if after >= _FIRST_COMBINING and unicodedata.combining(after):
      markings = _NO_MARKING
    allowed.append(markings)
  return allowed


def decoder_letter(char: str, marking: int) -> str:
  """The one character the decoder writes for `char` (unmarked) with `marking`, one of
  those it takes (`allowed_markings`): `char` itself without a mark."""
  return _DECODER_LETTERS.get((char, marking), char) if marking else char


def apply_marks(stripped: str, marks: Sequence[str]) -> str:
  """`stripped` with the combining marks `marks[i]` on its character i, composed (NFC)
  where there are any; characters without marks stay as they were."""
  return ''.join(unicodedata.normalize('NFC', char + char_marks) if char_marks else char
                 for char, char_marks in zip(stripped, marks, strict=True))


def apply_markings(stripped: str, markings: Sequence[int]) -> str:
  """`stripped` with marking `markings[i]` (an index into MARKINGS) on its character i."""
  return apply_marks(stripped, [MARKINGS[marking] for marking in markings])


def _decoder_target(stripped: str, marks: Sequence[str]) -> str | None:
  """`decoder_target` of the marks `split_marks` gives, None where they are not a marking
  the character takes."""
  target = []
  for char, char_marks, allowed in zip(stripped, marks, allowed_markings(stripped)):
    marking = MARKINGS.index(char_marks) if char_marks in MARKINGS else None
    if marking not in allowed:
      return None
    target.append(decoder_letter(char, marking))
  return ''.join(target)


def decoder_target(text: str) -> tuple[str, str] | None:
  """(stripped `text`, what a restorer's decoder writes for it: `decoder_letter` of each
  character and its marking), or None where a mark of `text` is one a restorer cannot
  write: on a character that does not take it, or not one of MARKINGS (a doubled accent,
  two tones)."""
  stripped, marks = split_marks(text)
  target = _decoder_target(stripped, marks)
  return None if target is None else (stripped, target)


def _toned_share(stripped: str, marks: Sequence[str]) -> float:
  tones = [marks[i].removeprefix(DOT_BELOW) != '' for i, char in enumerate(stripped)
           if char in _VOWELS]
  return sum(tones) / len(tones) if tones else 0.0


def toned_vowel_share(text: str) -> float:
  """The share of the vowels of `text` that carry a tone mark (0 for no vowels)."""
  return _toned_share(*split_marks(text))


def _encodes_by_character(text: str) -> bool:
  """Whether a character vocabulary reads `text` one piece per character: text its
  normalisation (NFKC) leaves as it is, no control characters (SentencePiece has no piece
  for them) and no reserved piece spelt out (a language tag or `TBD<i>` typed in the
  text, which would be one piece)."""
  return (unicodedata.is_normalized('NFKC', text)
          and not any(unicodedata.category(char) == 'Cc' for char in text)
          and not _RESERVED_PIECES.search(text))


def training_examples(lines: Sequence[str]) -> dict[str, tuple[str, str]]:
  """{line: `decoder_target(line)`} of the distinct lines of `lines` that teach
  restoration: fully marked (MIN_TONED_VOWEL_SHARE), every mark writable, read one piece
  per character."""
  examples = {}
  for line in dict.fromkeys(lines):
    stripped, marks = split_marks(line)
    if _toned_share(stripped, marks) < MIN_TONED_VOWEL_SHARE or not _encodes_by_character(
        stripped):
      continue
    target = _decoder_target(stripped, marks)
    if target is not None:
      examples[line] = (stripped, target)
  return examples
