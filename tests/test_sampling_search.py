"""Tests for sampling (t5x_mt.decoding.search.sampling): the draws follow the model's
distribution and stay inside their truncations, the same seed draws the same outputs, and
a sentence draws the same alone as in a batch; the flags, gin and CTranslate2 edges."""

import dataclasses
import functools
import importlib.util
import json
import math
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from t5x_mt.config import decoding_flags
from t5x_mt.config import run_loading
from t5x_mt.core import cli
from t5x_mt.core.errors import UserError
from t5x_mt.decoding import ensemble
from t5x_mt.decoding import inference
from t5x_mt.decoding import prediction
from t5x_mt.decoding import reranking
from t5x_mt.decoding import search
from t5x_mt.decoding.search import common
from t5x_mt.decoding.search import sampling_search
from t5x_mt.model import models

from test_launch_translate_evaluate import LAUNCH
from test_launch_translate_evaluate import run_in_process
from test_network import PAIRS, TINY, padded_batch, random_params

EOS = 1
LOGITS = np.log(np.array([0.02, 0.08, 0.30, 0.25, 0.15, 0.10, 0.06, 0.04]))
DRAWS = 4000


def _fixed_model(logits: np.ndarray = LOGITS):
  """The same next-token logits at every step, for every row."""
  table = jnp.asarray(logits, jnp.float32)

  def tokens_to_logits(tokens, cache):
    return jnp.tile(table, (tokens.shape[0], 1)), cache

  return tokens_to_logits


def _first_tokens(settings: search.SamplingSettings, rows: int = DRAWS,
                  normalize: bool = True, logits: np.ndarray = LOGITS) -> np.ndarray:
  """The first token each of `rows` sources draws (one step, no prefix)."""
  run = jax.jit(lambda ids: sampling_search.sampling_search(
      _fixed_model(logits), {'rows': jnp.zeros((rows,))}, settings, source_ids=ids,
      prefix=None, max_decode_length=1, normalize=normalize))
  sequences, _ = run(jnp.arange(rows, dtype=jnp.uint32))
  return np.asarray(sequences)[:, 0, 0]


def _softmax(x: np.ndarray) -> np.ndarray:
  e = np.exp(x - x[np.isfinite(x)].max())
  return e / e.sum()


def _chi_square_p(drawn: np.ndarray, probs: np.ndarray) -> float:
  """p-value of the draws' counts against `probs` over the tokens of nonzero probability."""
  support = probs > 0
  counts = np.bincount(drawn, minlength=len(probs))
  assert counts[~support].sum() == 0, counts
  return stats.chisquare(counts[support], probs[support] * len(drawn)).pvalue


@pytest.mark.parametrize('temperature', [1.0, 0.5, 2.0])
def test_draws_follow_the_softmax_of_the_tempered_logits(temperature):
  drawn = _first_tokens(search.SamplingSettings(temperature=temperature, seed=7))
  assert _chi_square_p(drawn, _softmax(LOGITS / temperature)) > 0.001
  # And not another temperature's: the test can tell them apart.
  other = _softmax(LOGITS / (temperature * 2))
  counts = np.bincount(drawn, minlength=len(LOGITS))
  assert stats.chisquare(counts, other * DRAWS).pvalue < 1e-6


def test_an_ensembles_scores_are_renormalised_before_drawing():
  """An ensemble's step gives combined scores that need not sum to one (normalize False)."""
  shifted = LOGITS + 3.0
  drawn = _first_tokens(search.SamplingSettings(seed=3), normalize=False, logits=shifted)
  assert _chi_square_p(drawn, _softmax(LOGITS)) > 0.001


