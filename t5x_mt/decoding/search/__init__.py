"""Search methods by name, each its settings and its search, over the pieces they share.

Registered: 'beam' (the default; a beam of one is greedy), 'greedy' and 'sampling'
(temperature, top-k, top-p, epsilon). Each method is a module of its settings and
registration (`beam`, `greedy`, `sampling`) and the module of its search
(`beam_search`, `greedy_search`, `sampling_search`); `registry` says what a method
provides and how a new one is added. `common` holds what every search shares: the model
step's contract, output limits, banned pieces, the forced prefix, the length penalty, the
staged loop over a growing cache, and `SearchProblem`, what a method is given to decode.

This package and the settings modules import no JAX: the commands declare every method's
settings as flags before JAX loads; a search module loads when its method first runs.
"""

from t5x_mt.decoding.search import beam
from t5x_mt.decoding.search import greedy
from t5x_mt.decoding.search import sampling
from t5x_mt.decoding.search.beam import BeamSettings
from t5x_mt.decoding.search.beam import STOP_CRITERIA
from t5x_mt.decoding.search.greedy import GreedySettings
from t5x_mt.decoding.search.registry import SearchMethod
from t5x_mt.decoding.search.registry import binding_name
from t5x_mt.decoding.search.registry import check_method_settings
from t5x_mt.decoding.search.registry import check_setting
from t5x_mt.decoding.search.registry import get
from t5x_mt.decoding.search.registry import method_of
from t5x_mt.decoding.search.registry import names
from t5x_mt.decoding.search.registry import register
from t5x_mt.decoding.search.registry import setting_fields
from t5x_mt.decoding.search.registry import with_method_settings
from t5x_mt.decoding.search.sampling import SamplingSettings

__all__ = ['BeamSettings', 'DEFAULT', 'GreedySettings', 'STOP_CRITERIA', 'SamplingSettings',
           'SearchMethod', 'binding_name', 'check_method_settings', 'check_setting', 'get', 'method_of',
           'names', 'register', 'setting_fields', 'with_method_settings']

register(beam.METHOD)
register(greedy.METHOD)
register(sampling.METHOD)
DEFAULT = beam.METHOD.name
