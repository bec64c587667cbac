"""The gin edge: the names recipes bind, registered over the library's plain values.

Launch scripts parse gin, then ask this module for the configured values and pass them
down explicitly; nothing below reads gin. A recipe imports this module
(`gin/runs/base_run.gin`) and binds, for instance:

  training.TrainConfig.batch_size = %BATCH_SIZE                    # run_config.TrainConfig
  training.TrainConfig.learning_rate_schedule = @trainer.constant_schedule()
  evaluation.EvalConfig.split = 'test'                # per_direction.EvalConfig
  runs.VocabularyConfig.vocab_size = %VOCAB_SIZE         # vocabulary building
  network.TransformerConfig.num_layers = 6                     # the model
  dro.DroConfig.rho = 0.1                                      # DRO, via TrainConfig.dro
  data_tasks.vocabulary_path.path = %VOCABULARY_PATH           # data.settings.DataSettings
  data_tasks.register_from_config.mixtures = {'mix': ['ntrex128', 'bt1']}
  long_word.max_chars = 40                                     # a cleaning step

The data settings keep the names recipes have always bound under `data_tasks`, but this
module never touches the task registry: it gives the settings and the corpora and mixtures
a recipe declares as values, and the launch layer hands them to the registry
(`data_tasks.from_gin`).
"""

from collections.abc import Mapping, Sequence
from typing import Any

import gin

from t5x_mt.training import dro
from t5x_mt.core import files
from t5x_mt.config import gin_model
from t5x_mt.config import renamed
from t5x_mt.decoding import inference
from t5x_mt.core import partitioning
from t5x_mt.training import run_config
from t5x_mt.runs import run_layout
from t5x_mt.runs import run_vocabulary
from t5x_mt.training import trainer
from t5x_mt.data import corpora
from t5x_mt.data import settings
from t5x_mt.data import tags
from t5x_mt.data.cleaning import pipeline
from t5x_mt.data.cleaning import steps as cleaning_steps
from t5x_mt.evaluation import per_direction

_train_config = gin.external_configurable(run_config.TrainConfig, module='training')
_eval_config = gin.external_configurable(per_direction.EvalConfig, module='evaluation')
_vocabulary_config = gin.external_configurable(run_vocabulary.VocabularyConfig,
                                                module='runs')
_decode_settings = gin.external_configurable(inference.DecodeSettings, module='decoding')
gin.external_configurable(dro.DroConfig, module='dro')
gin.external_configurable(trainer.inverse_sqrt_schedule, module='trainer')
gin.external_configurable(trainer.constant_schedule, module='trainer')
gin.external_configurable(trainer.make_optimizer, module='trainer')
_axis_rules = gin.external_configurable(partitioning.logical_axis_rules, module='partitioning')
# Every cleaning step class under its step name: `long_word.max_chars = 40`.
_cleaning_steps = {name: gin.external_configurable(cls, name=name, module='cleaning')
                   for name, cls in cleaning_steps.STEPS.items()}


# The data settings, under the names recipes have always bound.
@gin.configurable('vocabulary_path', module='data_tasks')
def _vocabulary_path(path: str = settings.DEFAULT_VOCABULARY_PATH) -> str:
  return files.expand(path)


@gin.configurable('source_vocabulary_path', module='data_tasks')
def _source_vocabulary_path(path: str | None = None) -> str | None:
  return None if path is None else files.expand(path)


@gin.configurable('tag_strategy', module='data_tasks')
def _tag_strategy(strategy: str = tags.DEFAULT_TAG_STRATEGY) -> str:
  return strategy


@gin.configurable('temperature_rate', module='data_tasks')
def _temperature(temperature: float = settings.DEFAULT_TEMPERATURE) -> float:
  return temperature


@gin.configurable('reverse_target', module='data_tasks')
def _reverse_target(enabled: bool = False) -> bool:
  return enabled


@gin.configurable('cached_tasks', module='data_tasks')
def _cached_tasks(dir: str = '') -> str:  # pylint: disable=redefined-builtin
  return dir or ''


@gin.configurable('subword_sampling', module='data_tasks')
def _subword_sampling(sides: Mapping[str, str] | None = None, alpha: float = 0.1,
                      nbest_size: int = -1) -> dict[str, Any]:
  return dict(sampling_sides=dict(sides or {}), sampling_alpha=alpha,
              sampling_nbest_size=nbest_size)


@gin.configurable('wmt22_corpora', module='data_tasks')
def _wmt22_corpora(names: Sequence[str] = settings.DEFAULT_WMT22_CORPORA,
                   synthetic: Sequence[str] = ()) -> dict[str, Any]:
  return dict(wmt22_corpora=tuple(names), wmt22_synthetic=tuple(synthetic))


