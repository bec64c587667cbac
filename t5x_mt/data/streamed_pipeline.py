"""A tf.data pipeline over streamed corpora whose position a checkpoint saves.

A pipeline's position in a streamed corpus lives in Python (the shuffle's state), but
tf.data saves only its own iterators. The bridge: tf.data counts the stream's blocks with
a range dataset, which it saves with the rest of the pipeline, and asks the `PairStream`
for block k, which is the same whatever was asked before. The stream's state is saved just
before the tf.data iterator (`write_states`), so a restored pipeline always asks for
blocks at or after the restored stream's position, reads on from there, and delivers
exactly the pairs an uninterrupted pipeline delivers.
"""

from collections.abc import Callable, Iterator, Sequence
import contextlib
import json
import zlib

import numpy as np
import seqio
import tensorflow as tf

from t5x_mt.core import files
from t5x_mt.data.mixtures import TaskSource
from t5x_mt.data.streamed import PairStream
from t5x_mt.data.streamed import StreamedCorpus
from t5x_mt.core.errors import UserError

STATE_SUFFIX = '.streams.json'


def stream_dataset(stream: PairStream) -> tf.data.Dataset:
  """Every pair of the stream as {'source', 'target'}, endlessly; checkpointable."""
  def block_tensors(index):
    pairs = stream.block(int(index))
    columns = tuple(zip(*pairs)) if pairs else ((), ())
    return [tf.constant(list(column), tf.string, shape=[len(pairs)]) for column in columns]

  def read(index):
    sources, targets = tf.py_function(block_tensors, [index], [tf.string, tf.string])
    return {'source': tf.ensure_shape(sources, [None]),
            'target': tf.ensure_shape(targets, [None])}

  options = tf.data.Options()
  # The stream's own state is saved beside the iterator's (`write_states`).
  options.experimental_external_state_policy = (
      tf.data.experimental.ExternalStatePolicy.IGNORE)
  blocks = tf.data.Dataset.range(np.iinfo(np.int64).max).map(read)
  return blocks.unbatch().with_options(options)


class StreamedPairsSource(seqio.DataSource):
  """seqio's view of one direction of a streamed corpus (`task_source`, built by `corpus`):
  shards are taken by the stream (`supports_arbitrary_sharding`), and it shuffles itself."""

  def __init__(self, corpus: Callable[[], StreamedCorpus], task_source: TaskSource, task: str):
    super().__init__(splits=('train',), performs_internal_shuffling=True)
    self._corpus, self._task = corpus, task
    self._direction = task_source.direction
    self.task_source = task_source

  @property
  def supports_arbitrary_sharding(self) -> bool:
    return True

  def list_shards(self, split: str) -> Sequence[str]:
    return self._corpus().paths

  def get_dataset(self, split: str = 'train', shuffle: bool = True, seed: int | None = None,
                  shard_info: seqio.ShardInfo | None = None, *, sequence_length=None,
                  use_cached: bool = False, num_epochs: int | None = 1) -> tf.data.Dataset:
    del shuffle, sequence_length, use_cached, num_epochs  # Shuffled and endless.
    corpus = self._corpus()
    corpus.num_pairs(split, *self._direction)  # A UserError for a split it lacks.
    shard = shard_info or seqio.ShardInfo(0, 1)
    seed = 0 if seed is None else int(seed)
    key = f'{self._task}/shard_{shard.index}_of_{shard.num_shards}/seed_{seed}'
    stream_seed = [seed, zlib.crc32(self._task.encode()), shard.index]
    stream = corpus.open_stream(*self._direction, seed=stream_seed, shard_index=shard.index,
                                num_shards=shard.num_shards, key=key)
    if _COLLECTING:
      _COLLECTING[-1].append(stream)
    return stream_dataset(stream).map(lambda pair: dict(pair, is_training=True))


_COLLECTING: list[list[PairStream]] = []


@contextlib.contextmanager
def opened_streams() -> Iterator[list[PairStream]]:
  """The streams of the datasets built inside the block, whose states a pipeline saves."""
  streams: list[PairStream] = []
  _COLLECTING.append(streams)
  try:
    yield streams
  finally:
    _COLLECTING.pop()


def write_states(streams: Sequence[PairStream], prefix: str) -> None:
  """Saves the streams' positions beside an input position at `prefix`; call it before
  saving the tf.data iterator, so that the iterator is never behind the streams."""
  if streams:
    states = [stream.state() for stream in streams]
    files.write_text_atomically(prefix + STATE_SUFFIX, json.dumps(states) + '\n')


def read_states(streams: Sequence[PairStream], prefix: str) -> None:
  """Restores what `write_states` saved for the same streams."""
  if not streams:
    return
  path = prefix + STATE_SUFFIX
  if not tf.io.gfile.exists(path):
    raise UserError(f'{path}: missing: the input position was saved without the positions '
                    'of the streamed corpora this run reads')
  with tf.io.gfile.GFile(path) as f:
    states = json.load(f)
  saved, wanted = [state['key'] for state in states], [stream.key for stream in streams]
  if saved != wanted:
    raise UserError(f'{path}: saved for streams {saved}, this run reads {wanted}; a '
                    'different mixture, seed or INPUT_SHARDS needs a new MODEL_DIR')
  for stream, state in zip(streams, states):
    stream.restore(state)
