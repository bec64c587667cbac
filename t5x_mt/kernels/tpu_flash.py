"""Flash attention on TPUs: JAX's Pallas TPU kernel, lowered through Mosaic, under the
contract of `t5x_mt.kernels.attention`.

JAX ships a FlashAttention-2 kernel for TPUs (`jax.experimental.pallas.ops.tpu.
flash_attention`) that takes segment ids for queries and keys separately (packed
cross-attention), causal masking, and an additive bias with its gradient (relative
positions). It is maintained with Mosaic, so this module adapts it rather than keeping a
second TPU kernel. Where it differs from the project's contract, the wrapper bridges it:
- It adds the bias before it scales the logits, (q k^T + bias) * scale, where the contract
  is q k^T * scale + bias: the bias goes in divided by the scale, which is exact up to one
  float32 rounding and keeps the queries unrounded in bfloat16.
- Segment id 0 is an ordinary id to it, so padding queries attend to padding keys, and a
  query that sees no key gets the mean of the values (its masked scores are all equal).
  The contract gives such queries zeros: their outputs are zeroed here, which also zeroes
  every gradient that flows back through them.
- It takes heads-first arrays, a bias of the full [B, H, Lq, Lk] shape and lengths in
  whole blocks: lengths are padded with segment id 0.

Block sizes follow Mosaic's tiling rule, that the last two dimensions of every block are
multiples of (8, 128) or the whole array: lengths are padded to a multiple of 128, and each
block is the largest of 512, 256 and 128 that divides the padded length. 512 is what
MaxText's TPU flash attention defaults to; a [512, 512] float32 bias or score tile is 1 MiB,
well inside the scoped VMEM every TPU generation gives a kernel by default.
"""

from typing import Optional

import jax
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas.ops.tpu import flash_attention as jax_tpu_flash
import jax.numpy as jnp

from t5x_mt.kernels.flash import full_bias
from t5x_mt.kernels.flash import pad_axis
from t5x_mt.kernels.flash import round_up

Array = jax.Array

LANES = 128  # Mosaic's lane width: the unit every padded length and block is a multiple of.
BLOCK_CHOICES = (512, 256, 128)


def tpu_block(length: int) -> int:
  """The block along a sequence of `length`: the largest of BLOCK_CHOICES that divides the
  length padded to a whole number of lanes, so padding never exceeds 127 positions."""
  padded = round_up(length, LANES)
  return next(block for block in BLOCK_CHOICES if padded % block == 0)


def block_sizes(q_length: int, kv_length: int) -> jax_tpu_flash.BlockSizes:
  """Forward and backward blocks of JAX's kernel for these lengths (`tpu_block`)."""
  block_q, block_k = tpu_block(q_length), tpu_block(kv_length)
  return jax_tpu_flash.BlockSizes(
      block_q=block_q, block_k_major=block_k, block_k=block_k, block_b=1,
      block_q_major_dkv=block_q, block_k_major_dkv=block_k, block_k_dkv=block_k,
      block_q_dkv=block_q, block_k_major_dq=block_k, block_k_dq=block_k, block_q_dq=block_q)


def queries_with_a_key(q_segment_ids: Array, kv_segment_ids: Array, causal: bool) -> Array:
  """bool [batch, q_length]: the queries that may attend to at least one key.

  A query needs a nonzero segment id that some key carries, and under causal masking at an
  index not after its own. Sorting the keys' ids keeps this O(L log L) rather than building
  the [Lq, Lk] mask the kernel exists to avoid.
  """
  batch, kv_length = kv_segment_ids.shape
  positions = jnp.broadcast_to(jnp.arange(kv_length, dtype=jnp.int32), (batch, kv_length))
  sorted_ids, first_positions = jax.lax.sort((kv_segment_ids, positions), dimension=1,
                                             is_stable=True, num_keys=1)
  found_at = jax.vmap(jnp.searchsorted)(sorted_ids, q_segment_ids)
  found_at = jnp.minimum(found_at, kv_length - 1)
  present = jnp.take_along_axis(sorted_ids, found_at, axis=1) == q_segment_ids
  visible = present & (q_segment_ids != 0)
  if causal:
    first = jnp.take_along_axis(first_positions, found_at, axis=1)
    visible = visible & (first <= jnp.arange(q_segment_ids.shape[1], dtype=jnp.int32))
  return visible


