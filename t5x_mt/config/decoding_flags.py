"""The flags of every command that decodes (translate.py, evaluate.py, back_translate.py,
distill.py, rerank.py, ...): which model to load (a run, an ensemble of runs, one run per
language family) and how to decode with it, checked before anything loads, and the loading
of what they name.

The search method is --search (the registered methods, `decoding.search`), and each
method's settings are flags named after the fields of its settings dataclass, declared
there once: --beam_size and --stop (beam), --temperature, --top_k, --top_p, --epsilon and
--seed (sampling). They are the names gin binds too (`decoding.DecodeSettings.<field>`).
"""

import argparse
import math
from typing import Any

from google.protobuf import message

from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.core import validation
from t5x_mt.core.errors import UserError
from t5x_mt.data import tags
from t5x_mt.decoding import ensemble_combinations
from t5x_mt.decoding import search
from t5x_mt.runs import run_layout


def add_decoding_flags(parser: argparse.ArgumentParser, family_models: bool = False
                       ) -> list[str]:
  """Which run and checkpoint to load, and how to decode (translate.py, evaluate.py, ...);
  returns the flags' names (argparse's dests).

  With `family_models`, --family_models may name one run per target-language family group
  instead of --checkpoint_dir (docs/methods.md#language-family-grouping).
  """
  names = []

  def flag(*args: Any, **kwargs: Any) -> None:
    names.append(parser.add_argument(*args, **kwargs).dest)

  flag('--checkpoint_dir', default=None, help="the training run's MODEL_DIR")
  flag('--ensemble', default=None,
       help='several runs sharing one vocabulary, decoding as one model, '
       'instead of --checkpoint_dir: RUN[:WEIGHT],RUN[:WEIGHT],... (weight 1 '
       'when left out); each loads its latest checkpoint')
  flag('--ensemble_combination', default=ensemble_combinations.DEFAULT,
       help='how --ensemble combines its runs at each step: mean_log_prob '
       '(weighted mean of log-probabilities, as Marian) or log_mean_prob '
       '(log of the weighted mean probability, as fairseq)')
  if family_models:
    flag('--family_models', default=None,
         help='one run per family group instead of --checkpoint_dir: '
         '1=DIR,2=DIR,...; each direction goes to its target\'s group (swh: 3)')
  flag('--step', type=int, default=None,
       help='checkpoint step to load (default: the latest)')
  flag('--search', default=None,
       help=f'search method: {", ".join(search.names())} (default: the '
       "method whose setting flags are given, else the run's, else "
       f'{search.DEFAULT})')
  for name, (method, field) in search.setting_fields().items():
    flag(f'--{name}', type=field.type, default=None,
         help=f'{method.name}: {field.metadata["help"]} (default: the run\'s '
         f'setting, else {field.default})')
  flag('--alpha', type=float, default=None,
       help="length penalty exponent (default: the run's setting, else 1.0)")
  flag('--batch_size', type=int, default=None,
       help="sentences per batch (default: the run's setting, else 64)")
  flag('--parallel_batches', type=int, default=None,
       help='batches decoded at once, a thread each (default: the CPU cores '
       'on one CPU device, else 1)')
  flag('--pivot_via', default=None,
       help='translate through this language (X -> pivot -> Y), e.g. eng_Latn')
  flag('--no_repeat_ngram_size', type=int, default=None,
       help='never output an n-gram of this size twice in a sentence '
       "(default: the run's setting, else off)")
  flag('--max_length_ratio', type=float, default=None,
       help='end each output after ceil(ratio * source pieces + '
       "--max_length_offset) pieces (default: the run's setting, else off)")
  flag('--max_length_offset', type=int, default=None,
       help="pieces allowed beyond the ratio (default: the run's setting, "
       'else 10)')
  flag('--yoruba_diacritics', default=None,
       help='restore the tone marks and underdots of outputs into yor_Latn '
       'with this run of gin/runs/yoruba_diacritics.gin (default: the run\'s '
       'setting, else off)')
  return names


