"""Label-smoothed cross entropy fused with the output projection, a chunk at a time.

At 100k-256k vocabularies the [batch, length, vocab] float32 logits, and the softmax and
gradient arrays of the same shape that autodiff keeps, dominate a training step's memory.
Here the loss is computed from the decoder's final states `chunk_length` positions (of all
rows) at a time, and its gradients are computed in the same pass, from each chunk's logits
while they exist: at most one chunk of logits exists at any time, and no logits are
recomputed. Same loss and gradients as `losses.label_smoothed_cross_entropy` over the full
logits.
"""

import functools

import jax
import jax.numpy as jnp

from t5x_mt.model import losses


def _chunk_logits(hidden: jax.Array, projection: jax.Array, scale: float,
                  vocab_major: bool) -> jax.Array:
  """float32 logits [B, C, V] of one chunk of hidden states [B, C, E]."""
  contract = 1 if vocab_major else 0  # The embedding axis of [V, E] or [E, V].
  logits = jax.lax.dot_general(hidden, projection.astype(hidden.dtype),
                               (((2,), (contract,)), ((), ())),
                               preferred_element_type=jnp.float32)
  return logits * scale


def _chunks(x: jax.Array, chunk_length: int) -> jax.Array:
  """[B, L, ...] -> [L / chunk, B, chunk, ...], padding L with zeros to whole chunks."""
  batch, length = x.shape[:2]
  padded = -(-length // chunk_length) * chunk_length
  x = jnp.pad(x, [(0, 0), (0, padded - length)] + [(0, 0)] * (x.ndim - 2))
  x = x.reshape((batch, padded // chunk_length, chunk_length) + x.shape[2:])
  return jnp.moveaxis(x, 1, 0)


def _unchunk(x: jax.Array, length: int) -> jax.Array:
  """Inverse of `_chunks`: [N, B, chunk, ...] -> [B, length, ...]."""
  x = jnp.moveaxis(x, 0, 1)
  return x.reshape((x.shape[0], -1) + x.shape[3:])[:, :length]


def chunked_label_smoothed_objective(hidden: jax.Array, projection: jax.Array,
                                     targets: jax.Array, token_scales: jax.Array,
                                     label_smoothing: float, logits_scale: float,
                                     vocab_major: bool,
                                     chunk_length: int) -> tuple[jax.Array, jax.Array]:
  """The training objective sum_t token_scales_t * loss_t of `label_smoothed_cross_entropy`
  over logits = (hidden . projection) * logits_scale, and the per-token losses, computed
  `chunk_length` positions (of all rows) at a time: at most one [B, chunk_length, V]
  logits block exists at once.

  Under differentiation the gradients of the objective are computed in the forward pass,
  chunk by chunk, from the logits already at hand (d loss / d logits is softmax - smoothed
  target): the backward pass only scales them by the objective's cotangent. The output
  projection is thus computed once and its two gradient products once each, as the plain
  loss's autodiff does, without keeping any logits. Without differentiation (evaluation)
  only the losses are computed.

  Args:
    hidden: final decoder states [B, L, E] (in the compute dtype).
    projection: the output projection, [V, E] (`vocab_major`, a tied embedding) or [E, V].
    targets: int [B, L].
    token_scales: [B, L], each token's weight in the objective (0 on padding; a direction's
      DRO scale times its loss weight).
    label_smoothing, logits_scale, vocab_major, chunk_length: static settings.

  Returns:
    (objective, a float32 scalar; per-token losses [B, L], float32, unweighted, carrying no
    gradient: report them, differentiate the objective).
  """
  objective, token_losses = _objective_and_losses(
      hidden, projection, targets, token_scales, label_smoothing, logits_scale, vocab_major,
      chunk_length)
  return objective, jax.lax.stop_gradient(token_losses)


def _chunk_loss(hidden_chunk, target_chunk, projection, label_smoothing, logits_scale,
                vocab_major):
  """(logits, log-sum-exp, per-token loss) of one chunk of decoder states."""
  vocab_size = projection.shape[0 if vocab_major else 1]
  confidence, low, entropy = losses.smoothing_constants(vocab_size, label_smoothing)
  logits = _chunk_logits(hidden_chunk, projection, logits_scale, vocab_major)
  lse = jax.nn.logsumexp(logits, axis=-1)
  target_logit = jnp.take_along_axis(logits, target_chunk[..., None], axis=-1)[..., 0]
  smoothed = ((confidence - low) * (target_logit - lse)
              + low * (logits.sum(-1) - vocab_size * lse))
  return logits, lse, -smoothed - entropy


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def _objective_and_losses(hidden, projection, targets, token_scales, label_smoothing,
                          logits_scale, vocab_major, chunk_length):
  def chunk_loss(_, chunk):
    hidden_chunk, target_chunk = chunk
    return None, _chunk_loss(hidden_chunk, target_chunk, projection, label_smoothing,
                             logits_scale, vocab_major)[2]

  _, token_losses = jax.lax.scan(
      chunk_loss, None, (_chunks(hidden, chunk_length), _chunks(targets, chunk_length)))
  token_losses = _unchunk(token_losses, targets.shape[1])
  return jnp.sum(token_losses * token_scales), token_losses


def _objective_fwd_rule(hidden, projection, targets, token_scales, label_smoothing,
                        logits_scale, vocab_major, chunk_length):
  """The objective, the losses, and as residuals the objective's gradients with respect to
  hidden and projection, accumulated over the chunks."""
  vocab_size = projection.shape[0 if vocab_major else 1]
  confidence, low, _ = losses.smoothing_constants(vocab_size, label_smoothing)

  def chunk_grads(d_projection, chunk):
    hidden_chunk, target_chunk, scale_chunk = chunk
    logits, lse, token_loss = _chunk_loss(hidden_chunk, target_chunk, projection,
                                          label_smoothing, logits_scale, vocab_major)
    target_onehot = jax.nn.one_hot(target_chunk, vocab_size, dtype=jnp.float32)
    d_logits = (jnp.exp(logits - lse[..., None]) - low
                - (confidence - low) * target_onehot) * (scale_chunk[..., None] * logits_scale)
    d_logits = d_logits.astype(hidden_chunk.dtype)
    d_hidden = jax.lax.dot_general(d_logits, projection.astype(hidden_chunk.dtype),
                                   (((2,), (0 if vocab_major else 1,)), ((), ())),
                                   preferred_element_type=jnp.float32)
    # Sum over rows and positions of hidden (x) d_logits, in the projection's layout.
    operands = (d_logits, hidden_chunk) if vocab_major else (hidden_chunk, d_logits)
    d_projection = d_projection + jax.lax.dot_general(
        *operands, (((0, 1), (0, 1)), ((), ())), preferred_element_type=jnp.float32)
    return d_projection, (token_loss, d_hidden.astype(hidden_chunk.dtype))

  length = targets.shape[1]
  d_projection, (token_losses, d_hidden) = jax.lax.scan(
      chunk_grads, jnp.zeros(projection.shape, jnp.float32),
      tuple(_chunks(x, chunk_length) for x in (hidden, targets, token_scales)))
  token_losses = _unchunk(token_losses, length)
  objective = jnp.sum(token_losses * token_scales)
  residuals = (_unchunk(d_hidden, length), d_projection.astype(projection.dtype),
               token_losses)
  return (objective, token_losses), residuals


def _objective_bwd_rule(label_smoothing, logits_scale, vocab_major, chunk_length, residuals,
                        cotangents):
  """Scales the forward pass's gradients; the losses' cotangent is zero by construction
  (`chunked_label_smoothed_objective` stops their gradient)."""
  del label_smoothing, logits_scale, vocab_major, chunk_length
  d_hidden, d_projection, token_losses = residuals
  d_objective = cotangents[0]
  return ((d_objective * d_hidden).astype(d_hidden.dtype),
          (d_objective * d_projection).astype(d_projection.dtype), None,
          d_objective * token_losses)


_objective_and_losses.defvjp(_objective_fwd_rule, _objective_bwd_rule)
