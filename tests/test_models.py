"""Tests for t5x_mt.model.models.TranslationModel: its loss, scores, search and layouts agree with
the Flax module they wrap; and for the decoding settings' checks."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.decoding import inference
from t5x_mt.model import losses
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.model import parameter_layout
from t5x_mt.decoding import prediction
from t5x_mt.decoding import search
from t5x_mt.core.errors import UserError

from test_network import PAIRS, TINY, padded_batch, random_params

CONFIG = dataclasses.replace(TINY, dropout_rate=0.0)
DIRECTION_IDS = jnp.asarray([3, 7], jnp.int32)


def _batch():
  encoder, decoder_input, decoder_target = padded_batch(PAIRS)
  directions = jnp.asarray([[3], [7], [3]], jnp.int32) * (decoder_target > 0)
  return dict(encoder_input_tokens=encoder, decoder_input_tokens=decoder_input,
              decoder_target_tokens=decoder_target, decoder_direction_ids=directions,
              decoder_loss_weights=(decoder_target > 0).astype(jnp.int32))


def _target_log_probs(params, batch):
  """log p(target) [B, L] of the module's teacher-forced logits."""
  logits = network.Transformer(CONFIG).apply({'params': params}, **models.model_kwargs(batch))
  log_probs = jax.nn.log_softmax(logits, axis=-1)
  return np.asarray(jnp.take_along_axis(log_probs, batch['decoder_target_tokens'][..., None],
                                        axis=-1)[..., 0])


@pytest.mark.slow
def test_loss_fn_sums_the_label_smoothed_loss_per_direction():
  model, params, batch = models.TranslationModel(CONFIG), random_params(CONFIG), _batch()
  sums = model.loss_fn(params, batch, None, direction_ids=DIRECTION_IDS, label_smoothing=0.1)
  logits = model.module.apply({'params': params}, **models.model_kwargs(batch))
  weights = batch['decoder_loss_weights'].astype(jnp.float32)
  token_loss = np.asarray(losses.label_smoothed_cross_entropy(
      logits, batch['decoder_target_tokens'], weights, 0.1))
  assert float(sums['loss_sum']) == pytest.approx(token_loss.sum(), rel=1e-6)
  assert float(sums['tokens']) == 10.0  # 4 + 2 + 4 target tokens.
  np.testing.assert_allclose(sums['direction_loss_sums'],
                             [token_loss[[0, 2]].sum(), token_loss[1].sum()], rtol=1e-6)
  np.testing.assert_allclose(sums['direction_tokens'], [8.0, 2.0])
  chunked = model.loss_fn(params, batch, None, direction_ids=DIRECTION_IDS,
                          label_smoothing=0.1, loss_chunk_length=2)
  assert float(chunked['loss_sum']) == pytest.approx(float(sums['loss_sum']), rel=1e-5)


@pytest.mark.slow
def test_loss_fn_scales_only_the_objective_by_direction():
  model, params, batch = models.TranslationModel(CONFIG), random_params(CONFIG), _batch()
  plain = model.loss_fn(params, batch, None, direction_ids=DIRECTION_IDS, label_smoothing=0.1)
  scaled = model.loss_fn(params, batch, None, direction_ids=DIRECTION_IDS, label_smoothing=0.1,
                         direction_scales=jnp.asarray([0.0, 2.0]))
  assert float(scaled['loss_sum']) == float(plain['loss_sum'])
  assert float(scaled['objective_sum']) == pytest.approx(
      2.0 * float(plain['direction_loss_sums'][1]), rel=1e-6)
  assert float(scaled['objective_weight']) == 2.0 * 2.0


@pytest.mark.slow
def test_score_batch_is_each_rows_target_log_likelihood():
  model, params, batch = models.TranslationModel(CONFIG), random_params(CONFIG), _batch()
  expected = (_target_log_probs(params, batch) * np.asarray(batch['decoder_loss_weights'])).sum(-1)
  np.testing.assert_allclose(model.score_batch(params, batch), expected, rtol=1e-5)
  unweighted = {k: v for k, v in batch.items() if k != 'decoder_loss_weights'}
  np.testing.assert_allclose(model.score_batch(params, unweighted), expected, rtol=1e-5)


def _greedy_by_teacher_forcing(params, encoder_tokens, length, num_pieces):
  """Greedy outputs by re-running the whole teacher-forced model for every token."""
  module = network.Transformer(CONFIG)
  outputs = np.zeros((encoder_tokens.shape[0], length), np.int32)
  for step in range(length):
    inputs = np.concatenate([np.zeros_like(outputs[:, :1]), outputs[:, :-1]], axis=1)
    logits = np.asarray(module.apply({'params': params}, encoder_tokens, inputs,
                                     np.ones_like(outputs)))[:, step, :num_pieces]
    done = (outputs[:, :step] == 1).any(axis=1)
    outputs[:, step] = np.where(done, 0, logits.argmax(-1))
  return outputs


