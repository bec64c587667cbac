"""Beam search: the hypotheses with the best length-normalised log-probability.

Beam search follows T5X / Flax examples/wmt: an alive set and a finished set of `beam_size`
hypotheses each, the top 2 * beam_size expansions per step (enough to refill the alive set
however many of them end in EOS), and an early stop once no alive hypothesis can beat the
worst finished one. Unlike T5X, a hypothesis that reaches `max_decode_length` without EOS is
finished there (as in fairseq), and a row that has fewer finished hypotheses than the
caller reads (`outputs`: an n-best list's length) is never settled early, so a batch item
gets `outputs` ranked outputs whenever that many hypotheses exist; a row that its stop
criterion settles finishes nothing more while the rest of its batch goes on, so its
outputs are those it would get alone; and with fairseq's stop rule ('beam_full') the
search is fairseq's, EOS ending a hypothesis only among a step's beam_size best
expansions.

The first step's cache is expanded to the beams (`expand_cache`), and after every step the
leaves with batch * beam rows are reordered to follow the surviving hypotheses; leaves
with one row per example stay where they are (a model may keep its state per beam slot
there and follow the hypotheses through an ancestry of its own, in rows that are
reordered). A beam of one is greedy search.
"""

import functools
from typing import Callable, Optional, Sequence

import flax
import jax
from jax import lax
import jax.numpy as jnp

from t5x_mt.core.errors import UserError
from t5x_mt.decoding.search import greedy_search
from t5x_mt.decoding.search.beam import STOP_CRITERIA
from t5x_mt.decoding.search.beam import BeamSettings
from t5x_mt.decoding.search.common import Cache
from t5x_mt.decoding.search.common import ExpandCache
from t5x_mt.decoding.search.common import ExtendCache
from t5x_mt.decoding.search.common import INVALID_BELOW
from t5x_mt.decoding.search.common import NBest
from t5x_mt.decoding.search.common import NEG_INF
from t5x_mt.decoding.search.common import SearchProblem
from t5x_mt.decoding.search.common import TokensToLogits
from t5x_mt.decoding.search.common import allowing_eos
from t5x_mt.decoding.search.common import batch_size_of
from t5x_mt.decoding.search.common import check_cache_lengths
from t5x_mt.decoding.search.common import expand_rows
from t5x_mt.decoding.search.common import generated_lengths
from t5x_mt.decoding.search.common import length_penalty
from t5x_mt.decoding.search.common import limit
from t5x_mt.decoding.search.common import staged_while_loop
from t5x_mt.decoding.search.common import step_log_probs
from t5x_mt.decoding.search.common import top_k
from t5x_mt.decoding.search.greedy import GreedySettings


@flax.struct.dataclass
class _BeamState:
  """Loop state of beam search; sequences include the initial BOS 0 at position 0."""
  cur_index: jnp.ndarray        # scalar int32: position of the token fed at this step
  alive_seqs: jnp.ndarray       # [B, K, L + 1] int32
  alive_log_probs: jnp.ndarray  # [B, K] fp32, summed log-probabilities
  finished_seqs: jnp.ndarray    # [B, K, L + 1] int32
  finished_scores: jnp.ndarray  # [B, K] fp32, log-probabilities / length_penalty
  finished_flags: jnp.ndarray   # [B, K] bool, False for slots not holding a hypothesis
  cache: Cache                  # leaves scalar or [B * K, ...]



def _gather_beams(x: jnp.ndarray, beam_indices: jnp.ndarray) -> jnp.ndarray:
  """Selects x[b, beam_indices[b, j]] for x of shape [B, K_in, ...] -> [B, K_out, ...]."""
  return jax.vmap(lambda row, idx: row[idx])(x, beam_indices)


def _gather_cache(cache: Cache, beam_indices: jnp.ndarray) -> Cache:
  """Reorders the [B * K, ...] cache leaves to follow the surviving beams; scalars and
  leaves of one row per example are left as they are."""
  batch_size, beam_size = beam_indices.shape

  def gather(x):
    if jnp.ndim(x) == 0 or x.shape[0] != batch_size * beam_size:
      return x
    x = x.reshape((batch_size, beam_size) + x.shape[1:])
    return _gather_beams(x, beam_indices).reshape((batch_size * beam_size,) + x.shape[2:])

  return jax.tree_util.tree_map(gather, cache)



