"""Corpora by name: one Protocol, two implementations, and a lazy registry.

A corpus answers "give me the (src, tgt) pairs of split S" for any two of its languages.
`MultiwayCorpus` holds rows {language: text} (CLDR, FLORES-200, NTREX-128: any two
languages of a row translate each other); `ParallelCorpus` holds one language pair (two
files, a TSV). Registration is lazy: a factory runs on the first `get_corpus`, so importing
this module never reads a file and never fails where `../shared/data` is absent.
"""

import json
import logging
import os
import re
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence

from t5x_mt.data import readers
from t5x_mt.data import tags
from t5x_mt.errors import UserError
from t5x_mt.languages import check_language

NTREX_VALIDATION_LINES = 200


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


# The registry: name -> factory, and name -> corpus once built.
_FACTORIES: dict[str, Callable[[], Corpus]] = {}
_BUILT: dict[str, Corpus] = {}
_NAME = re.compile(r'^[A-Za-z0-9_]+$')


def register_corpus(name: str, factory: Callable[[], Corpus], *,
                    overwrite: bool = False) -> None:
  """Registers `factory` under `name`; it runs on the first `get_corpus(name)`.

  Names become part of task names (`<corpus>_<src>-<tgt>`), hence letters, digits and '_'.
  """
  if not _NAME.match(name):
    raise UserError(f'corpus name {name!r}: use only letters, digits and _')
  if name in _FACTORIES and not overwrite:
    raise UserError(f'corpus {name!r} is already registered')
  _FACTORIES[name] = factory
  _BUILT.pop(name, None)


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


def register_parallel_files(name: str, src_lang: str, tgt_lang: str,
                            src_file: str | os.PathLike[str], tgt_file: str | os.PathLike[str],
                            *, split: str = 'train') -> None:
  """Registers two line-aligned files as split `split` of a one-pair corpus."""
  check_language(src_lang, f'corpus {name!r} source language')
  check_language(tgt_lang, f'corpus {name!r} target language')
  register_corpus(name, lambda: ParallelCorpus(
      name, src_lang, tgt_lang, {split: readers.read_parallel_files(src_file, tgt_file)}))


def register_tsv(name: str, src_lang: str, tgt_lang: str, path: str | os.PathLike[str], *,
                 src_column: int = 0, tgt_column: int = 1, split: str = 'train') -> None:
  """Registers two columns of a (gzipped) TSV file as split `split` of a one-pair corpus."""
  check_language(src_lang, f'corpus {name!r} source language')
  check_language(tgt_lang, f'corpus {name!r} target language')
  register_corpus(name, lambda: ParallelCorpus(
      name, src_lang, tgt_lang, {split: readers.read_tsv(path, src_column, tgt_column)}))


def register_multiway_dir(name: str, directory: str | os.PathLike[str], *, suffix: str = '.dev',
                          split: str = 'validation') -> None:
  """Registers a folder of `<FLORES code><suffix>` line-aligned files (FLORES-200 layout)."""
  register_corpus(name, lambda: MultiwayCorpus(
      name, {split: readers.read_multiway(readers.flores_files(directory, suffix))}))


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


def register_clean_dir(name: str, directory: str | os.PathLike[str], *, split: str = 'train',
                       overwrite: bool = False) -> None:
  """Registers a `launch/clean.py` output folder as split `split` of corpus `name`."""
  register_corpus(name, lambda: clean_dir_corpus(name, directory, split), overwrite=overwrite)


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
    src, _, tgt = direction.partition('-')
    where = f'{manifest_path}: direction {direction!r}'
    check_language(src, where)
    check_language(tgt, where)
    if entry.get('synthetic_lang') not in (src, tgt):
      raise UserError(f'{where}: synthetic_lang must be {src} or {tgt}')
    scheme = tags.check_synthetic_tag_scheme(entry.get('tag'), f'{where}: tag')
    pairs[(src, tgt)] = readers.read_parallel_files(directory / f'{direction}.{src}',
                                                    directory / f'{direction}.{tgt}')
    synthetic[(src, tgt)] = (entry['synthetic_lang'], scheme)
  if not pairs:
    raise UserError(f'{manifest_path}: lists no directions')
  return SyntheticCorpus(name, split, pairs, synthetic)


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


def synthetic_tags(corpus: Corpus, src: str, tgt: str) -> tags.SyntheticTags:
  """The synthetic-data tags of a direction of any corpus (none for genuine corpora)."""
  if isinstance(corpus, SyntheticCorpus):
    return corpus.synthetic_tags(src, tgt)
  return tags.SyntheticTags()


def flores200_corpus(directory: str | os.PathLike[str]) -> MultiwayCorpus:
  """FLORES-200 dev as split 'validation' (devtest stays out: it is the held-out test)."""
  rows = readers.read_multiway(readers.flores_files(directory, '.dev'))
  return MultiwayCorpus('flores200', {'validation': rows})


def ntrex128_corpus(directory: str | os.PathLike[str],
                    validation_lines: int = NTREX_VALIDATION_LINES) -> MultiwayCorpus:
  """NTREX-128: 'train' = all but the last `validation_lines` lines, 'validation' = those.

  The tail is a held-out block of whole news documents at the end of newstest2019, so
  validation text shares no document with training text (apart from at most one document
  cut at the boundary).
  """
  rows = readers.read_multiway(readers.ntrex_files(directory))
  train, validation = readers.split_last(rows, validation_lines)
  return MultiwayCorpus('ntrex128', {'train': train, 'validation': validation})


