"""Tests for t5x_mt.training.optimizers: the fused AdamW is optax's chained clip + AdamW."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t5x_mt.training import optimizers


def _params():
  rng = np.random.default_rng(0)
  return {'kernel': jnp.asarray(rng.normal(size=(4, 3)), jnp.float32),
          'bias': jnp.asarray(rng.normal(size=(3,)), jnp.float32),
          'layers': {'stacked': jnp.asarray(rng.normal(size=(2, 3, 5)), jnp.float32)}}


def _decay_matrices(params):
  return jax.tree.map(lambda p: p.ndim > 1, params)


def _schedule(count):
  return 1e-2 * jnp.minimum(1.0, (count + 1) / 3.0)


@pytest.mark.slow
@pytest.mark.parametrize('clip_norm, grad_scale', [(1.0, 10.0), (1.0, 1e-3), (None, 1.0)])
@pytest.mark.parametrize('learning_rate', [_schedule, 3e-3])
def test_fused_adamw_equals_the_optax_chain_step_by_step(clip_norm, grad_scale,
                                                         learning_rate):
  # Clipping active (large gradients) and idle, a schedule and a constant, weight decay
  # on matrices only; four steps, so bias corrections and the schedule move.
  kwargs = dict(b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.1, mask=_decay_matrices)
  parts = [optax.clip_by_global_norm(clip_norm)] if clip_norm else []
  reference = optax.chain(*parts, optax.adamw(learning_rate, **kwargs))
  fused = optimizers.clipped_adamw(learning_rate, clip_norm=clip_norm, **kwargs)
  params = _params()
  reference_state, fused_state = reference.init(params), fused.init(params)
  assert jax.tree.structure(fused_state) == jax.tree.structure(reference_state)
  reference_params = fused_params = params
  for step in range(4):
    grads = jax.tree.map(lambda p: grad_scale * jnp.sin(p * (step + 1)), params)
    updates, reference_state = reference.update(grads, reference_state, reference_params)
    reference_params = optax.apply_updates(reference_params, updates)
    updates, fused_state = jax.jit(fused.update)(grads, fused_state, fused_params)
    fused_params = optax.apply_updates(fused_params, updates)
  for got, want in zip(jax.tree.leaves((fused_params, fused_state)),
                       jax.tree.leaves((reference_params, reference_state))):
    np.testing.assert_allclose(got, want, rtol=2e-6, atol=1e-7)


def test_fused_adamw_needs_the_parameters():
  fused = optimizers.clipped_adamw(1e-3)
  params = _params()
  with pytest.raises(ValueError, match='parameters'):
    fused.update(params, fused.init(params))