def _beam_step(state: _BeamState, *, tokens_to_logits: TokensToLogits,
               prefix: Optional[jnp.ndarray], banned_tokens: Optional[jnp.ndarray],
               normalize: bool, settled_rows: Callable[[_BeamState], jnp.ndarray],
               **select) -> _BeamState:
  """Expands every alive hypothesis by one token and updates the alive and finished sets;
  the finished sets of the rows `settled_rows` names stay as they are."""
  batch_size, beam_size, _ = state.alive_seqs.shape
  i = state.cur_index
  tokens = lax.dynamic_slice_in_dim(state.alive_seqs, i, 1, axis=2)
  log_probs, new_cache = step_log_probs(
      tokens_to_logits, tokens.reshape(batch_size * beam_size, 1), state.cache, i, prefix,
      banned_tokens, normalize)
  return _select_beams(state, log_probs, new_cache, prefix=prefix,
                       settled=settled_rows(state), **select)


def _first_beam_step(state: _BeamState, initial_cache: Cache, *, expand_cache: ExpandCache,
                     tokens_to_logits: TokensToLogits, prefix: Optional[jnp.ndarray],
                     banned_tokens: Optional[jnp.ndarray], normalize: bool,
                     settled_rows: Callable[[_BeamState], jnp.ndarray],
                     **select) -> _BeamState:
  """`_beam_step` at step 0, where every beam of an example feeds the same BOS to the same
  cache: the model runs once per example and its output is repeated to the beams.

  No n-gram is complete before the first token, so the n-gram ban is left out here: on
  the constant initial state it is work XLA folds at compile time, slowly enough to log
  an alarm.
  """
  del settled_rows  # No row has finished anything before the first step.
  batch_size, beam_size, _ = state.alive_seqs.shape
  log_probs, new_cache = step_log_probs(
      tokens_to_logits, jnp.zeros((batch_size, 1), jnp.int32), initial_cache, state.cur_index,
      prefix, banned_tokens, normalize)
  return _select_beams(state, jnp.repeat(log_probs, beam_size, axis=0),
                       expand_cache(new_cache, beam_size), prefix=prefix,
                       settled=jnp.zeros((batch_size,), jnp.bool_),
                       **{**select, 'no_repeat_ngram_size': 0})


def _select_beams(state: _BeamState, log_probs: jnp.ndarray, new_cache: Cache, *,
                  prefix: Optional[jnp.ndarray], settled: jnp.ndarray, alpha: float,
                  max_decode_length: int, eos_id: int, no_repeat_ngram_size: int,
                  max_lengths: Optional[jnp.ndarray], finish_in_top_k: bool) -> _BeamState:
  """The alive and finished sets after the alive hypotheses' next-token `log_probs`
  [B * K, vocab], restricted by the output limits; `new_cache` is the cache after that
  step, reordered here with the beams. Rows `settled` [B] finish nothing more: a row's
  search ends where it would end alone, whatever the other rows of its batch still do.
  With `finish_in_top_k` only the K best expansions may end here (fairseq's rule), else
  any of the 2K best (T5X's)."""
  batch_size, beam_size, _ = state.alive_seqs.shape
  i = state.cur_index
  vocab_size = log_probs.shape[-1]
  log_probs = limit(
      log_probs, state.alive_seqs.reshape(batch_size * beam_size, -1), i,
      no_repeat_ngram_size=no_repeat_ngram_size,
      max_lengths=None if max_lengths is None else jnp.repeat(max_lengths, beam_size),
      has_prefix=prefix is not None, eos_id=eos_id)

  # The best 2K of the K * V expansions: at most K of them end here, K stay alive.
  candidates = state.alive_log_probs[:, :, None] + log_probs.reshape(
      batch_size, beam_size, vocab_size)
  topk_log_probs, topk_ids = top_k(
      candidates.reshape(batch_size, beam_size * vocab_size), 2 * beam_size)
  topk_beams = topk_ids // vocab_size
  topk_tokens = topk_ids % vocab_size
  topk_seqs = lax.dynamic_update_slice_in_dim(
      _gather_beams(state.alive_seqs, topk_beams), topk_tokens[:, :, None], i + 1, axis=2)

  ends_here = (topk_tokens == eos_id) | (i + 1 == max_decode_length)
  exists = topk_log_probs > INVALID_BELOW
  newly_finished = ends_here & exists & ~settled[:, None]
  if finish_in_top_k:
    newly_finished &= jnp.arange(2 * beam_size) < beam_size

  # Alive set: the best K expansions that do not end here.
  alive_log_probs, alive_pos = lax.top_k(
      jnp.where(ends_here, NEG_INF + topk_log_probs, topk_log_probs), beam_size)
  alive_seqs = _gather_beams(topk_seqs, alive_pos)
  new_cache = _gather_cache(new_cache, _gather_beams(topk_beams, alive_pos))

  # Finished set: the best K of the old finished set and the hypotheses ending here.
  generated_length = i + 1 - (0 if prefix is None else 1)
  new_scores = topk_log_probs / length_penalty(generated_length, alpha)
  new_scores = jnp.where(newly_finished, new_scores, NEG_INF + new_scores)
  finished_scores, finished_pos = lax.top_k(
      jnp.concatenate([state.finished_scores, new_scores], axis=1), beam_size)
  finished_seqs = _gather_beams(
      jnp.concatenate([state.finished_seqs, topk_seqs], axis=1), finished_pos)
  finished_flags = _gather_beams(
      jnp.concatenate([state.finished_flags, newly_finished], axis=1), finished_pos)

  return _BeamState(cur_index=i + 1, alive_seqs=alive_seqs, alive_log_probs=alive_log_probs,
                    finished_seqs=finished_seqs, finished_scores=finished_scores,
                    finished_flags=finished_flags, cache=new_cache)


