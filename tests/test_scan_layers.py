"""Tests for scanned layer stacks and rematerialisation (TransformerConfig.scan_layers,
remat_policy): the same function as the unrolled model, in another parameter layout."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.runs import checkpoints
from t5x_mt.training import fine_tuning
from t5x_mt.decoding import inference
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.model import parameter_layout
from t5x_mt.config import run_loading
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

from conftest import TINY_RUN_STEPS

CONFIG = network.TransformerConfig(
    vocab_size=40, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64, num_encoder_layers=3,
    num_decoder_layers=2, max_length=32, dropout_rate=0.0,
    adapter_keys=('fra_Latn', 'hau_Latn'), adapter_bottlenecks=(8, 4))


def _batch():
  rng = np.random.default_rng(0)
  tokens = lambda: jnp.asarray(rng.integers(2, 40, (2, 12)), jnp.int32)  # noqa: E731
  direction = Direction('eng_Latn', 'hau_Latn').id
  return dict(encoder_input_tokens=tokens(), decoder_input_tokens=tokens(),
              decoder_target_tokens=tokens(),
              decoder_direction_ids=jnp.full((2, 12), direction, jnp.int32))


@functools.lru_cache(maxsize=1)
def _unrolled_params():
  """Initialised once for the file's tests (an unjitted init runs op by op)."""
  params = nn.meta.unbox(network.Transformer(CONFIG).init(jax.random.key(0), **_batch())['params'])
  # Shifted so that the adapters' zero-initialised up-projections take part too.
  return jax.tree.map(lambda x: x + 0.01, params)


def _loss_and_grads(config, params):
  model = network.Transformer(config)
  batch = _batch()
  # Jitted: run op by op, the unrolled and scanned stacks take a minute on 2 cores.
  return jax.jit(jax.value_and_grad(
      lambda p: jnp.sum(jax.nn.log_softmax(model.apply({'params': p}, **batch))[..., 3])))(params)


@functools.lru_cache
def _reference_loss_and_grads(scan_layers: bool):
  """The loss and gradients of CONFIG without remat, in either layout: computed once for
  the tests that compare a variant with them."""
  params = _unrolled_params()
  if scan_layers:
    params = parameter_layout.to_scanned(params)
  return _loss_and_grads(dataclasses.replace(CONFIG, scan_layers=scan_layers), params)


def _assert_trees_close(actual, expected, atol):
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  jax.tree.map(lambda a, e: np.testing.assert_allclose(a, e, atol=atol), actual, expected)


@pytest.mark.slow
def test_scanned_stacks_compute_the_unrolled_model_and_its_gradients():
  loss, grads = _reference_loss_and_grads(scan_layers=False)
  scanned_loss, scanned_grads = _reference_loss_and_grads(scan_layers=True)
  assert float(scanned_loss) == pytest.approx(float(loss), rel=1e-6)
  _assert_trees_close(scanned_grads, parameter_layout.to_scanned(grads), atol=1e-5)


def test_scanned_init_has_the_stacked_layout_and_layouts_round_trip():
  params = _unrolled_params()
  stacked = parameter_layout.to_scanned(params)
  scanned_init = nn.meta.unbox(models.abstract_variables(
      dataclasses.replace(CONFIG, scan_layers=True)))['params']
  assert jax.tree.structure(scanned_init) == jax.tree.structure(stacked)
  assert jax.tree.map(jnp.shape, scanned_init) == jax.tree.map(jnp.shape, stacked)
  assert stacked['encoder']['layers']['layer']['mlp']['wi']['kernel'].shape == (3, 32, 64)
  assert parameter_layout.is_scanned(stacked) and not parameter_layout.is_scanned(params)
  _assert_trees_close(parameter_layout.to_unrolled(stacked), params, atol=0)


@pytest.mark.slow
@pytest.mark.parametrize('scan_layers', [False, True])
@pytest.mark.parametrize('policy', ['full', 'dots', 'dots_with_no_batch_dims'])
def test_remat_policies_leave_loss_and_gradients_unchanged(policy, scan_layers):
  params = _unrolled_params()
  if scan_layers:
    params = parameter_layout.to_scanned(params)
  config = dataclasses.replace(CONFIG, scan_layers=scan_layers)
  loss, grads = _reference_loss_and_grads(scan_layers=scan_layers)
  remat_loss, remat_grads = _loss_and_grads(
      dataclasses.replace(config, remat_policy=policy), params)
  assert float(remat_loss) == pytest.approx(float(loss), rel=1e-6)
  _assert_trees_close(remat_grads, grads, atol=1e-5)


def test_unknown_remat_policy_names_the_choices():
  with pytest.raises(UserError, match="remat_policy: 'some' is not one of 'dots', "
                     "'dots_with_no_batch_dims', 'full', 'none'"):
    dataclasses.replace(CONFIG, remat_policy='some')


@pytest.mark.slow  # Compiles the searches of both layouts.
def test_a_scanned_model_translates_exactly_as_unrolled(trained_run):
  unrolled = run_loading.load_translator(str(trained_run), beam_size=2)
  scanned = inference.Translator(
      models.TranslationModel(dataclasses.replace(unrolled.model.config, scan_layers=True)),
      parameter_layout.to_scanned(unrolled.params), unrolled.vocabulary_file, unrolled.tag_strategy,
      unrolled.settings)
  sentences = ['Good morning', 'Where is the station?', 'Thank you very much']
  expected = unrolled.translate(sentences, 'eng_Latn', 'hau_Latn')
  assert scanned.translate(sentences, 'eng_Latn', 'hau_Latn') == expected
  assert scanned.params is not None and parameter_layout.is_scanned(scanned.params)


def test_init_from_an_unrolled_run_restores_into_scanned_layers(trained_run):
  """Fine-tuning with scan_layers from a run trained without (and back)."""
  parent = checkpoints.RunCheckpoints(str(trained_run), read_only=True)
  try:
    unrolled = run_loading.load_translator(str(trained_run)).params
    target = jax.tree.map(jnp.zeros_like, parameter_layout.to_scanned(unrolled))
    restored = fine_tuning.in_parent_layout(
        parent, target, lambda like: parent.restore_params(TINY_RUN_STEPS, like))
  finally:
    parent.close()
  _assert_trees_close(restored, parameter_layout.to_scanned(unrolled), atol=0)
