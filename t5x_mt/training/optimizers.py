"""AdamW with global-norm clipping in one elementwise pass per parameter.

The optimizer update is pure memory traffic: every parameter, its gradient and both
moments are read and written once per step. Chained optax transformations (clip, scale by
Adam, masked weight decay, scale by the learning rate) give XLA's CPU backend several
passes over those arrays, where the same arithmetic written as one function per
parameter makes one (bench/optimizer_update.py compares them). This is
that function, with the exact semantics and the state layout of
`optax.chain(optax.clip_by_global_norm(clip_norm), optax.adamw(..., mask=mask))`, so
checkpoints written with either restore into the other.
"""

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import optax


def _zero_count() -> jax.Array:
  return jnp.zeros([], jnp.int32)


def _learning_rate_state(learning_rate: float | optax.Schedule):
  return (optax.ScaleByScheduleState(count=_zero_count()) if callable(learning_rate)
          else optax.EmptyState())


def clipped_adamw(learning_rate: float | optax.Schedule, *, b1: float = 0.9,
                  b2: float = 0.999, eps: float = 1e-8, weight_decay: float = 0.0,
                  mask: Callable[[Any], Any] | None = None,
                  clip_norm: float | None = None) -> optax.GradientTransformation:
  """`optax.chain(clip_by_global_norm(clip_norm), adamw(learning_rate, b1, b2, eps,
  weight_decay, mask=mask))` (without the clip when `clip_norm` is None), fused.

  Args:
    learning_rate: a float or an optax schedule of the update count.
    b1, b2, eps: Adam's moment decays and denominator epsilon.
    weight_decay: decoupled weight decay, applied where `mask(params)` is True.
    mask: parameters -> a tree of Python bools (static); None decays every parameter.
    clip_norm: gradients are scaled to at most this global norm first; None: no clipping.
  """
  def init(params):
    adam_state = optax.ScaleByAdamState(
        count=_zero_count(), mu=jax.tree.map(jnp.zeros_like, params),
        nu=jax.tree.map(jnp.zeros_like, params))
    decay_state = (optax.MaskedState(inner_state=optax.EmptyState()) if mask is not None
                   else optax.EmptyState())
    adamw_state = (adam_state, decay_state, _learning_rate_state(learning_rate))
    return (optax.EmptyState(), adamw_state) if clip_norm else (adamw_state,)

  def update(grads, state, params=None):
    if params is None:
      raise ValueError('clipped_adamw needs the parameters (weight decay)')
    adam_state, decay_state, lr_state = state[-1]
    grad_scale = jnp.ones([], jnp.float32)
    if clip_norm:
      norm = optax.tree.norm(grads)
      grad_scale = jnp.where(norm < clip_norm, 1.0, clip_norm / norm)
    count = optax.safe_increment(adam_state.count)
    mu_correction = 1 - b1 ** count
    nu_correction = 1 - b2 ** count
    if callable(learning_rate):
      step_size = learning_rate(lr_state.count)
      lr_state = optax.ScaleByScheduleState(count=optax.safe_increment(lr_state.count))
    else:
      step_size = learning_rate
    decays = (mask(params) if mask is not None
              else jax.tree.map(lambda _: True, params))

    def leaf(grad, mu, nu, param, decay):
      grad = grad * grad_scale.astype(grad.dtype)
      mu = (1 - b1) * grad + b1 * mu
      nu = (1 - b2) * grad * grad + b2 * nu
      step = (mu / mu_correction.astype(mu.dtype)) / (
          jnp.sqrt(nu / nu_correction.astype(nu.dtype)) + eps)
      if decay and weight_decay:
        step = step + weight_decay * param
      return -step_size * step, mu, nu

    outputs = jax.tree.map(leaf, grads, adam_state.mu, adam_state.nu, params, decays)
    treedef = jax.tree.structure(grads)
    updates, mu, nu = (treedef.unflatten(part) for part in zip(*treedef.flatten_up_to(outputs)))
    adamw_state = (optax.ScaleByAdamState(count=count, mu=mu, nu=nu), decay_state, lr_state)
    return updates, (state[0], adamw_state) if clip_norm else (adamw_state,)

  return optax.GradientTransformation(init, update)
