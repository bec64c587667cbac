"""Attention of one decoding step to the filled part of its KV cache, in Pallas.

Beam search runs one decoding step per generated token over caches allocated at their
full size once: a self-attention cache holds max_length * slots entries (entry e is output
position e // slots of beam slot e % slots), of which the step at `cache_index` has
filled the first (cache_index + 1) * slots; a cross-attention cache holds the encoder
output, padded at its end. `decoding_step_attention`, the XLA reference, reads every entry
of both at every step. `ragged_decode_attention` computes the same attention but reads a
cache row only below its length `kv_lengths[b]`, so early steps of a long output and short
source sentences in a padded batch read what they use. The layout is the reference's
(keys [batch, heads, head_dim, kv_length], values [batch, heads, kv_length, head_dim]),
so no cache is copied or transposed on the way in.

Two variants of one algorithm (an online softmax over key blocks, as FlashAttention's),
picked by `target`:
- 'tpu' (Mosaic): the grid runs over (batch, head, key block). Pallas' pipeline copies a
  block into VMEM only when its block index changes from the previous grid step, and the
  index maps read the row lengths (scalar prefetch) and clamp the block index to the row's
  last filled block: the steps past it name that block again, so nothing past it is
  copied, and `pl.when` skips their compute. Mosaic tiles the last two dimensions of a
  block by (8, 128), so each block's last two dimensions are multiples of those or the
  whole array's: a key block is a multiple of 128 entries, or the whole cache when it is
  shorter. A cache whose length is not a multiple of the block ends in a partial block,
  whose entries past the array are unspecified; they lie past every row's length, which
  masks their scores and zeroes their values, so the cache is never padded (a copy of it
  at every step).
- 'gpu' (Triton): the grid runs over (batch, head); each program loops over the key
  blocks below its row's length (a dynamic trip count) with loads masked by the length,
  so no entry past it is loaded. Triton's blocks are powers of two, at least 16 for its
  dots: the queries and, where not already one, head_dim are padded to one; the validity
  and bias, as long as the cache, are loaded in blocks of the padded rows with the rows
  past n masked out rather than padded (a copy of them at every step).

Shaw's relative value tables (`decoding_step_attention`'s `relative_values`) are not
taken: their term needs the probabilities themselves, which an online softmax never holds.
"""

import functools
from typing import Optional

import jax
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as plgpu
import jax.numpy as jnp

from t5x_mt.kernels.flash import MIN_BLOCK
from t5x_mt.kernels.flash import block_size
from t5x_mt.kernels.flash import pad_axis
from t5x_mt.kernels.tpu_flash import LANES

Array = jax.Array

TARGETS = ('tpu', 'gpu')
# Key block per target: a TPU grid step costs a fixed overhead, so its blocks are longer.
DEFAULT_BLOCK_K = {'tpu': 512, 'gpu': 128}
# Triton's warps per program and software-pipelining stages of the key/value loads.
GPU_COMPILER_OPTIONS = {'num_warps': 4, 'num_stages': 2}
# Masked scores: finite, so a row with no valid key gives exp(0) * 0 rather than NaN.
_MASKED = -1e30


def kv_lengths_from_valid(kv_valid: Array) -> Array:
  """int32 [batch]: one past the last valid entry of each cache row (0 for none), over
  all the row's hypotheses, for `kv_valid` bool [batch, kv_length] or [batch, n,
  kv_length]. Entries from there on are invalid for every query of the row, so the
  kernels need not read them."""
  valid = kv_valid if kv_valid.ndim == 2 else kv_valid.any(axis=1)
  ends = jnp.arange(1, valid.shape[-1] + 1, dtype=jnp.int32)
  return jnp.max(jnp.where(valid, ends, 0), axis=-1)


