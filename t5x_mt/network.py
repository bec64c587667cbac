"""Pre-LN Transformer encoder-decoder for multilingual translation.

Choices (the systems in METHODS.md section 8 are fairseq pre-LN transformers):
- Pre-LN blocks, x + Dropout(Sublayer(LN(x))), with a final LayerNorm after each stack.
- LayerNorm with scale and bias; dense layers with biases; ReLU MLP (GELU selectable).
- Token embeddings ~ N(0, 1) and not multiplied by sqrt(d); learned positions ~ N(0, 0.02),
  or fixed sinusoids. The decoder's input embedding is always its output projection when
  `logits_via_embedding`, and then logits are divided by sqrt(d) so that they start with unit
  variance (as in T5X); otherwise a separate [embed, vocab] projection (no bias) is used.
- Deep stacks: `scan_layers` runs each stack as one `nn.scan` over stacked layer
  parameters (one layer to compile, whatever the depth) and `remat_policy` recomputes
  activations in the backward pass instead of storing them (`REMAT_POLICIES`). Scanned
  parameters are [layers, ...] arrays under `encoder/layers` and `decoder/layers`
  (`stack_layers`/`unstack_layers` convert); decoding always runs the unrolled stack.
- Masks: token 0 is padding. Unpacked inputs derive segment ids from `tokens > 0` (the decoder
  from `decoder_target_tokens`, since its inputs may start with token 0); packed inputs use
  the given segment ids, still zeroed where the token is padding.
"""

import dataclasses
from typing import Any, Optional

import flax.linen as nn
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt import adapters
from t5x_mt import kernels
from t5x_mt import layers
from t5x_mt import validation

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyperparameters of `Transformer`; gin-configurable at the launch layer."""
  vocab_size: int
  emb_dim: int = 512
  num_heads: int = 8
  head_dim: int = 64
  mlp_dim: int = 2048
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.0
  share_encoder_embedding: bool = True  # The decoder's input and output are always shared.
  position_embedding: str = 'learned'  # Or 'sinusoidal'.
  max_length: int = 512
  dtype: Any = jnp.float32  # Compute dtype; parameters stay float32.
  attention_implementation: str = 'auto'  # t5x_mt.kernels: 'xla', 'pallas' or 'auto'.
  logits_via_embedding: bool = True
  mlp_activation: str = 'relu'  # Or 'gelu'.
  # Adapters after every layer (t5x_mt.adapters): one per key, a target language
  # (adapter_by='target') or a direction ('direction'), with its bottleneck size.
  adapter_by: str = 'target'
  adapter_keys: tuple[str, ...] = ()
  adapter_bottlenecks: tuple[int, ...] = ()
  scan_layers: bool = False
  remat_policy: str = 'none'  # A key of REMAT_POLICIES.

  def __post_init__(self):
    # gin may give lists; the config is hashed as a Flax module attribute.
    object.__setattr__(self, 'adapter_keys', tuple(self.adapter_keys))
    object.__setattr__(self, 'adapter_bottlenecks', tuple(self.adapter_bottlenecks))
    adapters.check_config(self.adapter_by, self.adapter_keys, self.adapter_bottlenecks)
    self._check_values()

  def _check_values(self) -> None:
    """Every field a gin binding could get wrong, named as it is bound."""
    name = lambda field: f'network.TransformerConfig.{field}'
    for field in ('vocab_size', 'emb_dim', 'num_heads', 'head_dim', 'mlp_dim', 'max_length'):
      validation.integer(name(field), getattr(self, field), minimum=1)
    for field in ('num_encoder_layers', 'num_decoder_layers'):
      validation.integer(name(field), getattr(self, field), minimum=0)
    for field in ('dropout_rate', 'attention_dropout_rate'):
      validation.number(name(field), getattr(self, field), at_least=0.0, below=1.0)
    validation.choice(name('position_embedding'), self.position_embedding,
                      layers.POSITION_EMBEDDINGS)
    validation.choice(name('mlp_activation'), self.mlp_activation, layers.ACTIVATIONS)
    validation.choice(name('attention_implementation'), self.attention_implementation,
                      ('auto', *kernels.implementations()))
    validation.choice(name('remat_policy'), self.remat_policy, REMAT_POLICIES)


# What the backward pass keeps of a layer's forward activations ('none': everything, no
# recomputation); the rest is recomputed, trading FLOPs for memory.
REMAT_POLICIES = {
    'none': None,
    'full': jax.checkpoint_policies.nothing_saveable,
    'dots': jax.checkpoint_policies.dots_saveable,
    'dots_with_no_batch_dims': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}
SCANNED_LAYERS = 'layers'  # encoder/layers, decoder/layers: the scanned stacks.
SCANNED_LAYER = 'layer'
SCANNED_ADAPTERS = adapters.MODULE_PREFIX + 'stacked'


def _segment_ids(tokens: Array, segment_ids: Optional[Array]) -> Array:
  """Segment ids with padding (token 0) forced to segment 0."""
  valid = (tokens > 0).astype(jnp.int32)
  return valid if segment_ids is None else segment_ids.astype(jnp.int32) * valid


class EncoderLayer(nn.Module):
  """Pre-LN self-attention + MLP block."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, segment_ids: Array, deterministic: bool) -> Array:
    cfg = self.config
    h = layers.LayerNorm(dtype=cfg.dtype, name='pre_attention_norm')(x)
    h = layers.MultiHeadAttention(
        cfg.num_heads, cfg.head_dim, cfg.attention_dropout_rate, cfg.attention_implementation,
        dtype=cfg.dtype, name='attention')(h, h, q_segment_ids=segment_ids,
                                           kv_segment_ids=segment_ids,
                                           deterministic=deterministic)
    x = x + nn.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
    h = layers.LayerNorm(dtype=cfg.dtype, name='pre_mlp_norm')(x)
    h = layers.MlpBlock(cfg.mlp_dim, cfg.mlp_activation, dtype=cfg.dtype, name='mlp')(h)
    x = x + nn.Dropout(cfg.dropout_rate)(h, deterministic=deterministic)
    return nn.with_logical_constraint(x, ('batch', 'length', 'embed'))


