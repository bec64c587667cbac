"""Tests for t5x_mt.data.cldr: the embedded CLDR corpus is localised, held out and imbalanced."""

import re
import unicodedata

import pytest

from t5x_mt.data import cldr
from t5x_mt.core.errors import UserError


@pytest.fixture(scope='module')
def rows():
  return cldr.cldr_rows(seed=0)


@pytest.fixture(scope='module')
def corpus():
  return cldr.cldr_corpus(seed=0)


def _english(rows_of_kind):
  return [row['eng_Latn'] for row in rows_of_kind]


def test_babel_lacks_only_umbundu():
  assert cldr.CLDR_MISSING == ('umb_Latn',)
  assert len(cldr.CLDR_LANGUAGES) == 25 and 'gaz_Latn' in cldr.CLDR_LANGUAGES


def test_same_seed_same_rows_other_seed_other_compositions(rows):
  assert cldr.cldr_rows(seed=0) == rows
  other = cldr.cldr_rows(seed=1)
  for kind in ('dates', 'lists', 'units', 'relative_times'):
    assert other['train'][kind] != rows['train'][kind]
    assert other['test'][kind] != rows['test'][kind]
  assert other['long']['lists'] != rows['long']['lists']
  assert other['train']['names'] == rows['train']['names']  # Names do not depend on the seed.


def test_default_sizes(rows, corpus):
  for kind in ('dates', 'lists', 'units', 'relative_times'):
    assert len(rows['train'][kind]) == 800
    assert len(rows['validation'][kind]) == len(rows['test'][kind]) == 20
  assert rows['validation']['names'] == rows['test']['names'] == []
  assert corpus.splits() == ('train', 'validation', 'test', 'long')
  assert len(corpus.sentences('test', 'eng_Latn')) == 80


def test_row_counts_are_controllable():
  small = cldr.cldr_rows(train_rows_per_kind=10, eval_rows_per_kind=3)
  assert [len(small['train'][kind]) for kind in cldr.KINDS[:4]] == [10, 10, 10, 10]
  assert [len(small['test'][kind]) for kind in cldr.KINDS[:4]] == [3, 3, 3, 3]


def test_impossible_size_is_a_user_error():
  with pytest.raises(UserError, match='relative times requested, at most 1080'):
    cldr.cldr_rows(train_rows_per_kind=1100)


def test_evaluation_dates_are_in_years_absent_from_training(rows):
  def years(split):
    return {year for text in _english(rows[split]['dates'])
            for year in re.findall(r'\b(1[89]\d\d|20\d\d)\b', text)}
  train_years = years('train')
  assert len(train_years) == 120 - 2 * cldr.HELD_OUT_YEARS
  for split in ('validation', 'test'):
    held_out = years(split)
    assert held_out and not held_out & train_years
    training_dates = [text for row in rows['train']['dates'] for text in row.values()]
    assert not any(year in text for year in held_out for text in training_dates)
  assert not years('validation') & years('test')


def test_evaluation_quantities_are_absent_from_training(rows):
  def quantities(split):
    return {text.split(' ')[0] for text in _english(rows[split]['units'])}
  train = quantities('train')
  assert {'1', '2', '1,500', '0.5'} <= train
  for split in ('validation', 'test'):
    assert quantities(split) and not quantities(split) & train


def test_evaluation_lists_are_new_combinations_of_trained_names(rows):
  def name_sets(split):
    return {frozenset(re.split(r', and |, | and ', text))
            for text in _english(rows[split]['lists'])}
  train = name_sets('train')
  trained_names = set(_english(rows['train']['names'])) | set().union(*train)
  for split in ('validation', 'test'):
    assert not name_sets(split) & train
    assert set().union(*name_sets(split)) <= trained_names


