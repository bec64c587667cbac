"""Tests for t5x_mt.model.network: packing, cached decoding, parameter counts, dtypes, dropout."""

import dataclasses
import functools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.model import decode_cache
from t5x_mt.decoding.search import beam_search
from t5x_mt.decoding.search import common
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core.errors import UserError

TINY = network.TransformerConfig(
    vocab_size=20, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32, num_encoder_layers=2,
    num_decoder_layers=2, max_length=16, dropout_rate=0.1)

# Three sentence pairs: (source tokens, target tokens), target ending in eos = 1.
PAIRS = [([5, 6, 7], [8, 9, 10, 1]), ([11, 12, 13, 14], [15, 1]), ([3, 4], [16, 17, 18, 1])]


@functools.lru_cache
def random_params(config=TINY, seed=0):
  """Random values (nonzero biases and norm parameters too) in the shapes `init` would give.

  Built from `abstract_variables`, so no initialiser is compiled: tests stay fast.
  """
  shapes = nn.meta.unbox(models.abstract_variables(config))['params']
  leaves, treedef = jax.tree.flatten(shapes)
  rng = np.random.default_rng(seed)
  values = [jnp.asarray(rng.normal(scale=0.5, size=leaf.shape), leaf.dtype) for leaf in leaves]
  return jax.tree.unflatten(treedef, values)


@functools.lru_cache
def jitted_forward(config=TINY):
  """Teacher-forced `Transformer.apply`, compiled once per config and input shape."""
  return jax.jit(network.Transformer(config).apply, static_argnames=('enable_dropout',))


def shift_right(targets):
  return [0] + list(targets[:-1])


def padded_batch(pairs, encoder_length=6, decoder_length=6):
  """Unpacked batch: one pair per row, zero-padded at the end."""
  def pad(seq, length):
    return seq + [0] * (length - len(seq))
  encoder = [pad(src, encoder_length) for src, _ in pairs]
  decoder_input = [pad(shift_right(tgt), decoder_length) for _, tgt in pairs]
  decoder_target = [pad(tgt, decoder_length) for _, tgt in pairs]
  return tuple(jnp.array(x, jnp.int32) for x in (encoder, decoder_input, decoder_target))


def packed_row(pairs, encoder_length=10, decoder_length=10):
  """All pairs packed into one row, with segment ids and per-segment positions."""
  fields = {name: [] for name in ('encoder', 'encoder_segments', 'encoder_positions', 'inputs',
                                  'targets', 'decoder_segments', 'decoder_positions')}
  for segment, (src, tgt) in enumerate(pairs, start=1):
    fields['encoder'] += src
    fields['encoder_segments'] += [segment] * len(src)
    fields['encoder_positions'] += list(range(len(src)))
    fields['inputs'] += shift_right(tgt)
    fields['targets'] += tgt
    fields['decoder_segments'] += [segment] * len(tgt)
    fields['decoder_positions'] += list(range(len(tgt)))
  lengths = {name: encoder_length if name.startswith('encoder') else decoder_length
             for name in fields}
  return {name: jnp.array([values + [0] * (lengths[name] - len(values))], jnp.int32)
          for name, values in fields.items()}


def test_packed_forward_equals_each_sequence_run_separately():
  check_packed_and_padded_equal_each_sequence_alone(TINY)


def check_packed_and_padded_equal_each_sequence_alone(config):
  forward = jitted_forward(config)
  params = random_params(config)
  packed = packed_row(PAIRS)
  packed_logits = forward(
      {'params': params}, packed['encoder'], packed['inputs'], packed['targets'],
      encoder_segment_ids=packed['encoder_segments'],
      decoder_segment_ids=packed['decoder_segments'],
      encoder_positions=packed['encoder_positions'],
      decoder_positions=packed['decoder_positions'])
  assert packed_logits.shape == (1, 10, config.vocab_size)
  batch_logits = forward({'params': params}, *padded_batch(PAIRS))  # Unpacked, padded.

  start = 0
  for row, (src, tgt) in enumerate(PAIRS):
    alone = forward({'params': params}, jnp.array([src]), jnp.array([shift_right(tgt)]),
                    jnp.array([tgt]))[0]
    np.testing.assert_allclose(packed_logits[0, start:start + len(tgt)], alone, atol=1e-5)
    np.testing.assert_allclose(batch_logits[row, :len(tgt)], alone, atol=1e-5)
    start += len(tgt)


