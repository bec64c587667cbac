"""'auto' decides by the platform a program is lowered for: programs lowered on this CPU
host for TPUs and GPUs carry those platforms' kernels, forward and backward, and no
configuration the kernels claim falls back to XLA on an accelerator."""

import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt import kernels
from t5x_mt.core import partitioning

TRITON_CALL = '__gpu$xla.gpu.triton'
KERNEL_CALLS = {'tpu': 'tpu_custom_call', 'cuda': TRITON_CALL}


def _abstract(shape, dtype):
  return jax.ShapeDtypeStruct(shape, dtype)


def _gradients(implementation, causal=True):
  def gradients(q, k, v, q_segments, kv_segments, bias):
    def total(q, k, v, bias):
      out = kernels.attention(q, k, v, q_segment_ids=q_segments, kv_segment_ids=kv_segments,
                              bias=bias, causal=causal, implementation=implementation)
      return out.astype(jnp.float32).sum()
    return jax.grad(total, argnums=(0, 1, 2, 3))(q, k, v, bias)
  return gradients


def exported_module(fn, platform, *args) -> str:
  exported = jax.export.export(
      jax.jit(fn), platforms=[platform],
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(TRITON_CALL)])(*args)
  return exported.mlir_module()


def _attention_operands(batch=2, length=1024, kv_length=1000, heads=4, head_dim=64,
                        dtype=jnp.bfloat16):
  return (_abstract((batch, length, heads, head_dim), dtype),
          _abstract((batch, kv_length, heads, head_dim), dtype),
          _abstract((batch, kv_length, heads, head_dim), dtype),
          _abstract((batch, length), jnp.int32), _abstract((batch, kv_length), jnp.int32),
          _abstract((1, heads, length, kv_length), jnp.float32))


@pytest.mark.parametrize('platform', ['tpu', 'cuda'])
def test_auto_lowers_to_the_platforms_kernel_forward_and_backward(platform):
  module = exported_module(_gradients('auto'), platform, *_attention_operands())
  # Forward, dK/dV and dQ (with dBias): three kernel calls on either platform.
  assert module.count(KERNEL_CALLS[platform]) == 3
  assert all(call not in module for call in KERNEL_CALLS.values()
             if call != KERNEL_CALLS[platform])


def test_a_named_kernel_runs_in_the_interpreter_off_its_platform():
  rng = np.random.default_rng(0)
  q, k, v = (jnp.asarray(rng.normal(size=(1, 130, 2, 64)), jnp.float32) for _ in range(3))
  cpu_program = jax.jit(lambda q, k, v: kernels.attention(
      q, k, v, causal=True, implementation='pallas_tpu'))
  assert 'tpu_custom_call' not in cpu_program.lower(q, k, v).as_text()
  np.testing.assert_allclose(cpu_program(q, k, v),
                             kernels.attention(q, k, v, causal=True, implementation='xla'),
                             atol=1e-5)


@pytest.mark.skipif(kernels.process_platform() == 'cuda', reason='cuDNN is reachable here')
def test_cudnn_named_where_no_gpu_is_reachable_is_refused():
  q = jnp.zeros((1, 128, 2, 64), jnp.bfloat16)
  with pytest.raises(ValueError, match="'cudnn' runs only on cuda .* this process is on cpu"):
    kernels.attention(q, q, q, implementation='cudnn')


def test_a_kernel_named_on_another_accelerator_is_refused(monkeypatch):
  """Pallas' TPU interpreter runs on CPUs alone: on a GPU, 'pallas_tpu' is one clear error."""
  monkeypatch.setattr(kernels, 'process_platform', lambda: 'cuda')
  q = jnp.zeros((1, 128, 2, 64), jnp.float32)
  with pytest.raises(ValueError, match="'pallas_tpu' runs only on tpu .* process is on cuda"):
    kernels.attention(q, q, q, implementation='pallas_tpu')


# What the kernels claim (docs/speed.md, "Attention kernels"): head_dim 64 and 128, lengths
# 128 to 2048 and in between, float32 and bfloat16, packed causal self-attention and packed
# cross-attention, with or without a bias. On GPUs 'auto' gives XLA the calls shorter than
# GPU_AUTO_MIN_LENGTH, where it is measured to be as fast.
CLAIMED = list(itertools.product((64, 128), (128, 300, 1024, 2048), (jnp.float32,
                                                                     jnp.bfloat16)))


def _expected_gpu_choice(length, dtype, cudnn_reachable):
  if length < kernels.GPU_AUTO_MIN_LENGTH:
    return 'xla'
  return 'cudnn' if cudnn_reachable and dtype == jnp.bfloat16 else 'pallas'


@pytest.fixture
def cudnn_reachable(monkeypatch):
  """'auto' as in a process on an NVIDIA GPU, where JAX finds cuDNN."""
  monkeypatch.setattr(kernels, '_IMPLEMENTATIONS', dict(kernels._IMPLEMENTATIONS))
  cudnn = kernels._IMPLEMENTATIONS['cudnn']
  kernels.register_implementation('cudnn', cudnn.fn, platform='cuda',
                                  auto_priority=cudnn.auto_priority,
                                  unsupported=cudnn.unsupported, interpretable=False,
                                  auto_min_length=cudnn.auto_min_length)


