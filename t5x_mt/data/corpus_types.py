"""Corpus types: one Protocol and its implementations, and the folder layouts they read.

A corpus answers "give me the (src, tgt) pairs of split S" for any two of its languages.
`MultiwayCorpus` holds rows {language: text} (CLDR, FLORES-200, NTREX-128: any two
languages of a row translate each other); `ParallelCorpus` holds one language pair (two
files, a TSV); `PairsCorpus` holds several directions (a `launch/clean.py` folder) and
`SyntheticCorpus` adds the tags of back-translated pairs; `files_corpus` reads a
`ParallelCorpus` from files and holds out its validation lines. Naming corpora is the job of
`corpora` (the registry) and `catalogue` (the built-in ones).
"""

import json
import logging
import os
import re
from pathlib import Path
from typing import Mapping, Protocol, Sequence

from t5x_mt.data import readers
from t5x_mt.data import tags
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.core.languages import check_language


class Corpus(Protocol):
  """Parallel text in named splits, for any pair of its languages."""
  name: str

  def languages(self) -> tuple[str, ...]:
    ...

  def splits(self) -> tuple[str, ...]:
    ...

  def pairs(self, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    ...

  def sentences(self, split: str, lang: str) -> list[str]:
    ...


def _check_split(corpus: Corpus, split: str) -> None:
  if split not in corpus.splits():
    raise UserError(f'corpus {corpus.name!r} has no split {split!r} '
                    f'(it has: {", ".join(corpus.splits())})')


def _check_member(corpus: Corpus, lang: str) -> None:
  check_language(lang, f'corpus {corpus.name!r}')
  if lang not in corpus.languages():
    raise UserError(f'corpus {corpus.name!r} has no {lang} text '
                    f'(it has: {", ".join(corpus.languages())})')


class MultiwayCorpus:
  """Rows {FLORES code: text} where every text of a row translates every other.

  A row holds only the languages that have (non-empty) text for it, so pairs for two
  languages are the rows they share, in row order.
  """

  def __init__(self, name: str, rows_by_split: Mapping[str, Sequence[Mapping[str, str]]]):
    self.name = name
    self._rows = {split: [{lang: text for lang, text in row.items() if text.strip()}
                          for row in rows]
                  for split, rows in rows_by_split.items()}
    langs = {lang for rows in self._rows.values() for row in rows for lang in row}
    for lang in langs:
      check_language(lang, f'corpus {name!r}')
    self._languages = tuple(sorted(langs))

  def languages(self) -> tuple[str, ...]:
    return self._languages

  def splits(self) -> tuple[str, ...]:
    return tuple(self._rows)

  def rows(self, split: str) -> list[dict[str, str]]:
    """The rows of `split` (copies), for statistics and custom pairings."""
    _check_split(self, split)
    return [dict(row) for row in self._rows[split]]

  def pairs(self, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    _check_split(self, split)
    _check_member(self, src)
    _check_member(self, tgt)
    return [(row[src], row[tgt]) for row in self._rows[split] if src in row and tgt in row]

  def sentences(self, split: str, lang: str) -> list[str]:
    _check_split(self, split)
    _check_member(self, lang)
    return [row[lang] for row in self._rows[split] if lang in row]


class ParallelCorpus:
  """Pairs of one language pair; `pairs` also serves the reverse direction."""

  def __init__(self, name: str, src_lang: str, tgt_lang: str,
               pairs_by_split: Mapping[str, Sequence[tuple[str, str]]]):
    self.name = name
    self.src_lang = check_language(src_lang, f'corpus {name!r} source language')
    self.tgt_lang = check_language(tgt_lang, f'corpus {name!r} target language')
    self._pairs = {split: [(s, t) for s, t in pairs if s.strip() and t.strip()]
                   for split, pairs in pairs_by_split.items()}

  def languages(self) -> tuple[str, ...]:
    return (self.src_lang, self.tgt_lang)

  def directions(self) -> tuple[tuple[str, str], ...]:
    """The direction its files hold (a mixture that names the corpus trains this one)."""
    return ((self.src_lang, self.tgt_lang),)

  def splits(self) -> tuple[str, ...]:
    return tuple(self._pairs)

  def pairs(self, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    _check_split(self, split)
    _check_member(self, src)
    _check_member(self, tgt)
    if src == tgt:
      raise UserError(f'corpus {self.name!r}: source and target are both {src}')
    if src == self.src_lang:
      return list(self._pairs[split])
    return [(t, s) for s, t in self._pairs[split]]

  def sentences(self, split: str, lang: str) -> list[str]:
    _check_split(self, split)
    _check_member(self, lang)
    side = 0 if lang == self.src_lang else 1
    return [pair[side] for pair in self._pairs[split]]


class PairsCorpus:
  """Pairs of several directions, one split: what `launch/clean.py` writes. A direction
  also serves its reverse."""

  def __init__(self, name: str, split: str,
               pairs_by_direction: Mapping[tuple[str, str], Sequence[tuple[str, str]]]):
    self.name, self._split = name, split
    self._pairs = {}
    for (src, tgt), pairs in pairs_by_direction.items():
      check_language(src, f'corpus {name!r}')
      check_language(tgt, f'corpus {name!r}')
      self._pairs[(src, tgt)] = list(pairs)
    self._languages = tuple(sorted({lang for direction in self._pairs for lang in direction}))

  def languages(self) -> tuple[str, ...]:
    return self._languages

  def splits(self) -> tuple[str, ...]:
    return (self._split,)

  def directions(self) -> tuple[tuple[str, str], ...]:
    return tuple(self._pairs)

  def pairs(self, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    _check_split(self, split)
    if (src, tgt) in self._pairs:
      return list(self._pairs[(src, tgt)])
    if (tgt, src) in self._pairs:
      return [(t, s) for s, t in self._pairs[(tgt, src)]]
    raise UserError(f'corpus {self.name!r} has no {src}-{tgt} pairs (it has: '
                    f'{", ".join(f"{a}-{b}" for a, b in self._pairs)})')

  def sentences(self, split: str, lang: str) -> list[str]:
    _check_split(self, split)
    _check_member(self, lang)
    return [pair[direction.index(lang)] for direction, pairs in self._pairs.items()
            if lang in direction for pair in pairs]


_CLEAN_FILE = re.compile(r'^(?P<src>[a-z]{3}_[A-Z][a-z]{3})-(?P<tgt>[a-z]{3}_[A-Z][a-z]{3})\.'
                         r'(?P=src)$')


def clean_dir_corpus(name: str, directory: str | os.PathLike[str],
                     split: str = 'train') -> PairsCorpus:
  """The corpus `launch/clean.py` wrote into `directory`: <src>-<tgt>.<src>/.<tgt> pairs."""
  directory = readers.require_dir(directory)
  pairs = {}
  for path in sorted(directory.iterdir()):
    match = _CLEAN_FILE.match(path.name)
    if match:
      src, tgt = match['src'], match['tgt']
      pairs[(src, tgt)] = readers.read_parallel_files(
          path, directory / f'{src}-{tgt}.{tgt}')
  if not pairs:
    raise UserError(f'{directory}: no <src>-<tgt>.<src> files (not a launch/clean.py '
                    'output folder)')
  return PairsCorpus(name, split, pairs)


# Where one split's pairs are: two line-aligned files [source, target], or one TSV file.
PairFiles = str | os.PathLike[str] | Sequence[str | os.PathLike[str]]


def read_pair_files(files: PairFiles, columns: Sequence[int] = (0, 1)
                    ) -> list[tuple[str, str]]:
  """Pairs from two line-aligned files (source, target), or from two columns of one
  (gzipped) TSV file."""
  if isinstance(files, (str, os.PathLike)):
    return readers.read_tsv(files, *columns)
  return readers.read_parallel_files(*files)


def files_corpus(name: str, src_lang: str, tgt_lang: str,
                 split_files: Mapping[str, PairFiles], *, columns: Sequence[int] = (0, 1),
                 validation_lines: int = 0) -> ParallelCorpus:
  """A one-pair corpus read from files, a split per entry of `split_files`.

  `validation_lines` > 0 holds out the last that many lines of the 'train' files as split
  'validation': those lines, and any earlier training pair that repeats one of them
  exactly, are never trained on, so the run is never scored on a pair it learnt.
  """
  pairs = {split: read_pair_files(files, columns) for split, files in split_files.items()}
  if validation_lines:
    pairs['train'], pairs['validation'] = _hold_out_last(
        name, pairs['train'], validation_lines, split_files['train'])
  return ParallelCorpus(name, src_lang, tgt_lang, pairs)


def _hold_out_last(name: str, pairs: list[tuple[str, str]], lines: int, files: PairFiles
                   ) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
  """(training pairs, held-out pairs): the last `lines` pairs held out, and the earlier
  ones that repeat a held-out pair left out of training."""
  if lines >= len(pairs):
    raise UserError(f'corpus {name!r}: validation_lines={lines} would hold out every line '
                    f'of {_describe(files)} ({len(pairs)} lines)')
  train, held_out = readers.split_last(pairs, lines)
  held_out_pairs = set(held_out)
  kept = [pair for pair in train if pair not in held_out_pairs]
  logging.info('Corpus %r: the last %d lines of %s are its validation split (%d earlier '
               'training pairs repeat one of them and are left out)', name, lines,
               _describe(files), len(train) - len(kept))
  return kept, held_out


def _describe(files: PairFiles) -> str:
  if isinstance(files, (str, os.PathLike)):
    return str(files)
  return ' and '.join(map(str, files))


SYNTHETIC_MANIFEST = 'synthetic.json'


class SyntheticCorpus(PairsCorpus):
  """Machine-translated pairs (`launch/back_translate.py` output): one language of each
  direction is synthetic, and the pairs carry that direction's tag scheme."""

  def __init__(self, name: str, split: str,
               pairs_by_direction: Mapping[tuple[str, str], Sequence[tuple[str, str]]],
               synthetic: Mapping[tuple[str, str], tuple[str, str]]):
    """`synthetic` maps each direction to (its synthetic language, its tag scheme)."""
    super().__init__(name, split, pairs_by_direction)
    self._synthetic = dict(synthetic)

  def synthetic_tags(self, src: str, tgt: str) -> tags.SyntheticTags:
    """The synthetic-data tags of `src` -> `tgt` pairs (either recorded direction)."""
    synthetic_lang, scheme = self._synthetic.get((src, tgt)) or self._synthetic[(tgt, src)]
    side = 'source' if synthetic_lang == src else 'target'
    return tags.synthetic_tags(scheme, side)


def _read_manifest(path: Path) -> dict:
  try:
    manifest = json.loads(path.read_text(encoding='utf-8'))
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise UserError(f'{path}: cannot read the synthetic-corpus manifest ({e})') from None
  if not isinstance(manifest, dict) or not isinstance(manifest.get('directions'), dict):
    raise UserError(f'{path}: not a synthetic-corpus manifest (no "directions" object)')
  return manifest


def synthetic_dir_corpus(name: str, directory: str | os.PathLike[str],
                         split: str = 'train') -> SyntheticCorpus:
  """The corpus `launch/back_translate.py` wrote into `directory`: the pair files of
  `clean_dir_corpus` and a `synthetic.json` naming each direction's synthetic side and tags."""
  directory = readers.require_dir(directory)
  manifest_path = directory / SYNTHETIC_MANIFEST
  manifest = _read_manifest(manifest_path)
  pairs, synthetic = {}, {}
  for direction, entry in manifest['directions'].items():
    where = f'{manifest_path}: direction {direction!r}'
    src, tgt = Direction.parse(direction, where)
    if entry.get('synthetic_lang') not in (src, tgt):
      raise UserError(f'{where}: synthetic_lang must be {src} or {tgt}')
    scheme = tags.check_synthetic_tag_scheme(entry.get('tag'), f'{where}: tag')
    pairs[(src, tgt)] = readers.read_parallel_files(directory / f'{direction}.{src}',
                                                    directory / f'{direction}.{tgt}')
    synthetic[(src, tgt)] = (entry['synthetic_lang'], scheme)
  if not pairs:
    raise UserError(f'{manifest_path}: lists no directions')
  return SyntheticCorpus(name, split, pairs, synthetic)


def synthetic_tags(corpus: Corpus, src: str, tgt: str) -> tags.SyntheticTags:
  """The synthetic-data tags of a direction of any corpus (none for genuine corpora)."""
  if isinstance(corpus, SyntheticCorpus):
    return corpus.synthetic_tags(src, tgt)
  return tags.SyntheticTags()