def _beam_search_continues(state: _BeamState, *, alpha: float, max_decode_length: int,
                           has_prefix: bool, stop: str, outputs: int) -> jnp.ndarray:
  """False at the length limit, or once every row is settled by the `stop` criterion.

  Log-probabilities only fall as a hypothesis grows and, for alpha >= 0, the penalty only
  grows, so an alive hypothesis scores at most log_prob / length_penalty(longest length).
    exact      no alive beam can beat the worst of beam_size finished hypotheses
    best       no alive beam can beat the best finished hypothesis (exact for the top one)
    beam_full  as `best`, or beam_size hypotheses have finished (fairseq's rule; with it,
               as in fairseq, a hypothesis finishes only among a step's beam_size best
               expansions)
  `best` and `beam_full` settle a row by the bound only once `outputs` of its hypotheses
  have finished: the bound says the best of them is final, not that more will finish, and
  an n-best list of `outputs` needs that many (the hypotheses finishing later score below
  the bound, so the best one stays the same).
  """
  settled = _rows_settled(state, alpha=alpha, max_decode_length=max_decode_length,
                         has_prefix=has_prefix, stop=stop, outputs=outputs)
  return (state.cur_index < max_decode_length) & ~jnp.all(settled)


def _rows_settled(state: _BeamState, *, alpha: float, max_decode_length: int,
                  has_prefix: bool, stop: str, outputs: int) -> jnp.ndarray:
  """Whether each row [B] is done by the `stop` criterion (`_beam_search_continues`)."""
  longest = max_decode_length - (1 if has_prefix else 0)
  best_alive_bound = state.alive_log_probs[:, 0] / length_penalty(longest, alpha)
  finished = jnp.where(state.finished_flags, state.finished_scores, NEG_INF)
  if stop == 'exact':
    return jnp.min(finished, axis=1) > best_alive_bound
  enough = jnp.sum(state.finished_flags, axis=1) >= outputs
  settled = enough & (jnp.max(finished, axis=1) > best_alive_bound)
  if stop == 'beam_full':
    settled |= jnp.all(state.finished_flags, axis=1)
  return settled


