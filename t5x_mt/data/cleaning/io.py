"""What cleaning reads and writes: inputs split into chunks, and the clean corpus folder.

An input is one direction's pairs: two line-aligned files, a TSV, or a direction of a
registered corpus. It is cut into chunks of `chunk_lines` consecutive pairs, each described
by a small picklable record (file byte offsets, or index ranges) that any worker can read
on its own; this is how the same reading code feeds the local loop and a Beam pipeline.
Pairs are numbered from 0 in input order within their direction, and the clean corpus keeps
that order whichever engine produced it.

Lines that are not valid UTF-8 are not errors here: they become records without a pair,
counted (and listed with `--dropped`) as 'invalid_utf8', so one bad byte in a billion
lines never stops a cleaning job.

The clean corpus folder, readable by `corpora.register_clean_dir`:
  <src>-<tgt>.<src>, <src>-<tgt>.<tgt>   the kept pairs of each direction, line-aligned
  dropped/<src>-<tgt>.tsv                with --dropped: step<TAB>line<TAB>source<TAB>target
  report.json, removed.png               what each step removed, per direction
"""

import codecs
import dataclasses
import gzip
import os
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

from t5x_mt.data import corpora
from t5x_mt.data.cleaning.steps import Pair
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

DEFAULT_CHUNK_LINES = 50_000
INVALID_UTF8 = 'invalid_utf8'


class Record(NamedTuple):
  """One input line: its number in the direction, and its pair (None if undecodable)."""
  index: int
  pair: Pair | None
  raw: tuple[str, str]  # The text as read (undecodable bytes replaced), for --dropped.


@dataclasses.dataclass(frozen=True)
class Chunk:
  """`count` consecutive pairs of one direction, from `first_index` on."""
  direction: str
  source: 'Source'
  first_index: int
  count: int
  offsets: tuple[int, ...] = ()  # Byte offsets into the source's files, where seekable.


def _decode(raw: bytes, index: int) -> tuple[str | None, str]:
  """(text or None if not UTF-8, text with bad bytes replaced) of line `index` (from 0); a
  trailing CR is dropped, and a byte-order mark that opens the file, as `readers` does."""
  if index == 0:
    raw = raw.removeprefix(codecs.BOM_UTF8)
  raw = raw.rstrip(b'\n')
  if raw.endswith(b'\r'):
    raw = raw[:-1]
  try:
    text = raw.decode('utf-8')
    return text, text
  except UnicodeDecodeError:
    return None, raw.decode('utf-8', errors='replace')


def _open(path: Path):
  if not path.is_file():
    raise UserError(f'{path}: no such file')
  return gzip.open(path, 'rb') if path.suffix == '.gz' else open(path, 'rb')


def _line_offsets(path: Path, every: int) -> tuple[int, list[int]]:
  """(line count, byte offset of lines 0, every, 2*every, ...) of a file."""
  offsets, count, position = [], 0, 0
  with _open(path) as f:
    for line in f:
      if count % every == 0:
        offsets.append(position)
      count += 1
      position += len(line)
  return count, offsets


@dataclasses.dataclass(frozen=True)
class ParallelFiles:
  """Two line-aligned files (gzipped if *.gz), one sentence per line."""
  src_file: str
  tgt_file: str
  src_lang: str
  tgt_lang: str

  def chunks(self, chunk_lines: int) -> list[Chunk]:
    src_count, src_offsets = _line_offsets(Path(self.src_file), chunk_lines)
    tgt_count, tgt_offsets = _line_offsets(Path(self.tgt_file), chunk_lines)
    if src_count != tgt_count:
      raise UserError(f'{self.src_file} has {src_count} lines but {self.tgt_file} has '
                      f'{tgt_count}: parallel files must have one line per segment')
    if src_count == 0:
      raise UserError(f'{self.src_file} and {self.tgt_file} are empty')
    direction = Direction(self.src_lang, self.tgt_lang).name
    return [Chunk(direction, self, first, min(chunk_lines, src_count - first),
                  (src_offsets[number], tgt_offsets[number]))
            for number, first in enumerate(range(0, src_count, chunk_lines))]

  def read(self, chunk: Chunk) -> Iterator[Record]:
    with _open(Path(self.src_file)) as src, _open(Path(self.tgt_file)) as tgt:
      for f, offset in zip((src, tgt), chunk.offsets):
        f.seek(offset)
      for index in range(chunk.first_index, chunk.first_index + chunk.count):
        (src_text, src_raw), (tgt_text, tgt_raw) = _decode(src.readline(), index), _decode(
            tgt.readline(), index)
        pair = None if src_text is None or tgt_text is None else Pair(src_text, tgt_text)
        yield Record(index, pair, (src_raw, tgt_raw))


