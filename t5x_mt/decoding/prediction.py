"""A registered search method over a batch with any model that decodes step by step.

The search takes the model as a value: anything with the methods of `StepwiseModel`. A
run's Transformer (`models.TranslationModel`) is one; a model that runs several of them
and combines their steps is another, and decodes through the same code, with the same
output limits, banned pieces and batching, as a single model does.
"""

from collections.abc import Sequence
import functools
from typing import Any, Protocol

import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.model import decode_cache
from t5x_mt.decoding import search
from t5x_mt.decoding.search import common
from t5x_mt.core.directions import Direction

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
    `padded_length` positions, the search's bucket; `direction` [B] is each row's."""

  def start_decoding(self, params: Any, encoded: Any, encoder_tokens: Array,
                     direction: Array, cache_length: int
                     ) -> tuple[common.TokensToLogits, common.Cache]:
    """(the decoder's step over this batch, its first cache of `cache_length` steps);
    traced inside the search. `direction` [B] is each row's; the step's rows are each
    row's hypotheses in turn (`expand_cache`)."""

  def expand_cache(self, cache: common.Cache, beam_size: int) -> common.Cache:
    """The first step's cache widened to `beam_size` hypotheses per example (a beam's,
    or samples)."""

  def extend_cache(self, cache: common.Cache, length: int) -> common.Cache:
    """The cache grown to `length` steps."""


def predict_batch(model: StepwiseModel, params: Any, encoder_tokens: np.ndarray, *,
                  input_length: int, direction: int | Sequence[int],
                  prefix_id: int | Sequence[int] | None,
                  max_decode_length: int, search_settings: Any, alpha: float,
                  num_pieces: int, limits: common.OutputLimits = common.OutputLimits(),
                  banned_pieces: np.ndarray | None = None, nbest: int = 0
                  ) -> Array | common.NBest:
  """The output ids [B, max_decode_length] of `model` for a batch of encoder tokens, or
  with `nbest` > 0 its `nbest` outputs per source and their scores (`common.NBest`).

  `search_settings` are a registered search method's settings (`search.BeamSettings`,
  `search.SamplingSettings`, ...): the method decodes, and scores its hypotheses with
  length penalty `alpha`. `encoder_tokens` [B, bucket] is padded to the search's bucket
  length, and `input_length` is its longest row: the encoder runs at that length (its
  program has no loop, so a length of its own costs little to compile) and the search at
  the bucket. `direction` (its id, traced, so directions share one compilation; or one
  id per row, so that rows of several directions share the batch) chooses the model's
  adapters, if it has any; `prefix_id` (or one per row) forces the first output token;
  only ids below `num_pieces` are generated, within `limits`, and none that
  `banned_pieces` (bool [num_pieces], EOS aside) marks after the prefix. A method that
  draws keys each row's draws by its tokens and direction (`common.source_ids`).
  """
  search.method_of(search_settings).check_outputs(search_settings, nbest)
  direction = _per_row(direction, encoder_tokens.shape[0])
  prefix = None if prefix_id is None else _per_row(prefix_id, encoder_tokens.shape[0])
  encoded = model.encode(params, encoder_tokens[:, :input_length], direction,
                         padded_length=encoder_tokens.shape[1])
  return _search(model, params, encoded, encoder_tokens, prefix, direction, banned_pieces,
                 max_decode_length=max_decode_length, search_settings=search_settings,
                 alpha=alpha, num_pieces=num_pieces, limits=limits, nbest=nbest)


def _per_row(value: int | Sequence[int], rows: int) -> Array:
  """An id, or one per row, as one per row (int32 [rows])."""
  return jnp.asarray(np.broadcast_to(np.asarray(value, np.int32), (rows,)))


@functools.partial(jax.jit, static_argnames=('model', 'max_decode_length', 'search_settings',
                                             'alpha', 'num_pieces', 'limits', 'nbest'))
def _search(model: StepwiseModel, params, encoded, encoder_tokens, prefix, direction,
            banned_pieces, *, max_decode_length: int, search_settings: Any, alpha: float,
            num_pieces: int, limits: common.OutputLimits, nbest: int):
  """The search method of `search_settings` over an encoded batch, each row's direction
  and forced prefix its own."""
  cache_lengths = decode_cache.stage_lengths(max_decode_length)
  step, cache = model.start_decoding(params, encoded, encoder_tokens, direction,
                                     cache_lengths[0])

  def tokens_to_logits(tokens, model_cache):
    logits, model_cache = step(tokens, model_cache)
    # The embedding is padded past the vocabulary (run_vocabulary.padded_vocab_size); those
    # rows are no pieces, so they are never generated, however little the model trained.
    is_piece = jnp.arange(logits.shape[-1]) < num_pieces
    return jnp.where(is_piece, logits, common.NEG_INF), model_cache

  if banned_pieces is not None:
    # Rows past the vocabulary are never generated already (tokens_to_logits).
    banned_pieces = jnp.pad(banned_pieces, (0, model.vocab_size - num_pieces))
  problem = common.SearchProblem(
      tokens_to_logits, cache, prefix=prefix, max_decode_length=max_decode_length,
      alpha=alpha, source_ids=common.source_ids(encoder_tokens, direction),
      cache_lengths=cache_lengths, extend_cache=model.extend_cache,
      expand_cache=model.expand_cache, no_repeat_ngram_size=limits.no_repeat_ngram_size,
      max_lengths=limits.max_lengths(jnp.sum(encoder_tokens > 0, axis=1)),
      banned_tokens=banned_pieces, normalize=not model.step_gives_scores)
  found = search.method_of(search_settings).decode(search_settings, problem, max(nbest, 1))
  return found if nbest else found.sequences[:, 0, :]
