"""Tests for DRO baselines (t5x_mt.training.baselines, launch/compute_baselines.py) on the session's
tiny eng->hau run."""

import json

import jax
import numpy as np
import pytest

import data_tasks
from t5x_mt.model import losses
from t5x_mt.model import models
from t5x_mt.config import run_loading
from t5x_mt.data import input_pipeline
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process

TASKS = ['cldr_eng_Latn.hau_Latn', 'cldr_fra_Latn.hau_Latn']


def _first_batch_loss(translator, task: str, split: str = 'train') -> tuple[float, float]:
  """Label-smoothed loss sum and tokens of a task's first packed batch, computed directly."""
  batch = next(input_pipeline.one_pass_batches(task, batch_size=8, inputs_length=32,
                                               targets_length=32, split=split))
  logits = translator.model.module.apply({'params': translator.params},
                                         **models.model_kwargs(batch), enable_dropout=False)
  weights = batch['decoder_loss_weights'].astype(np.float32)
  token_loss = losses.label_smoothed_cross_entropy(logits, batch['decoder_target_tokens'],
                                                   weights, 0.1)
  return float(jax.device_get(token_loss.sum())), float(weights.sum())


@pytest.mark.slow
def test_group_losses_per_direction_and_per_target(trained_run):
  translator = run_loading.load_translator(str(trained_run))
  data_tasks.use_vocabulary(translator.vocabulary_file)
  data_tasks.register_corpora_and_mixtures(mixtures={'test_baselines': TASKS})
  by_direction = {task: _first_batch_loss(translator, task) for task in TASKS}
  from t5x_mt.training import baselines  # pylint: disable=g-import-not-at-top
  result = baselines.group_losses(translator, data_tasks.mixture_view('test_baselines'), batch_size=8, inputs_length=32,
                                  targets_length=32, max_batches_per_task=1)
  assert result['losses'] == pytest.approx({
      'eng_Latn-hau_Latn': by_direction[TASKS[0]][0] / by_direction[TASKS[0]][1],
      'fra_Latn-hau_Latn': by_direction[TASKS[1]][0] / by_direction[TASKS[1]][1]}, rel=1e-5)
  target = baselines.group_losses(translator, data_tasks.mixture_view('test_baselines'), grouping='target',
                                  batch_size=8, inputs_length=32, targets_length=32,
                                  max_batches_per_task=1)
  total_loss = sum(loss for loss, _ in by_direction.values())
  total_tokens = sum(tokens for _, tokens in by_direction.values())
  assert target['losses'] == pytest.approx({'hau_Latn': total_loss / total_tokens}, rel=1e-5)
  assert target['tokens'] == {'hau_Latn': total_tokens}
  # A held-out split scores as the training split does (bench/architectures.py's loss).
  held_out_loss, held_out_tokens = _first_batch_loss(translator, TASKS[0], 'validation')
  held_out = baselines.group_losses(translator, data_tasks.mixture_view(TASKS[0]), batch_size=8, inputs_length=32,
                                    targets_length=32, max_batches_per_task=1,
                                    split='validation')
  assert held_out['losses'] == pytest.approx(
      {'eng_Latn-hau_Latn': held_out_loss / held_out_tokens}, rel=1e-5)
  assert held_out_tokens != by_direction[TASKS[0]][1]


def test_command_writes_the_json_of_the_runs_mixture(trained_run, tmp_path, monkeypatch,
                                                     capsys):
  output = tmp_path / 'b.json'
  code, out, err = run_in_process('compute_baselines.py', [
      f'--checkpoint_dir={trained_run}', '--mixture=cldr_eng_Latn.hau_Latn',
      f'--output={output}', '--max_batches_per_task=1'], monkeypatch, capsys)
  assert code == 0, err
  result = json.loads(output.read_text())
  assert list(result['losses']) == ['eng_Latn-hau_Latn'] and result['step'] == 4
  assert 0 < result['losses']['eng_Latn-hau_Latn'] < 20
  assert out.splitlines()[0].split()[0] == 'eng_Latn-hau_Latn'
  code, _, err = run_in_process('compute_baselines.py', [
      f'--checkpoint_dir={trained_run}', '--mixture=cldr_eng_Latn.hau_Latn',
      f'--output={output}', '--batch_size=0'], monkeypatch, capsys)
  assert code == 2 and error_lines(err) == ['error: --batch_size: must be >= 1, got 0']
