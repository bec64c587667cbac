"""Reference dot-product attention in plain XLA ops.

This is the implementation every other kernel is tested against: it materialises the full
[batch, heads, q_length, kv_length] score matrix, so it is simple and exact but uses memory
quadratic in the sequence length. Softmax always runs in float32.
"""

from typing import Optional

import jax
import jax.numpy as jnp

Array = jax.Array


def attention_mask(q_segment_ids: Optional[Array], kv_segment_ids: Optional[Array],
                   batch: int, q_length: int, kv_length: int, causal: bool) -> Array:
  """Boolean [batch, q_length, kv_length] mask: which keys each query may attend to.

  A query attends to a key when their segment ids are equal and nonzero (0 is padding) and,
  when causal, the key's array index is not after the query's. Missing segment ids mean one
  segment covering the whole sequence.
  """
  if q_segment_ids is None:
    q_segment_ids = jnp.ones((batch, q_length), jnp.int32)
  if kv_segment_ids is None:
    kv_segment_ids = jnp.ones((batch, kv_length), jnp.int32)
  q_ids = q_segment_ids[:, :, None]
  kv_ids = kv_segment_ids[:, None, :]
  mask = (q_ids == kv_ids) & (q_ids != 0)
  if causal:
    q_index = jnp.arange(q_length)[:, None]
    kv_index = jnp.arange(kv_length)[None, :]
    mask = mask & (kv_index <= q_index)[None]
  return mask


def _masked_softmax(logits: Array, mask: Array) -> Array:
  """Softmax over the last axis of the allowed logits; masked entries, and rows with
  nothing allowed, get exact zeros (a finite minimum, not -inf, keeps such rows finite)."""
  logits = jnp.where(mask, logits, jnp.finfo(jnp.float32).min)
  return jnp.where(mask, jax.nn.softmax(logits, axis=-1), 0.0)


def xla_attention(q: Array, k: Array, v: Array, *,
                  q_segment_ids: Optional[Array] = None,
                  kv_segment_ids: Optional[Array] = None,
                  bias: Optional[Array] = None,
                  causal: bool = False,
                  dropout_rate: float = 0.0,
                  dropout_rng: Optional[Array] = None,
                  interpret: bool = False,
                  relative_values: Optional[tuple[Array, Array]] = None) -> Array:
  """Masked softmax(q k^T / sqrt(d) + bias) v; see `t5x_mt.kernels.attention`.

  Rows whose every key is masked (padding queries) return exact zeros with zero gradients:
  masking uses a finite minimum rather than -inf, so such a row's softmax is uniform and
  finite before it is zeroed.
  """
  del interpret  # Only meaningful for Pallas kernels.
  batch, q_length, _, head_dim = q.shape
  kv_length = k.shape[1]
  mask = attention_mask(q_segment_ids, kv_segment_ids, batch, q_length, kv_length, causal)
  mask = mask[:, None, :, :]  # [batch, 1 (heads), q_length, kv_length]

  logits = jnp.einsum('bqhd,bkhd->bhqk', q, k, preferred_element_type=jnp.float32)
  logits = logits * (1.0 / jnp.sqrt(jnp.float32(head_dim)))
  if bias is not None:
    logits = logits + bias.astype(jnp.float32)
  probs = _masked_softmax(logits, mask)

  if dropout_rate > 0.0 and dropout_rng is not None:
    keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_rate, probs.shape)
    probs = jnp.where(keep, probs / (1.0 - dropout_rate), 0.0)

  out = jnp.einsum('bhqk,bkhd->bqhd', probs.astype(v.dtype), v)
  if relative_values is not None:
    out = out + relative_value_term(probs, *relative_values).transpose(0, 2, 1, 3)
  return out.astype(q.dtype)


def relative_value_term(probs: Array, table: Array, ids: Array) -> Array:
  """Shaw's sum over keys of p_ij a_ij [batch, heads, Lq, head_dim]: the attention
  probabilities [batch, heads, Lq, Lk] gathered per table row (`ids` [B or 1, Lq, Lk]
  name each pair's row) and multiplied by the table [rows, head_dim]."""
  rows = jax.nn.one_hot(ids, table.shape[0], dtype=probs.dtype)
  per_row = jnp.einsum('bhqk,bqkr->bhqr', probs, jnp.broadcast_to(
      rows, (probs.shape[0],) + rows.shape[1:]))
  return jnp.einsum('bhqr,rd->bhqd', per_row, table.astype(jnp.float32))


def decoding_step_attention(q: Array, key_cache: Array, value_cache: Array,
                            kv_valid: Array, *, bias: Optional[Array] = None,
                            relative_values: Optional[tuple[Array, Array]] = None) -> Array:
  """Attention of one decoding step's queries to a cache kept in matmul layout.

  A decoding step runs at every generated token over a cache that grows with the output,
  so the cache is stored the way the two products read it: keys as [batch, heads,
  head_dim, kv_length] and values as [batch, heads, kv_length, head_dim]. Then neither
  product transposes the cache, which in the [batch, length, heads, head_dim] layout of
  `xla_attention` costs a copy of every layer's whole cache at every step.

  Args:
    q: queries [batch, n, heads, head_dim]: n hypotheses (beams) of a cache row, each
      with one query position.
    key_cache: [batch, heads, head_dim, kv_length].
    value_cache: [batch, heads, kv_length, head_dim].
    kv_valid: bool [batch, kv_length], the keys the queries may attend to, or [batch, n,
      kv_length], each query's own.
    bias: optional float32 [batch, heads, n, kv_length] added to the scaled logits.
    relative_values: optional (table [rows, head_dim], ids [1, 1, kv_length]): each
      entry's row of Shaw's value table, weighted by its probability.

  Returns:
    [batch, n, heads, head_dim] in q's dtype, as `xla_attention` computes it.
  """
  head_dim = q.shape[-1]
  # Both products as [n, .] x [., .] per (batch, head), queries and output moved to
  # [batch, heads, n, head_dim] outside them: written with n between batch and heads in an
  # operand or the output, XLA:CPU makes them batched matrix-vector products, several
  # times slower for the step's cross-attention (n = beams; bench/README.md, decode).
  logits = jnp.einsum('bhnd,bhdk->bhnk', q.transpose(0, 2, 1, 3), key_cache,
                      preferred_element_type=jnp.float32)
  logits = logits * (1.0 / jnp.sqrt(jnp.float32(head_dim)))
  if bias is not None:
    logits = logits + bias
  mask = kv_valid[:, None, None, :] if kv_valid.ndim == 2 else kv_valid[:, None]
  probs = _masked_softmax(logits, mask)
  out = jnp.einsum('bhnk,bhkd->bhnd', probs.astype(value_cache.dtype), value_cache)
  if relative_values is not None:
    out = out + relative_value_term(probs, *relative_values)
  return out.transpose(0, 2, 1, 3).astype(q.dtype)