@dataclasses.dataclass(frozen=True)
class TsvFile:
  """Two columns of a (gzipped) TSV file; optional columns of mined-bitext scores
  ({'laser': 2, 'language_score': 3}) feed the `mined_scores` filter."""
  path: str
  src_lang: str
  tgt_lang: str
  src_column: int = 0
  tgt_column: int = 1
  score_columns: tuple[tuple[str, int], ...] = ()

  def chunks(self, chunk_lines: int) -> list[Chunk]:
    count, offsets = _line_offsets(Path(self.path), chunk_lines)
    if count == 0:
      raise UserError(f'{self.path} is empty')
    direction = Direction(self.src_lang, self.tgt_lang).name
    return [Chunk(direction, self, first, min(chunk_lines, count - first), (offsets[number],))
            for number, first in enumerate(range(0, count, chunk_lines))]

  def _pair(self, fields: list[str], line_number: int) -> Pair:
    needed = max(self.src_column, self.tgt_column, *(c for _, c in self.score_columns)) + 1
    if len(fields) < needed:
      raise UserError(f'{self.path}:{line_number}: {len(fields)} tab-separated columns, '
                      f'need at least {needed}')
    scores = []
    for name, column in self.score_columns:
      try:
        scores.append((name, float(fields[column])))
      except ValueError:
        raise UserError(f'{self.path}:{line_number}: column {column} ({name}) is not a '
                        f'number: {fields[column]!r}') from None
    return Pair(fields[self.src_column], fields[self.tgt_column], tuple(scores))

  def read(self, chunk: Chunk) -> Iterator[Record]:
    with _open(Path(self.path)) as f:
      f.seek(chunk.offsets[0])
      for index in range(chunk.first_index, chunk.first_index + chunk.count):
        text, raw = _decode(f.readline(), index)
        raw_fields = raw.split('\t')
        raw_pair = (raw_fields[self.src_column] if len(raw_fields) > self.src_column else raw,
                    raw_fields[self.tgt_column] if len(raw_fields) > self.tgt_column else '')
        pair = None if text is None else self._pair(text.split('\t'), index + 1)
        yield Record(index, pair, raw_pair)


@dataclasses.dataclass(frozen=True)
class CorpusDirection:
  """One direction of a split of a registered corpus (read whole by each worker that
  needs a chunk of it; registered corpora are the sizes one machine holds)."""
  corpus: str
  split: str
  src_lang: str
  tgt_lang: str

  def _pairs(self) -> list[tuple[str, str]]:
    return corpora.get_corpus(self.corpus).pairs(self.split, self.src_lang, self.tgt_lang)

  def chunks(self, chunk_lines: int) -> list[Chunk]:
    count = len(self._pairs())
    if count == 0:
      raise UserError(f'corpus {self.corpus!r} has no {self.src_lang}-{self.tgt_lang} '
                      f'pairs in split {self.split!r}')
    direction = Direction(self.src_lang, self.tgt_lang).name
    return [Chunk(direction, self, first, min(chunk_lines, count - first))
            for first in range(0, count, chunk_lines)]

  def read(self, chunk: Chunk) -> Iterator[Record]:
    pairs = self._pairs()[chunk.first_index:chunk.first_index + chunk.count]
    for index, (src, tgt) in enumerate(pairs, start=chunk.first_index):
      yield Record(index, Pair(src, tgt), (src, tgt))


Source = ParallelFiles | TsvFile | CorpusDirection


def corpus_sources(name: str, split: str = 'train',
                   directions: Sequence[Direction] | None = None) -> list[CorpusDirection]:
  """The directions of a registered corpus to clean: those given, or every
  English-to-X pair where the corpus has English, else every pair of its first language."""
  corpus = corpora.get_corpus(name)
  if directions is None:
    languages = corpus.languages()
    pivot = 'eng_Latn' if 'eng_Latn' in languages else languages[0]
    directions = [Direction(pivot, lang) for lang in languages if lang != pivot]
  return [CorpusDirection(name, split, src, tgt) for src, tgt in directions]


def read_chunk(chunk: Chunk) -> Iterator[Record]:
  return chunk.source.read(chunk)


class CorpusWriter:
  """Writes one direction's kept pairs and, optionally, its dropped ones into a folder.

  Kept pairs arrive in line order. Dropped ones arrive in the order steps reject them
  (corpus steps decide late), so they are held and written sorted by line on `close`.
  """

  def __init__(self, folder: Path, direction: str, write_dropped: bool):
    src_lang, tgt_lang = Direction.parse(direction, 'cleaned direction')
    self._folder, self._direction = folder, direction
    self._src = open(folder / f'{direction}.{src_lang}', 'w', encoding='utf-8')
    self._tgt = open(folder / f'{direction}.{tgt_lang}', 'w', encoding='utf-8')
    self._dropped: list[tuple[int, str, str, str]] | None = [] if write_dropped else None

  def kept(self, pair: Pair) -> None:
    self._src.write(_one_line(pair.src) + '\n')
    self._tgt.write(_one_line(pair.tgt) + '\n')

  def dropped(self, step: str, index: int, raw: tuple[str, str]) -> None:
    if self._dropped is not None:
      self._dropped.append((index, step, raw[0], raw[1]))

  def close(self) -> None:
    self._src.close()
    self._tgt.close()
    if self._dropped is None:
      return
    (self._folder / 'dropped').mkdir(exist_ok=True)
    with open(self._folder / 'dropped' / f'{self._direction}.tsv', 'w',
              encoding='utf-8') as f:
      for index, step, src, tgt in sorted(self._dropped):
        f.write(f'{step}\t{index + 1}\t{_one_line(src)}\t{_one_line(tgt)}\n')


def _one_line(text: str) -> str:
  """Text as one line of a line-aligned file: line breaks and tabs become spaces."""
  return text.replace('\r', ' ').replace('\n', ' ').replace('\t', ' ')


def check_output_dir(output_dir: str | os.PathLike[str], overwrite: bool) -> Path:
  """UserError unless `output_dir` is new (or `overwrite`) and its parent is writable."""
  output_dir = Path(output_dir)
  if output_dir.exists() and not overwrite:
    raise UserError(f'--output_dir: {output_dir} already exists (pass --overwrite to '
                    'replace it)')
  try:
    output_dir.parent.mkdir(parents=True, exist_ok=True)
  except OSError as e:
    raise UserError(f'--output_dir: cannot create {output_dir.parent}: {e}') from None
  if not os.access(output_dir.parent, os.W_OK):
    raise UserError(f'--output_dir: {output_dir.parent} is not writable')
  return output_dir
