"""Training batches as global arrays: each process reads only the input shards its devices'
rows come from, and the batches do not depend on how many processes read them.

A global batch of B rows is read as INPUT_SHARDS streams of B / INPUT_SHARDS rows each:
shard s gives rows [s * B / INPUT_SHARDS, (s + 1) * B / INPUT_SHARDS) and reads its own
shard of every task (seqio's, or every INPUT_SHARDS-th example of a cached task from the
s-th). A process reads every shard that overlaps the rows its
devices hold, so processes holding the same rows (replicas along 'model') read the same
shards and feed identical rows. The default count is one shard per group of processes
holding distinct rows, which gives each such process exactly one stream.

So the batches depend on INPUT_SHARDS and the seed alone, never on the process count or
the mesh; each shard's position is saved with a checkpoint by the first process reading
it, and a run resumes exactly on any number of processes that reads the same shards.
"""

from collections.abc import Callable
import json
from typing import NamedTuple, Protocol

import jax
import numpy as np

from t5x_mt.core import files
from t5x_mt.core import partitioning
from t5x_mt.core import processes
from t5x_mt.core.errors import UserError

Batch = dict[str, np.ndarray]
# Beside the shards' states: how many shards the position was saved for.
SHARD_COUNT_SUFFIX = '.shards.json'


class InputShard(NamedTuple):
  """Input shard `index` of `num_shards` (the fields of seqio's ShardInfo)."""
  index: int
  num_shards: int


class ShardStream(Protocol):
  """One input shard's batches, whose position can be saved and restored."""

  def __next__(self) -> Batch: ...

  def write_state(self, prefix: str) -> None: ...

  def read_state(self, prefix: str) -> None: ...


def _process_rows(mesh: jax.sharding.Mesh, batch_size: int) -> dict[int, list[tuple[int, int]]]:
  """{process: the sorted row ranges [start, stop) its devices hold} of a global batch."""
  sharding = partitioning.batch_sharding(mesh)
  rows: dict[int, set[tuple[int, int]]] = {}
  for device, index in sharding.devices_indices_map((batch_size,)).items():
    start, stop, _ = index[0].indices(batch_size)
    rows.setdefault(device.process_index, set()).add((start, stop))
  return {process: sorted(ranges) for process, ranges in rows.items()}


def default_shard_count(mesh: jax.sharding.Mesh, batch_size: int) -> int:
  """One shard per group of processes whose devices hold distinct rows."""
  return len({tuple(ranges) for ranges in _process_rows(mesh, batch_size).values()})


def saved_shard_count(prefix: str) -> int | None:
  """The INPUT_SHARDS an input position at `prefix` was saved for, None if none was."""
  path = files.path(prefix + SHARD_COUNT_SUFFIX)
  if not path.exists():
    return None
  return json.loads(path.read_text())['input_shards']


class ShardedBatches:
  """An endless iterator of global batches (dicts of arrays sharded like the mesh's
  batches), read from the input shards this process needs; a HostState."""

  def __init__(self, open_shard: Callable[[InputShard, int], ShardStream],
               mesh: jax.sharding.Mesh, batch_size: int, num_shards: int):
    if num_shards < 1 or batch_size % num_shards:
      raise UserError(f'INPUT_SHARDS: BATCH_SIZE {batch_size} does not split into '
                      f'{num_shards} input shards')
    self.num_shards = num_shards
    self.batch_size = batch_size
    self._rows_per_shard = batch_size // num_shards
    self._sharding = partitioning.batch_sharding(mesh)
    process_rows = _process_rows(mesh, batch_size)
    self._rows = process_rows[jax.process_index()]
    readers = {}
    for process in sorted(process_rows):
      for shard in self._shards_of(process_rows[process]):
        readers.setdefault(shard, process)
    self.streams = {shard: open_shard(InputShard(shard, num_shards), self._rows_per_shard)
                    for shard in self._shards_of(self._rows)}
    # Each shard's position is saved once, by the first process reading it.
    self._saved_here = [shard for shard in self.streams
                        if readers[shard] == jax.process_index()]

  def _shards_of(self, ranges: list[tuple[int, int]]) -> list[int]:
    size = self._rows_per_shard
    return sorted({shard for start, stop in ranges
                   for shard in range(start // size, (stop - 1) // size + 1)})

  def __iter__(self) -> 'ShardedBatches':
    return self

  def __next__(self) -> dict[str, jax.Array]:
    shard_batches = {shard: next(stream) for shard, stream in self.streams.items()}
    first = next(iter(shard_batches.values()))
    local = {name: np.concatenate([self._rows_of(shard_batches, name, start, stop)
                                   for start, stop in self._rows])
             for name in first}
    return {name: jax.make_array_from_process_local_data(
        self._sharding, value, (self.batch_size,) + value.shape[1:])
            for name, value in local.items()}

  def _rows_of(self, shard_batches: dict[int, Batch], name: str, start: int,
               stop: int) -> np.ndarray:
    """Rows [start, stop) of the global batch, from the shards they lie in."""
    size = self._rows_per_shard
    pieces = []
    for shard in range(start // size, (stop - 1) // size + 1):
      first = shard * size
      pieces.append(shard_batches[shard][name][max(start, first) - first:
                                               min(stop, first + size) - first])
    return np.concatenate(pieces)

  def write_state(self, prefix: str) -> None:
    for shard in self._saved_here:
      self.streams[shard].write_state(f'{prefix}.shard_{shard}')
    if processes.is_primary():
      files.write_text_atomically(prefix + SHARD_COUNT_SUFFIX,
                                  json.dumps({'input_shards': self.num_shards}) + '\n')

  def read_state(self, prefix: str) -> None:
    saved = saved_shard_count(prefix)
    if saved != self.num_shards:
      raise UserError(f'{prefix}: the input position was saved for {saved} input shards, '
                      f'this run reads {self.num_shards}; set INPUT_SHARDS = {saved} to '
                      'resume it')
    for shard, stream in self.streams.items():
      stream.read_state(f'{prefix}.shard_{shard}')


def shard_count(configured: int | None, saved: int | None, mesh: jax.sharding.Mesh,
                batch_size: int) -> int:
  """The run's INPUT_SHARDS: as configured, else as its resumed checkpoint was saved
  with, else `default_shard_count`."""
  if configured is not None and saved is not None and configured != saved:
    raise UserError(f'INPUT_SHARDS: {configured}, but the checkpoint to resume read '
                    f'{saved} input shards; resume with INPUT_SHARDS = {saved} (or leave it '
                    'unset), or start a new MODEL_DIR with TrainConfig.init_from')
  return configured or saved or default_shard_count(mesh, batch_size)

