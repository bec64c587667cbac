"""The built-in corpora: which exist, and how each is read from the shared data folder.

`BUILTIN` maps each name to a factory that `corpora` (the registry) runs on first use:
the embedded CLDR corpus needs no files; the others read their folder under the shared
data dir and name it in a UserError where it is absent.
"""

import os
from pathlib import Path
from typing import Callable

from t5x_mt.data import cldr
from t5x_mt.data.yoruba import marking_corpus
from t5x_mt.data import readers
from t5x_mt.data.yoruba import yoruba_marks
from t5x_mt.data.corpus_types import Corpus
from t5x_mt.data.corpus_types import MultiwayCorpus
from t5x_mt.data.corpus_types import PairsCorpus
from t5x_mt.core.errors import UserError


NTREX_VALIDATION_LINES = 200


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
    raise UserError(f'{relative}: no such folder, the shared data folder is absent (set '
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


def yoruba_diacritics_corpus(ntrex_directory: str | os.PathLike[str],
                             gettext_directory: str | os.PathLike[str]
                             ) -> marking_corpus.MarkingCorpus:
  """Marked Yoruba for restoring its marks (`yoruba_marks`): NTREX-128's Yoruba, its train
  and validation lines as NTREX-128 splits them, and gettext_l10n's Yoruba UI strings as
  more training lines. FLORES-200 never joins: it is where restoration is measured."""
  ntrex = ntrex128_corpus(ntrex_directory)
  gettext = gettext_l10n_corpus(gettext_directory)
  language = yoruba_marks.LANGUAGE
  return marking_corpus.marking_corpus(
      'yoruba_diacritics',
      train=ntrex.sentences('train', language) + gettext.sentences('train', language),
      validation=ntrex.sentences('validation', language))


BUILTIN: dict[str, Callable[[], Corpus]] = {
    'cldr': cldr.cldr_corpus,
    'flores200': lambda: flores200_corpus(_shared_folder('flores200/dev')),
    'ntrex128': lambda: ntrex128_corpus(_shared_folder('ntrex128')),
    'gettext_l10n': lambda: gettext_l10n_corpus(_shared_folder('gettext_l10n')),
    'salt': lambda: salt_corpus(_shared_folder('salt')),
    'tatoeba': lambda: tatoeba_corpus(_shared_folder('tatoeba')),
    'yoruba_diacritics': lambda: yoruba_diacritics_corpus(_shared_folder('ntrex128'),
                                                          _shared_folder('gettext_l10n')),
}
