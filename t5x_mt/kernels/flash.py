"""Flash attention in Pallas, forward and backward, for packed encoder-decoder batches.

What it adds to the kernels JAX ships: queries and keys carry *separate* segment ids, so
packed cross-attention (decoder segments attending to the encoder segments of the same
pair, with different lengths on the two sides) is one kernel call; segment id 0 is padding
on either side and never attends or is attended to; an additive bias (relative positions)
with its gradient; causal masking by array index, as `xla_attention`.

Algorithm (FlashAttention-2): the grid runs over (batch, head, query block); each program
keeps its query block and loops over key/value blocks with an online softmax, never
holding more than one [block_q, block_k] score tile. The forward pass saves only the
output and the per-query log-sum-exp; the backward pass recomputes the scores, one kernel
for dK/dV (grid over key blocks, loop over query blocks) and one for dQ and dBias (grid over
query blocks, loop over key blocks), so neither writes to memory another program reads.
Causal calls skip the tiles above the diagonal.

Any shape runs: lengths are padded to whole blocks with segment id 0, and head_dim to a
power of two (at least 16, what GPU tensor-core dots need) with zeros, which change no dot
product. The kernel body uses only array operations: it lowers through Pallas' Triton
backend for GPUs (tests check the lowering from a CPU host) and runs in the interpreter
(`interpret=True`, the CPU tests). TPUs run JAX's Mosaic kernel instead (`tpu_flash`).
"""

import functools
from typing import Optional

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

Array = jax.Array

# Masked scores: finite, so a query with no visible key gives exp(0) * 0 rather than NaN.
_MASKED = -1e30
DEFAULT_BLOCK = 128
MIN_BLOCK = 16


def pad_axis(x: Array, axis: int, size: int) -> Array:
  if x.shape[axis] == size:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, widths)


def round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def block_size(length: int, requested: int = DEFAULT_BLOCK) -> int:
  """The block for a sequence of `length`: `requested`, or for short sequences the
  smallest power of two (at least 16) that covers the sequence."""
  return min(requested, max(MIN_BLOCK, pl.next_power_of_2(length)))


def _compiler_params():
  """Triton's options (the interpreter ignores them; TPUs run `tpu_flash` instead)."""
  from jax.experimental.pallas import triton as pltriton  # pylint: disable=g-import-not-at-top
  return pltriton.CompilerParams(num_warps=4, num_stages=2)


def _tile_mask(q_segments: Array, kv_segments: Array, q_start: Array, kv_start: Array,
               causal: bool) -> Array:
  """[block_q, block_k]: equal nonzero segment ids, and for causal key index <= query's."""
  mask = (q_segments[:, None] == kv_segments[None, :]) & (q_segments[:, None] != 0)
  if causal:
    shape = (q_segments.shape[0], kv_segments.shape[0])
    q_index = q_start + jax.lax.broadcasted_iota(jnp.int32, shape, 0)
    kv_index = kv_start + jax.lax.broadcasted_iota(jnp.int32, shape, 1)
    mask = mask & (kv_index <= q_index)
  return mask


def _tile_scores(q: Array, k: Array, bias_tile: Optional[Array], scale: float) -> Array:
  scores = jnp.dot(q, k.T, preferred_element_type=jnp.float32) * scale
  return scores if bias_tile is None else scores + bias_tile.astype(jnp.float32)


def _kv_blocks_for(q_block: Array, block_q: int, block_k: int, num_kv_blocks: int,
                   causal: bool) -> Array:
  """Key blocks a query block sees: all, or under causal masking up to its diagonal."""
  if not causal:
    return num_kv_blocks
  last_query = (q_block + 1) * block_q
  return jnp.minimum(num_kv_blocks, jax.lax.div(last_query + block_k - 1, block_k))


