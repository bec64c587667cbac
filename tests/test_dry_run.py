"""--dry_run: parameter counts and per-device memory from shapes alone, and with --topology
the train step compiled for TPU chips."""

import dataclasses
import functools
import itertools
import json
import re

import gin
import jax
import jax.numpy as jnp
import pytest

from t5x_mt.config import configurables
from t5x_mt.training import dry_run as dry_runs
from t5x_mt.training import memory_plan
from t5x_mt.training import run_config
from t5x_mt.config import gin_utils
from t5x_mt import kernels
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import partitioning
from t5x_mt.runs import run_vocabulary
from t5x_mt.core.errors import UserError
from t5x_mt.pretrained import huggingface
from test_import_checkpoint import CHECKPOINTS
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process


def parse(model_file: str, *bindings: str) -> None:
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/demo.gin', model_file], list(bindings))


def dry_run(model_file: str, *bindings: str) -> dict:
  parse(model_file, *bindings)
  return dry_runs.run_report(configurables.run_spec(), vocab_size=128000)


def test_volctrans_2b_has_2_1b_parameters():
  parse('gin/models/volctrans_2b.gin')
  parameters = models.count_params(configurables.model_config(128000))
  assert parameters == pytest.approx(2.1e9, rel=0.05)


def test_transf_deep_parameters_follow_the_architecture():
  """24+12 layers of d 1024 / FFN 4096 with one shared 128k table: 0.636B.

  The paper reports 0.59B; the layers alone are 0.504B and the table 0.131B, so no
  choice within the stated architecture reaches 0.59B (it would need a ~85k vocabulary).
  """
  d, ffn, vocab = 1024, 4096, 128000
  attention = 4 * (d * d + d)
  mlp = d * ffn + ffn + ffn * d + d
  encoder_layer = attention + mlp + 2 * 2 * d
  decoder_layer = 2 * attention + mlp + 3 * 2 * d
  expected = (24 * encoder_layer + 12 * decoder_layer + vocab * d + 2 * 512 * d + 2 * 2 * d)
  parse('gin/models/transf_deep.gin')
  parameters = models.count_params(configurables.model_config(128000))
  assert parameters == expected
  assert parameters == pytest.approx(0.636e9, rel=0.005)


def test_memory_per_device_shrinks_with_model_parallelism():
  single = dry_run('gin/models/base.gin', 'MESH_SHAPE = (1, 1)')
  sharded = dry_run('gin/models/base.gin', 'MESH_SHAPE = (2, 4)')
  assert single['vocab_size'] == 128000
  assert single['param_bytes_per_device'] == 4 * single['parameters']
  # Adam keeps two fp32 moments per parameter (plus scalar counts).
  assert single['optimizer_bytes_per_device'] == pytest.approx(
      2 * single['param_bytes_per_device'], rel=1e-4)
  # Heads, FFN units and vocabulary rows split 4 ways; embed-sized vectors do not.
  ratio = sharded['param_bytes_per_device'] / single['param_bytes_per_device']
  assert 0.25 < ratio < 0.26


def test_fsdp_and_a_hybrid_mesh_shard_the_state_without_the_devices():
  single = dry_run('gin/models/base.gin', 'MESH_SHAPE = (1, 1, 1)')
  fsdp = dry_run('gin/models/base.gin', 'MESH_SHAPE = (1, 64, 1)')
  # Two slices of (1, 32, 1) joined along 'fsdp': the same 64-way split.
  hybrid = dry_run('gin/models/base.gin', 'MESH_SHAPE = (1, 32, 1)',
                   'DCN_MESH_SHAPE = (1, 2, 1)')
  assert fsdp['mesh_shape'] == hybrid['mesh_shape'] == [1, 64, 1]
  for figure in ('param_bytes_per_device', 'optimizer_bytes_per_device'):
    assert hybrid[figure] == fsdp[figure]
    # Every matrix splits along 'embed' (512 = 64 x 8); the few vectors without an
    # 'embed' axis (biases of FFN units and heads) stay whole.
    assert 1 / 64 < fsdp[figure] / single[figure] < 1.05 / 64


