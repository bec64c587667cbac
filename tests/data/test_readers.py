"""Tests for t5x_mt.data.readers: line handling, UTF-8 errors, alignment checks, TSV, samples."""

import gzip

import pytest

from t5x_mt.data import readers
from t5x_mt.core.errors import UserError


def test_read_lines_strips_lf_and_crlf_but_keeps_inner_carriage_return(tmp_path):
  path = tmp_path / 'mixed.txt'
  path.write_bytes(b'one\r\ntwo\nthr\ree\r\n\nlast')
  assert readers.read_lines(path) == ['one', 'two', 'thr\ree', '', 'last']


def test_read_lines_reports_invalid_utf8_with_file_and_line(tmp_path):
  path = tmp_path / 'latin1.txt'
  path.write_bytes('ok\nstill ok\ncaf\xe9\n'.encode('latin-1'))
  with pytest.raises(UserError, match=rf'{path}:3: not valid UTF-8'):
    readers.read_lines(path)


def test_missing_file_is_named(tmp_path):
  with pytest.raises(UserError, match=rf'{tmp_path / "absent.txt"}: no such file'):
    readers.read_lines(tmp_path / 'absent.txt')


def test_parallel_files_mismatch_names_both_files_and_counts(tmp_path):
  src, tgt = tmp_path / 'a.en', tmp_path / 'a.ha'
  src.write_text('1\n2\n3\n', encoding='utf-8')
  tgt.write_text('1\n2\n', encoding='utf-8')
  with pytest.raises(UserError) as error:
    readers.read_parallel_files(src, tgt)
  assert f'{src} has 3 lines but {tgt} has 2' in str(error.value)


def test_parallel_files_pairs_lines(tmp_path):
  src, tgt = tmp_path / 'a.en', tmp_path / 'a.fr'
  src.write_text('yes\nno\n', encoding='utf-8')
  tgt.write_text('oui\r\nnon\r\n', encoding='utf-8')
  assert readers.read_parallel_files(src, tgt) == [('yes', 'oui'), ('no', 'non')]


def test_read_tsv_gz_selects_columns(tmp_path):
  path = tmp_path / 'pairs.tsv.gz'
  with gzip.open(path, 'wt', encoding='utf-8') as f:
    f.write('Open\tBuɗe\tui\nSave file\tAjiye fayil\tmenu\n')
  assert readers.read_tsv(path) == [('Open', 'Buɗe'), ('Save file', 'Ajiye fayil')]
  assert readers.read_tsv(path, src_column=2, tgt_column=0) == [('ui', 'Open'),
                                                                 ('menu', 'Save file')]


def test_read_tsv_short_row_names_line(tmp_path):
  path = tmp_path / 'pairs.tsv'
  path.write_text('a\tb\nonly one column\n', encoding='utf-8')
  with pytest.raises(UserError, match=rf'{path}:2: 1 tab-separated columns'):
    readers.read_tsv(path)


def test_read_multiway_rejects_unequal_files(tmp_path):
  (tmp_path / 'eng_Latn.dev').write_text('a\nb\n', encoding='utf-8')
  (tmp_path / 'hau_Latn.dev').write_text('a\n', encoding='utf-8')
  with pytest.raises(UserError, match=r'differ in line count: .*eng_Latn.dev \(2\), '
                     r'.*hau_Latn.dev \(1\)'):
    readers.read_multiway(readers.flores_files(tmp_path))


def test_split_last_holds_out_tail():
  assert readers.split_last(list('abcde'), 2) == (['a', 'b', 'c'], ['d', 'e'])
  with pytest.raises(UserError, match='last 6 of 5'):
    readers.split_last(list('abcde'), 6)


def test_shared_data_dir_follows_env(tmp_path, monkeypatch):
  monkeypatch.setenv(readers.SHARED_DATA_ENV, str(tmp_path))
  assert readers.shared_data_dir() == tmp_path
  monkeypatch.setenv(readers.SHARED_DATA_ENV, str(tmp_path / 'absent'))
  assert readers.shared_data_dir() is None


def _shared(relative):
  root = readers.shared_data_dir()
  if root is None or not (root / relative).is_dir():
    pytest.skip(f'the shared data folder has no {relative}')
  return root / relative


def test_flores200_dev_files_have_997_aligned_lines():
  files = readers.flores_files(_shared('flores200/dev'))
  assert len(files) == 28 and 'gaz_Latn' in files and 'jpn_Jpan' in files
  rows = readers.read_multiway(files)
  assert len(rows) == 997
  assert all(len(row) == 28 for row in rows)


def test_ntrex128_has_1997_lines_without_carriage_returns():
  files = readers.ntrex_files(_shared('ntrex128'))
  assert len(files) == 21  # 22 files, less 'fuc' (Pulaar) which has no FLORES code.
  assert 'fuv_Latn' not in files and files['gaz_Latn'].name == 'newstest2019-ref.orm.txt'
  assert files['eng_Latn'].read_bytes().count(b'\r\n') == 1997
  rows = readers.read_multiway(files)
  assert len(rows) == 1997
  assert not any('\r' in text for row in rows for text in row.values())
