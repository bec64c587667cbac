"""Tests for t5x_mt.data.directions: direction names and the ids packed with target tokens."""

import itertools

from t5x_mt import languages
from t5x_mt.data import directions


def test_ids_round_trip_for_every_wmt22_african_pair():
  pairs = list(itertools.permutations(languages.WMT22_AFRICAN, 2))
  assert len(pairs) == 26 * 25
  ids = [directions.direction_id(src, tgt) for src, tgt in pairs]
  for (src, tgt), direction in zip(pairs, ids):
    assert directions.direction_from_id(direction) == f'{src}-{tgt}'
  assert len(set(ids)) == len(ids)
  assert min(ids) > 0  # 0 is padding.
  assert max(ids) < 2**31


def test_ids_come_from_flores_positions_not_registration_order():
  # language_index: eng_Latn 48, hau_Latn 67 in the sorted FLORES-200 codes.
  assert directions.direction_id('eng_Latn', 'hau_Latn') == 48 * 256 + 67 + 1 == 12356
  assert directions.direction_id('hau_Latn', 'eng_Latn') == 67 * 256 + 48 + 1 == 17201
  first = sorted(languages.FLORES200_CODES)[0]
  assert directions.direction_id(first, first) == 1
  assert directions.direction_from_id(1) == f'{first}-{first}'


def test_names_split_back_into_languages():
  name = directions.direction_name('gaz_Latn', 'fra_Latn')
  assert name == 'gaz_Latn-fra_Latn'
  assert directions.split_direction(name) == ('gaz_Latn', 'fra_Latn')