def decoding_overrides(args: argparse.Namespace) -> dict[str, Any]:
  """The Translator settings the decoding flags given fix, checked so a typo fails before
  loading (the flags' values first, then the folders they name); a flag left out leaves
  the run's setting (its config.gin) in force."""
  names_runs = getattr(args, 'ctranslate2', None) is None  # An exported folder names the model.
  if names_runs:
    _check_model_flags(args)
  else:
    _check_export_flags(args)
  overrides = search_overrides(args)
  for name, at_least in (('alpha', None), ('batch_size', 1),
                         ('parallel_batches', 1), ('no_repeat_ngram_size', 0),
                         ('max_length_ratio', 0), ('max_length_offset', 0)):
    value = getattr(args, name)
    if value is not None:
      if at_least is not None and value < at_least:
        raise UserError(f'--{name}: must be >= {at_least}, got {value}')
      overrides[name] = value
  if args.pivot_via:
    overrides['pivot_language'] = languages.check_language(args.pivot_via, '--pivot_via')
    overrides['pivot_directions'] = ('*',)
  if args.yoruba_diacritics is not None:
    overrides['yoruba_diacritics'] = args.yoruba_diacritics
  for flag, folder in (_runs_named(args) if names_runs else []) + [
      ('--yoruba_diacritics', args.yoruba_diacritics)]:
    if folder is not None:
      files.check_input(folder, flag, folder=True)
  if names_runs and args.ensemble is not None:
    ensemble_combinations.check('--ensemble_combination', args.ensemble_combination)
  return overrides


def search_overrides(args: argparse.Namespace) -> dict[str, Any]:
  """--search and the search methods' setting flags given, checked: the method and its
  settings. Without --search, setting flags choose the method they belong to (--top_k:
  sampling; --beam_size=1 still means a greedy beam); a flag of another method than the
  one chosen is refused."""
  fields = search.setting_fields()
  given = {name: getattr(args, name) for name in fields if getattr(args, name) is not None}
  owners = {name: fields[name][0].name for name in given}
  chosen = args.search
  if chosen is not None:
    validation.choice('--search', chosen, search.names())
  elif len(set(owners.values())) > 1:
    flags = ', '.join(f'--{name} ({owner})' for name, owner in owners.items())
    raise UserError(f'{flags}: settings of different search methods; give --search')
  elif owners:
    chosen = next(iter(owners.values()))
  for name, value in given.items():
    if owners[name] != chosen:
      raise UserError(f'--{name}: a setting of --search={owners[name]}, not of '
                      f'--search={chosen}')
    search.check_setting(name, value, f'--{name}')
  return ({'search': chosen} if chosen is not None else {}) | given


def _check_model_flags(args: argparse.Namespace) -> None:
  """Exactly one of the flags that name the model, each well formed."""
  names = ['checkpoint_dir', 'ensemble'] + (['family_models'] if hasattr(args, 'family_models')
                                            else [])
  if sum(getattr(args, name) is not None for name in names) != 1:
    flags = [f'--{name}' for name in names]
    raise UserError(f'give exactly one of {", ".join(flags[:-1])} or {flags[-1]}')
  model_choice(args)  # Parses --ensemble and --family_models.
  if args.step is not None and args.checkpoint_dir is None:
    raise UserError('--step: only with --checkpoint_dir; ensembles and family models '
                    'each load their runs\' latest checkpoints')


def add_ctranslate2_flag(parser: argparse.ArgumentParser) -> None:
  """--ctranslate2: an exported folder as the model, instead of the run flags."""
  parser.add_argument('--ctranslate2', default=None,
                      help='a folder of launch/export.py --format=ctranslate2 instead of '
                      '--checkpoint_dir')


def _check_export_flags(args: argparse.Namespace) -> None:
  """No run flags beside --ctranslate2, whose folder is the model (and holds one
  checkpoint), and that folder there."""
  for flag in ('checkpoint_dir', 'family_models', 'ensemble', 'step'):
    if getattr(args, flag, None) is not None:
      raise UserError(f'--{flag}: not with --ctranslate2, whose folder is the model')
  files.check_input(args.ctranslate2, '--ctranslate2', folder=True)


def add_model_languages(args: argparse.Namespace) -> None:
  """Makes the languages that the vocabularies of the runs the model flags name add beyond
  FLORES-200 known (`tags.add_vocabulary_languages`), so that the language flags may name
  them before anything loads. Runs on an object store are left out (their client would
  load first, before the flags' other checks), as are folders without a readable
  vocabulary, left to the run's loading, which names what is wrong."""
  named = _runs_named(args) if getattr(args, 'ctranslate2', None) is None else []
  for _, folder in named:
    if folder is None or files.on_object_store(folder):
      continue
    vocabulary = run_layout.RunLayout(folder).vocabulary
    if vocabulary.is_file():
      try:
        tags.add_vocabulary_languages(vocabulary.read_bytes())
      except message.DecodeError:
        continue