def test_without_a_built_vocabulary_the_configured_size_is_used(tmp_path):
  # VOCAB_SIZE is a macro: its value, not the reference, sizes the embedding.
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/adapters/demo.gin'],
                      [f"VOCABULARY_PATH = '{tmp_path / 'missing.model'}'"])
  report = dry_runs.run_report(configurables.run_spec())
  assert report['vocab_size'] == run_vocabulary.padded_vocab_size(4000)
  # The demo's adapters: 7 targets x 6 layers, bottlenecks 4 x 256 + 2 x 128 + 64.
  base = models.count_params(network.TransformerConfig(
      vocab_size=report['vocab_size'], emb_dim=256, num_heads=4, head_dim=64, mlp_dim=1024,
      num_encoder_layers=3, num_decoder_layers=3, max_length=256))
  per_adapter = lambda b: 2 * 256 + 256 * b + b + b * 256 + 256
  adapters_total = 6 * sum(per_adapter(b) for b in (256, 256, 256, 256, 128, 128, 64))
  assert report['parameters'] == base + adapters_total


def test_dry_run_follows_the_run_axis_rules():
  """No devices needed for any MESH_SHAPE; parameters shard as the run's rules say."""
  unsharded_embed = ("partitioning.logical_axis_rules.rules = [('batch', ('data', 'fsdp')), "
                     "('embed', None)]")
  sharded = dry_run('gin/models/base.gin', 'MESH_SHAPE = (1, 8, 1)')
  replicated = dry_run('gin/models/base.gin', 'MESH_SHAPE = (1, 8, 1)', unsharded_embed)
  assert sharded['param_bytes_per_device'] < replicated['param_bytes_per_device'] / 7
  assert replicated['param_bytes_per_device'] == 4 * replicated['parameters']


# The memory plan: what full and LoRA training hold, and the mesh each topology needs.
PLAN_MODEL = network.TransformerConfig(vocab_size=256, emb_dim=32, num_heads=2, head_dim=16,
                                       mlp_dim=64, num_encoder_layers=2, num_decoder_layers=2,
                                       max_length=64)
PLAN_TRAIN = run_config.TrainConfig(model_dir='/tmp/t5x_mt/unused', train_steps=1,
                                    batch_size=8, mixture_or_task_name='unused',
                                    inputs_length=16, targets_length=16)


@functools.cache
def footprint(**changes) -> memory_plan.Footprint:
  return dry_runs.training_footprint(dataclasses.replace(PLAN_MODEL, **changes), PLAN_TRAIN)


def test_the_footprint_counts_adamw_and_gradients_for_what_trains_alone():
  full = footprint()
  count = models.count_params(PLAN_MODEL)
  assert full.param_bytes == full.gradient_bytes == full.gathered_bytes == 4 * count
  # Two float32 moments per parameter, and the optimizer's step counts.
  assert 0 < full.optimizer_bytes - 2 * 4 * count <= 16
  # LoRA of rank 4 on every projection: 2 x 32 x 4 on each 32 x 32 attention projection
  # (4 a sublayer), 4 x (32 + 64) on each MLP projection; 2 encoder layers of one
  # attention, 2 decoder layers of two. Only these train: gradients and moments for them.
  lora = footprint(lora_rank=4)
  lora_count = 2 * (4 * 256 + 2 * 384) + 2 * (8 * 256 + 2 * 384)
  assert lora_count == 9216
  assert lora.param_bytes == 4 * (count + lora_count)
  assert lora.gradient_bytes == 4 * lora_count
  assert 0 < lora.optimizer_bytes - 2 * 4 * lora_count <= 16


def test_activations_follow_the_vocabulary_and_the_remat_policy():
  """The backward pass keeps the logits once: a vocabulary 256 pieces larger adds
  targets_length x 256 float32 to each row. Remat of every layer keeps its inputs alone."""
  full = footprint()
  larger = footprint(vocab_size=512)
  assert larger.activation_bytes_per_row - full.activation_bytes_per_row == 16 * 256 * 4
  remat = footprint(remat_policy='full')
  assert remat.activation_bytes_per_row < 0.25 * full.activation_bytes_per_row
  assert full.activation_fixed_bytes < 0.01 * full.activation_bytes_per_row