def _block_update(carry: tuple[Array, Array, Array], q: Array, k: Array, v: Array,
                  allowed: Array, bias: Optional[Array],
                  scale: float) -> tuple[Array, Array, Array]:
  """One key block's step of the online softmax: (accumulated values [n, head_dim],
  running max [n, 1], running sum [n, 1]) after the keys `k` [head_dim, block] and values
  `v` [block, head_dim] of which `allowed` [n, block] names the queries' visible ones."""
  acc, row_max, row_sum = carry
  scores = jnp.dot(q, k, preferred_element_type=jnp.float32) * scale
  if bias is not None:
    scores = scores + bias.astype(jnp.float32)
  scores = jnp.where(allowed, scores, _MASKED)
  new_max = jnp.maximum(row_max, scores.max(axis=-1, keepdims=True))
  probs = jnp.where(allowed, jnp.exp(scores - new_max), 0.0)
  rescale = jnp.exp(row_max - new_max)
  acc = acc * rescale + jnp.dot(probs.astype(v.dtype), v, preferred_element_type=jnp.float32)
  return acc, new_max, row_sum * rescale + probs.sum(axis=-1, keepdims=True)


def _normalised(acc: Array, row_sum: Array) -> Array:
  """The attention output from the accumulated state; rows with no visible key give 0."""
  seen = row_sum > 0.0
  return jnp.where(seen, acc / jnp.where(seen, row_sum, 1.0), 0.0)


def _initial_state(rows: int, head_dim: int) -> tuple[Array, Array, Array]:
  return (jnp.zeros((rows, head_dim), jnp.float32), jnp.full((rows, 1), _MASKED, jnp.float32),
          jnp.zeros((rows, 1), jnp.float32))


def _tpu_kernel(lengths_ref, q_ref, k_ref, v_ref, valid_ref, *refs, scale: float,
                block_k: int, has_bias: bool):
  if has_bias:
    bias_ref, o_ref, acc_ref, max_ref, sum_ref = refs
  else:
    (o_ref, acc_ref, max_ref, sum_ref), bias_ref = refs, None
  kv_block = pl.program_id(2)
  length = lengths_ref[pl.program_id(0)]
  state_refs = (acc_ref, max_ref, sum_ref)

  @pl.when(kv_block == 0)
  def _start():
    for ref, value in zip(state_refs, _initial_state(*acc_ref.shape)):
      ref[...] = value

  @pl.when(kv_block * block_k < length)
  def _visit():
    first = kv_block * block_k
    key_inside = first + lax.broadcasted_iota(jnp.int32, (1, block_k), 1) < length
    value_inside = first + lax.broadcasted_iota(jnp.int32, v_ref.shape, 0) < length
    allowed = jnp.broadcast_to((valid_ref[...] != 0) & key_inside,
                               (q_ref.shape[0], block_k))
    v = jnp.where(value_inside, v_ref[...], jnp.zeros((), v_ref.dtype))
    bias = None if bias_ref is None else bias_ref[...]
    state = _block_update(tuple(ref[...] for ref in state_refs), q_ref[...], k_ref[...], v,
                          allowed, bias, scale)
    for ref, value in zip(state_refs, state):
      ref[...] = value

  @pl.when(kv_block == pl.num_programs(2) - 1)
  def _finish():
    o_ref[...] = _normalised(acc_ref[...], sum_ref[...]).astype(o_ref.dtype)


def _tpu_block_k(kv_length: int, requested: int) -> int:
  if requested % LANES:
    raise ValueError(f'block_k {requested} for TPUs: a multiple of {LANES} (Mosaic '
                     'tiles the lane dimension by 128)')
  return kv_length if kv_length <= requested else requested


