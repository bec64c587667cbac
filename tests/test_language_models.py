"""Tests for decoder-only language models (network.TransformerConfig.decoder_only): the
model, its data (the target side of a translation mixture), its training by the same
trainer, its held-out evaluation and its scores for n-best reranking."""

import dataclasses
import json

import jax
import numpy as np
import pytest
import scipy

import data_tasks
from t5x_mt.model import models
from t5x_mt.model import parameter_layout
from t5x_mt.runs import run_layout
from t5x_mt.config import run_loading
from t5x_mt.data import corpora
from t5x_mt.data import input_pipeline
from t5x_mt.data import vocab
from t5x_mt.data.settings import DataSettings
from t5x_mt.core.errors import UserError

from conftest import configure_tiny_run
from conftest import train_configured
from test_network import PAIRS, TINY, jitted_forward, padded_batch, random_params

LANGUAGE_MODEL = dataclasses.replace(TINY, decoder_only=True, num_encoder_layers=0,
                                     dropout_rate=0.0)


def test_a_language_model_is_a_decoder_without_cross_attention():
  params = random_params(LANGUAGE_MODEL)
  assert set(params) == {'decoder', 'shared_embedding'}
  assert set(params['decoder']['layers_0']) == {
      'self_attention', 'pre_self_attention_norm', 'mlp', 'pre_mlp_norm'}
  # Its logits read the target alone: any encoder input gives the same.
  encoder, decoder_input, decoder_target = padded_batch(PAIRS)
  forward = jitted_forward(LANGUAGE_MODEL)
  logits = forward({'params': params}, encoder, decoder_input, decoder_target)
  np.testing.assert_array_equal(
      logits, forward({'params': params}, encoder[::-1], decoder_input, decoder_target))
  # Scanned, the same parameters give the same scores.
  batch = dict(encoder_input_tokens=encoder, decoder_input_tokens=decoder_input,
               decoder_target_tokens=decoder_target)
  scanned = models.TranslationModel(dataclasses.replace(LANGUAGE_MODEL, scan_layers=True))
  np.testing.assert_allclose(
      jax.jit(scanned.score_batch)(parameter_layout.to_scanned(params), batch),
      jax.jit(models.TranslationModel(LANGUAGE_MODEL).score_batch)(params, batch),
      rtol=1e-5)


def test_a_language_model_refuses_an_encoder_and_translation():
  with pytest.raises(UserError, match=r'decoder_only: a language model has no encoder; set '
                     r'network.TransformerConfig.num_encoder_layers = 0, not 2'):
    dataclasses.replace(LANGUAGE_MODEL, num_encoder_layers=2)
  model = models.TranslationModel(LANGUAGE_MODEL)
  with pytest.raises(UserError, match='language model .* translates none'):
    model.encode(random_params(LANGUAGE_MODEL), np.ones((1, 3), np.int32), 1,
                 padded_length=8)


def test_language_model_tasks_read_the_target_side_of_a_mixture(trained_run):
  data_tasks.configure(DataSettings(vocabulary_path=str(trained_run / 'vocab.model')))
  name = data_tasks.register_language_model_mixture('test_hau_lm', 'cldr_eng_Latn.hau_Latn')
  assert data_tasks.mixture_view(name).directions()[0].name == 'hau_Latn-hau_Latn'
  targets = corpora.get_corpus('test_hau_lm')
  cldr_pairs = corpora.get_corpus('cldr').pairs('validation', 'eng_Latn', 'hau_Latn')
  assert targets.sentences('validation', 'hau_Latn') == list(
      dict.fromkeys(target for _, target in cldr_pairs))
  batch = next(input_pipeline.one_pass_batches(
      'test_hau_lm.hau_Latn', batch_size=1, inputs_length=8,
      targets_length=16, split='validation'))
  tokenizer = vocab.sentencepiece_processor(trained_run / 'vocab.model')
  first = targets.sentences('validation', 'hau_Latn')[0]
  expected = [tokenizer.piece_to_id('<2hau_Latn>'), *tokenizer.encode(first), vocab.EOS_ID]
  np.testing.assert_array_equal(batch['decoder_target_tokens'][0, :len(expected)], expected)
  # Each packed text's input is EOS alone.
  segments = batch['encoder_segment_ids'][0]
  np.testing.assert_array_equal(batch['encoder_input_tokens'][0][segments > 0],
                                [vocab.EOS_ID] * segments.max())


