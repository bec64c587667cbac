"""Names that earlier versions of t5x_mt wrote into run folders and recipes, mapped to
today's, in this one place.

A run's config.gin records the operative config under the names of the version that
wrote it, and begins with `import t5x_mt.configurables`. Both keep working: the module
is importable under its old name, and each old configurable name is registered with gin
as another name for today's configurable, so its bindings (long or short:
`train_loop.train.batch_size`, `train.batch_size`) set today's settings. New files are
written with today's names only.
"""

import sys

import gin

# Old module path -> today's, for `import` statements in saved gin files.
RENAMED_MODULES = {
    't5x_mt.configurables': 't5x_mt.config.configurables',
}

# Old gin configurable name -> today's (both as registered, module included).
RENAMED_CONFIGURABLES = {
    'train_loop.train': 'training.TrainConfig',
    'train_loop.evaluate_directions': 'evaluation.EvalConfig',
    'train_loop.build_vocabulary': 'runs.VocabularyConfig',
    'inference.Translator': 'decoding.DecodeSettings',
}


def register_old_names() -> None:
  """Makes every old name above reach today's module or configurable; idempotent. Called
  by `configurables` once it has registered today's names."""
  for old, new in RENAMED_MODULES.items():
    sys.modules.setdefault(old, sys.modules[new])
  registry = gin.config._REGISTRY  # pylint: disable=protected-access  (gin has no alias API)
  for old, new in RENAMED_CONFIGURABLES.items():
    if old not in registry:
      registry[old] = registry[new]