def _interpreted(call):
  """`call` traced in Pallas' TPU interpreter, its backward pass too (which JAX traces only
  when the gradient is taken, outside any context entered around the forward call)."""
  @jax.custom_vjp
  def run(*operands):
    with pltpu.force_tpu_interpret_mode():
      return call(*operands)

  def forward(*operands):
    with pltpu.force_tpu_interpret_mode():
      return jax.vjp(call, *operands)

  def backward(pullback, cotangent):
    with pltpu.force_tpu_interpret_mode():
      return pullback(cotangent)

  run.defvjp(forward, backward)
  return run


def tpu_flash_attention(q: Array, k: Array, v: Array, *,
                        q_segment_ids: Optional[Array] = None,
                        kv_segment_ids: Optional[Array] = None,
                        bias: Optional[Array] = None,
                        causal: bool = False,
                        interpret: bool = False) -> Array:
  """Masked softmax(q k^T / sqrt(d) + bias) v, as `t5x_mt.kernels.attention` defines it.

  Args:
    q, k, v: [batch, length, heads, head_dim]; the key/value length may differ.
    q_segment_ids, kv_segment_ids: int [batch, length]; 0 is padding; None: all ones.
    bias: float bias broadcastable to [batch, heads, q_length, kv_length].
    causal: keys at a later array index than the query are masked.
    interpret: run Mosaic's kernel in Pallas' TPU interpreter (CPU tests).

  Returns:
    [batch, q_length, heads, head_dim] in q's dtype; queries without a visible key give 0.
  """
  batch, q_length, _, head_dim = q.shape
  kv_length = k.shape[1]
  scale = 1.0 / float(head_dim) ** 0.5
  blocks = block_sizes(q_length, kv_length)
  q_padded, kv_padded = round_up(q_length, LANES), round_up(kv_length, LANES)
  q_ids = (jnp.ones((batch, q_length), jnp.int32) if q_segment_ids is None
           else q_segment_ids.astype(jnp.int32))
  kv_ids = (jnp.ones((batch, kv_length), jnp.int32) if kv_segment_ids is None
            else kv_segment_ids.astype(jnp.int32))

  def heads_first(x, length):  # [B, L, H, D] -> [B, H, L_padded, D]
    return jnp.transpose(pad_axis(x, 1, length), (0, 2, 1, 3))

  operands = [heads_first(q, q_padded), heads_first(k, kv_padded), heads_first(v, kv_padded)]
  if bias is not None:
    bias = full_bias(bias.astype(jnp.float32) / scale, q_length, kv_length)
    bias = jnp.broadcast_to(bias, (batch, q.shape[2], q_length, kv_length))
    operands.append(pad_axis(pad_axis(bias, 2, q_padded), 3, kv_padded))
  masked = (q_segment_ids is not None or kv_segment_ids is not None
            or (q_padded, kv_padded) != (q_length, kv_length))
  if masked:
    operands += [pad_axis(q_ids, 1, q_padded), pad_axis(kv_ids, 1, kv_padded)]
  has_bias = bias is not None

  def kernel(*arrays):
    q_, k_, v_ = arrays[:3]
    rest = list(arrays[3:])
    bias_ = rest.pop(0) if has_bias else None
    segments = jax_tpu_flash.SegmentIds(*rest) if masked else None
    return jax_tpu_flash.flash_attention(q_, k_, v_, bias_, segments, causal=causal,
                                         sm_scale=scale, block_sizes=blocks)

  out = (_interpreted(kernel) if interpret else kernel)(*operands)
  out = jnp.transpose(out, (0, 2, 1, 3))[:, :q_length]
  visible = queries_with_a_key(q_ids, kv_ids, causal)
  return jnp.where(visible[:, :, None, None], out, jnp.zeros((), out.dtype))

