"""Tests for t5x_mt.decoding.search: beam search against exhaustive search on a toy model."""

import collections
import functools
import itertools
import math

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.decoding.search import beam_search
from t5x_mt.decoding.search import common
from t5x_mt.decoding.search import greedy_search
from t5x_mt.core.errors import UserError

VOCAB = 5
LENGTH = 4
EOS = 1
NUM_STATES = 3


def _toy_table(seed: int = 0) -> np.ndarray:
  """Logits indexed by [step, previous token, per-example state, next token]."""
  return np.random.RandomState(seed).normal(
      scale=2.0, size=(LENGTH, VOCAB, NUM_STATES, VOCAB)).astype(np.float32)


def _toy_tokens_to_logits(table: np.ndarray):
  """A model whose next-token logits depend on the step, the last token and a running state.

  The state (sum of the tokens fed so far, mod NUM_STATES) lives in the cache with the batch
  as leading axis, so a beam search that reorders beams without reordering the cache decodes
  a different model than the exhaustive search below.
  """
  table = jnp.asarray(table)

  def tokens_to_logits(tokens, cache):
    last = tokens[:, 0]
    state = (cache['state'] + last) % NUM_STATES
    logits = table[cache['index'], last, state]
    return logits, {'index': cache['index'] + 1, 'state': state}

  return tokens_to_logits


def _initial_cache(initial_states):
  return {'index': jnp.array(0, jnp.int32),
          'state': jnp.asarray(initial_states, jnp.int32)}


def _log_prob(table, initial_state, sequence):
  """Summed log-probability of every token in `sequence` under the toy model (numpy)."""
  state, last, log_probs = initial_state, 0, []
  for step, token in enumerate(sequence):
    state = (state + last) % NUM_STATES
    logits = table[step, last, state].astype(np.float64)
    log_probs.append(logits[token] - np.log(np.sum(np.exp(logits))))
    last = token
  return log_probs


def _all_hypotheses(prefix_token):
  """Every output the search may produce: EOS only at the end, or the full length."""
  forced = [] if prefix_token is None else [prefix_token]
  for length in range(1, LENGTH - len(forced)):
    for body in itertools.product([t for t in range(VOCAB) if t != EOS], repeat=length - 1):
      yield forced + list(body) + [EOS]
  for body in itertools.product(range(VOCAB), repeat=LENGTH - len(forced)):
    if EOS not in body[:-1]:
      yield forced + list(body)


def _brute_force(table, initial_state, prefix_token, alpha, top):
  """The `top` best hypotheses and scores, by enumerating all of them."""
  scored = []
  for hypothesis in _all_hypotheses(prefix_token):
    log_probs = _log_prob(table, initial_state, hypothesis)
    if prefix_token is not None:
      log_probs = log_probs[1:]
    scored.append((sum(log_probs) / max(len(log_probs), 1) ** alpha, hypothesis))
  scored.sort(key=lambda pair: -pair[0])
  sequences = np.zeros((top, LENGTH), np.int32)
  for row, (_, hypothesis) in enumerate(scored[:top]):
    sequences[row, :len(hypothesis)] = hypothesis
  return sequences, np.array([score for score, _ in scored[:top]])


@functools.lru_cache(maxsize=None)
def _compiled(search, model, **options):
  """`search` over the toy model `model(weights)`, jitted once per search, model and static
  options: the weights, cache, prefix and per-row arrays are arguments, so the cases,
  seeds and tests that differ only in those share one compilation per batch size."""
  def run(weights, cache, prefix, arrays):
    return search(model(weights), cache, prefix=prefix, **options, **arrays)
  return jax.jit(run)


def _search(search, model, weights, cache, prefix=None, **options):
  """search(model(weights), cache, prefix=prefix, **options), compiled by `_compiled`;
  max_lengths and banned_tokens are traced with the weights."""
  arrays = {name: options.pop(name) for name in ('max_lengths', 'banned_tokens')
            if name in options}
  return _compiled(search, model, **options)(weights, cache, prefix, arrays)


def _beam(table, cache, prefix=None, **options):
  """Beam search on the toy model of `table`; LENGTH steps and EOS unless `options` say."""
  return _search(beam_search.beam_search, _toy_tokens_to_logits, table, cache, prefix,
                 **{'max_decode_length': LENGTH, 'eos_id': EOS, **options})


