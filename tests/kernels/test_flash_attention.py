"""Tests for the Pallas flash attention kernel (interpreter on CPU) against XLA attention.

Block sizes of 16 on lengths of 24-48 make every call span several query and key blocks,
with padding both to whole blocks and inside the packed rows.
"""

import dataclasses

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt import kernels
from t5x_mt.model import network
from t5x_mt.kernels import flash

BLOCK = 16
TOLERANCE = 1e-5  # fp32, outputs and gradients.


def _segments(lengths, total):
  ids = [segment for segment, length in enumerate(lengths, start=1) for _ in range(length)]
  return ids + [0] * (total - len(ids))


def _inputs(batch, q_length, kv_length, heads, head_dim, seed):
  rng = np.random.default_rng(seed)
  shape = lambda length: (batch, length, heads, head_dim)  # noqa: E731
  return tuple(jnp.asarray(rng.normal(size=shape(length)), jnp.float32)
               for length in (q_length, kv_length, kv_length))


# Packed self-attention (decoder, causal), packed cross-attention (Lq != Lk, segments
# aligned pair by pair), and a head_dim that is not a power of two.
CASES = {
    'packed_causal_self_attention': dict(
        q_length=40, kv_length=40, head_dim=32, causal=True, bias_shape=(1, 2, 40, 40),
        q_segments=[_segments([15, 20], 40), _segments([7, 9, 22], 40)],
        kv_segments=[_segments([15, 20], 40), _segments([7, 9, 22], 40)]),
    'packed_cross_attention': dict(
        q_length=40, kv_length=24, head_dim=32, causal=False, bias_shape=(2, 1, 40, 24),
        q_segments=[_segments([15, 20], 40), _segments([7, 9, 22], 40)],
        kv_segments=[_segments([10, 12], 24), _segments([5, 3, 16], 24)]),
    'unpadded_head_dim_24': dict(
        q_length=33, kv_length=48, head_dim=24, causal=False, bias_shape=None,
        q_segments=[_segments([33], 33), _segments([30], 33)],
        kv_segments=[_segments([48], 48), _segments([17], 48)]),
}


def _case_arrays(case, seed=0):
  q, k, v = _inputs(2, case['q_length'], case['kv_length'], 2, case['head_dim'], seed)
  bias = None
  if case['bias_shape']:
    bias = jnp.asarray(np.random.default_rng(seed + 1).normal(size=case['bias_shape']),
                       jnp.float32)
  return (q, k, v, jnp.asarray(case['q_segments'], jnp.int32),
          jnp.asarray(case['kv_segments'], jnp.int32), bias)


def _flash_blocks(q, k, v, **kwargs):
  return flash.flash_attention(q, k, v, block_q=BLOCK, block_k=BLOCK, interpret=True, **kwargs)


@pytest.mark.parametrize('name', sorted(CASES))
def test_outputs_and_gradients_match_xla_attention(name):
  case = CASES[name]
  q, k, v, q_segments, kv_segments, bias = _case_arrays(case)
  cotangent = jnp.asarray(np.random.default_rng(7).normal(size=q.shape), jnp.float32)

  def loss(fn):
    def weighted_output(q, k, v, bias):
      out = fn(q, k, v, q_segment_ids=q_segments, kv_segment_ids=kv_segments, bias=bias,
               causal=case['causal'])
      return jnp.sum(out * cotangent), out
    return jax.jit(jax.value_and_grad(weighted_output, argnums=(0, 1, 2, 3), has_aux=True))

  (_, flash_out), flash_grads = loss(_flash_blocks)(q, k, v, bias)
  (_, xla_out), xla_grads = loss(kernels.xla_attention)(q, k, v, bias)
  np.testing.assert_allclose(flash_out, xla_out, atol=TOLERANCE, rtol=0)
  for flash_grad, xla_grad in zip(flash_grads, xla_grads):
    if xla_grad is not None:
      np.testing.assert_allclose(flash_grad, xla_grad, atol=TOLERANCE, rtol=0)
  padding = np.asarray(q_segments) == 0
  assert np.all(np.asarray(flash_out)[padding] == 0)


def test_tokens_of_other_segments_never_reach_a_query_across_blocks():
  case = CASES['packed_cross_attention']
  q, k, v, q_segments, kv_segments, _ = _case_arrays(case, seed=3)
  other_keys = np.asarray(kv_segments) != 1  # Every key outside pair 1, padding included.
  first_queries = np.asarray(q_segments) == 1

  def first_pair_output(k, v):
    out = _flash_blocks(q, k, v, q_segment_ids=q_segments, kv_segment_ids=kv_segments)
    return out[first_queries]

  noise = np.random.default_rng(4).normal(scale=100.0, size=k.shape).astype(np.float32)
  perturbed_k = jnp.where(other_keys[..., None, None], k + noise, k)
  perturbed_v = jnp.where(other_keys[..., None, None], v - noise, v)
  np.testing.assert_array_equal(first_pair_output(k, v),
                                first_pair_output(perturbed_k, perturbed_v))
  grad_k, grad_v = jax.grad(lambda k, v: first_pair_output(k, v).sum(), argnums=(0, 1))(k, v)
  assert np.all(np.asarray(grad_k)[other_keys] == 0)
  assert np.all(np.asarray(grad_v)[other_keys] == 0)
  assert np.abs(np.asarray(grad_v)[~other_keys]).sum() > 0


