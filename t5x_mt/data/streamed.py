"""Corpora larger than memory: TSV files read by streaming, never held whole.

A `StreamedCorpus` is one language pair in (gzipped) TSV files. Building it reads the files
once, to count the pairs (temperature sampling needs each direction's size) and to name
the file and line of any line without the corpus's columns; training then reads them
through `StreamingShuffle`, each input shard its own chunks of the files, so the shards
of a run share out every pair exactly once per epoch.

Training reads a `PairStream` in numbered blocks, and block k is the same whatever was
asked before: the stream moves forward through the shuffle, and back from its last
restored state when asked for an earlier block. `streamed_pipeline` builds on that to
save a tf.data pipeline's position in the stream. This module needs neither TensorFlow
nor seqio, so the corpus registry stays light.
"""

from collections.abc import Callable, Sequence
import dataclasses
import glob
import gzip
import os
import threading


from t5x_mt.core import files
from t5x_mt.data.streaming import StreamingShuffle
from t5x_mt.core.errors import UserError
from t5x_mt.core.languages import check_language

# Shuffled lines a pipeline asks for at once: one Python call per block.
BLOCK_LINES = 256


@dataclasses.dataclass(frozen=True)
class StreamSettings:
  """How a streamed corpus is shuffled (see `StreamingShuffle`): examples held at once,
  chunks read at once, and the chunk size of uncompressed files."""
  buffer_size: int = 10_000
  num_pointers: int = 64
  chunk_bytes: int = 1 << 20

  def __post_init__(self):
    for name, value in dataclasses.asdict(self).items():
      if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UserError(f'streamed corpus {name}: {value!r} is not a positive integer')


def expand_files(patterns: Sequence[str | os.PathLike[str]], where: str) -> list[str]:
  """The files that `patterns` (paths or globs, `~` expanded) name, sorted, each once."""
  if isinstance(patterns, (str, os.PathLike)) or not patterns:
    raise UserError(f'{where}: give a list of files or glob patterns')
  found = []
  for pattern in patterns:
    pattern = files.expand(pattern)
    matches = sorted(path for path in glob.glob(pattern) if os.path.isfile(path))
    if not matches:
      raise UserError(f'{where}: {pattern}: no such file')
    found += matches
  return list(dict.fromkeys(found))


def _open_binary(path: str):
  return gzip.open(path, 'rb') if path.endswith('.gz') else open(path, 'rb')


def _fields(line: str, needed: int) -> list[str] | None:
  fields = line.split('\t', needed)
  return fields if len(fields) >= needed else None