def test_the_dry_run_of_an_imported_run_plans_full_and_lora_training(tmp_path, monkeypatch,
                                                                     capsys):
  """The fine-tuning recipe on a tiny imported NLLB-200 (d 16, 2+2 layers), with its
  LORA_RANK: one line per topology for each way of training."""
  imported = tmp_path / 'nllb'
  huggingface.import_checkpoint(str(CHECKPOINTS / 'nllb'), str(imported))
  code, out, err = run_in_process(
      'train.py', ['--gin_file=gin/runs/finetune/pretrained.gin',
                   f'--gin_file={imported}/config.gin', f"--gin.IMPORTED='{imported}'",
                   '--dry_run', '--gin.LORA_RANK=4'],
      monkeypatch, capsys)
  assert code == 0, err
  plan = out[out.index('memory plan at '):].splitlines()
  assert plan[0].startswith('memory plan at BATCH_SIZE 8 (rows of 128 + 128 tokens), '
                            'NUM_MICROBATCHES 1: per device, params + optimizer state + '
                            'gradients + activations within 90% of its memory')
  parameters = models.count_params(dataclasses.replace(
      dry_runs.run_model_config(configurables.run_spec()), lora_rank=0))
  # 4 x (16 + 16) on each attention projection, 4 x (16 + 32) on each MLP projection.
  lora_count = 2 * (4 * 128 + 2 * 192) + 2 * (8 * 128 + 2 * 192)
  assert plan[2].startswith(f'full: {parameters:,} of {parameters:,} parameters train')
  assert plan[7].startswith(f'LoRA r=4 (as LORA_RANK sets): {lora_count:,} of '
                            f'{parameters + lora_count:,} parameters train')
  for first in (3, 8):
    assert [line.split(':')[0] for line in plan[first:first + 4]] == [
        '  ' + topology.name for topology in memory_plan.TOPOLOGIES]
    assert plan[first].startswith('  1 x H100 80GB: mesh (data 1, fsdp 1): params ')
    assert plan[first + 1].startswith('  8 x A100 40GB: mesh (data 8, fsdp 1): params ')
    assert plan[first + 3] == ('  TPU v5e-16: nothing fits: BATCH_SIZE 8 does not split over '
                               '16 devices x NUM_MICROBATCHES 1')


# --dry_run --topology: the real train step compiled for TPU chips on this CPU machine.
needs_libtpu = pytest.mark.skipif(
    dry_runs.libtpu_library() is None,
    reason=f'libtpu is not installed (.ci/run installs it in {dry_runs.LIBTPU_DIR}: pip '
    f'install --no-deps --target {dry_runs.LIBTPU_DIR} "{dry_runs.libtpu_requirement()}")')

SMALL_MODEL = ('network.TransformerConfig.emb_dim = 512', 'network.TransformerConfig.num_heads = 2',
               'network.TransformerConfig.head_dim = 32', 'network.TransformerConfig.mlp_dim = 128',
               'network.TransformerConfig.num_encoder_layers = 1',
               'network.TransformerConfig.num_decoder_layers = 1',
               'INPUTS_LENGTH = 16', 'TARGETS_LENGTH = 16',
               # No dropout: its random bits take a quarter of the TPU compiler's time, and
               # none of these tests asks for them (the base model's step keeps its dropout).
               'network.TransformerConfig.dropout_rate = 0.0')


@functools.cache
def compiled_report(topology: str, *bindings: str) -> dict:
  parse('gin/models/tiny.gin', *SMALL_MODEL, *bindings)
  return dry_runs.compile_report(configurables.run_spec(), topology, vocab_size=256)