@pytest.mark.slow
def test_grown_cache_and_shared_cross_attention_decode_like_teacher_forcing():
  # Incremental decoding gives the teacher-forced logits, in beam search's layout: two
  # hypotheses per example read one copy of the example's cross-attention keys, and the
  # self-attention cache starts at 2 steps and grows.
  model = network.Transformer(TINY)
  params = random_params()
  encoder_tokens, decoder_inputs, decoder_targets = padded_batch(PAIRS)
  full = jitted_forward()({'params': params}, encoder_tokens, decoder_inputs, decoder_targets)

  @jax.jit  # Op by op, encoding and the cache's start take longer than they take to compile.
  def encode_and_start_cache(params, encoder_tokens):
    encoded = model.apply({'params': params}, encoder_tokens,
                          method=network.Transformer.encode)
    return encoded, decode_cache.init(model, params, encoded, encoder_tokens, 2)

  encoded, cache = encode_and_start_cache(params, encoder_tokens)
  cross_attention, cache = decode_cache.split_fixed(cache)
  assert not any('cached_fixed' in str(path) for path in jax.tree_util.tree_leaves_with_path(
      cache))
  cache = decode_cache.expand(cache, 2)
  step = jax.jit(lambda cache, token: model.apply(
      {'params': params, 'cache': decode_cache.merge(cross_attention, cache)}, encoded,
      encoder_tokens, token, token, decode=True, method=network.Transformer.decode,
      mutable=['cache']))
  steps = []
  for i in range(decoder_inputs.shape[1]):
    if i == 2:
      cache = decode_cache.extend(cache, decoder_inputs.shape[1])
    logits, mutated = step(cache, jnp.repeat(decoder_inputs[:, i:i + 1], 2, axis=0))
    cache = decode_cache.split_fixed(mutated['cache'])[1]
    steps.append(logits)
  incremental = np.asarray(jnp.concatenate(steps, axis=1))
  valid = np.asarray(decoder_targets) > 0
  for hypothesis in range(2):
    np.testing.assert_allclose(incremental[hypothesis::2][valid], np.asarray(full)[valid],
                               atol=1e-5)


@pytest.mark.parametrize('cache_lengths', [(), (2, 4, 8)])
def test_beam_search_scores_are_the_teacher_forced_scores_of_its_outputs(cache_lengths):
  # Beam search reorders only the ancestry; every hypothesis reads its keys and values
  # from the slots its ancestors wrote them into. A wrong history would change a
  # hypothesis' incremental log-probabilities, so its score would no longer be the
  # teacher-forced log-probability of the sequence it returns.
  check_beam_scores_are_teacher_forced(TINY, cache_lengths)


def check_beam_scores_are_teacher_forced(config, cache_lengths, seed=3):
  model = network.Transformer(config)
  params = random_params(config, seed=seed)
  encoder_tokens = padded_batch(PAIRS)[0]
  max_decode_length, beam_size, alpha = 8, 3, 1.0

  @jax.jit
  def decode(params, encoder_tokens):
    encoded = model.apply({'params': params}, encoder_tokens,
                          method=network.Transformer.encode)
    cross_attention, cache = decode_cache.split_fixed(decode_cache.init(
        model, params, encoded, encoder_tokens, (cache_lengths or (max_decode_length,))[0]))

    def tokens_to_logits(tokens, model_cache):
      logits, variables = model.apply(
          {'params': params, 'cache': decode_cache.merge(cross_attention, model_cache)},
          encoded, encoder_tokens, tokens, tokens, decode=True, mutable=['cache'],
          method=network.Transformer.decode)
      return logits[:, -1], decode_cache.split_fixed(variables['cache'])[1]

    return beam_search.beam_search(
        tokens_to_logits, cache, prefix=None, beam_size=beam_size, alpha=alpha,
        max_decode_length=max_decode_length, cache_lengths=cache_lengths,
        extend_cache=decode_cache.extend, expand_cache=decode_cache.expand)

  sequences, scores = decode(params, encoder_tokens)
  rows = sequences.reshape(-1, max_decode_length)
  targets = np.asarray(rows)
  inputs = np.concatenate([np.zeros_like(targets[:, :1]), targets[:, :-1]], axis=1)
  logits = jitted_forward(config)({'params': params},
                                 jnp.repeat(encoder_tokens, beam_size, axis=0),
                            jnp.asarray(inputs), jnp.asarray(targets))
  log_probs = np.asarray(jax.nn.log_softmax(logits, axis=-1))
  lengths = np.array([list(row).index(1) + 1 if 1 in row else max_decode_length
                      for row in targets])
  for row, length in enumerate(lengths):
    token_log_probs = log_probs[row, np.arange(length), targets[row, :length]]
    want = token_log_probs.sum() / common.length_penalty(length, alpha)
    np.testing.assert_allclose(np.asarray(scores).reshape(-1)[row], want, rtol=1e-5,
                               atol=1e-5)
  assert len({tuple(row) for row in targets}) > len(PAIRS)  # Beams differ, so they reorder.