LM_STEPS = 8


@pytest.fixture(scope='module')
def language_model_run(trained_run, tmp_path_factory):
  """A tiny Hausa language model trained for LM_STEPS steps on the target side of the
  session run's eng->hau task, with its vocabulary."""
  data_tasks.register_language_model_mixture('test_hau_lm', 'cldr_eng_Latn.hau_Latn')
  run = tmp_path_factory.mktemp('language_model') / 'run'
  configure_tiny_run(run, trained_run / 'vocab.model', 'test_hau_lm', LM_STEPS, **{
      'network.TransformerConfig.decoder_only': 'True',
      'network.TransformerConfig.num_encoder_layers': '0',
      'CHECKPOINT_EVERY_STEPS': str(LM_STEPS), 'EVAL_EVERY_STEPS': str(LM_STEPS // 2)})
  train_configured()
  return run


@pytest.mark.slow
def test_a_language_model_trains_and_reports_its_held_out_loss(language_model_run):
  losses = [json.loads(line)['loss']
            for line in (language_model_run / 'metrics.jsonl').read_text().splitlines()]
  assert len(losses) == LM_STEPS and losses[-1] < losses[0] - 0.3
  assert run_layout.RunLayout(language_model_run).trained_directions() == [
      'hau_Latn-hau_Latn']
  records = [json.loads((language_model_run / 'eval' / f'step_{step}.json').read_text())
             for step in (LM_STEPS // 2, LM_STEPS)]
  halfway, last = (record['directions']['hau_Latn-hau_Latn'] for record in records)
  assert records[1]['split'] == 'validation' and halfway['tokens'] == last['tokens'] > 500
  # On held-out text too, the loss falls as the model trains.
  assert last['loss'] < halfway['loss'] - 0.05
  assert last['perplexity'] == pytest.approx(np.exp(last['loss']))
  assert records[1]['average']['loss'] == pytest.approx(last['loss'])


@pytest.mark.slow
def test_a_language_models_scores_are_its_log_probabilities(language_model_run):
  scorer = run_loading.load_scorer(str(language_model_run), batch_size=8)
  assert scorer.kind == 'language_model'
  targets = ['Litinin', 'Janairu da Fabrairu', 'shekarar 2024']
  scores = scorer.score(None, targets, 'eng_Latn', 'hau_Latn')
  np.testing.assert_array_equal(scores, scorer.score(['x', 'y', 'z'], targets, 'fra_Latn',
                                                     'hau_Latn'))
  tokenizer, params = scorer.translator.tokenizer, scorer.translator.params
  expected = []
  for target in targets:
    ids = [tokenizer.piece_to_id('<2hau_Latn>'), *tokenizer.encode(target), vocab.EOS_ID]
    logits = jax.jit(scorer.translator.model.module.apply)(
        {'params': params}, np.array([[vocab.EOS_ID]]), np.array([[0] + ids[:-1]]),
        np.array([ids]))
    log_probs = scipy.special.log_softmax(np.asarray(logits[0], np.float64), axis=-1)
    expected.append(sum(log_probs[position, token] for position, token in enumerate(ids)
                        if position > 0))
  np.testing.assert_allclose(scores, expected, rtol=1e-5, atol=1e-4)
  with pytest.raises(UserError, match='eng_Latn: the model was never trained'):
    scorer.score(None, ['Monday'], 'hau_Latn', 'eng_Latn')