def test_evaluation_relative_times_never_occur_in_training(rows):
  train = set(_english(rows['train']['relative_times']))
  train_counts = {re.search(r'\d+', text).group() for text in train}
  assert train_counts == {str(count) for count in cldr.TIME_COUNTS}
  for split in ('validation', 'test'):
    held_out = set(_english(rows[split]['relative_times']))
    assert len(held_out) == 20 and not held_out & train


def test_texts_are_localised_not_english_fallbacks(rows):
  english_months = ('January', 'February', 'March', 'April', 'June', 'July', 'August',
                    'September', 'October', 'November', 'December')
  hausa = [row['hau_Latn'] for row in rows['train']['dates']]
  assert len(hausa) == 800
  assert not any(month in text for month in english_months for text in hausa)
  july = next(row for row in rows['train']['dates'] if 'July' in row['eng_Latn'])
  assert 'Yuli' in july['hau_Latn'] and 'juillet' in july['fra_Latn']
  for row in rows['train']['names']:
    for lang, text in row.items():
      assert lang == 'eng_Latn' or text != row['eng_Latn']
  for kind in ('dates', 'units', 'relative_times'):
    for row in rows['test'][kind]:
      assert not re.search(r'M\d\d|\+\d+ |^-\d', ' '.join(row.values()))  # No CLDR root.


def test_texts_are_nfc_with_plain_spaces(corpus):
  for split in corpus.splits():
    for lang in corpus.languages():
      for text in corpus.sentences(split, lang):
        assert text == unicodedata.normalize('NFC', text) == text.strip()
        assert not re.search(r'[\u00a0\u202f\u2032\t\n]|  ', text)
  assert ('1,500 meters', '1 500 mètres') in corpus.pairs('train', 'eng_Latn', 'fra_Latn')


def test_sizes_follow_cldr_coverage(corpus):
  counts = {lang: len(corpus.sentences('train', lang)) for lang in corpus.languages()}
  assert counts['eng_Latn'] == max(counts.values()) > 4000
  assert counts['fra_Latn'] > 4000
  assert counts['nya_Latn'] == 800  # Chichewa CLDR: month and weekday names only.
  assert counts['hau_Latn'] > 3 * counts['kin_Latn']


def test_pairs_are_deterministic_rows_with_both_languages(corpus, rows):
  pairs = corpus.pairs('test', 'hau_Latn', 'zul_Latn')
  expected = [(row['hau_Latn'], row['zul_Latn']) for kind in cldr.KINDS
              for row in rows['test'][kind] if 'hau_Latn' in row and 'zul_Latn' in row]
  assert pairs == expected and len(pairs) == 58
  assert cldr.cldr_corpus(seed=0).pairs('test', 'hau_Latn', 'zul_Latn') == pairs


def _list_names(text):
  return re.split(r', and |, | and ', text)


def test_long_split_lists_are_longer_than_every_training_sentence(rows, corpus):
  long_rows = rows['long']['lists']
  assert len(long_rows) == 20
  assert [kind for kind in cldr.KINDS if rows['long'][kind]] == ['lists']
  train_items = {len(_list_names(text)) for text in _english(rows['train']['lists'])}
  long_items = [len(_list_names(text)) for text in _english(long_rows)]
  assert train_items == {2, 3, 4} and set(long_items) == {10, 11, 12}
  # Only the length is new: every name listed is a trained name.
  names = set().union(*map(_list_names, _english(long_rows)))
  assert names <= set(_english(rows['train']['names']))
  languages = {lang for row in long_rows for lang in row}
  assert {'eng_Latn', 'fra_Latn', 'hau_Latn', 'swh_Latn', 'amh_Ethi', 'zul_Latn'} <= languages
  for lang in languages:  # Longer in characters than any training text of the language.
    assert (min(len(text) for text in corpus.sentences('long', lang))
            > max(len(text) for text in corpus.sentences('train', lang)))
  assert corpus.pairs('long', 'eng_Latn', 'hau_Latn') == [
      (row['eng_Latn'], row['hau_Latn']) for row in long_rows]