def _truncated(probs: np.ndarray, settings: search.SamplingSettings) -> np.ndarray:
  """The distribution the settings' truncations leave, computed independently (numpy)."""
  probs = _softmax(np.log(probs) / settings.temperature)
  if settings.top_k:
    kth = np.sort(probs)[::-1][settings.top_k - 1]
    probs = np.where(probs >= kth, probs, 0.0)
    probs /= probs.sum()
  if settings.top_p < 1:
    order = np.argsort(-probs, kind='stable')
    before = np.cumsum(probs[order]) - probs[order]
    kept = np.zeros(len(probs), bool)
    kept[order[before < settings.top_p]] = True
    probs = np.where(kept, probs, 0.0)
    probs /= probs.sum()
  if settings.epsilon:
    probs = np.where((probs >= settings.epsilon) | (probs == probs.max()), probs, 0.0)
    probs /= probs.sum()
  return probs


@pytest.mark.parametrize('settings, support', [
    (search.SamplingSettings(top_k=2), {2, 3}),
    (search.SamplingSettings(top_k=3), {2, 3, 4}),
    (search.SamplingSettings(top_p=0.6), {2, 3, 4}),   # 0.30 + 0.25 < 0.6 <= + 0.15
    (search.SamplingSettings(top_p=0.25), {2}),         # The most likely reaches it alone.
    (search.SamplingSettings(epsilon=0.09), {2, 3, 4, 5}),
    (search.SamplingSettings(epsilon=0.5), {2}),        # None reaches it: the best stays.
    (search.SamplingSettings(top_k=4, top_p=0.8), {2, 3, 4}),
    (search.SamplingSettings(temperature=0.5, epsilon=0.05), {2, 3, 4, 5}),
])
def test_truncations_never_draw_outside_their_set(settings, support):
  probs = _truncated(np.exp(LOGITS), settings)
  assert set(np.flatnonzero(probs)) == support  # The reference agrees with the hand count.
  drawn = _first_tokens(dataclasses.replace(settings, seed=11))
  assert set(drawn.tolist()) == support
  if len(support) > 1:
    assert _chi_square_p(drawn, probs) > 0.001


# Logits by [step, last token, per-row state, next token].
STATE_TABLE = np.random.RandomState(0).normal(scale=1.5, size=(7, 6, 3, 6)).astype(np.float32)


def _state_model():
  """Logits that depend on the step, the last token and a per-row state in the cache."""
  table = jnp.asarray(STATE_TABLE)

  def tokens_to_logits(tokens, cache):
    last = tokens[:, 0]
    state = (cache['state'] + last) % 3
    return table[cache['index'], last, state], {'index': cache['index'] + 1, 'state': state}

  return tokens_to_logits


def _sample_rows(states, ids, settings, samples=1, no_repeat_ngram_size=0, **rules):
  """Samples [B, samples, 6] and their log-probabilities of the state model's rows; the
  array `rules` (prefix, banned_tokens, max_lengths) are traced."""
  run = _jitted_sampler(settings, samples, no_repeat_ngram_size)
  sequences, log_probs = run(jnp.asarray(states, jnp.int32), jnp.asarray(ids, jnp.uint32),
                             rules)
  return np.asarray(sequences), np.asarray(log_probs)


def _sampler(states, ids, rules, *, settings, samples, no_repeat_ngram_size):
  cache = {'index': jnp.array(0, jnp.int32), 'state': states}
  return sampling_search.sampling_search(
      _state_model(), cache, settings, source_ids=ids, samples=samples,
      max_decode_length=6, eos_id=EOS, no_repeat_ngram_size=no_repeat_ngram_size,
      **{'prefix': None, **rules})


@functools.lru_cache(maxsize=None)
def _jitted_sampler(settings: search.SamplingSettings, samples: int,
                    no_repeat_ngram_size: int):
  return jax.jit(functools.partial(_sampler, settings=settings, samples=samples,
                                   no_repeat_ngram_size=no_repeat_ngram_size))


