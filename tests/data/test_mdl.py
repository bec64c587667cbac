"""The MDL objective against hand-computed values, the search against brute force over all
segmentations, and the filter on repeat-pattern noise and clean text."""

import itertools
import math
import random

import pytest

from t5x_mt.data.cleaning import mdl


def test_one_piece_costs_c_times_length():
  assert mdl.segmentation_cost(['abcdef']) == pytest.approx(2 * 6)


def test_cost_of_hand_worked_segmentations():
  # 'ab ab a' as ab,' ',ab,' ',a: distinct ab,' ',a -> C*(2+1+1) = 8. Bigrams after <s>:
  # <s>ab 1/1, ab' ' 2/2, ' 'ab 1/2, ' 'a 1/2 -> code length 2 ln 2.
  cost = mdl.segmentation_cost(['ab', ' ', 'ab', ' ', 'a'])
  assert cost == pytest.approx(8 + 2 * math.log(2))
  # a,b,a: distinct a,b -> C*2 = 4. The last a is no history, so a's one successor is
  # certain: <s>a, ab, ba all 1/1 -> code length 0.
  assert mdl.segmentation_cost(['a', 'b', 'a']) == pytest.approx(4)


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


def _brute_force_maximal_repeats(text):
  """Substrings occurring twice or more (overlaps allowed) whose occurrences are preceded
  by different characters (or one by the start) and followed by different ones (or one
  by the end)."""
  repeats = set()
  for length in range(1, len(text)):
    for start in range(len(text) - length + 1):
      unit = text[start:start + length]
      starts = [i for i in range(len(text) - length + 1) if text.startswith(unit, i)]
      before = {text[i - 1] if i else i for i in starts}
      after = {text[i + length] if i + length < len(text) else -1 for i in starts}
      if len(starts) > 1 and len(before) > 1 and len(after) > 1:
        repeats.add(unit)
  return repeats


@pytest.mark.parametrize('seed', range(40))
def test_maximal_repeats_are_every_left_and_right_maximal_repeat(seed):
  rng = random.Random(seed)
  text = ''.join(rng.choice(rng.choice(['ab', 'abc', 'ab '])) for _ in range(rng.randint(2, 30)))
  found = mdl._maximal_repeats(text)
  assert sorted(found) == sorted(_brute_force_maximal_repeats(text))


def test_a_repeat_with_overlapping_occurrences_is_a_unit_as_well_as_its_period():
  # '  ' occurs at 0, 3, 4, 7 and 8: overlapping, so its period ' ' is a unit, but it also
  # occurs three times without overlap, and the optimum '  ','m ','  ','m ','  ' needs it.
  units = mdl._candidate_units('  m   m   ', 12)
  assert '  ' in units and ' ' in units


def _repeat_pattern_strings(count, seed=0):
  """Strings of 4 to 14 characters made of a few random units, separators and strays."""
  rng = random.Random(seed)
  strings = []
  while len(strings) < count:
    alphabet = rng.choice(['ab', 'abc', 'ab ', 'abcd', 'xyz ', 'mo ', 'kg .', 'la-', 'ok!'])
    units = [''.join(rng.choice(alphabet) for _ in range(rng.randint(1, 5)))
             for _ in range(rng.randint(1, 3))]
    separator = rng.choice(['', '', ' ', '-', ', '])
    text = ''.join(rng.choice(alphabet) for _ in range(rng.choice([0, rng.randint(1, 3)])))
    length = rng.randint(4, 14)
    while len(text) < length:
      draw = rng.random()
      text += rng.choice(alphabet) if draw < 0.1 else rng.choice(units) + separator * (draw < 0.7)
    strings.append(text[:length])
  return strings


def test_search_finds_the_exact_optimum_of_repeat_patterns():
  strings = _repeat_pattern_strings(300)
  exact, within_one_percent = 0, 0
  for text in strings:
    optimum, _ = mdl.brute_force_mdl(text)
    found, pieces = mdl.search_segmentation(text)
    assert ''.join(pieces) == text
    assert found == pytest.approx(mdl.segmentation_cost(pieces))
    exact += found <= optimum + 1e-9
    within_one_percent += found <= 1.01 * optimum
  assert exact >= 0.95 * len(strings)
  assert within_one_percent == len(strings)


def test_search_cuts_a_phrase_that_shares_words_with_the_rest_of_the_line():
  # Cutting the longest repeat first and keeping it whole leaves ' London' and 'heap '
  # repeated inside it: 1.37 nats per character; cutting them through the phrase too
  # gives 1.09.
  text = 'Cheap flights to London, cheap hotels in London, cheap flights to London and Paris'
  cost, _ = mdl.search_segmentation(text)
  assert cost / len(text) < 1.1


NOISE = [
    'mm mm mm mm mm mm mm mm mm mm',
    'Buy cheap viagra | Buy cheap cialis | Buy cheap levitra | Buy cheap pills | Buy cheap meds',
    'Nike shoes Nike shoes Nike shoes Nike shoes cheap Nike shoes',
    'kg kg kg kg kg kg kg kg',
    'Hotel Paris Hotel Paris Hotel Paris Hotel Paris booking',
    'click here click here click here click here',
    '1 cm 2 cm 3 cm 4 cm 5 cm 6 cm 7 cm 8 cm',
    'Cheap flights to London, cheap hotels in London, cheap flights to London and Paris',
    'Click here to download the free PDF version of this book. Click here to download the free PDF',
    'Size: S M L XL | Size: S M L XL | Size: S M L XL',
    '10 pcs 20 pcs 30 pcs 50 pcs 100 pcs',
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


@pytest.mark.parametrize('text', ['ok ok ok', 'la la la la', 'haha haha', 'aaaa', '!!!'])
def test_short_sides_made_of_one_unit_repeated_thrice_are_noise(text):
  assert mdl.MdlRepeat().is_noisy(text)


@pytest.mark.parametrize('text', ['bongobongo', 'katikati', 'pole pole', 'mama', 'Mississippi',
                                  'bye-bye', 'no no no!', 'Save as...'])
def test_short_sides_with_a_unit_twice_or_a_stray_are_kept(text):
  # Reduplication is a word formation of Bantu languages (bongobongo, katikati).
  assert not mdl.MdlRepeat().is_noisy(text)