def _forward_kernel(*refs, scale: float, causal: bool, has_bias: bool, block_k: int):
  if has_bias:
    q_ref, k_ref, v_ref, q_seg_ref, kv_seg_ref, bias_ref, o_ref, lse_ref = refs
  else:
    q_ref, k_ref, v_ref, q_seg_ref, kv_seg_ref, o_ref, lse_ref = refs
    bias_ref = None
  q_block = pl.program_id(2)
  q = q_ref[...]
  q_segments = q_seg_ref[...]
  block_q, head_dim = q.shape
  num_kv_blocks = k_ref.shape[0] // block_k

  def visit(kv_block, carry):
    acc, row_max, row_sum = carry
    kv = pl.ds(kv_block * block_k, block_k)
    bias_tile = None if bias_ref is None else bias_ref[:, kv]
    scores = _tile_scores(q, k_ref[kv, :], bias_tile, scale)
    mask = _tile_mask(q_segments, kv_seg_ref[kv], q_block * block_q, kv_block * block_k,
                      causal)
    scores = jnp.where(mask, scores, _MASKED)
    new_max = jnp.maximum(row_max, scores.max(axis=-1))
    probs = jnp.where(mask, jnp.exp(scores - new_max[:, None]), 0.0)
    rescale = jnp.exp(row_max - new_max)
    v = v_ref[kv, :]
    acc = acc * rescale[:, None] + jnp.dot(probs.astype(v.dtype), v,
                                           preferred_element_type=jnp.float32)
    return acc, new_max, row_sum * rescale + probs.sum(axis=-1)

  init = (jnp.zeros((block_q, head_dim), jnp.float32),
          jnp.full((block_q,), _MASKED, jnp.float32), jnp.zeros((block_q,), jnp.float32))
  upper = _kv_blocks_for(q_block, block_q, block_k, num_kv_blocks, causal)
  acc, row_max, row_sum = jax.lax.fori_loop(0, upper, visit, init)
  seen = row_sum > 0.0
  safe_sum = jnp.where(seen, row_sum, 1.0)
  o_ref[...] = jnp.where(seen[:, None], acc / safe_sum[:, None], 0.0).astype(o_ref.dtype)
  lse_ref[...] = jnp.where(seen, row_max + jnp.log(safe_sum), 0.0)


def _tile_probs_and_grad(q, k, v, do, lse, delta, q_segments, kv_segments, bias_tile,
                         q_start, kv_start, scale, causal):
  """Recomputed probabilities and d(loss)/d(scores) of one [block_q, block_k] tile."""
  scores = _tile_scores(q, k, bias_tile, scale)
  mask = _tile_mask(q_segments, kv_segments, q_start, kv_start, causal)
  probs = jnp.where(mask, jnp.exp(scores - lse[:, None]), 0.0)
  dprobs = jnp.dot(do, v.T, preferred_element_type=jnp.float32)
  return probs, probs * (dprobs - delta[:, None])


def _dkdv_kernel(*refs, scale: float, causal: bool, has_bias: bool, block_q: int):
  if has_bias:
    (q_ref, k_ref, v_ref, q_seg_ref, kv_seg_ref, bias_ref, do_ref, lse_ref, delta_ref,
     dk_ref, dv_ref) = refs
  else:
    (q_ref, k_ref, v_ref, q_seg_ref, kv_seg_ref, do_ref, lse_ref, delta_ref,
     dk_ref, dv_ref) = refs
    bias_ref = None
  kv_block = pl.program_id(2)
  k = k_ref[...]
  v = v_ref[...]
  kv_segments = kv_seg_ref[...]
  block_k, head_dim = k.shape
  num_q_blocks = q_ref.shape[0] // block_q

  def visit(q_block, carry):
    dk, dv = carry
    rows = pl.ds(q_block * block_q, block_q)
    q = q_ref[rows, :]
    do = do_ref[rows, :]
    bias_tile = None if bias_ref is None else bias_ref[rows, :]
    probs, dscores = _tile_probs_and_grad(
        q, k, v, do, lse_ref[rows], delta_ref[rows], q_seg_ref[rows], kv_segments,
        bias_tile, q_block * block_q, kv_block * block_k, scale, causal)
    dv = dv + jnp.dot(probs.T.astype(do.dtype), do, preferred_element_type=jnp.float32)
    dk = dk + jnp.dot(dscores.T.astype(q.dtype), q, preferred_element_type=jnp.float32) * scale
    return dk, dv

  lower = jax.lax.div(kv_block * block_k, block_q) if causal else 0
  zeros = jnp.zeros((block_k, head_dim), jnp.float32)
  dk, dv = jax.lax.fori_loop(lower, num_q_blocks, visit, (zeros, zeros))
  dk_ref[...] = dk.astype(dk_ref.dtype)
  dv_ref[...] = dv.astype(dv_ref.dtype)


