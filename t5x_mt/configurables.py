"""The gin edge: the names recipes bind, registered over the library's plain values.

Launch scripts parse gin, then ask this module for the configured values and pass them
down explicitly; nothing below reads gin. A recipe imports this module
(`gin/runs/base_run.gin`) and binds, for instance:

  train_loop.train.batch_size = %BATCH_SIZE                    # run_config.TrainConfig
  train_loop.train.learning_rate_schedule = @trainer.constant_schedule()
  train_loop.evaluate_directions.split = 'test'                # run_config.EvalConfig
  train_loop.build_vocabulary.vocab_size = %VOCAB_SIZE         # vocabulary building
  network.TransformerConfig.num_layers = 6                     # the model
  dro.DroConfig.rho = 0.1                                      # DRO, via train.dro
"""

from typing import Any

import gin

import data_tasks
from t5x_mt import dro
from t5x_mt import inference
from t5x_mt import network
from t5x_mt import partitioning
from t5x_mt import run_config
from t5x_mt import run_vocabulary
from t5x_mt import trainer

_train_config = gin.external_configurable(run_config.TrainConfig, name='train',
                                           module='train_loop')
_eval_config = gin.external_configurable(run_config.EvalConfig, name='evaluate_directions',
                                          module='train_loop')
_vocabulary_config = gin.external_configurable(run_vocabulary.VocabularyConfig,
                                                name='build_vocabulary', module='train_loop')
_model_config = gin.external_configurable(network.TransformerConfig, module='network')
_decode_settings = gin.external_configurable(inference.DecodeSettings, name='Translator',
                                             module='inference')
gin.external_configurable(dro.DroConfig, module='dro')
gin.external_configurable(trainer.inverse_sqrt_schedule, module='trainer')
gin.external_configurable(trainer.constant_schedule, module='trainer')
gin.external_configurable(trainer.make_optimizer, module='trainer')
_axis_rules = gin.external_configurable(partitioning.logical_axis_rules, module='partitioning')


def train_config(**overrides: Any) -> run_config.TrainConfig:
  """The bound `train_loop.train` settings (MODEL_DIR, TRAIN_STEPS, ...)."""
  return _train_config(**overrides)


def eval_config() -> run_config.EvalConfig:
  return _eval_config()


def vocabulary_config() -> run_vocabulary.VocabularyConfig:
  return _vocabulary_config()


def model_config(vocab_size: int) -> network.TransformerConfig:
  """The bound model (gin/models/*.gin) with the run's embedding rows."""
  return _model_config(vocab_size=vocab_size)


def decode_settings(**overrides: Any) -> inference.DecodeSettings:
  """The bound decoding settings (`inference.Translator.beam_size = 4`), `overrides` first."""
  return _decode_settings(**overrides)


def axis_rules() -> tuple[tuple[str, str | None], ...]:
  return _axis_rules()


def operative_config() -> str:
  """The bindings in force, as MODEL_DIR/config.gin records them."""
  return gin.config_str()


def run_spec() -> run_config.RunSpec:
  """The bound run: its settings checked first, then its model, before any data is read;
  the mixtures and corpora the recipe declares are registered."""
  train = train_config()
  model = model_config(vocab_size=1)
  data_tasks.register_from_config()
  return run_config.RunSpec(train=train, model=model, evaluation=eval_config(),
                            vocabulary=vocabulary_config(), decode=decode_settings(),
                            axis_rules=axis_rules(),
                            vocabulary_path=data_tasks.vocabulary_path(),
                            tag_strategy=data_tasks.tag_strategy(),
                            operative_config=operative_config)
