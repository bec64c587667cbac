"""DRO baselines: a trained run's per-token loss on each group of a mixture's training data.

Distributionally robust optimisation chases each group's excess loss over what a plain
(ERM) model reaches on it (docs/methods.md#dro). This module measures that: every
training example of every task of the mixture once, through the same loss (label
smoothing included) the training step reports, without dropout, summed per direction and
then per group (direction or target language, `Direction.key`).
"""

from typing import Any

import jax
import numpy as np

from t5x_mt.decoding import inference
from t5x_mt.training import trainer
from t5x_mt.data import mixtures
from t5x_mt.core.directions import Direction


def group_losses(translator: inference.Translator, mixture: mixtures.MixtureView, *,
                 grouping: str = 'direction', batch_size: int = 32, inputs_length: int = 128,
                 targets_length: int = 128, label_smoothing: float = 0.1,
                 max_batches_per_task: int | None = None,
                 loss_chunk_length: int = 0, split: str = 'train') -> dict[str, Any]:
  """{'losses': {group: per-token loss}, 'tokens': {group: tokens}} of the run's model
  on `split` (the training data for DRO; another split measures held-out loss)."""
  # pylint: disable=g-import-not-at-top  (seqio's datasets: a process with TensorFlow)
  from t5x_mt.data import input_pipeline
  # pylint: enable=g-import-not-at-top
  mixtures.check_vocabulary(mixture.name, translator.vocabulary_file)
  ids = [direction.id for direction in mixture.directions()]
  eval_step = trainer.make_eval_step(translator.model, direction_ids=ids,
                                     label_smoothing=label_smoothing,
                                     loss_chunk_length=loss_chunk_length)
  loss_sums, token_counts = np.zeros(len(ids)), np.zeros(len(ids))
  for member in mixture.members:
    batches = input_pipeline.one_pass_batches(member.task, batch_size=batch_size,
                                              inputs_length=inputs_length,
                                              targets_length=targets_length, split=split)
    for number, batch in enumerate(batches):
      if max_batches_per_task is not None and number >= max_batches_per_task:
        break
      sums = jax.device_get(eval_step(translator.params, batch))
      loss_sums += np.asarray(sums['direction_loss_sums'])
      token_counts += np.asarray(sums['direction_tokens'])
  grouped: dict[str, list[float]] = {}
  for direction_id, loss_sum, count in zip(ids, loss_sums, token_counts):
    group = Direction.from_id(direction_id).key(grouping)
    totals = grouped.setdefault(group, [0.0, 0.0])
    totals[0] += float(loss_sum)
    totals[1] += float(count)
  return {'grouping': grouping,
          'losses': {g: s / n for g, (s, n) in grouped.items() if n > 0},
          'tokens': {g: n for g, (_, n) in grouped.items()}}