def _dq_kernel(*refs, scale: float, causal: bool, has_bias: bool, block_k: int):
  if has_bias:
    (q_ref, k_ref, v_ref, q_seg_ref, kv_seg_ref, bias_ref, do_ref, lse_ref, delta_ref,
     dq_ref, dbias_ref) = refs
  else:
    (q_ref, k_ref, v_ref, q_seg_ref, kv_seg_ref, do_ref, lse_ref, delta_ref, dq_ref) = refs
    bias_ref = dbias_ref = None
  q_block = pl.program_id(2)
  q = q_ref[...]
  do = do_ref[...]
  lse = lse_ref[...]
  delta = delta_ref[...]
  q_segments = q_seg_ref[...]
  block_q, head_dim = q.shape
  num_kv_blocks = k_ref.shape[0] // block_k
  if dbias_ref is not None:  # Tiles the causal loop skips are masked: zero gradient.
    dbias_ref[...] = jnp.zeros(dbias_ref.shape, dbias_ref.dtype)

  def visit(kv_block, dq):
    kv = pl.ds(kv_block * block_k, block_k)
    k = k_ref[kv, :]
    bias_tile = None if bias_ref is None else bias_ref[:, kv]
    _, dscores = _tile_probs_and_grad(
        q, k, v_ref[kv, :], do, lse, delta, q_segments, kv_seg_ref[kv], bias_tile,
        q_block * block_q, kv_block * block_k, scale, causal)
    if dbias_ref is not None:
      dbias_ref[:, kv] = dscores.astype(dbias_ref.dtype)
    return dq + jnp.dot(dscores.astype(k.dtype), k, preferred_element_type=jnp.float32) * scale

  upper = _kv_blocks_for(q_block, block_q, block_k, num_kv_blocks, causal)
  dq = jax.lax.fori_loop(0, upper, visit, jnp.zeros((block_q, head_dim), jnp.float32))
  dq_ref[...] = dq.astype(dq_ref.dtype)


def _specs(q_length: int, kv_length: int, head_dim: int,
           bias_shape: Optional[tuple[int, ...]], block_q: int, block_k: int, grid_over: str):
  """BlockSpecs for a grid over (batch, head, query block) or (batch, head, key block):
  those of the inputs (q, k, v, q_segments, kv_segments[, bias]), then those of [B, H, Lq, D]
  query rows, [B, H, Lk, D] key rows and [B, H, Lq] per-query vectors."""
  def bias_batch_head(b, h):  # A bias broadcast over batch or heads has one copy to read.
    return (b if bias_shape[0] > 1 else 0, h if bias_shape[1] > 1 else 0)

  if grid_over == 'q':
    q_rows = pl.BlockSpec((None, None, block_q, head_dim), lambda b, h, i: (b, h, i, 0))
    kv_rows = pl.BlockSpec((None, None, kv_length, head_dim), lambda b, h, i: (b, h, 0, 0))
    q_vector = pl.BlockSpec((None, None, block_q), lambda b, h, i: (b, h, i))
    q_segs = pl.BlockSpec((None, block_q), lambda b, h, i: (b, i))
    kv_segs = pl.BlockSpec((None, kv_length), lambda b, h, i: (b, 0))
    bias = pl.BlockSpec((None, None, block_q, kv_length),
                        lambda b, h, i: (*bias_batch_head(b, h), i, 0))
  else:
    q_rows = pl.BlockSpec((None, None, q_length, head_dim), lambda b, h, j: (b, h, 0, 0))
    kv_rows = pl.BlockSpec((None, None, block_k, head_dim), lambda b, h, j: (b, h, j, 0))
    q_vector = pl.BlockSpec((None, None, q_length), lambda b, h, j: (b, h, 0))
    q_segs = pl.BlockSpec((None, q_length), lambda b, h, j: (b, 0))
    kv_segs = pl.BlockSpec((None, block_k), lambda b, h, j: (b, j))
    bias = pl.BlockSpec((None, None, q_length, block_k),
                        lambda b, h, j: (*bias_batch_head(b, h), 0, j))
  inputs = [q_rows, kv_rows, kv_rows, q_segs, kv_segs] + ([bias] if bias_shape else [])
  return inputs, q_rows, kv_rows, q_vector