def test_the_same_seed_draws_the_same_outputs_and_another_seed_others():
  states, ids = [0, 1, 2, 0, 1, 2, 0, 1], list(range(8))
  settings = search.SamplingSettings(seed=5)
  first, first_scores = _sample_rows(states, ids, settings, samples=4)
  again, again_scores = _sample_rows(states, ids, settings, samples=4)
  np.testing.assert_array_equal(first, again)
  np.testing.assert_array_equal(first_scores, again_scores)
  other, _ = _sample_rows(states, ids, dataclasses.replace(settings, seed=6), samples=4)
  assert (first != other).any()
  # A source's samples differ from one another.
  assert len({tuple(s) for s in first.reshape(-1, 6).tolist()}) > 8


def test_a_row_draws_the_same_alone_and_in_a_batch():
  states, ids = [2, 0, 1, 1, 0], [40, 17, 3, 99, 5]
  settings = search.SamplingSettings(seed=1, top_p=0.9)
  together, together_scores = _sample_rows(states, ids, settings, samples=3)
  for row, (state, source_id) in enumerate(zip(states, ids)):
    alone, alone_scores = _sample_rows([state], [source_id], settings, samples=3)
    np.testing.assert_array_equal(together[row], alone[0])
    np.testing.assert_array_equal(together_scores[row], alone_scores[0])
  # Reversed, every row keeps its draws: they follow the source, not its place.
  reversed_rows, _ = _sample_rows(states[::-1], ids[::-1], settings, samples=3)
  np.testing.assert_array_equal(reversed_rows[::-1], together)


def _model_log_probs(states, sequences) -> np.ndarray:
  """The state model's summed log-probability of each sequence (numpy), EOS included."""
  table = STATE_TABLE.astype(np.float64)
  totals = []
  for state, sequence in zip(states, sequences):
    last, total = 0, 0.0
    for step, token in enumerate(sequence):
      state = (state + last) % 3
      logits = table[step, last, state]
      total += logits[token] - np.log(np.exp(logits).sum())
      if token == EOS:
        break
      last = token
    totals.append(total)
  return np.array(totals)


def test_a_samples_score_is_its_log_probability_under_the_model():
  states = [0, 1, 2, 0]
  settings = search.SamplingSettings(seed=2, temperature=1.7, top_k=4)
  sequences, log_probs = _sample_rows(states, [1, 2, 3, 4], settings)
  np.testing.assert_allclose(log_probs[:, 0], _model_log_probs(states, sequences[:, 0]),
                             rtol=1e-5)


def test_samples_keep_the_forced_tag_banned_pieces_and_output_limits():
  rows = 64
  banned = np.isin(np.arange(6), [0, 4])
  sequences, _ = _sample_rows(
      [0] * rows, range(rows), search.SamplingSettings(temperature=3.0, seed=9), samples=2,
      prefix=jnp.full((rows,), 5, jnp.int32), banned_tokens=banned, no_repeat_ngram_size=2,
      max_lengths=jnp.full((rows,), 3, jnp.int32))
  sequences = sequences.reshape(-1, 6)
  assert (sequences[:, 0] == 5).all()
  for sequence in sequences.tolist():
    generated = sequence[1:sequence.index(EOS) + 1] if EOS in sequence[1:] else sequence[1:]
    assert EOS in sequence[1:5], sequence  # At most 3 generated pieces, EOS included.
    assert len(generated) <= 3 and not {0, 4} & set(generated[:-1]), sequence
    bigrams = list(zip(sequence, sequence[1:len(generated) + 1]))
    assert len(bigrams) == len(set(bigrams)), sequence


