"""Transformer encoder-decoder for multilingual translation, in the seed systems' variants.

Choices (docs/methods.md#model has the formulas of every variant):
- `layer_norm` names a registered norm placement (`t5x_mt.model.norm_placements`: pre-LN,
  post-LN, post-LN with B2T's bottom-to-top connection), which runs each layer's residual
  sublayers with their norms, says whether a stack ends in a norm of its own and scales
  the initial layer weights.
- `position_embedding` names a registered position embedding
  (`t5x_mt.model.position_embeddings`: learned absolute positions, fixed sinusoids in two
  layouts, Shaw et al.'s relative tables in self-attention with their settings
  `relative_max_distance`, `relative_values` and `relative_in_decoder`), which says for
  each stack what it adds to the embeddings and the distance of its relative tables.
- LayerNorm with scale and bias; dense layers with biases; ReLU MLP (GELU selectable),
  with a width per stack when `encoder_mlp_dim`/`decoder_mlp_dim` are set.
- Token embeddings ~ N(0, 1) and not multiplied by sqrt(d). The decoder's input embedding
  is its output projection when `logits_via_embedding`, and logits are then multiplied by
  `parameter_layout.logit_scale` so that they start with unit variance (as in T5X);
  otherwise a separate [embed, vocab] projection (no bias) is used. fairseq's conventions,
  which imported checkpoints keep (t5x_mt.pretrained), are settings: `scale_embeddings`,
  `position_offset`, `decoder_start_token`, `layer_norm_epsilon`.
- Deep stacks: `scan_layers` runs each stack as one `nn.scan` over stacked layer
  parameters (one layer to compile, whatever the depth) and `remat_policy` recomputes
  activations in the backward pass instead of storing them (`REMAT_POLICIES`). Parameter
  paths and the conversions between layouts are `parameter_layout`'s; decoding always runs
  the unrolled stack.
- `decoder_only`: a language model, the decoder alone (no encoder, no cross-attention),
  which reads the target (its language tag first) and ignores any encoder input; it
  scores sentences for n-best reranking and translates nothing.
- Masks: token 0 is padding. Unpacked inputs derive segment ids from `tokens > 0` (the decoder
  from `decoder_target_tokens`, since its inputs may start with token 0); packed inputs use
  the given segment ids, still zeroed where the token is padding.
"""

import dataclasses
from typing import Any, Callable, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp

from t5x_mt.model import adapters
from t5x_mt import kernels
from t5x_mt.model import layers
from t5x_mt.model import lora
from t5x_mt.model import norm_placements
from t5x_mt.model import parameter_layout
from t5x_mt.model import position_embeddings
from t5x_mt.core import validation
from t5x_mt.core import directions
from t5x_mt.core.errors import UserError

Array = jax.Array