# (V - 1) ** (L - 1) beams hold every unfinished hypothesis at every step, so the search is
# exhaustive and its whole beam must equal the brute-force top list.
EXHAUSTIVE_BEAM = (VOCAB - 1) ** (LENGTH - 1)


@pytest.mark.parametrize('alpha', [0.0, 1.0])
def test_exhaustive_beam_equals_brute_force_top_list(alpha):
  initial_states = [0, 1, 2]
  sequences, scores = _beam(_toy_table(0), _initial_cache(initial_states),
                            beam_size=EXHAUSTIVE_BEAM, alpha=alpha)
  for b, initial_state in enumerate(initial_states):
    want_sequences, want_scores = _brute_force(
        _toy_table(0), initial_state, None, alpha, EXHAUSTIVE_BEAM)
    np.testing.assert_array_equal(np.asarray(sequences[b]), want_sequences)
    np.testing.assert_allclose(np.asarray(scores[b]), want_scores, rtol=1e-5, atol=1e-5)


def test_exhaustive_beam_with_prefix_equals_brute_force():
  prefixes = [3, 4]
  initial_states = [1, 2]
  sequences, scores = _beam(_toy_table(1), _initial_cache(initial_states),
                            jnp.array(prefixes, jnp.int32), beam_size=EXHAUSTIVE_BEAM,
                            alpha=1.0)
  for b, (prefix, initial_state) in enumerate(zip(prefixes, initial_states)):
    want_sequences, want_scores = _brute_force(_toy_table(1), initial_state, prefix, 1.0, 8)
    np.testing.assert_array_equal(np.asarray(sequences[b, :8]), want_sequences)
    np.testing.assert_allclose(np.asarray(scores[b, :8]), want_scores, rtol=1e-5, atol=1e-5)


def test_small_beam_scores_are_penalised_log_prob_of_its_sequences():
  prefixes = [3, 2, 4]
  initial_states = [0, 1, 2]
  sequences, scores = _beam(_toy_table(2), _initial_cache(initial_states),
                            jnp.array(prefixes, jnp.int32), beam_size=2, alpha=1.0)
  sequences, scores = np.asarray(sequences), np.asarray(scores)
  assert np.all(sequences[:, :, 0] == np.array(prefixes)[:, None])
  assert np.all(np.diff(scores, axis=1) <= 0)
  for b, initial_state in enumerate(initial_states):
    for k in range(2):
      hypothesis = list(sequences[b, k])
      length = hypothesis.index(EOS) + 1 if EOS in hypothesis else LENGTH
      assert not any(hypothesis[length:])  # zeros after EOS
      generated = _log_prob(_toy_table(2), initial_state, hypothesis[:length])[1:]
      assert scores[b, k] == pytest.approx(sum(generated) / len(generated), abs=1e-5)


def _fixed_distribution_model(step_probs):
  """Next-token probabilities that depend on the step only; cache = {'index'} + a batch leaf."""
  step_log_probs = jnp.log(jnp.asarray(step_probs, jnp.float32))

  def tokens_to_logits(tokens, cache):
    logits = jnp.broadcast_to(step_log_probs[cache['index']],
                              (tokens.shape[0], step_log_probs.shape[1]))
    return logits, {'index': cache['index'] + 1, 'seen': cache['seen'] + tokens[:, 0]}

  return tokens_to_logits


# Tokens 0, 1 (EOS), 2; worked by hand in the test below.
HAND_PROBS = [[0.1, 0.3, 0.6], [0.1, 0.6, 0.3], [0.1, 0.2, 0.7]]


