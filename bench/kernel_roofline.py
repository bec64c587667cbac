"""Attention kernels against XLA's attention: roofline bounds on TPU v5e/v5p and H100/H200
from any host, and on an accelerator their measured times and a training step's MFU.

  python bench/kernel_roofline.py [--shapes=256,1024,2048] [--head_dims=64,128]
      [--batch_size=8] [--heads=8] [--dtype=bfloat16]
      [--platforms=tpu_v5e,tpu_v5p,h100,h200] [--json=FILE] [--repeats=20]
      [--model=gin/models/base.gin] [--train_batch_size=8] [--train_length=256]
      [--train_steps=10] [--train_implementations=auto] [--gin.NAME=VALUE ...]

The program measured is forward + backward of packed causal self-attention with segment
ids: the gradients of sum(output * cotangent) with respect to q, k and v, through
`t5x_mt.kernels.attention`, for every registered implementation. A chip's program is
compiled where it can be (TPUs: ahead of time for a compile-only device of the chip, with
libtpu; the accelerator this process runs on: natively) and otherwise only lowered (GPUs
from a host without one), and its FLOPs and HBM bytes read from XLA's cost analysis.

XLA sees into its own attention, but a kernel is a custom call whose cost it knows only
from the estimate the kernel gave it, if any (JAX's TPU flash kernel estimates its forward
call alone; Triton calls have none). A kernel's row therefore takes XLA's count of the
program less those estimates (the layout changes, padding and masks around the calls)
plus the calls' own FLOPs and bytes from the FlashAttention-2 model of `flash_costs`.
An implementation whose lowering for a chip holds no kernel call (a Pallas kernel that
runs in the interpreter off its platform) has no row for that chip. Each row's bound is
max(FLOPs / peak FLOP/s, bytes / peak bandwidth) at the chip's published peak.

On a GPU or TPU the same script times each implementation natively (median of --repeats
runs after warm-up), checks its gradients against XLA's, and times the real train step
of a gin model file (`bench/train_throughput.py`'s, on synthetic packed rows in --dtype
compute) for its MFU: the model FLOPs of `t5x_mt.model.flops` per second over the chip's peak.
Neither part needs TensorFlow or seqio (the model file is read through
`t5x_mt.config.gin_model`); only the TPU compiles do, through `t5x_mt.training.dry_run`.
"""

import argparse
import dataclasses
import json
import re
import statistics
import time
from typing import Any, Callable, Optional

import jax
import jax.numpy as jnp
import numpy as np
import tqdm

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.model import flops
from t5x_mt.config import gin_model
from t5x_mt.config import gin_utils
from t5x_mt import kernels
from t5x_mt.model import network
from t5x_mt.core.errors import UserError
from t5x_mt.kernels import flash
from t5x_mt.kernels import tpu_flash
import train_throughput


@dataclasses.dataclass(frozen=True)
class Chip:
  """One accelerator's published dense bf16 peak and HBM bandwidth."""
  name: str
  platform: str  # The lowering platform: 'tpu' or 'cuda'.
  peak_flops: float
  peak_bytes_per_second: float
  topology: Optional[str] = None  # libtpu's topology holding the chip (TPUs).


