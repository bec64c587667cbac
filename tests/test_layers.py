"""Tests for t5x_mt.model.layers: numbers of each block, logical axes, dtypes and the KV cache."""

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.model import layers
from t5x_mt.model.position_embeddings.sinusoidal import SINUSOIDS
from t5x_mt.model.position_embeddings.sinusoidal_vaswani import VASWANI_SINUSOIDS


def logical_axes(variables):
  """Logical axis names of every parameter, as tuples."""
  return jax.tree.map(tuple, nn.get_partition_spec(variables)['params'],
                      is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))


def init_and_apply(module, *args, **kwargs):
  variables = module.init(jax.random.key(0), *args, **kwargs)
  return variables, module.apply(variables, *args, **kwargs)


def test_layer_norm_normalises_in_float32_and_returns_compute_dtype():
  x = jnp.array([[1.0, 2.0, 3.0, 6.0]], jnp.bfloat16)
  variables, y = init_and_apply(layers.LayerNorm(dtype=jnp.bfloat16), x)
  assert y.dtype == jnp.bfloat16
  assert nn.meta.unbox(variables)['params']['scale'].dtype == jnp.float32
  # mean 3, variance (4 + 1 + 0 + 9) / 4 = 3.5.
  expected = (np.array([1.0, 2.0, 3.0, 6.0]) - 3.0) / np.sqrt(3.5 + 1e-6)
  np.testing.assert_allclose(np.asarray(y, np.float32)[0], expected, atol=1e-2)


def test_dense_general_contracts_trailing_axes_with_bias():
  x = jnp.arange(12.0).reshape(1, 2, 3, 2)
  module = layers.DenseGeneral((5,), ('heads', 'kv', 'embed'), num_input_axes=2)
  variables = module.init(jax.random.key(0), x)
  params = nn.meta.unbox(variables['params'])
  params = {'kernel': params['kernel'], 'bias': jnp.arange(5.0)}
  y = module.apply({'params': params}, x)
  expected = np.einsum('blhk,hke->ble', x, params['kernel']) + np.arange(5.0)
  np.testing.assert_allclose(y, expected, rtol=1e-6)
  assert logical_axes(variables)['kernel'] == ('heads', 'kv', 'embed')
  assert logical_axes(variables)['bias'] == ('embed',)


@pytest.mark.parametrize('activation,fn', [
    ('relu', lambda h: np.maximum(h, 0.0)),
    ('gelu', lambda h: np.asarray(jax.nn.gelu(h, approximate=False))),
    ('swish', lambda h: h / (1.0 + np.exp(-h))),
])
def test_mlp_block_applies_selected_activation(activation, fn):
  x = jax.random.normal(jax.random.key(1), (2, 3, 4))
  variables, y = init_and_apply(layers.MlpBlock(8, activation), x)
  p = nn.meta.unbox(variables['params'])
  hidden = fn(np.asarray(x) @ p['wi']['kernel'] + p['wi']['bias'])
  np.testing.assert_allclose(y, hidden @ p['wo']['kernel'] + p['wo']['bias'], atol=1e-5)
  spec = logical_axes(variables)
  assert spec['wi']['kernel'] == ('embed', 'mlp') and spec['wo']['kernel'] == ('mlp', 'embed')


def test_mlp_block_rejects_unknown_activation():
  with pytest.raises(ValueError, match="'mish'"):
    layers.MlpBlock(8, 'mish').init(jax.random.key(0), jnp.ones((1, 1, 4)))


def test_embed_lookup_and_attend_share_one_table():
  module = layers.Embed(num_embeddings=7, features=4)
  tokens = jnp.array([[3, 0, 6]])
  variables = module.init(jax.random.key(0), tokens)
  table = np.asarray(nn.meta.unbox(variables['params'])['embedding'])
  np.testing.assert_array_equal(module.apply(variables, tokens), table[[[3, 0, 6]]])
  query = jnp.ones((1, 2, 4))
  logits = module.apply(variables, query, method=layers.Embed.attend)
  np.testing.assert_allclose(logits, np.ones((1, 2, 4)) @ table.T, rtol=1e-6)
  assert logical_axes(variables)['embedding'] == ('vocab', 'embed')
  assert abs(table.std() - 1.0) < 0.5  # N(0, 1) init.


def test_sinusoidal_table_values():
  table = SINUSOIDS.fixed_table(rows=3, features=4)
  # Timescales 1 and 1/10000 for features [sin, sin, cos, cos].
  np.testing.assert_allclose(table[0], [0, 0, 1, 1], atol=1e-7)
  np.testing.assert_allclose(table[2], [np.sin(2), np.sin(2e-4), np.cos(2), np.cos(2e-4)],
                             rtol=1e-6)


