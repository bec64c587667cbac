"""Tests for t5x_mt.data.sampling and launch/plot_sampling.py: shares against hand-computed
temperature-sampling values."""

import pytest
import seqio

import data_tasks
from t5x_mt.data import corpora
from t5x_mt.data import corpus_types
from t5x_mt.data import sampling
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process

CORPUS, MIXTURE = 'test_sampling', 'test_sampling_mix'
# 100 eng-fra pairs and 20 eng-hau pairs.
ROWS = [{'eng_Latn': f'e{i}', 'fra_Latn': f'f{i}', 'hau_Latn': f'h{i}' if i < 20 else ''}
        for i in range(100)]


@pytest.fixture(autouse=True)
def mixture():
  corpora.register_corpus(CORPUS, lambda: corpus_types.MultiwayCorpus(CORPUS, {'train': ROWS}),
                          overwrite=True)
  if MIXTURE not in seqio.MixtureRegistry.names():
    data_tasks.register_mixture(MIXTURE, CORPUS, [('eng_Latn', 'fra_Latn'),
                                                  ('eng_Latn', 'hau_Latn')])


def test_language_shares_at_temperature_five():
  shares = {s.name: s for s in sampling.mixture_shares(data_tasks.mixture_view(MIXTURE))}
  fra_rate, hau_rate = 100 ** 0.2, 20 ** 0.2  # 2.5119 and 1.8206.
  # English is one side of every pair: half of everything, sampled or not.
  assert shares['eng_Latn'].original == pytest.approx(0.5)
  assert shares['eng_Latn'].sampled == pytest.approx(0.5)
  assert shares['fra_Latn'].original == pytest.approx(0.5 * 100 / 120)
  assert shares['hau_Latn'].sampled == pytest.approx(0.5 * hau_rate / (fra_rate + hau_rate))
  assert (shares['hau_Latn'].pairs, shares['fra_Latn'].pairs) == (10, 50)  # Half of each side.


def test_direction_shares_at_temperature_one_follow_the_data():
  data_tasks.configure(data_tasks.DataSettings(temperature=1.0))
  shares = sampling.mixture_shares(data_tasks.mixture_view(MIXTURE), by='direction')
  assert [(s.name, s.pairs) for s in shares] == [('eng_Latn-fra_Latn', 100),
                                                 ('eng_Latn-hau_Latn', 20)]
  assert [s.sampled for s in shares] == pytest.approx([s.original for s in shares])
  assert sampling.format_shares(shares).splitlines()[1].split() == [
      'eng_Latn-fra_Latn', '100', '83.33', '83.33']


def test_command_writes_the_png_and_prints_the_table(tmp_path, monkeypatch, capsys):
  output = tmp_path / 'plot.png'
  code, out, err = run_in_process('plot_sampling.py', [
      f'--mixture={MIXTURE}', f'--output={output}', '--temperature=1'], monkeypatch, capsys)
  assert code == 0, err
  assert output.read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
  assert out.splitlines()[1].split() == ['eng_Latn', '60', '50.00', '50.00']


@pytest.mark.parametrize('flags, message', [
    (['--temperature=0'], '--temperature: must be > 0, got 0.0'),
    (['--mixture=test_sampling_empty'], "'test_sampling_empty' has no training examples"),
])
def test_command_refuses_bad_input_in_one_line(tmp_path, monkeypatch, capsys, flags, message):
  name = 'test_sampling_empty'
  corpora.register_corpus(name, lambda: corpus_types.PairsCorpus(
      name, 'train', {('eng_Latn', 'hau_Latn'): []}), overwrite=True)
  data_tasks.register_task_mixture(
      name, [data_tasks.register_direction_task(name, 'eng_Latn', 'hau_Latn')], overwrite=True)
  output = tmp_path / 'plot.png'
  code, _, err = run_in_process('plot_sampling.py', [
      f'--mixture={MIXTURE}', f'--output={output}', *flags], monkeypatch, capsys)
  assert code == 2
  assert len(error_lines(err)) == 1 and message in err
  assert not output.exists()
