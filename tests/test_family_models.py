"""Tests for language family grouping at inference: family_routing.FamilyTranslator and the
--family_models flag of launch/translate.py and launch/evaluate.py."""

import pytest

from t5x_mt.config import decoding_flags
from t5x_mt.data import wmt22
from t5x_mt.decoding import family_routing
from t5x_mt.config import run_loading
from t5x_mt.core.errors import UserError
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process


class RecordingTranslator:
  """Stands in for a loaded run: names itself in every translation."""

  def __init__(self, directory: str, loads: list):
    self.directory = directory
    loads.append(directory)

  def translate_directly(self, sentences, src_lang, tgt_lang, on_batch=None):
    del on_batch  # One batch, not counted.
    return [f'{self.directory}:{src_lang}>{tgt_lang}:{s}' for s in sentences]


def test_each_direction_goes_to_its_target_group_and_swahili_to_three():
  loads = []
  models = {1: 'g1', 3: 'g3', 5: 'g5'}
  router = family_routing.FamilyTranslator(
      models, lambda directory: RecordingTranslator(directory, loads), wmt22.inference_group,
      batch_size=8)
  assert router.translate(['a'], 'eng_Latn', 'swh_Latn') == ['g3:eng_Latn>swh_Latn:a']
  assert router.translate(['b'], 'swh_Latn', 'eng_Latn') == ['g1:swh_Latn>eng_Latn:b']
  assert router.translate(['c'], 'eng_Latn', 'lug_Latn') == ['g5:eng_Latn>lug_Latn:c']
  assert router.translate(['d'], 'fra_Latn', 'lug_Latn') == ['g5:fra_Latn>lug_Latn:d']
  assert loads == ['g3', 'g1', 'g5']  # One load per change of model, one model held.
  with pytest.raises(UserError, match='no model for family group 4, which translates into '
                     r'hau_Latn \(add 4=DIR\)'):
    router.translate(['e'], 'eng_Latn', 'hau_Latn')


def test_each_pivot_leg_goes_to_the_model_of_its_own_target():
  loads = []
  router = family_routing.FamilyTranslator(
      {1: 'g1', 2: 'g2', 4: 'g4'}, lambda directory: RecordingTranslator(directory, loads),
      wmt22.inference_group, batch_size=8, pivot_language='eng_Latn', pivot_directions=('*',))
  # hau -> eng goes to group 1 (into English), then eng -> zul to group 2 (into Zulu).
  assert router.translate(['a'], 'hau_Latn', 'zul_Latn') == [
      'g2:eng_Latn>zul_Latn:g1:hau_Latn>eng_Latn:a']
  assert loads == ['g1', 'g2']
  # A direction that involves the pivot language is one leg.
  assert router.translate(['b'], 'eng_Latn', 'hau_Latn') == ['g4:eng_Latn>hau_Latn:b']
  # A missing leg model is refused before the first leg is translated.
  with pytest.raises(UserError, match='no model for family group 3'):
    router.translate(['c'], 'hau_Latn', 'amh_Ethi')
  assert loads == ['g1', 'g2', 'g4']


def test_family_models_leave_pivoting_to_the_router(trained_run):
  router = run_loading.load_model(
      None, {1: str(trained_run), 4: str(trained_run)}, None,
      {'beam_size': 1, 'pivot_language': 'eng_Latn', 'pivot_directions': ('*',)})
  assert (router.pivot_language, router.pivot_directions) == ('eng_Latn', ('*',))
  model = router._translator(str(trained_run))  # pylint: disable=protected-access
  assert model.settings.beam_size == 1 and not model.pivots('hau_Latn', 'zul_Latn')


@pytest.mark.parametrize('text, message', [
    ('1=/a,x=/b', "'x=/b' is not GROUP=DIR"),
    ('1=', "'1=' is not GROUP=DIR"),
    (',', 'give at least one GROUP=DIR'),
])
def test_family_models_flag_syntax(text, message):
  with pytest.raises(UserError, match=message):
    decoding_flags.parse_family_models(text)
  assert decoding_flags.parse_family_models(' 1=/a , 4=/b ') == {1: '/a', 4: '/b'}


def test_translate_with_the_family_model_of_the_target(trained_run, tmp_path, monkeypatch,
                                                       capsys):
  src = tmp_path / 'src.txt'
  src.write_text('Monday\nTuesday\n', encoding='utf-8')
  outputs = {}
  for name, flag in (('direct', f'--checkpoint_dir={trained_run}'),
                     ('family', f'--family_models=1={trained_run},4={trained_run}')):
    code, out, err = run_in_process('translate.py', [
        flag, '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', f'--input={src}',
        '--beam_size=1'], monkeypatch, capsys)
    assert code == 0, err
    outputs[name] = out
  assert outputs['family'] == outputs['direct'] and len(outputs['direct'].splitlines()) == 2


@pytest.mark.parametrize('flags, message', [
    (['--tgt_lang=zul_Latn', '--family_models=4={run}'],
     'no model for family group 2, which translates into zul_Latn'),
    (['--tgt_lang=hau_Latn', '--family_models=4={run}', '--checkpoint_dir={run}'],
     'exactly one of --checkpoint_dir, --ensemble or --family_models'),
    (['--tgt_lang=hau_Latn', '--family_models=4={run}', '--step=2'],
     "--step: only with --checkpoint_dir; ensembles and family models each load their "
     "runs' latest checkpoints"),
    (['--tgt_lang=hau_Latn', '--family_models=4={run}/nope'], 'is not a directory'),
])
def test_bad_family_requests_are_one_line(trained_run, tmp_path, monkeypatch, capsys, flags,
                                          message):
  src = tmp_path / 'src.txt'
  src.write_text('Monday\n', encoding='utf-8')
  code, out, err = run_in_process('translate.py', [
      '--src_lang=eng_Latn', f'--input={src}', *[f.format(run=trained_run) for f in flags]],
      monkeypatch, capsys)
  assert code == 2 and out == ''
  assert len(error_lines(err)) == 1 and message in err, err


def test_evaluate_tasks_with_family_models_writes_nothing_into_the_runs(trained_run, tmp_path,
                                                                      monkeypatch, capsys):
  before = sorted(p.name for p in (trained_run / 'eval').iterdir())
  output = tmp_path / 'scores.json'
  code, out, err = run_in_process('evaluate.py', [
      f'--family_models=4={trained_run}', '--tasks=cldr_eng_Latn.hau_Latn',
      '--max_sentences=2', '--beam_size=1', f'--output_json={output}'], monkeypatch, capsys)
  assert code == 0, err
  assert out.splitlines()[0] == 'validation split of cldr_eng_Latn.hau_Latn, family models'
  assert 'eng_Latn-hau_Latn' in out
  assert '"step": null' in output.read_text()
  assert sorted(p.name for p in (trained_run / 'eval').iterdir()) == before
