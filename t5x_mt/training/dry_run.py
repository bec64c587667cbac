"""A run's size and per-device memory, from shapes alone (`launch/train.py --dry_run`), and
its real train step compiled ahead of time for a TPU topology (`--topology`, named as
libtpu names it or as a Cloud TPU accelerator type).

Compiling for a TPU needs libtpu but no TPU: libtpu describes any topology's chips to XLA.
libtpu stays out of the CPU set-up because loading it makes every JAX command print its
start-up errors; `.ci/run` installs it apart, in LIBTPU_DIR, where only `--topology`
looks for it (docs/dry_run.md).
"""

from collections.abc import Sequence
import contextlib
import dataclasses
import importlib.metadata
import importlib.util
import os
import pathlib
import sys
from typing import Any

import flax.linen as nn
import jax
from jax.experimental import topologies
import jax.numpy as jnp
from jax.sharding import PartitionSpec
import numpy as np
import tensorflow as tf

from t5x_mt.model import lora
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import partitioning
from t5x_mt.training import run_config
from t5x_mt.runs import run_vocabulary
from t5x_mt.training import trainer
from t5x_mt.core.errors import UserError

GIB = 2**30
# High-bandwidth memory per chip by the kind libtpu names (compile-only devices do not
# report it): v4, v5e, v5p, v6e.
CHIP_MEMORY_BYTES = {'TPU v4': 32 * GIB, 'TPU v5 lite': 16 * GIB, 'TPU v5': 95 * GIB,
                     'TPU v6 lite': 32 * GIB}
TOPOLOGY_EXAMPLES = 'v5e:2x2, v5e:16x16, v4:4x4x8, v5p:4x4x4, v6e:8x8'
# Cloud TPU names a slice by generation and size (`gcloud compute tpus tpu-vm create
# --accelerator-type=v4-32`, launch/tpu_pod.sh): v4 and v5p count TensorCores, two a chip,
# v5e ('v5litepod') and v6e count chips. Each generation's slice shapes by chip count, as
# Cloud TPU's tables of slices give them (docs/dry_run.md).
_TORUS_SHAPES = {1: '1x1', 4: '2x2', 8: '2x4', 16: '4x4', 32: '4x8', 64: '8x8', 128: '8x16',
                 256: '16x16'}
_CUBE_SHAPES = {4: '2x2x1', 8: '2x2x2', 16: '2x2x4', 32: '2x4x4', 64: '4x4x4', 128: '4x4x8',
                256: '4x8x8', 512: '8x8x8', 768: '8x8x12', 1024: '8x8x16', 2048: '8x16x16'}
# Accelerator type prefix: (libtpu's chip name, units counted per chip, shapes by chips).
_GENERATIONS = {
    'v4': ('v4', 2, _CUBE_SHAPES),
    'v5p': ('v5p', 2, {**_CUBE_SHAPES, 4096: '16x16x16', 6144: '16x16x24'}),
    'v5litepod': ('v5e', 1, _TORUS_SHAPES),
    'v6e': ('v6e', 1, _TORUS_SHAPES),
}
# Cloud TPU accelerator type -> libtpu topology, e.g. 'v4-32' -> 'v4:2x2x4' (16 chips).
ACCELERATOR_TOPOLOGIES = {
    f'{prefix}-{chips * units_per_chip}': f'{chip}:{shape}'
    for prefix, (chip, units_per_chip, shapes) in _GENERATIONS.items()
    for chips, shape in shapes.items()}
ACCELERATOR_TYPE_EXAMPLES = 'v4-32, v5p-128, v5litepod-16, v6e-8'
# Where libtpu lives apart from the importable packages (`pip install --target`).
LIBTPU_DIR = pathlib.Path(sys.prefix) / 'libtpu'
# Off a TPU VM libtpu would ask the cloud metadata server for the slice it runs on (30
# tries per key when TPU_ACCELERATOR_TYPE alone is set) and print errors; these answer it.
# With no TPU to guard, several processes may compile at once (libtpu's lock file would
# refuse all but the first).
_OFF_TPU_VM_ENVIRONMENT = {'TPU_SKIP_MDS_QUERY': '1', 'TPU_ACCELERATOR_TYPE': 'v5litepod-4',
                           'TPU_WORKER_HOSTNAMES': 'localhost',
                           'ALLOW_MULTIPLE_LIBTPU_LOAD': '1'}


