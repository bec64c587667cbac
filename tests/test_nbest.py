"""The n-best file format: Moses' lines, read back exactly, bad lines named."""

import pytest

from t5x_mt.decoding import nbest
from t5x_mt.core.errors import UserError


def test_format_entry_writes_moses_line_with_features_in_given_order():
  line = nbest.format_entry(0, 'the cat', {'forward': -3.2, 'forward_normalized': -0.8,
                                           'length': 4}, -0.8)
  assert line == '0 ||| the cat ||| forward=-3.2 forward_normalized=-0.8 length=4 ||| -0.8\n'


def test_written_list_reads_back_the_same_floats_and_hypotheses(tmp_path):
  lists = [[nbest.Entry('a b', {'forward': 0.1 + 0.2, 'length': 2.0}, -1 / 3),
            nbest.Entry(' |edge ||', {'forward': -1e-300, 'length': 3.0}, -2.0)],
           [nbest.Entry('', {'forward': -7.25, 'length': 0.0}, -7.25)]]
  path = tmp_path / 'list.nbest'
  nbest.write(path, lists)
  assert nbest.read(path) == lists


@pytest.mark.parametrize('hypothesis', ['a ||| b', 'a\nb', 'a\rb'])
def test_hypothesis_the_format_cannot_carry_is_refused(hypothesis):
  with pytest.raises(UserError, match='cannot carry'):
    nbest.format_entry(3, hypothesis, {'forward': -1.0}, -1.0)


def test_non_finite_score_is_refused_rather_than_written_unreadable():
  with pytest.raises(UserError, match='forward of sentence 2 is -inf'):
    nbest.format_entry(2, 'x', {'forward': float('-inf')}, -1.0)


@pytest.mark.parametrize('bad_line, message', [
    ('0 ||| b ||| forward=-1', r'list.nbest:2: 3 fields where 4'),
    ('x ||| b ||| forward=-1 ||| -1', r"list.nbest:2: field index: 'x' is not an integer"),
    ('0 ||| b ||| forward ||| -1', r"list.nbest:2: field features: 'forward' is not name="),
    ('0 ||| b ||| forward=abc ||| -1', r"list.nbest:2: field feature forward: 'abc' is not"),
    ('0 ||| b ||| forward=nan ||| -1', r"list.nbest:2: field feature forward: 'nan' is not a f"),
    ('0 ||| b ||| forward=-1 ||| z', r"list.nbest:2: field total: 'z' is not a number"),
    ('2 ||| b ||| forward=-1 ||| -1', r'list.nbest:2: field index: 2 where 0 or 1 was'),
])
def test_malformed_line_names_file_line_and_field(tmp_path, bad_line, message):
  path = tmp_path / 'list.nbest'
  path.write_text(f'0 ||| a ||| forward=-1 ||| -1\n{bad_line}\n', encoding='utf-8')
  with pytest.raises(UserError, match=message):
    nbest.read(path)


def test_list_that_does_not_start_at_zero_is_refused(tmp_path):
  path = tmp_path / 'list.nbest'
  path.write_text('1 ||| a ||| forward=-1 ||| -1\n', encoding='utf-8')
  with pytest.raises(UserError, match=r'list.nbest:1: field index: 1 where 0 was'):
    nbest.read(path)


def test_failed_write_leaves_no_file(tmp_path):
  path = tmp_path / 'list.nbest'
  with pytest.raises(UserError):
    nbest.write(path, [[nbest.Entry('ok', {'f': 1.0}, 1.0), nbest.Entry('a|||b', {}, 0.0)]])
  assert list(tmp_path.iterdir()) == []


def test_missing_list_is_one_line_naming_it(tmp_path):
  with pytest.raises(UserError, match=r'absent.nbest: no such file'):
    nbest.read(tmp_path / 'absent.nbest')
