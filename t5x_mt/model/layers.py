"""Building blocks of the Transformer: norms, dense layers, attention, MLP, embeddings.

Conventions shared by every module here:
- Parameters are created in `param_dtype` (float32) with logical axis names from
  `nn.with_logical_partitioning`, so `t5x_mt.core.partitioning` can map them onto a mesh.
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

from t5x_mt.model import decode_cache
from t5x_mt import kernels
from t5x_mt.model import lora as lora_lib
from t5x_mt.model import parameter_layout
from t5x_mt.model import position_embeddings

Array = jax.Array
DType = Any
Initializer = Callable[..., Array]

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    'relu': nn.relu,
    'gelu': functools.partial(nn.gelu, approximate=False),
    'swish': nn.swish,  # x * sigmoid(x), Marian's (OPUS-MT's) activation.
}


def _xavier_uniform(num_input_axes: int, num_output_axes: int) -> Initializer:
  """Glorot-uniform over a kernel whose leading axes are inputs and trailing axes outputs."""
  return nn.initializers.variance_scaling(
      1.0, 'fan_avg', 'uniform', in_axis=tuple(range(num_input_axes)),
      out_axis=tuple(range(num_input_axes, num_input_axes + num_output_axes)))


def scaled(init: Initializer, factor: float) -> Initializer:
  """`init` with its values multiplied by `factor` (the identity for 1)."""
  if factor == 1.0:
    return init
  return lambda *args, **kwargs: init(*args, **kwargs) * factor


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
    scale = self.param(parameter_layout.NORM_SCALE,
                       nn.with_logical_partitioning(nn.initializers.ones, ('embed',)),
                       (features,), self.param_dtype)
    bias = self.param(parameter_layout.BIAS,
                      nn.with_logical_partitioning(nn.initializers.zeros, ('embed',)),
                      (features,), self.param_dtype)
    y = y * scale.astype(jnp.float32) + bias.astype(jnp.float32)
    return y.astype(self.dtype)


class DenseGeneral(nn.Module):
  """y = x . W + b, contracting the trailing `num_input_axes` axes of x.

  `kernel_axes` names every kernel axis (inputs first, then `features`); the bias takes the
  names of the output axes. With `lora`, the layer adds its low-rank update (x A) B *
  alpha / rank (`t5x_mt.model.lora`); A and B take the kernel's input and output axis names
  and 'lora' for the rank.
  """
  features: Sequence[int]
  kernel_axes: Sequence[str]
  num_input_axes: int = 1
  use_bias: bool = True
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  kernel_init: Optional[Initializer] = None  # Default: Glorot-uniform.
  init_scale: float = 1.0  # Multiplies the initial kernel (B2T's depth scaling).
  lora: Optional[lora_lib.LoraSettings] = None

  @nn.compact
  def __call__(self, x: Array, deterministic: bool = True) -> Array:
    """`deterministic=False` applies LoRA's dropout to its input (a 'dropout' rng)."""
    features = tuple(self.features)
    n_in = self.num_input_axes
    kernel_shape = x.shape[x.ndim - n_in:] + features
    if len(self.kernel_axes) != len(kernel_shape):
      raise ValueError(f'kernel_axes {self.kernel_axes} do not match kernel {kernel_shape}')
    kernel = self.param(
        parameter_layout.KERNEL,
        nn.with_logical_partitioning(
            scaled(self.kernel_init or _xavier_uniform(n_in, len(features)), self.init_scale),
            tuple(self.kernel_axes)),
        kernel_shape, self.param_dtype)
    contract = (tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in)))
    y = jax.lax.dot_general(x.astype(self.dtype), kernel.astype(self.dtype), (contract, ((), ())))
    if self.use_bias:
      bias = self.param(
          parameter_layout.BIAS,
          nn.with_logical_partitioning(nn.initializers.zeros, tuple(self.kernel_axes[n_in:])),
          features, self.param_dtype)
      y = y + bias.astype(self.dtype)
    if self.lora is not None:
      y = y + self._low_rank_update(x, kernel_shape, deterministic)
    return y

  def _low_rank_update(self, x: Array, kernel_shape: tuple[int, ...],
                       deterministic: bool) -> Array:
    """(dropout(x) A) B * alpha / rank: A ~ He-uniform as in Hu et al.'s code, B zero."""
    n_in, rank = self.num_input_axes, self.lora.rank
    inputs, outputs = kernel_shape[:n_in], kernel_shape[n_in:]
    lora_a = self.param(
        lora_lib.LORA_A, nn.with_logical_partitioning(
            nn.initializers.variance_scaling(1 / 3, 'fan_in', 'uniform',
                                             in_axis=tuple(range(n_in)), out_axis=n_in),
            tuple(self.kernel_axes[:n_in]) + ('lora',)),
        inputs + (rank,), self.param_dtype)
    lora_b = self.param(
        lora_lib.LORA_B, nn.with_logical_partitioning(
            nn.initializers.zeros, ('lora',) + tuple(self.kernel_axes[n_in:])),
        (rank,) + outputs, self.param_dtype)
    x = nn.Dropout(self.lora.dropout_rate)(x, deterministic=deterministic)
    contract = (tuple(range(x.ndim - n_in, x.ndim)), tuple(range(n_in)))
    h = jax.lax.dot_general(x.astype(self.dtype), lora_a.astype(self.dtype),
                            (contract, ((), ())))
    y = jax.lax.dot_general(h, lora_b.astype(self.dtype), (((h.ndim - 1,), (0,)), ((), ())))
    return y * jnp.asarray(self.lora.scale, self.dtype)