def _tpu_attention(q: Array, key_cache: Array, value_cache: Array, valid: Array,
                   kv_lengths: Array, bias: Optional[Array], scale: float, block_k: int,
                   interpret: bool) -> Array:
  """[batch, heads, n, head_dim] from queries in the same layout, through Mosaic."""
  batch, heads, n, head_dim = q.shape
  kv_length = key_cache.shape[-1]
  block_k = _tpu_block_k(kv_length, block_k)

  def filled(kv_block, b, lengths):
    """The block a grid step copies: its own, or past the row's last filled block that
    one again, which the pipeline then does not copy anew."""
    last = jnp.maximum(lax.div(lengths[b] + block_k - 1, block_k) - 1, 0)
    return jnp.minimum(kv_block, last)

  per_head = lambda b, h, j, lengths: (b, h, 0, 0)
  in_specs = [
      pl.BlockSpec((None, None, n, head_dim), per_head),
      pl.BlockSpec((None, None, head_dim, block_k),
                   lambda b, h, j, lengths: (b, h, 0, filled(j, b, lengths))),
      pl.BlockSpec((None, None, block_k, head_dim),
                   lambda b, h, j, lengths: (b, h, filled(j, b, lengths), 0)),
      pl.BlockSpec((None, valid.shape[1], block_k),
                   lambda b, h, j, lengths: (b, 0, filled(j, b, lengths))),
  ]
  if bias is not None:
    in_specs.append(pl.BlockSpec((None, None, n, block_k),
                                 lambda b, h, j, lengths: (b, h, 0, filled(j, b, lengths))))
  grid_spec = pltpu.PrefetchScalarGridSpec(
      num_scalar_prefetch=1, grid=(batch, heads, pl.cdiv(kv_length, block_k)),
      in_specs=in_specs, out_specs=pl.BlockSpec((None, None, n, head_dim), per_head),
      scratch_shapes=[pltpu.VMEM((n, head_dim), jnp.float32),
                      pltpu.VMEM((n, 1), jnp.float32), pltpu.VMEM((n, 1), jnp.float32)])
  kernel = functools.partial(_tpu_kernel, scale=scale, block_k=block_k,
                             has_bias=bias is not None)
  return pl.pallas_call(
      kernel, grid_spec=grid_spec, out_shape=jax.ShapeDtypeStruct(q.shape, q.dtype),
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=('parallel', 'parallel', 'arbitrary')),
      interpret=pltpu.InterpretParams() if interpret else False,
      name='ragged_decode_attention_tpu',
  )(kv_lengths, q, key_cache, value_cache, valid, *([] if bias is None else [bias]))


def _gpu_kernel(length_ref, q_ref, k_ref, v_ref, valid_ref, *refs, scale: float,
                block_k: int, hypotheses: int, has_bias: bool):
  if has_bias:
    bias_ref, o_ref = refs
  else:
    (o_ref,), bias_ref = refs, None
  length = length_ref[()]
  q = q_ref[...]
  # The validity and bias blocks span q's padded rows; their arrays, only the hypotheses'.
  real_rows = (jnp.arange(q.shape[0], dtype=jnp.int32) < hypotheses)[:, None]

  def visit(kv_block, state):
    entries = pl.ds(kv_block * block_k, block_k)
    inside = kv_block * block_k + jnp.arange(block_k, dtype=jnp.int32) < length
    load = lambda ref, where: plgpu.load(ref, mask=where, other=0)
    k = load(k_ref.at[:, entries], inside[None, :])
    v = load(v_ref.at[entries, :], inside[:, None])
    valid_rows = real_rows if valid_ref.shape[0] > 1 else True
    valid = load(valid_ref.at[:, entries], valid_rows & inside[None, :])
    bias = (None if bias_ref is None
            else load(bias_ref.at[:, entries], real_rows & inside[None, :]))
    allowed = jnp.broadcast_to((valid != 0) & inside[None, :], (q.shape[0], block_k))
    return _block_update(state, q, k, v, allowed, bias, scale)

  acc, _, row_sum = lax.fori_loop(0, pl.cdiv(length, block_k), visit,
                                  _initial_state(*q.shape))
  o_ref[...] = _normalised(acc, row_sum).astype(o_ref.dtype)


