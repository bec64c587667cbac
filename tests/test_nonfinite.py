"""Non-finite steps: a step whose loss or gradient norm is not finite changes nothing, is
counted, and a run of them ends training with one line and exit 1, its checkpoints finite."""

import json
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import configure_tiny_run, saved_params, train_configured

from t5x_mt.core import cli
from t5x_mt.model import models
from t5x_mt.core import partitioning
from t5x_mt.training import trainer
from t5x_mt.core.errors import RunFailure
from test_partitioning import DIRECTIONS, TINY, packed_batch

GOOD = jnp.ones(len(DIRECTIONS))
# DRO's per-direction loss scales: NaN makes that step's loss NaN, as a bad batch would.
POISONED = jnp.full(len(DIRECTIONS), jnp.nan)


def _train(scales_per_step):
  """Adam steps over batches 0, 1, ... with the given direction scales (None: skip the
  step and its batch, as if never read); returns the parameters and each step's metrics."""
  model = models.TranslationModel(TINY)
  optimizer = trainer.make_optimizer(optax.constant_schedule(1e-2))
  mesh = partitioning.create_mesh((1, 1), jax.devices()[:1])
  state, shardings = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, 24, 24), mesh,
      partitioning.DEFAULT_RULES, jax.random.PRNGKey(0))
  step = trainer.jit_train_step(
      trainer.make_train_step(model, optimizer, direction_ids=DIRECTIONS), shardings, mesh,
      partitioning.DEFAULT_RULES)
  metrics = []
  for index, scales in enumerate(scales_per_step):
    if scales is None:
      continue
    batch = partitioning.host_batch_to_global(packed_batch(index), mesh)
    state, step_metrics = step(state, batch, jax.random.PRNGKey(1), scales)
    metrics.append(jax.device_get(step_metrics))
  return jax.device_get(state), metrics


@pytest.mark.slow
def test_a_non_finite_step_is_skipped_and_the_run_goes_on_as_without_it():
  poisoned, metrics = _train([GOOD, POISONED, GOOD, GOOD])
  without, _ = _train([GOOD, None, GOOD, GOOD])
  assert [int(m['nonfinite']) for m in metrics] == [0, 1, 0, 0]
  assert not math.isfinite(float(metrics[1]['grad_norm']))
  # The skipped step adds nothing to the sums that windows and DRO average.
  assert float(metrics[1]['loss_sum']) == 0.0 and float(metrics[1]['tokens']) == 0.0
  assert int(poisoned.step) == int(without.step) == 3
  for got, want in zip(jax.tree_util.tree_leaves((poisoned.params, poisoned.opt_state)),
                       jax.tree_util.tree_leaves((without.params, without.opt_state))):
    np.testing.assert_array_equal(got, want)
  # A good step does move the parameters: equal states above are not a frozen run.
  moved, _ = _train([GOOD, GOOD, GOOD, GOOD])
  assert not np.array_equal(jax.tree_util.tree_leaves(moved.params)[0],
                            jax.tree_util.tree_leaves(without.params)[0])


def _strict_json(line: str) -> dict:
  def refuse(constant):
    raise ValueError(f'not JSON: {constant}')
  return json.loads(line, parse_constant=refuse)


@pytest.mark.slow
def test_a_learning_rate_that_overflows_stops_the_run_with_finite_checkpoints(
    tiny_mixture, tmp_path):
  run_dir = tmp_path / 'run'
  configure_tiny_run(run_dir, tmp_path / 'vocab.model', tiny_mixture, 40,
                     LEARNING_RATE='1e30', WARMUP_STEPS='1', CHECKPOINT_EVERY_STEPS='3',
                     **{'training.TrainConfig.max_nonfinite_steps': '4'})
  with pytest.raises(RunFailure) as stopped:
    train_configured()
  message = str(stopped.value)
  # Step 1 updates with the huge rate; every step after it overflows and is skipped.
  assert message.startswith('step 5: the loss or gradient norm was not finite for 4 steps '
                            'in a row (steps 2-5, all skipped, so every checkpoint is finite)')
  records = [_strict_json(line) for line in (run_dir / 'metrics.jsonl').read_text().splitlines()]
  assert [r['step'] for r in records] == [1, 2, 3, 4, 5]
  assert [r['nonfinite_steps'] for r in records] == [0, 1, 1, 1, 1]
  assert records[0]['loss'] is not None and records[1]['loss'] is None
  # Step 5's flag is read after step 6, before anything else of step 6 (its record, its
  # checkpoint) is written; the checkpoint of step 3 holds step 1's finite parameters.
  saved = sorted(int(p.name) for p in (run_dir / 'checkpoints').iterdir() if p.name.isdigit())
  assert saved == [3]
  for step in saved:
    assert all(np.isfinite(leaf).all() for leaf in saved_params(run_dir, step))


def test_a_run_failure_is_one_line_and_exit_1(capsys, monkeypatch):
  def main(argv):
    del argv
    raise RunFailure('step 9: diverged\nsecond line')
  monkeypatch.setattr('sys.argv', ['train.py'])
  with pytest.raises(SystemExit) as exited:
    cli.run(main)
  assert exited.value.code == 1
  assert capsys.readouterr().err == 'error: step 9: diverged\n'
