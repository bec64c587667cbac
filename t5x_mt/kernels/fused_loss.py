"""Label-smoothed cross entropy fused with the output projection, a chunk at a time.

At 100k-256k vocabularies the [batch, length, vocab] float32 logits, and the softmax and
gradient arrays of the same shape that autodiff keeps, dominate a training step's memory.
Here the loss is computed from the decoder's final states `chunk_length` positions (of all
rows) at a time, and the backward pass is its own: it recomputes each chunk's logits from
the saved log-sum-exp, so at most one chunk of logits exists in either pass. Same loss and
gradients as `losses.label_smoothed_cross_entropy` over the full logits.
"""

import functools

import jax
import jax.numpy as jnp

from t5x_mt import losses


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


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5, 6, 7))
def chunked_label_smoothed_cross_entropy(hidden: jax.Array, projection: jax.Array,
                                         targets: jax.Array, weights: jax.Array,
                                         label_smoothing: float, logits_scale: float,
                                         vocab_major: bool, chunk_length: int) -> jax.Array:
  """`label_smoothed_cross_entropy` of logits = (hidden . projection) * logits_scale,
  computed `chunk_length` positions at a time (all rows together), so that at most one
  [B, chunk_length, V] logits block exists in the forward or the backward pass.

  The gradient is its own (custom VJP): the backward pass recomputes each chunk's logits
  from the saved log-sum-exp instead of keeping them, and d loss / d logits is
  softmax - smoothed target, times the token's weight.

  Args:
    hidden: final decoder states [B, L, E] (in the compute dtype).
    projection: the output projection, [V, E] (`vocab_major`, a tied embedding) or [E, V].
    targets: int [B, L]; weights: [B, L] (0 on padding).
    label_smoothing, logits_scale, vocab_major, chunk_length: static settings.

  Returns:
    Per-token weighted loss [B, L], float32.
  """
  return _chunked_forward(hidden, projection, targets, weights, label_smoothing,
                          logits_scale, vocab_major, chunk_length)[0]


def _chunked_forward(hidden, projection, targets, weights, label_smoothing, logits_scale,
                     vocab_major, chunk_length):
  vocab_size = projection.shape[0 if vocab_major else 1]
  confidence, low, entropy = losses.smoothing_constants(vocab_size, label_smoothing)

  def chunk_loss(_, chunk):
    hidden_chunk, target_chunk = chunk
    logits = _chunk_logits(hidden_chunk, projection, logits_scale, vocab_major)
    lse = jax.nn.logsumexp(logits, axis=-1)
    target_logit = jnp.take_along_axis(logits, target_chunk[..., None], axis=-1)[..., 0]
    smoothed = ((confidence - low) * (target_logit - lse)
                + low * (logits.sum(-1) - vocab_size * lse))
    return None, (-smoothed - entropy, lse)

  length = targets.shape[1]
  _, (raw_loss, lse) = jax.lax.scan(
      chunk_loss, None, (_chunks(hidden, chunk_length), _chunks(targets, chunk_length)))
  raw_loss = _unchunk(raw_loss, length)
  return raw_loss * weights, (raw_loss, _unchunk(lse, length))


def _chunked_fwd_rule(hidden, projection, targets, weights, label_smoothing, logits_scale,
                      vocab_major, chunk_length):
  loss, (raw_loss, lse) = _chunked_forward(hidden, projection, targets, weights,
                                           label_smoothing, logits_scale, vocab_major,
                                           chunk_length)
  return loss, (hidden, projection, targets, weights, raw_loss, lse)


def _chunked_bwd_rule(label_smoothing, logits_scale, vocab_major, chunk_length, residuals,
                      d_loss):
  hidden, projection, targets, weights, raw_loss, lse = residuals
  vocab_size = projection.shape[0 if vocab_major else 1]
  confidence, low, _ = losses.smoothing_constants(vocab_size, label_smoothing)
  token_scale = d_loss * weights

  def chunk_grads(d_projection, chunk):
    hidden_chunk, target_chunk, lse_chunk, scale_chunk = chunk
    logits = _chunk_logits(hidden_chunk, projection, logits_scale, vocab_major)
    # d loss / d logits = softmax - smoothed target; the target gets confidence.
    d_logits = jnp.exp(logits - lse_chunk[..., None]) - low
    target_onehot = jax.nn.one_hot(target_chunk, vocab_size, dtype=jnp.float32)
    d_logits = (d_logits - (confidence - low) * target_onehot) * (
        scale_chunk[..., None] * logits_scale)
    d_logits = d_logits.astype(hidden_chunk.dtype)
    d_hidden = jax.lax.dot_general(d_logits, projection.astype(hidden_chunk.dtype),
                                   (((2,), (0 if vocab_major else 1,)), ((), ())),
                                   preferred_element_type=jnp.float32)
    # Sum over rows and positions of hidden (x) d_logits, in the projection's layout.
    operands = (d_logits, hidden_chunk) if vocab_major else (hidden_chunk, d_logits)
    d_projection = d_projection + jax.lax.dot_general(
        *operands, (((0, 1), (0, 1)), ((), ())), preferred_element_type=jnp.float32)
    return d_projection, d_hidden.astype(hidden_chunk.dtype)

  length = targets.shape[1]
  d_projection, d_hidden = jax.lax.scan(
      chunk_grads, jnp.zeros(projection.shape, jnp.float32),
      tuple(_chunks(x, chunk_length) for x in (hidden, targets, lse, token_scale)))
  return (_unchunk(d_hidden, length), d_projection.astype(projection.dtype), None,
          d_loss * raw_loss)


chunked_label_smoothed_cross_entropy.defvjp(_chunked_fwd_rule, _chunked_bwd_rule)