def beam_search(tokens_to_logits: TokensToLogits,
                initial_cache: Cache,
                *,
                prefix: Optional[jnp.ndarray],
                beam_size: int = 4,
                alpha: float = 1.0,
                max_decode_length: int,
                eos_id: int = 1,
                stop: str = 'exact',
                outputs: int = 1,
                cache_lengths: Sequence[int] = (),
                extend_cache: Optional[ExtendCache] = None,
                expand_cache: ExpandCache = expand_rows,
                no_repeat_ngram_size: int = 0,
                max_lengths: Optional[jnp.ndarray] = None,
                banned_tokens: Optional[jnp.ndarray] = None,
                normalize: bool = True,
                ) -> tuple[jnp.ndarray, jnp.ndarray]:
  """Beam search for the hypotheses with the best length-normalised log-probability.

  A hypothesis' score is sum(log p(token)) / length ** alpha (`length_penalty`): the sum runs
  over the generated tokens including EOS, `length` counts them, and a forced prefix token
  adds nothing to either. alpha = 1.0 (the default) ranks by mean per-token log-probability,
  the "length penalty 1.0" of fairseq-based WMT systems; alpha = 0 ranks by raw sum.
  A hypothesis ends at EOS or at `max_decode_length` tokens.

  Jittable with beam_size, alpha, max_decode_length and eos_id static.

  Args:
    tokens_to_logits: one decoder step, see `TokensToLogits`; called on [B * beam, 1].
    initial_cache: decoder cache for B rows (leaves scalar or batch-leading).
    prefix: int32 [B], the forced first output token (target-language tag), or None.
    beam_size: hypotheses kept alive (and returned) per batch item.
    alpha: length-penalty exponent, >= 0.
    max_decode_length: most output tokens, the forced prefix included.
    eos_id: the token that ends a hypothesis.
    stop: when the search ends before max_decode_length (see `_beam_search_continues`):
      'exact' (every returned hypothesis is the true n-best under the beam), 'best' (only
      beam 0 is guaranteed, which is all translation uses), or 'beam_full' (fairseq's
      search: a hypothesis finishes only among a step's beam_size best expansions, and a
      row is done once beam_size hypotheses have finished; a later hypothesis could still
      have scored better). The bound that makes 'exact' and 'best' safe divides
      by the longest possible length, so with alpha > 0 those often run to the limit.
    outputs: the hypotheses per row the caller reads (an n-best list's length, <=
      beam_size): no row stops before that many have finished.
    The other arguments are `common.SearchProblem`'s; `expand_cache` makes the first
    step's cache (B rows) the beams' (see the module docstring).

  Returns:
    sequences: int32 [B, beam_size, max_decode_length], best first, without the initial BOS,
      starting with the prefix token when given, 0 after EOS. Slots beyond the number of
      existing hypotheses (tiny vocabularies) hold zeros.
    scores: fp32 [B, beam_size], the scores above, best first; NEG_INF in empty slots.
  """
  if alpha < 0:
    raise UserError(f'beam_search: length penalty alpha must be >= 0, got {alpha}')
  if stop not in STOP_CRITERIA:
    raise UserError(f'beam_search: stop must be one of {STOP_CRITERIA}, got {stop!r}')
  if beam_size < 1 or max_decode_length < 1:
    raise UserError(f'beam_search: beam_size ({beam_size}) and max_decode_length '
                    f'({max_decode_length}) must be >= 1')
  if not 1 <= outputs <= beam_size:
    raise UserError(f'beam_search: outputs must be from 1 to beam_size ({beam_size}), '
                    f'got {outputs}')
  lengths = check_cache_lengths(cache_lengths, extend_cache, max_decode_length)
  batch_size = batch_size_of(prefix, initial_cache)
  seq_shape = (batch_size, beam_size, max_decode_length + 1)
  # Only beam 0 exists at the start; the other beams are copies that can never win.
  initial_log_probs = jnp.tile(
      jnp.array([0.0] + [NEG_INF] * (beam_size - 1), jnp.float32), (batch_size, 1))
  state = _BeamState(
      cur_index=jnp.array(0, jnp.int32),
      alive_seqs=jnp.zeros(seq_shape, jnp.int32),
      alive_log_probs=initial_log_probs,
      finished_seqs=jnp.zeros(seq_shape, jnp.int32),
      finished_scores=jnp.full((batch_size, beam_size), NEG_INF, jnp.float32),
      finished_flags=jnp.zeros((batch_size, beam_size), jnp.bool_),
      cache=None)
  if prefix is not None:
    prefix = jnp.asarray(prefix, jnp.int32)
  stop_options = dict(alpha=alpha, max_decode_length=max_decode_length,
                      has_prefix=prefix is not None, stop=stop, outputs=outputs)
  step_options = dict(tokens_to_logits=tokens_to_logits, prefix=prefix,
                      banned_tokens=allowing_eos(banned_tokens, eos_id), normalize=normalize,
                      settled_rows=functools.partial(_rows_settled, **stop_options),
                      finish_in_top_k=stop == 'beam_full',
                      alpha=alpha, max_decode_length=max_decode_length, eos_id=eos_id,
                      no_repeat_ngram_size=no_repeat_ngram_size, max_lengths=max_lengths)
  state = _first_beam_step(state, initial_cache, expand_cache=expand_cache, **step_options)

  def result(state: _BeamState) -> tuple[jnp.ndarray, jnp.ndarray]:
    sequences = jnp.where(state.finished_flags[:, :, None], state.finished_seqs[:, :, 1:], 0)
    return sequences, jnp.where(state.finished_flags, state.finished_scores, NEG_INF)

  return staged_while_loop(
      functools.partial(_beam_search_continues, **stop_options),
      functools.partial(_beam_step, **step_options), state, lengths=lengths,
      extend_cache=extend_cache, result=result)


def decode(settings: BeamSettings, problem: SearchProblem, outputs: int) -> NBest:
  """The `outputs` (<= beam_size) best hypotheses of each source; greedy search's one
  with a beam of one."""
  if settings.beam_size == 1:
    return greedy_search.decode(GreedySettings(), problem, outputs)
  sequences, scores = beam_search(
      problem.tokens_to_logits, problem.initial_cache, beam_size=settings.beam_size,
      alpha=problem.alpha, stop=settings.stop, outputs=outputs,
      expand_cache=problem.expand_cache, **problem.rules())
  sequences, scores = sequences[:, :outputs], scores[:, :outputs]
  lengths = generated_lengths(sequences, problem.prefix is not None, problem.eos_id)
  return NBest(sequences, scores, scores * length_penalty(lengths, problem.alpha), lengths)

