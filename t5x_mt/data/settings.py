"""A run's data settings as one frozen value: its vocabulary, tags, sampling and WMT22 sets.

The launch layer fills a `DataSettings` from a recipe's gin bindings
(`t5x_mt.config.configurables.data_settings`) and makes it the task registry's before it hands a
run over; the library reads the fields it needs (the vocabulary file, the tag strategy)
from the run's settings, never from the registry.
"""

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses
import os

from t5x_mt.core import validation
from t5x_mt.data import tags
from t5x_mt.data import wmt22
from t5x_mt.core.errors import UserError

DEFAULT_VOCABULARY_PATH = os.path.join(
    os.environ.get('T5X_MT_CACHE', os.path.expanduser('~/.cache/t5x_mt')), 'vocab',
    'default.model')
DEFAULT_TEMPERATURE = 5.0
DEFAULT_WMT22_CORPORA = ('ntrex128', 'salt', 'tatoeba')
SAMPLING_SIDES = ('none', 'source', 'both')


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """A run's data choices; each error names the gin setting a recipe binds.

  vocabulary_path: the SentencePiece model file of every task (`vocabulary_path.path`).
  source_vocabulary_path: a SentencePiece model that segments the source side instead,
    numbering its pieces as `vocabulary_path` does (`source_vocabulary_path.path`): a
    model imported from a toolkit that segments each side with a model of its own
    (Marian); None, the usual case, segments both sides with `vocabulary_path`.
  tag_strategy: t_enc, s_enc_t_dec, t_enc_t_dec or none (`tag_strategy.strategy`,
    docs/methods.md#language-tags).
  temperature: the sampling temperature tau of mixtures (`temperature_rate.temperature`).
  sampling_sides, sampling_alpha, sampling_nbest_size: subword regularisation
    (`subword_sampling.sides/alpha/nbest_size`, docs/methods.md#subword-regularisation).
  wmt22_corpora, wmt22_synthetic: the corpora the WMT22 mixtures draw bitext from, and
    the synthetic corpora wmt22_large adds (`wmt22_corpora.names/synthetic`).
  extra_pair_groups: WMT22 pair groups beyond the built-in ones (`pair_groups.extra`).
  reverse_target: every target's pieces in reverse order (before its EOS): the model
    learns to write right to left, for n-best reranking (`reverse_target.enabled`,
    REVERSE_TARGET; docs/methods.md#scoring-models-for-reranking).
  cached_tasks_dir: a folder launch/cache_tasks.py wrote, to train from through Grain,
    without TensorFlow (`cached_tasks.dir`, CACHED_TASKS_DIR; docs/data.md#cached-tasks);
    empty: the seqio tasks, read through tf.data.
  """
  vocabulary_path: str = DEFAULT_VOCABULARY_PATH
  source_vocabulary_path: str | None = None
  tag_strategy: str = tags.DEFAULT_TAG_STRATEGY
  temperature: float = DEFAULT_TEMPERATURE
  sampling_sides: Mapping[str, str] = dataclasses.field(default_factory=dict)
  sampling_alpha: float = 0.1
  sampling_nbest_size: int = -1
  wmt22_corpora: tuple[str, ...] = DEFAULT_WMT22_CORPORA
  wmt22_synthetic: tuple[str, ...] = ()
  extra_pair_groups: Mapping[str, Sequence[str]] = dataclasses.field(default_factory=dict)
  reverse_target: bool = False
  cached_tasks_dir: str = ''

  def __post_init__(self):
    tags.check_tag_strategy(self.tag_strategy, 'tag_strategy.strategy')
    validation.number('temperature_rate.temperature', self.temperature, above=0)
    for direction, side in self.sampling_sides.items():
      if side not in SAMPLING_SIDES:
        raise UserError(f'subword_sampling.sides: {side!r} for {direction} is not one of '
                        f'{", ".join(SAMPLING_SIDES)}')
    wmt22.pair_groups(self.extra_pair_groups)
