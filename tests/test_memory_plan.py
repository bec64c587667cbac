"""memory_plan: per-device bytes under a ('data', 'fsdp') mesh and the smallest 'fsdp' axis
that fits a device, against figures computed by hand."""

from t5x_mt.training import memory_plan
from t5x_mt.training.memory_plan import DeviceBytes, Footprint, Topology

GIB = 2**30
# A billion parameters in float32 trained fully with AdamW: 4 bytes each for the
# parameters and their gradients, two float32 moments for the optimizer.
BILLION = Footprint(param_bytes=4 * 10**9, optimizer_bytes=2 * 4 * 10**9,
                    gradient_bytes=4 * 10**9, activation_bytes_per_row=3 * 10**9)
EIGHT_A100 = memory_plan.TOPOLOGIES[1]


def test_the_topologies_and_their_usable_memory():
  assert [(topology.name, topology.devices, topology.device_bytes // GIB)
          for topology in memory_plan.TOPOLOGIES] == [
              ('1 x H100 80GB', 1, 80), ('8 x A100 40GB', 8, 40), ('TPU v5e-8', 8, 16),
              ('TPU v5e-16', 16, 16)]
  # 10% of each device is left free.
  assert memory_plan.usable_bytes(EIGHT_A100) == 36 * GIB
  assert memory_plan.usable_bytes(memory_plan.TOPOLOGIES[2]) == int(14.4 * GIB)


def test_state_splits_over_fsdp_and_rows_over_data_and_fsdp():
  footprint = Footprint(param_bytes=4001, optimizer_bytes=8000, gradient_bytes=4000,
                        activation_bytes_per_row=100, activation_fixed_bytes=10)
  # 32 rows over 2 x 4 devices: 4 rows each; 4001 / 4 rounds up.
  assert memory_plan.per_device(footprint, data=2, fsdp=4, batch_size=32) == DeviceBytes(
      data=2, fsdp=4, params=1001, optimizer=2000, gradients=1000, activations=410)
  # Two microbatches: half the rows live at once, and a second copy of the gradients
  # (the accumulated sum beside one microbatch's).
  halves = memory_plan.per_device(footprint, 2, 4, 32, num_microbatches=2)
  assert (halves.gradients, halves.activations, halves.total) == (2000, 210, 1001 + 2000 + 2000 + 210)


def test_an_fsdp_axis_adds_the_parameters_gathered_whole():
  footprint = Footprint(param_bytes=4000, optimizer_bytes=8000, gradient_bytes=4000,
                        activation_bytes_per_row=100, gathered_bytes=4000)
  assert memory_plan.per_device(footprint, data=4, fsdp=1, batch_size=32).gathered == 0
  split = memory_plan.per_device(footprint, data=2, fsdp=2, batch_size=32)
  assert (split.gathered, split.total) == (4000, 2000 + 4000 + 2000 + 800 + 4000)


def test_the_smallest_fsdp_that_fits_is_chosen_and_switches_at_the_boundary():
  """8 x A100 40GB, 36 GiB usable each; 64 rows, 8 a device."""
  # fsdp 1: 16e9 of state + 8 x 3e9 = 40e9 bytes > 36 GiB (38.65e9); fsdp 2: 8e9 + 24e9.
  chosen = memory_plan.plan(BILLION, EIGHT_A100, batch_size=64)
  assert chosen.fits
  assert chosen.device_bytes == DeviceBytes(data=4, fsdp=2, params=2 * 10**9,
                                            optimizer=4 * 10**9, gradients=2 * 10**9,
                                            activations=24 * 10**9)
  # Activations that fill fsdp 2's device to the byte still fit; one byte more a row
  # (8 bytes a device) needs fsdp 4.
  exact_row = (36 * GIB - 8 * 10**9) // 8
  assert (36 * GIB - 8 * 10**9) % 8 == 0
  at_the_limit = Footprint(4 * 10**9, 8 * 10**9, 4 * 10**9, exact_row)
  assert memory_plan.plan(at_the_limit, EIGHT_A100, 64).device_bytes.total == 36 * GIB
  assert memory_plan.plan(at_the_limit, EIGHT_A100, 64).device_bytes.fsdp == 2
  over = Footprint(4 * 10**9, 8 * 10**9, 4 * 10**9, exact_row + 1)
  assert memory_plan.plan(over, EIGHT_A100, 64).device_bytes.fsdp == 4


def test_when_nothing_fits_the_largest_fsdp_is_reported():
  one_h100 = memory_plan.TOPOLOGIES[0]
  result = memory_plan.plan(BILLION, one_h100, batch_size=64)  # 16e9 + 64 x 3e9 bytes.
  assert not result.fits
  assert result.device_bytes.total == 16 * 10**9 + 192 * 10**9
  assert memory_plan.describe_plan(result, 64) == (
      '1 x H100 80GB: nothing fits: fsdp 1 still needs params 3.73 GiB + optimizer 7.45 GiB '
      '+ gradients 3.73 GiB + activations 178.81 GiB = 193.72 GiB of 72.00 GiB '
      '(NUM_MICROBATCHES or remat_policy keep fewer activations)')


def test_a_batch_that_does_not_split_over_the_devices_fits_no_mesh():
  result = memory_plan.plan(BILLION, memory_plan.TOPOLOGIES[3], batch_size=8)
  assert (result.fits, result.device_bytes) == (False, None)
  assert memory_plan.describe_plan(result, 8) == (
      'TPU v5e-16: nothing fits: BATCH_SIZE 8 does not split over 16 devices x '
      'NUM_MICROBATCHES 1')
  assert not memory_plan.batch_divides(64, 16, num_microbatches=8)


def test_a_fitting_plan_names_its_mesh():
  small = Footprint(param_bytes=GIB, optimizer_bytes=2 * GIB, gradient_bytes=GIB,
                    activation_bytes_per_row=2**20)
  two_chips = Topology('two chips', 2, 16 * GIB)
  assert memory_plan.describe_plan(memory_plan.plan(small, two_chips, 4), 4) == (
      'two chips: mesh (data 2, fsdp 1): params 1.00 GiB + optimizer 2.00 GiB + gradients '
      '1.00 GiB + activations 2.0 MiB = 4.00 GiB of 14.40 GiB')
