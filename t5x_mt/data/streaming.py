"""Shuffling corpora larger than memory (VolcTrans): many file pointers, one bounded buffer.

A full shuffle needs every example in memory. This one holds `buffer_size` examples and
`num_pointers` open positions: the files are cut into chunks of about `chunk_bytes`,
the chunks are visited in a seeded random order by `num_pointers` readers at once, each
reading its chunk from start to end, and every example drawn comes from a random slot of
the buffer, refilled from a random reader. Examples far apart in the files meet in the
buffer, so consecutive outputs are nearly independent of position, and each line is
produced exactly once per epoch.

The order is a function of the seed alone, and `state()` captures everything (generator
state, reader positions, buffer contents) as JSON-compatible values, so a run restored with
`restore(state)` continues with exactly the examples an uninterrupted run would produce.

A shuffle can read one shard of the files: shard i of n visits every n-th chunk of the
files' chunks, so n shuffles with the same files and different shards share out every line
exactly once. A gzipped file (`*.gz`) cannot be entered in the middle, so it is one chunk,
read from start to end; corpora meant for several shards come in several files.
"""

import dataclasses
import gzip
import os
from typing import Any, Iterator, Sequence

import numpy as np

from t5x_mt.core.errors import UserError

_READ_AHEAD_BYTES = 1 << 16  # Per reader: a few hundred lines between seeks.


@dataclasses.dataclass
class _Reader:
  """A position inside one chunk: file, next unread byte, end byte (None: the end of the
  file), and the lines read ahead but not yet taken (in reverse order, so the next one
  pops off the end)."""
  file: int
  position: int
  end: int | None
  pending: list[str] = dataclasses.field(default_factory=list)


def _is_gzipped(path: str) -> bool:
  return path.endswith('.gz')


def _chunk_bounds(path: str, chunk_bytes: int) -> list[tuple[int, int | None]]:
  """(start, end) byte ranges of about `chunk_bytes`, each starting at a line start; one
  range to the end of the file for a gzipped file."""
  if _is_gzipped(path):
    return [(0, None)]
  size = os.path.getsize(path)
  bounds, start = [], 0
  with open(path, 'rb') as f:
    while start < size:
      f.seek(min(start + chunk_bytes, size))
      if start + chunk_bytes < size:
        f.readline()  # Move to the start of the next line.
      end = min(f.tell(), size)
      bounds.append((start, end))
      start = end
  return bounds


