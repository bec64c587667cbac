"""Greedy search: the most likely token at every step, one hypothesis per source.

The cheapest search, and what beam search of one beam is; a Yoruba restorer and quick
evaluations decode with it.
"""

from typing import Optional, Sequence

import jax.numpy as jnp

from t5x_mt.decoding.search.common import Cache
from t5x_mt.decoding.search.common import ExtendCache
from t5x_mt.decoding.search.common import NBest
from t5x_mt.decoding.search.common import SearchProblem
from t5x_mt.decoding.search.common import TokensToLogits
from t5x_mt.decoding.search.common import one_hypothesis_per_row
from t5x_mt.decoding.search.common import ranked
from t5x_mt.decoding.search.greedy import GreedySettings


def greedy_search(tokens_to_logits: TokensToLogits,
                  initial_cache: Cache,
                  *,
                  prefix: Optional[jnp.ndarray],
                  max_decode_length: int,
                  eos_id: int = 1,
                  cache_lengths: Sequence[int] = (),
                  extend_cache: Optional[ExtendCache] = None,
                  no_repeat_ngram_size: int = 0,
                  max_lengths: Optional[jnp.ndarray] = None,
                  banned_tokens: Optional[jnp.ndarray] = None,
                  normalize: bool = True,
                  with_log_probs: bool = False) -> jnp.ndarray | tuple[jnp.ndarray, jnp.ndarray]:
  """Takes the most likely token at every step until EOS or max_decode_length.

  The arguments are `common.SearchProblem`'s (BOS 0 first input, forced prefix, cache
  layout and growth, output limits, banned tokens, `normalize`).
  Returns int32 [B, max_decode_length]: the prefix token first when given, 0 after EOS;
  `with_log_probs`: and each row's summed log-probability [B] (the generated tokens, EOS
  included, the forced prefix not), as beam search scores hypotheses.
  """
  sequences, log_probs = one_hypothesis_per_row(
      tokens_to_logits, initial_cache, lambda log_probs, _: jnp.argmax(log_probs, axis=-1),
      prefix=prefix, max_decode_length=max_decode_length, eos_id=eos_id,
      cache_lengths=cache_lengths, extend_cache=extend_cache,
      no_repeat_ngram_size=no_repeat_ngram_size, max_lengths=max_lengths,
      banned_tokens=banned_tokens, normalize=normalize)
  if with_log_probs:
    return sequences[:, 0], log_probs[:, 0]
  return sequences[:, 0]


def decode(settings: GreedySettings, problem: SearchProblem, outputs: int) -> NBest:
  """Each source's one output (`outputs` is 1)."""
  del settings, outputs
  sequences, log_probs = greedy_search(problem.tokens_to_logits, problem.initial_cache,
                                       with_log_probs=True, **problem.rules())
  return ranked(sequences[:, None], log_probs[:, None], problem.alpha,
                problem.prefix is not None, problem.eos_id)

