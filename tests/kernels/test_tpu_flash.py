"""The TPU flash attention (JAX's Mosaic kernel under the project's contract), run in
Pallas' TPU interpreter against XLA attention, with lengths that are not whole blocks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt import kernels
from t5x_mt.kernels import tpu_flash

TOLERANCE = 1e-5  # float32, outputs and gradients.


def _segments(lengths, total):
  ids = [segment for segment, length in enumerate(lengths, start=1) for _ in range(length)]
  return ids + [0] * (total - len(ids))


# 300 and 170 pad to 384 and 256: three query blocks of 128 and two key blocks of 128 (or
# one of 256), padding inside the last block. Cross-attention row 1 has a query segment (2)
# with no keys at all, which the contract gives zeros.
CASES = {
    'packed_causal_self_attention_head_dim_64': dict(
        q_length=300, kv_length=300, head_dim=64, causal=True, bias_shape=(1, 1, 300, 300),
        q_segments=[_segments([120, 150], 300), _segments([40, 260], 300)],
        kv_segments=None),
    'packed_cross_attention_head_dim_128': dict(
        q_length=300, kv_length=170, head_dim=128, causal=False, bias_shape=(2, 1, 300, 170),
        q_segments=[_segments([140, 150], 300), _segments([100, 50, 120], 300)],
        kv_segments=[_segments([80, 85], 170), _segments([60, 0, 100], 170)]),
}


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(CASES))
def test_outputs_and_gradients_match_xla_attention(name):
  case = CASES[name]
  rng = np.random.default_rng(0)
  shape = lambda length: (2, length, 1, case['head_dim'])  # noqa: E731
  q, k, v = (jnp.asarray(rng.normal(size=shape(length)), jnp.float32)
             for length in (case['q_length'], case['kv_length'], case['kv_length']))
  bias = jnp.asarray(rng.normal(size=case['bias_shape']), jnp.float32)
  q_segments = jnp.asarray(case['q_segments'], jnp.int32)
  kv_segments = (q_segments if case['kv_segments'] is None
                 else jnp.asarray(case['kv_segments'], jnp.int32))
  cotangent = jnp.asarray(rng.normal(size=q.shape), jnp.float32)

  def weighted_output(implementation):
    def weighted(q, k, v, bias):
      out = kernels.attention(q, k, v, q_segment_ids=q_segments, kv_segment_ids=kv_segments,
                              bias=bias, causal=case['causal'], implementation=implementation)
      return jnp.sum(out * cotangent), out
    return jax.value_and_grad(weighted, argnums=(0, 1, 2, 3), has_aux=True)(q, k, v, bias)

  (_, kernel_out), kernel_grads = weighted_output('pallas_tpu')
  (_, xla_out), xla_grads = weighted_output('xla')
  np.testing.assert_allclose(kernel_out, xla_out, atol=TOLERANCE, rtol=0)
  for kernel_grad, xla_grad in zip(kernel_grads, xla_grads):
    np.testing.assert_allclose(kernel_grad, xla_grad, atol=TOLERANCE, rtol=0)
  no_key = np.asarray(q_segments) == 0
  if case['kv_segments'] is not None:
    no_key |= np.asarray(q_segments) == 2 * np.array([[0], [1]])  # Row 1's segment 2.
  assert np.all(np.asarray(kernel_out)[no_key] == 0)


def test_blocks_follow_mosaics_tiling_rule_with_under_a_lane_of_padding():
  assert [tpu_flash.tpu_block(n) for n in (1, 128, 200, 300, 640, 1024, 2048, 2000)] == [
      128, 128, 256, 128, 128, 512, 512, 512]
  sizes = tpu_flash.block_sizes(2048, 300)
  assert (sizes.block_q, sizes.block_k_major, sizes.block_q_dq, sizes.block_k_dkv) == (
      512, 128, 512, 128)


def test_queries_with_a_key_follow_segments_and_causality():
  q_ids = jnp.asarray([[1, 1, 2, 3, 0], [2, 2, 1, 1, 1]])
  kv_ids = jnp.asarray([[3, 1, 1, 0, 0], [1, 1, 1, 2, 2]])
  np.testing.assert_array_equal(tpu_flash.queries_with_a_key(q_ids, kv_ids, False),
                                [[1, 1, 0, 1, 0], [1, 1, 1, 1, 1]])
  # Causal: row 0's first key of segment 1 is at index 1, of segment 3 at index 0; row 1's
  # segment 2 starts at key 3, after queries 0 and 1.
  np.testing.assert_array_equal(tpu_flash.queries_with_a_key(q_ids, kv_ids, True),
                                [[0, 1, 0, 1, 0], [0, 0, 1, 1, 1]])
