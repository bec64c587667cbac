"""Language-specific adapters (Bapna & Firat 2019; Lan-Bridge WMT22; docs/methods.md#adapters).

A small residual block z + W_up ReLU(W_down LN(z)) after every encoder and decoder layer,
one per target language or per direction, with a bottleneck sized by the key's resource
level. Every token goes through the adapter of its own direction (packed rows mix
directions), tokens of directions without an adapter pass unchanged, and W_up starts at
zero so that adding adapters to a trained model starts from that model's outputs.

Adapters train on a frozen base (`trainer.make_optimizer.trainable='adapters'`: the base's
updates are masked to zero, so its parameters stay bit-identical) or jointly with it.
"""

from collections.abc import Sequence
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.core import languages
from t5x_mt.model import layers
from t5x_mt.core import directions
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError


def check_config(by: str, keys: Sequence[str], bottlenecks: Sequence[int]) -> None:
  """UserError unless `keys` are distinct languages (by target) or directions, each with a
  positive bottleneck."""
  if not keys:
    return
  directions.check_grouping(by, 'network.TransformerConfig.adapter_by')
  if len(bottlenecks) != len(keys) or any(b < 1 for b in bottlenecks):
    raise UserError('network.TransformerConfig.adapter_bottlenecks: one size >= 1 per '
                    f'adapter key ({len(keys)} keys, got {tuple(bottlenecks)})')
  if len(set(keys)) != len(keys):
    raise UserError(f'network.TransformerConfig.adapter_keys: repeated keys in {tuple(keys)}')
  for key in keys:
    if by == 'direction':
      Direction.parse(key, 'network.TransformerConfig.adapter_keys')
    else:
      languages.check_language(key, 'network.TransformerConfig.adapter_keys')


def check_directions(run_directions: Sequence[Direction], by: str, keys: Sequence[str],
                     where: str) -> None:
  """UserError naming the first direction whose adapter the model was not built with."""
  for direction in run_directions:
    if direction.key(by) not in keys:
      raise UserError(f'{where}: direction {direction.name} needs the adapter '
                      f'{direction.key(by)!r}, which the model was not built with '
                      f'(adapters: {", ".join(keys)})')


def _key_values(by: str, keys: Sequence[str]) -> np.ndarray:
  """What a token's direction id is compared with: target-language indices or direction ids."""
  if by == 'target':
    return np.array([languages.language_index(k) for k in keys], np.int32)
  return np.array([Direction.parse(k, 'adapter key').id for k in keys], np.int32)


def adapter_index(direction_ids: jax.Array, by: str, keys: Sequence[str]) -> jax.Array:
  """Per token, the index in `keys` of its adapter; -1 for padding and unknown directions."""
  direction_ids = direction_ids.astype(jnp.int32)
  if by == 'target':
    values = directions.target_index(direction_ids)
  else:
    values = direction_ids
  match = values[..., None] == jnp.asarray(_key_values(by, keys))
  found = match.any(-1) & (direction_ids > 0)
  return jnp.where(found, jnp.argmax(match, axis=-1), -1)


def encoder_direction_ids(encoder_segment_ids: jax.Array, decoder_segment_ids: jax.Array,
                          decoder_direction_ids: jax.Array) -> jax.Array:
  """Each source token's direction, from the target tokens of its segment: packing keeps a
  pair's segment id equal on both sides, and only the target side carries directions."""
  rows = jnp.arange(decoder_segment_ids.shape[0])[:, None]
  slots = max(encoder_segment_ids.shape[1], decoder_segment_ids.shape[1]) + 1
  per_segment = jnp.zeros((decoder_segment_ids.shape[0], slots), jnp.int32).at[
      rows, decoder_segment_ids].max(decoder_direction_ids.astype(jnp.int32) *
                                     (decoder_segment_ids > 0))
  return jnp.take_along_axis(per_segment, encoder_segment_ids, axis=1) * (
      encoder_segment_ids > 0)


class Adapter(nn.Module):
  """z + W_up ReLU(W_down LN(z)), W_up zero at initialisation."""
  bottleneck: int
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, normalized: jax.Array | None = None) -> jax.Array:
    """The residual for `x`; `normalized` (layers.normalize(x)) may be shared."""
    h = layers.LayerNorm(dtype=self.dtype, name='norm')(x, normalized)
    h = layers.DenseGeneral((self.bottleneck,), ('embed', 'mlp'), dtype=self.dtype,
                            name='down')(h)
    h = nn.relu(h)
    return layers.DenseGeneral((x.shape[-1],), ('mlp', 'embed'), dtype=self.dtype,
                               kernel_init=nn.initializers.zeros, name='up')(h)


class Adapters(nn.Module):
  """The adapters after one layer: each token gets its own adapter's residual (computed for
  every token and selected, which costs one bottleneck MLP per adapter).

  The adapters' LayerNorms share one normalisation of the input (each keeps its own scale
  and bias): the same values, but on CPU the backward pass of a LayerNorm per adapter cost
  several times the whole base model.
  """
  keys: Sequence[str]
  bottlenecks: Sequence[int]
  dtype: Any = jnp.float32

  @nn.compact
  def __call__(self, x: jax.Array, index: jax.Array | None) -> jax.Array:
    normalized = layers.normalize(x)
    for number, (key, bottleneck) in enumerate(zip(self.keys, self.bottlenecks)):
      residual = Adapter(bottleneck, self.dtype, name=key)(x, normalized)
      if index is not None:
        x = x + jnp.where((index == number)[..., None], residual, 0).astype(x.dtype)
    return x

