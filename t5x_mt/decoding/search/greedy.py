"""Greedy search's registration: the most likely piece at every step, one output per
sentence; what a beam of one searches too. The search itself is `greedy_search`."""

import dataclasses

from t5x_mt.decoding.search.registry import SearchMethod


@dataclasses.dataclass(frozen=True)
class GreedySettings:
  """Greedy search has no settings of its own."""


METHOD = SearchMethod('greedy', GreedySettings,
                               't5x_mt.decoding.search.greedy_search',
                               most_outputs=lambda settings: 1)
