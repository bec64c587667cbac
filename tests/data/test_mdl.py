"""The MDL objective against hand-computed values and brute force over all segmentations."""

import itertools
import math
import random

import pytest

from t5x_mt.data import mdl


def test_one_piece_costs_c_times_length():
  assert mdl.segmentation_cost(['abcdef']) == pytest.approx(2 * 6)


def test_cost_of_a_hand_worked_segmentation():
  # 'ab ab a' as ab,' ',ab,' ',a: distinct ab,' ',a -> C*(2+1+1) = 8. Bigrams after <s>:
  # <s>ab 1/1, ab' ' 2/2, ' 'ab 1/2, ' 'a 1/2 -> code length 2 ln 2.
  cost = mdl.segmentation_cost(['ab', ' ', 'ab', ' ', 'a'])
  assert cost == pytest.approx(8 + 2 * math.log(2))


def _random_strings():
  rng = random.Random(0)
  strings = ['mm mm mm', 'abababababab', 'aaaaaaaaaaaa', 'abcabcabcab', 'xyxyzxyxyz',
             'la la la la', 'hello world']
  for _ in range(25):
    alphabet = rng.choice(['ab', 'abc', 'ab ', 'abcd'])
    strings.append(''.join(rng.choice(alphabet) for _ in range(rng.randint(2, 12))))
  return strings


@pytest.mark.parametrize('text', _random_strings())
def test_search_is_an_upper_bound_on_brute_force(text):
  exact, pieces = mdl.brute_force_mdl(text)
  found, found_pieces = mdl.search_segmentation(text)
  assert ''.join(pieces) == text and ''.join(found_pieces) == text
  assert found == pytest.approx(mdl.segmentation_cost(found_pieces))
  assert found >= exact - 1e-9


@pytest.mark.parametrize('text', ['mm mm mm', 'abababababab', 'aaaaaaaaaaaa', 'abcabcabcabc',
                                  'la la la la'])
def test_search_finds_the_optimum_of_repeat_patterns(text):
  exact, _ = mdl.brute_force_mdl(text)
  found, _ = mdl.search_segmentation(text)
  assert found == pytest.approx(exact, rel=0.02)


def test_brute_force_enumerates_every_segmentation():
  text = 'abcab'
  costs = []
  for cuts in itertools.product([False, True], repeat=len(text) - 1):
    pieces, start = [], 0
    for position, cut in enumerate(cuts, start=1):
      if cut:
        pieces.append(text[start:position])
        start = position
    pieces.append(text[start:])
    costs.append(mdl.segmentation_cost(pieces))
  assert mdl.brute_force_mdl(text)[0] == pytest.approx(min(costs))


NOISE = [
    'mm mm mm mm mm mm mm mm mm mm',
    'Buy cheap viagra | Buy cheap cialis | Buy cheap levitra | Buy cheap pills | Buy cheap meds',
    'Nike shoes Nike shoes Nike shoes Nike shoes cheap Nike shoes',
    'kg kg kg kg kg kg kg kg',
    'Hotel Paris Hotel Paris Hotel Paris Hotel Paris booking',
    'click here click here click here click here',
    '1 cm 2 cm 3 cm 4 cm 5 cm 6 cm 7 cm 8 cm',
]
CLEAN = [
    'The committee will meet on Tuesday to discuss the new budget proposal.',
    'Wataalamu wanasema mvua za mwaka huu zitakuwa nyingi kuliko kawaida.',
    'Ọjọ́ ìsinmi ni a máa ń lọ sí ṣọ́ọ̀ṣì pẹ̀lú àwọn ọmọ wa.',
    'የአዲስ አበባ ከተማ አስተዳደር አዲስ መመሪያ አወጣ።',
]


@pytest.mark.parametrize('text', NOISE)
def test_filter_flags_repeat_pattern_noise(text):
  assert mdl.MdlRepeat().is_noisy(text)


@pytest.mark.parametrize('text', CLEAN)
def test_filter_keeps_clean_sentences(text):
  assert not mdl.MdlRepeat().is_noisy(text)


def test_token_unit_counts_words():
  units = mdl.as_units('buy now buy now', 'tokens')
  assert len(units) == 4 and units[0] == units[2] != units[1]
  assert mdl.MdlRepeat(unit='tokens', threshold=1.3, min_units=4).is_noisy(
      'spam spam spam spam spam spam')


def test_short_sides_are_never_flagged():
  assert not mdl.MdlRepeat().is_noisy('aaaa')
