"""The autoregressive decoding cache: its layout, and everything done to it between steps.

`layers.MultiHeadAttention` reads and writes the cache one step at a time; this module
owns what surrounds the steps: creating the cache from an encoded batch, splitting off
the part that never changes, widening it for beam search and growing it in stages.

Layout. Cross-attention's keys and values (`FIXED_KV_CACHE`) are projected once from the
encoder's output; self-attention's (`STEP_KV_CACHE`) get one position per step. Keys are
kept as [batch, heads, head_dim, length] and values as [batch, heads, length, head_dim],
the layout `kernels.decoding_step_attention` reads without a copy. Self-attention keeps
them per beam slot and never reorders them: its length axis holds length * slots
entries, position t of slot s at t * slots + s, and `cached_ancestry`
[batch * slots, length] holds, for each hypothesis, the slot its ancestor wrote each
position from. Beam search reorders only the ancestry (its rows follow the hypotheses),
so a step never copies a layer's whole cache. Every other leaf is a scalar step index
(`cache_index`).
"""

from typing import Any, Protocol

from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp

# A pytree of arrays: scalars or arrays with the batch as their leading axis.
Cache = Any


class TokensToLogits(Protocol):
  """One decoder step: next-token logits for the last tokens of a batch of hypotheses."""

  def __call__(self, tokens: jnp.ndarray, cache: Cache) -> tuple[jnp.ndarray, Cache]:
    """Maps int32 tokens [N, 1] and a cache to fp32 logits [N, vocab] and the new cache."""


FIXED_KV_CACHE = ('cached_fixed_key', 'cached_fixed_value')
STEP_KV_CACHE = ('cached_key', 'cached_value')
ANCESTRY_CACHE = 'cached_ancestry'
# The length axis of each cached array, the one a step writes into and a cache grows along.
KV_CACHE_LENGTH_AXIS = {'cached_key': 3, 'cached_value': 2, ANCESTRY_CACHE: 1,
                        'cached_fixed_key': 3, 'cached_fixed_value': 2}

Cache = Any

# Decoding starts on a cache of this many steps and doubles it while hypotheses are alive.
# Every step reorders and reads the whole cache, so a short first stage pays off on short
# outputs; longer ones grow into the next stage after a copy of a few steps' keys.
FIRST_CACHE_LENGTH = 8


def stage_lengths(max_decode_length: int) -> tuple[int, ...]:
  """The cache lengths a search grows through (`decoding.beam_search`'s cache_lengths):
  FIRST_CACHE_LENGTH, doubled while short of max_decode_length, then max_decode_length.
  Doubling keeps the steps' cache at most twice what they need, in few compiled stages."""
  lengths = [min(FIRST_CACHE_LENGTH, max_decode_length)]
  while lengths[-1] < max_decode_length:
    lengths.append(min(2 * lengths[-1], max_decode_length))
  return tuple(lengths)


def init(module: nn.Module, params: Any, encoded: jax.Array,
         encoder_input_tokens: jax.Array, max_decode_length: int) -> Cache:
  """The 'cache' collection for decoding `encoded` [B, Le, E] autoregressively with
  `module` (a `network.Transformer`).

  Self-attention caches (keys and values of max_decode_length steps and one beam slot,
  the ancestry, scalar `cache_index`es) start empty; cross-attention keys and values (Le
  positions) are projected from `encoded` here, once, instead of at every step.
  """
  first_token = jnp.zeros((encoded.shape[0], 1), jnp.int32)
  _, variables = module.apply(
      {'params': params}, encoded, encoder_input_tokens, first_token, first_token,
      decode=True, max_decode_length=max_decode_length, mutable=['cache'], method='decode')
  return variables['cache']


def split_fixed(cache: Cache) -> tuple[Cache, Cache]:
  """(cross-attention keys and values, the rest) of a decoding cache.

  The first part never changes while decoding and is the same for every hypothesis of an
  example; beam search keeps it out of its loop state (see `decoding`), and the
  cross-attention folds an example's hypotheses into one query against it.
  """
  parts = ({}, {})
  for path, leaf in traverse_util.flatten_dict(cache).items():
    parts[path[-1] not in FIXED_KV_CACHE][path] = leaf
  return tuple(traverse_util.unflatten_dict(part) for part in parts)


def merge(fixed: Cache, rest: Cache) -> Cache:
  """The decoding cache that `split_fixed` split."""
  return traverse_util.unflatten_dict(
      {**traverse_util.flatten_dict(fixed), **traverse_util.flatten_dict(rest)})


def expand(cache: Cache, beam_size: int) -> Cache:
  """The cache of one hypothesis per example made the cache of beam_size (beam search's
  `expand_cache`): self-attention's keys and values get beam_size slots at every
  position (each a copy of the one there was), every other batch-leading leaf beam_size
  rows per example."""
  def expand_leaf(path, leaf):
    if jnp.ndim(leaf) == 0:
      return leaf
    axis = KV_CACHE_LENGTH_AXIS[path[-1]] if path[-1] in STEP_KV_CACHE else 0
    return jnp.repeat(leaf, beam_size, axis=axis)

  return traverse_util.path_aware_map(expand_leaf, cache)


def extend(cache: Cache, max_decode_length: int) -> Cache:
  """The cache with its self-attention keys, values and ancestry zero-padded to hold
  `max_decode_length` steps; what the cache holds and its step index are unchanged."""
  leaves = traverse_util.flatten_dict(cache)

  def extend_leaf(path, leaf):
    if path[-1] not in STEP_KV_CACHE + (ANCESTRY_CACHE,):
      return leaf
    axis = KV_CACHE_LENGTH_AXIS[path[-1]]
    # Keys and values hold every position once per beam slot.
    length = leaves[path[:-1] + (ANCESTRY_CACHE,)].shape[1]
    entries_per_position = leaf.shape[axis] // length
    padding = [(0, 0)] * leaf.ndim
    padding[axis] = (0, (max_decode_length - length) * entries_per_position)
    return jnp.pad(leaf, padding)

  return traverse_util.unflatten_dict({path: extend_leaf(path, leaf)
                                       for path, leaf in leaves.items()})
