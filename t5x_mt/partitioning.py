"""Device mesh, logical-axis rules and the shardings of parameters, state and batches.

One program runs on a laptop CPU and on a pod: every parameter and main activation carries
logical axis names ('embed', 'mlp', 'heads', 'vocab', 'batch', ...); rules map them to the
mesh axes ('data', 'model'); `jax.jit` receives the resulting NamedShardings. Changing the
mesh shape or the rules changes how the work is split, never what is computed.
"""

from collections.abc import Callable, Sequence
import contextlib
import math
from typing import Any

import flax.linen as nn
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec
import numpy as np

from t5x_mt.errors import UserError

MESH_AXES = ('data', 'model')
LogicalRules = Sequence[tuple[str, str | None]]

# Megatron-style model parallelism over 'model' (heads, FFN hidden units, vocabulary rows)
# and data parallelism over 'data'. 'embed' stays replicated across 'model', so the
# residual stream needs no gathers between layers.
DEFAULT_RULES: LogicalRules = (
    ('batch', 'data'),
    ('vocab', 'model'),
    ('mlp', 'model'),
    ('heads', 'model'),
    ('joined_kv', 'model'),
    ('kv', None),
    ('embed', None),
    ('length', None),
    ('layers', None),  # The stacked axis of scanned layers (TransformerConfig.scan_layers).
)


def logical_axis_rules(rules: LogicalRules = DEFAULT_RULES) -> tuple[tuple[str, str | None], ...]:
  """The logical-to-mesh axis rules of this run (gin: `logical_axis_rules.rules`)."""
  for logical, mesh_axis in rules:
    if mesh_axis is not None and mesh_axis not in MESH_AXES:
      raise UserError(f'logical_axis_rules.rules: {logical!r} maps to unknown mesh axis '
                      f'{mesh_axis!r}; mesh axes are {MESH_AXES}')
  return tuple((logical, mesh_axis) for logical, mesh_axis in rules)


def create_mesh(mesh_shape: Sequence[int], devices: Sequence[jax.Device] | None = None) -> Mesh:
  """A ('data', 'model') mesh over all devices; -1 in one place takes what is left.

  Model-parallel groups are laid out on consecutive devices, which on GPUs and TPU slices
  are the closest ones.
  """
  devices = list(jax.devices() if devices is None else devices)
  shape = list(mesh_shape)
  if len(shape) != len(MESH_AXES):
    raise UserError(f'MESH_SHAPE: expected {len(MESH_AXES)} sizes for axes {MESH_AXES}, '
                    f'got {tuple(mesh_shape)}')
  if shape.count(-1) == 1:
    known = math.prod(size for size in shape if size != -1)
    shape[shape.index(-1)] = len(devices) // max(known, 1)
  if math.prod(shape) != len(devices) or min(shape) < 1:
    raise UserError(f'MESH_SHAPE: {tuple(mesh_shape)} does not cover the {len(devices)} '
                    'available devices (the product of the sizes must equal the device count)')
  return Mesh(np.asarray(devices).reshape(shape), MESH_AXES)


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
  """Batches are split along their leading (example) axis over 'data'."""
  return NamedSharding(mesh, PartitionSpec('data'))


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, PartitionSpec())


def check_batch_divisible(batch_size: int, mesh: Mesh, where: str = 'BATCH_SIZE') -> None:
  """The global batch must split evenly over the data-parallel devices."""
  data_size = mesh.shape['data']
  if batch_size % data_size:
    raise UserError(f'{where}: {batch_size} is not divisible by the {data_size} '
                    "data-parallel devices of MESH_SHAPE's 'data' axis")


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
