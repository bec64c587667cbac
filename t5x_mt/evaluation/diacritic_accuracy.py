"""How well marks are restored, and what a restorer must beat to be of any use.

Both figures count only what a restorer decides: the letters that can carry a Yoruba mark
(`yoruba_marks.TONE_LETTERS` and `DOT_LETTERS`), and the words that hold one. A letter is
right when it carries exactly the reference's marks (none included); a word, a run of
letters, when all of its letters do. Hypotheses must strip to what their references strip
to, so that letters line up one to one.

Two baselines restore without a model: `identity` leaves the text unmarked, `Dictionary`
gives each word the marking seen most often on it in the training text (lower-cased, as
stripped) and leaves words it never saw unmarked.
"""

from collections.abc import Iterable, Sequence
import dataclasses

from t5x_mt.data.yoruba import marking_lexicon
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.core.errors import UserError

MARKABLE_LETTERS = yoruba_marks.TONE_LETTERS | yoruba_marks.DOT_LETTERS


@dataclasses.dataclass(frozen=True)
class Accuracy:
  """Counts of markable letters and of words holding one, and how many were right."""
  letters: int = 0
  right_letters: int = 0
  words: int = 0
  right_words: int = 0

  def __add__(self, other: 'Accuracy') -> 'Accuracy':
    return Accuracy(*(a + b for a, b in zip(dataclasses.astuple(self),
                                            dataclasses.astuple(other))))

  @property
  def char_accuracy(self) -> float:
    """Right markable letters / markable letters (0 when there are none)."""
    return self.right_letters / self.letters if self.letters else 0.0

  @property
  def word_accuracy(self) -> float:
    """Right words / words holding a markable letter (0 when there are none)."""
    return self.right_words / self.words if self.words else 0.0


def line_accuracy(hypothesis: str, reference: str, where: str = 'line') -> Accuracy:
  """The counts of one restored line against its marked reference; a UserError naming
  `where` when the two do not strip to the same text."""
  stripped, reference_marks = yoruba_marks.split_marks(reference)
  hypothesis_stripped, hypothesis_marks = yoruba_marks.split_marks(hypothesis)
  if hypothesis_stripped != stripped:
    raise UserError(f'{where}: the restored line does not strip to its reference\'s '
                    f'letters ({hypothesis_stripped[:40]!r} against {stripped[:40]!r})')
  right = [hypothesis_marks[i] == reference_marks[i] for i in range(len(stripped))]
  markable = [char in MARKABLE_LETTERS for char in stripped]
  counted = [span for span in marking_lexicon.words(stripped) if any(markable[i] for i in span)]
  return Accuracy(letters=sum(markable),
                  right_letters=sum(r for r, m in zip(right, markable) if m),
                  words=len(counted),
                  right_words=sum(all(right[i] for i in span) for span in counted))


def accuracy(hypotheses: Sequence[str], references: Sequence[str]) -> Accuracy:
  """The counts of restored lines against their references, summed."""
  if len(hypotheses) != len(references):
    raise UserError(f'{len(hypotheses)} restored lines for {len(references)} references')
  return sum((line_accuracy(h, r, f'line {n}')
              for n, (h, r) in enumerate(zip(hypotheses, references), start=1)), Accuracy())


def identity(lines: Sequence[str]) -> list[str]:
  """The identity baseline: the lines as they are (unmarked)."""
  return list(lines)


class Dictionary:
  """The dictionary baseline: each word's most frequent marking in the training lines."""

  def __init__(self, training_lines: Iterable[str]):
    self._lexicon = marking_lexicon.MarkingLexicon.from_lines(training_lines)

  def __len__(self) -> int:
    return len(self._lexicon)

  def restore(self, line: str) -> str:
    """`line` (unmarked) with each word it knows marked as seen most often."""
    marks = [''] * len(line)
    for span in marking_lexicon.words(line):
      known = self._lexicon.most_frequent(line[span.start:span.stop])
      if known is not None:
        marks[span.start:span.stop] = known
    return yoruba_marks.apply_marks(line, marks)

  def restore_lines(self, lines: Sequence[str]) -> list[str]:
    return [self.restore(line) for line in lines]
