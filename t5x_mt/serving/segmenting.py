"""A text as the sentences a model translates one at a time, and the text again.

A model trained on sentences translates a paragraph poorly and cuts one longer than its
input, so a text is split at line breaks and after sentence-final punctuation followed by
white space; the white space between sentences is kept as it was, so that the
translation has the text's lines and paragraphs.
"""

import dataclasses
import re

# Sentence-final punctuation (closing quotes and brackets may follow it), then white space
# (the group: what joins two sentences); or a line break and the white space around it.
_SENTENCE_END = re.compile(
    r'[.!?\u3002\uff01\uff1f\u0964\u1362]["\u201d\u2019)\]]*(\s+)|(\s*\n\s*)')


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


def segment(text: str) -> Segmented:
  """`text` as sentences (none empty) and the white space between them."""
  sentences, joins, start = [], [], 0
  stripped = text.lstrip()
  joins.append(text[:len(text) - len(stripped)])
  start = len(joins[0])
  for end in _SENTENCE_END.finditer(text, start):
    join = 1 if end.group(1) is not None else 2
    if end.start(join) > start:
      sentences.append(text[start:end.start(join)])
      joins.append(end.group(join))
    else:
      joins[-1] += end.group(join)
    start = end.end()
  if start < len(text):
    sentences.append(text[start:])
    joins.append('')
  return Segmented(sentences, joins)
