"""Building blocks of the pre-LN Transformer: norms, dense layers, attention, MLP, embeddings.

Conventions shared by every module here:
- Parameters are created in `param_dtype` (float32) with logical axis names from
  `nn.with_logical_partitioning`, so `t5x_mt.partitioning` can map them onto a mesh.
- Computation runs in `dtype` (float32, or bfloat16 for speed); norms and softmax run in
  float32 whatever `dtype` is.
- Main activations carry `nn.with_logical_constraint` annotations
  ('batch', 'length', 'embed' | 'mlp' | 'heads', 'kv'); without axis rules they are no-ops.
"""

import functools
from typing import Any, Callable, Optional, Sequence

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt import kernels

Array = jax.Array
DType = Any
Initializer = Callable[..., Array]

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    'relu': nn.relu,
    'gelu': functools.partial(nn.gelu, approximate=False),
}


def _xavier_uniform(num_input_axes: int, num_output_axes: int) -> Initializer:
  """Glorot-uniform over a kernel whose leading axes are inputs and trailing axes outputs."""
  return nn.initializers.variance_scaling(
      1.0, 'fan_avg', 'uniform', in_axis=tuple(range(num_input_axes)),
      out_axis=tuple(range(num_input_axes, num_input_axes + num_output_axes)))


def normalize(x: Array, epsilon: float = 1e-6) -> Array:
  """(x - mean) / sqrt(var + epsilon) over the last axis, in float32."""
  x = x.astype(jnp.float32)
  mean = jnp.mean(x, axis=-1, keepdims=True)
  var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
  return (x - mean) * jax.lax.rsqrt(var + epsilon)


class LayerNorm(nn.Module):
  """Layer normalisation over the last axis with learned scale and bias, in float32.

  `normalized`, if given, is `normalize(x)` computed once for several LayerNorms of the
  same input (adapters): each then only applies its own scale and bias.
  """
  epsilon: float = 1e-6
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, x: Array, normalized: Optional[Array] = None) -> Array:
    features = x.shape[-1]
    y = normalize(x, self.epsilon) if normalized is None else normalized
    scale = self.param('scale', nn.with_logical_partitioning(nn.initializers.ones, ('embed',)),
                       (features,), self.param_dtype)
    bias = self.param('bias', nn.with_logical_partitioning(nn.initializers.zeros, ('embed',)),
                      (features,), self.param_dtype)
    y = y * scale.astype(jnp.float32) + bias.astype(jnp.float32)
    return y.astype(self.dtype)


class DenseGeneral(nn.Module):
  """y = x . W + b, contracting the trailing `num_input_axes` axes of x.

  `kernel_axes` names every kernel axis (inputs first, then `features`); the bias takes the
  names of the output axes.
  """
  features: Sequence[int]
  kernel_axes: Sequence[str]
  num_input_axes: int = 1
  use_bias: bool = True
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  kernel_init: Optional[Initializer] = None  # Default: Glorot-uniform.

  @nn.compact
  def __call__(self, x: Array) -> Array:
    features = tuple(self.features)
    n_in = self.num_input_axes
    kernel_shape = x.shape[x.ndim - n_in:] + features
    if len(self.kernel_axes) != len(kernel_shape):
      raise ValueError(f'kernel_axes {self.kernel_axes} do not match kernel {kernel_shape}')
    kernel = self.param(
        'kernel',
        nn.with_logical_partitioning(self.kernel_init or _xavier_uniform(n_in, len(features)),
                                     tuple(self.kernel_axes)),
        kernel_shape, self.param_dtype)
    contract = (tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in)))
    y = jax.lax.dot_general(x.astype(self.dtype), kernel.astype(self.dtype), (contract, ((), ())))
    if self.use_bias:
      bias = self.param(
          'bias',
          nn.with_logical_partitioning(nn.initializers.zeros, tuple(self.kernel_axes[n_in:])),
          features, self.param_dtype)
      y = y + bias.astype(self.dtype)
    return y


# Names of the decoding cache's keys and values: cross-attention's, projected once, and
# self-attention's, one slot per step (`network.split_fixed_cache`, `extend_decode_cache`).
FIXED_KV_CACHE = ('cached_fixed_key', 'cached_fixed_value')
STEP_KV_CACHE = ('cached_key', 'cached_value')


