"""The corpus registry: corpora by name, built lazily.

Registration is lazy: a factory runs on the first `get_corpus`, so importing this module
never reads a file and never fails where the shared data folder is absent. The built-in
corpora (`catalogue.BUILTIN`) are registered from the start; users add their own files and
`launch/clean.py` or `launch/back_translate.py` folders.
"""

import logging
import os
import re
from pathlib import Path
from typing import Callable, Mapping, Sequence

from t5x_mt.core import files
from t5x_mt.data import catalogue
from t5x_mt.data import readers
from t5x_mt.data import streamed
from t5x_mt.data.corpus_types import Corpus
from t5x_mt.data.corpus_types import MultiwayCorpus
from t5x_mt.data.corpus_types import PairFiles
from t5x_mt.data.corpus_types import SYNTHETIC_MANIFEST
from t5x_mt.data.corpus_types import clean_dir_corpus
from t5x_mt.data.corpus_types import files_corpus
from t5x_mt.data.corpus_types import synthetic_dir_corpus
from t5x_mt.core.errors import UserError
from t5x_mt.core.languages import check_language


# The registry: name -> factory, and name -> corpus once built.
_FACTORIES: dict[str, Callable[[], Corpus]] = dict(catalogue.BUILTIN)
_BUILT: dict[str, Corpus] = {}
_STREAMED: set[str] = set()
_NAME = re.compile(r'^[A-Za-z0-9_]+$')


def register_corpus(name: str, factory: Callable[[], Corpus], *,
                    overwrite: bool = False, is_streamed: bool = False) -> None:
  """Registers `factory` under `name`; it runs on the first `get_corpus(name)`.

  Names become part of task names (`<corpus>_<src>-<tgt>`), hence letters, digits and '_'.
  `is_streamed` says the factory builds a `streamed.StreamedCorpus`, so that tasks can be
  registered for it without building it.
  """
  if not _NAME.match(name):
    raise UserError(f'corpus name {name!r}: use only letters, digits and _')
  if name in _FACTORIES and not overwrite:
    raise UserError(f'corpus {name!r} is already registered')
  _FACTORIES[name] = factory
  _BUILT.pop(name, None)
  if is_streamed:
    _STREAMED.add(name)
  else:
    _STREAMED.discard(name)


def is_streamed(name: str) -> bool:
  """Whether corpus `name` is read by streaming (`register_streamed_tsv`)."""
  return name in _STREAMED


def get_corpus(name: str) -> Corpus:
  """The corpus registered as `name`, built on first use and kept."""
  if name not in _FACTORIES:
    raise UserError(f'unknown corpus {name!r}; registered corpora: '
                    f'{", ".join(registered_corpora())}')
  if name not in _BUILT:
    logging.info('Building corpus %r', name)
    _BUILT[name] = _FACTORIES[name]()
  return _BUILT[name]


def registered_corpora() -> tuple[str, ...]:
  return tuple(sorted(_FACTORIES))


def train_pair_count(name: str, src_lang: str, tgt_lang: str) -> int:
  """Training pairs of one direction of corpus `name`; a streamed corpus's counted, not read."""
  corpus = get_corpus(name)
  if isinstance(corpus, streamed.StreamedCorpus):
    return corpus.num_pairs('train', src_lang, tgt_lang)
  return len(corpus.pairs('train', src_lang, tgt_lang))


# Pairs of a streamed corpus direction a vocabulary is built from, evenly spaced.
STREAMED_VOCABULARY_SAMPLE = 1_000_000


def training_pairs(name: str, src_lang: str, tgt_lang: str) -> list[tuple[str, str]]:
  """One direction's training pairs of corpus `name`; a streamed corpus's sampled
  (`STREAMED_VOCABULARY_SAMPLE` pairs)."""
  corpus = get_corpus(name)
  if isinstance(corpus, streamed.StreamedCorpus):
    return corpus.sample_pairs(src_lang, tgt_lang, limit=STREAMED_VOCABULARY_SAMPLE)
  return corpus.pairs('train', src_lang, tgt_lang)


FILE_SPLITS = ('train', 'validation', 'test')


def file_splits(spec: Mapping) -> tuple[str, ...]:
  """The splits a spec of a corpus of files ({'train': files, 'validation': files, ...})
  gives files for. A split whose paths are all None is not given: a recipe's optional
  files that its user left unset."""
  def given(split_files) -> bool:
    if isinstance(split_files, (list, tuple)):
      return any(path is not None for path in split_files)
    return split_files is not None
  return tuple(split for split in FILE_SPLITS if given(spec.get(split)))