@pytest.mark.parametrize('alpha, want_sequences, want_scores', [
    # [2, EOS]: (ln .6 + ln .6) / 2; [2, 2, 2]: (ln .6 + ln .3 + ln .7) / 3.
    (1.0, [[2, 1, 0], [2, 2, 2]],
     [math.log(0.6), (math.log(0.6) + math.log(0.3) + math.log(0.7)) / 3]),
    # Raw sums: [2, EOS] = ln .36 beats [EOS] = ln .3.
    (0.0, [[2, 1, 0], [1, 0, 0]], [math.log(0.36), math.log(0.3)]),
])
def test_beam_of_two_matches_hand_worked_example(alpha, want_sequences, want_scores):
  sequences, scores = _search(
      beam_search.beam_search, _fixed_distribution_model, np.float32(HAND_PROBS),
      {'index': jnp.array(0, jnp.int32), 'seen': jnp.zeros((1,), jnp.int32)},
      beam_size=2, alpha=alpha, max_decode_length=3, eos_id=EOS)
  np.testing.assert_array_equal(np.asarray(sequences[0]), want_sequences)
  np.testing.assert_allclose(np.asarray(scores[0]), want_scores, rtol=1e-5)


def test_beam_of_one_equals_greedy_when_eos_is_never_likely():
  # Beam 1 keeps a passed-up EOS hypothesis in its finished set, which greedy search cannot
  # return; without EOS both follow the argmax path to the length limit.
  table = _toy_table(3)
  table[..., EOS] = -30.0
  prefixes = jnp.array([3, 2, 4, 0], jnp.int32)
  cache = _initial_cache([0, 1, 2, 1])
  beam, _ = _search(beam_search.beam_search, _toy_tokens_to_logits, table, cache, prefixes,
                    beam_size=1, max_decode_length=LENGTH)
  greedy = _search(greedy_search.greedy_search, _toy_tokens_to_logits, table, cache,
                   prefixes, max_decode_length=LENGTH)
  np.testing.assert_array_equal(np.asarray(beam[:, 0]), np.asarray(greedy))
  assert np.all(np.asarray(greedy[:, 0]) == np.asarray(prefixes))
  assert not np.any(np.asarray(greedy) == EOS)


def test_greedy_takes_argmax_and_pads_after_eos():
  greedy = _search(
      greedy_search.greedy_search, _fixed_distribution_model,
      np.float32([[0.1, 0.3, 0.6], [0.1, 0.6, 0.3], [0.1, 0.2, 0.7]]),
      {'index': jnp.array(0, jnp.int32), 'seen': jnp.zeros((2,), jnp.int32)},
      max_decode_length=3, eos_id=EOS)
  np.testing.assert_array_equal(np.asarray(greedy), [[2, 1, 0], [2, 1, 0]])


def test_greedy_forces_prefix():
  greedy = _search(
      greedy_search.greedy_search, _fixed_distribution_model, np.float32(HAND_PROBS),
      {'index': jnp.array(0, jnp.int32), 'seen': jnp.zeros((2,), jnp.int32)},
      jnp.array([0, 1], jnp.int32), max_decode_length=3, eos_id=EOS)
  # Row 0: forced 0, then argmax at steps 1, 2 (EOS); row 1: forced EOS ends it.
  np.testing.assert_array_equal(np.asarray(greedy), [[0, 1, 0], [1, 0, 0]])


def test_negative_alpha_is_rejected():
  with pytest.raises(UserError, match='alpha'):
    beam_search.beam_search(_toy_tokens_to_logits(_toy_table()), _initial_cache([0]),
                         prefix=None, alpha=-1.0, max_decode_length=LENGTH)


@pytest.mark.parametrize('alpha', [0.0, 1.0])
def test_stopping_at_the_best_keeps_the_best_hypothesis(alpha):
  table = _toy_table(2)
  initial_states = [0, 1, 2]
  cache = _initial_cache(initial_states)
  full = _beam(table, cache, beam_size=2, alpha=alpha)
  best = _beam(table, cache, beam_size=2, alpha=alpha, stop='best')
  np.testing.assert_array_equal(np.asarray(best[0][:, 0]), np.asarray(full[0][:, 0]))
  np.testing.assert_allclose(np.asarray(best[1][:, 0]), np.asarray(full[1][:, 0]), rtol=1e-6)
  exhaustive, _ = _brute_force(table, initial_states[0], None, alpha, 1)
  want = _beam(table, cache, beam_size=EXHAUSTIVE_BEAM, alpha=alpha)[0][0, 0]
  np.testing.assert_array_equal(np.asarray(want), exhaustive[0])