@dataclasses.dataclass(frozen=True)
class TransformerConfig:
  """Hyperparameters of `Transformer`; gin-configurable at the launch layer."""
  vocab_size: int
  emb_dim: int = 512
  num_heads: int = 8
  head_dim: int = 64
  mlp_dim: int = 2048
  encoder_mlp_dim: int = 0  # 0: mlp_dim (NT5's models widen one side only).
  decoder_mlp_dim: int = 0
  num_encoder_layers: int = 6
  num_decoder_layers: int = 6
  dropout_rate: float = 0.1
  attention_dropout_rate: float = 0.0
  share_encoder_embedding: bool = True  # The decoder's input and output are always shared.
  layer_norm: str = norm_placements.DEFAULT  # A name in norm_placements.
  position_embedding: str = position_embeddings.DEFAULT  # A name in position_embeddings.
  relative_max_distance: int = 16  # Shaw's k, with relative positions.
  relative_values: bool = True  # False: relative key tables only.
  relative_in_decoder: bool = False  # Relative decoder self-attention instead of sinusoids.
  max_length: int = 512
  dtype: Any = jnp.float32  # Compute dtype; parameters stay float32.
  attention_implementation: str = 'auto'  # A t5x_mt.kernels implementation, or 'auto'.
  logits_via_embedding: bool = True
  mlp_activation: str = 'relu'  # Or 'gelu'.
  # Adapters after every layer (t5x_mt.model.adapters): one per key, a target language
  # (adapter_by='target') or a direction ('direction'), with its bottleneck size.
  adapter_by: str = 'target'
  adapter_keys: tuple[str, ...] = ()
  adapter_bottlenecks: tuple[int, ...] = ()
  scan_layers: bool = False
  remat_policy: str = 'none'  # A key of REMAT_POLICIES.
  decoder_only: bool = False  # A language model: no encoder, no cross-attention.
  # fairseq's conventions, which checkpoints imported from it (M2M-100, NLLB-200) keep:
  # token embeddings times sqrt(emb_dim) and tied logits not scaled down; the first
  # position reading row `position_offset` of the position table; the decoder starting
  # from token `decoder_start_token` (its EOS) where t5x_mt's start from token 0.
  scale_embeddings: bool = False
  position_offset: int = 0
  decoder_start_token: int = 0
  layer_norm_epsilon: float = 1e-6
  logits_bias: bool = False  # A bias on the logits (Marian's final_logits_bias).
  # LoRA (t5x_mt.model.lora): rank 0 is off; the targets name dense layers.
  lora_rank: int = 0
  lora_alpha: float = 16.0
  lora_dropout: float = 0.0
  lora_targets: tuple[str, ...] = lora.ALL_PROJECTIONS

  def __post_init__(self):
    # gin may give lists; the config is hashed as a Flax module attribute.
    for field in ('adapter_keys', 'adapter_bottlenecks', 'lora_targets'):
      object.__setattr__(self, field, tuple(getattr(self, field)))
    adapters.check_config(self.adapter_by, self.adapter_keys, self.adapter_bottlenecks)
    self._check_values()
    lora.check_config(self)

  def _check_values(self) -> None:
    """Every field a gin binding could get wrong, named as it is bound."""
    name = lambda field: f'network.TransformerConfig.{field}'
    for field in ('vocab_size', 'emb_dim', 'num_heads', 'head_dim', 'mlp_dim', 'max_length'):
      validation.integer(name(field), getattr(self, field), minimum=1)
    for field in ('num_encoder_layers', 'num_decoder_layers', 'encoder_mlp_dim',
                  'decoder_mlp_dim', 'position_offset', 'decoder_start_token'):
      validation.integer(name(field), getattr(self, field), minimum=0)
    validation.integer(name('relative_max_distance'), self.relative_max_distance, minimum=1)
    validation.choice(name('layer_norm'), self.layer_norm, norm_placements.names())
    for field in ('dropout_rate', 'attention_dropout_rate'):
      validation.number(name(field), getattr(self, field), at_least=0.0, below=1.0)
    validation.number(name('layer_norm_epsilon'), self.layer_norm_epsilon, above=0.0)
    validation.choice(name('position_embedding'), self.position_embedding,
                      position_embeddings.names())
    validation.choice(name('mlp_activation'), self.mlp_activation, layers.ACTIVATIONS)
    validation.choice(name('attention_implementation'), self.attention_implementation,
                      ('auto', *kernels.implementations()))
    validation.choice(name('remat_policy'), self.remat_policy, REMAT_POLICIES)
    # Checked with or without adapter keys, so a typo never waits for the first adapter.
    directions.check_grouping(self.adapter_by, name('adapter_by'))
    self._check_combinations(name)

  def _check_combinations(self, name) -> None:
    """Settings that each hold but not together."""
    if self.decoder_only and self.num_encoder_layers:
      raise UserError(f"{name('decoder_only')}: a language model has no encoder; set "
                      f"{name('num_encoder_layers')} = 0, not {self.num_encoder_layers}")
    position_embeddings.check(self, name)

  @property
  def norm_placement(self) -> norm_placements.NormPlacement:
    """The norm placement `layer_norm` names."""
    return norm_placements.get(self.layer_norm)

  def mlp_dim_of(self, stack: str) -> int:
    """The feed-forward width of `stack`'s layers ('encoder' or 'decoder')."""
    return getattr(self, f'{stack}_mlp_dim') or self.mlp_dim

  def positions_of(self, stack: str) -> position_embeddings.PositionEmbedding:
    """The position embedding of `stack` ('encoder' or 'decoder'): the one
    `position_embedding` names, or the one it leaves that stack."""
    return position_embeddings.get(self.position_embedding).for_stack(self, stack)

  def relative_distance_of(self, stack: str) -> int:
    """Shaw's k in `stack`'s self-attention, 0 where it has no relative positions."""
    return self.positions_of(stack).relative_distance(self)

  def init_scale_of(self, stack: str) -> float:
    """What `stack`'s initial layer weights are multiplied by (B2T's depth^-1/2, else 1)."""
    return self.norm_placement.init_scale(getattr(self, f'num_{stack}_layers'))