@pytest.mark.slow
@pytest.mark.parametrize('scan_layers', [False, True])
def test_predict_batch_greedy_is_the_argmax_of_teacher_forcing(scan_layers):
  params = random_params(CONFIG, seed=2)
  model = models.TranslationModel(dataclasses.replace(CONFIG, scan_layers=scan_layers))
  encoder_tokens = np.asarray(padded_batch(PAIRS, encoder_length=8)[0])
  predicted = prediction.predict_batch(
      model, parameter_layout.convert_layout(params, scanned=scan_layers), encoder_tokens,
      input_length=4, direction=3, prefix_id=None, max_decode_length=6,
      search_settings=search.BeamSettings(beam_size=1), alpha=1.0, num_pieces=18)
  expected = _greedy_by_teacher_forcing(params, encoder_tokens[:, :4], 6, 18)
  np.testing.assert_array_equal(np.asarray(predicted), expected)


@pytest.mark.slow  # Compiles the beam search of both layouts.
def test_predict_batch_beams_are_the_same_in_both_layouts_and_force_the_prefix():
  params = random_params(CONFIG, seed=2)
  encoder_tokens = np.asarray(padded_batch(PAIRS, encoder_length=8)[0])
  options = dict(input_length=4, direction=3, prefix_id=5, max_decode_length=6,
                 search_settings=search.BeamSettings(beam_size=3), alpha=1.0, num_pieces=20)
  unrolled = prediction.predict_batch(models.TranslationModel(CONFIG), params, encoder_tokens,
                                      **options)
  scanned_model = models.TranslationModel(dataclasses.replace(CONFIG, scan_layers=True))
  scanned = prediction.predict_batch(scanned_model, parameter_layout.to_scanned(params),
                                     encoder_tokens, **options)
  np.testing.assert_array_equal(np.asarray(scanned), np.asarray(unrolled))
  assert (np.asarray(unrolled)[:, 0] == 5).all()


def test_layouts_convert_both_ways_and_only_when_needed():
  params = random_params(CONFIG)
  scanned = parameter_layout.convert_layout(params, scanned=True)
  assert parameter_layout.is_scanned(scanned) and not parameter_layout.is_scanned(params)
  assert parameter_layout.convert_layout(params, scanned=False) is params
  assert parameter_layout.convert_layout(scanned, scanned=True) is scanned
  assert jax.tree.structure(parameter_layout.convert_layout(scanned, scanned=False)) == (
      jax.tree.structure(params))


def test_init_gives_the_abstract_variables_shapes():
  model = models.TranslationModel(CONFIG)
  params = jax.eval_shape(lambda rng: model.init(rng, 4, 4), jax.random.key(0))
  abstract = models.abstract_variables(CONFIG)['params']
  assert jax.tree.map(lambda x: x.shape, params) == jax.tree.map(lambda x: x.shape, abstract)


@pytest.mark.parametrize('field, value, message', [
    ('beam_size', 0, 'decoding.DecodeSettings.beam_size: must be >= 1, got 0'),
    ('batch_size', 2.5, 'decoding.DecodeSettings.batch_size: must be an integer, got 2.5'),
    ('max_input_length', 0, 'decoding.DecodeSettings.max_input_length: must be >= 1, got 0'),
    ('max_decode_length', -1, 'decoding.DecodeSettings.max_decode_length: must be >= 1, got -1'),
    ('alpha', 'long', "decoding.DecodeSettings.alpha: must be a number, got 'long'"),
    ('stop', 'early', "decoding.DecodeSettings.stop: 'early' is not one of 'beam_full', 'best', "
                      "'exact'"),
    ('parallel_batches', 0, 'decoding.DecodeSettings.parallel_batches: must be >= 1, got 0'),
])
def test_decode_settings_name_the_gin_setting_they_refuse(field, value, message):
  with pytest.raises(UserError) as error:
    inference.DecodeSettings(**{field: value})
  assert str(error.value) == message


def test_decode_settings_are_frozen_and_hold_pivot_directions_as_a_tuple():
  settings = inference.DecodeSettings(pivot_directions=['hau_Latn-zul_Latn'])
  assert settings.pivot_directions == ('hau_Latn-zul_Latn',)
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.beam_size = 2  # type: ignore[misc]