def _history_tokens_to_logits(table: np.ndarray):
  """The toy model of `_toy_tokens_to_logits`, its state recomputed from a history of the
  tokens fed, kept in the cache as [rows, steps]: a step written past the history's end
  (a cache that did not grow in time) is clamped onto the last slot and changes the model."""
  table = jnp.asarray(table)

  def tokens_to_logits(tokens, cache):
    last = tokens[:, 0]
    history = lax.dynamic_update_slice_in_dim(cache['history'], tokens, cache['index'], axis=1)
    state = (cache['initial'] + jnp.sum(history, axis=1)) % NUM_STATES
    logits = table[cache['index'], last, state]
    return logits, {'index': cache['index'] + 1, 'initial': cache['initial'],
                    'history': history}

  return tokens_to_logits


def _history_cache(initial_states, steps):
  initial = jnp.asarray(initial_states, jnp.int32)
  return {'index': jnp.array(0, jnp.int32), 'initial': initial,
          'history': jnp.zeros((len(initial_states), steps), jnp.int32)}


def _extend_history(cache, steps):
  history = cache['history']
  return {**cache, 'history': jnp.pad(history, ((0, 0), (0, steps - history.shape[1])))}


@pytest.mark.slow
@pytest.mark.parametrize('cache_lengths', [(1, 2, 4), (2, 4), (3, 5)])
def test_growing_cache_decodes_as_a_full_one(cache_lengths):
  table = _toy_table(4)
  initial_states = [0, 1, 2]
  prefix = jnp.array([2, 3, 4], jnp.int32)
  run = functools.partial(_search, beam_search.beam_search, _history_tokens_to_logits, table,
                          prefix=prefix, beam_size=3, max_decode_length=LENGTH, eos_id=EOS)
  full = run(_history_cache(initial_states, LENGTH))
  grown = run(_history_cache(initial_states, cache_lengths[0]),
              cache_lengths=cache_lengths, extend_cache=_extend_history)
  np.testing.assert_array_equal(np.asarray(grown[0]), np.asarray(full[0]))
  np.testing.assert_allclose(np.asarray(grown[1]), np.asarray(full[1]), rtol=1e-6)
  # The same model with its state in the cache directly: the history is a faithful copy.
  direct = _beam(table, _initial_cache(initial_states), prefix, beam_size=3)
  np.testing.assert_array_equal(np.asarray(full[0]), np.asarray(direct[0]))
  greedy = functools.partial(_search, greedy_search.greedy_search, _history_tokens_to_logits,
                             table, prefix=prefix, max_decode_length=LENGTH, eos_id=EOS)
  np.testing.assert_array_equal(
      np.asarray(greedy(_history_cache(initial_states, cache_lengths[0]),
                        cache_lengths=cache_lengths, extend_cache=_extend_history)),
      np.asarray(greedy(_history_cache(initial_states, LENGTH))))


@pytest.mark.slow
def test_a_cache_that_never_grows_changes_the_toy_model():
  # Guards the test above: without growth, the clamped history decodes something else.
  run = functools.partial(_search, beam_search.beam_search, _history_tokens_to_logits,
                          _toy_table(4), beam_size=3, max_decode_length=LENGTH, eos_id=EOS)
  full = run(_history_cache([0, 1, 2], LENGTH))
  short = run(_history_cache([0, 1, 2], 1))
  assert not np.array_equal(np.asarray(short[1]), np.asarray(full[1]))


@pytest.mark.parametrize('cache_lengths, extend, match', [
    ((2, 2, 4), _extend_history, 'increase'),
    ((1, 2), _extend_history, 'at least max_decode_length'),
    ((1, 4), None, 'extend_cache'),
])
def test_bad_cache_lengths_are_rejected(cache_lengths, extend, match):
  with pytest.raises(UserError, match=match):
    beam_search.beam_search(_history_tokens_to_logits(_toy_table()), _history_cache([0], 1),
                         prefix=None, max_decode_length=LENGTH, cache_lengths=cache_lengths,
                         extend_cache=extend)


@pytest.mark.parametrize('n, k, distinct', [(16384, 8, True), (16384, 8, False),
                                            (5000, 8, False), (3 * 128 * 16 + 1, 40, False),
                                            (300, 8, False)])