@gin.configurable('pair_groups', module='t5x_mt.data.wmt22')
def _pair_groups(extra: Mapping[str, Sequence[str]] | None = None
                 ) -> Mapping[str, Sequence[str]]:
  return dict(extra or {})


@gin.configurable('register_from_config', module='data_tasks')
def _corpora_and_mixtures(corpora_dirs: Mapping[str, str] | None = None,
                          mixtures: Mapping[str, Sequence[str]] | None = None,
                          streamed_corpora: Mapping[str, Mapping] | None = None,
                          corpora_files: Mapping[str, Mapping] | None = None,
                          language_models: Mapping[str, str] | None = None
                          ) -> dict[str, Any]:
  return dict(corpora_dirs=corpora_dirs, mixtures=mixtures, streamed_corpora=streamed_corpora,
              corpora_files=corpora_files, language_models=language_models)


@gin.configurable('gives_files', module='data_tasks')
def _gives_files(corpus: str, split: str) -> bool:
  """Whether `register_from_config.corpora_files` gives `corpus` files for `split`, so that
  a recipe scores a test split only where its user named one:
  `training.TrainConfig.evaluate_test_split = @data_tasks.gives_files()`."""
  spec = (_corpora_and_mixtures()['corpora_files'] or {}).get(corpus, {})
  return split in corpora.file_splits(spec)


@gin.configurable('model_dir_vocabulary', module='data_tasks')
def _model_dir_vocabulary(model_dir: str) -> str:
  """The run's own copy of its vocabulary (`MODEL_DIR/vocab.model`) as VOCABULARY_PATH, so
  that a run on other files builds a vocabulary of its own instead of reusing one built
  from other text: `VOCABULARY_PATH = @data_tasks.model_dir_vocabulary()`."""
  return str(run_layout.RunLayout(model_dir).vocabulary)


@gin.configurable('cleaning_steps', module='cleaning')
def _cleaning_step_names(names: Sequence[str] = ()) -> tuple[str, ...]:
  return tuple(names)


def train_config() -> run_config.TrainConfig:
  """The bound `training.TrainConfig` settings (MODEL_DIR, TRAIN_STEPS, ...)."""
  return _train_config()


def eval_config() -> per_direction.EvalConfig:
  return _eval_config()


def vocabulary_config() -> run_vocabulary.VocabularyConfig:
  return _vocabulary_config()


model_config = gin_model.model_config


def decode_settings(**overrides: Any) -> inference.DecodeSettings:
  """The bound decoding settings (`decoding.DecodeSettings.beam_size = 4`), `overrides` first."""
  return _decode_settings(**overrides)


def axis_rules() -> tuple[tuple[str, str | None], ...]:
  return _axis_rules()


def data_settings() -> settings.DataSettings:
  """The bound data settings (`data_tasks.tag_strategy.strategy`, ...), checked."""
  return settings.DataSettings(
      vocabulary_path=_vocabulary_path(), source_vocabulary_path=_source_vocabulary_path(),
      tag_strategy=_tag_strategy(),
      temperature=_temperature(), **_subword_sampling(), **_wmt22_corpora(),
      extra_pair_groups=_pair_groups(), reverse_target=_reverse_target(),
      cached_tasks_dir=_cached_tasks())


def corpora_and_mixtures() -> dict[str, Any]:
  """The corpora and mixtures the recipe declares, as keyword arguments of
  `data_tasks.register_corpora_and_mixtures`
  (`data_tasks.register_from_config.corpora_dirs/corpora_files/streamed_corpora/mixtures/
  language_models`)."""
  return _corpora_and_mixtures()


def cleaning_step_names() -> tuple[str, ...]:
  """The step names a cleaning preset binds (`cleaning_steps.names`), in order."""
  return _cleaning_step_names()


def cleaning_specs(names: Sequence[str]) -> list[pipeline.StepSpec]:
  """Specs of the named cleaning steps, with the parameters gin binds."""
  return pipeline.resolve_specs(names, lambda name: _cleaning_steps[name]())


def operative_config() -> str:
  """The bindings in force, as MODEL_DIR/config.gin records them."""
  return gin.config_str()


def run_spec() -> run_config.RunSpec:
  """The bound run: its settings checked first, then its model, then its data settings;
  nothing is read or registered."""
  train = train_config()
  model = model_config(vocab_size=1)
  data = data_settings()
  return run_config.RunSpec(train=train, model=model, evaluation=eval_config(),
                            vocabulary=vocabulary_config(), decode=decode_settings(),
                            axis_rules=axis_rules(), data=data,
                            operative_config=operative_config)


renamed.register_old_names()