class MultiHeadAttention(nn.Module):
  """Multi-head attention (self or cross) with an optional autoregressive KV cache.

  With `decode=True` and `fixed_kv` (cross-attention) it caches the projected keys and
  values of `inputs_kv` once (see `_fixed_kv`). Otherwise, with `decode=True` the module
  keeps, in the 'cache' collection, `cached_key` and
  `cached_value` of shape [batch, max_length, heads, head_dim] and a scalar int32
  `cache_index`. The first call (during `init`, when the cache does not exist yet) creates
  them, with max_length = `max_decode_length` or the input length, and otherwise attends
  normally; every later call takes exactly one token, writes its key/value at `cache_index`,
  attends to positions 0..cache_index and advances the index.
  """
  num_heads: int
  head_dim: int
  dropout_rate: float = 0.0
  implementation: str = 'xla'
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  fixed_kv: bool = False  # Keys/values come from inputs fixed while decoding (cross-attention).

  def _project(self, x: Array, name: str) -> Array:
    y = DenseGeneral((self.num_heads, self.head_dim), ('embed', 'heads', 'kv'),
                     dtype=self.dtype, param_dtype=self.param_dtype, name=name)(x)
    return nn.with_logical_constraint(y, ('batch', 'length', 'heads', 'kv'))

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_kv: Array, *,
               q_segment_ids: Optional[Array] = None,
               kv_segment_ids: Optional[Array] = None,
               causal: bool = False,
               bias: Optional[Array] = None,
               decode: bool = False,
               max_decode_length: Optional[int] = None,
               deterministic: bool = True) -> Array:
    """Attends from `inputs_q` [B, Lq, E] to `inputs_kv` [B, Lk, E]; returns [B, Lq, E]."""
    query = self._project(inputs_q, 'query')
    if decode and self.fixed_kv:
      key, value = self._fixed_kv(inputs_kv)
    else:
      key = self._project(inputs_kv, 'key')
      value = self._project(inputs_kv, 'value')

    if decode and not self.fixed_kv:
      key, value, q_segment_ids, kv_segment_ids, causal = self._update_cache(
          key, value, q_segment_ids, kv_segment_ids, causal, max_decode_length)

    dropout_rng = None
    if not deterministic and self.dropout_rate > 0.0:
      dropout_rng = self.make_rng('dropout')
    hypotheses_per_row = query.shape[0] // key.shape[0]
    if hypotheses_per_row > 1:
      query, q_segment_ids = _fold_hypotheses(query, q_segment_ids, key.shape[0])
    out = kernels.attention(query, key, value, q_segment_ids=q_segment_ids,
                            kv_segment_ids=kv_segment_ids, bias=bias, causal=causal,
                            implementation=self.implementation,
                            dropout_rate=self.dropout_rate, dropout_rng=dropout_rng)
    if hypotheses_per_row > 1:
      out = out.reshape((-1, inputs_q.shape[1]) + out.shape[2:])
    out = nn.with_logical_constraint(out, ('batch', 'length', 'heads', 'kv'))
    out = DenseGeneral((inputs_q.shape[-1],), ('heads', 'kv', 'embed'), num_input_axes=2,
                       dtype=self.dtype, param_dtype=self.param_dtype, name='out')(out)
    return nn.with_logical_constraint(out, ('batch', 'length', 'embed'))

  def _fixed_kv(self, inputs_kv: Array) -> tuple[Array, Array]:
    """Keys and values of inputs that stay the same at every decoding step.

    Cross-attention attends to the encoder output, which never changes while decoding: its
    keys and values are projected once, on the call that creates the cache
    (`network.init_decode_cache`), and read from `cached_fixed_key`/`cached_fixed_value`
    ([batch, kv_length, heads, head_dim]) at every step after. They may hold one row per
    example while the queries hold several hypotheses per example (beam search): see
    `_fold_hypotheses`.
    """
    if self.has_variable('cache', FIXED_KV_CACHE[0]):
      return tuple(self.get_variable('cache', name) for name in FIXED_KV_CACHE)
    key = self._project(inputs_kv, 'key')
    value = self._project(inputs_kv, 'value')
    for name, projected in zip(FIXED_KV_CACHE, (key, value)):
      self.put_variable('cache', name, projected)
    return key, value

  def _update_cache(self, key: Array, value: Array, q_segment_ids: Optional[Array],
                    kv_segment_ids: Optional[Array], causal: bool,
                    max_decode_length: Optional[int]):
    """Creates the cache, or writes one step into it and returns the attention inputs."""
    batch, length, heads, head_dim = key.shape
    is_initialized = self.has_variable('cache', STEP_KV_CACHE[0])
    cache_shape = (batch, max_decode_length or length, heads, head_dim)
    cached_key, cached_value = (self.variable('cache', name, jnp.zeros, cache_shape, x.dtype)
                                for name, x in zip(STEP_KV_CACHE, (key, value)))
    cache_index = self.variable('cache', 'cache_index', lambda: jnp.array(0, jnp.int32))
    if not is_initialized:
      return key, value, q_segment_ids, kv_segment_ids, causal
    if length != 1:
      raise ValueError(f'autoregressive decoding takes one token per call, got {length}')
    index = cache_index.value
    cached_key.value = jax.lax.dynamic_update_slice(cached_key.value, key, (0, index, 0, 0))
    cached_value.value = jax.lax.dynamic_update_slice(cached_value.value, value,
                                                      (0, index, 0, 0))
    cache_index.value = index + 1
    max_length = cached_key.value.shape[1]
    filled = (jnp.arange(max_length) <= index).astype(jnp.int32)
    kv_segment_ids = jnp.broadcast_to(filled, (batch, max_length))
    q_segment_ids = jnp.ones((batch, 1), jnp.int32)
    return cached_key.value, cached_value.value, q_segment_ids, kv_segment_ids, False


