"""Training batches from a task cache through Grain, with no TensorFlow in the process.

The second way to feed training, beside `input_pipeline`'s seqio datasets: the examples a
recipe's seqio tasks yield, cached once by `launch/cache_tasks.py` (`task_cache`), read
back by random access. One input shard of a run (`sharded_input`) reads every
`num_shards`-th example of each task from its `index`, shuffles each task's share with a
seed of its own (afresh each epoch: Grain reseeds a repeated shuffle), mixes the tasks by
the mixture's rates (Grain's weighted mix, which interleaves them deterministically in
those proportions) and packs chunks of consecutive examples into rows as seqio does
(`packing`), a chunk at a time in Grain's reading threads.

Its position is two indices, the chunk its next row comes from and that row's place in
the chunk: every chunk is a pure function of its index, so a resumed run re-packs the
chunk and goes on exactly, whatever the number of processes reading it.
"""

from collections.abc import Mapping
import functools
import json

import grain
import numpy as np

from t5x_mt.core import files
from t5x_mt.core.errors import UserError
from t5x_mt.data import mixtures
from t5x_mt.data import packing
from t5x_mt.data import task_cache

# A chunk of examples packs into tens of rows; a few chunks ahead keep a step fed.
READ_OPTIONS = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
STATE_SUFFIX = '.grain.json'


def _shuffle_seed(seed: int, task_index: int) -> int:
  """A task's shuffle seed, in the range Grain takes."""
  return int(np.random.SeedSequence([seed, task_index]).generate_state(1)[0])


class CachedTrainStream:
  """One input shard's training batches of `rows` rows from cached tasks: a
  `sharded_input.ShardStream` whose position is (chunk, row)."""

  def __init__(self, cache: task_cache.TaskCache, mixture: mixtures.MixtureView, *,
               shard_index: int, num_shards: int, rows: int, inputs_length: int,
               targets_length: int, seed: int, pack: bool = True):
    lengths = packing.feature_lengths(inputs_length, targets_length)
    shares = []
    for index, member in enumerate(mixture.members):
      mine = grain.MapDataset.source(task_cache.CachedExamples(cache, member.task, 'train'))[
          shard_index::num_shards]
      if not len(mine):
        raise UserError(f'INPUT_SHARDS: {num_shards} input shards, but task {member.task} '
                        f'has {cache.split(member.task, "train").examples} training examples: input shard '
                        f'{shard_index} would have none')
      shares.append(mine.shuffle(seed=_shuffle_seed(seed, index)).repeat())
    mixed = (grain.MapDataset.mix(shares, [member.rate for member in mixture.members])
             if len(shares) > 1 else shares[0])
    rows_of = functools.partial(packing.chunk_rows, lengths=lengths, pack=pack)
    size = packing.chunk_size(lengths, pack)
    # A batch of one over an endless dataset would be longer than Grain can count.
    self._chunks = (mixed.batch(size, batch_fn=rows_of) if size > 1
                    else mixed.map(lambda example: rows_of([example])))
    self._rows = rows
    # As a saved position holds them (JSON), so that the two compare as they are.
    self._settings = json.loads(json.dumps({
        'tasks': [[m.task, m.rate, m.pairs] for m in mixture.members],
        'shard': [shard_index, num_shards], 'seed': seed, 'lengths': lengths, 'pack': pack}))
    self._seek(0, 0)

  def _seek(self, chunk: int, row: int) -> None:
    self._chunk, self._row, self._current = chunk, row, None
    rest = self._chunks.slice(slice(chunk, len(self._chunks)))  # Endless: up to sys.maxsize.
    self._iterator = iter(rest.to_iter_dataset(READ_OPTIONS))

  def _next_row(self) -> packing.Row:
    if self._current is None:
      self._current = next(self._iterator)
    while self._row >= len(self._current):
      self._chunk, self._row, self._current = self._chunk + 1, 0, next(self._iterator)
    self._row += 1
    return self._current[self._row - 1]

  def __next__(self) -> dict[str, np.ndarray]:
    return packing.stacked([self._next_row() for _ in range(self._rows)])

  def position(self) -> dict[str, int]:
    """Where the next row comes from: chunk `chunk`, its row `row`."""
    return {'chunk': self._chunk, 'row': self._row}

  def write_state(self, prefix: str) -> None:
    files.write_text_atomically(prefix + STATE_SUFFIX, json.dumps(
        {**self.position(), 'settings': self._settings}, sort_keys=True) + '\n')

  def read_state(self, prefix: str) -> None:
    path = files.path(prefix + STATE_SUFFIX)
    if not path.exists():
      raise UserError(f'{path}: no Grain input position beside the checkpoint (was it '
                      'trained from seqio? resume it with CACHED_TASKS_DIR empty)')
    saved = json.loads(path.read_text())
    if saved['settings'] != self._settings:
      raise UserError(f'{path}: the input position was saved for other tasks, rates, '
                      f'lengths or seed ({_difference(saved["settings"], self._settings)}); '
                      'resume with the cache and settings the run was trained with')
    self._seek(int(saved['chunk']), int(saved['row']))


def _difference(saved: Mapping, current: Mapping) -> str:
  """The first setting that differs, saved against current."""
  for key in sorted(set(saved) | set(current)):
    if saved.get(key) != current.get(key):
      return f'{key}: saved {saved.get(key)}, now {current.get(key)}'
  return 'none'