class StreamingShuffle:
  """Lines of `files` in a seeded, approximately uniform random order, epoch after epoch."""

  def __init__(self, files: Sequence[str | os.PathLike[str]], *, seed: int | Sequence[int] = 0,
               num_pointers: int = 64, buffer_size: int = 10_000, chunk_bytes: int = 1 << 20,
               shard_index: int = 0, num_shards: int = 1):
    if not files:
      raise UserError('streaming shuffle: no files given')
    if num_pointers < 1 or buffer_size < 1 or chunk_bytes < 1:
      raise UserError('streaming shuffle: num_pointers, buffer_size and chunk_bytes must be '
                      'positive')
    self.files = [str(path) for path in files]
    for path in self.files:
      if not os.path.isfile(path):
        raise UserError(f'{path}: no such file')
    self.num_pointers, self.buffer_size = num_pointers, buffer_size
    chunks = [(number, start, end) for number, path in enumerate(self.files)
              for start, end in _chunk_bounds(path, chunk_bytes)]
    if not chunks:
      raise UserError(f'streaming shuffle: {", ".join(self.files)} hold no lines')
    self._chunks = chunks[shard_index::num_shards]
    if not self._chunks:
      raise UserError(f'streaming shuffle: {len(chunks)} chunks of {", ".join(self.files)} '
                      f'leave none for input shard {shard_index} of {num_shards} (a .gz '
                      'file is one chunk: split the corpus into more files)')
    self._handles: dict[int, Any] = {}
    self._rng = np.random.default_rng(seed)
    self._epoch = 0
    self._start_epoch()

  def _start_epoch(self) -> None:
    self._order = [int(i) for i in self._rng.permutation(len(self._chunks))]
    self._next_chunk = 0
    self._readers: list[_Reader] = []
    self._buffer: list[str] = []
    self._fill()

  def _open_next_chunk(self) -> bool:
    if self._next_chunk >= len(self._order):
      return False
    file, start, end = self._chunks[self._order[self._next_chunk]]
    self._next_chunk += 1
    self._readers.append(_Reader(file, start, end))
    return True

  def _handle(self, file: int):
    f = self._handles.get(file)
    if f is None:
      path = self.files[file]
      f = self._handles[file] = gzip.open(path, 'rb') if _is_gzipped(path) else open(path, 'rb')
    return f

  def _read_ahead(self, reader: _Reader) -> None:
    """Reads the lines of the next block of the reader's chunk into `pending`."""
    f = self._handle(reader.file)
    if f.tell() != reader.position:
      f.seek(reader.position)  # In a gzipped file only a restored state seeks.
    wanted = _READ_AHEAD_BYTES if reader.end is None else min(_READ_AHEAD_BYTES,
                                                                reader.end - reader.position)
    block = f.read(wanted)
    if block and not block.endswith(b'\n') and (reader.end is None
                                                or reader.position + len(block) < reader.end):
      block += f.readline()  # Finish the last line of the block.
    reader.position += len(block)
    if reader.end is None and len(block) < wanted:
      reader.end = reader.position  # The end of a gzipped file, now known.
    lines = block.decode('utf-8', errors='replace').split('\n')
    if lines[-1] == '':
      lines.pop()
    reader.pending = [line.rstrip('\r') for line in reversed(lines)]

  def _read_line(self, reader: _Reader) -> str | None:
    """The reader's next line, None where its chunk has no more (an empty gzipped file)."""
    if not reader.pending:
      self._read_ahead(reader)
    return reader.pending.pop() if reader.pending else None

  def _close_unless_read(self, file: int) -> None:
    """Closes a file no reader is in, so that open files stay within num_pointers."""
    if all(reader.file != file for reader in self._readers) and file in self._handles:
      self._handles.pop(file).close()

  def _finished(self, reader: _Reader) -> bool:
    return not reader.pending and reader.end is not None and reader.position >= reader.end

  def _fill(self) -> None:
    """Tops the buffer up from random readers, opening chunks as readers finish."""
    while len(self._buffer) < self.buffer_size:
      while len(self._readers) < self.num_pointers and self._open_next_chunk():
        pass
      if not self._readers:
        return
      index = int(self._rng.integers(len(self._readers)))
      reader = self._readers[index]
      line = self._read_line(reader)
      if line is not None:
        self._buffer.append(line)
      if self._finished(reader):
        self._readers.pop(index)
        self._close_unless_read(reader.file)

  def __iter__(self) -> Iterator[str]:
    while True:
      if not self._buffer:
        self._epoch += 1
        self._start_epoch()
      slot = int(self._rng.integers(len(self._buffer)))
      self._buffer[slot], self._buffer[-1] = self._buffer[-1], self._buffer[slot]
      line = self._buffer.pop()
      self._fill()
      yield line

  @property
  def epoch(self) -> int:
    return self._epoch

  def state(self) -> dict[str, Any]:
    """Everything needed to continue exactly here (JSON-compatible)."""
    return {'rng': self._rng.bit_generator.state, 'epoch': self._epoch, 'order': self._order,
            'next_chunk': self._next_chunk,
            'readers': [dataclasses.astuple(reader) for reader in self._readers],
            'buffer': list(self._buffer)}

  def restore(self, state: dict[str, Any]) -> None:
    """Continues from a `state()` of a shuffle over the same files and settings."""
    self._rng.bit_generator.state = state['rng']
    self._epoch, self._order = state['epoch'], list(state['order'])
    self._next_chunk = state['next_chunk']
    self._readers = [_Reader(file, position, end, list(pending))
                     for file, position, end, pending in state['readers']]
    self._buffer = list(state['buffer'])
