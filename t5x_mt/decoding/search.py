"""Autoregressive decoding with a KV cache: beam search and greedy search.

Both searches drive a model through one function, `tokens_to_logits`, that takes the last
token of every hypothesis and the decoder cache and returns next-token logits and the updated
cache. They know nothing else about the model, so the same code decodes a single Transformer,
an ensemble (a `tokens_to_logits` that averages log-probabilities) or a toy model in a test.

Conventions shared with the model and the data pipeline:
- The decoder's first input is token 0 (BOS is the pad id, seqio's shift-right convention).
- `prefix` forces the first output token: the target-language tag `<2xxx_Xxxx>` that
  T-ENC-T-DEC and S-ENC-T-DEC decoders start with. A forced token is not scored and does not
  count towards the length (it plays the part of fairseq's `--decoder-langtok` BOS).
- `banned_tokens` (bool [vocab]) are never generated: a vocabulary's tags and control
  pieces mark data, not text, however much a model prefers them. The forced prefix is
  exempt (it is such a tag), and so is EOS, which ends every hypothesis.
- Cache leaves are either scalars (`cache_index`: shared by every row, left as they are) or
  have the batch as their leading axis. Beam search expands the first step's cache to the
  beams (`expand_cache`; by default every batch-leading leaf is repeated to batch * beam
  rows) and after every step reorders the leaves with batch * beam rows to follow the
  surviving hypotheses; leaves with one row per example stay where they are (a model may
  keep its state per beam slot there and follow the hypotheses through an ancestry of its
  own, in rows that are reordered). State that every hypothesis of an example shares
  (cross-attention keys and values) stays out of the cache, in `tokens_to_logits`'
  closure, so that it is neither repeated nor reordered.
- A cache may grow (`cache_lengths`, `extend_cache`): the search starts on a cache for the
  first few steps and extends it only when a row is still alive at its end. A step's cost
  follows the cache's length (self-attention reads all of it every step), so
  short outputs under a long limit do not pay for the limit at every step.

Beam search follows T5X / Flax examples/wmt: an alive set and a finished set of `beam_size`
hypotheses each, the top 2 * beam_size expansions per step (enough to refill the alive set
however many of them end in EOS), and an early stop once no alive hypothesis can beat the
worst finished one. Unlike T5X, a hypothesis that reaches `max_decode_length` without EOS is
finished there (as in fairseq), so a batch item always gets `beam_size` ranked outputs when
that many hypotheses exist; a row that its stop criterion settles finishes nothing more
while the rest of its batch goes on, so its outputs are those it would get alone; and with
fairseq's stop rule ('beam_full') the search is fairseq's, EOS ending a hypothesis only
among a step's beam_size best expansions.
"""

import dataclasses
import functools
from typing import Any, Callable, Optional, Sequence

import flax
import jax
from jax import lax
import jax.numpy as jnp

from t5x_mt.core.errors import UserError
from t5x_mt.model.decode_cache import Cache
from t5x_mt.model.decode_cache import TokensToLogits

# Stands in for -inf where arithmetic on the value must stay finite.
NEG_INF = -1.0e7
# Log-probabilities below this mark a hypothesis that does not exist (a padding beam).
_INVALID_BELOW = 0.5 * NEG_INF


def length_penalty(length: jnp.ndarray, alpha: float) -> jnp.ndarray:
  """Returns length ** alpha, the divisor of a hypothesis' summed log-probability.

  This is fairseq's `--lenpen` (the setting behind the WMT22 systems' "length penalty 1.0"):
  with alpha = 1 a hypothesis is ranked by its mean per-token log-probability. `length`
  counts the generated tokens including EOS and excluding a forced prefix; it is clipped to
  at least 1 so that a prefix-only output divides by 1.
  """
  return jnp.maximum(jnp.asarray(length, jnp.float32), 1.0) ** alpha


@dataclasses.dataclass(frozen=True)
class OutputLimits:
  """What a search may not output, whatever the model prefers; both off by default.

  A weak model loops ("the the the ...") and runs to the length limit. These are the
  remedies users of fairseq and Transformers know:
    no_repeat_ngram_size: n > 0 forbids a token that would complete an n-gram the
      hypothesis already holds (fairseq's --no-repeat-ngram-size).
    max_length_ratio, max_length_offset: with ratio > 0 a hypothesis of a source of S
      pieces (its tag and EOS included) ends, with EOS, after at most
      ceil(ratio * S + offset) generated tokens (fairseq's --max-len-a/--max-len-b).
  """
  no_repeat_ngram_size: int = 0
  max_length_ratio: float = 0.0
  max_length_offset: int = 10

  def max_lengths(self, source_lengths: jnp.ndarray) -> Optional[jnp.ndarray]:
    """The most generated tokens per row [B] (EOS included, a forced prefix not), or None."""
    if self.max_length_ratio <= 0:
      return None
    limit = jnp.ceil(self.max_length_ratio * source_lengths + self.max_length_offset)
    return jnp.maximum(limit, 1).astype(jnp.int32)


