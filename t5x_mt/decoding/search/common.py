"""What every search method shares: the rules every output keeps, how hypotheses are
scored, and the staged loop over a growing cache.

A search drives a model through one function, `tokens_to_logits`, that takes the last
token of every hypothesis and the decoder cache and returns next-token logits and the
updated cache. It knows nothing else about the model, so the same code decodes a single
Transformer, an ensemble (a `tokens_to_logits` that combines log-probabilities) or a toy
model in a test. `SearchProblem` gathers that function, its cache and the rules below.

Conventions shared with the model and the data pipeline:
- The decoder's first input is token 0 (BOS is the pad id, seqio's shift-right convention).
- `prefix` forces the first output token: the target-language tag `<2xxx_Xxxx>` that
  T-ENC-T-DEC and S-ENC-T-DEC decoders start with. A forced token is not scored and does not
  count towards the length (it plays the part of fairseq's `--decoder-langtok` BOS).
- `banned_tokens` (bool [vocab]) are never generated: a vocabulary's tags and control
  pieces mark data, not text, however much a model prefers them. The forced prefix is
  exempt (it is such a tag), and so is EOS, which ends every hypothesis.
- `OutputLimits` hold a looping model to sentences of a sensible length.
- Cache leaves are either scalars (`cache_index`: shared by every row, left as they are) or
  have the batch as their leading axis. A search that keeps several hypotheses per source
  runs the first step once per source and widens its cache to them (`expand_cache`; by
  default every batch-leading leaf is repeated to batch * hypotheses rows). State that
  every hypothesis of a source shares (cross-attention keys and values) stays out of the
  cache, in `tokens_to_logits`' closure, so that it is neither repeated nor reordered.
- A cache may grow (`cache_lengths`, `extend_cache`): the search starts on a cache for the
  first few steps and extends it only when a row is still alive at its end. A step's cost
  follows the cache's length (self-attention reads all of it every step), so
  short outputs under a long limit do not pay for the limit at every step.
- A hypothesis is scored by sum(log p(token)) / length ** alpha (`length_penalty`), the sum
  over its generated tokens, EOS included, the forced prefix not.
"""

import dataclasses
from typing import Any, Callable, NamedTuple, Optional, Sequence

import flax
import jax
from jax import lax
import jax.numpy as jnp

from t5x_mt.core.errors import UserError
from t5x_mt.model.decode_cache import Cache
from t5x_mt.model.decode_cache import TokensToLogits

# Stands in for -inf where arithmetic on the value must stay finite.
NEG_INF = -1.0e7
# Log-probabilities below this mark a token or hypothesis that may not be (a banned piece,
# a padding beam).
INVALID_BELOW = 0.5 * NEG_INF

# Extends a cache to hold the given number of steps; the searches call it between stages.
ExtendCache = Callable[[Cache, int], Cache]
# Makes the cache of one hypothesis per source the cache of the given number per source.
ExpandCache = Callable[[Cache, int], Cache]


def length_penalty(length: jnp.ndarray, alpha: float) -> jnp.ndarray:
  """Returns length ** alpha, the divisor of a hypothesis' summed log-probability.

  This is fairseq's `--lenpen` (the setting behind the WMT22 systems' "length penalty 1.0"):
  with alpha = 1 a hypothesis is ranked by its mean per-token log-probability. `length`
  counts the generated tokens including EOS and excluding a forced prefix; it is clipped to
  at least 1 so that a prefix-only output divides by 1.
  """
  return jnp.maximum(jnp.asarray(length, jnp.float32), 1.0) ** alpha


def generated_lengths(sequences: jnp.ndarray, has_prefix: bool, eos_id: int = 1
                      ) -> jnp.ndarray:
  """The generated tokens of each output [..., L] as `length_penalty` counts them: up to
  and including the first EOS (all L without one), a forced prefix not counted."""
  positions = jnp.arange(sequences.shape[-1])
  first_eos = jnp.min(jnp.where(sequences == eos_id, positions, sequences.shape[-1] - 1),
                      axis=-1)
  return first_eos + 1 - (1 if has_prefix else 0)


