"""Sampling (see `sampling`): each step draws a token from the tempered, truncated
distribution, with a key of each sentence's own."""

from typing import Optional, Sequence

import jax
import jax.numpy as jnp

from t5x_mt.decoding.search.common import Cache
from t5x_mt.decoding.search.common import ExpandCache
from t5x_mt.decoding.search.common import ExtendCache
from t5x_mt.decoding.search.common import INVALID_BELOW
from t5x_mt.decoding.search.common import NBest
from t5x_mt.decoding.search.common import SearchProblem
from t5x_mt.decoding.search.common import TokensToLogits
from t5x_mt.decoding.search.common import expand_rows
from t5x_mt.decoding.search.common import one_hypothesis_per_row
from t5x_mt.decoding.search.common import ranked
from t5x_mt.decoding.search.common import top_k
from t5x_mt.decoding.search.sampling import SamplingSettings


def truncated_logits(log_probs: jnp.ndarray, settings: SamplingSettings) -> jnp.ndarray:
  """The logits [N, V] a step draws from: `log_probs` [N, V] tempered and truncated as
  `settings` say (-inf for a token that may not be drawn); tokens at or below
  INVALID_BELOW (banned, limited, not the forced prefix) are never drawn."""
  logits = jnp.where(log_probs > INVALID_BELOW, log_probs / settings.temperature, -jnp.inf)
  if settings.top_k:
    kth = top_k(logits, min(settings.top_k, logits.shape[-1]))[0][:, -1:]
    logits = jnp.where(logits >= kth, logits, -jnp.inf)
  if settings.top_p < 1:
    probs = jax.nn.softmax(logits, axis=-1)
    descending = -jnp.sort(-probs, axis=-1)
    before = jnp.cumsum(descending, axis=-1) - descending
    least = jnp.min(jnp.where(before < settings.top_p, descending, jnp.inf), axis=-1,
                    keepdims=True)
    logits = jnp.where(probs >= least, logits, -jnp.inf)
  if settings.epsilon > 0:
    probs = jax.nn.softmax(logits, axis=-1)
    kept = (probs >= settings.epsilon) | (probs == probs.max(axis=-1, keepdims=True))
    logits = jnp.where(kept, logits, -jnp.inf)
  return logits


def row_keys(seed: int, source_ids: jnp.ndarray, samples: int) -> jax.Array:
  """The keys [B * samples] of each source's samples, row b * samples + j for copy j of
  source b: fold_in(fold_in(key(seed), source_ids[b]), j)."""
  fold = jax.vmap(jax.random.fold_in, in_axes=(None, 0))
  per_source = fold(jax.random.key(seed), jnp.asarray(source_ids, jnp.uint32))
  copies = jnp.arange(samples, dtype=jnp.uint32)
  return jax.vmap(lambda key: fold(key, copies))(per_source).reshape(-1)


def sampling_search(tokens_to_logits: TokensToLogits,
                    initial_cache: Cache,
                    settings: SamplingSettings,
                    *,
                    source_ids: jnp.ndarray,
                    samples: int = 1,
                    expand_cache: ExpandCache = expand_rows,
                    prefix: Optional[jnp.ndarray],
                    max_decode_length: int,
                    eos_id: int = 1,
                    cache_lengths: Sequence[int] = (),
                    extend_cache: Optional[ExtendCache] = None,
                    no_repeat_ngram_size: int = 0,
                    max_lengths: Optional[jnp.ndarray] = None,
                    banned_tokens: Optional[jnp.ndarray] = None,
                    normalize: bool = True) -> tuple[jnp.ndarray, jnp.ndarray]:
  """`samples` independent samples of each source (uint32 `source_ids` [B] key them).

  The other arguments are `common.SearchProblem`'s. Returns int32 [B, samples,
  max_decode_length] (the prefix token first when given, 0 after EOS) and each sample's
  summed log-probability under the model [B, samples] (EOS included, the prefix not).
  """
  keys = row_keys(settings.seed, source_ids, samples)
  step_keys = jax.vmap(jax.random.fold_in, in_axes=(0, None))

  def draw(log_probs: jnp.ndarray, step: jnp.ndarray) -> jnp.ndarray:
    return jax.vmap(jax.random.categorical)(step_keys(keys, step),
                                            truncated_logits(log_probs, settings))

  return one_hypothesis_per_row(
      tokens_to_logits, initial_cache, draw, copies=samples, expand_cache=expand_cache,
      prefix=prefix, max_decode_length=max_decode_length, eos_id=eos_id,
      cache_lengths=cache_lengths, extend_cache=extend_cache,
      no_repeat_ngram_size=no_repeat_ngram_size, max_lengths=max_lengths,
      banned_tokens=banned_tokens, normalize=normalize)


def decode(settings: SamplingSettings, problem: SearchProblem, outputs: int) -> NBest:
  """`outputs` independent samples of each source, best first."""
  if problem.source_ids is None:
    raise ValueError('sampling draws by the sources\' ids; the problem gives none')
  sequences, log_probs = sampling_search(
      problem.tokens_to_logits, problem.initial_cache, settings,
      source_ids=problem.source_ids, samples=outputs, expand_cache=problem.expand_cache,
      **problem.rules())
  return ranked(sequences, log_probs, problem.alpha, problem.prefix is not None,
                problem.eos_id)