def test_blocked_top_k_equals_lax_top_k_ties_included(n, k, distinct):
  # Few distinct values force ties inside and across blocks, including at the k-th place;
  # lax.top_k breaks them towards the lower index, and so must the blocked search.
  rng = np.random.default_rng(n + k)
  x = (rng.standard_normal((6, n)) if distinct else rng.integers(-3, 4, (6, n)))
  x = jnp.asarray(x, jnp.float32).at[0, -5:].set(100.0)  # Best candidates in the last block.
  want_values, want_indices = lax.top_k(x, k)
  values, indices = jax.jit(common.top_k, static_argnums=1)(x, k)
  np.testing.assert_array_equal(values, want_values)
  np.testing.assert_array_equal(indices, want_indices)


def test_blocked_top_k_takes_the_lower_index_of_a_tie_across_blocks():
  # The block with the best maximum (block 2) comes after block 0, and each holds a 3:
  # the second place goes to block 0's, the lower index.
  x = np.full((1, 128 * 16), -10.0, np.float32)
  x[0, 10] = 3.0
  x[0, 256] = 5.0
  x[0, 257] = 3.0
  values, indices = common.top_k(jnp.asarray(x), 2)
  np.testing.assert_array_equal(values, [[5.0, 3.0]])
  np.testing.assert_array_equal(indices, [[256, 10]])


PREFERRED = (5, 6, 7, 8, 9, 10)  # The looping model's favourites, best first.


def _looping_logits(vocab: int = 12) -> np.ndarray:
  """The logits of a model that never ends: the same ranking at every step, 5 best, EOS
  last."""
  logits = np.full((vocab,), -20.0, np.float32)
  logits[EOS] = -30.0
  logits[list(PREFERRED)] = -np.arange(len(PREFERRED), dtype=np.float32)
  return logits


def _looping_tokens_to_logits(logits: np.ndarray):
  """The looping model: `logits` (`_looping_logits`) for every row at every step."""
  def tokens_to_logits(tokens, cache):
    return jnp.tile(logits, (tokens.shape[0], 1)), cache

  return tokens_to_logits


def _looping(search, cache, prefix=None, **options):
  """`search` (`_search`) on the looping model, EOS its end token."""
  return _search(search, _looping_tokens_to_logits, _looping_logits(), cache, prefix,
                 eos_id=EOS, **options)


def _rows(batch: int):
  """A cache that only sizes the batch."""
  return {'rows': jnp.zeros((batch,), jnp.int32)}


def _no_repeat_reference(n: int, length: int, prefix: list[int]) -> list[int]:
  """Greedy under fairseq's rule, step by step in plain Python."""
  sequence = list(prefix)
  while len(sequence) < length:
    tail = tuple(sequence[len(sequence) - n + 1:]) if n > 1 else ()
    banned = {sequence[j + n - 1] for j in range(len(sequence) - n + 1)
              if len(sequence) >= n - 1 and tuple(sequence[j:j + n - 1]) == tail}
    sequence.append(next(token for token in PREFERRED if token not in banned))
  return sequence


def test_no_repeat_ngram_size_never_repeats_an_ngram():
  got = _looping(greedy_search.greedy_search, _rows(1), max_decode_length=8,
                 no_repeat_ngram_size=2)
  # By hand: 5 5, then "5 5" is taken, so 6; "6 5" is new; after 5, both "5 5" and
  # "5 6" are taken, so 7; and so on.
  assert np.asarray(got)[0].tolist() == [5, 5, 6, 5, 7, 5, 8, 5] == _no_repeat_reference(
      2, 8, [])
  unlimited = _looping(greedy_search.greedy_search, _rows(1), max_decode_length=8)
  assert np.asarray(unlimited)[0].tolist() == [5] * 8


def test_beam_search_hypotheses_repeat_no_ngram():
  sequences, scores = _looping(beam_search.beam_search, _rows(1), beam_size=3,
                               max_decode_length=8, no_repeat_ngram_size=2)
  for hypothesis in np.asarray(sequences)[0].tolist():
    bigrams = list(zip(hypothesis, hypothesis[1:]))
    assert len(bigrams) == len(set(bigrams)), hypothesis
  assert np.all(np.asarray(scores) > common.NEG_INF / 2)  # Three real hypotheses.