def test_a_methods_n_samples_come_back_ranked_by_their_scores():
  rows = 3
  cache = {'index': jnp.array(0, jnp.int32), 'state': jnp.zeros((rows,), jnp.int32)}
  decode = jax.jit(lambda cache, source_ids: search.get('sampling').decode(
      search.SamplingSettings(seed=4), common.SearchProblem(
          _state_model(), cache, prefix=None, max_decode_length=6, alpha=1.0, eos_id=EOS,
          source_ids=source_ids), 5))
  found = decode(cache, jnp.arange(rows, dtype=jnp.uint32))
  scores = np.asarray(found.scores)
  assert scores.shape == (rows, 5) and (np.diff(scores, axis=1) <= 0).all()
  np.testing.assert_allclose(
      scores, np.asarray(found.log_probs) / np.asarray(
          common.length_penalty(found.lengths, 1.0)), rtol=1e-6)


@pytest.mark.slow
def test_a_sentence_draws_the_same_in_any_batch_of_the_model():
  """Through predict_batch on a Transformer: rows keyed by their tokens, whatever their
  batch, their place in it or the padding of its bucket."""
  model = models.TranslationModel(TINY)
  params = random_params(TINY, seed=1)
  tokens = np.asarray(padded_batch(PAIRS, encoder_length=8)[0])
  options = dict(direction=0, prefix_id=None, max_decode_length=6, alpha=1.0,
                 num_pieces=TINY.vocab_size, nbest=3,
                 search_settings=search.SamplingSettings(seed=3, temperature=1.5))
  together = prediction.predict_batch(model, params, tokens, input_length=8, **options)
  for row in range(tokens.shape[0]):
    wider = np.pad(tokens[row:row + 1], ((0, 0), (0, 4)))
    alone = prediction.predict_batch(model, params, wider, input_length=8, **options)
    np.testing.assert_array_equal(np.asarray(alone.sequences)[0],
                                  np.asarray(together.sequences)[row])
  assert len({tuple(s) for s in np.asarray(together.sequences).reshape(-1, 6).tolist()}) > 2


@pytest.mark.slow
def test_an_ensemble_of_one_model_samples_as_the_model_does():
  """An ensemble's step gives log-probabilities, the model's logits: one distribution."""
  model = models.TranslationModel(TINY)
  params = random_params(TINY, seed=1)
  tokens = np.asarray(padded_batch(PAIRS, encoder_length=8)[0])
  options = dict(input_length=8, direction=0, prefix_id=None, max_decode_length=6,
                 alpha=1.0, num_pieces=TINY.vocab_size, nbest=2,
                 search_settings=search.SamplingSettings(seed=8, top_p=0.95))
  alone = prediction.predict_batch(model, params, tokens, **options)
  one = ensemble.Ensemble([model], [1.0], 'mean_log_prob', num_pieces=TINY.vocab_size)
  together = prediction.predict_batch(one, (params,), tokens, **options)
  np.testing.assert_array_equal(np.asarray(together.sequences), np.asarray(alone.sequences))
  np.testing.assert_allclose(np.asarray(together.log_probs), np.asarray(alone.log_probs),
                             rtol=1e-5)


# Through the Translator of the session's tiny run, on its mesh of eight devices.

SENTENCES = ['Good morning', 'Where is the station?', 'Thank you very much', 'Yes',
             'The first of January 2024', 'Seven']


@pytest.mark.slow  # Compiles a sampling search per batch shape; a row alone and in a batch stays fast.
def test_the_translator_samples_each_sentence_as_it_would_alone(trained_run):
  translator = run_loading.load_translator(str(trained_run), search='sampling', seed=3,
                                           top_k=20, batch_size=4)
  assert translator.mesh.size == 8
  together = translator.translate(SENTENCES, 'eng_Latn', 'hau_Latn')
  assert [translator.translate([s], 'eng_Latn', 'hau_Latn')[0] for s in SENTENCES] == together
  nbest = translator.translate_nbest(SENTENCES[:2], 'eng_Latn', 'hau_Latn', 4)
  assert [len(hypotheses) for hypotheses in nbest] == [4, 4]
  for hypotheses in nbest:
    scores = [h.score for h in hypotheses]
    assert scores == sorted(scores, reverse=True)
    assert all(math.isclose(h.score, h.log_prob / max(h.length, 1), rel_tol=1e-5)
               for h in hypotheses)


