"""Device mesh, logical-axis rules and the shardings of parameters, state and batches.

One program runs on a laptop CPU and on a pod: every parameter and main activation carries
logical axis names ('embed', 'mlp', 'heads', 'vocab', 'batch', ...); rules map them to the
mesh axes ('data', 'fsdp', 'model'); `jax.jit` receives the resulting NamedShardings.
Changing the mesh shape or the rules changes how the work is split, never what is computed.
"""

from collections.abc import Callable, Sequence
import contextlib
import logging
import math
from typing import Any

import flax.linen as nn
import jax
from jax.experimental import mesh_utils
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

from t5x_mt.core.errors import UserError

MESH_AXES = ('data', 'fsdp', 'model')
# The axes the batch is split over: rows differ between their devices.
BATCH_AXES = ('data', 'fsdp')
LogicalRules = Sequence[tuple[str, str | tuple[str, ...] | None]]

# Data parallelism over 'data' and 'fsdp'; parameters and optimizer state sharded over
# 'fsdp' along 'embed' (ZeRO-3: each step gathers a layer's weights where it is used);
# Megatron-style model parallelism over 'model' (heads, FFN hidden units, vocabulary
# rows). The first rule that fits wins and a mesh axis serves one array axis: an
# activation's 'batch' takes 'fsdp', so its 'embed' stays whole, and the residual stream
# needs no gathers between layers.
DEFAULT_RULES: LogicalRules = (
    ('batch', BATCH_AXES),
    ('vocab', 'model'),
    ('mlp', 'model'),
    ('heads', 'model'),
    ('joined_kv', 'model'),
    ('embed', 'fsdp'),
    ('kv', None),
    ('length', None),
    ('lora', None),  # The rank of LoRA's matrices (TransformerConfig.lora_rank).
    ('layers', None),  # The stacked axis of scanned layers (TransformerConfig.scan_layers).
)


def logical_axis_rules(rules: LogicalRules = DEFAULT_RULES) -> tuple[tuple[str, Any], ...]:
  """The logical-to-mesh axis rules of this run (gin: `logical_axis_rules.rules`)."""
  checked = []
  for logical, mesh_axes in rules:
    axes = tuple(mesh_axes) if isinstance(mesh_axes, (list, tuple)) else mesh_axes
    for mesh_axis in axes if isinstance(axes, tuple) else (axes,):
      if mesh_axis is not None and mesh_axis not in MESH_AXES:
        raise UserError(f'logical_axis_rules.rules: {logical!r} maps to unknown mesh axis '
                        f'{mesh_axis!r}; mesh axes are {MESH_AXES}')
    checked.append((logical, axes))
  return tuple(checked)


def mesh_axis_sizes(mesh_shape: Sequence[int], num_devices: int,
                    setting: str = 'MESH_SHAPE') -> dict[str, int]:
  """{axis: size} of MESH_SHAPE over `num_devices`: ('data', 'fsdp', 'model') sizes, or
  ('data', 'model') with no FSDP; -1 in one place takes what the others leave."""
  shape = [int(size) for size in mesh_shape]
  if len(shape) == 2:
    shape.insert(1, 1)
  if len(shape) != len(MESH_AXES) or shape.count(-1) > 1:
    raise UserError(f'{setting}: expected sizes for the axes {MESH_AXES} (or for (data, '
                    f'model)), at most one of them -1; got {tuple(mesh_shape)}')
  if -1 in shape:
    known = math.prod(size for size in shape if size != -1)
    shape[shape.index(-1)] = num_devices // max(known, 1)
  if math.prod(shape) != num_devices or min(shape) < 1:
    raise UserError(f'{setting}: {tuple(mesh_shape)} does not cover the {num_devices} '
                    'devices (the product of the sizes must equal the device count)')
  return dict(zip(MESH_AXES, shape))


