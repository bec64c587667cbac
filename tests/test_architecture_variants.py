"""Architecture variants by name: the registries of norm placements and position
embeddings, and variants added from outside the library, each one class and its
registration, which the model builds, trains, decodes, counts and exports with no other
module knowing their names."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t5x_mt.core.errors import UserError
from t5x_mt.export import ctranslate2_export
from t5x_mt.export import ctranslate2_spec
from t5x_mt.model import flops
from t5x_mt.model import layers
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.model import norm_placements
from t5x_mt.model import parameter_layout
from t5x_mt.model import position_embeddings
from t5x_mt.model.norm_placements.pre import PreLN

from test_network import TINY, check_beam_scores_are_teacher_forced, jitted_forward
from test_network import padded_batch, PAIRS, random_params
import test_partitioning


class RampPositions(position_embeddings.PositionEmbedding):
  """A toy absolute position embedding: position p adds p / 100 to every feature."""
  name = 'ramp'

  def fixed_table(self, rows: int, features: int) -> np.ndarray:
    return np.repeat(np.arange(rows, dtype=np.float32)[:, None] / 100, features, axis=1)


class PreLNWithoutFinalNorms(PreLN):
  """A toy norm placement: pre-LN layers, and stacks that end in no norm of their own."""
  name = 'pre_unfinished'
  final_norm = False
  huggingface_model_types = ()
  ctranslate2_refusal = "CTranslate2's pre-norm stacks end in a norm"


@pytest.fixture
def toy_variants(monkeypatch):
  """Both toys registered for one test, the registries as they were afterwards."""
  for registry in (position_embeddings.REGISTRY, norm_placements.REGISTRY):
    monkeypatch.setattr(registry, '_entries', dict(registry._entries))
  position_embeddings.register(RampPositions())
  norm_placements.register(PreLNWithoutFinalNorms())


def tiny(position_embedding: str = 'ramp', layer_norm: str = 'pre'
         ) -> network.TransformerConfig:
  """The tiny model without dropout, with these variants (built once they are
  registered)."""
  return dataclasses.replace(TINY, position_embedding=position_embedding,
                             layer_norm=layer_norm, dropout_rate=0.0)


def test_an_unknown_variant_is_one_line_naming_the_registered_ones():
  with pytest.raises(UserError) as error:
    position_embeddings.get('rope')
  assert str(error.value) == ("unknown position embedding 'rope'; registered: learned, "
                              'relative, sinusoidal, sinusoidal_vaswani')
  with pytest.raises(UserError) as error:
    norm_placements.get('sandwich')
  assert str(error.value) == ("unknown norm placement 'sandwich'; registered: post, "
                              'post_b2t, pre')
  with pytest.raises(ValueError, match='registered already'):
    norm_placements.register(PreLN())


def test_a_registered_variant_is_a_name_the_config_accepts(toy_variants):
  config = tiny()
  assert config.positions_of('encoder').name == config.positions_of('decoder').name == 'ramp'
  with pytest.raises(UserError) as error:
    dataclasses.replace(TINY, position_embedding='rope')
  assert str(error.value) == ("network.TransformerConfig.position_embedding: 'rope' is not "
                              "one of 'learned', 'ramp', 'relative', 'sinusoidal', "
                              "'sinusoidal_vaswani'")


def test_a_registered_position_table_is_added_to_the_embeddings(toy_variants):
  module = layers.PositionEmbedding(max_length=4, kind='ramp', offset=1)
  y = module.apply({}, jnp.zeros((1, 3, 2)))
  np.testing.assert_allclose(y[0], [[0.01, 0.01], [0.02, 0.02], [0.03, 0.03]], rtol=1e-6)
  # A fixed table has no parameters: the model holds what the sinusoidal one does, and the
  # same parameters give other logits only through the table.
  assert models.count_params(tiny()) == models.count_params(tiny('sinusoidal'))
  params = random_params(tiny('sinusoidal'))
  tokens = padded_batch(PAIRS)
  ramp, sinusoidal = (np.asarray(jitted_forward(config)({'params': params}, *tokens))
                      for config in (tiny(), tiny('sinusoidal')))
  assert np.abs(ramp - sinusoidal).max() > 0.1


@pytest.mark.slow  # Compiles a search and teacher forcing for a variant of its own.
def test_a_registered_position_embedding_decodes_as_it_teacher_forces(toy_variants):
  # Cached decoding reads each step's row at the cache index: a wrong row would change
  # the incremental scores.
  check_beam_scores_are_teacher_forced(tiny(), (2, 4, 8), seed=2)


def test_registered_variants_count_their_flops(toy_variants):
  unfinished = tiny(layer_norm='pre_unfinished')
  # Neither adds to a self-attention layer: the same count as sinusoids under pre-LN,
  # which is below relative positions'.
  assert flops.forward_flops(unfinished, 6, 5) == flops.forward_flops(tiny('sinusoidal'), 6, 5)
  relative = tiny('relative')
  assert (flops.forward_flops(relative, 6, 5).encoder_attention
          > flops.forward_flops(unfinished, 6, 5).encoder_attention)


def test_a_registered_norm_placement_names_its_norms_and_computes_its_layers(toy_variants):
  unfinished, pre = tiny(layer_norm='pre_unfinished'), tiny()
  shapes = nn.meta.unbox(models.abstract_variables(unfinished))['params']
  assert set(shapes['encoder']) == {'layers_0', 'layers_1'}  # No final norm.
  assert parameter_layout.layer_norm_names('decoder', 'pre_unfinished') == (
      'pre_self_attention_norm', 'pre_cross_attention_norm', 'pre_mlp_norm')
  assert models.count_params(unfinished) == models.count_params(pre) - 2 * 2 * TINY.emb_dim
  # Its layers are pre-LN's: one layer's parameters give one output.
  x = jnp.asarray(np.random.default_rng(0).normal(size=(1, 5, TINY.emb_dim)), jnp.float32)
  args = (x, jnp.ones((1, 5), jnp.int32), None, True)
  layer_params = random_params(pre)['encoder']['layers_0']
  outputs = [network.EncoderLayer(config).apply({'params': layer_params}, *args)
             for config in (unfinished, pre)]
  np.testing.assert_array_equal(outputs[0], outputs[1])


def test_registered_variants_train(toy_variants):
  # One layer a stack (a third less to compile), initialised jitted (op by op, init takes
  # longer than it takes to compile).
  config = dataclasses.replace(test_partitioning.ONE_LAYER, position_embedding='ramp',
                               layer_norm='pre_unfinished', dropout_rate=0.0)
  model = models.TranslationModel(config)
  batch = test_partitioning.packed_batch(0, batch_size=4)
  params = nn.meta.unbox(jax.jit(model.init, static_argnums=(1, 2))(jax.random.key(0), 24, 24))
  optimizer = optax.adam(3e-3)
  loss = lambda p: model.loss_fn(  # noqa: E731
      p, batch, None, direction_ids=jnp.asarray(test_partitioning.DIRECTIONS),
      label_smoothing=0.0)['objective_sum']

  @jax.jit
  def step(params, state):
    value, grads = jax.value_and_grad(loss)(params)
    updates, state = optimizer.update(grads, state)
    return optax.apply_updates(params, updates), state, value

  state = optimizer.init(params)
  losses = []
  for _ in range(30):
    params, state, value = step(params, state)
    losses.append(float(value))
  assert losses[-1] < 0.8 * losses[0]


def test_the_ctranslate2_spec_takes_a_registered_table_or_its_refusal(toy_variants):
  pieces = [f'piece{i}' for i in range(TINY.vocab_size)]
  spec = ctranslate2_spec.transformer_spec_of(tiny(), random_params(tiny('sinusoidal')),
                                              pieces)
  np.testing.assert_array_equal(spec.encoder.position_encodings.encodings.numpy(),
                                RampPositions().fixed_table(TINY.max_length, TINY.emb_dim))
  assert 'pre-LN, ramp positions' in ctranslate2_export.describe_model(tiny(), len(pieces))
  with pytest.raises(UserError) as error:
    ctranslate2_spec.check_exportable(tiny(layer_norm='pre_unfinished'))
  assert str(error.value) == ("--checkpoint_dir: layer_norm='pre_unfinished' has no "
                              "CTranslate2 form: CTranslate2's pre-norm stacks end in a norm")