class DecoderLayer(nn.Module):
  """Pre-LN causal self-attention + cross-attention + MLP block."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, encoded: Array, segment_ids: Optional[Array],
               encoder_segment_ids: Array, deterministic: bool, decode: bool,
               max_decode_length: Optional[int]) -> Array:
    cfg = self.config
    dropout = nn.Dropout(cfg.dropout_rate)

    def attention(name, fixed_kv=False):
      return layers.MultiHeadAttention(
          cfg.num_heads, cfg.head_dim, cfg.attention_dropout_rate,
          cfg.attention_implementation, dtype=cfg.dtype, fixed_kv=fixed_kv, name=name)

    h = layers.LayerNorm(dtype=cfg.dtype, name='pre_self_attention_norm')(x)
    h = attention('self_attention')(h, h, q_segment_ids=segment_ids, kv_segment_ids=segment_ids,
                                    causal=True, decode=decode,
                                    max_decode_length=max_decode_length,
                                    deterministic=deterministic)
    x = x + dropout(h, deterministic=deterministic)
    h = layers.LayerNorm(dtype=cfg.dtype, name='pre_cross_attention_norm')(x)
    h = attention('encoder_decoder_attention', fixed_kv=True)(
        h, encoded, q_segment_ids=segment_ids, kv_segment_ids=encoder_segment_ids,
        decode=decode, deterministic=deterministic)
    x = x + dropout(h, deterministic=deterministic)
    h = layers.LayerNorm(dtype=cfg.dtype, name='pre_mlp_norm')(x)
    h = layers.MlpBlock(cfg.mlp_dim, cfg.mlp_activation, dtype=cfg.dtype, name='mlp')(h)
    x = x + dropout(h, deterministic=deterministic)
    return nn.with_logical_constraint(x, ('batch', 'length', 'embed'))


def _adapters(cfg: TransformerConfig, layer: int):
  """The adapters after layer `layer`, or the identity for a model built without."""
  if not cfg.adapter_keys:
    return lambda x, index: x
  return adapters.Adapters(cfg.adapter_keys, cfg.adapter_bottlenecks, cfg.dtype,
                           name=f'{adapters.MODULE_PREFIX}{layer}')


def _adapter_index(cfg: TransformerConfig, direction_ids: Optional[Array]) -> Optional[Array]:
  if not cfg.adapter_keys or direction_ids is None:
    return None
  return adapters.adapter_index(direction_ids, cfg.adapter_by, cfg.adapter_keys)


def _remat(layer_class, cfg: TransformerConfig, static_argnums: tuple[int, ...]):
  """`layer_class`, or under a remat policy its rematerialised version (`static_argnums`
  count `self` as 0: the Python flags the layer branches on)."""
  if cfg.remat_policy == 'none':
    return layer_class
  return nn.remat(layer_class, policy=REMAT_POLICIES[cfg.remat_policy],
                  static_argnums=static_argnums, prevent_cse=not cfg.scan_layers)


class EncoderBlock(nn.Module):
  """One step of the scanned encoder stack: a layer and its adapters; (carry, None)."""
  config: TransformerConfig
  deterministic: bool

  @nn.compact
  def __call__(self, x: Array, segment_ids: Array,
               adapter_index: Optional[Array]) -> tuple[Array, None]:
    cfg = self.config
    x = _remat(EncoderLayer, cfg, static_argnums=(3,))(cfg, name=SCANNED_LAYER)(
        x, segment_ids, self.deterministic)
    return _stacked_adapters(cfg)(x, adapter_index), None


class DecoderBlock(nn.Module):
  """One step of the scanned decoder stack (training and scoring, never decoding)."""
  config: TransformerConfig
  deterministic: bool

  @nn.compact
  def __call__(self, x: Array, encoded: Array, segment_ids: Optional[Array],
               encoder_segment_ids: Array,
               adapter_index: Optional[Array]) -> tuple[Array, None]:
    cfg = self.config
    x = _remat(DecoderLayer, cfg, static_argnums=(5, 6, 7))(cfg, name=SCANNED_LAYER)(
        x, encoded, segment_ids, encoder_segment_ids, self.deterministic, False, None)
    return _stacked_adapters(cfg)(x, adapter_index), None


def _stacked_adapters(cfg: TransformerConfig):
  if not cfg.adapter_keys:
    return lambda x, index: x
  return adapters.Adapters(cfg.adapter_keys, cfg.adapter_bottlenecks, cfg.dtype,
                           name=SCANNED_ADAPTERS)


def _scanned(block_class, cfg: TransformerConfig, num_layers: int):
  """`block_class` scanned `num_layers` times: parameters stacked on a leading 'layers'
  axis, a fresh dropout key per layer, every argument but the carry broadcast."""
  return nn.scan(block_class, variable_axes={'params': 0},
                 split_rngs={'params': True, 'dropout': True}, in_axes=nn.broadcast,
                 length=num_layers, metadata_params={nn.PARTITION_NAME: 'layers'})


class Encoder(nn.Module):
  """Embeds source tokens and runs the encoder stack; returns [batch, length, embed]."""
  config: TransformerConfig
  embedding: layers.Embed

  @nn.compact
  def __call__(self, tokens: Array, segment_ids: Array, positions: Optional[Array],
               deterministic: bool, adapter_index: Optional[Array] = None) -> Array:
    cfg = self.config
    x = self.embedding(tokens)
    x = layers.PositionEmbedding(cfg.max_length, cfg.position_embedding, dtype=cfg.dtype,
                                 name='posembed')(x, positions)
    x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
    if cfg.scan_layers:
      stack = _scanned(EncoderBlock, cfg, cfg.num_encoder_layers)
      x, _ = stack(cfg, deterministic, name=SCANNED_LAYERS)(x, segment_ids, adapter_index)
    else:
      layer = _remat(EncoderLayer, cfg, static_argnums=(3,))
      for i in range(cfg.num_encoder_layers):
        x = layer(cfg, name=f'layers_{i}')(x, segment_ids, deterministic)
        x = _adapters(cfg, i)(x, adapter_index)
    return layers.LayerNorm(dtype=cfg.dtype, name='encoder_norm')(x)


class Decoder(nn.Module):
  """Embeds target tokens, runs the decoder stack and returns float32 logits [B, L, vocab]
  (or, with `return_hidden`, the final normalised states [B, L, embed] the logits are
  projected from: `output_projection` gives the projection)."""
  config: TransformerConfig
  embedding: layers.Embed

  @nn.compact
  def __call__(self, encoded: Array, tokens: Array, segment_ids: Optional[Array],
               encoder_segment_ids: Array, positions: Optional[Array], deterministic: bool,
               decode: bool, max_decode_length: Optional[int],
               adapter_index: Optional[Array] = None, return_hidden: bool = False) -> Array:
    cfg = self.config
    x = self.embedding(tokens)
    x = layers.PositionEmbedding(cfg.max_length, cfg.position_embedding, dtype=cfg.dtype,
                                 name='posembed')(x, positions, decode=decode)
    x = nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)
    if cfg.scan_layers:
      if decode:
        raise ValueError('decoding runs the unrolled stack: build the model with '
                         'scan_layers=False and pass unstack_layers(params)')
      stack = _scanned(DecoderBlock, cfg, cfg.num_decoder_layers)
      x, _ = stack(cfg, deterministic, name=SCANNED_LAYERS)(
          x, encoded, segment_ids, encoder_segment_ids, adapter_index)
    else:
      layer = _remat(DecoderLayer, cfg, static_argnums=(5, 6, 7))
      for i in range(cfg.num_decoder_layers):
        x = layer(cfg, name=f'layers_{i}')(x, encoded, segment_ids, encoder_segment_ids,
                                           deterministic, decode, max_decode_length)
        x = _adapters(cfg, i)(x, adapter_index)
    x = layers.LayerNorm(dtype=cfg.dtype, name='decoder_norm')(x)
    if return_hidden:
      return x
    if cfg.logits_via_embedding:
      logits = self.embedding.attend(x) / jnp.sqrt(jnp.float32(cfg.emb_dim)).astype(cfg.dtype)
    else:
      logits = layers.DenseGeneral((cfg.vocab_size,), ('embed', 'vocab'), use_bias=False,
                                   dtype=cfg.dtype, name='logits_dense')(x)
    logits = nn.with_logical_constraint(logits, ('batch', 'length', 'vocab'))
    return logits.astype(jnp.float32)


class Transformer(nn.Module):
  """Encoder-decoder translation model (see module docstring for the design choices).

  Parameters: `shared_embedding` (decoder input and, with `logits_via_embedding`, output;
  also the encoder's input when `share_encoder_embedding`), `encoder_embedding` (only when not
  shared), `encoder`, `decoder`.
  """
  config: TransformerConfig

  def setup(self):
    cfg = self.config
    self.shared_embedding = layers.Embed(cfg.vocab_size, cfg.emb_dim, dtype=cfg.dtype)
    if cfg.share_encoder_embedding:
      self.encoder = Encoder(cfg, self.shared_embedding)
    else:
      self.encoder_embedding = layers.Embed(cfg.vocab_size, cfg.emb_dim, dtype=cfg.dtype)
      self.encoder = Encoder(cfg, self.encoder_embedding)
    self.decoder = Decoder(cfg, self.shared_embedding)

  def encode(self, encoder_input_tokens: Array, encoder_segment_ids: Optional[Array] = None,
             encoder_positions: Optional[Array] = None, *, enable_dropout: bool = False,
             encoder_direction_ids: Optional[Array] = None) -> Array:
    """Encodes source tokens [B, Le] into [B, Le, emb_dim] (in `config.dtype`).

    `encoder_direction_ids` ([B, Le] or [B, 1]) choose each token's adapters; without
    them a model with adapters runs its base only.
    """
    segment_ids = _segment_ids(encoder_input_tokens, encoder_segment_ids)
    return self.encoder(encoder_input_tokens, segment_ids, encoder_positions,
                        deterministic=not enable_dropout,
                        adapter_index=_adapter_index(self.config, encoder_direction_ids))

  def decode(self, encoded: Array, encoder_input_tokens: Array, decoder_input_tokens: Array,
             decoder_target_tokens: Array, encoder_segment_ids: Optional[Array] = None,
             decoder_segment_ids: Optional[Array] = None,
             decoder_positions: Optional[Array] = None, *, enable_dropout: bool = False,
             decode: bool = False, max_decode_length: Optional[int] = None,
             decoder_direction_ids: Optional[Array] = None,
             return_hidden: bool = False) -> Array:
    """Float32 logits [B, Ld, vocab] for the next token at every decoder position (with
    `return_hidden`, the states they are projected from; see `output_projection`).

    With `decode=True` (autoregressive decoding) `decoder_input_tokens` is [B, 1], positions
    and self-attention masks come from the 'cache' collection (which must be mutable), and
    `decoder_target_tokens` is ignored. The first such call, inside `init`, creates a cache
    of length `max_decode_length` (default: the decoder input length).
    """
    encoder_segment_ids = _segment_ids(encoder_input_tokens, encoder_segment_ids)
    if decode:
      decoder_segment_ids = None
      decoder_positions = None
    else:
      decoder_segment_ids = _segment_ids(decoder_target_tokens, decoder_segment_ids)
    return self.decoder(encoded, decoder_input_tokens, decoder_segment_ids, encoder_segment_ids,
                        decoder_positions, deterministic=not enable_dropout, decode=decode,
                        max_decode_length=max_decode_length,
                        adapter_index=_adapter_index(self.config, decoder_direction_ids),
                        return_hidden=return_hidden)

  def __call__(self, encoder_input_tokens: Array, decoder_input_tokens: Array,
               decoder_target_tokens: Array, encoder_segment_ids: Optional[Array] = None,
               decoder_segment_ids: Optional[Array] = None,
               encoder_positions: Optional[Array] = None,
               decoder_positions: Optional[Array] = None,
               decoder_direction_ids: Optional[Array] = None, *,
               enable_dropout: bool = False, return_hidden: bool = False) -> Array:
    """Teacher-forced float32 logits [B, Ld, vocab] (with `return_hidden`, the decoder's
    final states instead); `decoder_direction_ids` (the batch's per-token directions)
    choose adapters on both sides."""
    encoder_direction_ids = None
    if self.config.adapter_keys and decoder_direction_ids is not None:
      encoder_direction_ids = adapters.encoder_direction_ids(
          _segment_ids(encoder_input_tokens, encoder_segment_ids),
          _segment_ids(decoder_target_tokens, decoder_segment_ids), decoder_direction_ids)
    encoded = self.encode(encoder_input_tokens, encoder_segment_ids, encoder_positions,
                          enable_dropout=enable_dropout,
                          encoder_direction_ids=encoder_direction_ids)
    return self.decode(encoded, encoder_input_tokens, decoder_input_tokens,
                       decoder_target_tokens, encoder_segment_ids, decoder_segment_ids,
                       decoder_positions, enable_dropout=enable_dropout,
                       decoder_direction_ids=decoder_direction_ids,
                       return_hidden=return_hidden)


def output_projection(config: TransformerConfig, params: Any) -> tuple[Array, float, bool]:
  """(projection, logits scale, vocab-major) with logits = hidden . projection * scale:
  the tied embedding [vocab, embed] scaled by 1/sqrt(emb_dim), or `logits_dense`'s kernel
  [embed, vocab] unscaled. What `Decoder` applies to the states `return_hidden` gives."""
  if config.logits_via_embedding:
    return (params['shared_embedding']['embedding'], 1.0 / float(np.sqrt(config.emb_dim)),
            True)
  return params['decoder']['logits_dense']['kernel'], 1.0, False


def _dummy_tokens(batch_size: int, length: int) -> jax.ShapeDtypeStruct:
  return jax.ShapeDtypeStruct((batch_size, length), jnp.int32)


def abstract_variables(config: TransformerConfig) -> dict[str, Any]:
  """Shapes and dtypes (jax.ShapeDtypeStruct, boxed with logical axis names) of all
  variables of `Transformer(config)`, computed with `jax.eval_shape`: nothing is allocated."""
  model = Transformer(config)
  tokens = _dummy_tokens(1, 1)
  return jax.eval_shape(lambda rng, t: model.init(rng, t, t, t), jax.random.key(0), tokens)


def count_params(config: TransformerConfig) -> int:
  """Number of trainable parameters of `Transformer(config)`, without allocating any."""
  params = nn.meta.unbox(abstract_variables(config)['params'])
  return int(sum(np.prod(leaf.shape, dtype=np.int64) for leaf in jax.tree.leaves(params)))


def init_decode_cache(model: Transformer, params: Any, encoded: Array,
                      encoder_input_tokens: Array, max_decode_length: int) -> dict[str, Any]:
  """The 'cache' collection for decoding `encoded` [B, Le, E] autoregressively.

  Self-attention caches (`cached_key`/`cached_value` of max_decode_length steps and one
  beam slot, `cached_ancestry`, scalar `cache_index`es) start empty; cross-attention keys
  and values (`cached_fixed_key`/`cached_fixed_value` of Le positions) are projected from
  `encoded` here, once, instead of at every step. Leaves are scalars or batch-leading
  (layouts: `layers.KV_CACHE_LENGTH_AXIS`).
  """
  first_token = jnp.zeros((encoded.shape[0], 1), jnp.int32)
  _, variables = model.apply(
      {'params': params}, encoded, encoder_input_tokens, first_token, first_token,
      decode=True, max_decode_length=max_decode_length, mutable=['cache'],
      method=Transformer.decode)
  return variables['cache']


def split_fixed_cache(cache: Any) -> tuple[Any, Any]:
  """(cross-attention keys and values, the rest) of a decoding cache.

  The first part never changes while decoding and is the same for every hypothesis of an
  example; beam search keeps it out of its loop state (see `decoding`), and the
  cross-attention folds an example's hypotheses into one query against it.
  """
  parts = ({}, {})
  for path, leaf in traverse_util.flatten_dict(cache).items():
    parts[path[-1] not in layers.FIXED_KV_CACHE][path] = leaf
  return tuple(traverse_util.unflatten_dict(part) for part in parts)


def merge_cache(fixed: Any, rest: Any) -> Any:
  """The decoding cache that `split_fixed_cache` split."""
  return traverse_util.unflatten_dict(
      {**traverse_util.flatten_dict(fixed), **traverse_util.flatten_dict(rest)})


def expand_decode_cache(cache: Any, beam_size: int) -> Any:
  """The cache of one hypothesis per example made the cache of beam_size (beam search's
  `expand_cache`): self-attention's keys and values get beam_size slots at every
  position (each a copy of the one there was), every other batch-leading leaf beam_size
  rows per example."""
  def expand(path, leaf):
    if jnp.ndim(leaf) == 0:
      return leaf
    axis = layers.KV_CACHE_LENGTH_AXIS[path[-1]] if path[-1] in layers.STEP_KV_CACHE else 0
    return jnp.repeat(leaf, beam_size, axis=axis)

  return traverse_util.path_aware_map(expand, cache)


def extend_decode_cache(cache: Any, max_decode_length: int) -> Any:
  """The cache with its self-attention keys, values and ancestry zero-padded to hold
  `max_decode_length` steps; what the cache holds and its step index are unchanged."""
  leaves = traverse_util.flatten_dict(cache)

  def extend(path, leaf):
    if path[-1] not in layers.STEP_KV_CACHE + (layers.ANCESTRY_CACHE,):
      return leaf
    axis = layers.KV_CACHE_LENGTH_AXIS[path[-1]]
    # Keys and values hold every position once per beam slot (layers.STEP_KV_CACHE).
    length = leaves[path[:-1] + (layers.ANCESTRY_CACHE,)].shape[1]
    entries_per_position = leaf.shape[axis] // length
    padding = [(0, 0)] * leaf.ndim
    padding[axis] = (0, (max_decode_length - length) * entries_per_position)
    return jnp.pad(leaf, padding)

  return traverse_util.unflatten_dict({path: extend(path, leaf)
                                       for path, leaf in leaves.items()})


STACKS = ('encoder', 'decoder')


def is_scanned(params: Any) -> bool:
  """Whether `params` are in the scanned layout (`stack_layers`)."""
  return SCANNED_LAYERS in params['encoder']


def stack_layers(params: Any) -> Any:
  """Unrolled parameters (`layers_<i>`, `adapters_<i>`) in the layout of scan_layers=True:
  each stack's layers (and adapters) stacked on a leading axis."""
  params = dict(params)
  for stack in STACKS:
    side = dict(params[stack])
    depth = sum(1 for name in side if name.startswith('layers_'))
    scanned = {SCANNED_LAYER: [side.pop(f'layers_{i}') for i in range(depth)]}
    if f'{adapters.MODULE_PREFIX}0' in side:
      scanned[SCANNED_ADAPTERS] = [side.pop(f'{adapters.MODULE_PREFIX}{i}')
                                   for i in range(depth)]
    side[SCANNED_LAYERS] = {name: jax.tree.map(lambda *leaves: jnp.stack(leaves), *layers)
                            for name, layers in scanned.items()}
    params[stack] = side
  return params


def unstack_layers(params: Any) -> Any:
  """The inverse of `stack_layers`: scanned parameters in the unrolled layout."""
  params = dict(params)
  for stack in STACKS:
    side = dict(params[stack])
    scanned = side.pop(SCANNED_LAYERS)
    depth = jax.tree.leaves(scanned[SCANNED_LAYER])[0].shape[0]
    for i in range(depth):
      for name, prefix in ((SCANNED_LAYER, 'layers_'),
                           (SCANNED_ADAPTERS, adapters.MODULE_PREFIX)):
        if name in scanned:
          side[f'{prefix}{i}'] = jax.tree.map(lambda leaf, i=i: leaf[i], scanned[name])
    params[stack] = side
  return params