@pytest.mark.slow
@needs_libtpu
def test_compiled_flops_double_with_the_batch():
  small = compiled_report('v5e:2x2', 'MESH_SHAPE = (1, 4, 1)', 'BATCH_SIZE = 8')
  large = compiled_report('v5e:2x2', 'MESH_SHAPE = (1, 4, 1)', 'BATCH_SIZE = 16')
  assert (small['chip'], small['chips'], small['chip_memory_bytes']) == ('TPU v5 lite', 4, 2**34)
  assert small['compiled_bytes_per_chip'] > small['argument_bytes_per_chip'] > 0
  assert small['flops_per_step'] == 4 * small['flops_per_chip'] > 0
  assert not small['flops_count_scanned_layers_once']
  assert large['flops_per_chip'] / small['flops_per_chip'] == pytest.approx(2.0, rel=0.05)


@pytest.mark.slow
@needs_libtpu
def test_fsdp_shards_the_compiled_state_over_the_chips():
  """Parameters and Adam's moments, the bulk of the step's arguments, split 4 ways (an
  'embed' of 512 keeps each chip's 128 wide, a whole TPU tile)."""
  fsdp = compiled_report('v5e:2x2', 'MESH_SHAPE = (1, 4, 1)', 'BATCH_SIZE = 8')
  data = compiled_report('v5e:2x2', 'MESH_SHAPE = (4, 1, 1)', 'BATCH_SIZE = 8')
  assert data['param_bytes_per_device'] / fsdp['param_bytes_per_device'] > 3.9
  assert fsdp['argument_bytes_per_chip'] < 0.27 * data['argument_bytes_per_chip']


@pytest.mark.slow
@needs_libtpu
def test_the_plan_compiles_its_tpu_meshes_for_their_slice():
  """--compile_plan: each way of training compiled under its chosen mesh for a v5e-8's
  chips; each chip holds at least the shares of parameters and optimizer state the plan
  counts."""
  v5e_8 = memory_plan.TOPOLOGIES[2]
  trainings = dry_runs.fine_tuning_plan(dataclasses.replace(PLAN_MODEL, dropout_rate=0.0),
                                        PLAN_TRAIN, compile_tpu=True, topologies=(v5e_8,))
  for training in trainings:
    planned = training.plans[0].device_bytes
    compiled = training.compiled_bytes['TPU v5e-8']
    assert planned.params + planned.optimizer <= compiled < v5e_8.device_bytes
  lines = dry_runs.describe_fine_tuning_plan(trainings, PLAN_TRAIN, 0).splitlines()
  assert re.search(r'; compiled for v5e:2x4: \S+ MiB per chip of 16.00 GiB$', lines[3])
  assert re.search(r'; compiled for v5e:2x4: \S+ MiB per chip of 16.00 GiB$', lines[5])


@needs_libtpu
def test_a_v4_chip_is_one_device():
  """libtpu describes v4's two cores per chip; JAX runs a chip as one device (megacore)."""
  devices = dry_runs.topology_devices('v4:2x2x1')
  assert len(devices) == 4 and {device.device_kind for device in devices} == {'TPU v4'}


def test_cloud_tpu_accelerator_types_name_their_slice_shapes():
  """Rows of Cloud TPU's tables: v4 and v5p count TensorCores (two a chip), v5e
  ('v5litepod') and v6e count chips; libtpu's own names pass through."""
  expected = {'v4-8': 'v4:2x2x1', 'v4-32': 'v4:2x2x4', 'v4-128': 'v4:4x4x4',
              'v4-1536': 'v4:8x8x12', 'v4-4096': 'v4:8x16x16', 'v5p-8': 'v5p:2x2x1',
              'v5p-128': 'v5p:4x4x4', 'v5p-12288': 'v5p:16x16x24', 'v5litepod-1': 'v5e:1x1',
              'v5litepod-8': 'v5e:2x4', 'v5litepod-16': 'v5e:4x4', 'v5litepod-256': 'v5e:16x16',
              'v6e-8': 'v6e:2x4', 'v6e-256': 'v6e:16x16', 'v4:4x4x8': 'v4:4x4x8'}
  assert {name: dry_runs.libtpu_topology(name) for name in expected} == expected
  assert len(dry_runs.ACCELERATOR_TOPOLOGIES) == 40
  assert 'v4-4' not in dry_runs.ACCELERATOR_TOPOLOGIES  # Half a chip.