def _shard_bytes(abstract_tree: Any, mesh_sizes: dict[str, int], rules) -> int:
  """Bytes one device holds of a boxed abstract tree under the given mesh axis sizes."""
  specs = nn.get_partition_spec(abstract_tree)
  mesh_specs = nn.logical_to_mesh(specs, rules)
  total = 0
  for leaf, spec in zip(jax.tree_util.tree_leaves(nn.unbox(abstract_tree)),
                        jax.tree_util.tree_leaves(
                            mesh_specs, is_leaf=lambda x: isinstance(x, PartitionSpec))):
    shape = list(leaf.shape)
    for dim, axes in enumerate(tuple(spec)[:len(shape)]):
      for axis in (axes if isinstance(axes, tuple) else (axes,)):
        if axis is not None:
          shape[dim] = -(-shape[dim] // mesh_sizes[axis])
    total += int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize
  return total


def memory_report(config: network.TransformerConfig, mesh_shape: Sequence[int],
                  inputs_length: int, targets_length: int,
                  rules: partitioning.LogicalRules | None = None) -> dict[str, Any]:
  """Parameter count and the bytes of parameters and optimizer state per device.

  Nothing is allocated: shapes come from `jax.eval_shape`.
  """
  model = models.TranslationModel(config)
  optimizer = trainer.make_optimizer(with_lora=bool(config.lora_rank))
  abstract = jax.eval_shape(
      lambda rng: trainer.init_train_state(model, optimizer, rng, inputs_length, targets_length),
      jax.random.PRNGKey(0))
  mesh_sizes = (partitioning.mesh_axis_sizes(mesh_shape, jax.device_count())
                if -1 in mesh_shape else partitioning.mesh_axis_sizes(
                    mesh_shape, int(np.prod(mesh_shape))))
  rules = rules or partitioning.logical_axis_rules()
  lora_parameters, parameters = lora.counts(nn.unbox(abstract.params))
  return {
      'parameters': parameters,
      # With LoRA only its matrices train (the base is frozen); otherwise every parameter.
      'trainable_parameters': lora_parameters if config.lora_rank else parameters,
      'vocab_size': config.vocab_size,
      'mesh_shape': list(mesh_sizes.values()),
      'param_bytes_per_device': _shard_bytes(abstract.params, mesh_sizes, rules),
      'optimizer_bytes_per_device': _shard_bytes(abstract.opt_state, mesh_sizes, rules),
  }


def run_model_config(spec: run_config.RunSpec,
                     vocab_size: int | None = None) -> network.TransformerConfig:
  """The run's model, its vocabulary of `vocab_size` pieces if given, else of the run's
  vocabulary file if it exists, else of the size it would be built with."""
  if vocab_size is None:
    if tf.io.gfile.exists(spec.data.vocabulary_path):
      vocab_size = run_vocabulary.num_pieces(
          tf.io.gfile.GFile(spec.data.vocabulary_path, 'rb').read())
    else:
      vocab_size = (spec.vocabulary or run_vocabulary.VocabularyConfig()).vocab_size
  return dataclasses.replace(spec.model,
                             vocab_size=run_vocabulary.padded_vocab_size(vocab_size))


def _whole_mesh_shape(train: run_config.TrainConfig) -> Sequence[int]:
  """MESH_SHAPE, or with DCN_MESH_SHAPE the hybrid mesh's sizes: per axis, a slice's
  times the slices along it (both without -1, as no devices are there to fill it)."""
  if train.dcn_mesh_shape is None:
    return train.mesh_shape
  if -1 in train.mesh_shape or -1 in train.dcn_mesh_shape:
    raise UserError('DCN_MESH_SHAPE: the dry run of a hybrid mesh needs MESH_SHAPE and '
                    'DCN_MESH_SHAPE without -1')
  within, across = (partitioning.mesh_axis_sizes(shape, int(np.prod(shape)), setting)
                    for shape, setting in ((train.mesh_shape, 'MESH_SHAPE'),
                                           (train.dcn_mesh_shape, 'DCN_MESH_SHAPE')))
  return [within[axis] * across[axis] for axis in partitioning.MESH_AXES]


def run_report(spec: run_config.RunSpec, vocab_size: int | None = None) -> dict[str, Any]:
  """`memory_report` of a configured run (its model as `run_model_config` sizes it)."""
  return memory_report(run_model_config(spec, vocab_size), _whole_mesh_shape(spec.train),
                       spec.train.inputs_length, spec.train.targets_length,
                       partitioning.logical_axis_rules(spec.axis_rules))


def libtpu_requirement() -> str:
  """The libtpu release that `jax[tpu]` of the installed JAX pins, e.g. 'libtpu==0.0.42.*'."""
  return next(requirement.split(';')[0].strip()
              for requirement in importlib.metadata.requires('jax')
              if requirement.startswith('libtpu'))


def libtpu_library() -> str | None:
  """The libtpu.so a topology loads: TPU_LIBRARY_PATH, the `libtpu` package's (jax[tpu])
  or the one installed apart in LIBTPU_DIR; None when there is none."""
  if os.environ.get('TPU_LIBRARY_PATH'):
    return os.environ['TPU_LIBRARY_PATH']
  package = importlib.util.find_spec('libtpu')
  folders = [*(package.submodule_search_locations or [] if package else []),
             LIBTPU_DIR / 'libtpu']
  return next((str(library) for library in (pathlib.Path(folder) / 'libtpu.so'
                                            for folder in folders) if library.is_file()), None)


@contextlib.contextmanager
def _libtpu_loadable(flag: str):
  """Lets JAX load libtpu within, and off a TPU VM keeps libtpu from probing for one
  (settings of the user's environment win). The variables go after: processes this one
  starts keep to their own devices."""
  library = libtpu_library()
  if library is None:
    raise UserError(f'{flag}: needs libtpu, which is not installed; install it apart from '
                    f'the CPU packages: pip install --no-deps --target {LIBTPU_DIR} '
                    f'"{libtpu_requirement()}"')
  settings = dict(_OFF_TPU_VM_ENVIRONMENT) if jax.default_backend() != 'tpu' else {}
  settings['TPU_LIBRARY_PATH'] = library
  added = {name: value for name, value in settings.items() if name not in os.environ}
  os.environ.update(added)
  try:
    yield
  finally:
    for name in added:
      del os.environ[name]


def libtpu_topology(topology: str) -> str:
  """libtpu's name of a TPU topology given as libtpu names it ('v5e:16x16', returned as
  is) or as a Cloud TPU accelerator type ('v4-32' -> 'v4:2x2x4', 'v5litepod-16' ->
  'v5e:4x4')."""
  if ':' in topology:
    return topology
  if topology in ACCELERATOR_TOPOLOGIES:
    return ACCELERATOR_TOPOLOGIES[topology]
  generation = topology.rpartition('-')[0]
  accepted = (', '.join(name for name in ACCELERATOR_TOPOLOGIES
                        if name.rpartition('-')[0] == generation)
              if generation in _GENERATIONS else ACCELERATOR_TYPE_EXAMPLES)
  raise UserError(f'--topology={topology}: not a TPU topology; name a Cloud TPU accelerator '
                  f"type ({accepted}) or libtpu's <chip>:<chips per axis> (e.g. "
                  f'{TOPOLOGY_EXAMPLES})')


def topology_devices(topology: str) -> list[jax.Device]:
  """Compile-only devices of a TPU topology such as 'v5e:16x16' or 'v4-32'
  (`libtpu_topology`), one per chip as JAX runs them (a v4 chip's two cores form one
  device, megacore)."""
  flag = f'--topology={topology}'
  name = libtpu_topology(topology)
  # libtpu's hosts are 2x2x1 chips unless told otherwise, which a single chip is not.
  options = {'chips_per_host_bounds': (1, 1, 1)} if name.endswith(':1x1') else {}
  with _libtpu_loadable(flag):
    try:
      devices = topologies.get_topology_desc(name, 'tpu', **options).devices
      if any(device.core_on_chip for device in devices):
        devices = topologies.get_topology_desc(name, 'tpu', chip_config_name='megacore',
                                               **options).devices
    except jax.errors.JaxRuntimeError as error:
      reason = str(error).splitlines()[0]
      raise UserError(f'{flag}: libtpu does not know this topology ({reason}); name one as '
                      f'<chip>:<chips per axis>, e.g. {TOPOLOGY_EXAMPLES}, or as a Cloud '
                      f'TPU accelerator type, e.g. {ACCELERATOR_TYPE_EXAMPLES}') from None
  return list(devices)


def _abstract_batch(train: run_config.TrainConfig) -> models.Batch:
  """Shapes and dtypes of one global training batch: the model's inputs and loss weights."""
  batch = jax.eval_shape(lambda: models.dummy_batch(train.batch_size, train.inputs_length,
                                                    train.targets_length))
  return dict(batch, decoder_loss_weights=batch['decoder_target_tokens'])


def compile_train_step(config: network.TransformerConfig, train: run_config.TrainConfig,
                       mesh: jax.sharding.Mesh,
                       rules: partitioning.LogicalRules) -> jax.stages.Compiled:
  """The run's train step (`trainer.make_train_step` under the run's shardings), compiled
  for `mesh`'s devices from abstract state and batch: nothing is allocated."""
  partitioning.check_batch_divisible(train.batch_size, mesh)
  trainer.check_microbatches(train.batch_size, train.num_microbatches,
                             partitioning.batch_shards(mesh))
  model = models.TranslationModel(config)
  optimizer = train.make_optimizer(config)
  step = trainer.make_train_step(model, optimizer, direction_ids=(),
                                 label_smoothing=train.label_smoothing,
                                 num_microbatches=train.num_microbatches,
                                 loss_chunk_length=train.loss_chunk_length)
  rng = jax.ShapeDtypeStruct((2,), jnp.uint32)  # A jax.random.PRNGKey.
  with partitioning.activation_sharding(mesh, rules):
    state = jax.eval_shape(
        lambda key: trainer.init_train_state(model, optimizer, key, train.inputs_length,
                                             train.targets_length), rng)
  shardings = partitioning.logical_to_shardings(state, mesh, rules)
  state = nn.unbox(state)  # Outside the rules: unboxing there would constrain shardings.
  with partitioning.activation_sharding(mesh, rules):
    lowered = trainer.sharded_train_step(step, shardings, mesh).lower(
        state, _abstract_batch(train), rng, None)
  try:
    return lowered.compile()
  except jax.errors.JaxRuntimeError as error:
    if not str(error).startswith('RESOURCE_EXHAUSTED'):
      raise
    # Too big for the chip: compiled again with the TPU compiler's out-of-memory error
    # off, so that its bytes can still be reported (check_fits refuses it).
    return lowered.compile(compiler_options={'xla_tpu_no_crash_on_oom': True})


def compile_report(spec: run_config.RunSpec, topology: str,
                   vocab_size: int | None = None) -> dict[str, Any]:
  """`run_report` under MESH_SHAPE over the chips of TPU `topology`, plus the compiled
  train step's bytes per chip (arguments + outputs + temporaries - donated), its flops
  per chip and on all chips together (work replicated over 'model' counts on each chip)
  and the chip's memory."""
  if spec.train.dcn_mesh_shape is not None:
    raise UserError(f'--topology={topology}: compiles one slice, not the hybrid mesh of '
                    'DCN_MESH_SHAPE; leave DCN_MESH_SHAPE out and give BATCH_SIZE one '
                    "slice's share, which needs the same memory per chip")
  devices = topology_devices(topology)
  mesh_sizes = partitioning.mesh_axis_sizes(
      spec.train.mesh_shape, len(devices),
      f'MESH_SHAPE under --topology={topology} ({len(devices)} chips)')
  mesh = partitioning.create_mesh(tuple(mesh_sizes.values()), devices)
  config = run_model_config(spec, vocab_size)
  rules = partitioning.logical_axis_rules(spec.axis_rules)
  compiled = compile_train_step(config, spec.train, mesh, rules)
  memory = compiled.memory_analysis()
  chip = devices[0].device_kind
  flops_per_chip = compiled.cost_analysis()['flops']
  return {
      **memory_report(config, tuple(mesh_sizes.values()), spec.train.inputs_length,
                      spec.train.targets_length, rules),
      'topology': topology,
      'libtpu_topology': libtpu_topology(topology),
      'chip': chip,
      'chips': len(devices),
      'argument_bytes_per_chip': memory.argument_size_in_bytes,
      'temp_bytes_per_chip': memory.temp_size_in_bytes,
      'compiled_bytes_per_chip': (memory.argument_size_in_bytes + memory.output_size_in_bytes
                                  + memory.temp_size_in_bytes - memory.alias_size_in_bytes),
      'flops_per_chip': flops_per_chip,
      'flops_per_step': flops_per_chip * len(devices),
      # XLA's cost analysis counts a loop's body once: a scanned stack as one layer.
      'flops_count_scanned_layers_once': config.scan_layers,
      'chip_memory_bytes': CHIP_MEMORY_BYTES.get(chip),
  }


def check_fits(report: dict[str, Any]) -> None:
  """Refuses a compiled step that needs more memory per chip than the chip has."""
  needed, available = report.get('compiled_bytes_per_chip'), report.get('chip_memory_bytes')
  if needed is None or available is None or needed <= available:
    return
  raise UserError(
      f"--topology={report['topology']}: the train step needs {needed / GIB:.2f} GiB per "
      f"chip, {(needed - available) / GIB:.2f} GiB more than the {report['chip']} chip's "
      f'{available / GIB:.0f} GiB; try remat_policy, NUM_MICROBATCHES, loss_chunk_length or '
      "a larger 'fsdp' axis in MESH_SHAPE")


def describe(report: dict[str, Any]) -> str:
  """One line a person reads: parameters, bytes per device and, compiled, per chip."""
  trainable = ''
  if report['trainable_parameters'] != report['parameters']:
    trainable = (f" ({report['trainable_parameters'] / 1e6:.2f}M trained, "
                 f"{100 * report['trainable_parameters'] / report['parameters']:.2f}%)")
  line = (f"parameters: {report['parameters'] / 1e6:.2f}M{trainable}  per device: params "
          f"{report['param_bytes_per_device'] / 2**20:.1f} MiB, optimizer state "
          f"{report['optimizer_bytes_per_device'] / 2**20:.1f} MiB under mesh "
          f"{tuple(report['mesh_shape'])}")
  if 'compiled_bytes_per_chip' not in report:
    return line
  memory = report['chip_memory_bytes']
  scanned = report['flops_count_scanned_layers_once']
  named = report['topology']
  if report['libtpu_topology'] != named:
    named = f"{named} ({report['libtpu_topology']})"
  return (f"{line}; compiled for {named}: "
          f"{report['compiled_bytes_per_chip'] / GIB:.2f} GiB per chip of "
          f"{'an unknown amount' if memory is None else f'{memory / GIB:.0f} GiB'}, "
          f"{report['flops_per_chip'] / 1e12:.2f} TFLOP per chip and step"
          f"{' (scanned layers counted once)' if scanned else ''}")
