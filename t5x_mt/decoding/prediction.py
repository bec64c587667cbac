"""Beam or greedy search over a batch with any model that decodes step by step.

The search takes the model as a value: anything with the methods of `StepwiseModel`. A
run's Transformer (`models.TranslationModel`) is one; a model that runs several of them
and combines their steps is another, and decodes through the same code, with the same
output limits, banned pieces and batching, as a single model does.
"""

import functools
from typing import Any, NamedTuple, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.model import decode_cache
from t5x_mt.decoding import search
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

Array = jax.Array


class StepwiseModel(Protocol):
  """What the search needs of a model. Models are compared by identity: each one
  compiles its own search once per shape and setting."""

  vocab_size: int  # The width of its logits (the embedding's rows, padding included).
  max_length: int  # The longest input and output it reads.
  # Whether its step gives each piece's score as it is (an ensemble's combination) rather
  # than logits, which the search turns into log-probabilities.
  step_gives_scores: bool

  def check_direction(self, direction: Direction, command: str) -> None:
    """A UserError naming `command` if the model cannot translate `direction`."""

  def encode(self, params: Any, encoder_tokens: Array, direction: Array, *,
             padded_length: int) -> Any:
    """The encoder's output (any pytree) for tokens cut to their longest row, padded to
    `padded_length` positions, the search's bucket."""

  def start_decoding(self, params: Any, encoded: Any, encoder_tokens: Array,
                     direction: Array, cache_length: int
                     ) -> tuple[search.TokensToLogits, search.Cache]:
    """(the decoder's step over this batch, its first cache of `cache_length` steps);
    traced inside the search."""

  def expand_cache(self, cache: search.Cache, beam_size: int) -> search.Cache:
    """The first step's cache widened to `beam_size` hypotheses per example."""

  def extend_cache(self, cache: search.Cache, length: int) -> search.Cache:
    """The cache grown to `length` steps."""


class NBest(NamedTuple):
  """A search's `n` best outputs per example, best first."""
  sequences: Array  # int32 [B, n, max_decode_length], as `predict_batch` gives one
  scores: Array     # fp32 [B, n], log-probability / length_penalty, the search's ranking
  log_probs: Array  # fp32 [B, n], summed log-probability (or ensemble score)
  lengths: Array    # int32 [B, n], generated tokens (EOS in, forced prefix out)


def predict_batch(model: StepwiseModel, params: Any, encoder_tokens: np.ndarray, *,
                  input_length: int, direction: int, prefix_id: int | None,
                  max_decode_length: int, beam_size: int, alpha: float, stop: str,
                  num_pieces: int, limits: search.OutputLimits = search.OutputLimits(),
                  banned_pieces: np.ndarray | None = None, nbest: int = 0
                  ) -> Array | NBest:
  """The best output ids [B, max_decode_length] of `model` for a batch of encoder tokens,
  or with `nbest` > 0 its `nbest` (<= beam_size) best outputs and their scores.

  `encoder_tokens` [B, bucket] is padded to the search's bucket length, and
  `input_length` is its longest row: the encoder runs at that length (its program has
  no loop, so a length of its own costs little to compile) and the search at the
  bucket. `direction` (its id, traced, so directions share one compilation) chooses
  the model's adapters, if it has any; `prefix_id` forces the first output token;
  only ids below `num_pieces` are generated, within `limits`, and none that
  `banned_pieces` (bool [num_pieces], EOS aside) marks after the prefix. beam_size 1
  searches greedily.
  """
  if not 0 <= nbest <= beam_size:
    raise UserError(f'--nbest: at most the beam size ({beam_size}) hypotheses, got {nbest}')
  direction = jnp.int32(direction)
  prefix = None if prefix_id is None else jnp.full((encoder_tokens.shape[0],), prefix_id,
                                                   jnp.int32)
  encoded = model.encode(params, encoder_tokens[:, :input_length], direction,
                         padded_length=encoder_tokens.shape[1])
  return _search(model, params, encoded, encoder_tokens, prefix, direction, banned_pieces,
                 max_decode_length=max_decode_length, beam_size=beam_size, alpha=alpha,
                 stop=stop, num_pieces=num_pieces, limits=limits, nbest=nbest)


@functools.partial(jax.jit, static_argnames=('model', 'max_decode_length', 'beam_size',
                                             'alpha', 'stop', 'num_pieces', 'limits',
                                             'nbest'))
def _search(model: StepwiseModel, params, encoded, encoder_tokens, prefix, direction,
            banned_pieces, *, max_decode_length: int, beam_size: int, alpha: float, stop: str,
            num_pieces: int, limits: search.OutputLimits, nbest: int):
  """Beam (or greedy) search over one direction's encoded batch."""
  cache_lengths = decode_cache.stage_lengths(max_decode_length)
  step, cache = model.start_decoding(params, encoded, encoder_tokens, direction,
                                     cache_lengths[0])

  def tokens_to_logits(tokens, model_cache):
    logits, model_cache = step(tokens, model_cache)
    # The embedding is padded past the vocabulary (run_vocabulary.padded_vocab_size); those
    # rows are no pieces, so they are never generated, however little the model trained.
    is_piece = jnp.arange(logits.shape[-1]) < num_pieces
    return jnp.where(is_piece, logits, search.NEG_INF), model_cache

  if banned_pieces is not None:
    # Rows past the vocabulary are never generated already (tokens_to_logits).
    banned_pieces = jnp.pad(banned_pieces, (0, model.vocab_size - num_pieces))
  common = dict(prefix=prefix, max_decode_length=max_decode_length,
                banned_tokens=banned_pieces, normalize=not model.step_gives_scores,
                cache_lengths=cache_lengths, extend_cache=model.extend_cache,
                no_repeat_ngram_size=limits.no_repeat_ngram_size,
                max_lengths=limits.max_lengths(jnp.sum(encoder_tokens > 0, axis=1)))
  if beam_size == 1:
    if not nbest:
      return search.greedy_search(tokens_to_logits, cache, **common)
    sequences, log_probs = search.greedy_search(tokens_to_logits, cache,
                                                  with_log_probs=True, **common)
    return _nbest(sequences[:, None], log_probs[:, None], alpha, prefix is not None)
  sequences, scores = search.beam_search(tokens_to_logits, cache, beam_size=beam_size,
                                           alpha=alpha, stop=stop,
                                           expand_cache=model.expand_cache, **common)
  if not nbest:
    return sequences[:, 0, :]
  sequences, scores = sequences[:, :nbest], scores[:, :nbest]
  lengths = search.generated_lengths(sequences, prefix is not None)
  return NBest(sequences, scores, scores * search.length_penalty(lengths, alpha), lengths)


def _nbest(sequences: Array, log_probs: Array, alpha: float, has_prefix: bool) -> NBest:
  """The n-best of summed log-probabilities: ranked by them over length_penalty."""
  lengths = search.generated_lengths(sequences, has_prefix)
  return NBest(sequences, log_probs / search.length_penalty(lengths, alpha), log_probs,
               lengths)