CHIPS = {
    # Google Cloud TPU documentation, "TPU v5e" page (cloud.google.com/tpu/docs/v5e):
    # 197 TFLOP/s bf16 and 819 GB/s HBM2 per chip.
    'tpu_v5e': Chip('TPU v5e', 'tpu', 197e12, 819e9, 'v5e:1x1'),
    # Google Cloud TPU documentation, "TPU v5p" page (cloud.google.com/tpu/docs/v5p):
    # 459 TFLOP/s bf16 and 2765 GB/s HBM2e per chip. libtpu has no one-chip v5p host,
    # so one chip of a 2x2x1 slice is compiled for.
    'tpu_v5p': Chip('TPU v5p', 'tpu', 459e12, 2765e9, 'v5p:2x2x1'),
    # NVIDIA H100 Tensor Core GPU datasheet, SXM column: 989 TFLOP/s dense bf16 (1979
    # with sparsity), 3.35 TB/s HBM3.
    'h100': Chip('H100 SXM', 'cuda', 989e12, 3.35e12),
    # NVIDIA H200 Tensor Core GPU datasheet, SXM column: 989 TFLOP/s dense bf16, 4.8 TB/s
    # HBM3e.
    'h200': Chip('H200 SXM', 'cuda', 989e12, 4.8e12),
}
# What `jax.devices()[0].device_kind` calls each chip, most specific first.
DEVICE_KINDS = (('H200', 'h200'), ('H100', 'h100'), ('TPU v5 lite', 'tpu_v5e'),
                ('TPU v5e', 'tpu_v5e'), ('TPU v5', 'tpu_v5p'))
# Custom-call targets of attention kernels: Mosaic (TPU), Pallas' Triton backend, cuDNN.
KERNEL_CALL_TARGETS = ('tpu_custom_call', '__gpu$xla.gpu.triton', '__cudnn$fmha')
DTYPES = {'bfloat16': jnp.bfloat16, 'float16': jnp.float16, 'float32': jnp.float32}
WARMUP_CALLS = 2


@dataclasses.dataclass(frozen=True)
class Cost:
  """FLOPs and HBM bytes of a program or of part of one."""
  flops: float
  bytes: float

  def __add__(self, other: 'Cost') -> 'Cost':
    return Cost(self.flops + other.flops, self.bytes + other.bytes)

  def __sub__(self, other: 'Cost') -> 'Cost':
    return Cost(self.flops - other.flops, self.bytes - other.bytes)


@dataclasses.dataclass(frozen=True)
class FlashLayout:
  """How a FlashAttention-2 kernel tiles a sequence and stores its per-row scalars."""
  block: Callable[[int], int]  # Sequence length -> block along it.
  query_scalar_bytes: int  # HBM bytes of one per-query scalar (lse, segment id, ...).
  key_scalar_bytes: int  # HBM bytes of one per-key scalar (segment id).
  forward_statistics: int  # Per-query softmax statistics the forward call writes.
  backward_statistics: int  # Per-query scalars the backward calls read (stats, delta).


FLASH_LAYOUTS = {
    # flash.py: lse out of the forward call; lse and delta = rowsum(dO * O) into backward.
    'pallas': FlashLayout(flash.block_size, 4, 4, 1, 2),
    # JAX's TPU kernel keeps per-query scalars as 128-lane rows and key segment ids as
    # 8-sublane columns; its forward call saves l and m, the backward reads l, m and di.
    'pallas_tpu': FlashLayout(tpu_flash.tpu_block, 4 * 128, 4 * 8, 2, 3),
}
# Kernels of unknown layout (cuDNN): 128 x 128 tiles, one float per row scalar.
GENERIC_FLASH_LAYOUT = FlashLayout(lambda length: min(128, length), 4, 4, 1, 2)


