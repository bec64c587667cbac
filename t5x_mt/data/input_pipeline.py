"""From a registered seqio mixture to a stream of packed NumPy batches.

A training input shard reads its own shard of every task (seqio.ShardInfo), packs
sentence pairs into rows with DirectionEncDecFeatureConverter and batches its rows of the
global batch (`DatasetStream`). The tf.data iterator is checkpointable, so a resumed run
continues mid-epoch exactly. `grain_pipeline` is the other way to feed training, from
cached tasks without TensorFlow.
"""

from collections.abc import Iterator, Mapping, Sequence

import numpy as np
import seqio
import tensorflow as tf

from t5x_mt.data import streamed
from t5x_mt.data import streamed_pipeline
from t5x_mt.data.feature_converters import DirectionEncDecFeatureConverter

WHOLE = seqio.ShardInfo(index=0, num_shards=1)


def task_feature_lengths(inputs_length: int, targets_length: int) -> dict[str, int]:
  """seqio feature lengths, the direction feature packed like the targets."""
  return {'inputs': inputs_length, 'targets': targets_length,
          'targets_direction': targets_length}


def train_dataset(mixture_or_task_name: str, *, batch_size: int, inputs_length: int,
                  targets_length: int, seed: int, pack: bool = True,
                  shard: seqio.ShardInfo = WHOLE) -> tf.data.Dataset:
  """An endless, shuffled, packed dataset of `shard`'s batches of `batch_size` rows.

  seqio shuffles each task's examples and samples tasks at random by their rates, so
  consecutive packed sentences already come from different directions.
  """
  dataset = seqio.get_dataset(
      mixture_or_task_name,
      task_feature_lengths=task_feature_lengths(inputs_length, targets_length),
      dataset_split='train', shuffle=True, num_epochs=None, seed=seed, shard_info=shard,
      feature_converter=DirectionEncDecFeatureConverter(pack=pack))
  dataset = dataset.batch(batch_size, drop_remainder=True)
  return dataset.prefetch(tf.data.AUTOTUNE)


def numpy_batches(iterator: Iterator[Mapping[str, tf.Tensor]]) -> Iterator[dict[str, np.ndarray]]:
  """NumPy views of a tf.data iterator's elements."""
  for batch in iterator:
    yield {name: value.numpy() for name, value in batch.items()}


class DatasetStream:
  """A tf.data dataset's batches as NumPy, its position a tf.train.Checkpoint and the
  positions of the streamed corpora it reads (`streamed_pipeline.write_states`)."""

  def __init__(self, dataset: tf.data.Dataset, streams: Sequence[streamed.PairStream] = ()):
    self._iterator = iter(dataset)
    self._streams = list(streams)

  def __next__(self) -> dict[str, np.ndarray]:
    return {name: value.numpy() for name, value in next(self._iterator).items()}

  def write_state(self, prefix: str) -> None:
    streamed_pipeline.write_states(self._streams, prefix)
    tf.train.Checkpoint(iterator=self._iterator).write(prefix)

  def read_state(self, prefix: str) -> None:
    streamed_pipeline.read_states(self._streams, prefix)
    tf.train.Checkpoint(iterator=self._iterator).read(prefix).assert_consumed()


def one_pass_batches(task_name: str, *, batch_size: int, inputs_length: int,
                     targets_length: int, split: str = 'train') -> Iterator[dict[str, np.ndarray]]:
  """Every example of a task's split once, in order, packed like training batches; the last
  batch is padded with empty rows (zero loss weight), so every batch has one shape."""
  dataset = seqio.get_dataset(
      task_name, task_feature_lengths=task_feature_lengths(inputs_length, targets_length),
      dataset_split=split, shuffle=False, num_epochs=1,
      feature_converter=DirectionEncDecFeatureConverter(pack=True))
  for batch in numpy_batches(iter(dataset.batch(batch_size))):
    rows = next(iter(batch.values())).shape[0]
    if rows < batch_size:
      batch = {name: np.concatenate([value, np.zeros((batch_size - rows,) + value.shape[1:],
                                                     value.dtype)])
               for name, value in batch.items()}
    yield batch