def _gpu_attention(q: Array, key_cache: Array, value_cache: Array, valid: Array,
                   kv_lengths: Array, bias: Optional[Array], scale: float, block_k: int,
                   interpret: bool) -> Array:
  """[batch, heads, n, head_dim] from queries in the same layout, through Triton."""
  batch, heads, n, head_dim = q.shape
  kv_length = key_cache.shape[-1]
  block_k = block_size(kv_length, block_k)
  rows = max(MIN_BLOCK, pl.next_power_of_2(n))
  dim = max(MIN_BLOCK, pl.next_power_of_2(head_dim))
  q = pad_axis(pad_axis(q, 2, rows), 3, dim)
  key_cache = pad_axis(key_cache, 2, dim)
  value_cache = pad_axis(value_cache, 3, dim)

  whole_row = lambda *shape: pl.BlockSpec((None, None) + shape, lambda b, h: (b, h, 0, 0))
  valid_rows = rows if valid.shape[1] > 1 else 1
  in_specs = [pl.BlockSpec((None,), lambda b, h: (b,)), whole_row(rows, dim),
              whole_row(dim, kv_length), whole_row(kv_length, dim),
              pl.BlockSpec((None, valid_rows, kv_length), lambda b, h: (b, 0, 0))]
  operands = [kv_lengths, q, key_cache, value_cache, valid]
  if bias is not None:
    in_specs.append(whole_row(rows, kv_length))
    operands.append(bias)
  kernel = functools.partial(_gpu_kernel, scale=scale, block_k=block_k, hypotheses=n,
                             has_bias=bias is not None)
  out = pl.pallas_call(
      kernel, grid=(batch, heads), in_specs=in_specs, out_specs=whole_row(rows, dim),
      out_shape=jax.ShapeDtypeStruct((batch, heads, rows, dim), q.dtype),
      compiler_params=plgpu.CompilerParams(**GPU_COMPILER_OPTIONS),
      interpret=interpret, name='ragged_decode_attention_gpu',
  )(*operands)
  return out[:, :, :n, :head_dim]


def ragged_decode_attention(q: Array, key_cache: Array, value_cache: Array,
                            kv_valid: Array, kv_lengths: Array, *,
                            bias: Optional[Array] = None, target: str,
                            interpret: bool = False,
                            block_k: Optional[int] = None) -> Array:
  """`decoding_step_attention` that reads each cache row only below its length.

  Args:
    q: queries [batch, n, heads, head_dim]: n hypotheses (beams) of a cache row, each
      with one query position.
    key_cache: [batch, heads, head_dim, kv_length].
    value_cache: [batch, heads, kv_length, head_dim].
    kv_valid: bool [batch, kv_length] or [batch, 1, kv_length], the keys the row's queries
      may attend to, or [batch, n, kv_length], each query's own.
    kv_lengths: int32 [batch]: cache entries from kv_lengths[b] on are never read; the
      caller guarantees kv_valid is False there (`kv_lengths_from_valid` derives them).
    bias: optional float32 [batch, heads, n, kv_length] added to the scaled logits.
    target: 'tpu' (Mosaic) or 'gpu' (Triton), the kernel variant.
    interpret: run the variant in Pallas' interpreter (CPU tests): the TPU interpreter
      for 'tpu', the generic one for 'gpu'.
    block_k: cache entries per key block; by default `DEFAULT_BLOCK_K[target]`. On TPUs
      a multiple of 128; on GPUs a power of two, at least 16.

  Returns:
    [batch, n, heads, head_dim] in q's dtype, as `decoding_step_attention` computes it
    (softmax in float32; queries with no valid key give zeros).
  """
  if target not in TARGETS:
    raise ValueError(f'unknown target {target!r}; valid: {", ".join(TARGETS)}')
  kv_length = key_cache.shape[-1]
  valid = kv_valid[:, None, :] if kv_valid.ndim == 2 else kv_valid
  # The length bounds the block a kernel names: past the cache would be out of bounds.
  kv_lengths = jnp.clip(kv_lengths.astype(jnp.int32), 0, kv_length)
  attention = _tpu_attention if target == 'tpu' else _gpu_attention
  out = attention(q.transpose(0, 2, 1, 3), key_cache, value_cache, valid.astype(jnp.int32),
                  kv_lengths, bias, 1.0 / float(q.shape[-1]) ** 0.5,
                  block_k or DEFAULT_BLOCK_K[target], interpret)
  return out.transpose(0, 2, 1, 3)