@needs_libtpu
def test_every_accelerator_type_is_a_topology_libtpu_knows_with_its_chips():
  for name in dry_runs.ACCELERATOR_TOPOLOGIES:
    generation, count = name.rsplit('-', 1)
    devices = dry_runs.topology_devices(name)
    assert len(devices) == int(count) // (2 if generation in ('v4', 'v5p') else 1), name
  assert dry_runs.topology_devices('v4-32')[0].device_kind == 'TPU v4'
  assert dry_runs.topology_devices('v6e-8')[0].device_kind == 'TPU v6 lite'


@pytest.mark.parametrize('topology,accepted', [
    ('v4-48', 'v4-8, v4-16, v4-32, v4-64, v4-128, v4-256, v4-512, v4-1024, v4-1536, v4-2048, '
              'v4-4096'),
    ('tpu-32', 'v4-32, v5p-128, v5litepod-16, v6e-8'),
])
def test_a_bad_topology_name_is_one_line_listing_the_accepted_forms(topology, accepted,
                                                                    monkeypatch, capsys):
  code, out, err = run_in_process(
      'train.py', ['--gin_file=gin/runs/demo.gin', '--dry_run', f'--topology={topology}'],
      monkeypatch, capsys)
  assert (code, out) == (2, '')
  assert error_lines(err) == [
      f'error: --topology={topology}: not a TPU topology; name a Cloud TPU accelerator type '
      f"({accepted}) or libtpu's <chip>:<chips per axis> (e.g. v5e:2x2, v5e:16x16, v4:4x4x8, "
      'v5p:4x4x4, v6e:8x8)']


@needs_libtpu
def test_an_unknown_topology_is_named_with_examples():
  with pytest.raises(UserError, match=r"--topology=v9z:2x2: libtpu does not know .* v5e:16x16"):
    dry_runs.topology_devices('v9z:2x2')


@needs_libtpu
def test_mesh_shape_must_cover_the_topology_chips():
  with pytest.raises(UserError, match=r'MESH_SHAPE under --topology=v5e:2x2 \(4 chips\): '
                     r'\(1, 2, 4\) does not cover the 4 devices'):
    compiled_report('v5e:2x2', 'MESH_SHAPE = (1, 2, 4)')


def test_a_hybrid_mesh_is_compiled_one_slice_at_a_time():
  """DCN_MESH_SHAPE names several slices; --topology compiles one, and says so."""
  with pytest.raises(UserError, match=r'--topology=v5e:2x2: compiles one slice, not the '
                     'hybrid mesh of DCN_MESH_SHAPE'):
    compiled_report('v5e:2x2', 'MESH_SHAPE = (1, 4, 1)', 'DCN_MESH_SHAPE = (2, 1, 1)')


def test_without_libtpu_the_error_says_how_to_install_it(monkeypatch, tmp_path):
  monkeypatch.delenv('TPU_LIBRARY_PATH', raising=False)
  monkeypatch.setattr(dry_runs, 'LIBTPU_DIR', tmp_path)
  monkeypatch.setattr(dry_runs.importlib.util, 'find_spec', lambda name: None)
  with pytest.raises(UserError, match=rf'--topology=v5e:2x2: needs libtpu.* --target '
                     rf'{tmp_path} "libtpu==\S+"$'):
    dry_runs.topology_devices('v5e:2x2')


