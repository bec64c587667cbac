"""The ragged decoding-step kernel against `decoding_step_attention`, in both variants.

Interpret mode runs the TPU variant in Pallas' TPU interpreter and the GPU variant in the
generic one; `jax.export` and an ahead-of-time compile for a TPU chip prove from this CPU
host that they lower (and, for the TPU, compile through Mosaic) for their targets.
"""

import functools
import itertools

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.model import decode_cache
from t5x_mt.model import layers
from t5x_mt.kernels import decode_attention
from t5x_mt.kernels.flash import pad_axis
from t5x_mt.kernels.xla_attention import decoding_step_attention

# Cross-attention: three encoder rows padded to 200 entries, two with lengths that end
# inside a key block, and one with no valid key at all. 200 ends in a partial TPU block,
# whose entries past the array the TPU interpreter fills with NaN (a TPU leaves them
# unspecified).
CROSS_LENGTHS = (37, 150, 0)
CROSS_CACHE_LENGTH = 200
# Key blocks: the TPU's smallest (a lane tile); for the GPU, 3 loop trips for 150 entries.
BLOCK_K = {'tpu': 128, 'gpu': 64}
HEADS = 2

try:
  from t5x_mt.training import dry_run  # pylint: disable=g-import-not-at-top
except ImportError:  # No TensorFlow: an accelerator host running the kernel tests alone.
  dry_run = None
needs_libtpu = pytest.mark.skipif(dry_run is None or dry_run.libtpu_library() is None,
                                  reason='libtpu is not installed (docs/dry_run.md)')


@functools.cache
def kernel(target: str, block_k: int):
  """The kernel in the interpreter, jitted once per variant so that tests of the same
  shapes share one compilation."""
  return jax.jit(functools.partial(decode_attention.ragged_decode_attention, target=target,
                                   interpret=True, block_k=block_k))


reference = jax.jit(decoding_step_attention)


def normal(rng: np.random.Generator, shape: tuple[int, ...], dtype=jnp.float32) -> jax.Array:
  return jnp.asarray(rng.normal(size=shape), dtype)


def cross_attention_case(n: int, head_dim: int, with_bias: bool, dtype=jnp.float32):
  """(q, key_cache, value_cache, kv_valid [batch, L], bias or None) of a cross-attention
  step: valid keys are those before each row's length, as kv_segment_ids != 0 gives them."""
  rng = np.random.default_rng(n * head_dim)
  batch, length = len(CROSS_LENGTHS), CROSS_CACHE_LENGTH
  valid = jnp.arange(length)[None] < jnp.asarray(CROSS_LENGTHS)[:, None]
  bias = normal(rng, (batch, HEADS, n, length)) if with_bias else None
  return (normal(rng, (batch, n, HEADS, head_dim), dtype),
          normal(rng, (batch, HEADS, head_dim, length), dtype),
          normal(rng, (batch, HEADS, length, head_dim), dtype), valid, bias)


def self_attention_cache(steps: int, slots: int, head_dim: int, max_length: int):
  """(key_cache, value_cache, history [batch, slots, max_length * slots]) that
  `layers.MultiHeadAttention` attends over at its `steps`-th decoding step, its beams'
  ancestry drawn anew before every step as beam search reorders it."""
  batch, embed = 2, 32
  module = layers.MultiHeadAttention(num_heads=HEADS, head_dim=head_dim)
  one_token = jnp.zeros((batch, 1, embed))
  variables = module.init(jax.random.PRNGKey(0), one_token, one_token, decode=True,
                          max_decode_length=max_length)
  cache = decode_cache.expand(variables['cache'], slots)

  @jax.jit
  def step(cache, inputs):
    written = []

    def record_write(next_fun, args, kwargs, context):
      result = next_fun(*args, **kwargs)
      if context.method_name == '_write_step':
        written.append(result)
      return result

    with nn.intercept_methods(record_write):
      _, mutated = module.apply({'params': variables['params'], 'cache': cache}, inputs,
                                inputs, decode=True, mutable=['cache'])
    return mutated['cache'], written[0]

  rng = np.random.default_rng(steps)
  for _ in range(steps):
    ancestry = rng.integers(0, slots, cache[decode_cache.ANCESTRY_CACHE].shape)
    cache = dict(cache, **{decode_cache.ANCESTRY_CACHE: jnp.asarray(ancestry, jnp.int32)})
    cache, attended = step(cache, normal(rng, (batch * slots, 1, embed)))
  return attended


