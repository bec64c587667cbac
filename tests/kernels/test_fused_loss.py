"""Tests for t5x_mt.model.fused_loss: the chunked objective is the plain loss, gradients
too, whether or not it is differentiated."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.model import losses
from t5x_mt.model import fused_loss


def _problem(vocab_major: bool):
  """Hidden states, a projection in either layout, targets, and per-token scales with
  zeros (padding) and unequal values (DRO's direction scales times loss weights)."""
  rng = np.random.default_rng(0)
  hidden = jnp.asarray(rng.normal(size=(3, 37, 16)), jnp.float32)
  projection = jnp.asarray(rng.normal(size=(50, 16) if vocab_major else (16, 50)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, 50, (3, 37)))
  scales = jnp.asarray(rng.integers(0, 2, (3, 37)) * rng.uniform(0.5, 2.0, (3, 37)),
                       jnp.float32)
  return hidden, projection, targets, scales


def _plain_losses(hidden, projection, targets, vocab_major):
  logits = jnp.einsum('ble,ve->blv' if vocab_major else 'ble,ev->blv', hidden, projection)
  return losses.label_smoothed_cross_entropy(logits * 0.25, targets, jnp.ones(targets.shape),
                                             0.1)


@pytest.mark.slow
@pytest.mark.parametrize('vocab_major', [True, False])
def test_chunked_objective_equals_the_plain_loss_and_gradients(vocab_major):
  """Both output projections (tied embedding [V, E] scaled, separate kernel [E, V]), a
  chunk that does not divide the length, padding tokens, a cotangent other than 1, and
  d objective / d scales."""
  hidden, projection, targets, scales = _problem(vocab_major)

  def plain(hidden, projection, scales):
    return 1.7 * jnp.sum(scales * _plain_losses(hidden, projection, targets, vocab_major))

  def chunked(hidden, projection, scales):
    objective, _ = fused_loss.chunked_label_smoothed_objective(
        hidden, projection, targets, scales, 0.1, 0.25, vocab_major, 8)
    return 1.7 * objective

  expected, expected_grads = jax.value_and_grad(plain, argnums=(0, 1, 2))(
      hidden, projection, scales)
  value, grads = jax.jit(jax.value_and_grad(chunked, argnums=(0, 1, 2)))(
      hidden, projection, scales)
  assert float(value) == pytest.approx(float(expected), rel=1e-6)
  for grad, expected_grad in zip(grads, expected_grads):
    np.testing.assert_allclose(grad, expected_grad, atol=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_chunked_token_losses_are_the_plain_losses_with_or_without_gradients():
  hidden, projection, targets, scales = _problem(True)
  expected = _plain_losses(hidden, projection, targets, True)
  _, token_losses = fused_loss.chunked_label_smoothed_objective(
      hidden, projection, targets, scales, 0.1, 0.25, True, 8)
  np.testing.assert_allclose(token_losses, expected, atol=1e-5, rtol=1e-6)

  def objective_and_losses(hidden):
    return fused_loss.chunked_label_smoothed_objective(
        hidden, projection, targets, scales, 0.1, 0.25, True, 8)

  (_, differentiated_losses), _ = jax.value_and_grad(objective_and_losses, has_aux=True)(hidden)
  np.testing.assert_allclose(differentiated_losses, expected, atol=1e-5, rtol=1e-6)


def test_chunked_token_losses_carry_no_gradient():
  hidden, projection, targets, scales = _problem(True)
  grad = jax.grad(lambda h: jnp.sum(fused_loss.chunked_label_smoothed_objective(
      h, projection, targets, scales, 0.1, 0.25, True, 8)[1]))(hidden)
  assert not np.any(np.asarray(grad))
