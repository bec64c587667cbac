"""Tests that early stopping counts the evaluation of the step a run ends at: the training
loop evaluates every EVAL_EVERY_STEPS before the last step and leaves the last one to the
final evaluations, whose score must still be able to make it the best step."""

import json

import pytest

from conftest import configure_tiny_run, train_configured
from test_finetuning import TASK, _early_stopping


@pytest.mark.slow
def test_a_run_that_ends_before_its_first_evaluation_names_its_last_step_best(
    trained_run, tmp_path):
  run_dir = tmp_path / 'ft'
  configure_tiny_run(run_dir, trained_run / 'vocab.model', TASK, 1, EVAL_EVERY_STEPS='1', **{
      'training.TrainConfig.init_from': repr(str(trained_run)),
      'training.TrainConfig.early_stopping_patience': '1'})
  train_configured()
  final = json.loads((run_dir / 'eval' / 'step_1.json').read_text())
  chrf = final['average']['chrf']
  assert final['best'] == {'step': 1, 'chrf': chrf} and final['last'] == final['best']
  best = json.loads((run_dir / 'best.json').read_text())
  assert (best['step'], best['evaluations']) == (1, [[1, chrf]])


def test_a_last_step_better_than_every_evaluation_is_the_best(tmp_path):
  saves = []
  run, stop_early, evaluated = _early_stopping(tmp_path, 0, saves)
  evaluated(2, 30.0)
  evaluated(4, 29.0)
  stop_early.count_last(run, {'step': 5, 'average': {'chrf': 31.0}})
  assert (stop_early.record.best_step, run.checkpoints.step) == (5, 5)
  best = json.loads((tmp_path / 'best.json').read_text())
  assert best['evaluations'] == [[2, 30.0], [4, 29.0], [5, 31.0]]
  assert best['evaluations_since_best'] == 0


def test_a_run_stopped_early_counts_its_last_evaluation_once(tmp_path):
  saves = []
  run, stop_early, evaluated = _early_stopping(tmp_path, 0, saves)
  evaluated(2, 30.0)
  evaluated(4, 30.0)
  evaluated(6, 30.0)  # Patience 2: stops here, and the final evaluation scores step 6 again.
  assert stop_early.stop_requested()
  stop_early.count_last(run, {'step': 6, 'average': {'chrf': 30.0}})
  best = json.loads((tmp_path / 'best.json').read_text())
  assert (best['step'], best['evaluations_since_best']) == (2, 2)
  assert best['evaluations'] == [[2, 30.0], [4, 30.0], [6, 30.0]]
