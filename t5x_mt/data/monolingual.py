"""Monolingual text for back- and forward-translation: files, and the sides of parallel pairs.

Back-translation needs sentences in one language. They come from plain text files (one
sentence per line, UTF-8, gzipped if *.gz) or from the sides of registered parallel
corpora in that language: VolcTrans' trick of treating the target side of other pairs as
monolingual data, which costs nothing where monolingual crawls are scarce.
"""

import os
import re
from collections.abc import Sequence

from t5x_mt.data import corpora
from t5x_mt.data import readers
from t5x_mt.core.errors import UserError

# C0/C1 control characters other than tab: a line holding one is binary debris, not text.
_CONTROL = re.compile(r'[\x00-\x08\x0b-\x1f\x7f-\x9f]')


def read_monolingual_file(path: str | os.PathLike[str]) -> list[str]:
  """The sentences of a monolingual text file, one per line.

  An empty or blank line, a control character or bytes that are not UTF-8 are errors naming
  the file and line: each line becomes a training pair, and a pair made from an empty line
  teaches the model to invent text from nothing.
  """
  lines = readers.read_lines(path)
  for number, line in enumerate(lines, start=1):
    if not line.strip():
      raise UserError(f'{path}:{number}: empty line (monolingual files hold one sentence '
                      'per line)')
    control = _CONTROL.search(line)
    if control:
      raise UserError(f'{path}:{number}: control character U+{ord(control.group()):04X} '
                      '(not a text line)')
  return lines


def corpus_side(corpus_name: str, lang: str, split: str = 'train') -> list[str]:
  """Every non-blank sentence in `lang` of a registered corpus's `split`, in corpus order."""
  return [s for s in corpora.get_corpus(corpus_name).sentences(split, lang) if s.strip()]


def gather(lang: str, files: Sequence[str] = (), corpus_names: Sequence[str] = (),
           split: str = 'train') -> list[str]:
  """Distinct sentences in `lang` from `files` and the `lang` sides of `corpus_names`, in
  the order given (first occurrence kept): the same sentence translated twice would only
  duplicate a synthetic pair."""
  sentences: dict[str, None] = {}
  for path in files:
    sentences.update(dict.fromkeys(read_monolingual_file(path)))
  for name in corpus_names:
    sentences.update(dict.fromkeys(corpus_side(name, lang, split)))
  return list(sentences)
