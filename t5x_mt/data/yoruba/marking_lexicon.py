"""How often each Yoruba word was seen with each marking: a restorer's prior over its marks.

A lexicon counts, for every word of marked training text (lower-cased and stripped of its
marks), the markings it was written with. Its most frequent marking is the dictionary
baseline of restoration; its per-letter shares are the prior a restorer adds to its
model's log-probabilities (`log_prior`), so that a word seen in training leans towards the
markings it was seen with while the model's reading of the sentence still decides between
them. Words it never saw get no prior. A lexicon is kept with a restoration run as JSON.
"""

import collections
from collections.abc import Iterable, Mapping
import json
import unicodedata

import numpy as np

from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.core.errors import UserError

# Added to every count of a marking a letter can take: a marking never seen on a word is
# unlikely, not impossible.
SMOOTHING = 0.5
# Where a restoration run keeps the lexicon of its training lines.
FILE_NAME = 'marking_lexicon.json'
_MARKING_INDEX = {marks: index for index, marks in enumerate(yoruba_marks.MARKINGS)}


def words(stripped: str) -> list[range]:
  """The positions of each word of `stripped`: a run of letters and of the combining
  characters on them."""
  spans, start = [], None
  for index, char in enumerate(stripped):
    in_word = char.isalpha() or (start is not None and unicodedata.combining(char) != 0)
    if in_word and start is None:
      start = index
    elif not in_word and start is not None:
      spans.append(range(start, index))
      start = None
  return spans + ([range(start, len(stripped))] if start is not None else [])


class MarkingLexicon:
  """{stripped lower-cased word: {its marks, one string per letter: times seen}}."""

  def __init__(self, counts: Mapping[str, Mapping[tuple[str, ...], int]]):
    self._counts = {word: collections.Counter(markings) for word, markings in counts.items()}

  @classmethod
  def from_lines(cls, marked_lines: Iterable[str]) -> 'MarkingLexicon':
    """The lexicon of marked text."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for line in marked_lines:
      stripped, marks = yoruba_marks.split_marks(line)
      for span in words(stripped):
        counts[stripped[span.start:span.stop].lower()][tuple(marks[i] for i in span)] += 1
    return cls(counts)

  def __len__(self) -> int:
    return len(self._counts)

  def most_frequent(self, word: str) -> tuple[str, ...] | None:
    """The marks of each letter of `word` (stripped) as most often seen, None if never
    seen or if lower-casing changed its length."""
    seen = self._counts.get(word.lower())
    if not seen:
      return None
    marks = seen.most_common(1)[0][0]
    return marks if len(marks) == len(word) else None

  def unknown_letters(self, stripped: str) -> np.ndarray:
    """[len(stripped)] bool: which characters belong to a word the lexicon never saw."""
    unknown = np.zeros(len(stripped), bool)
    for span in words(stripped):
      unknown[span.start:span.stop] = stripped[span.start:span.stop].lower() not in self._counts
    return unknown

  def log_prior(self, stripped: str) -> np.ndarray:
    """[len(stripped), len(MARKINGS)] float32: for each letter of a known word, the log
    of the smoothed share of its sightings with each marking among those the letter takes
    (`yoruba_marks.allowed_markings`); 0 for every other character and marking."""
    prior = np.zeros((len(stripped), len(yoruba_marks.MARKINGS)), np.float32)
    allowed = yoruba_marks.allowed_markings(stripped)
    for span in words(stripped):
      seen = self._counts.get(stripped[span.start:span.stop].lower(), {})
      seen = {marks: n for marks, n in seen.items() if len(marks) == len(span)}
      if not seen:
        continue
      for offset, position in enumerate(span):
        counts = collections.Counter()
        for marks, n in seen.items():
          counts[_MARKING_INDEX.get(marks[offset])] += n
        markings = allowed[position]
        total = sum(counts[m] for m in markings) + SMOOTHING * len(markings)
        for marking in markings:
          prior[position, marking] = np.log((counts[marking] + SMOOTHING) / total)
    return prior

  def to_json(self) -> str:
    """The counts as JSON: {word: [[marks per letter, count], ...]}."""
    return json.dumps({word: [[list(marks), n] for marks, n in seen.most_common()]
                       for word, seen in sorted(self._counts.items())}, ensure_ascii=False)

  @classmethod
  def from_json(cls, text: str, where: str) -> 'MarkingLexicon':
    """The lexicon `to_json` wrote; a UserError naming `where` if the text is not one."""
    try:
      loaded = json.loads(text)
      return cls({word: {tuple(marks): int(n) for marks, n in seen}
                  for word, seen in loaded.items()})
    except (ValueError, TypeError, AttributeError) as error:
      raise UserError(f'{where}: not a marking lexicon ({error})') from None
