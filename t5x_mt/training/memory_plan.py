"""Which mesh a training run needs on a given accelerator: per device, the bytes of its
parameters, optimizer state, gradients and activations, and the smallest 'fsdp' axis of
a ('data', 'fsdp') mesh under which they fit (`launch/train.py --dry_run`, docs/dry_run.md).

Arithmetic alone, over the totals the dry run measures from shapes (`Footprint`), so
that each rule below is one function a test computes by hand:

- parameters, optimizer state and gradients split over 'fsdp' (each device holds
  1/fsdp of them, rounded up); the batch splits over 'data' x 'fsdp'
  (`partitioning.BATCH_AXES`), so BATCH_SIZE must divide by the device count times
  NUM_MICROBATCHES, and each device's activations are those of its rows of one
  microbatch;
- with an 'fsdp' axis over 1, each device also holds the parameters whole
  (`Footprint.gathered_bytes`): XLA gathers each layer's weights for its products and
  keeps them from the forward pass for the backward pass (docs/dry_run.md compares
  compiled programs);
- with several microbatches the step holds a second copy of the gradients, the sum it
  accumulates beside one microbatch's;
- a mesh fits when that total stays within the device's memory less HEADROOM;
- the plan takes the smallest 'fsdp' axis that fits, the rest of the devices on 'data':
  data parallelism reduces the gradients once a step, where FSDP also gathers every
  layer's parameters.
"""

import dataclasses
import math

GIB = 2**30
# The share of each device's memory a plan leaves free: XLA's temporaries beyond the
# backward pass's residuals (the logits' gradient, the optimizer's update), the runtime's
# own buffers, fragmentation. On GPUs JAX takes 75% of the memory unless
# XLA_PYTHON_CLIENT_MEM_FRACTION says otherwise (0.9 for these plans).
HEADROOM = 0.10


@dataclasses.dataclass(frozen=True)
class Topology:
  """Devices of one kind: how many, and the memory of each."""
  name: str
  devices: int
  device_bytes: int
  # libtpu's name of the slice, for the plan's mesh to be compiled for it; None off TPUs.
  libtpu_topology: str | None = None


TOPOLOGIES = (
    Topology('1 x H100 80GB', 1, 80 * GIB),
    Topology('8 x A100 40GB', 8, 40 * GIB),
    Topology('TPU v5e-8', 8, 16 * GIB, 'v5e:2x4'),
    Topology('TPU v5e-16', 16, 16 * GIB, 'v5e:4x4'),
)


@dataclasses.dataclass(frozen=True)
class Footprint:
  """What one training step holds in all, before any sharding: bytes of the parameters,
  the optimizer state and the gradients of the trained parameters, and the activations
  the backward pass keeps, per batch row plus a part that no row adds to; and what a
  device holds whole under FSDP besides its shard."""
  param_bytes: int
  optimizer_bytes: int
  gradient_bytes: int
  activation_bytes_per_row: int
  activation_fixed_bytes: int = 0
  gathered_bytes: int = 0


@dataclasses.dataclass(frozen=True)
class DeviceBytes:
  """What one device holds under a ('data', 'fsdp') mesh."""
  data: int
  fsdp: int
  params: int
  optimizer: int
  gradients: int
  activations: int
  gathered: int = 0

  @property
  def total(self) -> int:
    return self.params + self.optimizer + self.gradients + self.activations + self.gathered


@dataclasses.dataclass(frozen=True)
class Plan:
  """A topology's smallest fitting mesh (`fits`), or else, when the batch splits over its
  devices at all, the bytes under its largest 'fsdp' axis, which are still too many."""
  topology: Topology
  usable_bytes: int
  fits: bool
  device_bytes: DeviceBytes | None


def usable_bytes(topology: Topology, headroom: float = HEADROOM) -> int:
  """The bytes of one device a plan may fill."""
  return int(topology.device_bytes * (1 - headroom))


def batch_divides(batch_size: int, devices: int, num_microbatches: int = 1) -> bool:
  """Whether each microbatch of BATCH_SIZE splits evenly over the devices."""
  return batch_size % (devices * num_microbatches) == 0


def per_device(footprint: Footprint, data: int, fsdp: int, batch_size: int,
               num_microbatches: int = 1) -> DeviceBytes:
  """One device's bytes under a (data, fsdp) mesh, one microbatch of its rows live."""
  rows = batch_size // (data * fsdp * num_microbatches)
  gradient_copies = 2 if num_microbatches > 1 else 1
  return DeviceBytes(
      data=data, fsdp=fsdp,
      params=math.ceil(footprint.param_bytes / fsdp),
      optimizer=math.ceil(footprint.optimizer_bytes / fsdp),
      gradients=gradient_copies * math.ceil(footprint.gradient_bytes / fsdp),
      activations=footprint.activation_fixed_bytes + rows * footprint.activation_bytes_per_row,
      gathered=footprint.gathered_bytes if fsdp > 1 else 0)


def fsdp_sizes(devices: int) -> list[int]:
  """The 'fsdp' axes a mesh over `devices` may have, smallest first: its divisors."""
  return [size for size in range(1, devices + 1) if devices % size == 0]


def plan(footprint: Footprint, topology: Topology, batch_size: int,
         num_microbatches: int = 1, headroom: float = HEADROOM) -> Plan:
  """The mesh over all of `topology`'s devices with the smallest 'fsdp' axis that fits."""
  usable = usable_bytes(topology, headroom)
  if not batch_divides(batch_size, topology.devices, num_microbatches):
    return Plan(topology, usable, False, None)
  for fsdp in fsdp_sizes(topology.devices):
    bytes_ = per_device(footprint, topology.devices // fsdp, fsdp, batch_size,
                        num_microbatches)
    if bytes_.total <= usable:
      return Plan(topology, usable, True, bytes_)
  return Plan(topology, usable, False, bytes_)


def readable_bytes(count: int) -> str:
  """Bytes in GiB from 1 GiB up, else in MiB."""
  return f'{count / GIB:.2f} GiB' if count >= GIB else f'{count / 2**20:.1f} MiB'


def describe_plan(result: Plan, batch_size: int, num_microbatches: int = 1) -> str:
  """One line of the plan's table: the mesh and its bytes per device, or why none fits."""
  topology = result.topology
  if result.device_bytes is None:
    return (f'{topology.name}: nothing fits: BATCH_SIZE {batch_size} does not split over '
            f'{topology.devices} devices x NUM_MICROBATCHES {num_microbatches}')
  bytes_ = result.device_bytes
  figures = (f'params {readable_bytes(bytes_.params)} + optimizer '
             f'{readable_bytes(bytes_.optimizer)} + gradients {readable_bytes(bytes_.gradients)}'
             f' + activations {readable_bytes(bytes_.activations)}'
             + (f' + gathered {readable_bytes(bytes_.gathered)}' if bytes_.gathered else '')
             + f' = {readable_bytes(bytes_.total)} of {readable_bytes(result.usable_bytes)}')
  if result.fits:
    return f'{topology.name}: mesh (data {bytes_.data}, fsdp {bytes_.fsdp}): {figures}'
  return (f'{topology.name}: nothing fits: fsdp {bytes_.fsdp} still needs {figures} '
          '(NUM_MICROBATCHES or remat_policy keep fewer activations)')
