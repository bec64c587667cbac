"""Global batches from input shards: rows in shard order whatever the mesh, replicas fed
alike, and a saved position that only a run reading as many shards may resume."""

import jax
import numpy as np
import pytest

from t5x_mt.core import partitioning
from t5x_mt.training import sharded_input
from t5x_mt.core.errors import UserError

BATCH = 8
LENGTH = 3


class CountingStream:
  """Shard `index`'s batches: row r of its n-th batch holds (index, n, r) in every token."""

  def __init__(self, shard, rows: int):
    self.index, self.rows, self.position = shard.index, rows, 0

  def __next__(self) -> dict[str, np.ndarray]:
    self.position += 1
    codes = [self.index * 10_000 + self.position * 100 + row for row in range(self.rows)]
    return {'tokens': np.repeat(np.asarray(codes, np.int32)[:, None], LENGTH, axis=1)}

  def write_state(self, prefix: str) -> None:
    with open(prefix, 'w', encoding='utf-8') as f:
      f.write(str(self.position))

  def read_state(self, prefix: str) -> None:
    with open(prefix, encoding='utf-8') as f:
      self.position = int(f.read())


def expected_rows(num_shards: int, position: int) -> np.ndarray:
  """The global batch at `position`: each shard's rows, shard after shard."""
  rows = BATCH // num_shards
  return np.asarray([shard * 10_000 + position * 100 + row
                     for shard in range(num_shards) for row in range(rows)])


@pytest.mark.parametrize('mesh_shape', [(1, 1), (8, 1), (2, 2, 2), (1, 4, 2), (2, 4)])
@pytest.mark.parametrize('num_shards', [1, 2, 4])
def test_global_batch_is_the_shards_rows_in_order_on_any_mesh(mesh_shape, num_shards):
  devices = jax.devices()[:int(np.prod(mesh_shape))]
  mesh = partitioning.create_mesh(mesh_shape, devices)
  batches = sharded_input.ShardedBatches(CountingStream, mesh, BATCH, num_shards)
  for position in (1, 2):
    tokens = next(batches)['tokens']
    assert tokens.sharding == partitioning.batch_sharding(mesh)
    np.testing.assert_array_equal(np.asarray(tokens)[:, 0], expected_rows(num_shards, position))
    # Devices holding the same rows (replicas along 'model') hold the same values.
    for shard in tokens.addressable_shards:
      np.testing.assert_array_equal(shard.data, np.asarray(tokens)[shard.index])


def test_one_process_reads_one_shard_by_default():
  mesh = partitioning.create_mesh((4, 2))
  assert sharded_input.default_shard_count(mesh, BATCH) == 1


def test_position_resumes_exactly_and_only_with_as_many_shards(tmp_path):
  mesh = partitioning.create_mesh((8, 1))
  batches = sharded_input.ShardedBatches(CountingStream, mesh, BATCH, 4)
  next(batches)
  prefix = str(tmp_path / 'state.input')
  batches.write_state(prefix)
  assert sharded_input.saved_shard_count(prefix) == 4
  resumed = sharded_input.ShardedBatches(CountingStream, mesh, BATCH, 4)
  resumed.read_state(prefix)
  np.testing.assert_array_equal(np.asarray(next(resumed)['tokens'])[:, 0], expected_rows(4, 2))
  other = sharded_input.ShardedBatches(CountingStream, mesh, BATCH, 2)
  with pytest.raises(UserError, match='saved for 4 input shards, this run reads 2; set '
                     'INPUT_SHARDS = 4'):
    other.read_state(prefix)


def test_shard_count_keeps_the_saved_one_and_refuses_another():
  mesh = partitioning.create_mesh((8, 1))
  assert sharded_input.shard_count(None, None, mesh, BATCH) == 1
  assert sharded_input.shard_count(None, 2, mesh, BATCH) == 2
  assert sharded_input.shard_count(4, None, mesh, BATCH) == 4
  with pytest.raises(UserError, match='INPUT_SHARDS: 4, but the checkpoint to resume read 2'):
    sharded_input.shard_count(4, 2, mesh, BATCH)


def test_batch_that_does_not_split_into_the_shards_is_refused():
  with pytest.raises(UserError, match='INPUT_SHARDS: BATCH_SIZE 8 does not split into 3'):
    sharded_input.ShardedBatches(CountingStream, partitioning.create_mesh((8, 1)), BATCH, 3)
