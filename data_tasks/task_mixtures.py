"""Mixtures of registered Tasks, each sampled at its temperature rate.

A mixture's rates depend on the run's temperature, so each is computed when a dataset is
built (`temperature_rate`), not when the mixture is registered.
"""

from collections.abc import Iterable
from collections.abc import Sequence
import functools

import seqio

from data_tasks.run_settings import settings
from data_tasks.tasks import register_direction_task
from t5x_mt.data import mixtures
from t5x_mt.core.errors import UserError


def temperature_rate(task: seqio.Task, mixture_tasks: Sequence[str] = ()) -> float:
  """Mixing rate of a task: p_i = |D_i|^(1/tau) / sum_j |D_j|^(1/tau).

  Temperature sampling (docs/methods.md#temperature-sampling): D_i is the task's
  direction, summed over the mixture's tasks of that direction (the same language pair
  from several corpora, genuine and back-translated), which share the direction's rate
  in proportion to their sizes. tau is `settings().temperature`.
  """
  temperature = settings().temperature
  direction = mixtures.task_source(task.name).direction
  siblings = [name for name in mixture_tasks
              if mixtures.task_source(name).direction == direction]
  direction_pairs = sum(mixtures.num_train_pairs(name) for name in siblings or [task.name])
  if not direction_pairs:
    return 0.0
  return (direction_pairs ** (1.0 / temperature) * mixtures.num_train_pairs(task.name)
          / direction_pairs)


def register_task_mixture(name: str, task_names: Sequence[str], *,
                          overwrite: bool = False) -> str:
  """Registers a temperature-sampled mixture over registered direction Tasks of any corpora."""
  if not task_names:
    raise UserError(f'mixture {name!r}: no tasks')
  if overwrite and name in seqio.MixtureRegistry.names():
    seqio.MixtureRegistry.remove(name)
  seqio.MixtureRegistry.add(name, list(task_names), default_rate=functools.partial(
      temperature_rate, mixture_tasks=tuple(task_names)))
  return name


def register_mixture(name: str, corpus: str,
                     corpus_directions: Iterable[tuple[str, str]]) -> str:
  """Registers a temperature-sampled mixture over directions of one corpus."""
  return register_task_mixture(
      name, [register_direction_task(corpus, src, tgt) for src, tgt in corpus_directions])