def _evaluate_flags(argv: list[str]):
  spec = importlib.util.spec_from_file_location('launch_evaluate', LAUNCH / 'evaluate.py')
  evaluate = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(evaluate)
  args = evaluate.parse_flags([*argv, '--tasks=cldr_eng_Latn.hau_Latn'])
  return decoding_flags.decoding_overrides(args)


def test_search_flags_reach_the_settings(trained_run):
  overrides = _evaluate_flags([f'--checkpoint_dir={trained_run}', '--search=sampling',
                               '--top_k=5', '--seed=2'])
  assert overrides == {'search': 'sampling', 'top_k': 5, 'seed': 2}
  translator = run_loading.load_model(str(trained_run), None, None, overrides)
  assert translator.settings.search_settings == search.SamplingSettings(top_k=5, seed=2)
  # A method's settings choose it; --beam_size=1 is still a greedy beam.
  assert _evaluate_flags([f'--checkpoint_dir={trained_run}', '--epsilon=0.02']) == {
      'search': 'sampling', 'epsilon': 0.02}
  assert _evaluate_flags([f'--checkpoint_dir={trained_run}', '--beam_size=1']) == {
      'search': 'beam', 'beam_size': 1}


@pytest.mark.parametrize('flags, message', [
    (['--top_k=-1'], '--top_k: must be >= 0, got -1'),
    (['--top_p=1.5'], '--top_p: must be <= 1.0, got 1.5'),
    (['--epsilon=1'], '--epsilon: must be < 1.0, got 1.0'),
    (['--temperature=0'], '--temperature: must be > 0.0, got 0.0'),
    (['--search=nucleus'], "--search: 'nucleus' is not one of 'beam', 'greedy', 'sampling'"),
    (['--search=beam', '--top_k=5'], '--top_k: a setting of --search=sampling, not of '
     '--search=beam'),
    (['--top_k=5', '--beam_size=3'], '--beam_size (beam), --top_k (sampling): settings of '
     'different search methods; give --search'),
])
def test_a_bad_search_flag_is_one_line_naming_it(trained_run, flags, message):
  with pytest.raises(UserError) as error:
    _evaluate_flags([f'--checkpoint_dir={trained_run}', *flags])
  assert str(error.value) == message


def test_a_bad_search_flag_value_is_refused_before_anything_loads(tmp_path):
  parser = cli.argument_parser('')
  decoding_flags.add_decoding_flags(parser)
  with pytest.raises(UserError, match=r"^argument --top_k: invalid int value: '0.5'; see"):
    parser.parse_args(['--top_k=0.5'])


def test_a_runs_config_may_choose_sampling_and_its_settings(trained_run, tmp_path):
  run = tmp_path / 'run'
  shutil.copytree(trained_run, run)
  with open(run / 'config.gin', 'a', encoding='utf-8') as config:
    config.write("\ndecoding.DecodeSettings.search = 'sampling'\n"
                 'decoding.DecodeSettings.epsilon = 0.02\n'
                 'decoding.DecodeSettings.seed = 4\n')
  saved = run_loading.read_run(str(run))
  assert saved.decode.search_settings == search.SamplingSettings(epsilon=0.02, seed=4)
  # A flag of another method chooses it, and the sampling settings wait unused.
  assert saved.decode_settings({'search': 'beam', 'beam_size': 2}).search_settings == (
      search.BeamSettings(beam_size=2))


def test_decode_settings_hold_every_methods_settings_under_their_gin_names():
  settings = inference.DecodeSettings(search='sampling', top_p=0.9)
  assert settings.search_settings == search.SamplingSettings(top_p=0.9)
  assert settings.beam_size == search.BeamSettings().beam_size  # Kept, unused.
  with pytest.raises(UserError, match=r"^decoding.DecodeSettings.top_p: must be <= 1.0"):
    inference.DecodeSettings(top_p=2.0)


