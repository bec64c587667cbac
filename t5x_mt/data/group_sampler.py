"""Training batches drawn from groups of directions with weights that change during training.

seqio fixes a mixture's rates when it is built, but DRO (docs/methods.md#dro) re-weights
groups every few hundred steps. `GroupSampler` therefore keeps one endless, shuffled,
packed seqio pipeline per group (the group's tasks mixed at the run mixture's own rates)
and draws each row of a batch from group g with probability q_g, the weights in force.
Rows are group-pure, so a row's tokens all count for one group and q_g is the group's
share of rows, and thus close to its share of target tokens, which is what the loss
averages over.

Everything that decides the next batch is saved with a checkpoint: the NumPy generator
that picks groups, every group pipeline's tf.data iterator position, and the weights.
Weights change only between batches, so a resumed run draws exactly the batches an
uninterrupted one draws.
"""

from collections.abc import Sequence
import json

import numpy as np
import seqio
import tensorflow as tf

from t5x_mt.core import files
from t5x_mt.data import input_pipeline
from t5x_mt.data import streamed_pipeline
from t5x_mt.data.feature_converters import DirectionEncDecFeatureConverter
from t5x_mt.data.mixtures import MixtureView
from t5x_mt.core.errors import UserError

SAMPLER_STATE_SUFFIX = '.sampler.json'


class GroupSampler:
  """An iterator of an input shard's NumPy batches of `batch_size` rows, each row drawn
  from a group by weight; shards draw independently (their own seqio shards and
  generator)."""

  def __init__(self, mixture: MixtureView, *, grouping: str, batch_size: int,
               inputs_length: int, targets_length: int, seed: int, pack: bool = True,
               shard: seqio.ShardInfo = input_pipeline.WHOLE):
    self.rows = batch_size
    groups = mixture.groups(grouping)
    self.groups = list(groups)
    self.weights = np.full(len(self.groups), 1.0 / len(self.groups))
    self._rng = np.random.Generator(np.random.PCG64([seed, shard.index]))
    lengths = input_pipeline.task_feature_lengths(inputs_length, targets_length)
    self._iterators = []
    with streamed_pipeline.opened_streams() as self._streams:
      for index, (group, members) in enumerate(groups.items()):
        source = seqio.Mixture(f'{mixture.name}/{group}',
                               [(member.task, member.rate) for member in members])
        dataset = seqio.get_dataset(
            source, task_feature_lengths=lengths, dataset_split='train', shuffle=True,
            num_epochs=None, seed=seed + index, shard_info=shard, verbose=False,
            feature_converter=DirectionEncDecFeatureConverter(pack=pack))
        self._iterators.append(iter(dataset.prefetch(tf.data.AUTOTUNE)))

  def set_weights(self, weights: Sequence[float]) -> None:
    """The sampling weights of the next batches, one per group in `self.groups`."""
    weights = np.asarray(weights, np.float64)
    if weights.shape != (len(self.groups),) or np.any(weights < 0) or weights.sum() <= 0:
      raise ValueError(f'weights {weights} do not fit groups {self.groups}')
    self.weights = weights / weights.sum()

  def __iter__(self) -> 'GroupSampler':
    return self

  def __next__(self) -> dict[str, np.ndarray]:
    picks = self._rng.choice(len(self.groups), size=self.rows, p=self.weights)
    rows = [{name: value.numpy() for name, value in next(self._iterators[g]).items()}
            for g in picks]
    return {name: np.stack([row[name] for row in rows]) for name in rows[0]}

  def _checkpoint(self) -> tf.train.Checkpoint:
    return tf.train.Checkpoint(**{f'group_{i}': it for i, it in enumerate(self._iterators)})

  def write_state(self, prefix: str) -> None:
    """Saves the iterators' positions at `prefix` and the generator, the weights and the
    positions of streamed corpora beside."""
    streamed_pipeline.write_states(self._streams, prefix)
    self._checkpoint().write(prefix)
    state = {'groups': self.groups, 'weights': self.weights.tolist(),
             'bit_generator': self._rng.bit_generator.state}
    files.write_text_atomically(prefix + SAMPLER_STATE_SUFFIX, json.dumps(state) + '\n')

  def read_state(self, prefix: str) -> None:
    """Restores what `write_state` saved; the groups must be the same."""
    with tf.io.gfile.GFile(prefix + SAMPLER_STATE_SUFFIX) as f:
      state = json.load(f)
    if state['groups'] != self.groups:
      raise UserError(f'{prefix}: saved with DRO groups {state["groups"]}, the run now has '
                      f'{self.groups}; a different mixture or grouping needs a new MODEL_DIR')
    streamed_pipeline.read_states(self._streams, prefix)
    self._checkpoint().read(prefix).assert_consumed()
    self.weights = np.asarray(state['weights'], np.float64)
    self._rng.bit_generator.state = state['bit_generator']