def test_sinusoidal_vaswani_table_has_the_papers_frequencies():
  table = VASWANI_SINUSOIDS.fixed_table(rows=3, features=4)
  # PE(pos, 2i) = sin(pos / 10000^(2i/d)), i = 0, 1 with d = 4: timescales 1 and 1/100.
  np.testing.assert_allclose(table[2], [np.sin(2), np.sin(2e-2), np.cos(2), np.cos(2e-2)],
                             rtol=1e-6)


def test_position_offset_reads_the_table_from_that_row():
  module = layers.PositionEmbedding(max_length=4, kind='sinusoidal', offset=2)
  _, y = init_and_apply(module, jnp.zeros((1, 3, 4)))
  np.testing.assert_allclose(y[0], SINUSOIDS.fixed_table(6, 4)[2:5], atol=1e-6)


def test_position_embedding_uses_given_positions_then_cache_index():
  module = layers.PositionEmbedding(max_length=8, kind='sinusoidal')
  x = jnp.zeros((1, 3, 4))
  table = SINUSOIDS.fixed_table(8, 4)
  _, y = init_and_apply(module, x, jnp.array([[0, 1, 0]]))
  np.testing.assert_allclose(y[0], table[[0, 1, 0]], atol=1e-6)
  cache = module.init(jax.random.key(0), x, decode=True)['cache']
  for step in range(3):
    y, mutated = module.apply({'cache': cache}, x[:, :1], decode=True, mutable=['cache'])
    cache = mutated['cache']
    np.testing.assert_allclose(y[0, 0], table[step], atol=1e-6)


def test_learned_position_embedding_has_a_table_per_position():
  module = layers.PositionEmbedding(max_length=8, kind='learned')
  variables, y = init_and_apply(module, jnp.zeros((2, 5, 4)))
  table = nn.meta.unbox(variables['params'])['pos_embedding']
  assert table.shape == (8, 4)
  np.testing.assert_allclose(y[1], table[:5])


def attention_module(dtype=jnp.float32):
  return layers.MultiHeadAttention(num_heads=2, head_dim=3, dtype=dtype)


def test_attention_params_carry_logical_axes_and_stay_float32_in_bfloat16():
  x = jnp.ones((1, 4, 6), jnp.bfloat16)
  variables, y = init_and_apply(attention_module(jnp.bfloat16), x, x)
  assert y.dtype == jnp.bfloat16
  assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(nn.meta.unbox(variables)))
  spec = logical_axes(variables)
  assert spec['query']['kernel'] == ('embed', 'heads', 'kv')
  assert spec['query']['bias'] == ('heads', 'kv')
  assert spec['out']['kernel'] == ('heads', 'kv', 'embed')


def test_cached_decoding_matches_causal_self_attention():
  module = attention_module()
  x = jax.random.normal(jax.random.key(2), (2, 5, 6))
  params = module.init(jax.random.key(0), x, x)['params']
  full = module.apply({'params': params}, x, x, causal=True)

  cache = module.init(jax.random.key(0), x[:, :1], x[:, :1], decode=True,
                      max_decode_length=7)['cache']  # Longer than used: the rest is masked.
  # Keys [batch, heads, head_dim, length * slots], values [batch, heads, length * slots,
  # head_dim]: one beam slot until beam search widens it.
  assert cache['cached_key'].shape == (2, 2, 3, 7)
  assert cache['cached_value'].shape == (2, 2, 7, 3)
  assert cache['cached_ancestry'].shape == (2, 7)
  assert cache['cache_index'].shape == ()
  step = jax.jit(lambda cache, token: module.apply(
      {'params': params, 'cache': cache}, token, token, decode=True, mutable=['cache']))
  steps = []
  for i in range(5):
    out, mutated = step(cache, x[:, i:i + 1])
    cache = mutated['cache']
    steps.append(out)
  assert int(cache['cache_index']) == 5
  np.testing.assert_allclose(jnp.concatenate(steps, axis=1), full, atol=1e-5)


def test_attention_dropout_is_off_when_deterministic():
  module = layers.MultiHeadAttention(num_heads=2, head_dim=3, dropout_rate=0.5)
  x = jax.random.normal(jax.random.key(3), (1, 4, 6))
  variables = module.init(jax.random.key(0), x, x)
  a = module.apply(variables, x, x, deterministic=True)
  b = module.apply(variables, x, x, deterministic=True)
  np.testing.assert_array_equal(a, b)
  c = module.apply(variables, x, x, deterministic=False, rngs={'dropout': jax.random.key(1)})
  assert not np.allclose(a, c)