@pytest.mark.slow
def test_decode_cache_layout_is_batch_leading_or_scalar():
  encoded = jnp.ones((3, 5, TINY.emb_dim))
  # Shapes only: the cache is built abstractly, no step of it computed.
  cache = jax.eval_shape(lambda: decode_cache.init(
      network.Transformer(TINY), random_params(), encoded, jnp.ones((3, 5), jnp.int32),
      max_decode_length=7))
  cross = cache['decoder']['layers_1']['encoder_decoder_attention']
  # Keys [batch, heads, head_dim, length], values [batch, heads, length, head_dim].
  assert cross['cached_fixed_key'].shape == (3, TINY.num_heads, TINY.head_dim, 5)
  assert cross['cached_fixed_value'].shape == (3, TINY.num_heads, 5, TINY.head_dim)
  layer = cache['decoder']['layers_1']['self_attention']
  assert layer['cached_key'].shape == (3, TINY.num_heads, TINY.head_dim, 7)
  assert layer['cached_value'].shape == (3, TINY.num_heads, 7, TINY.head_dim)
  assert layer['cached_ancestry'].shape == (3, 7)
  assert layer['cache_index'].shape == () and layer['cache_index'].dtype == jnp.int32
  assert cache['decoder']['posembed']['cache_index'].shape == ()
  for leaf in jax.tree.leaves(cache):
    assert leaf.ndim == 0 or leaf.shape[0] == 3


@pytest.mark.parametrize('field, value, message', [
    ('position_embedding', 'rope', "network.TransformerConfig.position_embedding: 'rope' is "
                                   "not one of 'learned', 'relative', 'sinusoidal', "
                                   "'sinusoidal_vaswani'"),
    ('mlp_activation', 'gelu2', "network.TransformerConfig.mlp_activation: 'gelu2' is not one "
                                "of 'gelu', 'relu', 'swish'"),
    ('attention_implementation', 'flash', "network.TransformerConfig.attention_implementation: "
                                          "'flash' is not one of 'auto', 'cudnn', 'pallas', 'pallas_tpu', 'xla'"),
    ('remat_policy', 'some', "network.TransformerConfig.remat_policy: 'some' is not one of "
                             "'dots', 'dots_with_no_batch_dims', 'full', 'none'"),
    ('adapter_by', 'source', "network.TransformerConfig.adapter_by: 'source' is not one of "
                             "direction, target"),  # Refused even without adapter keys.
])
def test_every_enum_like_config_field_refuses_a_typo_naming_its_binding(field, value, message):
  with pytest.raises(UserError) as error:
    dataclasses.replace(TINY, **{field: value})
  assert str(error.value) == message


def hand_count(config, position_tables=2):
  """Parameter count by hand: biases everywhere, LayerNorm scale and bias."""
  e, f, v = config.emb_dim, config.mlp_dim, config.vocab_size
  hk = config.num_heads * config.head_dim
  attention = 3 * (e * hk + hk) + hk * e + e
  mlp = e * f + f + f * e + e
  norm = 2 * e
  encoder_layer = attention + mlp + 2 * norm
  decoder_layer = 2 * attention + mlp + 3 * norm
  embeddings = v * e * (1 if config.share_encoder_embedding else 2)
  if not config.logits_via_embedding:
    embeddings += e * v
  positions = position_tables * config.max_length * e
  return (config.num_encoder_layers * encoder_layer + config.num_decoder_layers * decoder_layer
          + 2 * norm + embeddings + positions)


def test_count_params_of_tiny_config_equals_hand_formula():
  # attention 3*(16*16+16) + 16*16 + 16 = 1088; mlp 16*32+32+32*16+16 = 1072; norm 32.
  # encoder layer 1088+1072+64 = 2224; decoder layer 2*1088+1072+96 = 3344.
  # 2*2224 + 2*3344 + 2*32 (final norms) + 20*16 (embedding) + 2*16*16 (positions) = 12032.
  assert models.count_params(TINY) == 12032
  separate = dataclasses.replace(TINY, share_encoder_embedding=False)
  assert models.count_params(separate) == 12032 + 20 * 16
  untied = dataclasses.replace(TINY, logits_via_embedding=False)
  assert models.count_params(untied) == 12032 + 16 * 20
  sinusoidal = dataclasses.replace(TINY, position_embedding='sinusoidal')
  assert models.count_params(sinusoidal) == 12032 - 2 * 16 * 16
  assert models.count_params(sinusoidal) == hand_count(sinusoidal, position_tables=0)


