"""translate.py --nbest: every line's N best hypotheses in Moses' format, the first of
each list the 1-best translation, and --ensemble or --ctranslate2 in place of
--checkpoint_dir."""

import numpy as np
import pytest

from t5x_mt.decoding.search import common
from t5x_mt.decoding import nbest
from t5x_mt.export import ctranslate2_export
from test_export import random_run
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process

LINES = ['Monday', '', 'Good morning.', 'Thank you very much.', 'Where is the station?']


@pytest.fixture
def source(tmp_path):
  path = tmp_path / 'source.eng'
  path.write_text(''.join(line + '\n' for line in LINES), encoding='utf-8')
  return path


def translate(model_flag, source, monkeypatch, capsys, *flags):
  code, out, err = run_in_process('translate.py', [
      model_flag, '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', f'--input={source}',
      '--batch_size=2', *flags], monkeypatch, capsys)
  assert code == 0, err
  return out


@pytest.mark.parametrize('beam_size', [1, 3])
def test_the_first_of_each_nbest_list_is_the_translation(trained_run, source, tmp_path,
                                                          monkeypatch, capsys, beam_size):
  model = f'--checkpoint_dir={trained_run}'
  best = translate(model, source, monkeypatch, capsys, f'--beam_size={beam_size}')
  listed = tmp_path / 'nbest.txt'
  translate(model, source, monkeypatch, capsys, f'--beam_size={beam_size}',
            f'--nbest={beam_size}', f'--output={listed}')
  lists = nbest.read(listed)
  assert [entries[0].hypothesis for entries in lists] == best.splitlines()
  assert [len(entries) for entries in lists] == [beam_size, 1] + [beam_size] * 3
  assert lists[1] == [nbest.Entry('', {'forward': 0.0, 'forward_normalized': 0.0,
                                       'length': 0}, 0.0)]
  for entries in lists:
    totals = [entry.total for entry in entries]
    assert totals == sorted(totals, reverse=True)
    for entry in entries:
      features = entry.features
      assert entry.total == features['forward_normalized']
      # alpha 1: the beam's score is the summed log-probability over the length.
      np.testing.assert_allclose(
          features['forward'],
          features['forward_normalized'] * common.length_penalty(features['length'], 1.0),
          rtol=1e-5)


@pytest.mark.slow
def test_an_ensemble_of_one_run_writes_the_runs_nbest_list(trained_run, source, monkeypatch,
                                                           capsys):
  flags = ['--beam_size=3', '--nbest=2']
  alone = translate(f'--checkpoint_dir={trained_run}', source, monkeypatch, capsys, *flags)
  ensembled = translate(f'--ensemble={trained_run}:0.5', source, monkeypatch, capsys, *flags)
  assert ensembled == alone


@pytest.mark.parametrize('flags, message', [
    (['--beam_size=2', '--nbest=3'], '--nbest: at most --beam_size (2) hypotheses, got 3'),
    (['--nbest=-1'], '--nbest: must be >= 1, got -1'),
    (['--ensemble=RUN'], 'give exactly one of --checkpoint_dir, --ensemble or --family_models'),
])
def test_bad_nbest_and_ensemble_flags_are_one_line(trained_run, source, tmp_path,
                                                   monkeypatch, capsys, flags, message):
  output = tmp_path / 'out.txt'
  code, _, err = run_in_process('translate.py', [
      f'--checkpoint_dir={trained_run}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
      f'--input={source}', f'--output={output}', *flags], monkeypatch, capsys)
  assert (code, error_lines(err)) == (2, [f'error: {message}'])
  assert not output.exists()


def test_an_ensemble_member_that_cannot_load_is_one_line(trained_run, source, tmp_path,
                                                         monkeypatch, capsys):
  missing = tmp_path / 'missing'
  code, _, err = run_in_process('translate.py', [
      f'--ensemble={trained_run},{missing}:2', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
      f'--input={source}'], monkeypatch, capsys)
  assert (code, error_lines(err)) == (
      2, [f'error: --ensemble: {missing} is not a directory'])



def test_every_list_holds_n_hypotheses_and_the_translation_stays_the_same(
    trained_run, source, tmp_path, monkeypatch, capsys):
  """A model whose hypotheses end at several lengths, ranked by their summed
  log-probability (alpha 0): a sentence's best hypothesis is final early, once nothing
  alive can beat it, while fewer than N have finished. The search goes on until N have,
  the translation stays the one found without --nbest, and the export's search
  (CTranslate2's num_hypotheses) lists the same hypotheses."""
  run, _, _ = random_run(trained_run, tmp_path / 'run', {}, eos_weight=3.5, seed=1)
  flags = ['--beam_size=4', '--alpha=0']
  best = translate(f'--checkpoint_dir={run}', source, monkeypatch, capsys, *flags)
  ours, served = tmp_path / 'ours.nbest', tmp_path / 'served.nbest'
  translate(f'--checkpoint_dir={run}', source, monkeypatch, capsys, *flags, '--nbest=4',
            f'--output={ours}')
  lists = nbest.read(ours)
  assert [len(entries) for entries in lists] == [4, 1, 4, 4, 4]
  assert [entries[0].hypothesis for entries in lists] == best.splitlines()
  assert len({entry.features['length'] for entries in lists for entry in entries}) > 1

  ctranslate2_export.export_run(str(run), str(tmp_path / 'ct2'), 'float32')
  translate(f'--ctranslate2={tmp_path / "ct2"}', source, monkeypatch, capsys, *flags,
            '--nbest=4', f'--output={served}')
  served_lists = nbest.read(served)
  assert ([[entry.hypothesis for entry in entries] for entries in served_lists]
          == [[entry.hypothesis for entry in entries] for entries in lists])
  for name in ('forward', 'forward_normalized', 'length'):
    np.testing.assert_allclose(
        [entry.features[name] for entries in served_lists for entry in entries],
        [entry.features[name] for entries in lists for entry in entries], rtol=1e-4)
