"""Tests for t5x_mt.core.directions: the Direction type, its names, ids and group keys."""

import itertools

import pytest

from t5x_mt.core import languages
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError


def test_ids_round_trip_for_every_wmt22_african_pair():
  pairs = list(itertools.permutations(languages.WMT22_AFRICAN, 2))
  assert len(pairs) == 26 * 25
  ids = [Direction(src, tgt).id for src, tgt in pairs]
  for (src, tgt), direction in zip(pairs, ids):
    assert Direction.from_id(direction) == Direction(src, tgt)
    assert Direction.from_id(direction).name == f'{src}-{tgt}'
  assert len(set(ids)) == len(ids)
  assert min(ids) > 0  # 0 is padding.
  assert max(ids) < 2**31


def test_ids_come_from_flores_positions_not_registration_order():
  # language_index: eng_Latn 48, hau_Latn 67 in the sorted FLORES-200 codes.
  assert Direction('eng_Latn', 'hau_Latn').id == 48 * 256 + 67 + 1 == 12356
  assert Direction('hau_Latn', 'eng_Latn').id == 67 * 256 + 48 + 1 == 17201
  first = sorted(languages.FLORES200_CODES)[0]
  assert Direction(first, first).id == 1
  assert Direction.from_id(1).name == f'{first}-{first}'


def test_names_parse_back_into_languages():
  direction = Direction('gaz_Latn', 'fra_Latn')
  assert direction.name == 'gaz_Latn-fra_Latn'
  assert Direction.parse(direction.name, 'test') == direction == ('gaz_Latn', 'fra_Latn')
  src_lang, tgt_lang = direction
  assert (src_lang, tgt_lang) == (direction.src_lang, direction.tgt_lang)


def test_parse_names_the_setting_of_a_bad_direction():
  with pytest.raises(UserError, match=r"^--directions: 'eng_Latn' is not <src>-<tgt>$"):
    Direction.parse('eng_Latn', '--directions')
  with pytest.raises(UserError, match=r"^pair_groups.extra: 'en' is not a FLORES-200"):
    Direction.parse('en-hau_Latn', 'pair_groups.extra')


def test_key_groups_by_direction_or_target():
  direction = Direction('eng_Latn', 'hau_Latn')
  assert direction.key('direction') == 'eng_Latn-hau_Latn'
  assert direction.key('target') == 'hau_Latn' == Direction('fra_Latn', 'hau_Latn').key('target')
  with pytest.raises(UserError, match="'source' is not one of direction, target"):
    direction.key('source')