def test_beam_searchs_first_step_bans_no_ngram():
  """Step 0 runs outside the search loop on a constant state, where no n-gram is complete:
  a ban there is constant work that XLA folds at compile time, slowly enough to log an
  alarm on a real vocabulary. Only the loop's steps scatter banned tokens."""
  def outside_the_loop(no_repeat_ngram_size):
    run = lambda: beam_search.beam_search(
        _looping_tokens_to_logits(_looping_logits()), _rows(1), prefix=None, beam_size=3,
        max_decode_length=8, eos_id=EOS, no_repeat_ngram_size=no_repeat_ngram_size)
    return collections.Counter(
        equation.primitive.name for equation in jax.make_jaxpr(run)().eqns)

  assert outside_the_loop(0)['while'] == 1
  assert outside_the_loop(2) == outside_the_loop(0)


def test_no_repeat_trigrams_with_a_forced_prefix_match_the_reference():
  got = _looping(greedy_search.greedy_search, {}, jnp.array([11]), max_decode_length=12,
                 no_repeat_ngram_size=3)
  assert np.asarray(got)[0].tolist() == _no_repeat_reference(3, 12, [11])


@pytest.mark.parametrize('method', ['greedy', 'beam'])
def test_max_lengths_end_each_row_with_eos(method):
  max_lengths = common.OutputLimits(max_length_ratio=1.0, max_length_offset=2).max_lengths(
      jnp.array([1, 4]))
  assert max_lengths.tolist() == [3, 6]
  kwargs = dict(prefix=jnp.array([11, 11]), max_decode_length=10, max_lengths=max_lengths)
  if method == 'greedy':
    got = np.asarray(_looping(greedy_search.greedy_search, {}, **kwargs))
  else:
    got = np.asarray(_looping(beam_search.beam_search, {}, beam_size=2, **kwargs)[0])[:, 0]
  # The prefix, then 3 and 6 generated tokens, the last of them EOS.
  assert got.tolist() == [[11, 5, 5, EOS] + [0] * 6, [11, 5, 5, 5, 5, 5, EOS] + [0] * 3]


# Tokens 0 (pad), 1 (EOS), 2 and 4 (tags), 3 and 5 (words). The tag 2 is the favourite at
# every step, as the forced tag is for a briefly trained model; EOS is second from step 3.
TAG_LOVING_PROBS = ([[0.05, 0.05, 0.5, 0.15, 0.2, 0.05]] * 3
                    + [[0.05, 0.3, 0.5, 0.1, 0.02, 0.03]] * 3)


def _tag_loving_search(method, banned_ids):
  """Outputs [B, K, 6] of greedy search (K = 1) or beam search (K = 2, best first) on the
  tag-loving model, with beam search's scores [B, K] (None for greedy)."""
  banned = np.isin(np.arange(len(TAG_LOVING_PROBS[0])), banned_ids)
  kwargs = dict(prefix=jnp.array([2, 2]), max_decode_length=6, eos_id=EOS,
                banned_tokens=banned)
  cache = {'index': jnp.array(0, jnp.int32), 'seen': jnp.zeros((2,), jnp.int32)}
  run = functools.partial(_search, model=_fixed_distribution_model,
                          weights=np.float32(TAG_LOVING_PROBS), cache=cache, **kwargs)
  if method == 'greedy':
    return np.asarray(run(greedy_search.greedy_search))[:, None], None
  sequences, scores = run(beam_search.beam_search, beam_size=2, alpha=1.0)
  return np.asarray(sequences), np.asarray(scores)


@pytest.mark.parametrize('banned_ids', [(0, 2, 4), (0, EOS, 2, 4)])
@pytest.mark.parametrize('method', ['greedy', 'beam'])
def test_banned_tokens_are_never_generated_after_the_prefix_and_eos_still_ends(banned_ids,
                                                                               method):
  """Without the ban both searches repeat the forced tag to the length limit; with it they
  take the best allowed tokens, the word 3 twice then EOS (allowed even when banned), and
  beam search scores them by the model's own probabilities."""
  assert _tag_loving_search(method, ())[0][:, 0].tolist() == [[2] * 6] * 2
  sequences, scores = _tag_loving_search(method, banned_ids)
  assert sequences[:, 0].tolist() == [[2, 3, 3, EOS, 0, 0]] * 2
  for hypothesis in sequences.reshape(-1, 6).tolist():
    generated = hypothesis[1:hypothesis.index(EOS) if EOS in hypothesis else None]
    assert not set(generated) & {0, 2, 4}, hypothesis
  if scores is not None:
    np.testing.assert_allclose(scores[:, 0], (2 * math.log(0.15) + math.log(0.3)) / 3,
                               rtol=1e-5)


