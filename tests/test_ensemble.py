"""Ensembles decode as one model: one run alone, copies of a run, and the step's scores
as the combination of two different architectures' teacher-forced log-probabilities."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.decoding import search
from t5x_mt.decoding.search import common
from t5x_mt.decoding import ensemble
from t5x_mt.decoding import ensemble_combinations
from t5x_mt.model import models
from t5x_mt.decoding import prediction
from t5x_mt.config import run_loading
from t5x_mt.core.errors import UserError
from test_network import PAIRS
from test_network import TINY
from test_network import jitted_forward
from test_network import padded_batch
from test_network import random_params

SENTENCES = ['Good morning.', 'Thank you very much.', 'Where is the station?', 'Monday']

# Two members that share the vocabulary and differ in everything else the model has.
PRE_LN = dataclasses.replace(TINY, dropout_rate=0.0)
POST_B2T_RELATIVE = dataclasses.replace(
    TINY, dropout_rate=0.0, emb_dim=24, head_dim=12, mlp_dim=40, num_encoder_layers=3,
    num_decoder_layers=1, layer_norm='post_b2t', position_embedding='relative',
    relative_in_decoder=True)


def nbest_of(translator, nbest=3):
  return translator.translate_nbest(SENTENCES, 'eng_Latn', 'hau_Latn', nbest)


@pytest.fixture(scope='module')
def single(trained_run):
  return run_loading.load_translator(str(trained_run), beam_size=3)


def test_an_ensemble_of_one_run_translates_and_scores_as_the_run(trained_run, single):
  alone = run_loading.load_ensemble([(str(trained_run), 2.5)], 'mean_log_prob', beam_size=3)
  assert isinstance(alone.model, ensemble.Ensemble)
  assert nbest_of(alone) == nbest_of(single)
  assert alone.translate(SENTENCES, 'eng_Latn', 'hau_Latn') == single.translate(
      SENTENCES, 'eng_Latn', 'hau_Latn')


@pytest.mark.parametrize('combination', ensemble_combinations.COMBINATIONS)
def test_two_copies_of_a_run_translate_as_the_run(trained_run, single, combination):
  copies = run_loading.load_ensemble([(str(trained_run), 1.0), (str(trained_run), 3.0)],
                                     combination, beam_size=3)
  want = nbest_of(single)
  got = nbest_of(copies)
  assert [[h.text for h in hypotheses] for hypotheses in got] == [
      [h.text for h in hypotheses] for hypotheses in want]
  np.testing.assert_allclose([[h.log_prob for h in hs] for hs in got],
                             [[h.log_prob for h in hs] for hs in want], rtol=1e-5, atol=1e-5)


def _teacher_forced_log_probs(config, params, encoder_tokens, targets):
  """log p(target_t | target_<t, source) [rows, L] of every position's target token."""
  inputs = np.concatenate([np.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)
  logits = jitted_forward(config)({'params': params}, encoder_tokens, jnp.asarray(inputs),
                                  jnp.asarray(targets))
  log_probs = np.asarray(jax.nn.log_softmax(logits, axis=-1))
  return np.take_along_axis(log_probs, targets[:, :, None], axis=-1)[:, :, 0]


@pytest.mark.slow  # Compiles two architectures' searches and teacher forcing.
@pytest.mark.parametrize('combination', ensemble_combinations.COMBINATIONS)
def test_each_hypothesis_scores_the_combined_teacher_forced_log_probs_of_two_architectures(
    combination):
  configs = (PRE_LN, POST_B2T_RELATIVE)
  params = tuple(random_params(config, seed=seed) for seed, config in enumerate(configs))
  weights = (0.25, 0.75)
  model = ensemble.Ensemble([models.TranslationModel(c) for c in configs], weights,
                            combination, num_pieces=TINY.vocab_size)
  encoder_tokens = padded_batch(PAIRS)[0]
  beam_size, length = 3, 8
  found = prediction.predict_batch(
      model, params, np.asarray(encoder_tokens), input_length=encoder_tokens.shape[1],
      direction=0, prefix_id=None, max_decode_length=length,
      search_settings=search.BeamSettings(beam_size=beam_size, stop='exact'),
      alpha=1.0, num_pieces=TINY.vocab_size, nbest=beam_size,
      # Padding inside a target would be masked in teacher forcing; translation bans it too.
      banned_pieces=np.arange(TINY.vocab_size) == 0)
  targets = np.asarray(found.sequences).reshape(-1, length)
  repeated = jnp.repeat(encoder_tokens, beam_size, axis=0)
  members = np.stack([_teacher_forced_log_probs(c, p, repeated, targets)
                      for c, p in zip(configs, params)])
  if combination == 'mean_log_prob':
    combined = np.tensordot(weights, members, axes=1)
  else:
    combined = np.log(np.tensordot(weights, np.exp(members), axes=1))
  lengths = np.asarray(found.lengths).reshape(-1)
  want = [combined[row, :n].sum() for row, n in enumerate(lengths)]
  np.testing.assert_allclose(np.asarray(found.log_probs).reshape(-1), want, rtol=1e-5,
                             atol=1e-5)
  np.testing.assert_allclose(
      np.asarray(found.scores).reshape(-1),
      np.asarray(want) / np.asarray(common.length_penalty(lengths, 1.0)), rtol=1e-5)
  # The members disagree, so the combination is neither of them alone.
  assert not np.allclose(members[0], members[1], atol=1e-2)


def test_runs_with_other_vocabularies_are_refused_naming_both(trained_run, tmp_path):
  import shutil  # pylint: disable=g-import-not-at-top
  other = tmp_path / 'other'
  shutil.copytree(trained_run, other)
  (other / 'vocab.model').write_bytes((other / 'vocab.model').read_bytes() + b'\n')
  with pytest.raises(UserError, match=f'--ensemble: {other} has another vocabulary than '
                     f'{trained_run}'):
    run_loading.load_ensemble([(str(trained_run), 1.0), (str(other), 1.0)], 'mean_log_prob')
