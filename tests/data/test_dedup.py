"""Normalised keys, the Bloom filter's sizing and behaviour, decontamination."""

import math

import pytest

from t5x_mt.data.cleaning import dedup
from t5x_mt.data.cleaning.steps import Pair
from t5x_mt.data.cleaning.steps import build_step
from t5x_mt.core.errors import UserError


def test_keys_ignore_case_spacing_punctuation_and_composition():
  assert dedup.text_key('Hello, World!') == dedup.text_key('hello world')
  assert dedup.text_key('café') == dedup.text_key('cafe\u0301')
  assert dedup.text_key('hello') != dedup.text_key('hallo')
  assert dedup.pair_key('ab', 'c') != dedup.pair_key('a', 'bc')


def test_bloom_size_follows_the_formulas():
  bits, hashes = dedup.bloom_size(1_000_000, 1e-7)
  assert bits == math.ceil(-1_000_000 * math.log(1e-7) / math.log(2) ** 2)
  assert bits / 1_000_000 == pytest.approx(33.55, abs=0.01)
  assert hashes == math.ceil(bits / 1_000_000 * math.log(2)) == 24
  with pytest.raises(UserError, match='error rate'):
    dedup.bloom_size(10, 1.5)


def test_bloom_filter_never_forgets_and_its_false_positive_rate_is_near_p():
  bloom = dedup.BloomFilter(20_000, 0.01)
  members = [dedup.text_key(f'member {i}') for i in range(20_000)]
  assert bloom.add_new(members) == [True] * len(members)
  assert bloom.contains(members).all()
  strangers = [dedup.text_key(f'stranger {i}') for i in range(50_000)]
  rate = bloom.contains(strangers).mean()
  assert 0.005 < rate < 0.015
  assert bloom.memory_bytes == math.ceil(bloom.num_bits / 8)


def test_bloom_add_new_sees_repeats_within_a_batch():
  bloom = dedup.BloomFilter(100, 1e-6)
  a, b = dedup.text_key('a'), dedup.text_key('b')
  assert bloom.add_new([a, b, a]) == [True, True, False]
  assert bloom.add_new([b]) == [False]


def test_decontaminate_drops_pairs_with_an_evaluation_sentence(tmp_path):
  evaluation = tmp_path / 'dev.txt'
  evaluation.write_text('The cat sat on the mat.\nAnother line\n', encoding='utf-8')
  keep = build_step('decontaminate', {'files': (str(evaluation),)}).bind('eng_Latn',
                                                                         'fra_Latn')
  assert not keep(Pair('the cat sat on the mat', 'Le chat'))
  assert not keep(Pair('Something', 'another LINE!'))
  assert keep(Pair('The cat sat on a mat.', 'Le chat'))