@pytest.mark.slow
@needs_libtpu
def test_a_model_too_big_for_the_chip_prints_its_bytes_then_exits_2(monkeypatch, capsys):
  """An 8M-piece vocabulary (1.0B parameters, replicated) on a v5litepod-4 slice, named as
  Cloud TPU names it: the TPU compiler refuses it, yet the figures come out, then one line
  says by how much it misses the chip's 16 GiB."""
  code, out, err = run_in_process(
      'train.py', ['--gin_file=gin/runs/demo.gin', '--dry_run', '--topology=v5litepod-4',
                   '--vocab_size=8000000', '--gin.MESH_SHAPE=(4, 1, 1)', '--gin.BATCH_SIZE=8',
                   '--gin.network.TransformerConfig.emb_dim=128',
                   *(f'--gin.{binding.replace(" ", "")}' for binding in SMALL_MODEL[4:])],
      monkeypatch, capsys)
  assert code == 2, err
  assert '}' in out, err[-3000:]
  report = json.loads(out[:out.rindex('}') + 1])
  assert (report['libtpu_topology'], report['chips']) == ('v5e:2x2', 4)
  missing = (report['compiled_bytes_per_chip'] - 2**34) / 2**30
  assert missing > 1
  assert err.strip().splitlines()[-1] == (
      f"error: --topology=v5litepod-4: the train step needs "
      f"{report['compiled_bytes_per_chip'] / 2**30:.2f} GiB per chip, {missing:.2f} GiB more "
      "than the TPU v5 lite chip's 16 GiB; try remat_policy, NUM_MICROBATCHES, "
      "loss_chunk_length or a larger 'fsdp' axis in MESH_SHAPE")


@pytest.mark.slow
@needs_libtpu
def test_the_base_models_train_step_compiles_for_tpu_v5e_with_the_flash_kernel():
  """gin/models/base.gin, batch 4 x 256, over four v5e chips (data parallel): 'auto' puts
  Mosaic's flash attention in every attention of the compiled step, under shard_map.

  One row per chip and a 256-piece vocabulary: the TPU compiler's time grows with both,
  and neither changes which attention the step computes."""
  parse('gin/models/base.gin', 'BATCH_SIZE = 4', 'INPUTS_LENGTH = 256',
        'TARGETS_LENGTH = 256', 'MESH_SHAPE = (1, 4, 1)')
  spec = configurables.run_spec()
  devices = dry_runs.topology_devices('v5e:2x2')
  mesh = partitioning.create_mesh((1, 4, 1), devices)
  compiled = dry_runs.compile_train_step(dry_runs.run_model_config(spec, 256), spec.train,
                                         mesh, partitioning.logical_axis_rules())
  program = compiled.as_text()
  # Encoder self-, decoder self- and cross-attention: forward, dK/dV and dQ kernels each (a
  # scanned stack's layers share one loop body), on each chip's row; and no product or
  # exponential of a [row, heads, 256, 256] score matrix (or of one with the row squeezed
  # out, as XLA compiles some of them), which XLA's attention computes.
  assert program.count('custom_call_target="tpu_custom_call"') == 3 * 3
  assert not re.search(r'f32\[(1,)?8,256,256\]\S* (exponential|convolution|dot)\(', program)


@pytest.mark.slow
@needs_libtpu
def test_the_tpu_flash_kernel_compiles_for_v5e_forward_and_backward():
  """Mosaic's compiler takes the kernel's blocks at head_dim 64 and 128, lengths 128 to
  2048 (300: padded within a block), in bfloat16 and float32 (one row of two heads: the
  blocks are the same for any number, and the compiler's time grows with them). Each
  pair of head_dim, length and dtype is compiled once: a block choice that failed would
  fail for a pair."""
  device = dry_runs.topology_devices('v5e:1x1')[0]
  sharding = jax.sharding.SingleDeviceSharding(device)

  def gradients(q, k, v, segments, bias):
    def total(q, k, v, bias):
      return kernels.attention(q, k, v, q_segment_ids=segments, kv_segment_ids=segments,
                               bias=bias, causal=True).astype(jnp.float32).sum()
    return jax.grad(total, argnums=(0, 1, 2, 3))(q, k, v, bias)

  for (head_dim, length), dtype in zip(itertools.product((64, 128), (128, 300, 2048)),
                                      itertools.cycle((jnp.bfloat16, jnp.float32))):
    rows = jax.ShapeDtypeStruct((1, length, 2, head_dim), dtype, sharding=sharding)
    compiled = jax.jit(gradients).trace(
        rows, rows, rows, jax.ShapeDtypeStruct((1, length), jnp.int32, sharding=sharding),
        jax.ShapeDtypeStruct((1, 2, length, length), jnp.float32, sharding=sharding)
    ).lower().compile()
    assert compiled.as_text().count('custom_call_target="tpu_custom_call"') == 3, (
        head_dim, length, dtype)
