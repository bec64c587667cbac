"""A file's lines through a translator, a chunk of consecutive lines at a time: what
translate.py streams to its output, evaluate.py scores and back-translation stores as it
goes, each losing at most one chunk to a kill.
"""

from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Sequence
import itertools
import logging
from typing import Any

import tqdm

from t5x_mt.core import progress
from t5x_mt.decoding import family_routing
from t5x_mt.decoding import inference

# Sentences handed to Translator.translate at once, in batches: large enough that its
# length-sorting keeps batches full of similar lengths, small enough for a live progress bar.
TRANSLATE_CHUNK_BATCHES = 16


def translate_lines(translator: inference.Translator | family_routing.FamilyTranslator,
                    lines: Sequence[str], src_lang: str, tgt_lang: str, *,
                    progress_bar: bool = False, source_name: str = 'input') -> list[str]:
  """Translations of one sentence per line, line for line (see `stream_translations`)."""
  return list(itertools.chain.from_iterable(stream_translations(
      translator, lines, src_lang, tgt_lang, total=len(lines), progress_bar=progress_bar,
      source_name=source_name)))


def stream_translations(translator: inference.Translator | family_routing.FamilyTranslator,
                        lines: Iterable[str], src_lang: str, tgt_lang: str, *,
                        total: int | None = None, progress_bar: bool = False,
                        source_name: str = 'input', nbest: int = 0
                        ) -> Iterator[list[str]] | Iterator[list[list[inference.Hypothesis]]]:
  """Translations of one sentence per line, one chunk of consecutive lines at a time;
  with `nbest` each line's n-best list (`Translator.translate_nbest`) instead, an empty
  line's holding one empty hypothesis scored 0.

  `lines` is read only as far as the chunk being translated, so a caller that writes each
  chunk as it comes holds one chunk, and its reader sees output before the input ends.
  Empty (or blank) lines become empty lines without reaching the model, which would
  otherwise invent a sentence from the tag alone. A line longer than the model's input
  is translated from its start, with a warning naming `source_name` and the line number.
  The progress bar counts lines up to `total` (None: the count alone).
  """
  translator.check_direction(src_lang, tgt_lang)
  lines = iter(lines)
  with _translation_bar(translator, src_lang, tgt_lang, total, 0, progress_bar) as bar:
    line_number = 1
    while chunk := list(itertools.islice(lines, _chunk_size(translator))):
      yield _translate_lines_chunk(translator, chunk, src_lang, tgt_lang, bar, source_name,
                                   line_number, nbest)
      line_number += len(chunk)


def translation_chunks(translator: inference.Translator, sentences: Sequence[str],
                       src_lang: str, tgt_lang: str, *, start: int = 0,
                       progress_bar: bool = False) -> Iterator[list[str]]:
  """Translations of sentences[start:], one chunk of consecutive sentences at a time.

  A caller that stores each chunk as it comes (launch/back_translate.py) loses at most
  one chunk to a kill. The progress bar counts from `start`.
  """
  chunk_size = _chunk_size(translator)
  with _translation_bar(translator, src_lang, tgt_lang, len(sentences), start,
                        progress_bar) as bar:
    for chunk_start in range(start, len(sentences), chunk_size):
      yield _translate_chunk(translator, sentences[chunk_start:chunk_start + chunk_size],
                             src_lang, tgt_lang, bar)


def _chunk_size(translator: inference.Translator | family_routing.FamilyTranslator) -> int:
  return translator.batch_size * TRANSLATE_CHUNK_BATCHES


def _translation_bar(translator: inference.Translator | family_routing.FamilyTranslator,
                     src_lang: str, tgt_lang: str, total: int | None, start: int,
                     shown: bool) -> tqdm.tqdm:
  """A bar named by the direction's path that counts each sentence once per leg (a
  pivoted direction's twice), from `start` sentences done."""
  legs = translator.legs(src_lang, tgt_lang)
  path = '-'.join([src_lang] + [leg_tgt for _, leg_tgt in legs])
  return progress.bar(total=None if total is None else total * len(legs), desc=path,
                      unit='sentence', shown=shown, initial=start * len(legs))


def _translate_chunk(translator: inference.Translator | family_routing.FamilyTranslator,
                     sentences: Sequence[str], src_lang: str, tgt_lang: str,
                     bar: tqdm.tqdm, nbest: int = 0) -> list[str] | list[list[Any]]:
  """Translations of `sentences` (with `nbest`, their n-best lists), each one line (a
  newline inside becomes a space); `bar` moves with each decoded batch."""
  if not sentences:
    return []
  if nbest:
    lists = translator.translate_nbest(sentences, src_lang, tgt_lang, nbest,
                                       on_batch=bar.update)
    return [[h._replace(text=one_line(h.text)) for h in hypotheses] for hypotheses in lists]
  translations = translator.translate(sentences, src_lang, tgt_lang, on_batch=bar.update)
  return [one_line(translation) for translation in translations]


def one_line(text: str) -> str:
  """A translation as one line: a newline inside becomes a space."""
  return ' '.join(text.splitlines())


def _translate_lines_chunk(translator: inference.Translator | family_routing.FamilyTranslator,
                           lines: Sequence[str], src_lang: str, tgt_lang: str,
                           bar: tqdm.tqdm, source_name: str, first_line_number: int,
                           nbest: int = 0) -> list[str] | list[list[Any]]:
  """`_translate_chunk` of the lines that hold text; the others stay empty (and count as
  done at once). An overlong line is named by `source_name` and its line number."""
  to_translate = [i for i, line in enumerate(lines) if line.strip()]
  for index in translator.overlong([lines[i] for i in to_translate], src_lang, tgt_lang):
    logging.warning("%s:%d: longer than the model's input; only its start is translated",
                    source_name, first_line_number + to_translate[index])
  bar.update((len(lines) - len(to_translate)) * len(translator.legs(src_lang, tgt_lang)))
  empty = [inference.Hypothesis('', 0.0, 0.0, 0)] if nbest else ''
  outputs = [empty] * len(lines)
  translations = _translate_chunk(translator, [lines[i] for i in to_translate], src_lang,
                                  tgt_lang, bar, nbest)
  for index, translation in zip(to_translate, translations):
    outputs[index] = translation
  return outputs
