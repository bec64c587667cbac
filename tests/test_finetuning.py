"""Tests for fine-tuning in train_loop.train: starting from another run's parameters, the
constant learning rate and early stopping on validation chrF++."""

import json

import numpy as np
import pytest

from t5x_mt import checkpoints
from t5x_mt import train_loop
from t5x_mt.errors import UserError
from conftest import configure_tiny_run
from conftest import saved_params

TASK = 'cldr_eng_Latn.hau_Latn'


def _configure(trained_run, model_dir, train_steps: int, **overrides) -> None:
  """A fine-tuning run of the tiny run's model on its own task, learning rate 0."""
  configure_tiny_run(model_dir, trained_run / 'vocab.model', TASK, train_steps, **{
      'train_loop.train.init_from': repr(str(trained_run)),
      'train_loop.train.learning_rate_schedule': "'constant'",
      'trainer.constant_schedule.learning_rate': '0.0', **overrides})


def test_fine_tuning_starts_from_the_parent_parameters(trained_run, tmp_path):
  _configure(trained_run, tmp_path / 'ft', 2)
  train_loop.train()
  for child, parent in zip(saved_params(tmp_path / 'ft', 2), saved_params(trained_run, 4)):
    np.testing.assert_array_equal(child, parent)  # Learning rate 0: nothing moved.


def test_early_stopping_keeps_the_best_step(trained_run, tmp_path):
  # At learning rate 0 every evaluation scores the same: the first is the best, and with
  # patience 1 the run stops at the second.
  run_dir = tmp_path / 'ft'
  _configure(trained_run, run_dir, 10, EVAL_EVERY_STEPS='1', CHECKPOINT_EVERY_STEPS='5',
             **{'train_loop.train.early_stopping_patience': '1'})
  record = train_loop.train()
  assert record['step'] == 2
  best = json.loads((run_dir / 'best.json').read_text())
  assert (best['step'], best['evaluations_since_best']) == (1, 1)
  run_checkpoints = checkpoints.RunCheckpoints(str(run_dir), read_only=True)
  assert run_checkpoints.all_steps() == [1]
  run_checkpoints.close()
  _configure(trained_run, run_dir, 10, EVAL_EVERY_STEPS='1', CHECKPOINT_EVERY_STEPS='5',
             **{'train_loop.train.early_stopping_patience': '1'})
  assert train_loop.train() == {}  # Rerun: already stopped, no more steps.


@pytest.mark.parametrize('overrides, message', [
    ({'train_loop.train.early_stopping_patience': '2'}, 'needs EVAL_EVERY_STEPS > 0'),
    ({'train_loop.train.early_stopping_patience': '3', 'EVAL_EVERY_STEPS': '1'},
     r'early_stopping_patience \(3\) must be below train.keep_checkpoints \(3\)'),
    ({'train_loop.train.learning_rate_schedule': "'cosine'"}, "'cosine' is not inverse_sqrt"),
])
def test_bad_fine_tuning_settings_are_named(trained_run, tmp_path, overrides, message):
  _configure(trained_run, tmp_path / 'ft', 2, **overrides)
  with pytest.raises(UserError, match=message):
    train_loop.train()


def test_parent_with_another_vocabulary_is_refused(trained_run, tmp_path):
  other = tmp_path / 'other'
  other.mkdir()
  (other / 'vocab.model').write_bytes(b'not the same model')
  _configure(trained_run, tmp_path / 'ft', 2,
             **{'train_loop.train.init_from': repr(str(other))})
  with pytest.raises(UserError, match="vocab.model differs from this run's vocabulary"):
    train_loop.train()
