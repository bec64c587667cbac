"""Label-smoothed cross entropy, summed, with per-direction sums.

Losses are returned as sums with their token counts rather than means, so that gradient
accumulation over microbatches, data-parallel shards and packed rows all normalise by
the same global token count and give exactly the large-batch gradient.
"""

import jax
import jax.numpy as jnp
import numpy as np


def label_smoothed_cross_entropy(logits: jax.Array, targets: jax.Array, weights: jax.Array,
                                 label_smoothing: float = 0.1) -> jax.Array:
  """Per-token loss [B, L]: cross entropy against (1 - ls) on the target, ls spread evenly.

  The entropy of the smoothed target distribution is subtracted, so a perfect model scores
  0 whatever the smoothing; weights (0 on padding) multiply each token.
  """
  confidence, low_confidence, entropy = smoothing_constants(logits.shape[-1],
                                                             label_smoothing)
  log_probs = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
  target_log_prob = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
  # sum_v q_v log p_v with q = low everywhere and confidence at the target.
  smoothed = (confidence - low_confidence) * target_log_prob + low_confidence * log_probs.sum(-1)
  return (-smoothed - entropy) * weights


def direction_sums(token_loss: jax.Array, weights: jax.Array, token_directions: jax.Array,
                   direction_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
  """Loss sums and token counts per direction, in the order of `direction_ids` (sorted).

  Tokens whose direction is not in `direction_ids` (padding has id 0) count nowhere.
  """
  position = jnp.searchsorted(direction_ids, token_directions)
  position = jnp.clip(position, 0, direction_ids.shape[0] - 1)
  known = (direction_ids[position] == token_directions) & (weights > 0)
  segment = jnp.where(known, position, direction_ids.shape[0]).reshape(-1)
  num_segments = direction_ids.shape[0] + 1
  loss_sums = jax.ops.segment_sum(jnp.where(known, token_loss, 0.0).reshape(-1), segment,
                                  num_segments=num_segments)
  token_counts = jax.ops.segment_sum(known.astype(jnp.float32).reshape(-1), segment,
                                     num_segments=num_segments)
  return loss_sums[:-1], token_counts[:-1]


def direction_token_scales(token_directions: jax.Array, direction_ids: jax.Array,
                           scales: jax.Array) -> jax.Array:
  """Each token's scale [B, L]: scales[i] for a token of direction_ids[i] (sorted), 1 for
  tokens of any other direction (and padding, whose loss weight is 0 anyway)."""
  position = jnp.clip(jnp.searchsorted(direction_ids, token_directions), 0,
                      direction_ids.shape[0] - 1)
  return jnp.where(direction_ids[position] == token_directions, scales[position], 1.0)


def smoothing_constants(vocab_size: int, label_smoothing: float) -> tuple[float, float, float]:
  """(confidence, low_confidence, entropy of the smoothed target distribution)."""
  confidence = 1.0 - label_smoothing
  low_confidence = label_smoothing / (vocab_size - 1)
  entropy = -(confidence * np.log(confidence)
              + (vocab_size - 1) * low_confidence * np.log(low_confidence + 1e-20))
  return confidence, low_confidence, float(entropy)