def test_banned_tokens_hold_from_the_first_step_without_a_prefix():
  got = _looping(greedy_search.greedy_search, _rows(1), max_decode_length=4,
                 banned_tokens=np.isin(np.arange(12), PREFERRED[:2]))
  assert np.asarray(got)[0].tolist() == [PREFERRED[2]] * 4


@pytest.mark.parametrize('stop', ['beam_full', 'best'])
def test_a_row_gets_the_outputs_it_gets_alone_whatever_else_its_batch_holds(stop):
  """A row its stop criterion settles finishes nothing more while the others go on, so
  the hypotheses it returns do not depend on which rows share its batch."""
  initial_states = [0, 1, 2]
  for seed in range(8):
    run = functools.partial(_beam, _toy_table(seed), beam_size=2, alpha=0.0, stop=stop)
    together = run(_initial_cache(initial_states))
    for row, state in enumerate(initial_states):
      alone = run(_initial_cache([state]))
      np.testing.assert_array_equal(together[0][row], alone[0][0], err_msg=f'seed {seed}')
      np.testing.assert_array_equal(together[1][row], alone[1][0], err_msg=f'seed {seed}')


@pytest.mark.parametrize('stop, want', [('beam_full', [2, EOS]), ('exact', [EOS, 0])])
def test_fairseqs_stop_rule_finishes_hypotheses_only_among_the_beams_best(stop, want):
  """Beam 1: EOS (p 0.4) is the step's second best expansion. fairseq's search
  ('beam_full') does not finish it and goes on to '2 EOS'; T5X's ('exact') finishes it
  among the 2 * beam best, and it wins: log 0.4 > log 0.6 + log 0.5."""
  table = np.full((LENGTH, VOCAB, NUM_STATES, VOCAB), -1e9, np.float32)
  table[0, 0, :, 2], table[0, 0, :, EOS] = np.log(0.6), np.log(0.4)
  table[1, 2, :, 2], table[1, 2, :, EOS] = np.log(0.5), np.log(0.5)
  sequences, scores = _beam(table, _initial_cache([0]), beam_size=1, alpha=0.0,
                            max_decode_length=2, stop=stop)
  np.testing.assert_array_equal(sequences[0, 0], want)
  np.testing.assert_allclose(scores[0, 0], np.log(0.6 * 0.5) if want[0] == 2 else np.log(0.4),
                             rtol=1e-5)


@pytest.mark.parametrize('stop', ['beam_full', 'best'])
def test_a_row_stops_only_once_the_outputs_read_have_finished(stop):
  """The bound settles a row once its best hypothesis is final, often before the others
  finish: asked for `outputs` hypotheses, the row goes on until that many have finished,
  and its best hypothesis stays what it was."""
  cache = _initial_cache([0, 1, 2])
  short_rows = 0
  for seed in range(4):
    run = functools.partial(_beam, _toy_table(seed), cache, beam_size=3, alpha=0.0, stop=stop)
    best_alone, listed = run(), run(outputs=3)
    short_rows += int(np.sum(np.sum(np.asarray(best_alone[1]) > common.NEG_INF / 2, axis=1) < 3))
    assert np.all(np.asarray(listed[1]) > common.NEG_INF / 2), f'seed {seed}'
    np.testing.assert_array_equal(listed[0][:, 0], best_alone[0][:, 0], err_msg=f'seed {seed}')
    np.testing.assert_array_equal(listed[1][:, 0], best_alone[1][:, 0], err_msg=f'seed {seed}')
  assert short_rows >= 4  # Rows the bound settled with fewer than 3 finished.


def test_more_outputs_than_the_beam_are_rejected():
  with pytest.raises(UserError, match=r'outputs must be from 1 to beam_size \(2\), got 3'):
    beam_search.beam_search(_toy_tokens_to_logits(_toy_table()), _initial_cache([0]),
                            prefix=None, beam_size=2, outputs=3, max_decode_length=LENGTH)