def _ban_repeated_ngrams(log_probs: jnp.ndarray, seqs: jnp.ndarray, cur_index: jnp.ndarray,
                         n: int) -> jnp.ndarray:
  """log_probs [N, V] of the token at cur_index + 1, without the tokens that would repeat
  an n-gram of seqs [N, L + 1] (BOS at 0, the last fed token at cur_index)."""
  rows, positions = seqs.shape
  starts = positions - n + 1  # Where an n-gram of the sequence may start.
  if starts < 1:
    return log_probs
  last = lax.dynamic_slice_in_dim(seqs, jnp.maximum(cur_index - n + 2, 0), n - 1, axis=1)
  same = jnp.ones((rows, starts), jnp.bool_)
  for k in range(n - 1):
    same &= seqs[:, k:k + starts] == last[:, k:k + 1]
  start = jnp.arange(starts)
  # A complete n-gram of generated tokens (BOS is not one), and n - 1 of them to match.
  complete = (start >= 1) & (start + n - 1 <= cur_index) & (cur_index >= n - 1)
  banned = jnp.zeros(log_probs.shape, jnp.bool_).at[
      jnp.arange(rows)[:, None], seqs[:, n - 1:n - 1 + starts]].max(same & complete)
  return jnp.where(banned, NEG_INF, log_probs)


def _end_at_max_lengths(log_probs: jnp.ndarray, cur_index: jnp.ndarray,
                        max_lengths: jnp.ndarray, has_prefix: bool,
                        eos_id: int) -> jnp.ndarray:
  """Only EOS (at the model's log-probability) for rows whose next token is their last."""
  generated = cur_index + 1 - (1 if has_prefix else 0)
  last = generated >= max_lengths
  is_eos = jnp.arange(log_probs.shape[-1])[None, :] == eos_id
  return jnp.where(last[:, None] & ~is_eos, NEG_INF, log_probs)


def _limit(log_probs: jnp.ndarray, seqs: jnp.ndarray, cur_index: jnp.ndarray, *,
           no_repeat_ngram_size: int, max_lengths: Optional[jnp.ndarray], has_prefix: bool,
           eos_id: int) -> jnp.ndarray:
  """The next token's log_probs [N, V] under `OutputLimits` (max_lengths [N] or None)."""
  if no_repeat_ngram_size:
    log_probs = _ban_repeated_ngrams(log_probs, seqs, cur_index, no_repeat_ngram_size)
  if max_lengths is not None:
    log_probs = _end_at_max_lengths(log_probs, cur_index, max_lengths, has_prefix, eos_id)
  return log_probs


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


# Extends a cache to hold the given number of steps; the searches call it between stages.
ExtendCache = Callable[[Cache, int], Cache]
# Makes the cache of one hypothesis per example the cache of the given number of beams.
ExpandCache = Callable[[Cache, int], Cache]


def _check_cache_lengths(cache_lengths: Sequence[int], extend_cache: Optional[ExtendCache],
                         max_decode_length: int) -> tuple[int, ...]:
  """The stages' cache lengths, checked; one stage of max_decode_length steps by default."""
  lengths = tuple(cache_lengths) or (max_decode_length,)
  if (list(lengths) != sorted(set(lengths)) or lengths[0] < 1
      or lengths[-1] < max_decode_length):
    raise UserError(f'decoding: cache_lengths must increase from >= 1 to at least '
                    f'max_decode_length ({max_decode_length}), got {lengths}')
  if len(lengths) > 1 and extend_cache is None:
    raise UserError('decoding: cache_lengths with more than one stage need extend_cache')
  return lengths


def _staged_while_loop(continues: Callable[[Any], jnp.ndarray], step: Callable[[Any], Any],
                       state: Any, *, lengths: tuple[int, ...],
                       extend_cache: Optional[ExtendCache], result: Callable[[Any], Any]):
  """`result` of running `step` while `continues`, the state's cache grown stage by stage.

  Stage s runs the steps that fit a cache of lengths[s] positions (state.cur_index is the
  position the next step writes); the cache is extended to lengths[s + 1] only when the
  search continues, inside a `lax.cond`, so a search that ends early never copies its
  cache into a longer one. Branches of a cond must agree in shape, hence `result`: the
  search's outcome without the cache.
  """
  def run(state, stage):
    limit = lengths[stage]
    state = lax.while_loop(lambda s: continues(s) & (s.cur_index < limit), step, state)
    if stage == len(lengths) - 1:
      return result(state)
    grow = lambda s: run(s.replace(cache=extend_cache(s.cache, lengths[stage + 1])), stage + 1)
    return lax.cond(continues(state), grow, result, state)

  return run(state, 0)