def test_block_size_covers_short_sequences_with_one_small_block():
  assert flash.block_size(1) == 16
  assert flash.block_size(40) == 64
  assert flash.block_size(40, requested=16) == 16
  assert flash.block_size(1000) == 128


def test_kernel_lowers_to_triton_for_gpu_forward_and_backward():
  """The whole kernel lowers through Pallas' Triton backend (three kernels: forward, dK/dV
  and dQ); a CPU host can lower for GPU without one."""
  shapes = [((2, 256, 4, 64), jnp.bfloat16), ((2, 200, 4, 64), jnp.bfloat16),
            ((2, 200, 4, 64), jnp.bfloat16), ((2, 256), jnp.int32), ((2, 200), jnp.int32),
            ((1, 4, 256, 200), jnp.float32)]

  def gradients(q, k, v, q_segments, kv_segments, bias):
    def total(q, k, v, bias):
      return flash.flash_attention(q, k, v, q_segment_ids=q_segments,
                                   kv_segment_ids=kv_segments, bias=bias,
                                   causal=True).astype(jnp.float32).sum()
    return jax.grad(total, argnums=(0, 1, 2, 3))(q, k, v, bias)

  triton_call = '__gpu$xla.gpu.triton'
  exported = jax.export.export(
      jax.jit(gradients), platforms=['cuda'],
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(triton_call)])(
          *(jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in shapes))
  module = exported.mlir_module()
  assert module.count(triton_call) == 3
  for name in ('flash_attention_fwd', 'flash_attention_dkdv', 'flash_attention_dq'):
    assert name in module


def test_forcing_the_kernel_where_it_cannot_run_names_the_reason():
  q, k, v = _inputs(1, 4, 4, 1, 16, seed=6)
  with pytest.raises(ValueError, match="'pallas' does not support attention dropout"):
    kernels.attention(q, k, v, implementation='pallas', dropout_rate=0.1,
                      dropout_rng=jax.random.key(0))
  wide = jnp.zeros((1, 4, 1, 512))
  with pytest.raises(ValueError, match='head_dim 512'):
    kernels.attention(wide, wide, wide, implementation='pallas')


@pytest.mark.slow
def test_transformer_with_the_kernel_matches_xla_loss_and_gradients():
  """The whole model, packed rows on both sides: logits and parameter gradients."""
  config = network.TransformerConfig(
      vocab_size=40, emb_dim=32, num_heads=2, head_dim=16, mlp_dim=64, num_encoder_layers=1,
      num_decoder_layers=1, max_length=32, dropout_rate=0.0, attention_implementation='xla')
  rng = np.random.default_rng(8)
  encoder_segments = jnp.asarray([_segments([9, 11], 24), _segments([20], 24)])
  decoder_segments = jnp.asarray([_segments([7, 12], 20), _segments([16], 20)])
  tokens = lambda segments: jnp.asarray(  # noqa: E731
      np.where(np.asarray(segments) > 0, rng.integers(2, 40, segments.shape), 0), jnp.int32)
  batch = dict(encoder_input_tokens=tokens(encoder_segments),
               decoder_input_tokens=tokens(decoder_segments),
               decoder_target_tokens=tokens(decoder_segments),
               encoder_segment_ids=encoder_segments, decoder_segment_ids=decoder_segments)
  params = nn.meta.unbox(network.Transformer(config).init(jax.random.key(0), **batch)['params'])

  def loss(implementation):
    model = network.Transformer(dataclasses.replace(config,
                                                    attention_implementation=implementation))
    def total(params):
      logits = model.apply({'params': params}, **batch)
      return jnp.sum(jax.nn.log_softmax(logits)[..., 3] * (decoder_segments > 0))
    return jax.jit(jax.value_and_grad(total))(params)

  xla_loss, xla_grads = loss('xla')
  pallas_loss, pallas_grads = loss('pallas')
  np.testing.assert_allclose(pallas_loss, xla_loss, rtol=1e-6)
  jax.tree.map(lambda ours, reference: np.testing.assert_allclose(ours, reference,
                                                                   atol=TOLERANCE),
               pallas_grads, xla_grads)
