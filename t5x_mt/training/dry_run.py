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

from flax import traverse_util
import flax.linen as nn
import jax
from jax.experimental import topologies
import jax.numpy as jnp
from jax.sharding import PartitionSpec
import numpy as np

from t5x_mt.model import lora
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import files
from t5x_mt.core import partitioning
from t5x_mt.training import memory_plan
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
    if files.path(spec.data.vocabulary_path).exists():
      vocab_size = run_vocabulary.num_pieces(
          files.path(spec.data.vocabulary_path).read_bytes())
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


def _abstract_batch(train: run_config.TrainConfig, rows: int) -> models.Batch:
  """Shapes and dtypes of `rows` rows of a training batch: the model's inputs and loss
  weights."""
  batch = jax.eval_shape(lambda: models.dummy_batch(rows, train.inputs_length,
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
        state, _abstract_batch(train, train.batch_size), rng, None)
  try:
    return lowered.compile()
  except jax.errors.JaxRuntimeError as error:
    if not str(error).startswith('RESOURCE_EXHAUSTED'):
      raise
    # Too big for the chip: compiled again with the TPU compiler's out-of-memory error
    # off, so that its bytes can still be reported (check_fits refuses it).
    return lowered.compile(compiler_options={'xla_tpu_no_crash_on_oom': True})


def _bytes_per_chip(memory: Any) -> int:
  """What a compiled step holds on a chip at once (`compiled.memory_analysis()`):
  arguments + outputs + temporaries - the donated arguments the outputs reuse."""
  return (memory.argument_size_in_bytes + memory.output_size_in_bytes
          + memory.temp_size_in_bytes - memory.alias_size_in_bytes)


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
      'compiled_bytes_per_chip': _bytes_per_chip(memory),
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


# The plan's LoRA rank for a run that sets no LORA_RANK: gin/runs/lora/demo.gin's.
PLAN_LORA_RANK = 16


@dataclasses.dataclass(frozen=True)
class TrainingPlan:
  """One way of training a run (fully, or with LoRA) and each topology's plan for it."""
  name: str
  parameters: int
  trained_parameters: int
  footprint: memory_plan.Footprint
  plans: tuple[memory_plan.Plan, ...]
  # Per chip, by topology name, for the TPU plans compiled (`compiled.memory_analysis()`).
  compiled_bytes: dict[str, int]


def _tree_size(tree: Any) -> int:
  return sum(leaf.size for leaf in jax.tree_util.tree_leaves(tree))


def _tree_bytes(tree: Any) -> int:
  return sum(leaf.size * leaf.dtype.itemsize for leaf in jax.tree_util.tree_leaves(tree))


# The batch rows the backward pass is traced with: a prime larger than any other axis of
# a model, so a residual holds a slice of every row exactly where its size divides by it.
_TRACED_ROWS = 2**31 - 1


def _backward_residuals(model: models.TranslationModel, state: trainer.TrainState,
                        train: run_config.TrainConfig, rows: int) -> list[jax.ShapeDtypeStruct]:
  """What the backward pass of `rows` rows keeps from their forward pass: the residuals of
  `jax.vjp` of the train step's objective over the parameters it differentiates, traced
  from shapes. The parameters, which the backward pass reads as they are, are left out."""
  objective = trainer.training_objective(model, direction_ids=(),
                                         label_smoothing=train.label_smoothing,
                                         loss_chunk_length=train.loss_chunk_length)

  def residuals(state, batch, dropout_rng):
    trained, fixed = trainer.differentiated_parameters(state.params, state.opt_state)
    loss = lambda trained: objective(traverse_util.unflatten_dict({**trained, **fixed}),
                                     batch, dropout_rng, None, 1.0)[0]
    _, backward = jax.vjp(loss, trained)
    parameters = {id(leaf) for leaf in jax.tree_util.tree_leaves(state.params)}
    return [leaf for leaf in jax.tree_util.tree_leaves(backward) if id(leaf) not in parameters]

  rng = jax.ShapeDtypeStruct((2,), jnp.uint32)  # A jax.random.PRNGKey.
  return jax.eval_shape(residuals, state, _abstract_batch(train, rows), rng)


def _train_state_shapes(config: network.TransformerConfig,
                        train: run_config.TrainConfig) -> trainer.TrainState:
  """Shapes and dtypes of the run's TrainState under `train`'s optimizer, unboxed."""
  model = models.TranslationModel(config)
  optimizer = train.make_optimizer(config)
  return nn.unbox(jax.eval_shape(
      lambda rng: trainer.init_train_state(model, optimizer, rng, train.inputs_length,
                                           train.targets_length), jax.random.PRNGKey(0)))


def training_footprint(config: network.TransformerConfig, train: run_config.TrainConfig,
                       state: trainer.TrainState | None = None) -> memory_plan.Footprint:
  """The bytes one training step of `config` holds in all under `train`'s optimizer,
  lengths and loss, from shapes (`state`'s, if given): parameters, optimizer state, the
  gradients of the parameters it trains, the backward pass's residuals per row, traced
  with XLA's attention where `config` leaves the kernel to 'auto' (a TPU's flash kernel
  keeps less: q, k, v, its output and log-sum-exp in place of the [heads, length, length]
  probabilities), and the parameters once more, which FSDP gathers whole."""
  if state is None:
    state = _train_state_shapes(config, train)
  if config.attention_implementation == 'auto':
    # 'auto' stages every platform's kernel, whose residuals the trace would add up.
    config = dataclasses.replace(config, attention_implementation='xla')
  residuals = _backward_residuals(models.TranslationModel(config), state, train, _TRACED_ROWS)
  per_row = [leaf for leaf in residuals if leaf.size % _TRACED_ROWS == 0]
  trained, _ = trainer.differentiated_parameters(state.params, state.opt_state)
  return memory_plan.Footprint(
      param_bytes=_tree_bytes(state.params), optimizer_bytes=_tree_bytes(state.opt_state),
      gradient_bytes=_tree_bytes(trained),
      activation_bytes_per_row=_tree_bytes(per_row) // _TRACED_ROWS,
      activation_fixed_bytes=_tree_bytes(residuals) - _tree_bytes(per_row),
      gathered_bytes=_tree_bytes(state.params))


def _compiled_plan_bytes(config: network.TransformerConfig, train: run_config.TrainConfig,
                         plan: memory_plan.Plan,
                         rules: partitioning.LogicalRules) -> int:
  """Bytes per chip of the train step compiled for the plan's TPU slice and mesh."""
  devices = topology_devices(plan.topology.libtpu_topology)
  mesh = partitioning.create_mesh((plan.device_bytes.data, plan.device_bytes.fsdp, 1), devices)
  return _bytes_per_chip(compile_train_step(config, train, mesh, rules).memory_analysis())


def fine_tuning_plan(config: network.TransformerConfig, train: run_config.TrainConfig,
                     rules: partitioning.LogicalRules | None = None, compile_tpu: bool = False,
                     topologies: Sequence[memory_plan.Topology] = memory_plan.TOPOLOGIES
                     ) -> list[TrainingPlan]:
  """`config` trained fully and with LoRA (at its lora_rank, else PLAN_LORA_RANK), each
  planned on `topologies` at `train`'s batch, lengths and microbatches; with
  `compile_tpu`, each TPU plan that fits compiled for its slice (needs libtpu)."""
  rules = rules or partitioning.logical_axis_rules()
  lora_rank = config.lora_rank or PLAN_LORA_RANK
  trainings = []
  for variant in (dataclasses.replace(config, lora_rank=0),
                  dataclasses.replace(config, lora_rank=lora_rank)):
    state = _train_state_shapes(variant, train)
    footprint = training_footprint(variant, train, state)
    plans = tuple(memory_plan.plan(footprint, topology, train.batch_size,
                                   train.num_microbatches) for topology in topologies)
    compiled = {plan.topology.name: _compiled_plan_bytes(variant, train, plan, rules)
                for plan in plans if compile_tpu and plan.fits and plan.topology.libtpu_topology}
    trained, _ = trainer.differentiated_parameters(state.params, state.opt_state)
    parameters, trained_parameters = _tree_size(state.params), _tree_size(trained)
    # Without LoRA a run trains everything, unless its optimizer trains adapters alone.
    name = (f'LoRA r={lora_rank}' if variant.lora_rank else
            'full' if trained_parameters == parameters else 'adapters')
    trainings.append(TrainingPlan(name, parameters, trained_parameters, footprint, plans,
                                  compiled))
  return trainings


def run_fine_tuning_plan(spec: run_config.RunSpec, vocab_size: int | None = None,
                         compile_tpu: bool = False) -> list[TrainingPlan]:
  """`fine_tuning_plan` of a configured run (its model as `run_model_config` sizes it)."""
  return fine_tuning_plan(run_model_config(spec, vocab_size), spec.train,
                          partitioning.logical_axis_rules(spec.axis_rules), compile_tpu)


def describe_fine_tuning_plan(trainings: Sequence[TrainingPlan],
                              train: run_config.TrainConfig, run_lora_rank: int) -> str:
  """The plan as a person reads it: the rule, then per way of training its totals and
  one line per topology (`memory_plan.describe_plan`), compiled bytes where there are."""
  lines = [
      f'memory plan at BATCH_SIZE {train.batch_size} (rows of {train.inputs_length} + '
      f'{train.targets_length} tokens), NUM_MICROBATCHES {train.num_microbatches}: per '
      'device, params + optimizer state + gradients + activations within '
      f'{1 - memory_plan.HEADROOM:.0%} of its memory; params, optimizer state and gradients '
      "split over 'fsdp' (which gathers the params whole as well), the batch over 'data' x "
      "'fsdp'; the smallest 'fsdp' that fits",
      'activations: estimated from shapes, the residuals the backward pass keeps (jax.vjp '
      "traced), with XLA's attention (a TPU's flash kernel keeps less; --compile_plan "
      "compiles the TPU meshes); XLA's other temporaries are left to the headroom"]
  readable = memory_plan.readable_bytes
  count = lambda number: f'{number / 1e6:.2f}M' if number >= 10**6 else f'{number:,}'
  for training in trainings:
    footprint = training.footprint
    rank_origin = ('' if not training.name.startswith('LoRA') else
                   ' (as LORA_RANK sets)' if run_lora_rank else ' (LORA_RANK unset: a default)')
    lines.append(
        f'{training.name}{rank_origin}: {count(training.trained_parameters)} of '
        f'{count(training.parameters)} parameters train; in all: params '
        f'{readable(footprint.param_bytes)}, optimizer state '
        f'{readable(footprint.optimizer_bytes)}, gradients {readable(footprint.gradient_bytes)}'
        f', activations {readable(footprint.activation_bytes_per_row)} a row')
    for plan in training.plans:
      line = '  ' + memory_plan.describe_plan(plan, train.batch_size, train.num_microbatches)
      compiled = training.compiled_bytes.get(plan.topology.name)
      if compiled is not None:
        line += (f'; compiled for {plan.topology.libtpu_topology}: {readable(compiled)} per '
                 f'chip of {readable(plan.topology.device_bytes)}')
      lines.append(line)
  return '\n'.join(lines)