# What the backward pass keeps of a layer's forward activations ('none': everything, no
# recomputation); the rest is recomputed, trading FLOPs for memory.
REMAT_POLICIES = {
    'none': None,
    'full': jax.checkpoint_policies.nothing_saveable,
    'dots': jax.checkpoint_policies.dots_saveable,
    'dots_with_no_batch_dims': jax.checkpoint_policies.dots_with_no_batch_dims_saveable,
}


def _segment_ids(tokens: Array, segment_ids: Optional[Array]) -> Array:
  """Segment ids with padding (token 0) forced to segment 0."""
  valid = (tokens > 0).astype(jnp.int32)
  return valid if segment_ids is None else segment_ids.astype(jnp.int32) * valid


def _sublayer(cfg: TransformerConfig, apply: Callable[[Array], Array], name: str,
              deterministic: bool) -> norm_placements.Sublayer:
  """The residual sublayer `name` computing `apply`, with its norm and its dropout, for
  the norm placement to run."""
  dropout = nn.Dropout(cfg.dropout_rate)
  norm = layers.LayerNorm(epsilon=cfg.layer_norm_epsilon, dtype=cfg.dtype,
                          name=parameter_layout.layer_norm_name(name, cfg.layer_norm))
  return norm_placements.Sublayer(
      apply, norm, lambda y: dropout(y, deterministic=deterministic))


def _lora(cfg: TransformerConfig, stack: str, module: str, projections: tuple[str, ...]
          ) -> tuple[tuple[str, lora.LoraSettings], ...]:
  """(projection, LoRA settings) of each of `module`'s projections that LoRA targets."""
  return tuple((projection, settings) for projection in projections
               if (settings := lora.settings_for(cfg, stack, module, projection)))


def _attention(cfg: TransformerConfig, stack: str, sublayer: str, fixed_kv: bool = False):
  relative = 0 if fixed_kv else cfg.relative_distance_of(stack)
  module = parameter_layout.ATTENTION_MODULES[sublayer]
  return layers.MultiHeadAttention(
      cfg.num_heads, cfg.head_dim, cfg.attention_dropout_rate, cfg.attention_implementation,
      dtype=cfg.dtype, fixed_kv=fixed_kv, init_scale=cfg.init_scale_of(stack),
      relative_max_distance=relative, relative_values=cfg.relative_values,
      lora=_lora(cfg, stack, module, (*parameter_layout.ATTENTION_PROJECTIONS,
                                      parameter_layout.ATTENTION_OUTPUT)),
      name=module)


def _mlp(cfg: TransformerConfig, stack: str, deterministic: bool):
  mlp = layers.MlpBlock(cfg.mlp_dim_of(stack), cfg.mlp_activation, dtype=cfg.dtype,
                        init_scale=cfg.init_scale_of(stack),
                        lora=_lora(cfg, stack, parameter_layout.MLP,
                                   (parameter_layout.MLP_INPUT, parameter_layout.MLP_OUTPUT)),
                        name=parameter_layout.MLP)
  return lambda y: mlp(y, deterministic)


