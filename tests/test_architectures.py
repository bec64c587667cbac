"""The seed architectures: each layer variant against a NumPy computation of its formulas,
B2T's initialisation, relative positions under packing, and cached decoding against
teacher forcing for every variant."""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.model import layers
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.model import parameter_layout
from t5x_mt.model.norm_placements import post
from t5x_mt.model.norm_placements import post_b2t
from t5x_mt.core.errors import UserError

from test_network import TINY, check_beam_scores_are_teacher_forced
from test_network import check_packed_and_padded_equal_each_sequence_alone, random_params

LAYER = dataclasses.replace(TINY, relative_max_distance=2, dropout_rate=0.0)
# (layer_norm, position_embedding, relative_values, relative_in_decoder)
VARIANTS = {
    'pre': ('pre', 'learned', True, False),
    'post': ('post', 'sinusoidal', True, False),
    'post_b2t': ('post_b2t', 'learned', True, False),
    'relative': ('pre', 'relative', True, True),
    'b2t_relative_keys_only': ('post_b2t', 'relative', False, True),
}


def variant(name: str, base: network.TransformerConfig = LAYER) -> network.TransformerConfig:
  norm, positions, values, in_decoder = VARIANTS[name]
  return dataclasses.replace(base, layer_norm=norm, position_embedding=positions,
                             relative_values=values, relative_in_decoder=in_decoder)


def _random_tree(tree, seed: int):
  rng = np.random.default_rng(seed)
  return jax.tree.map(lambda leaf: jnp.asarray(rng.normal(scale=0.5, size=leaf.shape),
                                               leaf.dtype), tree)


def _layer_params(layer: nn.Module, *args, seed: int = 0):
  shapes = jax.eval_shape(lambda: nn.meta.unbox(layer.init(jax.random.key(0), *args)))
  return _random_tree(shapes['params'], seed)


# NumPy, one example at a time: the formulas of docs/methods.md#model, written directly.

def np_norm(x, p):
  mean = x.mean(-1, keepdims=True)
  var = ((x - mean) ** 2).mean(-1, keepdims=True)
  return (x - mean) / np.sqrt(var + 1e-6) * p['scale'] + p['bias']


def np_mlp(x, p):
  h = np.maximum(x @ p['wi']['kernel'] + p['wi']['bias'], 0.0)
  return h @ p['wo']['kernel'] + p['wo']['bias']


def np_attention(xq, xkv, p, allowed, relative_k=0):
  """Shaw et al.: e_ij = q_i . (k_j + a^K_ij) / sqrt(d), z_i = sum_j a_ij (v_j + a^V_ij)."""
  project = lambda x, name: np.einsum('le,ehd->lhd', x, p[name]['kernel']) + p[name]['bias']
  q, k, v = project(xq, 'query'), project(xkv, 'key'), project(xkv, 'value')
  head_dim = q.shape[-1]
  logits = np.einsum('qhd,khd->hqk', q, k)
  if relative_k:
    distance = np.arange(len(xkv))[None, :] - np.arange(len(xq))[:, None]
    rows = np.clip(distance, -relative_k, relative_k) + relative_k
    logits = logits + np.einsum('qhd,qkd->hqk', q, p['relative_keys'][rows])
  logits = np.where(allowed, logits / np.sqrt(head_dim), -np.inf)
  weights = np.exp(logits - logits.max(-1, keepdims=True))
  weights = weights / weights.sum(-1, keepdims=True)
  out = np.einsum('hqk,khd->qhd', weights, v)
  if relative_k and 'relative_values' in p:
    out = out + np.einsum('hqk,qkd->qhd', weights, p['relative_values'][rows])
  return np.einsum('qhd,hde->qe', out, p['out']['kernel']) + p['out']['bias']


def np_layer(x, sublayers, norms, placement):
  """Pre-LN: x + f(LN(x)) per sublayer; post-LN: LN(x + f(x)); B2T adds the layer's
  input x to the last sublayer's sum before its norm."""
  h = x
  for index, (sublayer, norm) in enumerate(zip(sublayers, norms)):
    if placement == 'pre':
      h = h + sublayer(np_norm(h, norm))
    else:
      total = h + sublayer(h)
      if placement == 'post_b2t' and index == len(sublayers) - 1:
        total = total + x
      h = np_norm(total, norm)
  return h


