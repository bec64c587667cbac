"""Tests for t5x_mt.data.wmt22 and the WMT22 mixtures data_tasks builds from it."""

import dataclasses

import pytest

import data_tasks
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import wmt22
from t5x_mt.core.errors import UserError

CORPUS = 'test_wmt22'
# eng, fra, kin and swh share every row; hau has text in 3 of 12, and deu is outside WMT22.
ROWS = [{'eng_Latn': f'e{i}', 'fra_Latn': f'f{i}', 'kin_Latn': f'k{i}', 'swh_Latn': f's{i}',
         'hau_Latn': f'h{i}' if i < 3 else '', 'deu_Latn': f'd{i}'} for i in range(12)]


@pytest.fixture(autouse=True)
def corpus():
  corpora.register_corpus(CORPUS, lambda: corpus_types.MultiwayCorpus(CORPUS, {'train': ROWS}),
                          overwrite=True)
  data_tasks.configure(data_tasks.DataSettings(wmt22_corpora=(CORPUS,)))


def test_pair_groups_hold_the_evaluated_directions_both_ways():
  groups = wmt22.pair_groups()
  assert {name: len(d) for name, d in groups.items()} == {'ENGC': 48, 'FRAC': 8, 'SSEA': 16}
  assert ('eng_Latn', 'gaz_Latn') in groups['ENGC'] and ('umb_Latn', 'eng_Latn') in groups['ENGC']
  assert set(groups['FRAC']) == {(a, b) for x in ('kin_Latn', 'lin_Latn', 'swh_Latn', 'wol_Latn')
                                 for a, b in (('fra_Latn', x), (x, 'fra_Latn'))}
  assert ('nso_Latn', 'xho_Latn') in groups['SSEA'] and ('xho_Latn', 'nso_Latn') in groups['SSEA']
  assert ('xho_Latn', 'afr_Latn') not in groups['SSEA']  # Only ring neighbours.
  assert len(wmt22.evaluated_directions()) == 72
  assert len(wmt22.all_directions()) == 26 * 25


def test_extra_groups_join_the_evaluated_directions():
  data_tasks.configure(dataclasses.replace(data_tasks.settings(), extra_pair_groups={
      'NGG': ['hau_Latn-yor_Latn', 'yor_Latn-hau_Latn']}))
  groups = data_tasks.pair_groups()
  assert groups['NGG'] == (('hau_Latn', 'yor_Latn'), ('yor_Latn', 'hau_Latn'))
  assert len(wmt22.evaluated_directions(groups.values())) == 74
  assert 'wmt22_ngg' in data_tasks.wmt22_mixture_names()
  with pytest.raises(UserError, match=r"pair_groups.extra\['NGG'\]: 'hau_Latn:yor_Latn' is not "
                     '<src>-<tgt>'):
    data_tasks.DataSettings(extra_pair_groups={'NGG': ['hau_Latn:yor_Latn']})


def test_family_groups_route_swahili_to_group_three():
  assert [wmt22.inference_group(lang) for lang in ('fra_Latn', 'zul_Latn', 'swh_Latn',
                                                   'yor_Latn', 'umb_Latn')] == [1, 2, 3, 4, 5]
  assert sorted(len(m) for m in wmt22.FAMILY_GROUPS.values()) == [2, 4, 6, 7, 8]
  with pytest.raises(UserError, match='deu_Latn is in no WMT22 language family group'):
    wmt22.inference_group('deu_Latn')


def _directions(mixture: str) -> set[str]:
  data_tasks.register_wmt22_mixture(mixture)
  return {d.name for d in data_tasks.mixture_view(mixture).directions()}


def _both_ways(a: str, others: tuple[str, ...]) -> set[str]:
  return {d for x in others for d in (f'{a}-{x}', f'{x}-{a}')}


def test_mixtures_keep_the_directions_the_corpora_have():
  african = ('kin_Latn', 'swh_Latn', 'hau_Latn')
  assert _directions('wmt22_frac') == _both_ways('fra_Latn', ('kin_Latn', 'swh_Latn'))
  assert _directions('wmt22_engc') == _both_ways('eng_Latn', african)
  assert _directions('wmt22_eval') == (_directions('wmt22_engc') | _directions('wmt22_frac'))
  assert _directions('wmt22_eval_english') == _directions('wmt22_eval')  # ENGC is evaluated.
  base = _directions('wmt22_base')
  assert len(base) == 5 * 4 and 'hau_Latn-kin_Latn' in base  # deu_Latn is not WMT22.
  # LFG group 3 trains the directions into its targets: of these languages, swh.
  assert _directions('wmt22_lfg3') == {f'{x}-swh_Latn' for x in
                                       ('eng_Latn', 'fra_Latn', 'hau_Latn', 'kin_Latn')}


def test_large_adds_the_synthetic_corpora():
  name = 'test_wmt22_bt'
  corpora.register_corpus(name, lambda: corpus_types.SyntheticCorpus(
      name, 'train', {('zul_Latn', 'kin_Latn'): [('z', 'k')]},
      {('zul_Latn', 'kin_Latn'): ('zul_Latn', 'bt')}), overwrite=True)
  data_tasks.configure(dataclasses.replace(data_tasks.settings(), wmt22_synthetic=(name,)))
  assert set(_directions('wmt22_large')) - set(_directions('wmt22_base')) == {
      'zul_Latn-kin_Latn', 'kin_Latn-zul_Latn'}


def test_mixture_without_data_is_one_clear_error():
  with pytest.raises(UserError, match='wmt22_ssea: none of its 16 directions has training '
                     f'pairs in {CORPUS} \\(choose corpora with wmt22_corpora.names\\)'):
    data_tasks.register_wmt22_mixture('wmt22_ssea')