class EncoderLayer(nn.Module):
  """Self-attention + MLP, with the norms of `config.layer_norm`."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, segment_ids: Array, relative_ids: Optional[Array],
               deterministic: bool) -> Array:
    cfg = self.config
    attention_sublayer, mlp_sublayer = parameter_layout.SUBLAYERS['encoder']
    attention = _attention(cfg, 'encoder', attention_sublayer)
    h = cfg.norm_placement.layer(x, [
        _sublayer(cfg, lambda y: attention(
            y, y, q_segment_ids=segment_ids, kv_segment_ids=segment_ids,
            relative_ids=relative_ids, deterministic=deterministic), attention_sublayer,
                  deterministic),
        _sublayer(cfg, _mlp(cfg, 'encoder', deterministic), mlp_sublayer, deterministic)])
    return nn.with_logical_constraint(h, ('batch', 'length', 'embed'))


class DecoderLayer(nn.Module):
  """Causal self-attention + cross-attention + MLP, with the norms of `config.layer_norm`."""
  config: TransformerConfig

  @nn.compact
  def __call__(self, x: Array, encoded: Array, segment_ids: Optional[Array],
               encoder_segment_ids: Array, relative_ids: Optional[Array],
               deterministic: bool, decode: bool, max_decode_length: Optional[int]) -> Array:
    cfg = self.config
    own_sublayer, cross_sublayer, mlp_sublayer = parameter_layout.SUBLAYERS['decoder']
    own = _attention(cfg, 'decoder', own_sublayer)
    sublayers = [_sublayer(cfg, lambda y: own(
        y, y, q_segment_ids=segment_ids, kv_segment_ids=segment_ids, causal=True,
        relative_ids=relative_ids, decode=decode, max_decode_length=max_decode_length,
        deterministic=deterministic), own_sublayer, deterministic)]
    if not cfg.decoder_only:
      cross = _attention(cfg, 'decoder', cross_sublayer, fixed_kv=True)
      sublayers.append(_sublayer(cfg, lambda y: cross(
          y, encoded, q_segment_ids=segment_ids, kv_segment_ids=encoder_segment_ids,
          decode=decode, deterministic=deterministic), cross_sublayer, deterministic))
    sublayers.append(_sublayer(cfg, _mlp(cfg, 'decoder', deterministic), mlp_sublayer,
                               deterministic))
    h = cfg.norm_placement.layer(x, sublayers)
    return nn.with_logical_constraint(h, ('batch', 'length', 'embed'))


def _relative_ids(cfg: TransformerConfig, stack: str, length: int,
                  positions: Optional[Array]) -> Optional[Array]:
  """Each self-attention pair's row of `stack`'s relative tables [B or 1, L, L] (positions
  restart in packed sequences), None without relative positions."""
  distance = cfg.relative_distance_of(stack)
  if not distance:
    return None
  if positions is None:
    positions = jnp.arange(length, dtype=jnp.int32)[None]
  return layers.relative_position_ids(positions, positions, distance)


def _embed(cfg: TransformerConfig, stack: str, embedding: layers.Embed, tokens: Array,
           positions: Optional[Array], deterministic: bool, decode: bool = False) -> Array:
  """Token embeddings (times sqrt(emb_dim) under `scale_embeddings`) plus `stack`'s
  absolute positions (if any), with dropout. The decoder's token 0, its start (padding
  elsewhere, which attends to nothing), reads `decoder_start_token`'s embedding."""
  if stack == 'decoder' and cfg.decoder_start_token:
    tokens = jnp.where(tokens == 0, cfg.decoder_start_token, tokens)
  x = embedding(tokens)
  if cfg.scale_embeddings:
    x = x * jnp.asarray(cfg.emb_dim ** 0.5, x.dtype)
  position_embedding = cfg.positions_of(stack)
  if position_embedding.absolute:
    x = layers.PositionEmbedding(cfg.max_length, position_embedding.name, dtype=cfg.dtype,
                                 offset=cfg.position_offset,
                                 name=parameter_layout.POSITION_EMBEDDING)(
                                     x, positions, decode=decode)
  return nn.Dropout(cfg.dropout_rate)(x, deterministic=deterministic)


def _final_norm(cfg: TransformerConfig, stack: str, x: Array) -> Array:
  if not parameter_layout.has_final_norm(cfg.layer_norm):
    return x
  return layers.LayerNorm(epsilon=cfg.layer_norm_epsilon, dtype=cfg.dtype,
                          name=parameter_layout.FINAL_NORMS[stack])(x)


def _adapters(cfg: TransformerConfig, layer: int):
  """The adapters after layer `layer`, or the identity for a model built without."""
  if not cfg.adapter_keys:
    return lambda x, index: x
  return adapters.Adapters(cfg.adapter_keys, cfg.adapter_bottlenecks, cfg.dtype,
                           name=parameter_layout.adapter_name(layer))


def _adapter_index(cfg: TransformerConfig, direction_ids: Optional[Array]) -> Optional[Array]:
  if not cfg.adapter_keys or direction_ids is None:
    return None
  return adapters.adapter_index(direction_ids, cfg.adapter_by, cfg.adapter_keys)


# The Python flags each layer's __call__ branches on (`self` counts as 0).
ENCODER_STATIC_ARGNUMS = (4,)
DECODER_STATIC_ARGNUMS = (6, 7, 8)


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
  def __call__(self, x: Array, segment_ids: Array, relative_ids: Optional[Array],
               adapter_index: Optional[Array]) -> tuple[Array, None]:
    cfg = self.config
    x = _remat(EncoderLayer, cfg, static_argnums=ENCODER_STATIC_ARGNUMS)(
        cfg, name=parameter_layout.SCANNED_LAYER)(x, segment_ids, relative_ids,
                                                  self.deterministic)
    return _stacked_adapters(cfg)(x, adapter_index), None


