"""Language identification: each backend for its languages, both policies."""

import pytest

from t5x_mt.data.cleaning import langid

SENTENCES = {
    'eng_Latn': 'The government announced new measures to support farmers this year.',
    'fra_Latn': "Le gouvernement a annoncé de nouvelles mesures pour aider les agriculteurs.",
    'hau_Latn': 'Gwamnati ta sanar da sabbin matakai don taimaka wa manoma a bana.',
    'swh_Latn': 'Serikali imetangaza hatua mpya za kusaidia wakulima mwaka huu.',
    'amh_Ethi': 'መንግሥት በዚህ ዓመት ገበሬዎችን ለመደገፍ አዳዲስ እርምጃዎችን አስታውቋል።',
    'tsn_Latn': 'Puso e phasaladitse dikgato tse dišwa go thusa balemi ngwaga ono.',
}


@pytest.mark.parametrize('lang', sorted(SENTENCES))
def test_each_language_is_accepted_as_itself(lang):
  assert langid.acceptor(lang)(SENTENCES[lang])


def test_wrong_language_is_rejected():
  assert not langid.acceptor('hau_Latn')(SENTENCES['eng_Latn'])
  assert not langid.acceptor('eng_Latn')(SENTENCES['fra_Latn'])
  assert not langid.acceptor('tsn_Latn')(SENTENCES['eng_Latn'])


def test_tencent_policy_accepts_any_african_language_on_an_african_side():
  assert not langid.acceptor('hau_Latn', 'exact')(SENTENCES['swh_Latn'])
  assert langid.acceptor('hau_Latn', 'tencent')(SENTENCES['swh_Latn'])
  assert not langid.acceptor('hau_Latn', 'tencent')(SENTENCES['eng_Latn'])
  assert not langid.acceptor('eng_Latn', 'tencent')(SENTENCES['fra_Latn'])


def test_unsupported_language_is_only_refuted():
  assert 'umb_Latn' not in langid.supported_languages()
  accept_umbundu = langid.acceptor('umb_Latn')
  assert accept_umbundu('Omanu vosi va citiwa lonjila kuenda va lingisiwa ndomanu vakuavo.')
  assert not accept_umbundu(SENTENCES['eng_Latn'])


def test_cld2_judges_the_languages_py3langid_lacks():
  accept_wolof = langid.acceptor('wol_Latn')
  assert accept_wolof('Dafa tàng lool tey, dinaa dem tefes gi ak sama xarit yi ngir fo.')
  assert not accept_wolof(SENTENCES['eng_Latn'])
  assert not accept_wolof(SENTENCES['swh_Latn'])


def test_short_sides_pass_unjudged_when_asked():
  from t5x_mt.data.cleaning.steps import Pair  # pylint: disable=g-import-not-at-top
  from t5x_mt.data.cleaning.steps import build_step  # pylint: disable=g-import-not-at-top
  pair = Pair('Open file', 'Vula ifayela')
  assert not build_step('language_id').bind('eng_Latn', 'fra_Latn')(pair)
  assert build_step('language_id', {'min_chars': 25}).bind('eng_Latn', 'fra_Latn')(pair)