class StreamedCorpus:
  """One language pair's TSV files, split 'train', read by streaming."""

  def __init__(self, name: str, src_lang: str, tgt_lang: str, paths: Sequence[str], *,
               src_column: int = 0, tgt_column: int = 1,
               settings: StreamSettings = StreamSettings()):
    self.name = name
    self.src_lang = check_language(src_lang, f'corpus {name!r} source language')
    self.tgt_lang = check_language(tgt_lang, f'corpus {name!r} target language')
    if src_lang == tgt_lang:
      raise UserError(f'corpus {name!r}: source and target are both {src_lang}')
    self.paths = list(paths)
    self.columns = (src_column, tgt_column)
    self.settings = settings
    self._num_pairs = sum(self._count_pairs(path) for path in self.paths)

  def _count_pairs(self, path: str) -> int:
    """Pairs with text on both sides; UserError naming a line without the columns."""
    needed = max(self.columns) + 1
    count = 0
    try:
      with _open_binary(path) as f:
        for number, raw in enumerate(f, start=1):
          fields = _fields(raw.decode('utf-8', errors='replace').rstrip('\r\n'), needed)
          if fields is None:
            raise UserError(f'{path}:{number}: fewer than {needed} tab-separated columns '
                            f'(columns {self.columns[0]} and {self.columns[1]})')
          count += bool(fields[self.columns[0]].strip() and fields[self.columns[1]].strip())
    except (OSError, EOFError) as e:
      raise UserError(f'{path}: cannot read: {e}') from None
    return count

  def languages(self) -> tuple[str, ...]:
    return (self.src_lang, self.tgt_lang)

  def splits(self) -> tuple[str, ...]:
    return ('train',)

  def _check(self, split: str, src: str, tgt: str) -> None:
    if split != 'train':
      raise UserError(f'corpus {self.name!r} is streamed and has only a train split')
    if {src, tgt} != {self.src_lang, self.tgt_lang}:
      raise UserError(f'corpus {self.name!r} has no {src}-{tgt} pairs (it has '
                      f'{self.src_lang}-{self.tgt_lang})')

  def _not_in_memory(self) -> UserError:
    return UserError(f'corpus {self.name!r} is streamed from {len(self.paths)} files and is '
                     'never read into memory; train on it, or sample it (sample_pairs)')

  def pairs(self, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    raise self._not_in_memory()

  def sentences(self, split: str, lang: str) -> list[str]:
    raise self._not_in_memory()

  def num_pairs(self, split: str, src: str, tgt: str) -> int:
    self._check(split, src, tgt)
    return self._num_pairs

  def _parse(self, line: str, src: str) -> tuple[str, str] | None:
    """The (src, tgt) pair of a TSV line, None where a side is blank."""
    fields = _fields(line.rstrip('\r\n'), max(self.columns) + 1)
    if fields is None:
      return None
    first, second = fields[self.columns[0]], fields[self.columns[1]]
    if not (first.strip() and second.strip()):
      return None
    return (first, second) if src == self.src_lang else (second, first)

  def sample_pairs(self, src: str, tgt: str, limit: int) -> list[tuple[str, str]]:
    """At most `limit` pairs, evenly spaced through the files (one streaming pass)."""
    self._check('train', src, tgt)
    every = max(1, -(-self._num_pairs // limit))
    sample, seen = [], 0
    for path in self.paths:
      with _open_binary(path) as f:
        for raw in f:
          pair = self._parse(raw.decode('utf-8', errors='replace'), src)
          if pair is not None:
            if len(sample) < limit and seen % every == 0:
              sample.append(pair)
            seen += 1
    return sample

  def open_stream(self, src: str, tgt: str, *, seed: Sequence[int], shard_index: int,
                  num_shards: int, key: str) -> 'PairStream':
    """The shuffled pairs of input shard `shard_index` of `num_shards`, in blocks."""
    self._check('train', src, tgt)

    def new_shuffle() -> StreamingShuffle:
      return StreamingShuffle(self.paths, seed=seed, shard_index=shard_index,
                              num_shards=num_shards, **dataclasses.asdict(self.settings))

    return PairStream(new_shuffle, lambda line: self._parse(line, src), key)


class PairStream:
  """Block k of a shuffled stream of pairs, the same whatever blocks were asked before."""

  def __init__(self, new_shuffle: Callable[[], StreamingShuffle],
               parse: Callable[[str], tuple[str, str] | None], key: str):
    self.key = key
    self._parse = parse
    self._shuffle = new_shuffle()
    self._lines = iter(self._shuffle)
    self._next_block = 0
    self._base = self._state()  # Where an earlier block is found again.
    self._lock = threading.Lock()
    # Blocks read from the files: a restored stream reads on from its position instead of
    # reading its way there again.
    self.blocks_read = 0

  def block(self, index: int) -> list[tuple[str, str]]:
    """The pairs among lines [index * BLOCK_LINES, (index + 1) * BLOCK_LINES) of the
    stream; none for a block before the last restored position, which only an iterator
    being replaced by the restored one asks for."""
    with self._lock:
      if index < self._next_block:
        if index < self._base['block']:
          return []
        self._move_to(self._base)
      while self._next_block < index:
        self._take_block()
      return self._take_block()

  def _take_block(self) -> list[tuple[str, str]]:
    self._next_block += 1
    self.blocks_read += 1
    pairs = (self._parse(next(self._lines)) for _ in range(BLOCK_LINES))
    return [pair for pair in pairs if pair is not None]

  def _move_to(self, state: dict) -> None:
    self._shuffle.restore(state['shuffle'])
    self._lines = iter(self._shuffle)
    self._next_block = state['block']

  def _state(self) -> dict:
    return {'key': self.key, 'block': self._next_block, 'shuffle': self._shuffle.state()}

  def state(self) -> dict:
    """The next block and the shuffle's state there (JSON-compatible), taken between the
    blocks that tf.data's threads ask for."""
    with self._lock:
      return self._state()

  def restore(self, state: dict) -> None:
    with self._lock:
      self._move_to(state)
      self._base = state