def assert_matches_reference(target, q, key_cache, value_cache, kv_valid, bias, atol):
  lengths = decode_attention.kv_lengths_from_valid(kv_valid)
  got = kernel(target, BLOCK_K[target])(q, key_cache, value_cache, kv_valid, lengths,
                                        bias=bias)
  want = reference(q, key_cache, value_cache, kv_valid, bias=bias)
  assert got.shape == want.shape and got.dtype == q.dtype
  np.testing.assert_allclose(np.asarray(got, np.float32), np.asarray(want, np.float32),
                             atol=atol, rtol=0)
  return got


@pytest.mark.parametrize('target,n,head_dim,with_bias', [
    ('tpu', 4, 64, True), ('tpu', 1, 128, False), ('gpu', 4, 128, True),
    ('gpu', 1, 64, False)])
def test_cross_attention_equals_the_reference(target, n, head_dim, with_bias):
  q, key_cache, value_cache, valid, bias = cross_attention_case(n, head_dim, with_bias)
  got = assert_matches_reference(target, q, key_cache, value_cache, valid, bias, atol=1e-5)
  assert np.all(np.asarray(got[2]) == 0.0)  # The row with no valid key.
  assert np.abs(np.asarray(got[:2])).min() > 0.0


@pytest.mark.parametrize('target,head_dim', [
    pytest.param('tpu', 128, marks=pytest.mark.slow),  # The TPU interpreter: 20 s under load.
    ('gpu', 64)])
def test_self_attention_over_beam_histories_equals_the_reference(target, head_dim):
  """36 steps of 4 beams fill 144 of 192 entries: into the second TPU block, whose end
  lies past the cache, and the third GPU block."""
  slots, steps = 4, 36
  key_cache, value_cache, history = self_attention_cache(steps, slots, head_dim,
                                                         max_length=48)
  assert np.all(np.asarray(decode_attention.kv_lengths_from_valid(history))
                == steps * slots)
  rng = np.random.default_rng(0)
  batch, _, length = history.shape
  q = normal(rng, (batch, slots, HEADS, head_dim))
  bias = normal(rng, (batch, HEADS, slots, length))
  assert_matches_reference(target, q, key_cache, value_cache, history, bias, atol=1e-5)


@pytest.mark.parametrize('target', ['tpu', 'gpu'])
def test_bfloat16_within_bfloat16_rounding(target):
  case = cross_attention_case(4, 64, True, jnp.bfloat16)
  assert_matches_reference(target, *case, atol=2e-2)


@pytest.mark.parametrize('target,head_dim', [('tpu', 64), ('gpu', 128)])
def test_cache_entries_past_the_lengths_are_never_read(target, head_dim):
  """NaN past each row's length leaves the kernel's output that of a clean cache, while
  the reference, which multiplies every entry (0 * NaN = NaN), turns it to NaN."""
  q, key_cache, value_cache, valid, bias = cross_attention_case(4, head_dim, True)
  lengths = decode_attention.kv_lengths_from_valid(valid)
  past = np.arange(CROSS_CACHE_LENGTH)[None] >= np.asarray(lengths)[:, None]
  poisoned_keys = jnp.where(past[:, None, None, :], jnp.nan, key_cache)
  poisoned_values = jnp.where(past[:, None, :, None], jnp.nan, value_cache)
  got = kernel(target, BLOCK_K[target])(q, poisoned_keys, poisoned_values, valid, lengths,
                                        bias=bias)
  assert np.all(np.isfinite(np.asarray(got)))
  np.testing.assert_allclose(got, reference(q, key_cache, value_cache, valid, bias=bias),
                             atol=1e-5, rtol=0)
  poisoned = reference(q, poisoned_keys, poisoned_values, valid, bias=bias)
  assert np.all(np.isnan(np.asarray(poisoned[:2])))


def test_tpu_grid_steps_past_a_row_name_its_last_filled_block_again():
  """Pallas' TPU pipeline copies a block only when the index its index map names changes:
  the keys, values, validity and bias name no block past the row's last filled one."""
  q, key_cache, value_cache, valid, bias = cross_attention_case(1, 64, True)
  cache_length = 3 * BLOCK_K['tpu']
  widen = lambda x, axis: pad_axis(x, axis, cache_length)  # Past every length, invalid.
  operands = (q, widen(key_cache, 3), widen(value_cache, 2), widen(valid, 1))
  lengths = decode_attention.kv_lengths_from_valid(valid)
  jaxpr = jax.make_jaxpr(functools.partial(
      decode_attention.ragged_decode_attention, target='tpu', block_k=BLOCK_K['tpu']))(
          *operands, lengths, bias=widen(bias, 3))
  call = next(eqn for eqn in jaxpr.eqns if eqn.primitive.name == 'pallas_call')
  grid_mapping = call.params['grid_mapping']
  assert grid_mapping.grid == (len(CROSS_LENGTHS), HEADS, 3)
  # The key block's axis in the index of each operand after the queries: keys, values,
  # validity, bias.
  key_block_axis = {1: 3, 2: 2, 3: 2, 4: 3}
  named = {operand: [] for operand in key_block_axis}
  for operand, axis in key_block_axis.items():
    index_map = grid_mapping.block_mappings[operand].index_map_jaxpr
    for row, kv_block in itertools.product(range(len(CROSS_LENGTHS)), range(3)):
      index = jax.core.eval_jaxpr(index_map.jaxpr, index_map.consts, row, 1, kv_block,
                                  jax.new_ref(lengths))
      named[operand].append(int(index[axis]))
  rows_37_150_0 = [0, 0, 0, 0, 1, 1, 0, 0, 0]
  assert all(blocks == rows_37_150_0 for blocks in named.values()), named


