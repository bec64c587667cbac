"""Tests for t5x_mt.data.corpora: the registry, both corpus kinds and the built-in corpora."""

import gzip

import pytest

from t5x_mt.data import catalogue
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import readers
from t5x_mt.core.errors import UserError


def _multiway():
  return corpus_types.MultiwayCorpus('toy', {
      'train': [{'eng_Latn': 'one', 'fra_Latn': 'un', 'hau_Latn': 'ɗaya'},
                {'eng_Latn': 'two', 'fra_Latn': 'deux'},
                {'eng_Latn': 'three', 'hau_Latn': ' '}],
      'validation': [{'eng_Latn': 'four', 'hau_Latn': 'huɗu'}]})


def test_multiway_pairs_use_rows_with_both_languages():
  corpus = _multiway()
  assert corpus.languages() == ('eng_Latn', 'fra_Latn', 'hau_Latn')
  assert corpus.splits() == ('train', 'validation')
  assert corpus.pairs('train', 'eng_Latn', 'fra_Latn') == [('one', 'un'), ('two', 'deux')]
  assert corpus.pairs('train', 'hau_Latn', 'eng_Latn') == [('ɗaya', 'one')]  # ' ' is no text.
  assert corpus.sentences('train', 'eng_Latn') == ['one', 'two', 'three']


def test_multiway_rejects_unknown_split_and_language():
  corpus = _multiway()
  with pytest.raises(UserError, match="'toy' has no split 'test'"):
    corpus.pairs('test', 'eng_Latn', 'fra_Latn')
  with pytest.raises(UserError, match="'toy' has no yor_Latn text"):
    corpus.sentences('train', 'yor_Latn')
  with pytest.raises(UserError, match="did you mean 'hau_Latn'"):
    corpus.pairs('train', 'eng_Latn', 'hau')


def test_registered_parallel_files_serve_both_directions(tmp_path):
  (tmp_path / 'a.en').write_text('yes\nno\n', encoding='utf-8')
  (tmp_path / 'a.fr').write_text('oui\nnon\n', encoding='utf-8')
  corpora.register_parallel_files('test_two_files', 'eng_Latn', 'fra_Latn',
                                  tmp_path / 'a.en', tmp_path / 'a.fr')
  corpus = corpora.get_corpus('test_two_files')
  assert corpora.get_corpus('test_two_files') is corpus
  assert corpus.pairs('train', 'fra_Latn', 'eng_Latn') == [('oui', 'yes'), ('non', 'no')]
  assert corpus.sentences('train', 'fra_Latn') == ['oui', 'non']
  assert 'test_two_files' in corpora.registered_corpora()


def test_registered_tsv_reads_gzipped_columns(tmp_path):
  path = tmp_path / 'ui.tsv.gz'
  with gzip.open(path, 'wt', encoding='utf-8') as f:
    f.write('Open\tBuɗe\tui\n')
  corpora.register_tsv('test_tsv', 'eng_Latn', 'hau_Latn', path, split='validation')
  assert corpora.get_corpus('test_tsv').pairs('validation', 'eng_Latn', 'hau_Latn') == [
      ('Open', 'Buɗe')]


def test_registration_is_lazy_and_errors_name_the_file(tmp_path):
  corpora.register_parallel_files('test_lazy', 'eng_Latn', 'fra_Latn', tmp_path / 'no.en',
                                  tmp_path / 'no.fr')  # Nothing is read yet.
  with pytest.raises(UserError, match=r'no\.en: no such file'):
    corpora.get_corpus('test_lazy')


def test_registry_rejects_unknown_duplicate_and_bad_names():
  with pytest.raises(UserError, match=r"unknown corpus 'nope'; registered corpora: .*cldr"):
    corpora.get_corpus('nope')
  with pytest.raises(UserError, match="'cldr' is already registered"):
    corpora.register_corpus('cldr', lambda: None)
  with pytest.raises(UserError, match='letters, digits and _'):
    corpora.register_corpus('my-corpus', lambda: None)
  with pytest.raises(UserError, match='source language: .*did you mean'):
    corpora.register_parallel_files('test_bad_lang', 'en', 'fr', 'a', 'b')


def test_builtin_corpora_are_registered():
  assert {'cldr', 'flores200', 'ntrex128'} <= set(corpora.registered_corpora())


def test_missing_shared_folder_is_named(monkeypatch, tmp_path):
  monkeypatch.setenv(readers.SHARED_DATA_ENV, str(tmp_path))
  with pytest.raises(UserError, match=r'flores200/dev: no such folder'):
    catalogue.flores200_corpus(tmp_path / 'flores200' / 'dev')
  with pytest.raises(UserError, match=r'ntrex128: no such folder'):
    catalogue._shared_folder('ntrex128')  # pylint: disable=protected-access


def test_register_multiway_dir_reads_flores_layout(tmp_path):
  (tmp_path / 'eng_Latn.devtest').write_text('a\nb\n', encoding='utf-8')
  (tmp_path / 'swh_Latn.devtest').write_text('x\ny\n', encoding='utf-8')
  (tmp_path / 'notes.txt').write_text('ignored\n', encoding='utf-8')
  corpora.register_multiway_dir('test_dir', tmp_path, suffix='.devtest', split='test')
  corpus = corpora.get_corpus('test_dir')
  assert corpus.pairs('test', 'swh_Latn', 'eng_Latn') == [('x', 'a'), ('y', 'b')]


def _skip_without(relative):
  root = readers.shared_data_dir()
  if root is None or not (root / relative).is_dir():
    pytest.skip(f'the shared data folder has no {relative}')


def test_flores200_is_997_validation_rows():
  _skip_without('flores200/dev')
  corpus = corpora.get_corpus('flores200')
  assert corpus.splits() == ('validation',)
  assert len(corpus.languages()) == 28
  assert len(corpus.pairs('validation', 'eng_Latn', 'gaz_Latn')) == 997


def test_ntrex128_holds_out_last_200_lines():
  _skip_without('ntrex128')
  corpus = corpora.get_corpus('ntrex128')
  assert len(corpus.languages()) == 21
  train = corpus.sentences('train', 'eng_Latn')
  validation = corpus.sentences('validation', 'eng_Latn')
  assert (len(train), len(validation)) == (1797, 200)
  source = readers.read_lines(readers.shared_data_dir() / 'ntrex128/newstest2019-src.eng.txt')
  assert validation == source[-200:]
  assert len(corpus.pairs('validation', 'swh_Latn', 'hau_Latn')) == 200


def test_cldr_corpus_is_registered_and_built_once():
  corpus = corpora.get_corpus('cldr')
  assert corpora.get_corpus('cldr') is corpus
  assert corpus.name == 'cldr' and 'umb_Latn' not in corpus.languages()
