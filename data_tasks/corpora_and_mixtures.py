"""Corpora and mixtures a recipe declares: corpus folders, corpora of files, streamed
corpora, mixtures over them and language models' mixtures, each from its spec.

A spec comes from a gin binding (`data_tasks.register_from_config`), so each is checked
here and a mistake names the binding at fault.
"""

from collections.abc import Mapping
from collections.abc import Sequence
import dataclasses

from data_tasks.language_models import register_language_model_mixture
from data_tasks.lookup import member_tasks
from data_tasks.task_mixtures import register_task_mixture
from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.core import validation
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import streamed
from t5x_mt.core.errors import UserError


def _check_spec_keys(spec: Mapping, known: Sequence[str], where: str) -> None:
  """A UserError unless `spec` is a dict of `known` keys (the two it needs first)."""
  if not isinstance(spec, Mapping):
    raise UserError(f'{where}: expected a dict with {known[0]} and {known[1]}')
  unknown = sorted(set(spec) - set(known))
  if unknown:
    raise UserError(f'{where}: unknown keys {unknown} (known: {", ".join(known)})')


def _spec_pair(spec: Mapping, key: str, default: Sequence | None, where: str) -> Sequence:
  """The spec's two-item [source, target] setting `key`."""
  value = spec.get(key, default)
  if not isinstance(value, Sequence) or isinstance(value, str) or len(value) != 2:
    raise UserError(f'{where}: {key} must be a list of two, [source, target]')
  return value


def _spec_columns(spec: Mapping, where: str) -> tuple[int, int]:
  src_column, tgt_column = _spec_pair(spec, 'columns', (0, 1), where)
  if not all(isinstance(column, int) and column >= 0 for column in (src_column, tgt_column)):
    raise UserError(f'{where}: columns must be two column numbers from 0')
  return src_column, tgt_column


_STREAMED_SPEC_KEYS = ('languages', 'files', 'columns') + tuple(
    field.name for field in dataclasses.fields(streamed.StreamSettings))


def register_streamed_corpus(name: str, spec: Mapping, where: str) -> None:
  """Registers a streamed TSV corpus from its spec: {'languages': [src, tgt], 'files':
  [paths or globs], and optionally 'columns': [src, tgt] (default [0, 1]) and the
  `streamed.StreamSettings` fields}; errors name `where`."""
  _check_spec_keys(spec, _STREAMED_SPEC_KEYS, where)
  languages_pair = _spec_pair(spec, 'languages', None, where)
  src_column, tgt_column = _spec_columns(spec, where)
  settings = streamed.StreamSettings(**{key: value for key, value in spec.items()
                                        if key not in ('languages', 'files', 'columns')})
  corpora.register_streamed_tsv(name, *languages_pair, spec.get('files'),
                                src_column=src_column, tgt_column=tgt_column,
                                settings=settings, overwrite=True)


_FILES_SPEC_KEYS = ('languages',) + corpora.FILE_SPLITS + ('columns', 'validation_lines')


def _split_files(files, where: str) -> corpus_types.PairFiles:
  if isinstance(files, str):
    return files
  if isinstance(files, (list, tuple)) and len(files) == 2 and all(
      isinstance(path, str) for path in files):
    return tuple(files)
  raise UserError(f'{where}: expected [source file, target file] or one TSV file, '
                  f'got {files!r}')


def register_files_corpus(name: str, spec: Mapping, where: str) -> None:
  """Registers a corpus of one language pair read from files, from its spec:
  {'languages': [src, tgt], 'train': files, and optionally 'validation' and 'test' (files),
  'validation_lines' (the last that many lines of the train files held out as the
  validation split, never trained on) and 'columns' (of TSV files, default [0, 1])}, where
  files are [source file, target file], line-aligned, or one TSV file; errors name `where`."""
  _check_spec_keys(spec, _FILES_SPEC_KEYS, where)
  src_lang, tgt_lang = _spec_pair(spec, 'languages', None, where)
  languages.check_language(src_lang, f'{where}: source language')
  languages.check_language(tgt_lang, f'{where}: target language')
  splits = corpora.file_splits(spec)
  if 'train' not in splits:
    raise UserError(f"{where}: no train files (give 'train': [source file, target file], "
                    'or one TSV file)')
  corpora.register_files(
      name, src_lang, tgt_lang,
      {split: _split_files(spec[split], f'{where}: {split}') for split in splits},
      columns=_spec_columns(spec, where), overwrite=True,
      validation_lines=validation.integer(f'{where}: validation_lines',
                                          spec.get('validation_lines', 0), minimum=0))


def register_corpora_and_mixtures(corpora_dirs: Mapping[str, str] | None = None,
                                  mixtures: Mapping[str, Sequence[str]] | None = None,
                                  streamed_corpora: Mapping[str, Mapping] | None = None,
                                  corpora_files: Mapping[str, Mapping] | None = None,
                                  language_models: Mapping[str, str] | None = None
                                  ) -> None:
  """Registers corpus folders, corpora of files, streamed corpora, mixtures over them and
  language models' mixtures (those a run's config names).

  `corpora_dirs` maps a corpus name to a folder written by launch/clean.py or
  launch/back_translate.py; `corpora_files` maps a corpus name to the spec of its files
  (`register_files_corpus`); `streamed_corpora` maps a corpus name to the spec of TSV files
  read by streaming (`register_streamed_corpus`); `mixtures` maps a mixture name to its
  members (see `member_tasks`), e.g. {'ntrex128_bt': ['ntrex128', 'bt_round1']};
  `language_models` maps a mixture name to the translation mixture whose target side it
  reads (`register_language_model_mixture`), e.g. {'ntrex128_lm': 'ntrex128'}. Safe to
  call again: the same names are registered anew.
  """
  for name, directory in (corpora_dirs or {}).items():
    corpora.register_dir(name, files.expand(directory), overwrite=True)
  for name, spec in (corpora_files or {}).items():
    register_files_corpus(
        name, spec, f'data_tasks.register_from_config.corpora_files[{name!r}]')
  for name, spec in (streamed_corpora or {}).items():
    register_streamed_corpus(
        name, spec, f'data_tasks.register_from_config.streamed_corpora[{name!r}]')
  for name, members in (mixtures or {}).items():
    tasks = list(dict.fromkeys(task for member in members
                               for task in member_tasks(member, mixture=name)))
    register_task_mixture(name, tasks, overwrite=True)
  for name, translation_mixture in (language_models or {}).items():
    register_language_model_mixture(name, translation_mixture)
