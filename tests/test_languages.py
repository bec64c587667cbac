"""Tests for t5x_mt.core.languages: the FLORES-200 code list, tags, ids and code suggestions."""

import pytest

from t5x_mt.core import languages
from t5x_mt.core.errors import UserError


def test_flores200_has_204_sorted_unique_codes():
  codes = languages.FLORES200_CODES
  assert len(codes) == 204
  assert list(codes) == sorted(set(codes))
  assert codes[0] == 'ace_Arab' and codes[-1] == 'zul_Latn'
  for code in ('gaz_Latn', 'swh_Latn', 'fuv_Latn', 'kam_Latn', 'luo_Latn', 'umb_Latn',
               'arb_Latn', 'min_Arab', 'taq_Tfng', 'zho_Hant'):
    assert code in codes


def test_wmt22_african_is_eng_fra_and_24_african_flores_codes():
  assert len(languages.WMT22_AFRICAN) == 26
  assert languages.WMT22_AFRICAN[:2] == ('eng_Latn', 'fra_Latn')
  assert set(languages.WMT22_AFRICAN) <= set(languages.FLORES200_CODES)


def test_cldr_and_ntrex_maps_lead_to_wmt22_codes():
  assert set(languages.CLDR_LOCALE_TO_FLORES.values()) == set(languages.WMT22_AFRICAN)
  assert languages.CLDR_LOCALE_TO_FLORES['om'] == 'gaz_Latn'
  assert languages.NTREX_TO_FLORES['sna-Latn'] == 'sna_Latn'
  assert languages.NTREX_TO_FLORES['swa'] == 'swh_Latn'
  assert 'fuc' not in languages.NTREX_TO_FLORES  # Pulaar is not Nigerian Fulfulde.
  assert set(languages.NTREX_TO_FLORES.values()) <= set(languages.FLORES200_CODES)


def test_language_tag_and_index():
  assert languages.language_tag('hau_Latn') == '<2hau_Latn>'
  assert languages.language_index('ace_Arab') == 0
  assert languages.language_index('zul_Latn') == 203
  assert languages.language_index('eng_Latn') == languages.FLORES200_CODES.index('eng_Latn')


def test_check_language_returns_valid_code():
  assert languages.check_language('amh_Ethi', '--src_lang') == 'amh_Ethi'


@pytest.mark.parametrize('bad, suggestion', [
    ('hau', "'hau_Latn'"), ('HAU_LATN', "'hau_Latn'"), ('hau-Latn', "'hau_Latn'"),
    ('sw', "'swh_Latn'"), ('orm', "'gaz_Latn'"), ('ace', "'ace_Arab' or 'ace_Latn'"),
])
def test_check_language_names_flag_and_suggests_closest_code(bad, suggestion):
  with pytest.raises(UserError, match='--tgt_lang') as error:
    languages.check_language(bad, '--tgt_lang')
  assert f'did you mean {suggestion}?' in str(error.value)


def test_language_tag_rejects_unknown_code():
  with pytest.raises(UserError, match="'xx_Zzzz' is not a FLORES-200"):
    languages.language_tag('xx_Zzzz')
