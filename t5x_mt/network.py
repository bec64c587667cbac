"""Pre-LN Transformer encoder-decoder for multilingual translation.

Choices (the WMT systems of docs/methods.md#model are fairseq pre-LN transformers):
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
  (`models.to_scanned`/`to_unrolled` convert); decoding always runs the unrolled stack.
- Masks: token 0 is padding. Unpacked inputs derive segment ids from `tokens > 0` (the decoder
  from `decoder_target_tokens`, since its inputs may start with token 0); packed inputs use
  the given segment ids, still zeroed where the token is padding.
"""

import dataclasses
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from t5x_mt import adapters
from t5x_mt import kernels
from t5x_mt import layers
from t5x_mt import validation
from t5x_mt.data import directions

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
    # Checked with or without adapter keys, so a typo never waits for the first adapter.
    directions.check_grouping(self.adapter_by, name('adapter_by'))


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
  projected from)."""
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
                         'scan_layers=False and pass models.to_unrolled(params)')
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
    `return_hidden`, the states they are projected from).

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
