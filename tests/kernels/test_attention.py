"""Tests for t5x_mt.kernels.attention: masks, packing isolation, padding, dispatch.

The behavioural tests run every implementation that has an interpreter: 'pallas' runs the
Triton flash kernel and 'pallas_tpu' the Mosaic one in Pallas' interpreters on CPU.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt import kernels


def naive_attention(q, k, v, q_segment_ids, kv_segment_ids, causal=False, bias=None):
  """Loop-per-query NumPy reference in float64."""
  q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
  batch, q_length, heads, head_dim = q.shape
  out = np.zeros_like(q)
  for b in range(batch):
    for h in range(heads):
      for i in range(q_length):
        keys = [j for j in range(k.shape[1])
                if q_segment_ids[b, i] != 0 and q_segment_ids[b, i] == kv_segment_ids[b, j]
                and (not causal or j <= i)]
        if not keys:
          continue
        scores = np.array([q[b, i, h] @ k[b, j, h] for j in keys]) / np.sqrt(head_dim)
        if bias is not None:
          scores = scores + np.array([bias[b, h, i, j] for j in keys])
        weights = np.exp(scores - scores.max())
        weights /= weights.sum()
        out[b, i, h] = sum(w * v[b, j, h] for w, j in zip(weights, keys))
  return out


def random_qkv(q_length, kv_length, batch=2, heads=2, head_dim=4, seed=0):
  rng = np.random.default_rng(seed)
  q = rng.normal(size=(batch, q_length, heads, head_dim)).astype(np.float32)
  k = rng.normal(size=(batch, kv_length, heads, head_dim)).astype(np.float32)
  v = rng.normal(size=(batch, kv_length, heads, head_dim)).astype(np.float32)
  return q, k, v


IMPLEMENTATIONS = pytest.mark.parametrize('implementation', ['xla', 'pallas', 'pallas_tpu'])

# Packed cross-attention: decoder segments (q) against encoder segments (kv), Lq != Lk.
Q_SEGMENTS = np.array([[1, 1, 1, 2, 2, 0], [1, 2, 2, 2, 3, 3]], np.int32)
KV_SEGMENTS = np.array([[1, 1, 2, 2, 2, 2, 0, 0], [1, 1, 1, 2, 3, 3, 3, 0]], np.int32)


@IMPLEMENTATIONS
def test_cross_attention_matches_naive_reference_on_packed_batch(implementation):
  q, k, v = random_qkv(6, 8)
  out = kernels.attention(q, k, v, q_segment_ids=Q_SEGMENTS, kv_segment_ids=KV_SEGMENTS,
                          implementation=implementation)
  expected = naive_attention(q, k, v, Q_SEGMENTS, KV_SEGMENTS)
  np.testing.assert_allclose(out, expected, atol=1e-5)


@IMPLEMENTATIONS
def test_causal_packed_self_attention_matches_naive_reference(implementation):
  q, k, v = random_qkv(8, 8, seed=1)
  bias = np.random.default_rng(2).normal(size=(2, 2, 8, 8)).astype(np.float32)
  out = kernels.attention(q, k, v, q_segment_ids=KV_SEGMENTS, kv_segment_ids=KV_SEGMENTS,
                          bias=bias, causal=True, implementation=implementation)
  expected = naive_attention(q, k, v, KV_SEGMENTS, KV_SEGMENTS, causal=True, bias=bias)
  np.testing.assert_allclose(out, expected, atol=1e-5)


@IMPLEMENTATIONS
def test_first_causal_query_copies_its_own_value(implementation):
  q, k, v = random_qkv(5, 5, seed=3)
  out = kernels.attention(q, k, v, causal=True, implementation=implementation)
  np.testing.assert_allclose(out[:, 0], v[:, 0], atol=1e-6)


@IMPLEMENTATIONS
def test_segments_never_influence_each_other_forward_and_backward(implementation):
  q, k, v = random_qkv(6, 8, seed=4)
  segment2_keys = KV_SEGMENTS[0] == 2
  segment1_queries = Q_SEGMENTS[0] == 1

  def segment1_output(k, v):
    out = kernels.attention(q, k, v, q_segment_ids=Q_SEGMENTS, kv_segment_ids=KV_SEGMENTS,
                            implementation=implementation)
    return out[0, segment1_queries]

  perturbed_k = k.copy()
  perturbed_v = v.copy()
  perturbed_k[0, segment2_keys] += 10.0
  perturbed_v[0, segment2_keys] -= 7.0
  np.testing.assert_array_equal(segment1_output(k, v), segment1_output(perturbed_k, perturbed_v))

  grad_k, grad_v = jax.grad(lambda k, v: segment1_output(k, v).sum(), argnums=(0, 1))(k, v)
  assert np.all(np.asarray(grad_k)[0, segment2_keys] == 0)
  assert np.all(np.asarray(grad_v)[0, segment2_keys] == 0)
  assert np.abs(np.asarray(grad_v)[0, KV_SEGMENTS[0] == 1]).sum() > 0


@IMPLEMENTATIONS
def test_padding_queries_give_zeros_and_finite_gradients(implementation):
  q, k, v = random_qkv(6, 8, seed=5)

  def loss(q, k, v):
    out = kernels.attention(q, k, v, q_segment_ids=Q_SEGMENTS, kv_segment_ids=KV_SEGMENTS,
                            causal=False, implementation=implementation)
    return jnp.sum(out ** 2), out

  (_, out), grads = jax.value_and_grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
  np.testing.assert_array_equal(out[0, 5], 0.0)  # Query segment 0: padding.
  for grad in grads:
    assert np.all(np.isfinite(grad))
  np.testing.assert_array_equal(grads[0][0, 5], 0.0)
  np.testing.assert_array_equal(grads[1][0, 6:], 0.0)  # Padding keys get no gradient.


@IMPLEMENTATIONS
def test_bfloat16_inputs_keep_dtype_and_stay_close_to_float32(implementation):
  q, k, v = random_qkv(6, 8, seed=6)
  bf16 = [jnp.asarray(x, jnp.bfloat16) for x in (q, k, v)]
  out = kernels.attention(*bf16, q_segment_ids=Q_SEGMENTS, kv_segment_ids=KV_SEGMENTS,
                          implementation=implementation)
  assert out.dtype == jnp.bfloat16
  expected = naive_attention(*(np.asarray(x, np.float32) for x in bf16), Q_SEGMENTS,
                             KV_SEGMENTS)
  np.testing.assert_allclose(np.asarray(out, np.float32), expected, atol=3e-2)


def test_jit_and_auto_match_xla():
  """'auto' gives XLA's numbers; on a CPU it lowers to XLA, with no kernel in the program."""
  q, k, v = random_qkv(6, 8, seed=7)
  auto = jax.jit(lambda q, k, v: kernels.attention(
      q, k, v, q_segment_ids=Q_SEGMENTS, kv_segment_ids=KV_SEGMENTS, implementation='auto'))
  eager = kernels.attention(q, k, v, q_segment_ids=Q_SEGMENTS, kv_segment_ids=KV_SEGMENTS,
                            implementation='xla')
  np.testing.assert_allclose(auto(q, k, v), eager, atol=1e-6)
  if kernels.process_platform() == 'cpu':
    assert 'custom_call' not in auto.lower(q, k, v).as_text()


