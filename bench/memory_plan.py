"""Memory plans for fine-tuning NLLB-200 600M, 1.3B and 3.3B, fully and with LoRA.

  python bench/memory_plan.py [--shapes=600M,1.3B,3.3B] [--rows_per_device=8] \
      [--length=128] [--rank=16] [--compile]

Each shape is built from the settings of NLLB-200's config.json as launch/import_checkpoint.py
reads them (`lora_memory.NLLB_SHAPES`) and planned as `launch/train.py --dry_run` plans a
run (`dry_run.fine_tuning_plan`, from shapes: nothing is allocated), trained with AdamW
fully and with LoRA of `rank` on every projection, on one H100 80GB, 8 A100 40GB, a TPU
v5e-8 and a v5e-16, each at `rows_per_device` rows of `length` + `length` tokens per
device (BATCH_SIZE 8 on one device, 64 on eight, 128 on sixteen). `--compile` also
compiles each TPU plan that fits for its slice (libtpu; minutes per plan on a small host).
Prints each plan's line, a table of them, then one figure line per plan: the bytes per
device under the chosen mesh (or under the largest 'fsdp' when nothing fits) against the
bytes a plan may fill, and where compiled, the compiled bytes per chip against that
estimate.
"""

import argparse
import dataclasses
import re

from lora_memory import nllb_config

from t5x_mt.training import dry_run
from t5x_mt.training import memory_plan
from t5x_mt.training import run_config

GIB = memory_plan.GIB


def _cell(plan: memory_plan.Plan) -> str:
  """A table cell: the mesh (data, fsdp) and GiB per device, or the largest 'fsdp' and
  what it would need."""
  bytes_ = plan.device_bytes
  if plan.fits:
    return f'({bytes_.data}, {bytes_.fsdp}) {bytes_.total / GIB:.1f}'
  return f'none (fsdp {bytes_.fsdp}: {bytes_.total / GIB:.1f})'


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--shapes', default='600M,1.3B,3.3B')
  parser.add_argument('--rows_per_device', type=int, default=8)
  parser.add_argument('--length', type=int, default=128)
  parser.add_argument('--rank', type=int, default=dry_run.PLAN_LORA_RANK)
  parser.add_argument('--compile', action='store_true')
  args = parser.parse_args()
  # {(shape, training name): [(plan, compiled bytes or None) per topology]}
  rows = {}
  for shape in args.shapes.split(','):
    config = dataclasses.replace(nllb_config(shape), lora_rank=args.rank)
    for topology in memory_plan.TOPOLOGIES:
      batch_size = args.rows_per_device * topology.devices
      train = run_config.TrainConfig(model_dir='/tmp/t5x_mt/memory_plan', train_steps=1,
                                     batch_size=batch_size, mixture_or_task_name='unused',
                                     inputs_length=args.length, targets_length=args.length)
      for training in dry_run.fine_tuning_plan(config, train, compile_tpu=args.compile,
                                               topologies=(topology,)):
        plan = training.plans[0]
        compiled = training.compiled_bytes.get(topology.name)
        rows.setdefault((shape, training.name), []).append((plan, compiled))
        line = memory_plan.describe_plan(plan, batch_size)
        if compiled is not None:
          line += f'; compiled: {compiled / GIB:.2f} GiB per chip'
        print(f'{shape} {training.name}, BATCH_SIZE {batch_size}: {line}', flush=True)
  print()
  print('| model | training | '
        + ' | '.join(topology.name for topology in memory_plan.TOPOLOGIES) + ' |')
  print('|---|---|' + '---|' * len(memory_plan.TOPOLOGIES))
  for (shape, name), plans in rows.items():
    print(f'| {shape} | {name} | ' + ' | '.join(_cell(plan) for plan, _ in plans) + ' |')
  print()
  for (shape, name), plans in rows.items():
    for plan, compiled in plans:
      figure = re.sub(r'\W+', '_', f'{shape} {name} {plan.topology.name}'.lower())
      ours, usable = plan.device_bytes.total / GIB, plan.usable_bytes / GIB
      print(f'plan_bytes_{figure}: ours={ours:.2f} GiB usable={usable:.2f} GiB '
            f'ratio={ours / usable:.3f}')
      if compiled is not None:
        print(f'compiled_bytes_{figure}: ours={compiled / GIB:.2f} GiB estimate={ours:.2f} GiB '
              f'ratio={compiled / GIB / ours:.3f}')


if __name__ == '__main__':
  main()
