"""The registry set up as a recipe's gin bindings say: what the commands under launch/ call.

The t5x_mt library never imports the registry; a command does, here, before it hands the
library a mixture or task name: it makes the recipe's data settings the registry's,
registers the corpora and mixtures the recipe declares (after the languages its
vocabulary adds beyond FLORES-200, which they may name) and, for a run it trains, the
run's mixture or task where the registry registers that name on first use. `import
data_tasks` alone does none of this, so that another program reuses the registry without
gin.
"""

from collections.abc import Sequence
import dataclasses

import seqio
import tensorflow as tf

import data_tasks
from t5x_mt.config import configurables
from t5x_mt.data import tags
from t5x_mt.training import run_config
from t5x_mt.data.settings import DataSettings


def _set_up(data: DataSettings) -> None:
  data_tasks.configure(data)
  if tf.io.gfile.exists(data.vocabulary_path):  # Its added languages name corpora.
    tags.add_vocabulary_languages(tf.io.gfile.GFile(data.vocabulary_path, 'rb').read())
  data_tasks.register_corpora_and_mixtures(**configurables.corpora_and_mixtures())


def configure_data(vocabulary_path: str | None = None) -> DataSettings:
  """Makes the bound data settings the registry's, with `vocabulary_path` (a loaded run's
  own copy of its vocabulary) in place of VOCABULARY_PATH if given, and registers the
  corpora and mixtures the recipe declares (`data_tasks.register_from_config`)."""
  data = configurables.data_settings()
  if vocabulary_path is not None:
    data = dataclasses.replace(data, vocabulary_path=vocabulary_path)
  _set_up(data)
  return data


def run_spec() -> run_config.RunSpec:
  """The bound run (`configurables.run_spec`) with the registry set up for it: its data
  settings are the registry's, and the corpora and mixtures it declares and its
  MIXTURE_OR_TASK_NAME are registered."""
  spec = configurables.run_spec()
  _set_up(spec.data)
  data_tasks.get_mixture_or_task(spec.train.mixture_or_task_name)
  return spec


def registry_for_recipe(gin_files: Sequence[str], bindings: Sequence[str],
                        names: Sequence[str]) -> None:
  """Sets the registry up as the recipe says, unless every name in `names` is already
  registered: what a Beam worker of launch/cache_tasks.py runs before its first shard,
  in the command's own process (nothing to do) or in a fresh one."""
  if all(name in seqio.TaskRegistry.names() or name in seqio.MixtureRegistry.names()
         for name in names):
    return
  # pylint: disable=g-import-not-at-top  (a worker process parses the recipe first)
  from t5x_mt.config import gin_utils
  # pylint: enable=g-import-not-at-top
  gin_utils.parse_gin(gin_files, bindings)
  configure_data()
  for name in names:
    data_tasks.get_mixture_or_task(name)