@functools.partial(jax.custom_vjp, nondiff_argnums=(6, 7, 8, 9, 10))
def _flash(q, k, v, q_segments, kv_segments, bias, causal, scale, block_q, block_k,
           interpret):
  return _flash_forward(q, k, v, q_segments, kv_segments, bias, causal, scale, block_q,
                        block_k, interpret)[0]


def _flash_forward(q, k, v, q_segments, kv_segments, bias, causal, scale, block_q, block_k,
                   interpret):
  """Padded [B, H, L, D] inputs -> (output, log-sum-exp [B, H, Lq])."""
  batch, heads, q_length, head_dim = q.shape
  kv_length = k.shape[2]
  has_bias = bias is not None
  in_specs, q_rows, _, q_vector = _specs(
      q_length, kv_length, head_dim, bias.shape if has_bias else None, block_q, block_k, 'q')
  kernel = functools.partial(_forward_kernel, scale=scale, causal=causal, has_bias=has_bias,
                             block_k=block_k)
  out, lse = pl.pallas_call(
      kernel, grid=(batch, heads, q_length // block_q), in_specs=in_specs,
      out_specs=[q_rows, q_vector],
      out_shape=[jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((batch, heads, q_length), jnp.float32)],
      compiler_params=_compiler_params(), interpret=interpret, name='flash_attention_fwd',
  )(q, k, v, q_segments, kv_segments, *([bias] if has_bias else []))
  return out, lse


def _flash_fwd_rule(q, k, v, q_segments, kv_segments, bias, causal, scale, block_q, block_k,
                    interpret):
  out, lse = _flash_forward(q, k, v, q_segments, kv_segments, bias, causal, scale, block_q,
                            block_k, interpret)
  return out, (q, k, v, q_segments, kv_segments, bias, out, lse)


def _flash_bwd_rule(causal, scale, block_q, block_k, interpret, residuals, d_out):
  q, k, v, q_segments, kv_segments, bias, out, lse = residuals
  batch, heads, q_length, head_dim = q.shape
  kv_length = k.shape[2]
  has_bias = bias is not None
  delta = jnp.sum(out.astype(jnp.float32) * d_out.astype(jnp.float32), axis=-1)
  operands = [q, k, v, q_segments, kv_segments] + ([bias] if has_bias else [])
  operands += [d_out, lse, delta]
  statics = dict(scale=scale, causal=causal, has_bias=has_bias)
  bias_shape = bias.shape if has_bias else None

  in_specs, q_rows, kv_rows, q_vector = _specs(
      q_length, kv_length, head_dim, bias_shape, block_q, block_k, 'kv')
  dk, dv = pl.pallas_call(
      functools.partial(_dkdv_kernel, block_q=block_q, **statics),
      grid=(batch, heads, kv_length // block_k),
      in_specs=in_specs + [q_rows, q_vector, q_vector], out_specs=[kv_rows, kv_rows],
      out_shape=[jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)],
      compiler_params=_compiler_params(), interpret=interpret, name='flash_attention_dkdv',
  )(*operands)

  in_specs, q_rows, _, q_vector = _specs(
      q_length, kv_length, head_dim, bias_shape, block_q, block_k, 'q')
  out_specs = [q_rows]
  out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype)]
  if has_bias:  # Per (batch, head) even where the bias is broadcast; summed below.
    out_specs.append(pl.BlockSpec((None, None, block_q, kv_length),
                                  lambda b, h, i: (b, h, i, 0)))
    out_shape.append(jax.ShapeDtypeStruct((batch, heads, q_length, kv_length), jnp.float32))
  grads = pl.pallas_call(
      functools.partial(_dq_kernel, block_k=block_k, **statics),
      grid=(batch, heads, q_length // block_q),
      in_specs=in_specs + [q_rows, q_vector, q_vector], out_specs=out_specs,
      out_shape=out_shape, compiler_params=_compiler_params(), interpret=interpret,
      name='flash_attention_dq',
  )(*operands)
  dbias = None
  if has_bias:
    broadcast_axes = tuple(axis for axis in (0, 1) if bias.shape[axis] == 1)
    dbias = grads[1].sum(axis=broadcast_axes, keepdims=True).astype(bias.dtype)
  return grads[0], dk, dv, None, None, dbias


_flash.defvjp(_flash_fwd_rule, _flash_bwd_rule)


def full_bias(bias: Array, q_length: int, kv_length: int) -> Array:
  """`bias` as [1 or B, 1 or H, Lq, Lk]: batch and head broadcasts stay (the kernel reads
  the one copy), query and key broadcasts are materialised."""
  bias = jnp.reshape(bias, (1,) * (4 - bias.ndim) + bias.shape)
  return jnp.broadcast_to(bias, (bias.shape[0], bias.shape[1], q_length, kv_length))


def flash_attention(q: Array, k: Array, v: Array, *,
                    q_segment_ids: Optional[Array] = None,
                    kv_segment_ids: Optional[Array] = None,
                    bias: Optional[Array] = None,
                    causal: bool = False,
                    block_q: int = DEFAULT_BLOCK,
                    block_k: int = DEFAULT_BLOCK,
                    interpret: bool = False) -> Array:
  """Masked softmax(q k^T / sqrt(d) + bias) v, as `t5x_mt.kernels.attention` defines it.

  Args:
    q, k, v: [batch, length, heads, head_dim]; the key/value length may differ from the
      query's.
    q_segment_ids, kv_segment_ids: int [batch, length]; 0 is padding; None: all ones.
    bias: additive float bias broadcastable to [batch, heads, q_length, kv_length].
    causal: keys at a later array index than the query are masked.
    block_q, block_k: tile sizes (powers of two, at least 16; shortened for short inputs).
    interpret: run the Pallas interpreter (any backend, CPU tests).

  Returns:
    [batch, q_length, heads, head_dim] in q's dtype; queries without a visible key give 0.
  """
  batch, q_length, _, head_dim = q.shape
  kv_length = k.shape[1]
  if q_segment_ids is None:
    q_segment_ids = jnp.ones((batch, q_length), jnp.int32)
  if kv_segment_ids is None:
    kv_segment_ids = jnp.ones((batch, kv_length), jnp.int32)
  block_q = block_size(q_length, block_q)
  block_k = block_size(kv_length, block_k)
  q_padded = round_up(q_length, block_q)
  kv_padded = round_up(kv_length, block_k)
  dim_padded = max(MIN_BLOCK, pl.next_power_of_2(head_dim))

  def heads_first(x, length):  # [B, L, H, D] -> [B, H, L_padded, D_padded]
    x = pad_axis(pad_axis(x, 1, length), 3, dim_padded)
    return jnp.transpose(x, (0, 2, 1, 3))

  if bias is not None:
    bias = full_bias(bias, q_length, kv_length)
    bias = pad_axis(pad_axis(bias, 2, q_padded), 3, kv_padded)
  out = _flash(heads_first(q, q_padded), heads_first(k, kv_padded), heads_first(v, kv_padded),
               pad_axis(q_segment_ids.astype(jnp.int32), 1, q_padded),
               pad_axis(kv_segment_ids.astype(jnp.int32), 1, kv_padded), bias, causal,
               1.0 / float(head_dim) ** 0.5, block_q, block_k, interpret)
  return jnp.transpose(out, (0, 2, 1, 3))[:, :q_length, :, :head_dim]