def test_unknown_implementation_names_the_valid_ones():
  q, k, v = random_qkv(2, 2)
  with pytest.raises(ValueError, match="'flash'.*auto, cudnn, pallas, pallas_tpu, xla"):
    kernels.attention(q, k, v, implementation='flash')


def test_registered_kernel_is_auto_picked_by_priority_where_it_is_available(monkeypatch):
  monkeypatch.setattr(kernels, '_IMPLEMENTATIONS', dict(kernels._IMPLEMENTATIONS))
  calls = []

  def fake(q, k, v, **kwargs):
    calls.append(kwargs['causal'])
    return jnp.zeros_like(q)

  q, k, v = random_qkv(2, 2)
  kernels.register_implementation('fake', fake, platform='tpu', auto_priority=10)
  assert kernels.auto_choices(q, k)['tpu'] == 'fake'
  kernels.register_implementation('fake', fake, platform='tpu', auto_priority=10,
                                  is_available=lambda: False)
  assert kernels.auto_choices(q, k)['tpu'] == 'pallas_tpu'
  kernels.register_implementation('fake', fake)  # Native everywhere: called as named.
  assert np.all(kernels.attention(q, k, v, causal=True, implementation='fake') == 0)
  assert calls == [True]


def test_attention_dropout_zeroes_or_rescales_each_probability():
  q, k, _ = random_qkv(4, 4, seed=8)
  v = np.broadcast_to(np.eye(4, dtype=np.float32)[None, :, None, :], (2, 4, 2, 4))
  probs = kernels.attention(q, k, v)  # One-hot values: outputs are the probabilities.
  np.testing.assert_allclose(probs.sum(-1), 1.0, atol=1e-6)
  np.testing.assert_array_equal(kernels.attention(q, k, v, dropout_rate=0.5), probs)
  dropped = np.asarray(kernels.attention(q, k, v, dropout_rate=0.5,
                                         dropout_rng=jax.random.key(0)))
  kept = dropped != 0
  assert 0 < kept.mean() < 1
  np.testing.assert_allclose(dropped[kept], 2.0 * np.asarray(probs)[kept], rtol=1e-6)


def test_decoding_step_attention_on_a_matmul_layout_cache_equals_xla_attention():
  # Three hypotheses per cache row attend as one query each; the cache's keys are kept
  # [batch, heads, head_dim, length] and values [batch, heads, length, head_dim]; padded
  # and unwritten positions (kv_valid False) get no weight.
  keys = jax.random.split(jax.random.key(7), 3)
  q = jax.random.normal(keys[0], (2, 3, 4, 8))
  k = jax.random.normal(keys[1], (2, 6, 4, 8))
  v = jax.random.normal(keys[2], (2, 6, 4, 8))
  kv_valid = jnp.array([[True, True, True, False, False, False],
                        [True, True, False, True, True, True]])
  got = kernels.decoding_step_attention(q, k.transpose(0, 2, 3, 1), v.transpose(0, 2, 1, 3),
                                        kv_valid)
  want = kernels.xla_attention(q, k, v, kv_segment_ids=kv_valid.astype(jnp.int32))
  np.testing.assert_allclose(got, want, atol=1e-6)
  changed = v.at[0, 4].set(100.0)  # An invalid position of row 0.
  np.testing.assert_array_equal(
      kernels.decoding_step_attention(q, k.transpose(0, 2, 3, 1),
                                      changed.transpose(0, 2, 1, 3), kv_valid)[0], got[0])