class DecoderBlock(nn.Module):
  """One step of the scanned decoder stack (training and scoring, never decoding)."""
  config: TransformerConfig
  deterministic: bool

  @nn.compact
  def __call__(self, x: Array, encoded: Array, segment_ids: Optional[Array],
               encoder_segment_ids: Array, relative_ids: Optional[Array],
               adapter_index: Optional[Array]) -> tuple[Array, None]:
    cfg = self.config
    x = _remat(DecoderLayer, cfg, static_argnums=DECODER_STATIC_ARGNUMS)(
        cfg, name=parameter_layout.SCANNED_LAYER)(
            x, encoded, segment_ids, encoder_segment_ids, relative_ids, self.deterministic,
            False, None)
    return _stacked_adapters(cfg)(x, adapter_index), None


def _stacked_adapters(cfg: TransformerConfig):
  if not cfg.adapter_keys:
    return lambda x, index: x
  return adapters.Adapters(cfg.adapter_keys, cfg.adapter_bottlenecks, cfg.dtype,
                           name=parameter_layout.SCANNED_ADAPTERS)


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
    x = _embed(cfg, 'encoder', self.embedding, tokens, positions, deterministic)
    relative_ids = _relative_ids(cfg, 'encoder', tokens.shape[1], positions)
    if cfg.scan_layers:
      stack = _scanned(EncoderBlock, cfg, cfg.num_encoder_layers)
      x, _ = stack(cfg, deterministic, name=parameter_layout.SCANNED_LAYERS)(
          x, segment_ids, relative_ids, adapter_index)
    else:
      layer = _remat(EncoderLayer, cfg, static_argnums=ENCODER_STATIC_ARGNUMS)
      for i in range(cfg.num_encoder_layers):
        x = layer(cfg, name=parameter_layout.layer_name(i))(x, segment_ids, relative_ids,
                                                            deterministic)
        x = _adapters(cfg, i)(x, adapter_index)
    return _final_norm(cfg, 'encoder', x)


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
    x = _embed(cfg, 'decoder', self.embedding, tokens, positions, deterministic, decode)
    # Decoding steps read their distances from the cache; the call that creates the
    # cache attends over its tokens as teacher forcing does.
    relative_ids = _relative_ids(cfg, 'decoder', tokens.shape[1], positions)
    if cfg.scan_layers:
      if decode:
        raise ValueError('decoding runs the unrolled stack: build the model with '
                         'scan_layers=False and pass parameter_layout.to_unrolled(params)')
      stack = _scanned(DecoderBlock, cfg, cfg.num_decoder_layers)
      x, _ = stack(cfg, deterministic, name=parameter_layout.SCANNED_LAYERS)(
          x, encoded, segment_ids, encoder_segment_ids, relative_ids, adapter_index)
    else:
      layer = _remat(DecoderLayer, cfg, static_argnums=DECODER_STATIC_ARGNUMS)
      for i in range(cfg.num_decoder_layers):
        x = layer(cfg, name=parameter_layout.layer_name(i))(
            x, encoded, segment_ids, encoder_segment_ids, relative_ids, deterministic, decode,
            max_decode_length)
        x = _adapters(cfg, i)(x, adapter_index)
    x = _final_norm(cfg, 'decoder', x)
    if return_hidden:
      return x
    if cfg.logits_via_embedding:
      logits = self.embedding.attend(x) * jnp.asarray(parameter_layout.logit_scale(cfg),
                                                      cfg.dtype)
    else:
      logits = layers.DenseGeneral((cfg.vocab_size,), ('embed', 'vocab'), use_bias=False,
                                   dtype=cfg.dtype, name=parameter_layout.OUTPUT_PROJECTION)(x)
    if cfg.logits_bias:
      logits = logits + self.param(
          parameter_layout.LOGITS_BIAS,
          nn.with_logical_partitioning(nn.initializers.zeros, ('vocab',)),
          (cfg.vocab_size,), jnp.float32).astype(cfg.dtype)
    logits = nn.with_logical_constraint(logits, ('batch', 'length', 'vocab'))
    return logits.astype(jnp.float32)


class Transformer(nn.Module):
  """Encoder-decoder translation model (see module docstring for the design choices).

  Parameters: `shared_embedding` (decoder input and, with `logits_via_embedding`, output;
  also the encoder's input when `share_encoder_embedding`), `encoder_embedding` (only when not
  shared), `encoder` (none in a `decoder_only` model), `decoder`.
  """
  config: TransformerConfig

  def setup(self):
    cfg = self.config
    self.shared_embedding = layers.Embed(cfg.vocab_size, cfg.emb_dim, dtype=cfg.dtype)
    if cfg.decoder_only:
      self.encoder = None  # A language model reads no source.
    elif cfg.share_encoder_embedding:
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
    encoded = None
    if not self.config.decoder_only:
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