class NBest(NamedTuple):
  """A search's `n` outputs per source, best first."""
  sequences: jnp.ndarray  # int32 [B, n, max_decode_length], the prefix first, 0 after EOS
  scores: jnp.ndarray     # fp32 [B, n], log-probability / length_penalty, the ranking
  log_probs: jnp.ndarray  # fp32 [B, n], summed log-probability (or ensemble score)
  lengths: jnp.ndarray    # int32 [B, n], generated tokens (EOS in, forced prefix out)


def ranked(sequences: jnp.ndarray, log_probs: jnp.ndarray, alpha: float,
           has_prefix: bool, eos_id: int = 1) -> NBest:
  """Outputs [B, n, L] and their summed log-probabilities [B, n] as an n-best list:
  scored by log_prob / length_penalty and sorted by that score, best first (ties keep
  their order)."""
  lengths = generated_lengths(sequences, has_prefix, eos_id)
  scores = log_probs / length_penalty(lengths, alpha)
  order = jnp.argsort(-scores, axis=1, stable=True)
  take = lambda x: jnp.take_along_axis(x, order.reshape(order.shape + (1,) * (x.ndim - 2)),
                                       axis=1)
  return NBest(take(sequences), take(scores), take(log_probs), take(lengths))


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


def limit(log_probs: jnp.ndarray, seqs: jnp.ndarray, cur_index: jnp.ndarray, *,
          no_repeat_ngram_size: int, max_lengths: Optional[jnp.ndarray], has_prefix: bool,
          eos_id: int) -> jnp.ndarray:
  """The next token's log_probs [N, V] under `OutputLimits` (max_lengths [N] or None)."""
  if no_repeat_ngram_size:
    log_probs = _ban_repeated_ngrams(log_probs, seqs, cur_index, no_repeat_ngram_size)
  if max_lengths is not None:
    log_probs = _end_at_max_lengths(log_probs, cur_index, max_lengths, has_prefix, eos_id)
  return log_probs