def np_encoder_layer(config, p, x):
  k = config.relative_distance_of('encoder')
  allowed = np.ones((len(x), len(x)), bool)
  sublayers = (lambda h: np_attention(h, h, p['attention'], allowed, k),
               lambda h: np_mlp(h, p['mlp']))
  norms = [p[name] for name in parameter_layout.layer_norm_names('encoder', config.layer_norm)]
  return np_layer(x, sublayers, norms, config.layer_norm)


def np_decoder_layer(config, p, x, encoded):
  k = config.relative_distance_of('decoder')
  causal = np.tril(np.ones((len(x), len(x)), bool))
  sublayers = (lambda h: np_attention(h, h, p['self_attention'], causal, k),
               lambda h: np_attention(h, encoded, p['encoder_decoder_attention'],
                                      np.ones((len(x), len(encoded)), bool)),
               lambda h: np_mlp(h, p['mlp']))
  norms = [p[name] for name in parameter_layout.layer_norm_names('decoder', config.layer_norm)]
  return np_layer(x, sublayers, norms, config.layer_norm)


def _relative_ids(config, stack, length):
  positions = jnp.arange(length)[None]
  k = config.relative_distance_of(stack)
  return layers.relative_position_ids(positions, positions, k) if k else None


def encoder_layer_matches_numpy(config) -> bool:
  x = np.random.default_rng(1).normal(size=(1, 7, config.emb_dim)).astype(np.float32)
  segments = jnp.ones((1, 7), jnp.int32)
  layer = network.EncoderLayer(config)
  args = (jnp.asarray(x), segments, _relative_ids(config, 'encoder', 7), True)
  params = _layer_params(layer, *args)
  got = np.asarray(layer.apply({'params': params}, *args))[0]
  want = np_encoder_layer(config, jax.tree.map(np.asarray, params), x[0])
  return np.allclose(got, want, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize('name', VARIANTS)
def test_an_encoder_layer_of_each_variant_computes_its_formulas(name):
  assert encoder_layer_matches_numpy(variant(name))


@pytest.mark.parametrize('name', VARIANTS)
def test_a_decoder_layer_of_each_variant_computes_its_formulas(name):
  config = variant(name)
  rng = np.random.default_rng(2)
  x = rng.normal(size=(1, 6, config.emb_dim)).astype(np.float32)
  encoded = rng.normal(size=(1, 5, config.emb_dim)).astype(np.float32)
  layer = network.DecoderLayer(config)
  args = (jnp.asarray(x), jnp.asarray(encoded), jnp.ones((1, 6), jnp.int32),
          jnp.ones((1, 5), jnp.int32), _relative_ids(config, 'decoder', 6), True, False, None)
  params = _layer_params(layer, *args)
  got = np.asarray(layer.apply({'params': params}, *args))[0]
  want = np_decoder_layer(config, jax.tree.map(np.asarray, params), x[0], encoded[0])
  np.testing.assert_allclose(got, want, atol=1e-4, rtol=1e-4)


def test_b2t_without_its_bottom_to_top_residual_fails_the_formula(monkeypatch):
  config = variant('post_b2t')
  assert encoder_layer_matches_numpy(config)
  monkeypatch.setattr(post_b2t.PostB2T, 'layer', post.PostLN.layer)  # No bottom-to-top sum.
  assert not encoder_layer_matches_numpy(config)


def _init(config):
  model = network.Transformer(config)
  tokens = jnp.ones((1, 4), jnp.int32)
  return nn.meta.unbox(model.init(jax.random.key(0), tokens, tokens, tokens))['params']


@pytest.mark.slow
def test_b2t_initialises_every_layer_weight_but_norms_and_biases_depth_to_the_minus_half():
  config = dataclasses.replace(TINY, num_encoder_layers=4, num_decoder_layers=2,
                               position_embedding='relative', relative_in_decoder=True)
  post = jax.tree_util.tree_flatten_with_path(_init(dataclasses.replace(
      config, layer_norm='post')))[0]
  b2t = jax.tree.leaves(_init(dataclasses.replace(config, layer_norm='post_b2t')))
  scaled = 0
  for (path, post_leaf), b2t_leaf in zip(post, b2t):
    names = [entry.key for entry in path]
    in_layer = names[0] in parameter_layout.STACKS and names[1].startswith('layers_')
    if in_layer and names[-1] != 'bias' and not names[-2].endswith('_norm'):
      depth = config.num_encoder_layers if names[0] == 'encoder' else config.num_decoder_layers
      np.testing.assert_allclose(b2t_leaf, post_leaf * depth ** -0.5, rtol=1e-6)
      scaled += 1
    else:
      np.testing.assert_array_equal(b2t_leaf, post_leaf)
  # Per encoder layer: query, key, value, out, two relative tables, wi, wo; per decoder
  # layer four more for cross-attention.
  assert scaled == 4 * 8 + 2 * 12


@pytest.mark.slow
@pytest.mark.parametrize('name', ['post', 'b2t_relative_keys_only'])
def test_packed_forward_of_each_variant_equals_each_sequence_run_separately(name):
  # Relative distances restart with the positions of each packed sequence.
  check_packed_and_padded_equal_each_sequence_alone(
      dataclasses.replace(variant(name, TINY), dropout_rate=0.0))


# Seeds whose random models give beams of several distinct outputs without a padding
# token inside (which teacher forcing would mask).
# Norm placement changes no cache: B2T with relative keys in the decoder covers post-LN.
@pytest.mark.slow  # A beam search per variant; the default architecture's is in test_network.
@pytest.mark.parametrize('name, seed', [('relative', 4), ('b2t_relative_keys_only', 4)])
def test_beam_search_of_each_variant_scores_its_outputs_as_teacher_forcing(name, seed):
  # Relative positions in the decoder read each cache entry's position from the beam
  # slot layout; a wrong distance would change the incremental scores.
  check_beam_scores_are_teacher_forced(dataclasses.replace(variant(name, TINY),
                                                           dropout_rate=0.0), (2, 4, 8), seed)


def test_a_decoder_start_past_the_vocabulary_is_refused_in_one_line():
  with pytest.raises(UserError) as error:
    models.TranslationModel(dataclasses.replace(TINY, decoder_start_token=TINY.vocab_size))
  assert str(error.value) == (f'network.TransformerConfig.decoder_start_token: '
                              f'{TINY.vocab_size} is no token of the {TINY.vocab_size} the '
                              'model embeds')


def test_fairseq_conventions_decode_as_they_teacher_force():
  # An imported model's decoder starts from EOS's embedding and reads position rows from 2
  # on: a cached step must find both where teacher forcing does.
  config = dataclasses.replace(TINY, dropout_rate=0.0, position_embedding='sinusoidal',
                               scale_embeddings=True, position_offset=2,
                               decoder_start_token=1, layer_norm_epsilon=1e-5)
  check_beam_scores_are_teacher_forced(config, (2, 4, 8))


@pytest.mark.parametrize('overrides, message', [
    (dict(relative_in_decoder=True),
     "network.TransformerConfig.relative_in_decoder: needs position_embedding = 'relative', "
     "not 'learned'"),
    (dict(position_embedding='relative', attention_implementation='pallas'),
     "network.TransformerConfig.attention_implementation: 'pallas' has no relative value "
     "tables; use 'auto' or 'xla', or set network.TransformerConfig.relative_values = False"),
    (dict(layer_norm='post_ln'),
     "network.TransformerConfig.layer_norm: 'post_ln' is not one of 'post', 'post_b2t', 'pre'"),
    (dict(layer_norm_epsilon=0.0),
     'network.TransformerConfig.layer_norm_epsilon: must be > 0.0, got 0.0'),
])
def test_an_impossible_architecture_is_refused_in_one_line(overrides, message):
  with pytest.raises(UserError) as error:
    dataclasses.replace(TINY, **overrides)
  assert str(error.value) == message


def test_relative_encoder_has_no_absolute_positions_and_tables_per_layer():
  params = random_params(dataclasses.replace(TINY, position_embedding='relative'))
  encoder, decoder = params['encoder'], params['decoder']
  assert parameter_layout.POSITION_EMBEDDING not in encoder
  assert parameter_layout.POSITION_EMBEDDING not in decoder  # Sinusoids: no parameters.
  for i in range(TINY.num_encoder_layers):
    attention = encoder[parameter_layout.layer_name(i)]['attention']
    assert attention['relative_keys'].shape == (2 * 16 + 1, TINY.head_dim)
    assert attention['relative_values'].shape == (2 * 16 + 1, TINY.head_dim)
  assert 'relative_keys' not in decoder['layers_0']['self_attention']
