"""A text as the lines a model translates one at a time, and the text again.

A text is translated line by line, as translate.py translates a file, so that a line
gets the translation translate.py gives it. A line longer than the model's input, which
the model would cut, is split further after sentence-final punctuation followed by white
space. The white space between the parts is kept as it was, so that the translation has
the text's lines and paragraphs.
"""

from collections.abc import Callable
import dataclasses
import re

_LINE_BREAK = re.compile(r'\s*\n\s*')
# Sentence-final punctuation (closing quotes and brackets may follow it), then white space
# (the group: what joins two sentences).
_SENTENCE_END = re.compile(r'[.!?\u3002\uff01\uff1f\u0964\u1362]["\u201d\u2019)\]]*(\s+)')


@dataclasses.dataclass(frozen=True)
class Segmented:
  """`sentences` and the white space around them: text = joins[0] + sentences[0] +
  joins[1] + ... + sentences[-1] + joins[-1]."""
  sentences: list[str]
  joins: list[str]

  def reassembled(self, translations: list[str]) -> str:
    """The text with each sentence replaced by its translation, in order."""
    parts = [self.joins[0]]
    for translation, join in zip(translations, self.joins[1:], strict=True):
      parts += [translation, join]
    return ''.join(parts)


def segment(text: str, too_long: Callable[[str], bool]) -> Segmented:
  """`text` as its lines (none empty), each that is `too_long` as its sentences, and the
  white space between them."""
  stripped = text.strip()
  lead = text[:len(text) - len(text.lstrip())]
  sentences, joins = [], [lead]
  start = 0
  for line_end in [*_LINE_BREAK.finditer(stripped), None]:
    end = len(stripped) if line_end is None else line_end.start()
    if end > start:
      line_sentences, line_joins = _sentences(stripped[start:end], too_long)
      sentences += line_sentences
      joins[-1:] = [joins[-1] + line_joins[0], *line_joins[1:]]
    joins[-1] += '' if line_end is None else line_end.group()
    start = len(stripped) if line_end is None else line_end.end()
  joins[-1] += text[len(lead) + len(stripped):]
  return Segmented(sentences, joins)


def _sentences(line: str, too_long: Callable[[str], bool]) -> tuple[list[str], list[str]]:
  """(the line, or if it is too long its sentences; the joins around them), as in
  `Segmented`."""
  if not too_long(line):
    return [line], ['', '']
  sentences, joins, start = [], [''], 0
  for end in _SENTENCE_END.finditer(line):
    sentences.append(line[start:end.start(1)])
    joins.append(end.group(1))
    start = end.end()
  sentences.append(line[start:])
  joins.append('')
  return sentences, joins