def check_cache_lengths(cache_lengths: Sequence[int], extend_cache: Optional[ExtendCache],
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


def staged_while_loop(continues: Callable[[Any], jnp.ndarray], step: Callable[[Any], Any],
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


def batch_size_of(prefix: Optional[jnp.ndarray], cache: Cache) -> int:
  """Reads the batch size from the prefix, or from the first batch-leading cache leaf."""
  if prefix is not None:
    return prefix.shape[0]
  for leaf in jax.tree_util.tree_leaves(cache):
    if jnp.ndim(leaf) > 0:
      return leaf.shape[0]
  raise UserError('search: give a prefix or a cache with a batch axis to size the batch')


def expand_rows(cache: Cache, copies: int) -> Cache:
  """Repeats every batch-leading leaf `copies` times: row b becomes rows b*K .. b*K+K-1."""
  return jax.tree_util.tree_map(
      lambda x: x if jnp.ndim(x) == 0 else jnp.repeat(x, copies, axis=0), cache)


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


def allowing_eos(banned_tokens: Optional[jnp.ndarray], eos_id: int) -> Optional[jnp.ndarray]:
  """`banned_tokens` as a bool vector with EOS allowed, so that every hypothesis can end."""
  if banned_tokens is None:
    return None
  return jnp.asarray(banned_tokens, jnp.bool_).at[eos_id].set(False)


def step_log_probs(tokens_to_logits: TokensToLogits, tokens: jnp.ndarray, cache: Cache,
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


def source_ids(encoder_tokens: jnp.ndarray, direction: jnp.ndarray) -> jnp.ndarray:
  """A number (uint32 [B]) for each source row that its tokens and direction alone
  determine, whatever padding its batch's bucket adds: what a search that draws keys its
  draws by, so that a sentence's outputs depend on neither the sentences beside it in
  its batch nor the order in which a caller sorts, buckets or resumes them.

  A positional polynomial hash of the tokens (padding, 0, adds nothing), mixed with
  MurmurHash3's finaliser.
  """
  tokens = jnp.asarray(encoder_tokens).astype(jnp.uint32)
  weights = jnp.cumprod(jnp.full((tokens.shape[1],), 0x9E3779B1, jnp.uint32))
  mixed = _mix(jnp.sum(tokens * weights, axis=1, dtype=jnp.uint32))
  return _mix(mixed ^ _mix(jnp.asarray(direction).astype(jnp.uint32)))


def _mix(h: jnp.ndarray) -> jnp.ndarray:
  """MurmurHash3's 32-bit finaliser: every input bit moves about half the output bits."""
  h = h ^ (h >> 16)
  h = h * jnp.uint32(0x85EBCA6B)
  h = h ^ (h >> 13)
  h = h * jnp.uint32(0xC2B2AE35)
  return h ^ (h >> 16)


@dataclasses.dataclass(frozen=True)
class SearchProblem:
  """What a search method decodes, and the rules every method's outputs keep.

  Attributes:
    tokens_to_logits: one decoder step, see `TokensToLogits`.
    initial_cache: the decoder cache for B rows (leaves scalar or batch-leading).
    prefix: int32 [B], the forced first output token (target-language tag), or None.
    max_decode_length: most output tokens, the forced prefix included.
    alpha: length-penalty exponent (`length_penalty`) of every hypothesis' score.
    source_ids: uint32 [B], each row's identity (`source_ids`): methods that draw key
      their draws by it.
    eos_id: the token that ends a hypothesis.
    cache_lengths: the steps `initial_cache` holds, then the lengths it grows to, ascending,
      the last at least max_decode_length; empty when the cache holds every step.
    extend_cache: `extend_cache(cache, length)` returns the cache grown to `length` steps,
      with its contents unchanged (needed with more than one cache length).
    expand_cache: `expand_cache(cache, k)` returns the first step's cache (B rows) made
      that of k hypotheses per row (see the module docstring).
    no_repeat_ngram_size: > 0 forbids repeating an n-gram of that size (`OutputLimits`).
    max_lengths: int32 [B], the most generated tokens of each row (EOS included, the
      prefix not), below max_decode_length; None: max_decode_length alone.
    banned_tokens: bool [vocab], tokens never generated after the prefix (EOS stays
      allowed whatever it says); None: every token may be generated.
    normalize: True: `tokens_to_logits` gives logits, turned into log-probabilities here;
      False: it gives each token's score, used as it is (an ensemble's combination of
      its members' log-probabilities, which need not sum to one).
  """
  tokens_to_logits: TokensToLogits
  initial_cache: Cache
  prefix: Optional[jnp.ndarray]
  max_decode_length: int
  alpha: float = 1.0
  source_ids: Optional[jnp.ndarray] = None
  eos_id: int = 1
  cache_lengths: Sequence[int] = ()
  extend_cache: Optional[ExtendCache] = None
  expand_cache: ExpandCache = expand_rows
  no_repeat_ngram_size: int = 0
  max_lengths: Optional[jnp.ndarray] = None
  banned_tokens: Optional[jnp.ndarray] = None
  normalize: bool = True

  def rules(self) -> dict[str, Any]:
    """The keyword arguments every search function takes besides its own settings."""
    return dict(prefix=self.prefix, max_decode_length=self.max_decode_length,
                eos_id=self.eos_id, cache_lengths=self.cache_lengths,
                extend_cache=self.extend_cache, no_repeat_ngram_size=self.no_repeat_ngram_size,
                max_lengths=self.max_lengths, banned_tokens=self.banned_tokens,
                normalize=self.normalize)


# Chooses each row's next token [N] from its log-probabilities [N, V] at a step.
ChooseTokens = Callable[[jnp.ndarray, jnp.ndarray], jnp.ndarray]


@flax.struct.dataclass
class _RowState:
  cur_index: jnp.ndarray  # scalar int32: position of the token fed at this step
  seqs: jnp.ndarray       # [N, L + 1] int32, BOS 0 at position 0
  done: jnp.ndarray       # [N] bool, EOS emitted
  log_probs: jnp.ndarray  # [N] fp32, summed log-probabilities of the generated tokens
  cache: Cache


def one_hypothesis_per_row(tokens_to_logits: TokensToLogits, initial_cache: Cache,
                           choose: ChooseTokens, *, copies: int = 1,
                           expand_cache: ExpandCache = expand_rows,
                           prefix: Optional[jnp.ndarray], max_decode_length: int,
                           eos_id: int = 1, cache_lengths: Sequence[int] = (),
                           extend_cache: Optional[ExtendCache] = None,
                           no_repeat_ngram_size: int = 0,
                           max_lengths: Optional[jnp.ndarray] = None,
                           banned_tokens: Optional[jnp.ndarray] = None,
                           normalize: bool = True) -> tuple[jnp.ndarray, jnp.ndarray]:
  """The loop of a search that extends one hypothesis per row by the token `choose`
  picks at every step, until EOS or max_decode_length (greedy search, sampling).

  Each of the B sources gets `copies` rows: the first step runs once per source and its
  distribution and cache are repeated to the copies (row b * copies + j is copy j of
  source b), which then go their own ways. `choose(log_probs [N, V], cur_index)` sees the
  model's log-probabilities under the banned tokens, forced prefix and output limits (a
  token it may not pick is at NEG_INF). The other arguments are `SearchProblem`'s.

  Returns int32 [B, copies, max_decode_length] (the prefix token first when given, 0
  after EOS) and each row's summed log-probability [B, copies] (the generated tokens, EOS
  included, the forced prefix not).
  """
  lengths = check_cache_lengths(cache_lengths, extend_cache, max_decode_length)
  batch_size = batch_size_of(prefix, initial_cache)
  rows = batch_size * copies
  if prefix is not None:
    prefix = jnp.asarray(prefix, jnp.int32)
  banned_tokens = allowing_eos(banned_tokens, eos_id)
  if max_lengths is not None:
    max_lengths = jnp.repeat(max_lengths, copies)

  def extend(state: _RowState, log_probs: jnp.ndarray, cache: Cache,
             ngram_size: int = no_repeat_ngram_size) -> _RowState:
    i = state.cur_index
    log_probs = limit(log_probs, state.seqs, i, no_repeat_ngram_size=ngram_size,
                      max_lengths=max_lengths, has_prefix=prefix is not None, eos_id=eos_id)
    chosen = choose(log_probs, i).astype(jnp.int32)
    next_tokens = jnp.where(state.done, 0, chosen)
    # A forced prefix's log-probability is 0 (`step_log_probs`): it adds nothing.
    gained = jnp.take_along_axis(log_probs, chosen[:, None], axis=1)[:, 0]
    seqs = lax.dynamic_update_slice_in_dim(state.seqs, next_tokens[:, None], i + 1, axis=1)
    return _RowState(cur_index=i + 1, seqs=seqs, done=state.done | (next_tokens == eos_id),
                     log_probs=state.log_probs + jnp.where(state.done, 0.0, gained),
                     cache=cache)

  def step(state: _RowState) -> _RowState:
    tokens = lax.dynamic_slice_in_dim(state.seqs, state.cur_index, 1, axis=1)
    log_probs, cache = step_log_probs(tokens_to_logits, tokens, state.cache,
                                      state.cur_index, prefix, banned_tokens, normalize)
    return extend(state, log_probs, cache)

  def continues(state: _RowState) -> jnp.ndarray:
    return (state.cur_index < max_decode_length) & ~jnp.all(state.done)

  state = _RowState(cur_index=jnp.array(0, jnp.int32),
                    seqs=jnp.zeros((rows, max_decode_length + 1), jnp.int32),
                    done=jnp.zeros((rows,), jnp.bool_),
                    log_probs=jnp.zeros((rows,), jnp.float32), cache=None)
  # The first step, once per source; no n-gram is complete before it, and the ban on the
  # constant initial state would be work XLA folds at compile time, slowly.
  first_log_probs, cache = step_log_probs(
      tokens_to_logits, jnp.zeros((batch_size, 1), jnp.int32), initial_cache,
      state.cur_index, prefix, banned_tokens, normalize)
  if copies > 1:
    first_log_probs = jnp.repeat(first_log_probs, copies, axis=0)
    cache = expand_cache(cache, copies)
  state = extend(state, first_log_probs, cache, ngram_size=0)
  result = lambda state: (state.seqs[:, 1:].reshape(batch_size, copies, max_decode_length),
                          state.log_probs.reshape(batch_size, copies))
  return staged_while_loop(continues, step, state, lengths=lengths,
                           extend_cache=extend_cache, result=result)
