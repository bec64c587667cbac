"""Beam or greedy search over a batch with any model that decodes step by step.

The search takes the model as a value: anything with the methods of `StepwiseModel`. A
run's Transformer (`models.TranslationModel`) is one; a model that runs several of them
and combines their steps is another, and decodes through the same code, with the same
output limits, banned pieces and batching, as a single model does.
"""

import functools
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt import decode_cache
from t5x_mt import decoding

Array = jax.Array


class StepwiseModel(Protocol):
  """What the search needs of a model. Models are compared by identity: each one
  compiles its own search once per shape and setting."""

  vocab_size: int  # The width of its logits (the embedding's rows, padding included).

  def encode(self, params: Any, encoder_tokens: Array, direction: Array, *,
             padded_length: int) -> Any:
    """The encoder's output (any pytree) for tokens cut to their longest row, padded to
    `padded_length` positions, the search's bucket."""

  def start_decoding(self, params: Any, encoded: Any, encoder_tokens: Array,
                     direction: Array, cache_length: int
                     ) -> tuple[decoding.TokensToLogits, decoding.Cache]:
    """(the decoder's step over this batch, its first cache of `cache_length` steps);
    traced inside the search."""

  def expand_cache(self, cache: decoding.Cache, beam_size: int) -> decoding.Cache:
    """The first step's cache widened to `beam_size` hypotheses per example."""

  def extend_cache(self, cache: decoding.Cache, length: int) -> decoding.Cache:
    """The cache grown to `length` steps."""


def predict_batch(model: StepwiseModel, params: Any, encoder_tokens: np.ndarray, *,
                  input_length: int, direction: int, prefix_id: int | None,
                  max_decode_length: int, beam_size: int, alpha: float, stop: str,
                  num_pieces: int, limits: decoding.OutputLimits = decoding.OutputLimits(),
                  banned_pieces: np.ndarray | None = None) -> Array:
  """The best output ids [B, max_decode_length] of `model` for a batch of encoder tokens.

  `encoder_tokens` [B, bucket] is padded to the search's bucket length, and
  `input_length` is its longest row: the encoder runs at that length (its program has
  no loop, so a length of its own costs little to compile) and the search at the
  bucket. `direction` (its id, traced, so directions share one compilation) chooses
  the model's adapters, if it has any; `prefix_id` forces the first output token;
  only ids below `num_pieces` are generated, within `limits`, and none that
  `banned_pieces` (bool [num_pieces], EOS aside) marks after the prefix. beam_size 1
  searches greedily.
  """
  direction = jnp.int32(direction)
  prefix = None if prefix_id is None else jnp.full((encoder_tokens.shape[0],), prefix_id,
                                                   jnp.int32)
  encoded = model.encode(params, encoder_tokens[:, :input_length], direction,
                         padded_length=encoder_tokens.shape[1])
  return _search(model, params, encoded, encoder_tokens, prefix, direction, banned_pieces,
                 max_decode_length=max_decode_length, beam_size=beam_size, alpha=alpha,
                 stop=stop, num_pieces=num_pieces, limits=limits)


@functools.partial(jax.jit, static_argnames=('model', 'max_decode_length', 'beam_size',
                                             'alpha', 'stop', 'num_pieces', 'limits'))
def _search(model: StepwiseModel, params, encoded, encoder_tokens, prefix, direction,
            banned_pieces, *, max_decode_length: int, beam_size: int, alpha: float, stop: str,
            num_pieces: int, limits: decoding.OutputLimits):
  """Beam (or greedy) search over one direction's encoded batch."""
  cache_lengths = decode_cache.stage_lengths(max_decode_length)
  step, cache = model.start_decoding(params, encoded, encoder_tokens, direction,
                                     cache_lengths[0])

  def tokens_to_logits(tokens, model_cache):
    logits, model_cache = step(tokens, model_cache)
    # The embedding is padded past the vocabulary (run_vocabulary.padded_vocab_size); those
    # rows are no pieces, so they are never generated, however little the model trained.
    is_piece = jnp.arange(logits.shape[-1]) < num_pieces
    return jnp.where(is_piece, logits, decoding.NEG_INF), model_cache

  if banned_pieces is not None:
    # Rows past the vocabulary are never generated already (tokens_to_logits).
    banned_pieces = jnp.pad(banned_pieces, (0, model.vocab_size - num_pieces))
  search = dict(prefix=prefix, max_decode_length=max_decode_length,
                banned_tokens=banned_pieces,
                cache_lengths=cache_lengths, extend_cache=model.extend_cache,
                no_repeat_ngram_size=limits.no_repeat_ngram_size,
                max_lengths=limits.max_lengths(jnp.sum(encoder_tokens > 0, axis=1)))
  if beam_size == 1:
    return decoding.greedy_search(tokens_to_logits, cache, **search)
  sequences, _ = decoding.beam_search(tokens_to_logits, cache, beam_size=beam_size,
                                      alpha=alpha, stop=stop,
                                      expand_cache=model.expand_cache, **search)
  return sequences[:, 0, :]