def _to_cache_layout(key: Array, value: Array) -> tuple[Array, Array]:
  """Keys and values [batch, length, heads, head_dim] in the cache's layout."""
  return key.transpose(0, 2, 3, 1), value.transpose(0, 2, 1, 3)


class MultiHeadAttention(nn.Module):
  """Multi-head attention (self or cross) with an optional autoregressive KV cache.

  With `decode=True` the module keeps its keys and values in the 'cache' collection
  (layout: see `decode_cache`). The first call (inside `init` or
  `decode_cache.init`, when the cache does not exist yet) creates it and
  otherwise attends normally:
  - cross-attention (`fixed_kv`) caches the projected keys and values of `inputs_kv`
    (`cached_fixed_key`, `cached_fixed_value`), which never change while decoding, so
    later steps read them instead of projecting the encoder output again;
  - self-attention creates empty `cached_key`, `cached_value` of max_length =
    `max_decode_length` or the input length and one beam slot (beam search widens it:
    `decode_cache.expand`), `cached_ancestry`, and a scalar int32 `cache_index`.
  Every later call takes exactly one token per hypothesis; self-attention writes its key
  and value into its slot at `cache_index`, attends to its own history (positions
  0..cache_index of the slots its ancestry names) and advances the index. Both kinds
  hold several hypotheses per cache row (an example's beams): they attend as one row of
  several queries.
  """
  num_heads: int
  head_dim: int
  dropout_rate: float = 0.0
  implementation: str = 'xla'
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  fixed_kv: bool = False  # Keys/values come from inputs fixed while decoding (cross-attention).
  init_scale: float = 1.0  # Multiplies every initial weight (B2T's depth scaling).
  # Shaw et al. (2018) relative positions: k > 0 learns key (and, with `relative_values`,
  # value) tables of 2k + 1 rows, shared across heads, for key-minus-query distances
  # clipped to [-k, k]; 0 attends without them.
  relative_max_distance: int = 0
  relative_values: bool = True
  # LoRA on each of the projections and output it names (`lora.settings_for`).
  lora: tuple[tuple[str, lora_lib.LoraSettings], ...] = ()

  def _project(self, x: Array, name: str, deterministic: bool = True) -> Array:
    y = DenseGeneral((self.num_heads, self.head_dim), ('embed', 'heads', 'kv'),
                     dtype=self.dtype, param_dtype=self.param_dtype,
                     init_scale=self.init_scale, lora=dict(self.lora).get(name),
                     name=name)(x, deterministic)
    return nn.with_logical_constraint(y, ('batch', 'length', 'heads', 'kv'))

  def _relative_tables(self) -> tuple[Optional[Array], Optional[Array]]:
    """(key table, value table or None) [2k + 1, head_dim], or (None, None) without
    relative positions."""
    if not self.relative_max_distance:
      return None, None
    init = nn.with_logical_partitioning(
        scaled(nn.initializers.normal(stddev=self.head_dim ** -0.5), self.init_scale),
        (None, 'kv'))
    shape = (2 * self.relative_max_distance + 1, self.head_dim)
    keys = self.param(parameter_layout.RELATIVE_KEYS, init, shape, self.param_dtype)
    values = None
    if self.relative_values:
      values = self.param(parameter_layout.RELATIVE_VALUES, init, shape, self.param_dtype)
    return keys, values

  def _relative_terms(self, query: Array, relative_ids: Optional[Array]
                      ) -> tuple[Optional[Array], Optional[tuple[Array, Array]]]:
    """The logits bias [B, heads, Lq, Lk] of the relative key table (Shaw's q . a_ij /
    sqrt(d)) and the value table with the ids that pick its rows (`kernels.attention`'s
    `relative_values`), for `relative_ids` [B or 1, Lq, Lk]; (None, None) without."""
    key_table, value_table = self._relative_tables()
    if key_table is None:
      return None, None
    if relative_ids is None:
      raise ValueError('relative positions need relative_ids for the attention')
    per_distance = jnp.einsum('bqhd,rd->bhqr', query, key_table.astype(query.dtype),
                              preferred_element_type=jnp.float32)
    per_distance = per_distance * (1.0 / jnp.sqrt(jnp.float32(self.head_dim)))
    ids = jnp.broadcast_to(relative_ids[:, None], per_distance.shape[:3] + relative_ids.shape[-1:])
    bias = jnp.take_along_axis(per_distance, ids, axis=-1)
    values = None if value_table is None else (value_table, relative_ids)
    return bias, values

  @nn.compact
  def __call__(self, inputs_q: Array, inputs_kv: Array, *,
               q_segment_ids: Optional[Array] = None,
               kv_segment_ids: Optional[Array] = None,
               causal: bool = False,
               relative_ids: Optional[Array] = None,
               decode: bool = False,
               max_decode_length: Optional[int] = None,
               deterministic: bool = True) -> Array:
    """Attends from `inputs_q` [B, Lq, E] to `inputs_kv` [B, Lk, E]; returns [B, Lq, E].

    `relative_ids` [B or 1, Lq, Lk] (`relative_position_ids`) pick each query-key pair's
    rows of the relative tables; decoding steps derive them from the cache's index.
    """
    query_name, key_name, value_name = parameter_layout.ATTENTION_PROJECTIONS
    query = self._project(inputs_q, query_name, deterministic)
    cache_names = decode_cache.FIXED_KV_CACHE if self.fixed_kv else decode_cache.STEP_KV_CACHE
    if decode and self.has_variable('cache', cache_names[0]):
      out = self._decoding_step(query, inputs_kv, kv_segment_ids)
    else:
      key = self._project(inputs_kv, key_name, deterministic)
      value = self._project(inputs_kv, value_name, deterministic)
      if decode:
        self._create_cache(key, value, max_decode_length)
      dropout_rng = None
      if not deterministic and self.dropout_rate > 0.0:
        dropout_rng = self.make_rng('dropout')
      bias, relative_values = self._relative_terms(query, relative_ids)
      out = kernels.attention(query, key, value, q_segment_ids=q_segment_ids,
                              kv_segment_ids=kv_segment_ids, bias=bias, causal=causal,
                              relative_values=relative_values,
                              implementation=self.implementation,
                              dropout_rate=self.dropout_rate, dropout_rng=dropout_rng)
    out = nn.with_logical_constraint(out, ('batch', 'length', 'heads', 'kv'))
    out = DenseGeneral((inputs_q.shape[-1],), ('heads', 'kv', 'embed'), num_input_axes=2,
                       dtype=self.dtype, param_dtype=self.param_dtype,
                       init_scale=self.init_scale,
                       lora=dict(self.lora).get(parameter_layout.ATTENTION_OUTPUT),
                       name=parameter_layout.ATTENTION_OUTPUT)(out, deterministic)
    return nn.with_logical_constraint(out, ('batch', 'length', 'embed'))

  def _create_cache(self, key: Array, value: Array, max_decode_length: Optional[int]):
    """The cache of the first decoding call: the projected keys and values themselves
    (cross-attention), or an empty cache of max_decode_length steps (self-attention)."""
    if self.fixed_kv:
      for name, cached in zip(decode_cache.FIXED_KV_CACHE, _to_cache_layout(key, value)):
        self.put_variable('cache', name, cached)
      return
    batch, length, heads, head_dim = key.shape
    max_length = max_decode_length or length
    empty = jnp.zeros((batch, max_length, heads, head_dim), key.dtype)
    for name, cached in zip(decode_cache.STEP_KV_CACHE, _to_cache_layout(empty, empty)):
      self.put_variable('cache', name, cached)
    self.put_variable('cache', decode_cache.ANCESTRY_CACHE,
                      jnp.zeros((batch, max_length), jnp.int32))
    self.put_variable('cache', 'cache_index', jnp.array(0, jnp.int32))

  def _decoding_step(self, query: Array, inputs_kv: Array,
                     kv_segment_ids: Optional[Array]) -> Array:
    """One decoding step's attention [B * n, 1, heads, head_dim] to the cache (see the
    class docstring); self-attention first writes this step's key and value into it."""
    if query.shape[1] != 1:
      raise ValueError(f'autoregressive decoding takes one token per call, got '
                       f'{query.shape[1]}')
    if self.fixed_kv:
      key_cache, value_cache = (self.get_variable('cache', name)
                                for name in decode_cache.FIXED_KV_CACHE)
      kv_valid = jnp.ones(key_cache.shape[:1] + key_cache.shape[3:], jnp.bool_)
      if kv_segment_ids is not None:
        kv_valid = kv_segment_ids != 0
    else:
      key_cache, value_cache, kv_valid = self._write_step(inputs_kv)
    examples = key_cache.shape[0]
    folded = query.reshape((examples, query.shape[0] // examples) + query.shape[2:])
    bias, relative_values = None, None
    if self.relative_max_distance and not self.fixed_kv:
      bias, relative_values = self._relative_terms(folded, self._step_relative_ids(
          key_cache.shape[-1]))
    out = kernels.decoding_step_attention(folded, key_cache, value_cache, kv_valid,
                                          bias=bias, relative_values=relative_values,
                                          implementation=self.implementation)
    return out.reshape(query.shape)

  def _step_relative_ids(self, entries: int) -> Array:
    """[1, 1, entries]: the relative table row of every self-attention cache entry for
    this step's query, whose position is the index before `_write_step` advanced it
    (entry e holds position e // slots)."""
    slots = self.get_variable('cache', decode_cache.ANCESTRY_CACHE).shape[0] // (
        self.get_variable('cache', decode_cache.STEP_KV_CACHE[0]).shape[0])
    query_position = self.get_variable('cache', 'cache_index') - 1
    key_positions = jnp.arange(entries, dtype=jnp.int32) // slots
    return relative_position_ids(jnp.reshape(query_position, (1, 1)),
                                 key_positions[None], self.relative_max_distance)

  def _write_step(self, inputs_kv: Array) -> tuple[Array, Array, Array]:
    """Writes each hypothesis' key and value of this step into its slot at `cache_index`
    and advances the index; returns the keys and values and, per hypothesis [batch,
    slots, length * slots], the entries of its own history: position p of the slot its
    ancestry names."""
    key_cache, value_cache = (self.get_variable('cache', name)
                              for name in decode_cache.STEP_KV_CACHE)
    ancestry = self.get_variable('cache', decode_cache.ANCESTRY_CACHE)
    batch, heads, head_dim, _ = key_cache.shape
    slots, max_length = ancestry.shape[0] // batch, ancestry.shape[1]
    key, value = (self._project(inputs_kv, name).reshape(batch, slots, heads, head_dim)
                  for name in parameter_layout.ATTENTION_PROJECTIONS[1:])
    index = self.get_variable('cache', 'cache_index')
    key_cache = jax.lax.dynamic_update_slice_in_dim(
        key_cache, key.transpose(0, 2, 3, 1), index * slots, axis=3)
    value_cache = jax.lax.dynamic_update_slice_in_dim(
        value_cache, value.transpose(0, 2, 1, 3), index * slots, axis=2)
    own_slot = jnp.arange(batch * slots, dtype=jnp.int32) % slots
    ancestry = jax.lax.dynamic_update_slice_in_dim(ancestry, own_slot[:, None], index, axis=1)
    for name, cached in zip(decode_cache.STEP_KV_CACHE + (decode_cache.ANCESTRY_CACHE,),
                            (key_cache, value_cache, ancestry)):
      self.put_variable('cache', name, cached)
    self.put_variable('cache', 'cache_index', index + 1)
    history = ((ancestry.reshape(batch, slots, max_length, 1) == jnp.arange(slots))
               & (jnp.arange(max_length) <= index)[:, None])
    return key_cache, value_cache, history.reshape(batch, slots, max_length * slots)


class MlpBlock(nn.Module):
  """Position-wise feed-forward block: Dense(mlp_dim) -> activation -> Dense(embed)."""
  mlp_dim: int
  activation: str = 'relu'
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  init_scale: float = 1.0  # Multiplies both initial kernels (B2T's depth scaling).
  lora: tuple[tuple[str, lora_lib.LoraSettings], ...] = ()  # As MultiHeadAttention's.

  @nn.compact
  def __call__(self, x: Array, deterministic: bool = True) -> Array:
    if self.activation not in ACTIVATIONS:
      raise ValueError(f'unknown activation {self.activation!r}; valid: {sorted(ACTIVATIONS)}')
    lora = dict(self.lora)
    h = DenseGeneral((self.mlp_dim,), ('embed', 'mlp'), dtype=self.dtype,
                     param_dtype=self.param_dtype, init_scale=self.init_scale,
                     lora=lora.get(parameter_layout.MLP_INPUT),
                     name=parameter_layout.MLP_INPUT)(x, deterministic)
    h = ACTIVATIONS[self.activation](h)
    h = nn.with_logical_constraint(h, ('batch', 'length', 'mlp'))
    y = DenseGeneral((x.shape[-1],), ('mlp', 'embed'), dtype=self.dtype,
                     param_dtype=self.param_dtype, init_scale=self.init_scale,
                     lora=lora.get(parameter_layout.MLP_OUTPUT),
                     name=parameter_layout.MLP_OUTPUT)(h, deterministic)
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
        parameter_layout.EMBEDDING_TABLE,
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


def relative_position_ids(q_positions: Array, kv_positions: Array, max_distance: int) -> Array:
  """[B, Lq, Lk] rows of a relative table of 2 * max_distance + 1 rows: key position minus
  query position, clipped to [-max_distance, max_distance], plus max_distance. Positions
  [B, L] restart in every packed sequence; pairs across sequences are masked anyway."""
  distance = kv_positions[:, None, :] - q_positions[:, :, None]
  return jnp.clip(distance, -max_distance, max_distance).astype(jnp.int32) + max_distance


class PositionEmbedding(nn.Module):
  """Adds absolute positions to [batch, length, embed]: a row per token of the table of
  `kind`, a registered position embedding (`t5x_mt.model.position_embeddings`) that adds
  one, learned or fixed.

  Positions come from `positions` [batch, length] (packed sequences restart at 0), else from
  the array index. With `decode=True` the position is a scalar int32 `cache_index` kept in
  the 'cache' collection (created on the first call, advanced on every later one).
  """
  max_length: int
  kind: str
  dtype: DType = jnp.float32
  param_dtype: DType = jnp.float32
  offset: int = 0  # The table row of position 0 (fairseq's sinusoids start at row 2).

  @nn.compact
  def __call__(self, x: Array, positions: Optional[Array] = None, *,
               decode: bool = False) -> Array:
    _, length, features = x.shape
    table = position_embeddings.get(self.kind).table(self, self.max_length + self.offset,
                                                     features, self.param_dtype)
    if decode:
      is_initialized = self.has_variable('cache', 'cache_index')
      cache_index = self.variable('cache', 'cache_index', lambda: jnp.array(0, jnp.int32))
      if is_initialized:
        positions = jnp.full((1, length), cache_index.value, jnp.int32)
        cache_index.value = cache_index.value + length
    if positions is None:
      positions = jnp.arange(length)[None, :]
    return x + jnp.take(table, positions + self.offset, axis=0).astype(self.dtype)
