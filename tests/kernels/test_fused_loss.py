"""Tests for t5x_mt.kernels.fused_loss: the chunked loss is the plain loss, gradients too."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt import losses
from t5x_mt.kernels import fused_loss


@pytest.mark.parametrize('vocab_major', [True, False])
def test_chunked_loss_equals_the_plain_loss_and_gradients(vocab_major):
  """Both output projections (tied embedding [V, E] scaled, separate kernel [E, V]), a
  chunk that does not divide the length, padding tokens, and d loss / d weights."""
  rng = np.random.default_rng(0)
  hidden = jnp.asarray(rng.normal(size=(3, 37, 16)), jnp.float32)
  projection = jnp.asarray(rng.normal(size=(50, 16) if vocab_major else (16, 50)), jnp.float32)
  targets = jnp.asarray(rng.integers(0, 50, (3, 37)))
  weights = jnp.asarray(rng.integers(0, 2, (3, 37)), jnp.float32)
  cotangent = jnp.asarray(rng.normal(size=(3, 37)), jnp.float32)

  def plain(hidden, projection, weights):
    logits = jnp.einsum('ble,ve->blv' if vocab_major else 'ble,ev->blv', hidden, projection)
    return jnp.sum(cotangent * losses.label_smoothed_cross_entropy(
        logits * 0.25, targets, weights, 0.1))

  def chunked(hidden, projection, weights):
    return jnp.sum(cotangent * fused_loss.chunked_label_smoothed_cross_entropy(
        hidden, projection, targets, weights, 0.1, 0.25, vocab_major, 8))

  expected, expected_grads = jax.value_and_grad(plain, argnums=(0, 1, 2))(
      hidden, projection, weights)
  value, grads = jax.value_and_grad(chunked, argnums=(0, 1, 2))(hidden, projection, weights)
  assert float(value) == pytest.approx(float(expected), rel=1e-6)
  for grad, expected_grad in zip(grads, expected_grads):
    np.testing.assert_allclose(grad, expected_grad, atol=1e-5, rtol=1e-5)
