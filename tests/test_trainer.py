"""The optimisation a run performs: schedule, smoothed loss, accumulation, direction sums."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t5x_mt.model import losses
from t5x_mt.model import models
from t5x_mt.core import partitioning
from t5x_mt.training import trainer
from t5x_mt.core.errors import UserError
from test_partitioning import DIRECTIONS, TINY, packed_batch


def test_inverse_sqrt_schedule_warms_up_linearly_then_decays():
  schedule = trainer.inverse_sqrt_schedule(peak_learning_rate=1e-3, warmup_steps=100)
  assert float(schedule(0)) == pytest.approx(1e-5)          # update 1 of 100
  assert float(schedule(49)) == pytest.approx(0.5e-3)
  assert float(schedule(99)) == pytest.approx(1e-3)         # the peak at update 100
  assert float(schedule(399)) == pytest.approx(1e-3 * math.sqrt(100 / 400))


def test_label_smoothed_loss_matches_hand_computation():
  logits = jnp.log(jnp.array([[[0.7, 0.2, 0.1]]]))
  loss = losses.label_smoothed_cross_entropy(logits, jnp.array([[0]]), jnp.ones((1, 1)), 0.1)
  # Targets q = (0.9, 0.05, 0.05); loss = -sum q log p - H(q).
  q = np.array([0.9, 0.05, 0.05])
  expected = -(q * np.log([0.7, 0.2, 0.1])).sum() + (q * np.log(q)).sum()
  assert float(loss[0, 0]) == pytest.approx(expected, rel=1e-6)
  perfect = losses.label_smoothed_cross_entropy(jnp.log(jnp.array([[q]])), jnp.array([[0]]),
                                                jnp.ones((1, 1)), 0.1)
  assert float(perfect[0, 0]) == pytest.approx(0.0, abs=1e-6)


def test_direction_sums_split_loss_by_direction_and_skip_padding():
  token_loss = jnp.array([[1.0, 2.0, 4.0, 8.0]])
  weights = jnp.array([[1.0, 1.0, 1.0, 0.0]])
  token_directions = jnp.array([[7, 3, 7, 0]])
  sums, counts = losses.direction_sums(token_loss, weights, token_directions,
                                       jnp.array([3, 7]))
  np.testing.assert_allclose(sums, [2.0, 5.0])
  np.testing.assert_allclose(counts, [1.0, 2.0])


def _one_step(num_microbatches: int, loss_chunk_length: int = 0, direction_scales=None,
              **config_overrides):
  """One SGD step: parameters move by the gradient itself (Adam's first step would move
  every parameter by about +-lr whatever its gradient, hiding differences)."""
  config = dataclasses.replace(TINY, dropout_rate=0.0, **config_overrides)
  model = models.TranslationModel(config)
  optimizer = optax.sgd(1.0)
  mesh = partitioning.create_mesh((1, 1), jax.devices()[:1])
  state, shardings = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, 24, 24), mesh,
      partitioning.DEFAULT_RULES, jax.random.PRNGKey(0))
  step = trainer.jit_train_step(
      trainer.make_train_step(model, optimizer, direction_ids=DIRECTIONS,
                              num_microbatches=num_microbatches,
                              loss_chunk_length=loss_chunk_length),
      shardings, mesh, partitioning.DEFAULT_RULES)
  batch = partitioning.host_batch_to_global(packed_batch(0), mesh)
  state, metrics = step(state, batch, jax.random.PRNGKey(1), direction_scales)
  return jax.device_get(state.params), jax.device_get(metrics)


@pytest.mark.slow
def test_gradient_accumulation_equals_one_large_batch():
  big_params, big_metrics = _one_step(num_microbatches=1)
  micro_params, micro_metrics = _one_step(num_microbatches=4)
  assert float(micro_metrics['loss_sum']) == pytest.approx(float(big_metrics['loss_sum']),
                                                           rel=1e-6)
  np.testing.assert_allclose(micro_metrics['direction_tokens'], big_metrics['direction_tokens'])
  np.testing.assert_allclose(micro_metrics['grad_norm'], big_metrics['grad_norm'], rtol=1e-5)
  for big, micro in zip(jax.tree_util.tree_leaves(big_params),
                        jax.tree_util.tree_leaves(micro_params)):
    np.testing.assert_allclose(micro, big, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
@pytest.mark.parametrize('logits_via_embedding', [True, False])
def test_train_step_with_chunked_loss_equals_plain_step(logits_via_embedding):
  plain_params, plain_metrics = _one_step(1, logits_via_embedding=logits_via_embedding)
  chunked_params, chunked_metrics = _one_step(1, loss_chunk_length=5,
                                              logits_via_embedding=logits_via_embedding)
  assert float(chunked_metrics['loss_sum']) == pytest.approx(
      float(plain_metrics['loss_sum']), rel=1e-6)
  np.testing.assert_allclose(chunked_metrics['direction_loss_sums'],
                             plain_metrics['direction_loss_sums'], rtol=1e-6)
  for plain, chunked in zip(jax.tree_util.tree_leaves(plain_params),
                            jax.tree_util.tree_leaves(chunked_params)):
    np.testing.assert_allclose(chunked, plain, rtol=1e-5, atol=1e-6)


@pytest.mark.slow
def test_chunked_loss_step_with_dro_scales_equals_plain_step():
  # DRO's reweighting: each direction's tokens scaled in the objective (sorted ids).
  scales = jnp.linspace(0.2, 3.0, len(DIRECTIONS))
  plain_params, _ = _one_step(1, direction_scales=scales)
  chunked_params, _ = _one_step(1, loss_chunk_length=5, direction_scales=scales)
  unscaled_params, _ = _one_step(1, loss_chunk_length=5)
  for plain, chunked, unscaled in zip(jax.tree_util.tree_leaves(plain_params),
                                      jax.tree_util.tree_leaves(chunked_params),
                                      jax.tree_util.tree_leaves(unscaled_params)):
    np.testing.assert_allclose(chunked, plain, rtol=1e-5, atol=1e-6)
  assert not np.allclose(jax.tree_util.tree_leaves(chunked_params)[0],
                         jax.tree_util.tree_leaves(unscaled_params)[0], rtol=1e-4, atol=1e-6)


def test_microbatches_must_divide_the_batch():
  with pytest.raises(UserError, match='NUM_MICROBATCHES'):
    trainer.check_microbatches(batch_size=16, num_microbatches=3, data_parallel=1)


def test_weight_decay_skips_vectors():
  mask = trainer._decay_mask({'kernel': jnp.ones((2, 2)), 'scale': jnp.ones(2)})
  assert mask == {'kernel': True, 'scale': False}