def flash_costs(layout: FlashLayout, batch: int, heads: int, length: int, head_dim: int,
                itemsize: int) -> Cost:
  """FLOPs and HBM bytes of causal FlashAttention-2 forward + backward in three calls.

  The forward call runs over query blocks and loops over key blocks (online softmax);
  dK/dV runs over key blocks and loops over query blocks; dQ over query blocks, looping
  over key blocks. Tiles above the diagonal are skipped. A tile's products cost
  2 * block_q * block_k * head_dim FLOPs each: 2 forward (scores, P V), 4 in dK/dV
  (scores again, dP, dV, dK) and 3 in dQ (scores, dP, dQ). The operand held across the
  inner loop is read once, the looped operand once per tile that uses it, every output
  written once; per-row scalars take the layout's bytes.
  """
  block_q = block_k = layout.block(length)
  blocks = -(-length // block_q)
  tiles = blocks * (blocks + 1) // 2
  padded = blocks * block_q
  rows = padded * head_dim * itemsize  # One [length, head_dim] operand of one head.
  q_scalars, kv_scalars = padded * layout.query_scalar_bytes, padded * layout.key_scalar_bytes
  tile_q = block_q * head_dim * itemsize
  tile_k = block_k * head_dim * itemsize
  tile_q_scalars = block_q * layout.query_scalar_bytes
  tile_kv_scalars = block_k * layout.key_scalar_bytes
  forward = Cost(
      4 * tiles * block_q * block_k * head_dim,
      rows + q_scalars  # q and its segment ids, once.
      + tiles * (2 * tile_k + tile_kv_scalars)  # k, v and their segment ids per tile.
      + rows + layout.forward_statistics * q_scalars)  # out and statistics written.
  dkdv = Cost(
      8 * tiles * block_q * block_k * head_dim,
      2 * rows + kv_scalars  # k, v and their segment ids, once.
      + tiles * (2 * tile_q + (1 + layout.backward_statistics) * tile_q_scalars)
      + 2 * rows)  # dk, dv written.
  dq = Cost(
      6 * tiles * block_q * block_k * head_dim,
      2 * rows + (1 + layout.backward_statistics) * q_scalars  # q, dout, scalars, once.
      + tiles * (2 * tile_k + tile_kv_scalars)
      + rows)  # dq written.
  total = forward + dkdv + dq
  return Cost(batch * heads * total.flops, batch * heads * total.bytes)


def attention_gradients(implementation: str) -> Callable[..., tuple[jax.Array, ...]]:
  """(q, k, v, segment_ids, cotangent) -> gradients of sum(attention * cotangent) with
  respect to q, k and v: forward and backward of packed causal self-attention."""
  def objective(q, k, v, segment_ids, cotangent):
    out = kernels.attention(q, k, v, q_segment_ids=segment_ids, kv_segment_ids=segment_ids,
                            causal=True, implementation=implementation)
    return jnp.sum(out.astype(jnp.float32) * cotangent)
  return jax.jit(jax.grad(objective, argnums=(0, 1, 2)))


@dataclasses.dataclass(frozen=True)
class Shape:
  """One attention call's sizes; its operands as `attention_gradients` takes them."""
  batch: int
  heads: int
  length: int
  head_dim: int
  dtype: Any

  def abstract(self, sharding=None) -> list[jax.ShapeDtypeStruct]:
    rows = (self.batch, self.length, self.heads, self.head_dim)
    return [jax.ShapeDtypeStruct(rows, self.dtype, sharding=sharding)] * 3 + [
        jax.ShapeDtypeStruct(rows[:2], jnp.int32, sharding=sharding),
        jax.ShapeDtypeStruct(rows, jnp.float32, sharding=sharding)]

  @property
  def label(self) -> str:
    return f'L={self.length} D={self.head_dim}'


def kernel_call_estimates(program_text: str) -> tuple[int, Cost]:
  """Kernel custom calls in an HLO or StableHLO text, and the sum of the cost estimates
  they carry (XLA counts a custom call by its estimate alone)."""
  targets = re.findall(r'custom_call_target="([^"]+)"|stablehlo\.custom_call @"?([^(" ]+)',
                       program_text)
  calls = [hlo or stablehlo for hlo, stablehlo in targets
           if (hlo or stablehlo).startswith(KERNEL_CALL_TARGETS)]
  estimated = Cost(0, 0)
  for block in re.findall(r'"cost_estimate":\{([^}]*)\}', program_text):
    fields = dict(re.findall(r'"(\w+)":"?(\d+)', block))
    estimated += Cost(float(fields.get('flops', 0)), float(fields.get('bytes_accessed', 0)))
  return len(calls), estimated


def native_chip() -> Optional[str]:
  """The CHIPS key of the accelerator this process runs on, or None (a CPU, another chip)."""
  if jax.default_backend() == 'cpu':
    return None
  kind = jax.devices()[0].device_kind
  return next((key for name, key in DEVICE_KINDS if name in kind), None)


def compile_target(chip_key: str) -> tuple[str, Any, str]:
  """How `chip_key`'s programs are built here, and a line that says so: ('compiled', a
  device) on this process's accelerator (an NVIDIA GPU also stands in for another of the
  table's, all Hopper chips running one program) or on a compile-only TPU device;
  ('lowered', None) for a GPU on a host without one."""
  chip, here = CHIPS[chip_key], native_chip()
  if here is not None and (here == chip_key or CHIPS[here].platform == chip.platform == 'cuda'):
    return 'compiled', jax.devices()[0], f'compiled on {jax.devices()[0].device_kind}'
  if chip.platform == 'cuda':
    return 'lowered', None, ("lowered only: XLA's counts are of the HLO before the GPU "
                             'compiler fuses it, so they overstate the bytes XLA moves')
  try:
    from t5x_mt.training import dry_run  # pylint: disable=g-import-not-at-top  (imports TensorFlow)
  except ImportError as error:
    raise UnavailableChip(f't5x_mt.training.dry_run cannot be imported ({error})') from None
  if dry_run.libtpu_library() is None:
    raise UnavailableChip(f'libtpu is not installed in {dry_run.LIBTPU_DIR} '
                          '(docs/dry_run.md)')
  device = dry_run.topology_devices(chip.topology)[0]
  return 'compiled', device, f'compiled for a compile-only {device.device_kind} (libtpu)'


class UnavailableChip(Exception):
  """A chip whose programs this host cannot build."""


def kernel_of(implementation: str, shape: Shape, platform: str) -> str:
  """The implementation that computes the attention on `platform`: 'auto' picks one."""
  if implementation != 'auto':
    return implementation
  query = shape.abstract()[0]
  return kernels.auto_choices(query, query)[platform]


def program_counts(target: tuple[str, Any, str], platform: str, shape: Shape,
                   implementation: str) -> dict[str, Any]:
  """The program's FLOPs and bytes as XLA counts them, those a bound uses (see the module
  docstring) and their source, and its temporaries; or why it has none ('skipped'). Its
  kernel is `implementation`, or for 'auto' the one it picks on `platform`."""
  how, device, built = target
  kernel = kernel_of(implementation, shape, platform)
  gradients = attention_gradients(implementation)
  if how == 'compiled':
    sharding = jax.sharding.SingleDeviceSharding(device)
    lowered = gradients.trace(*shape.abstract(sharding)).lower()
  else:
    lowered = gradients.trace(*shape.abstract()).lower(lowering_platforms=(platform,))
  counts = {'implementation': kernel, 'called_as': implementation, 'built': built}
  if kernel != 'xla' and not kernel_call_estimates(lowered.as_text())[0]:
    return dict(counts, skipped=f'its lowering for {platform} from this process holds no '
                'kernel call (the Pallas interpreter)')
  if how == 'compiled':
    compiled = lowered.compile()
    analysis, text = compiled.cost_analysis(), compiled.as_text()
    temp_bytes = compiled.memory_analysis().temp_size_in_bytes
  else:
    analysis, text, temp_bytes = lowered.cost_analysis(), lowered.as_text(), None
  if not analysis:
    return dict(counts, skipped='XLA gives no cost analysis of the lowered program here')
  counted = Cost(analysis['flops'], analysis['bytes accessed'])
  calls, estimated = kernel_call_estimates(text)
  used, source = counted, 'xla' if how == 'compiled' else 'hlo'
  if calls:
    layout = FLASH_LAYOUTS.get(kernel, GENERIC_FLASH_LAYOUT)
    used = counted - estimated + flash_costs(layout, shape.batch, shape.heads, shape.length,
                                             shape.head_dim, jnp.dtype(shape.dtype).itemsize)
    source = f'analytic+{source}'
  return dict(counts, xla_flops=counted.flops, xla_bytes=counted.bytes, kernel_calls=calls,
              temp_bytes=temp_bytes, flops=used.flops, bytes=used.bytes, source=source)


def bounded(chip_key: str, shape: Shape, counts: dict[str, Any]) -> dict[str, Any]:
  """A row of the table: a program's counts and its roofline bound on the chip."""
  chip = CHIPS[chip_key]
  compute_s = counts['flops'] / chip.peak_flops
  memory_s = counts['bytes'] / chip.peak_bytes_per_second
  return {'chip': chip_key, 'length': shape.length, 'head_dim': shape.head_dim, **counts,
          'bound_s': max(compute_s, memory_s),
          'bound_by': 'compute' if compute_s >= memory_s else 'memory'}


def roofline_rows(args: argparse.Namespace) -> tuple[list[dict], list[str]]:
  """Rows for every chip, shape and implementation ('auto' last, for the kernel it picks
  where no named implementation gave that kernel a row: named kernels lower natively only
  in a process on their platform), and one note per implementation left out of a chip.
  Chips that share a build (two GPUs on one of them) share its programs."""
  rows, reasons, targets, programs = [], {}, {}, {}
  jobs = [(chip_key, shape, name) for chip_key in args.platforms for shape in args.shape_set
          for name in (*kernels.implementations(), 'auto')]
  for chip_key, shape, name in tqdm.tqdm(jobs, desc='compiling', leave=False):
    if chip_key not in targets:
      try:
        targets[chip_key] = compile_target(chip_key)
      except UnavailableChip as reason:
        targets[chip_key] = None
        reasons[(chip_key, 'every implementation', f'not built here: {reason}')] = []
    platform = CHIPS[chip_key].platform
    kernel = kernel_of(name, shape, platform)
    if targets[chip_key] is None or any(
        (r['chip'], r['length'], r['head_dim'], r['implementation'])
        == (chip_key, shape.length, shape.head_dim, kernel) for r in rows):
      continue
    key = (targets[chip_key][2], platform, shape, name)
    if key not in programs:
      try:
        programs[key] = program_counts(targets[chip_key], platform, shape, name)
      except Exception as error:  # pylint: disable=broad-except  (failing to lower is a finding)
        programs[key] = {'skipped': f'does not lower: {_first_line(error)}'}
    if 'skipped' in programs[key]:
      reasons.setdefault((chip_key, name, programs[key]['skipped']), []).append(shape.label)
    else:
      rows.append(bounded(chip_key, shape, programs[key]))
  notes = [f'{chip_key} {name}: {reason}' + (f' ({", ".join(labels)})' if len(labels) < len(
      args.shape_set) and labels else '') for (chip_key, name, reason), labels in reasons.items()]
  return rows, notes


def _first_line(error: Exception) -> str:
  return (str(error).strip().splitlines() or [type(error).__name__])[0][:200]


def print_roofline(rows: list[dict], args: argparse.Namespace) -> None:
  print(f'packed causal self-attention, forward + backward (gradients of q, k, v): batch '
        f'{args.batch_size}, heads {args.heads}, {args.dtype}')
  for chip_key in args.platforms:
    chip_rows = [row for row in rows if row['chip'] == chip_key]
    if not chip_rows:
      continue
    chip = CHIPS[chip_key]
    print(f'\n{chip_key}: {chip.name}, {chip.peak_flops / 1e12:.0f} TFLOP/s, '
          f'{chip.peak_bytes_per_second / 1e9:.0f} GB/s; built: {chip_rows[0]["built"]}')
    print(f'{"length":>6} {"dim":>4} {"implementation":18} {"xla GFLOP":>9} {"xla MB":>8} '
          f'{"GFLOP":>8} {"MB":>8} {"source":14} {"temp MB":>8} {"bound us":>9} limit')
    for row in chip_rows:
      temp = '-' if row['temp_bytes'] is None else f"{row['temp_bytes'] / 1e6:.1f}"
      print(f"{row['length']:6d} {row['head_dim']:4d} {_kernel_label(row):18} "
            f"{row['xla_flops'] / 1e9:9.2f} {row['xla_bytes'] / 1e6:8.1f} "
            f"{row['flops'] / 1e9:8.2f} {row['bytes'] / 1e6:8.1f} {row['source']:14} "
            f"{temp:>8} {row['bound_s'] * 1e6:9.1f} {row['bound_by']}")


def _kernel_label(row: dict) -> str:
  """The kernel, and 'auto' where that is how it was reached."""
  called = row['called_as']
  return row['implementation'] + (f' ({called})' if called != row['implementation'] else '')


def roofline_figures(rows: list[dict]) -> list[str]:
  """One figure line per kernel row: its bound against XLA attention's on the same chip."""
  xla = {(row['chip'], row['length'], row['head_dim']): row for row in rows
         if row['implementation'] == 'xla'}
  lines = []
  for row in rows:
    peer = xla.get((row['chip'], row['length'], row['head_dim']))
    if row['implementation'] == 'xla' or peer is None:
      continue
    lines.append(f"roofline_bound[{row['chip']} L={row['length']} D={row['head_dim']} "
                 f"{row['implementation']}]: ours={row['bound_s'] * 1e6:.1f} us "
                 f"xla={peer['bound_s'] * 1e6:.1f} us "
                 f"ratio={row['bound_s'] / peer['bound_s']:.3f}")
  return lines


def _median_seconds(call: Callable[[], Any], repeats: int) -> float:
  for _ in range(WARMUP_CALLS):
    jax.block_until_ready(call())
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    jax.block_until_ready(call())
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def measured_times(chip_key: str, rows: list[dict],
                   args: argparse.Namespace) -> list[dict[str, Any]]:
  """Native forward + backward of each implementation with a row on this chip: the median
  seconds, and the gradients' distance from XLA attention's (‖g - g_xla‖ / ‖g_xla‖)."""
  results = []
  for shape in tqdm.tqdm(args.shape_set, desc='timing', leave=False):
    kernel_rows = [row for row in rows if row['chip'] == chip_key and (
        row['length'], row['head_dim']) == (shape.length, shape.head_dim) and row[
            'implementation'] != 'xla']
    called = [('xla', 'xla')] + [(row['implementation'], row['called_as'])
                                 for row in kernel_rows]
    keys = jax.random.split(jax.random.key(shape.length * 1000 + shape.head_dim), 4)
    rows_shape = (shape.batch, shape.length, shape.heads, shape.head_dim)
    q, k, v = (jax.random.normal(key, rows_shape, shape.dtype) for key in keys[:3])
    cotangent = jax.random.normal(keys[3], rows_shape, jnp.float32)
    packed = train_throughput.synthetic_packed_batch(
        np.random.default_rng(shape.length), shape.batch, shape.length,
        vocab_size=train_throughput.FIRST_WORD_ID + 1, direction_ids=[0])
    operands = (q, k, v, jnp.asarray(packed['decoder_segment_ids']), cotangent)
    reference = None
    for name, called_as in called:
      gradients = attention_gradients(called_as)
      seconds = _median_seconds(lambda: gradients(*operands), args.repeats)
      grads = [np.asarray(g, np.float32) for g in gradients(*operands)]
      if reference is None:
        reference = grads
      error = max(np.linalg.norm(g - r) / np.linalg.norm(r) for g, r in zip(grads, reference))
      results.append({'chip': chip_key, 'length': shape.length, 'head_dim': shape.head_dim,
                       'implementation': name, 'called_as': called_as, 'seconds': seconds,
                       'relative_error_vs_xla': float(error)})
  return results


def print_measured(times: list[dict], rows: list[dict]) -> list[str]:
  """Prints the measured table; returns its figure lines: each implementation against XLA
  attention, and each against its roofline bound on this chip."""
  bounds = {(r['chip'], r['length'], r['head_dim'], r['implementation']): r['bound_s']
            for r in rows}
  xla = {(t['length'], t['head_dim']): t['seconds'] for t in times
         if t['implementation'] == 'xla'}
  print(f'\nmeasured on {jax.devices()[0].device_kind}, median of the calls after '
        f'{WARMUP_CALLS} warm-up calls; gradient error = max over q, k, v of '
        '|g - g_xla| / |g_xla|')
  print(f'{"length":>6} {"dim":>4} {"implementation":18} {"ms":>8} {"xla ms":>8} '
        f'{"ratio":>6} {"bound ms":>8} {"grad error":>10}')
  lines = []
  for t in times:
    key = (t['length'], t['head_dim'])
    label = f"{t['chip']} L={key[0]} D={key[1]} {t['implementation']}"
    bound = bounds.get((t['chip'], *key, t['implementation']))
    print(f"{key[0]:6d} {key[1]:4d} {_kernel_label(t):18} {t['seconds'] * 1e3:8.3f} "
          f"{xla[key] * 1e3:8.3f} {t['seconds'] / xla[key]:6.3f} "
          f"{'-' if bound is None else f'{bound * 1e3:8.3f}':>8} "
          f"{t['relative_error_vs_xla']:10.1e}")
    if t['implementation'] != 'xla':
      lines.append(f"attention_time[{label}]: ours={t['seconds'] * 1e3:.3f} ms "
                   f"xla={xla[key] * 1e3:.3f} ms ratio={t['seconds'] / xla[key]:.3f}")
    if bound is not None:
      lines.append(f"attention_time_vs_bound[{label}]: ours={t['seconds'] * 1e3:.3f} ms "
                   f"roofline_bound={bound * 1e3:.3f} ms ratio={t['seconds'] / bound:.3f}")
  return lines


def model_config(model_file: str, bindings: list[str], vocab_size: int,
                 dtype: str) -> network.TransformerConfig:
  """The gin model file's TransformerConfig, computing in `dtype`."""
  gin_utils.parse_gin([model_file], [*bindings, f"network.TransformerConfig.dtype = '{dtype}'"])
  return gin_model.model_config(vocab_size)


def train_step_mfu(chip_key: str, args: argparse.Namespace,
                   bindings: list[str]) -> list[dict[str, Any]]:
  """The real train step's median seconds and MFU, once per --train_implementations."""
  config = model_config(args.model, bindings, args.vocab_size, args.dtype)
  if args.train_length > config.max_length:
    raise UserError(f"--train_length: {args.train_length} exceeds the model's max_length "
                    f'{config.max_length} ({args.model})')
  model_flops = flops.train_flops_per_step(config, args.train_batch_size, args.train_length,
                                           args.train_length)
  query = jax.ShapeDtypeStruct((args.train_batch_size, args.train_length, config.num_heads,
                                config.head_dim), jnp.dtype(args.dtype))
  results = []
  for name in args.train_implementations:
    step_config = dataclasses.replace(config, attention_implementation=name)
    compile_s, tokens, run = train_throughput.our_train_steps(
        step_config, args.train_batch_size, args.train_length)
    seconds = statistics.median(run(args.train_steps))
    chosen = (kernels.auto_choices(query, query)[CHIPS[chip_key].platform] if name == 'auto'
              else name)
    results.append({'chip': chip_key, 'model': args.model, 'implementation': name,
                    'attention': chosen, 'batch_size': args.train_batch_size,
                    'length': args.train_length, 'dtype': args.dtype, 'seconds': seconds,
                    'compile_seconds': compile_s, 'target_tokens': tokens,
                    'model_flops': model_flops,
                    'mfu': model_flops / seconds / CHIPS[chip_key].peak_flops})
  return results


def train_figures(steps: list[dict]) -> list[str]:
  return [f"train_step_mfu[{s['chip']} {s['model']} {s['batch_size']}x{s['length']} "
          f"{s['dtype']} attention={s['attention']}]: "
          f"ours={s['model_flops'] / s['seconds'] / 1e12:.1f} TFLOP/s "
          f"peak={CHIPS[s['chip']].peak_flops / 1e12:.0f} TFLOP/s ratio={s['mfu']:.3f}"
          for s in steps]


def _positive_ints(text: str, flag: str) -> list[int]:
  try:
    values = [int(part) for part in text.split(',')]
  except ValueError:
    values = []
  if not values or min(values) < 1:
    raise UserError(f'{flag}: expected comma-separated positive integers, got {text!r}')
  return values


def _names(text: str, flag: str, valid: tuple[str, ...]) -> list[str]:
  names = [part for part in text.split(',') if part]
  unknown = [name for name in names if name not in valid]
  if unknown or not names:
    raise UserError(f'{flag}: {", ".join(unknown) or "nothing"} is not one of '
                    f'{", ".join(valid)}')
  return names


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--shapes', default='256,1024,2048', help='sequence lengths')
  parser.add_argument('--head_dims', default='64,128')
  parser.add_argument('--batch_size', type=int, default=8)
  parser.add_argument('--heads', type=int, default=8)
  parser.add_argument('--dtype', default='bfloat16', help=', '.join(DTYPES))
  parser.add_argument('--platforms', default=','.join(CHIPS), help=', '.join(CHIPS))
  parser.add_argument('--json', default=None, help='also write every figure to this file')
  parser.add_argument('--repeats', type=int, default=20, help='timed calls per measurement')
  parser.add_argument('--model', default='gin/models/base.gin', help='gin model file')
  parser.add_argument('--train_batch_size', type=int, default=8)
  parser.add_argument('--train_length', type=int, default=256)
  parser.add_argument('--train_steps', type=int, default=10)
  parser.add_argument('--vocab_size', type=int, default=32128)
  parser.add_argument('--train_implementations', default='auto',
                      help="attention of the timed train steps: 'auto' and/or registered "
                      'names, comma-separated')
  args = parser.parse_args(rest)
  for flag in ('batch_size', 'heads', 'repeats', 'train_batch_size', 'train_length',
               'train_steps', 'vocab_size'):
    _positive_ints(str(getattr(args, flag)), f'--{flag}')
  if args.dtype not in DTYPES:
    raise UserError(f'--dtype: {args.dtype!r} is not one of {", ".join(DTYPES)}')
  args.platforms = _names(args.platforms, '--platforms', tuple(CHIPS))
  args.train_implementations = _names(args.train_implementations, '--train_implementations',
                                      ('auto', *kernels.implementations()))
  args.shape_set = [Shape(args.batch_size, args.heads, length, head_dim, DTYPES[args.dtype])
                    for length in _positive_ints(args.shapes, '--shapes')
                    for head_dim in _positive_ints(args.head_dims, '--head_dims')]
  if args.json:
    files.check_output(args.json, '--json')
  return args, bindings


def main(argv: list[str]) -> int:
  args, bindings = parse_args(argv)
  here = native_chip()
  print(f'jax {jax.__version__} on {jax.devices()[0].device_kind}; implementations: '
        f'{", ".join(kernels.implementations())}', flush=True)
  rows, notes = roofline_rows(args)
  print_roofline(rows, args)
  for note in notes:
    print(f'note: {note}')
  times, steps, measured_lines = [], [], []
  if here is not None:
    times = measured_times(here, rows, args)
    measured_lines = print_measured(times, rows)
    steps = train_step_mfu(here, args, bindings)
  if args.json:
    files.write_text_atomically(args.json, json.dumps(
        {'jax': jax.__version__, 'roofline': rows, 'notes': notes, 'attention_times': times,
         'train_steps': steps}, indent=1) + '\n')
  print()
  for line in roofline_figures(rows) + measured_lines + train_figures(steps):
    print(line)
  return 0


if __name__ == '__main__':
  cli.run(main)