def _shared_folder(relative: str) -> Path:
  """A folder under the shared data dir; UserError naming it where it is absent."""
  root = readers.shared_data_dir()
  if root is None:
    raise UserError(f'../shared/data/{relative}: no such folder (set '
                    f'${readers.SHARED_DATA_ENV} to the folder holding {relative})')
  folder = root / relative
  if not folder.is_dir():
    raise UserError(f'{folder}: no such folder')
  return folder


# gettext_l10n file stems (ISO 639-3, macrolanguage codes as the catalogs use them).
GETTEXT_TO_FLORES = {
    'afr': 'afr_Latn', 'amh': 'amh_Ethi', 'fuv': 'fuv_Latn', 'hau': 'hau_Latn',
    'kin': 'kin_Latn', 'lug': 'lug_Latn', 'nso': 'nso_Latn', 'orm': 'gaz_Latn',
    'som': 'som_Latn', 'ssw': 'ssw_Latn', 'swh': 'swh_Latn', 'tsn': 'tsn_Latn',
    'tso': 'tso_Latn', 'wol': 'wol_Latn', 'xho': 'xho_Latn', 'yor': 'yor_Latn',
    'zul': 'zul_Latn',
}


def gettext_l10n_corpus(directory: str | os.PathLike[str]) -> PairsCorpus:
  """Software UI strings, English to 17 African languages (`<iso3>.tsv.gz`: english,
  translation, domain), as split 'train'. Raw localisation noise: clean it first."""
  directory = readers.require_dir(directory)
  pairs = {}
  for stem, code in GETTEXT_TO_FLORES.items():
    path = directory / f'{stem}.tsv.gz'
    if path.is_file():
      pairs[('eng_Latn', code)] = readers.read_tsv(path)
  if not pairs:
    raise UserError(f'{directory}: no <iso3>.tsv.gz files (e.g. zul.tsv.gz)')
  return PairsCorpus('gettext_l10n', 'train', pairs)


def salt_corpus(directory: str | os.PathLike[str]) -> MultiwayCorpus:
  """SALT: 'train' English-Luganda pairs (TSV); 'validation' and 'test' from the multi-way
  JSONL files, keeping the languages that have FLORES-200 codes (eng, lug)."""
  directory = readers.require_dir(directory)
  train = readers.read_tsv(directory / 'salt-v1.0-2021-06.eng-lug.tsv')
  rows = {'train': [{'eng_Latn': eng, 'lug_Latn': lug} for eng, lug in train]}
  for split, name in (('validation', 'salt-dev-v1.2.jsonl'), ('test', 'salt-test-v1.2.jsonl')):
    rows[split] = [{'eng_Latn': row['text']['eng'], 'lug_Latn': row['text']['lug']}
                   for row in readers.read_jsonl(directory / name)]
  return MultiwayCorpus('salt', rows)


# Tatoeba Translation Challenge file codes (ISO 639-3; 'swa' is the Swahili macrolanguage).
TATOEBA_TO_FLORES = {
    'afr': 'afr_Latn', 'amh': 'amh_Ethi', 'deu': 'deu_Latn', 'eng': 'eng_Latn',
    'fra': 'fra_Latn', 'jpn': 'jpn_Jpan', 'swa': 'swh_Latn', 'xho': 'xho_Latn',
}


def tatoeba_corpus(directory: str | os.PathLike[str]) -> PairsCorpus:
  """Tatoeba challenge pairs as split 'train': a folder `<a>-<b>` per pair holding
  `tatoeba-test-<version>.<a>` and `.<b>`. Short everyday sentences (the challenge's test
  sets, so never report scores on them as Tatoeba-challenge results)."""
  directory = readers.require_dir(directory)
  pairs = {}
  for folder in sorted(p for p in directory.iterdir() if p.is_dir()):
    codes = folder.name.split('-')
    if len(codes) != 2 or not all(code in TATOEBA_TO_FLORES for code in codes):
      continue
    found = [sorted(folder.glob(f'tatoeba-test-*.{code}')) for code in codes]
    if not all(found):
      raise UserError(f'{folder}: no tatoeba-test-<version>.{codes[0]} and .{codes[1]} files')
    pairs[tuple(TATOEBA_TO_FLORES[code] for code in codes)] = readers.read_parallel_files(
        found[0][-1], found[1][-1])
  if not pairs:
    raise UserError(f'{directory}: no <a>-<b> pair folders of known languages')
  return PairsCorpus('tatoeba', 'train', pairs)


def _cldr() -> Corpus:
  from t5x_mt.data import cldr  # pylint: disable=g-import-not-at-top  (cldr imports this)
  return cldr.cldr_corpus()


register_corpus('cldr', _cldr)
register_corpus('flores200', lambda: flores200_corpus(_shared_folder('flores200/dev')))
register_corpus('ntrex128', lambda: ntrex128_corpus(_shared_folder('ntrex128')))
register_corpus('gettext_l10n', lambda: gettext_l10n_corpus(_shared_folder('gettext_l10n')))
register_corpus('salt', lambda: salt_corpus(_shared_folder('salt')))
register_corpus('tatoeba', lambda: tatoeba_corpus(_shared_folder('tatoeba')))