def _fold_hypotheses(query: Array, q_segment_ids: Optional[Array],
                     kv_batch: int) -> tuple[Array, Optional[Array]]:
  """Queries [kv_batch * n, Lq, ...] of n hypotheses per key/value row, as [kv_batch,
  n * Lq, ...]: the hypotheses of an example attend to its keys as one longer query, so
  beam search reads each example's cross-attention keys once, not once per beam."""
  rows, length = query.shape[:2]
  folded = query.reshape((kv_batch, rows // kv_batch * length) + query.shape[2:])
  if q_segment_ids is not None:
    q_segment_ids = q_segment_ids.reshape(kv_batch, -1)
  return folded, q_segment_ids


class MlpBlock(nn.Module):
  """Position-wise feed-forward block: Dense(mlp_dim) -> activation -> Dense(embed)."""
  mlp_dim: int
  activation: str = 'relu'
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, x: Array) -> Array:
    if self.activation not in ACTIVATIONS:
      raise ValueError(f'unknown activation {self.activation!r}; valid: {sorted(ACTIVATIONS)}')
    h = DenseGeneral((self.mlp_dim,), ('embed', 'mlp'), dtype=self.dtype,
                     param_dtype=self.param_dtype, name='wi')(x)
    h = ACTIVATIONS[self.activation](h)
    h = nn.with_logical_constraint(h, ('batch', 'length', 'mlp'))
    y = DenseGeneral((x.shape[-1],), ('mlp', 'embed'), dtype=self.dtype,
                     param_dtype=self.param_dtype, name='wo')(h)
    return nn.with_logical_constraint(y, ('batch', 'length', 'embed'))


class Embed(nn.Module):
  """Token embedding table [vocab, embed]; `attend` reuses it as the output projection.

  Initialised N(0, 1) (as in Flax's WMT example), so embedded tokens have the same scale as
  layer-normalised activations and need no sqrt(d) multiplier.
  """
  num_embeddings: int
  features: int
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32

  def setup(self):
    self.embedding = self.param(
        'embedding',
        nn.with_logical_partitioning(nn.initializers.normal(stddev=1.0), ('vocab', 'embed')),
        (self.num_embeddings, self.features), self.param_dtype)

  def __call__(self, tokens: Array) -> Array:
    """Looks up int tokens [...] -> [..., features] in `dtype`."""
    embedded = jnp.take(self.embedding, tokens, axis=0).astype(self.dtype)
    return nn.with_logical_constraint(embedded, ('batch', 'length', 'embed'))

  def attend(self, query: Array) -> Array:
    """Dot products of query [..., features] with every embedding: [..., vocab]."""
    logits = jnp.einsum('...e,ve->...v', query.astype(self.dtype),
                        self.embedding.astype(self.dtype))
    return nn.with_logical_constraint(logits, ('batch', 'length', 'vocab'))


def sinusoidal_table(max_length: int, features: int, max_scale: float = 10000.0) -> np.ndarray:
  """Fixed [max_length, features] table of Vaswani et al.: sin in the first half, cos after."""
  half = features // 2
  position = np.arange(max_length, dtype=np.float64)[:, None]
  inv_timescale = np.exp(-np.log(max_scale) * np.arange(half, dtype=np.float64) / max(half - 1, 1))
  angles = position * inv_timescale[None, :]
  table = np.zeros((max_length, features), np.float32)
  table[:, :half] = np.sin(angles)
  table[:, half:2 * half] = np.cos(angles)
  return table


class PositionEmbedding(nn.Module):
  """Adds absolute position embeddings, learned or sinusoidal, to [batch, length, embed].

  Positions come from `positions` [batch, length] (packed sequences restart at 0), else from
  the array index. With `decode=True` the position is a scalar int32 `cache_index` kept in
  the 'cache' collection (created on the first call, advanced on every later one).
  """
  max_length: int
  kind: str = 'learned'
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32

  @nn.compact
  def __call__(self, x: Array, positions: Optional[Array] = None, *,
               decode: bool = False) -> Array:
    _, length, features = x.shape
    if self.kind == 'learned':
      table = self.param(
          'pos_embedding',
          nn.with_logical_partitioning(nn.initializers.normal(stddev=0.02), (None, 'embed')),
          (self.max_length, features), self.param_dtype)
    elif self.kind == 'sinusoidal':
      table = jnp.asarray(sinusoidal_table(self.max_length, features))
    else:
      raise ValueError(f"unknown position embedding {self.kind!r}; valid: 'learned', "
                       "'sinusoidal'")

    if decode:
      is_initialized = self.has_variable('cache', 'cache_index')
      cache_index = self.variable('cache', 'cache_index', lambda: jnp.array(0, jnp.int32))
      if is_initialized:
        positions = jnp.full((1, length), cache_index.value, jnp.int32)
        cache_index.value = cache_index.value + length
    if positions is None:
      positions = jnp.arange(length)[None, :]
    return x + jnp.take(table, positions, axis=0).astype(self.dtype)
