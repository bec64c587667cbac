"""Tests for fine-tuning in train_loop.train: starting from another run's parameters, the
constant learning rate and early stopping on validation chrF++."""

import json
import types

import numpy as np
import pytest

from t5x_mt.training import actions
from t5x_mt.runs import checkpoints
from t5x_mt.runs import run_layout
from t5x_mt.core.errors import UserError
from t5x_mt.evaluation import per_direction
from conftest import configure_tiny_run, train_configured
from conftest import saved_params

TASK = 'cldr_eng_Latn.hau_Latn'


def _configure(trained_run, model_dir, train_steps: int, **overrides) -> None:
  """A fine-tuning run of the tiny run's model on its own task, learning rate 0."""
  configure_tiny_run(model_dir, trained_run / 'vocab.model', TASK, train_steps, **{
      'training.TrainConfig.init_from': repr(str(trained_run)),
      'training.TrainConfig.learning_rate_schedule': '@trainer.constant_schedule()',
      'trainer.constant_schedule.learning_rate': '0.0', **overrides})


@pytest.mark.slow
def test_fine_tuning_starts_from_the_parent_parameters(trained_run, tmp_path):
  _configure(trained_run, tmp_path / 'ft', 2)
  train_configured()
  for child, parent in zip(saved_params(tmp_path / 'ft', 2), saved_params(trained_run, 4)):
    np.testing.assert_array_equal(child, parent)  # Learning rate 0: nothing moved.


@pytest.mark.slow
def test_early_stopping_keeps_the_best_step(trained_run, tmp_path):
  # At learning rate 0 every evaluation scores the same: the first is the best, and with
  # patience 1 the run stops at the second.
  run_dir = tmp_path / 'ft'
  _configure(trained_run, run_dir, 10, EVAL_EVERY_STEPS='1', CHECKPOINT_EVERY_STEPS='5',
             **{'training.TrainConfig.early_stopping_patience': '1'})
  record = train_configured()
  assert record['step'] == 2
  best = json.loads((run_dir / 'best.json').read_text())
  assert (best['step'], best['evaluations_since_best']) == (1, 1)
  run_checkpoints = checkpoints.RunCheckpoints(str(run_dir), read_only=True)
  assert run_checkpoints.all_steps() == [1, 2]  # The best, and the step it stopped at.
  run_checkpoints.close()
  _configure(trained_run, run_dir, 10, EVAL_EVERY_STEPS='1', CHECKPOINT_EVERY_STEPS='5',
             **{'training.TrainConfig.early_stopping_patience': '1'})
  assert train_configured() == {}  # Rerun: already stopped, no more steps.


@pytest.mark.slow
def test_the_best_step_outlives_checkpoint_rotation(trained_run, tmp_path, capsys):
  # A checkpoint every step, keep 2, an evaluation every 3: at learning rate 0 step 3 is
  # the best, and the run stops at step 9 after 2 evaluations without a better one.
  run_dir = tmp_path / 'ft'
  _configure(trained_run, run_dir, 20, EVAL_EVERY_STEPS='3', CHECKPOINT_EVERY_STEPS='1',
             **{'training.TrainConfig.early_stopping_patience': '2',
                'training.TrainConfig.keep_checkpoints': '2',
                'training.TrainConfig.evaluate_test_split': 'True'})
  train_configured()
  run_checkpoints = checkpoints.RunCheckpoints(str(run_dir), read_only=True)
  assert run_checkpoints.all_steps() == [3, 8, 9]
  run_checkpoints.close()
  final = json.loads((run_dir / 'eval' / 'step_9.json').read_text())
  assert final['best']['step'] == 3 and final['last']['step'] == 9
  assert final['best']['chrf'] == final['last']['chrf'] == final['average']['chrf']
  assert 'best step 3 (average chrF++' in capsys.readouterr().out
  assert [p.name for p in (run_dir / 'test' / 'eval').iterdir()] == ['step_3.json']


class _ProtectedStep:
  """What early stopping asks of a run's checkpoints: the step kept through rotation."""

  def __init__(self):
    self.step = None

  def protect(self, step):
    self.step = step


def _early_stopping(run_dir, start_step: int, saves: list[int]):
  """A run resumed at `start_step` (0: a new one), evaluated every 2 steps, patience 2;
  its saves go to `saves`."""
  run = types.SimpleNamespace(layout=run_layout.RunLayout(run_dir), start_step=start_step,
                              checkpoints=_ProtectedStep(), save=saves.append)
  evaluate = actions.Evaluate(2, per_direction.EvalConfig())
  stop_early = actions.StopEarly(run, evaluate, patience=2)

  def evaluated(step: int, chrf: float) -> None:
    evaluate.latest = (step, {'average': {'chrf': chrf}})
    stop_early.after_step(run, step, {})
  return run, stop_early, evaluated


def test_an_evaluation_after_the_checkpoint_resumed_from_counts_once(tmp_path):
  # Uninterrupted, a run scoring the same at steps 2, 4 and 6 stops at 6 (best 2). This
  # one is killed after step 4's evaluation, before its checkpoint: resumed from step 3,
  # it evaluates step 4 again.
  saves = []
  _, stop_early, evaluated = _early_stopping(tmp_path, 0, saves)
  evaluated(2, 30.0)
  evaluated(4, 30.0)
  _, stop_early, evaluated = _early_stopping(tmp_path, 3, saves)
  evaluated(4, 30.0)
  assert not stop_early.stop_requested()
  evaluated(6, 30.0)
  assert stop_early.stop_requested() and saves == [2, 6]
  best = json.loads((tmp_path / 'best.json').read_text())
  assert (best['step'], best['evaluations_since_best']) == (2, 2)
  assert best['evaluations'] == [[2, 30.0], [4, 30.0], [6, 30.0]]


def test_a_best_step_whose_checkpoint_was_cut_short_is_saved_when_evaluated_again(tmp_path):
  saves = []
  _, _, evaluated = _early_stopping(tmp_path, 0, saves)
  evaluated(2, 30.0)  # The best so far: saved, but killed before the write finished.
  assert saves == [2]
  run, _, evaluated = _early_stopping(tmp_path, 1, saves)
  evaluated(2, 30.0)
  assert saves == [2, 2] and run.checkpoints.step == 2


@pytest.mark.parametrize('overrides, message', [
    ({'training.TrainConfig.early_stopping_patience': '2'}, 'needs EVAL_EVERY_STEPS > 0'),
    ({'training.TrainConfig.early_stopping_patience': '-1', 'EVAL_EVERY_STEPS': '1'},
     'early_stopping_patience: must be >= 0, got -1'),
    ({'training.TrainConfig.learning_rate_schedule': "'cosine'"}, "'cosine' is not a schedule"),
])
def test_bad_fine_tuning_settings_are_named(trained_run, tmp_path, overrides, message):
  _configure(trained_run, tmp_path / 'ft', 2, **overrides)
  with pytest.raises(UserError, match=message):
    train_configured()


def test_parent_with_another_vocabulary_is_refused(trained_run, tmp_path):
  other = tmp_path / 'other'
  other.mkdir()
  (other / 'vocab.model').write_bytes(b'not the same model')
  _configure(trained_run, tmp_path / 'ft', 2,
             **{'training.TrainConfig.init_from': repr(str(other))})
  with pytest.raises(UserError, match="vocab.model differs from this run's vocabulary"):
    train_configured()