def _batch_size(prefix: Optional[jnp.ndarray], cache: Cache) -> int:
  """Reads the batch size from the prefix, or from the first batch-leading cache leaf."""
  if prefix is not None:
    return prefix.shape[0]
  for leaf in jax.tree_util.tree_leaves(cache):
    if jnp.ndim(leaf) > 0:
      return leaf.shape[0]
  raise UserError('beam_search: give a prefix or a cache with a batch axis to size the batch')


def _expand_to_beams(cache: Cache, beam_size: int) -> Cache:
  """Repeats every batch-leading leaf beam_size times: row b becomes rows b*K .. b*K+K-1."""
  return jax.tree_util.tree_map(
      lambda x: x if jnp.ndim(x) == 0 else jnp.repeat(x, beam_size, axis=0), cache)


# Candidates per block in `top_k`; rows shorter than TOP_K_MIN_BLOCKS blocks take lax.top_k.
TOP_K_BLOCK = 128
TOP_K_MIN_BLOCKS = 16


def top_k(x: jnp.ndarray, k: int) -> tuple[jnp.ndarray, jnp.ndarray]:
  """`lax.top_k` over the last axis of x [rows, n], for long rows: values and indices, ties
  to the lower index, exactly as lax.top_k gives them.

  A beam step picks 2 * beam of beam * vocab candidates, and XLA's CPU TopK sorts its way
  through all of them (a tenth of a step on a small model). Here the rows are cut into
  blocks of TOP_K_BLOCK: every one of the k best lies in one of the k blocks with the best
  maxima (a block holding the j-th best candidate has a maximum at least that high, and at
  most j - 1 other blocks can beat it), so the top k of those blocks' candidates, taken in
  their original order, are the top k of the row, ties included.
  """
  rows, n = x.shape
  num_blocks = -(-n // TOP_K_BLOCK)
  if num_blocks < max(TOP_K_MIN_BLOCKS, k):
    return lax.top_k(x, k)
  lowest = jnp.finfo(x.dtype).min if jnp.issubdtype(x.dtype, jnp.floating) else jnp.iinfo(
      x.dtype).min
  padded = jnp.pad(x, ((0, 0), (0, num_blocks * TOP_K_BLOCK - n)), constant_values=lowest)
  blocks = padded.reshape(rows, num_blocks, TOP_K_BLOCK)
  _, best_blocks = lax.top_k(blocks.max(axis=-1), k)
  best_blocks = jnp.sort(best_blocks, axis=-1)  # Original order among the candidates.
  candidates = jnp.take_along_axis(blocks, best_blocks[:, :, None], axis=1)
  values, positions = lax.top_k(candidates.reshape(rows, k * TOP_K_BLOCK), k)
  block_of = jnp.take_along_axis(best_blocks, positions // TOP_K_BLOCK, axis=1)
  return values, block_of * TOP_K_BLOCK + positions % TOP_K_BLOCK


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


def _banned(banned_tokens: Optional[jnp.ndarray], eos_id: int) -> Optional[jnp.ndarray]:
  """`banned_tokens` as a bool vector with EOS allowed, so that every hypothesis can end."""
  if banned_tokens is None:
    return None
  return jnp.asarray(banned_tokens, jnp.bool_).at[eos_id].set(False)


def _step_log_probs(tokens_to_logits: TokensToLogits, tokens: jnp.ndarray, cache: Cache,
                    cur_index: jnp.ndarray, prefix: Optional[jnp.ndarray],
                    banned_tokens: Optional[jnp.ndarray], normalize: bool = True):
  """Runs one decoder step: the model's log-probabilities without the banned tokens (a
  banned token keeps no probability, the others keep theirs, so scores stay the model's);
  at step 0 a prefix replaces the model's distribution. Without `normalize` the step's
  output is taken as the tokens' scores as it is."""
  logits, new_cache = tokens_to_logits(tokens, cache)
  log_probs = logits.astype(jnp.float32)
  if normalize:
    log_probs = jax.nn.log_softmax(log_probs, axis=-1)
  if banned_tokens is not None:
    log_probs = jnp.where(banned_tokens[None, :], NEG_INF, log_probs)
  if prefix is not None:
    vocab_size = log_probs.shape[-1]
    rows_per_example = log_probs.shape[0] // prefix.shape[0]
    row_prefix = jnp.repeat(prefix, rows_per_example)[:, None]
    forced = jnp.where(jnp.arange(vocab_size)[None, :] == row_prefix, 0.0, NEG_INF)
    log_probs = jnp.where(cur_index == 0, forced, log_probs)
  return log_probs, new_cache


def _beam_step(state: _BeamState, *, tokens_to_logits: TokensToLogits,
               prefix: Optional[jnp.ndarray], banned_tokens: Optional[jnp.ndarray],
               normalize: bool, settled_rows: Callable[[_BeamState], jnp.ndarray],
               **select) -> _BeamState:
  """Expands every alive hypothesis by one token and updates the alive and finished sets;
  the finished sets of the rows `settled_rows` names stay as they are."""
  batch_size, beam_size, _ = state.alive_seqs.shape
  i = state.cur_index
  tokens = lax.dynamic_slice_in_dim(state.alive_seqs, i, 1, axis=2)
  log_probs, new_cache = _step_log_probs(
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
  log_probs, new_cache = _step_log_probs(
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
  log_probs = _limit(
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
  exists = topk_log_probs > _INVALID_BELOW
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


STOP_CRITERIA = ('exact', 'best', 'beam_full')


def _beam_search_continues(state: _BeamState, *, alpha: float, max_decode_length: int,
                           has_prefix: bool, stop: str) -> jnp.ndarray:
  """False at the length limit, or once every row is settled by the `stop` criterion.

  Log-probabilities only fall as a hypothesis grows and, for alpha >= 0, the penalty only
  grows, so an alive hypothesis scores at most log_prob / length_penalty(longest length).
    exact      no alive beam can beat the worst of beam_size finished hypotheses
    best       no alive beam can beat the best finished hypothesis (exact for the top one)
    beam_full  as `best`, or beam_size hypotheses have finished (fairseq's rule; with it,
               as in fairseq, a hypothesis finishes only among a step's beam_size best
               expansions)
  """
  settled = _rows_settled(state, alpha=alpha, max_decode_length=max_decode_length,
                         has_prefix=has_prefix, stop=stop)
  return (state.cur_index < max_decode_length) & ~jnp.all(settled)


def _rows_settled(state: _BeamState, *, alpha: float, max_decode_length: int,
                  has_prefix: bool, stop: str) -> jnp.ndarray:
  """Whether each row [B] is done by the `stop` criterion (`_beam_search_continues`)."""
  longest = max_decode_length - (1 if has_prefix else 0)
  best_alive_bound = state.alive_log_probs[:, 0] / length_penalty(longest, alpha)
  finished = jnp.where(state.finished_flags, state.finished_scores, NEG_INF)
  if stop == 'exact':
    return jnp.min(finished, axis=1) > best_alive_bound
  settled = jnp.max(finished, axis=1) > best_alive_bound
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
                cache_lengths: Sequence[int] = (),
                extend_cache: Optional[ExtendCache] = None,
                expand_cache: ExpandCache = _expand_to_beams,
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
    cache_lengths: the steps `initial_cache` holds, then the lengths it grows to, ascending,
      the last at least max_decode_length; empty when the cache holds every step.
    extend_cache: `extend_cache(cache, length)` returns the cache grown to `length` steps,
      with its contents unchanged (needed with more than one cache length).
    expand_cache: `expand_cache(cache, beam_size)` returns the first step's cache (B rows)
      made the beams' (see the module docstring); by default batch-leading leaves are
      repeated to B * beam_size rows.
    no_repeat_ngram_size: > 0 forbids repeating an n-gram of that size (`OutputLimits`).
    max_lengths: int32 [B], the most generated tokens of each row (EOS included, the
      prefix not), below max_decode_length; None: max_decode_length alone.
    banned_tokens: bool [vocab], tokens never generated after the prefix (EOS stays
      allowed whatever it says); None: every token may be generated.
    normalize: True: `tokens_to_logits` gives logits, turned into log-probabilities here;
      False: it gives each token's score, used as it is (an ensemble's combination of
      its members' log-probabilities, which need not sum to one).

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
  lengths = _check_cache_lengths(cache_lengths, extend_cache, max_decode_length)
  batch_size = _batch_size(prefix, initial_cache)
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
                      has_prefix=prefix is not None, stop=stop)
  step_options = dict(tokens_to_logits=tokens_to_logits, prefix=prefix,
                      banned_tokens=_banned(banned_tokens, eos_id), normalize=normalize,
                      settled_rows=functools.partial(_rows_settled, **stop_options),
                      finish_in_top_k=stop == 'beam_full',
                      alpha=alpha, max_decode_length=max_decode_length, eos_id=eos_id,
                      no_repeat_ngram_size=no_repeat_ngram_size, max_lengths=max_lengths)
  state = _first_beam_step(state, initial_cache, expand_cache=expand_cache, **step_options)

  def result(state: _BeamState) -> tuple[jnp.ndarray, jnp.ndarray]:
    sequences = jnp.where(state.finished_flags[:, :, None], state.finished_seqs[:, :, 1:], 0)
    return sequences, jnp.where(state.finished_flags, state.finished_scores, NEG_INF)

  return _staged_while_loop(
      functools.partial(_beam_search_continues, **stop_options),
      functools.partial(_beam_step, **step_options), state, lengths=lengths,
      extend_cache=extend_cache, result=result)


@flax.struct.dataclass
class _GreedyState:
  cur_index: jnp.ndarray  # scalar int32
  seqs: jnp.ndarray       # [B, L + 1] int32, BOS 0 at position 0
  done: jnp.ndarray       # [B] bool, EOS emitted
  log_probs: jnp.ndarray  # [B] fp32, summed log-probabilities of the generated tokens
  cache: Cache


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

  Same conventions, cache growth and output limits as `beam_search` (BOS 0 first input,
  forced prefix, cache layout, `cache_lengths`, `extend_cache`, `no_repeat_ngram_size`,
  `max_lengths`, `banned_tokens`, `normalize`).
  Returns int32 [B, max_decode_length]: the prefix token first when given, 0 after EOS;
  `with_log_probs`: and each row's summed log-probability [B] (the generated tokens, EOS
  included, the forced prefix not), as beam search scores hypotheses.
  """
  lengths = _check_cache_lengths(cache_lengths, extend_cache, max_decode_length)
  batch_size = _batch_size(prefix, initial_cache)
  if prefix is not None:
    prefix = jnp.asarray(prefix, jnp.int32)
  banned_tokens = _banned(banned_tokens, eos_id)

  def step(state: _GreedyState) -> _GreedyState:
    i = state.cur_index
    tokens = lax.dynamic_slice_in_dim(state.seqs, i, 1, axis=1)
    log_probs, cache = _step_log_probs(tokens_to_logits, tokens, state.cache, i, prefix,
                                       banned_tokens, normalize)
    log_probs = _limit(log_probs, state.seqs, i, no_repeat_ngram_size=no_repeat_ngram_size,
                       max_lengths=max_lengths, has_prefix=prefix is not None, eos_id=eos_id)
    best = jnp.argmax(log_probs, axis=-1).astype(jnp.int32)
    next_tokens = jnp.where(state.done, 0, best)
    # A forced prefix's log-probability is 0 (`_step_log_probs`): it adds nothing.
    gained = jnp.take_along_axis(log_probs, best[:, None], axis=1)[:, 0]
    seqs = lax.dynamic_update_slice_in_dim(state.seqs, next_tokens[:, None], i + 1, axis=1)
    return _GreedyState(cur_index=i + 1, seqs=seqs, done=state.done | (next_tokens == eos_id),
                        log_probs=state.log_probs + jnp.where(state.done, 0.0, gained),
                        cache=cache)

  def continues(state: _GreedyState) -> jnp.ndarray:
    return (state.cur_index < max_decode_length) & ~jnp.all(state.done)

  state = _GreedyState(cur_index=jnp.array(0, jnp.int32),
                       seqs=jnp.zeros((batch_size, max_decode_length + 1), jnp.int32),
                       done=jnp.zeros((batch_size,), jnp.bool_),
                       log_probs=jnp.zeros((batch_size,), jnp.float32), cache=initial_cache)
  result = lambda state: ((state.seqs[:, 1:], state.log_probs) if with_log_probs
                          else state.seqs[:, 1:])
  return _staged_while_loop(continues, step, state, lengths=lengths,
                            extend_cache=extend_cache, result=result)


def generated_lengths(sequences: jnp.ndarray, has_prefix: bool, eos_id: int = 1
                      ) -> jnp.ndarray:
  """The generated tokens of each output [..., L] as `length_penalty` counts them: up to
  and including the first EOS (all L without one), a forced prefix not counted."""
  positions = jnp.arange(sequences.shape[-1])
  first_eos = jnp.min(jnp.where(sequences == eos_id, positions, sequences.shape[-1] - 1),
                      axis=-1)
  return first_eos + 1 - (1 if has_prefix else 0)