def register_files(name: str, src_lang: str, tgt_lang: str,
                   split_files: Mapping[str, PairFiles], *, columns: Sequence[int] = (0, 1),
                   validation_lines: int = 0, overwrite: bool = False) -> None:
  """Registers a one-pair corpus read from files: each split two line-aligned files
  [source, target] or one (gzipped) TSV file (`columns` the source and target columns).

  `validation_lines` > 0 holds out the last that many lines of 'train' as 'validation'
  (`corpus_types.files_corpus`). Paths may hold ~ and environment variables (`files.expand`).
  """
  check_language(src_lang, f'corpus {name!r} source language')
  check_language(tgt_lang, f'corpus {name!r} target language')
  if validation_lines and 'validation' in split_files:
    raise UserError(f'corpus {name!r}: give validation files or validation_lines, not both')
  if validation_lines and 'train' not in split_files:
    raise UserError(f'corpus {name!r}: validation_lines holds out lines of train files, '
                    'and none are given')
  expanded = {split: _expanded(pair_files) for split, pair_files in split_files.items()}
  register_corpus(name, lambda: files_corpus(
      name, src_lang, tgt_lang, expanded, columns=columns, validation_lines=validation_lines),
                  overwrite=overwrite)


def _expanded(pair_files: PairFiles) -> PairFiles:
  if isinstance(pair_files, (str, os.PathLike)):
    return files.expand(pair_files)
  return tuple(map(files.expand, pair_files))


def register_parallel_files(name: str, src_lang: str, tgt_lang: str,
                            src_file: str | os.PathLike[str], tgt_file: str | os.PathLike[str],
                            *, split: str = 'train') -> None:
  """Registers two line-aligned files as split `split` of a one-pair corpus."""
  register_files(name, src_lang, tgt_lang, {split: (src_file, tgt_file)})


def register_tsv(name: str, src_lang: str, tgt_lang: str, path: str | os.PathLike[str], *,
                 src_column: int = 0, tgt_column: int = 1, split: str = 'train') -> None:
  """Registers two columns of a (gzipped) TSV file as split `split` of a one-pair corpus."""
  register_files(name, src_lang, tgt_lang, {split: path}, columns=(src_column, tgt_column))


def register_streamed_tsv(name: str, src_lang: str, tgt_lang: str,
                          files: Sequence[str | os.PathLike[str]], *, src_column: int = 0,
                          tgt_column: int = 1,
                          settings: streamed.StreamSettings = streamed.StreamSettings(),
                          overwrite: bool = False) -> None:
  """Registers (gzipped) TSV files, paths or glob patterns, as the 'train' split of a
  one-pair corpus read by streaming, never loaded whole (`streamed.StreamedCorpus`)."""
  check_language(src_lang, f'corpus {name!r} source language')
  check_language(tgt_lang, f'corpus {name!r} target language')
  paths = streamed.expand_files(files, f'corpus {name!r} files')
  register_corpus(name, lambda: streamed.StreamedCorpus(
      name, src_lang, tgt_lang, paths, src_column=src_column, tgt_column=tgt_column,
      settings=settings), overwrite=overwrite, is_streamed=True)


def register_multiway_dir(name: str, directory: str | os.PathLike[str], *, suffix: str = '.dev',
                          split: str = 'validation') -> None:
  """Registers a folder of `<FLORES code><suffix>` line-aligned files (FLORES-200 layout)."""
  register_corpus(name, lambda: MultiwayCorpus(
      name, {split: readers.read_multiway(readers.flores_files(directory, suffix))}))


def register_clean_dir(name: str, directory: str | os.PathLike[str], *, split: str = 'train',
                       overwrite: bool = False) -> None:
  """Registers a `launch/clean.py` output folder as split `split` of corpus `name`."""
  register_corpus(name, lambda: clean_dir_corpus(name, directory, split), overwrite=overwrite)


def register_synthetic_dir(name: str, directory: str | os.PathLike[str], *,
                           split: str = 'train', overwrite: bool = False) -> None:
  """Registers a `launch/back_translate.py` output folder as split `split` of `name`."""
  register_corpus(name, lambda: synthetic_dir_corpus(name, directory, split),
                  overwrite=overwrite)


def register_dir(name: str, directory: str | os.PathLike[str], *, overwrite: bool = False
                 ) -> None:
  """Registers a folder written by launch/back_translate.py (it holds synthetic.json) or
  by launch/clean.py as training corpus `name`."""
  if (Path(directory) / SYNTHETIC_MANIFEST).is_file():
    register_synthetic_dir(name, directory, overwrite=overwrite)
  else:
    register_clean_dir(name, directory, overwrite=overwrite)
