"""Several runs decoding as one model: an ensemble is a `prediction.StepwiseModel`.

Its members may differ in depth, width, layer-norm placement, positions and layer layout
(scanned or not); they share the vocabulary, so their steps score the same pieces. Each
step runs every member on its own cache and combines the members' log-probabilities of
the next piece, inside the one jitted search, as `ensemble_combinations` names.

Weights are normalised to sum to one, so an ensemble of one run, or of copies of one
run, scores exactly as that run does.
"""

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

from t5x_mt.decoding import ensemble_combinations
from t5x_mt.decoding.search import common
from t5x_mt.model import models
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

Array = jax.Array


class Ensemble:
  """Members' steps combined into one (see the module docstring); params are a tuple of
  the members' parameters, in their order.

  `num_pieces`: the vocabulary's size. A member's embedding rows past it are no pieces;
  they are left out of its distribution before it is combined, as the search leaves them
  out of a single model's.
  """

  # The step gives each piece's combined score, not logits to normalise (beam_search's
  # `normalize`).
  step_gives_scores = True

  def __init__(self, members: Sequence[models.TranslationModel], weights: Sequence[float],
               combination: str, num_pieces: int):
    if not members or len(members) != len(weights):
      raise UserError(f'ensemble: {len(members)} members and {len(weights)} weights')
    if any(w <= 0 for w in weights):
      raise UserError(f'ensemble: weights must be > 0, got {list(weights)}')
    ensemble_combinations.check('ensemble: combination', combination)
    self.members = tuple(members)
    total = sum(weights)
    self.weights = tuple(w / total for w in weights)
    self.combination = combination
    self.num_pieces = num_pieces
    sizes = {member.vocab_size for member in members}
    if len(sizes) > 1:
      raise UserError(f'ensemble: the members\' embeddings differ in rows ({sorted(sizes)}); '
                      'they must share one vocabulary')
    self.vocab_size = sizes.pop()
    self.max_length = min(member.max_length for member in members)

  def _identity(self) -> tuple:
    return self.members, self.weights, self.combination, self.num_pieces

  # Ensembles of equal members and settings decode alike: the searches, which take the
  # model as a static argument, reuse their traces across loads (as a member's do).
  def __eq__(self, other: Any) -> bool:
    return type(other) is type(self) and other._identity() == self._identity()

  def __hash__(self) -> int:
    return hash(self._identity())

  def check_direction(self, direction: Direction, command: str) -> None:
    for member in self.members:
      member.check_direction(direction, command)

  def encode(self, params: Sequence[Any], encoder_tokens: Array, direction: Array, *,
             padded_length: int) -> tuple[Any, ...]:
    return tuple(member.encode(member_params, encoder_tokens, direction,
                               padded_length=padded_length)
                 for member, member_params in zip(self.members, params))

  def start_decoding(self, params: Sequence[Any], encoded: Sequence[Any],
                     encoder_tokens: Array, direction: Array, cache_length: int
                     ) -> tuple[common.TokensToLogits, common.Cache]:
    """(the combined step, the members' caches as a tuple)."""
    started = [member.start_decoding(member_params, member_encoded, encoder_tokens,
                                     direction, cache_length)
               for member, member_params, member_encoded
               in zip(self.members, params, encoded)]
    steps = [step for step, _ in started]

    def step(tokens, caches):
      outputs = [member_step(tokens, cache) for member_step, cache in zip(steps, caches)]
      log_probs = [self._log_probs(logits) for logits, _ in outputs]
      return self.combine(log_probs), tuple(cache for _, cache in outputs)

    return step, tuple(cache for _, cache in started)

  def _log_probs(self, logits: Array) -> Array:
    """A member's log-probabilities over the vocabulary's pieces."""
    is_piece = jnp.arange(logits.shape[-1]) < self.num_pieces
    return jax.nn.log_softmax(
        jnp.where(is_piece, logits.astype(jnp.float32), common.NEG_INF), axis=-1)

  def combine(self, log_probs: Sequence[Array]) -> Array:
    """The members' log-probabilities [N, V] combined into the ensemble's scores [N, V]."""
    if self.combination == 'mean_log_prob':
      return sum(w * lp for w, lp in zip(self.weights, log_probs))
    weighted = jnp.stack([lp + jnp.log(w) for w, lp in zip(self.weights, log_probs)])
    return jax.nn.logsumexp(weighted, axis=0)

  def expand_cache(self, caches: Sequence[common.Cache], beam_size: int
                   ) -> tuple[common.Cache, ...]:
    return tuple(member.expand_cache(cache, beam_size)
                 for member, cache in zip(self.members, caches))

  def extend_cache(self, caches: Sequence[common.Cache], length: int
                   ) -> tuple[common.Cache, ...]:
    return tuple(member.extend_cache(cache, length)
                 for member, cache in zip(self.members, caches))