def test_lengths_end_after_the_last_valid_entry_of_any_hypothesis():
  valid = np.zeros((3, 2, 10), bool)
  valid[0, 0, [0, 3]] = True  # Holes before the end do not shorten the row.
  valid[0, 1, 6] = True
  valid[1, :, 9] = True
  assert decode_attention.kv_lengths_from_valid(jnp.asarray(valid)).tolist() == [7, 10, 0]
  assert decode_attention.kv_lengths_from_valid(jnp.asarray(valid[:, 0])).tolist() == [4, 10, 0]


def test_tpu_key_blocks_are_whole_lane_tiles():
  q, key_cache, value_cache, valid, _ = cross_attention_case(1, 64, False)
  lengths = decode_attention.kv_lengths_from_valid(valid)
  with pytest.raises(ValueError, match='multiple of 128'):
    decode_attention.ragged_decode_attention(q, key_cache, value_cache, valid, lengths,
                                             target='tpu', block_k=100)


def abstract_step(batch: int, beams: int, head_dim: int, length: int, dtype,
                  self_attention: bool, sharding=None) -> list[jax.ShapeDtypeStruct]:
  """Shapes of a decoding step's operands: self-attention's per-beam history and bias, or
  cross-attention's per-row validity."""
  valid = (batch, beams, length) if self_attention else (batch, length)
  shapes = [((batch, beams, HEADS, head_dim), dtype), ((batch, HEADS, head_dim, length), dtype),
            ((batch, HEADS, length, head_dim), dtype), (valid, jnp.bool_), ((batch,), jnp.int32)]
  if self_attention:
    shapes.append(((batch, HEADS, beams, length), jnp.float32))
  return [jax.ShapeDtypeStruct(shape, dtype, sharding=sharding) for shape, dtype in shapes]


def step_function(target: str):
  def attend(q, key_cache, value_cache, kv_valid, kv_lengths, bias=None):
    return decode_attention.ragged_decode_attention(q, key_cache, value_cache, kv_valid,
                                                    kv_lengths, bias=bias, target=target)
  return jax.jit(attend)


def test_variants_lower_to_mosaic_for_tpus_and_to_triton_for_gpus():
  operands = abstract_step(2, 4, 64, 200, jnp.bfloat16, self_attention=True)
  tpu = jax.export.export(step_function('tpu'), platforms=['tpu'])(*operands).mlir_module()
  assert tpu.count('tpu_custom_call') == 1 and 'ragged_decode_attention_tpu' in tpu
  triton_call = '__gpu$xla.gpu.triton'
  gpu = jax.export.export(
      step_function('gpu'), platforms=['cuda'],
      disabled_checks=[jax.export.DisabledSafetyCheck.custom_call(triton_call)])(
          *operands).mlir_module()
  assert gpu.count(triton_call) == 1 and 'ragged_decode_attention_gpu' in gpu


@needs_libtpu
def test_tpu_variant_compiles_through_mosaic_for_a_v5e_chip():
  """Mosaic's own compiler (in libtpu) accepts the blocks: both head dims and dtypes, 4
  beams over a 1024-entry cache, cross-attention and self-attention with a bias, and a
  cache that ends in a partial block."""
  sharding = jax.sharding.SingleDeviceSharding(dry_run.topology_devices('v5e:1x1')[0])
  cases = [*itertools.product((64, 128), (jnp.bfloat16, jnp.float32), (False, True), (1024,)),
           (64, jnp.bfloat16, True, 1000)]
  for head_dim, dtype, self_attention, length in cases:
    operands = abstract_step(8, 4, head_dim, length, dtype, self_attention, sharding)
    compiled = step_function('tpu').trace(*operands).lower().compile()
    assert 'tpu_custom_call' in compiled.as_text()
