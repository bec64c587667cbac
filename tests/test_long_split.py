"""The measurements of bench/architectures.py on a finished run: the CLDR corpus's 'long'
split scored by evaluate.py, and a run's loss on a held-out split."""

import json

import pytest

import data_tasks
from t5x_mt import baselines
from t5x_mt import run_loading
from test_baselines import _first_batch_loss
from test_launch_translate_evaluate import run_in_process

TASK = 'cldr_eng_Latn.hau_Latn'


def test_evaluate_scores_the_long_split(trained_run, tmp_path, monkeypatch, capsys):
  output = tmp_path / 'long.json'
  code, out, _ = run_in_process('evaluate.py', [
      f'--checkpoint_dir={trained_run}', f'--tasks={TASK}', '--split=long', '--beam_size=1',
      '--max_sentences=2', f'--output_json={output}'], monkeypatch, capsys)
  assert code == 0 and out.splitlines()[0].startswith(f'long split of {TASK} at step ')
  summary = json.loads(output.read_text())
  assert summary['split'] == 'long'
  assert summary['directions']['eng_Latn-hau_Latn']['n'] == 2


@pytest.mark.slow
def test_group_losses_of_the_validation_split(trained_run):
  translator = run_loading.load_translator(str(trained_run))
  data_tasks.use_vocabulary(translator.vocabulary_file)
  loss_sum, tokens = _first_batch_loss(translator, TASK, 'validation')
  result = baselines.group_losses(translator, TASK, batch_size=8, inputs_length=32,
                                  targets_length=32, max_batches_per_task=1,
                                  split='validation')
  assert result['losses'] == pytest.approx({'eng_Latn-hau_Latn': loss_sum / tokens}, rel=1e-5)
  assert result['tokens'] == {'eng_Latn-hau_Latn': tokens}
  assert tokens != _first_batch_loss(translator, TASK)[1]
