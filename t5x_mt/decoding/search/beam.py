"""Beam search's settings and registration: the default method, and n-best lists.

The search itself is `beam_search` (imported when a search runs, so that commands declare
these settings as flags without loading JAX).
"""

import dataclasses
import functools

from t5x_mt.core import validation
from t5x_mt.decoding.search.registry import SearchMethod
from t5x_mt.decoding.search.registry import check_settings
from t5x_mt.decoding.search.registry import setting

# When a sentence's beam search ends (`beam_search.beam_search`'s `stop`).
STOP_CRITERIA = ('exact', 'best', 'beam_full')


@dataclasses.dataclass(frozen=True)
class BeamSettings:
  """Beam search's settings (`beam_search`)."""
  beam_size: int = setting(
      4, 'beam width, and the most hypotheses of an n-best list; 1 searches greedily',
      functools.partial(validation.integer, minimum=1))
  stop: str = setting(
      'beam_full', "when a sentence's search ends: beam_full (fairseq's: once beam_size "
      'hypotheses have finished), best or exact (T5X\'s, longer)',
      functools.partial(validation.choice, choices=STOP_CRITERIA))

  def __post_init__(self):
    check_settings(self)


METHOD = SearchMethod('beam', BeamSettings,
                               't5x_mt.decoding.search.beam_search',
                               most_outputs=lambda settings: settings.beam_size)