def test_paper_configs_parameter_counts():
  # Scanned stacks: the same parameters, and one layer per stack to trace.
  big = dict(vocab_size=128000, emb_dim=1024, num_heads=16, head_dim=64, mlp_dim=4096,
             scan_layers=True)
  transf_deep = network.TransformerConfig(num_encoder_layers=24, num_decoder_layers=12, **big)
  volctrans_2b = network.TransformerConfig(num_encoder_layers=64, num_decoder_layers=64,
                                           share_encoder_embedding=False, **big)
  # 24 * 12,596,224 + 12 * 16,796,672 + 131,072,000 (one table) + 2 * 512 * 1024 + 4096.
  assert models.count_params(transf_deep) == hand_count(transf_deep) == 635_994_112
  # 64 * 12,596,224 + 64 * 16,796,672 + 2 * 131,072,000 + 2 * 512 * 1024 + 4096.
  assert models.count_params(volctrans_2b) == hand_count(volctrans_2b) == 2_144_342_016


def test_abstract_variables_allocate_nothing_and_carry_logical_axes():
  variables = models.abstract_variables(dataclasses.replace(TINY, logits_via_embedding=False))
  for leaf in jax.tree.leaves(nn.meta.unbox(variables)):
    assert isinstance(leaf, jax.ShapeDtypeStruct) and leaf.dtype == jnp.float32
  spec = nn.get_partition_spec(variables)['params']
  assert tuple(spec['shared_embedding']['embedding']) == ('vocab', 'embed')
  assert tuple(spec['decoder']['logits_dense']['kernel']) == ('embed', 'vocab')
  assert tuple(spec['encoder']['layers_0']['mlp']['wi']['kernel']) == ('embed', 'mlp')
  assert tuple(spec['decoder']['layers_1']['encoder_decoder_attention']['out']['kernel']) == (
      'heads', 'kv', 'embed')


def test_separate_encoder_embedding_feeds_only_the_encoder():
  config = dataclasses.replace(TINY, share_encoder_embedding=False)
  forward = jitted_forward(config)
  params = random_params(config)
  batch = padded_batch(PAIRS)
  logits = np.asarray(forward({'params': params}, *batch))

  def bumped_logits(table):
    bumped = dict(params)
    bumped[table] = {'embedding': params[table]['embedding'].at[5].mul(2.0)}
    return np.asarray(forward({'params': bumped}, *batch))

  # Token 5 occurs only in the source: the encoder reads it from its own table...
  assert not np.allclose(bumped_logits('encoder_embedding'), logits)
  # ... while the shared table's row 5 only moves the tied output logit of token 5.
  shared_bumped = bumped_logits('shared_embedding')
  others = np.arange(config.vocab_size) != 5
  np.testing.assert_array_equal(shared_bumped[..., others], logits[..., others])
  assert not np.allclose(shared_bumped[..., 5], logits[..., 5])


def test_bfloat16_compute_keeps_float32_params_and_logits():
  config = dataclasses.replace(TINY, dtype=jnp.bfloat16)
  params = random_params(config)
  assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(params))
  batch = padded_batch(PAIRS)
  logits = jitted_forward(config)({'params': params}, *batch)
  assert logits.dtype == jnp.float32
  reference = jitted_forward()({'params': params}, *batch)
  np.testing.assert_allclose(logits, reference, atol=0.1)


def test_dropout_off_is_deterministic_and_on_depends_on_rng():
  forward = jitted_forward()
  params = random_params()
  batch = padded_batch(PAIRS)

  def run(enable_dropout, seed=0):
    return forward({'params': params}, *batch, enable_dropout=enable_dropout,
                       rngs={'dropout': jax.random.key(seed)})

  np.testing.assert_array_equal(run(False, 0), run(False, 1))
  np.testing.assert_array_equal(run(True, 3), run(True, 3))
  assert not np.allclose(run(True, 3), run(True, 4))
  assert not np.allclose(run(True, 3), run(False))


@pytest.mark.slow
def test_decoding_more_than_one_token_per_step_is_an_error():
  # Shapes only: the error is raised while the step is traced.
  model = network.Transformer(TINY)
  params = random_params()
  encoded = jnp.zeros((1, 2, TINY.emb_dim))
  tokens = jnp.ones((1, 2), jnp.int32)
  cache = jax.eval_shape(lambda: decode_cache.init(model, params, encoded, tokens,
                                                   max_decode_length=4))
  with pytest.raises(ValueError, match='one token per call'):
    jax.eval_shape(lambda cache: model.apply(
        {'params': params, 'cache': cache}, encoded, tokens, tokens, tokens, decode=True,
        method=network.Transformer.decode, mutable=['cache']), cache)