def create_mesh(mesh_shape: Sequence[int], devices: Sequence[jax.Device] | None = None,
                dcn_mesh_shape: Sequence[int] | None = None) -> Mesh:
  """A ('data', 'fsdp', 'model') mesh over all devices (of every process).

  Without `dcn_mesh_shape` the mesh follows the devices' physical layout
  (`mesh_utils.create_device_mesh`), so model-parallel groups sit on the closest devices.
  With it, MESH_SHAPE is the mesh within a slice (TPU) or node (GPU) and DCN_MESH_SHAPE
  how many of those lie along each axis, joined by the slower data-centre network
  (`create_hybrid_device_mesh`); the mesh's sizes are their products.
  """
  devices = list(jax.devices() if devices is None else devices)
  if dcn_mesh_shape is None:
    sizes = mesh_axis_sizes(mesh_shape, len(devices))
    return Mesh(_device_mesh(tuple(sizes.values()), devices), MESH_AXES)
  granules = mesh_axis_sizes(dcn_mesh_shape, _granule_count(devices), 'DCN_MESH_SHAPE')
  per_granule = len(devices) // math.prod(granules.values())
  sizes = mesh_axis_sizes(mesh_shape, per_granule)
  return Mesh(mesh_utils.create_hybrid_device_mesh(
      tuple(sizes.values()), tuple(granules.values()), devices,
      process_is_granule=devices[0].platform != 'tpu'), MESH_AXES)


def _granule_count(devices: Sequence[jax.Device]) -> int:
  """Slices (TPU) or processes (elsewhere): the units DCN_MESH_SHAPE arranges."""
  if devices[0].platform == 'tpu':
    return len({getattr(device, 'slice_index', 0) for device in devices})
  return len({device.process_index for device in devices})


def _device_mesh(shape: tuple[int, ...], devices: list[jax.Device]) -> np.ndarray:
  """Devices arranged as `shape`: by physical topology where JAX knows it, else in order
  (said in a warning on accelerators, whose collectives are then slower)."""
  try:
    return mesh_utils.create_device_mesh(shape, devices, allow_split_physical_axes=True)
  except (ValueError, NotImplementedError, AssertionError) as error:
    if devices[0].platform != 'cpu':
      logging.warning('MESH_SHAPE %s: devices placed in order, not by the %s topology (%s)',
                      shape, devices[0].platform, error)
    return np.asarray(devices).reshape(shape)


@contextlib.contextmanager
def activation_sharding(mesh: Mesh, rules: LogicalRules):
  """Context in which `nn.with_logical_constraint` inside models resolves to the mesh."""
  with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
    yield


def logical_to_shardings(boxed_tree: Any, mesh: Mesh, rules: LogicalRules) -> Any:
  """NamedShardings for a tree whose leaves are boxed with logical axis names.

  Unboxed leaves (step counters, optimizer counts) are replicated. The result has the
  structure of `nn.unbox(boxed_tree)`.
  """
  specs = nn.get_partition_spec(boxed_tree)
  return nn.logical_to_mesh_sharding(specs, mesh, rules)


def batch_sharding(mesh: Mesh) -> NamedSharding:
  """Batches are split along their leading (example) axis over 'data' and 'fsdp'."""
  return NamedSharding(mesh, PartitionSpec(BATCH_AXES))


def batch_shards(mesh: Mesh) -> int:
  """How many distinct slices of rows a batch is split into."""
  return math.prod(mesh.shape[axis] for axis in BATCH_AXES)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def check_batch_divisible(batch_size: int, mesh: Mesh, where: str = 'BATCH_SIZE') -> None:
  """The global batch must split evenly over the data-parallel devices."""
  shards = batch_shards(mesh)
  if batch_size % shards:
    raise UserError(f'{where}: {batch_size} is not divisible by the {shards} '
                    "data-parallel devices of MESH_SHAPE's 'data' x 'fsdp' axes")


def host_batch_to_global(batch: dict[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
  """Turns this host's slice of a batch into global arrays sharded over 'data'.

  Every host reads its own shard of the data; on one host the slice is the whole batch.
  """
  sharding = batch_sharding(mesh)
  return {name: jax.make_array_from_process_local_data(sharding, value)
          for name, value in batch.items()}


def shard_init(init_fn: Callable[..., Any], mesh: Mesh, rules: LogicalRules,
               *args) -> tuple[Any, Any]:
  """Runs `init_fn(*args)` so each device only materialises its shard of the result.

  Returns (unboxed state, its shardings). The state's shape is found first with
  `jax.eval_shape`, so no full copy of a large model ever exists on one device.
  """
  with activation_sharding(mesh, rules):
    abstract = jax.eval_shape(init_fn, *args)
    shardings = logical_to_shardings(abstract, mesh, rules)
    state = jax.jit(lambda *a: nn.unbox(init_fn(*a)), out_shardings=shardings)(*args)
  return state, shardings