def test_auto_never_falls_back_to_xla_on_an_accelerator_for_a_claimed_configuration():
  on_gpu = kernels.process_platform() == 'cuda'
  for head_dim, length, dtype in CLAIMED:
    q = _abstract((8, length, 8, head_dim), dtype)
    k = _abstract((8, length // 2 + 1, 8, head_dim), dtype)
    assert kernels.auto_choices(q, k) == {
        'tpu': 'pallas_tpu', 'cuda': _expected_gpu_choice(length, dtype, on_gpu)}, (
            head_dim, length, dtype)


def test_on_a_gpu_auto_takes_cudnn_for_half_precision_and_the_pallas_kernel_for_float32(
    cudnn_reachable):
  del cudnn_reachable
  for head_dim, length, dtype in CLAIMED:
    q = _abstract((8, length, 8, head_dim), dtype)
    assert kernels.auto_choices(q, q)['cuda'] == _expected_gpu_choice(length, dtype, True), (
        head_dim, length, dtype)


def test_auto_uses_xla_only_where_no_kernel_computes_the_call():
  q = _abstract((8, 256, 8, 64), jnp.bfloat16)
  xla_everywhere = {'tpu': 'xla', 'cuda': 'xla'}
  assert kernels.auto_choices(q, q, dropout=True) == xla_everywhere
  table = (jnp.zeros((33, 64)), jnp.zeros((1, 256, 256), jnp.int32))
  assert kernels.auto_choices(q, q, relative_values=table) == xla_everywhere
  assert kernels.auto_choices(_abstract((8, 1, 8, 64), jnp.bfloat16), q) == xla_everywhere


def test_kernels_run_per_device_under_the_models_mesh():
  """Under a data x model mesh the TPU program calls the kernel on each device's batch rows
  and heads: shard_map, since XLA cannot partition a Mosaic call."""
  devices = np.asarray(jax.devices('cpu')[:4]).reshape(2, 1, 2)
  mesh = jax.sharding.Mesh(devices, partitioning.MESH_AXES)
  with partitioning.activation_sharding(mesh, partitioning.logical_axis_rules()):
    module = exported_module(_gradients('auto'), 'tpu',
                             *_attention_operands(batch=4, length=256, kv_length=200))
  assert module.count('tpu_custom_call') == 3
  # Per device: 2 of 4 rows, 2 of 4 heads, lengths padded to whole blocks (256).
  assert 'tensor<2x2x256x64xbf16>' in module
  assert 'tensor<4x4x256x64xbf16>' not in module


@pytest.mark.skipif(kernels.process_platform() != 'cuda', reason='needs an NVIDIA GPU')
def test_cudnn_matches_xla_on_packed_cross_attention_with_a_bias():
  rng = np.random.default_rng(3)
  q_ids = jnp.asarray([[1] * 100 + [2] * 120 + [0] * 36, [1] * 256], jnp.int32)
  kv_ids = jnp.asarray([[1] * 70 + [2] * 90 + [0] * 40, [2] * 200], jnp.int32)  # Row 1: none.
  q = jnp.asarray(rng.normal(size=(2, 256, 4, 64)), jnp.bfloat16)
  k, v = (jnp.asarray(rng.normal(size=(2, 200, 4, 64)), jnp.bfloat16) for _ in range(2))
  bias = jnp.asarray(rng.normal(size=(1, 4, 256, 200)), jnp.float32)

  def grads(implementation):
    def total(q, k, v, bias):
      out = kernels.attention(q, k, v, q_segment_ids=q_ids, kv_segment_ids=kv_ids, bias=bias,
                              implementation=implementation)
      return jnp.sum(out.astype(jnp.float32) ** 2), out
    return jax.jit(jax.value_and_grad(total, argnums=(0, 1, 2, 3), has_aux=True))(
        q, k, v, bias)

  (_, cudnn_out), cudnn_grads = grads('cudnn')
  (_, xla_out), xla_grads = grads('xla')
  np.testing.assert_allclose(np.asarray(cudnn_out, np.float32), np.asarray(xla_out, np.float32),
                             atol=2e-2)
  assert np.all(np.asarray(cudnn_out)[1] == 0)  # No key shares row 1's segment id.
  for ours, reference in zip(cudnn_grads, xla_grads):
    np.testing.assert_allclose(np.asarray(ours, np.float32), np.asarray(reference, np.float32),
                               atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize('platform', ['tpu', 'cuda'])
def test_auto_decoding_steps_lower_to_the_ragged_kernel(platform):
  def step(q, key_cache, value_cache, kv_valid):
    return kernels.decoding_step_attention(q, key_cache, value_cache, kv_valid)

  module = exported_module(step, platform, _abstract((8, 4, 8, 64), jnp.bfloat16),
                           _abstract((8, 8, 64, 1024), jnp.bfloat16),
                           _abstract((8, 8, 1024, 64), jnp.bfloat16),
                           _abstract((8, 4, 1024), jnp.bool_))
  assert module.count(KERNEL_CALLS[platform]) == 1