def test_ctranslate2_refuses_epsilon_by_name():
  from t5x_mt.export import ctranslate2_translator  # pylint: disable=g-import-not-at-top
  settings = inference.DecodeSettings(search='sampling', epsilon=0.02)
  with pytest.raises(UserError) as error:
    ctranslate2_translator.check_settings(settings, {'search': 'sampling', 'epsilon': 0.02},
                                          'run/config.gin')
  assert str(error.value) == ('--epsilon=0.02: CTranslate2 samples with top-k, top-p and '
                              'temperature, not epsilon; give --epsilon=0, or decode with '
                              '--checkpoint_dir')
  with pytest.raises(UserError, match=r"^decoding.DecodeSettings.epsilon = 0.02 in "
                     r"run/config.gin: CTranslate2 samples"):
    ctranslate2_translator.check_settings(settings, {}, 'run/config.gin')
  ctranslate2_translator.check_settings(  # Top-k, top-p and temperature it does.
      inference.DecodeSettings(search='sampling', top_k=5, top_p=0.9, temperature=0.7), {},
      'run/config.gin')
  assert ctranslate2_translator.SEARCH_OPTIONS['sampling'](
      search.SamplingSettings(top_k=5, top_p=0.9, temperature=0.7)) == dict(
          beam_size=1, num_hypotheses=1, sampling_topk=5, sampling_topp=0.9,
          sampling_temperature=0.7)


def test_rerank_chooses_by_mbr_among_epsilon_samples_it_decodes(trained_run, tmp_path,
                                                               monkeypatch, capsys):
  sources = ['Good morning', 'Thank you very much', '', 'Seven']
  (tmp_path / 'src.eng').write_text(''.join(f'{s}\n' for s in sources), encoding='utf-8')
  code, _, err = run_in_process('rerank.py', [
      f'--checkpoint_dir={trained_run}', f'--source={tmp_path / "src.eng"}',
      '--src_lang=eng_Latn', '--tgt_lang=hau_Latn', '--mbr_samples=4', '--epsilon=0.02',
      '--seed=5', '--batch_size=4', f'--output={tmp_path / "mbr.hau"}'], monkeypatch, capsys)
  assert code == 0, err
  translator = run_loading.load_translator(str(trained_run), search='sampling',
                                           epsilon=0.02, seed=5, batch_size=4)
  # The sentences decoded together, as rerank.py decodes them: the same compiled search.
  decoded = iter(translator.translate_nbest([s for s in sources if s], 'eng_Latn',
                                            'hau_Latn', 4))
  lists = [next(decoded) if s else [inference.Hypothesis('', 0.0, 0.0, 0)] for s in sources]
  candidates = reranking.from_hypotheses(lists, 'src.eng')
  expected = candidates.chosen(reranking.mbr_choices(candidates))
  assert (tmp_path / 'mbr.hau').read_text('utf-8').splitlines() == expected
  assert [len(hypotheses) for hypotheses in lists] == [4, 4, 1, 4]


@pytest.mark.parametrize('flags, message', [
    (['--nbest={list}', '--mbr', '--epsilon=0.02'],
     '--epsilon: decodes candidates, only with --mbr_samples'),
    (['--nbest={list}', '--mbr_samples=4'],
     '--nbest: not with --mbr_samples, which decodes the candidates'),
    (['--checkpoint_dir={run}', '--mbr_samples=4', '--source={list}'],
     '--src_lang: needed with --mbr_samples'),
    (['--checkpoint_dir={run}', '--mbr_samples=1'],
     '--mbr_samples: MBR needs at least 2 candidates, got 1'),
])
def test_rerank_decoding_flags_are_refused_in_one_line_where_they_do_not_fit(
    trained_run, tmp_path, monkeypatch, capsys, flags, message):
  (tmp_path / 'list.nbest').write_text('0 ||| a ||| forward=-1.0 ||| -1.0\n', 'utf-8')
  flags = [flag.format(list=tmp_path / 'list.nbest', run=trained_run) for flag in flags]
  code, out, err = run_in_process('rerank.py', [*flags, f'--output={tmp_path / "out"}'],
                                  monkeypatch, capsys)
  assert (code, out, err.strip().splitlines()) == (2, '', [f'error: {message}'])


