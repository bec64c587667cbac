"""Compiled bytes per TPU chip of the large recipes' train steps, against the chip's memory.

  python bench/compiled_bytes.py [--variants=NAME,...] [--vocab_size=128000] \
      [--batch_size=256] [--length=256]

Each variant is `launch/train.py --dry_run --topology=...` of one recipe under one mesh,
with or without remat: the run's real train step compiled ahead of time for the TPU
topology on this CPU machine (needs libtpu, docs/dry_run.md). Prints one line per variant:
the compiled bytes per chip (arguments + outputs + temporaries - donated), the part that
is activations and other temporaries, the chip's memory, whether it fits, the TFLOP each
chip computes per step (XLA's cost analysis, which counts a scanned stack's layers once)
and the compile seconds.
"""

import argparse
import dataclasses
import time

import gin

from t5x_mt.core import cli
from t5x_mt.config import gin_utils
from t5x_mt.core.errors import UserError

GIB = 2**30


@dataclasses.dataclass(frozen=True)
class Variant:
  model: str
  topology: str
  mesh_shape: tuple[int, int, int]
  bindings: tuple[str, ...] = ()


REMAT = ("network.TransformerConfig.remat_policy = 'full'",)
VARIANTS = {
    '2b_v5e256_fsdp64_model4': Variant('volctrans_2b', 'v5e:16x16', (1, 64, 4)),
    '2b_v5e256_fsdp64_model4_remat': Variant('volctrans_2b', 'v5e:16x16', (1, 64, 4), REMAT),
    '2b_v5e256_fsdp256': Variant('volctrans_2b', 'v5e:16x16', (1, 256, 1)),
    '2b_v5e256_fsdp256_remat': Variant('volctrans_2b', 'v5e:16x16', (1, 256, 1), REMAT),
    # Cloud TPU names a v4 slice by its TensorCores, two a chip: v4-128 is 64 chips.
    'deep_v4-128_fsdp64': Variant('transf_deep', 'v4:4x4x4', (1, 64, 1)),
    'deep_v4-128_fsdp64_remat': Variant('transf_deep', 'v4:4x4x4', (1, 64, 1), REMAT),
    'deep_v4-128_fsdp16_model4': Variant('transf_deep', 'v4:4x4x4', (1, 16, 4)),
    'deep_v4-256_fsdp128': Variant('transf_deep', 'v4:4x4x8', (1, 128, 1)),
    'deep_v4-256_fsdp32_model4': Variant('transf_deep', 'v4:4x4x8', (1, 32, 4)),
}


def measure(variant: Variant, vocab_size: int, batch_size: int, length: int) -> dict:
  """The dry run's report of `variant`, with the seconds its compilation took."""
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top  (after TF starts)
  from t5x_mt.training import dry_run  # pylint: disable=g-import-not-at-top
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/demo.gin', f'gin/models/{variant.model}.gin'], [
      f'MESH_SHAPE = {variant.mesh_shape}', f'BATCH_SIZE = {batch_size}',
      f'INPUTS_LENGTH = {length}', f'TARGETS_LENGTH = {length}', *variant.bindings])
  start = time.perf_counter()
  report = dry_run.compile_report(configurables.run_spec(), variant.topology, vocab_size)
  return dict(report, seconds=time.perf_counter() - start)


def describe(name: str, report: dict) -> str:
  needed, available = report['compiled_bytes_per_chip'], report['chip_memory_bytes']
  return (f"{name:32s} {report['chip']:12s} mesh {str(tuple(report['mesh_shape'])):12s} "
          f"{needed / GIB:6.2f} GiB per chip (temp {report['temp_bytes_per_chip'] / GIB:6.2f})"
          f" of {available / GIB:3.0f} GiB  {'fits' if needed <= available else 'DOES NOT FIT'}"
          f"  {report['flops_per_chip'] / 1e12:7.1f} TFLOP/chip/step"
          f"{'*' if report['flops_count_scanned_layers_once'] else ' '}"
          f"  compile {report['seconds']:5.1f} s")


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--variants', default=','.join(VARIANTS),
                      help=f'comma-separated, of: {", ".join(VARIANTS)}')
  parser.add_argument('--vocab_size', type=int, default=128000)
  parser.add_argument('--batch_size', type=int, default=256)
  parser.add_argument('--length', type=int, default=256)
  args = parser.parse_args(argv)
  names = args.variants.split(',')
  unknown = [name for name in names if name not in VARIANTS]
  if unknown:
    raise UserError(f'--variants: unknown {", ".join(unknown)}; known: '
                        f'{", ".join(VARIANTS)}')
  cli.start_tensorflow()
  print(f'vocabulary {args.vocab_size}, batch {args.batch_size} x {args.length}')
  for name in names:
    print(describe(name, measure(VARIANTS[name], args.vocab_size, args.batch_size,
                                 args.length)), flush=True)
  print("* XLA's cost analysis counts a scanned stack's layers once")
  return 0


if __name__ == '__main__':
  cli.run(main)