def _runs_named(args: argparse.Namespace) -> list[tuple[str, str | None]]:
  """(flag, run folder) of each run the model flags name (None: the flag left out)."""
  choice = model_choice(args)
  return ([('--checkpoint_dir', choice['checkpoint_dir'])]
          + [('--ensemble', run) for run, _ in choice['ensemble_members'] or []]
          + [('--family_models', run) for run in (choice['family_models'] or {}).values()])


def model_choice(args: argparse.Namespace) -> dict[str, Any]:
  """`run_loading.load_model`'s arguments that name the model: --checkpoint_dir,
  --ensemble (with --ensemble_combination) or --family_models."""
  return dict(checkpoint_dir=args.checkpoint_dir,
              family_models=family_models(args) if hasattr(args, 'family_models') else None,
              ensemble_members=None if args.ensemble is None else parse_ensemble(args.ensemble),
              ensemble_combination=args.ensemble_combination)


def first_run(args: argparse.Namespace) -> tuple[str, str]:
  """(run folder, flag) of the run the model flags name, or of the first of several, or
  the folder --ctranslate2 names (an export holds its run's config.gin and vocabulary)."""
  if getattr(args, 'ctranslate2', None) is not None:
    return args.ctranslate2, '--ctranslate2'
  choice = model_choice(args)
  if choice['ensemble_members'] is not None:
    return choice['ensemble_members'][0][0], '--ensemble'
  if choice['family_models'] is not None:
    return next(iter(choice['family_models'].values())), '--family_models'
  return args.checkpoint_dir, '--checkpoint_dir'


def load_model(args: argparse.Namespace, step: int | None, overrides: dict[str, Any]) -> Any:
  """The translator the model flags name (`run_loading.load_model` of `model_choice`) at
  `step`, decoding with `overrides`."""
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top  (loads JAX)
  return run_loading.load_model(step=step, overrides=overrides, **model_choice(args))


def parse_ensemble(text: str) -> list[tuple[str, float]]:
  """[(run folder, weight)] from 'RUN[:WEIGHT],RUN[:WEIGHT],...' (--ensemble). What
  follows an entry's last colon is its weight unless it holds a '/': gs://bucket/run has
  none, and a folder whose name ends in ':x' is written with its weight, runs/a:x:1."""
  members = []
  for entry in filter(None, (e.strip() for e in text.split(','))):
    directory, sep, weight = entry.rpartition(':')
    if not sep or '/' in weight:
      directory, weight = entry, '1'
    if not directory:
      raise UserError(f'--ensemble: {entry!r} names no run (RUN[:WEIGHT])')
    members.append((directory, _ensemble_weight(weight, entry)))
  if not members:
    raise UserError('--ensemble: give at least one RUN[:WEIGHT]')
  return members


def _ensemble_weight(text: str, entry: str) -> float:
  """The weight `text` of --ensemble's `entry`: a finite number > 0."""
  try:
    weight = float(text)
  except ValueError:
    weight = math.nan
  if not (math.isfinite(weight) and weight > 0):
    raise UserError(f'--ensemble: {entry}: {text!r} is not a weight (a number > 0)')
  return weight


def family_models(args: argparse.Namespace) -> dict[int, str] | None:
  """The runs --family_models names, None when --checkpoint_dir names one run instead."""
  return None if args.family_models is None else parse_family_models(args.family_models)


def parse_family_models(text: str) -> dict[int, str]:
  """{family group: run folder} from '1=DIR,2=DIR,...' (--family_models)."""
  models = {}
  for entry in filter(None, (e.strip() for e in text.split(','))):
    group, sep, directory = entry.partition('=')
    if not sep or not group.strip().isdigit() or not directory.strip():
      raise UserError(f'--family_models: {entry!r} is not GROUP=DIR (e.g. 3=/runs/lfg3)')
    models[int(group)] = directory.strip()
  if not models:
    raise UserError('--family_models: give at least one GROUP=DIR')
  return models