def test_back_translation_samples_reproducibly_and_records_how(trained_run, tmp_path,
                                                              monkeypatch, capsys):
  """Sampled synthetic data (Edunov et al.; here forward, the tiny run's direction): the
  pairs are the sampling Translator's, and the corpus records the search, so a restart
  with another seed is refused."""
  mono = tmp_path / 'eng.txt'
  lines = ['Monday', 'January and February', 'Thank you']
  mono.write_text(''.join(f'{line}\n' for line in lines), encoding='utf-8')
  flags = [f'--checkpoint_dir={trained_run}', '--lang=eng_Latn', '--into=hau_Latn',
           '--mode=ft', f'--monolingual={mono}', f'--output={tmp_path / "bt"}',
           '--batch_size=2', '--search=sampling', '--top_p=0.9']
  code, _, err = run_in_process('back_translate.py', [*flags, '--seed=1'], monkeypatch, capsys)
  assert code == 0, err
  manifest = json.loads((tmp_path / 'bt' / 'synthetic.json').read_text('utf-8'))
  made_from = manifest['directions']['eng_Latn-hau_Latn']['made_from']
  assert made_from['decoding'] == {'search': 'sampling', 'top_p': 0.9, 'seed': 1,
                                   'batch_size': 2}
  translator = run_loading.load_translator(str(trained_run), search='sampling', top_p=0.9,
                                           seed=1)
  expected = translator.translate(lines, 'eng_Latn', 'hau_Latn')
  pairs = (tmp_path / 'bt' / 'eng_Latn-hau_Latn.hau_Latn').read_text('utf-8').splitlines()
  assert pairs == [e for e in expected if e.strip()]
  code, _, err = run_in_process('back_translate.py', [*flags, '--seed=2'], monkeypatch, capsys)
  assert code == 2 and 'made from other input, model or flags' in err


def test_translate_samples_through_ctranslate2_and_refuses_epsilon(trained_run, tmp_path,
                                                                   monkeypatch, capsys):
  from t5x_mt.export import ctranslate2_export  # pylint: disable=g-import-not-at-top
  from test_export import random_run  # pylint: disable=g-import-not-at-top
  run, _, _ = random_run(trained_run, tmp_path / 'run', {}, eos_weight=3.5)
  ctranslate2_export.export_run(str(run), str(tmp_path / 'ct2'), 'float32')
  (tmp_path / 'in.eng').write_text(''.join(f'{s}\n' for s in SENTENCES), encoding='utf-8')
  flags = [f'--ctranslate2={tmp_path / "ct2"}', '--src_lang=eng_Latn', '--tgt_lang=hau_Latn',
           f'--input={tmp_path / "in.eng"}', '--parallel_batches=1']
  outputs = []
  for seed in (3, 3, 4):
    code, out, err = run_in_process('translate.py', [*flags, '--search=sampling',
                                                     '--top_k=5', f'--seed={seed}'],
                                    monkeypatch, capsys)
    assert code == 0 and len(out.splitlines()) == len(SENTENCES), err
    outputs.append(out)
  assert outputs[0] == outputs[1] != outputs[2]
  code, out, err = run_in_process('translate.py', [*flags, '--epsilon=0.02'], monkeypatch,
                                  capsys)
  assert (code, out, err.strip().splitlines()) == (2, '', [
      'error: --epsilon=0.02: CTranslate2 samples with top-k, top-p and temperature, not '
      'epsilon; give --epsilon=0, or decode with --checkpoint_dir'])
