"""Trains a translation model from gin files.

  python launch/train.py --gin_file=gin/runs/demo.gin [--gin.TRAIN_STEPS=200 ...] [--dry_run]

Re-running the same command resumes from the latest checkpoint in MODEL_DIR. A
multi-process run starts the same command in every process, adding
--coordinator_address=HOST:PORT --num_processes=N --process_id=I (auto-detected on Cloud
TPU VMs and Slurm).
"""

import json

from t5x_mt.core import cli
from t5x_mt.config import gin_utils
from t5x_mt.core.errors import UserError


def main(argv: list[str]) -> int:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = cli.argument_parser(__doc__)
  cli.add_gin_flags(parser, 'TRAIN_STEPS = 200')
  cli.add_distributed_flags(parser)
  parser.add_argument('--dry_run', action='store_true',
                      help='print parameter count, per-device memory and, for full and LoRA '
                      'training, the mesh that fits each of a few accelerators, then exit')
  parser.add_argument('--vocab_size', type=int, default=None,
                      help='with --dry_run: vocabulary size to assume (default: the '
                      "run's vocabulary file, else VOCAB_SIZE)")
  parser.add_argument('--topology', default=None,
                      help='with --dry_run: also compile the train step for this TPU '
                      'topology (v5e:16x16, or a slice: v4-32) and report its bytes per chip '
                      'and flops; needs libtpu (docs/dry_run.md)')
  parser.add_argument('--compile_plan', action='store_true',
                      help="with --dry_run: compile the memory plan's TPU meshes (v5e-8, "
                      'v5e-16) for their chips and print their bytes per chip; needs libtpu, '
                      'and minutes for large models (docs/dry_run.md)')
  args = parser.parse_args(rest)
  for flag in ('topology', 'compile_plan'):
    if getattr(args, flag) and not args.dry_run:
      raise UserError(f'--{flag}: only with --dry_run')
  gin_utils.check_recipe(args.gin_file, args.gin_bindings + bindings, inputs=not args.dry_run)
  cli.start_jax(args)
  # pylint: disable=g-import-not-at-top  (gin needs the configurables)
  from t5x_mt.config import configurables
  from t5x_mt.data import task_cache
  from t5x_mt.training import dry_run
  from t5x_mt.training import train_loop
  # pylint: enable=g-import-not-at-top
  gin_utils.parse_gin(args.gin_file, args.gin_bindings + bindings)
  if args.dry_run:
    spec = configurables.run_spec()  # Shapes alone: no corpus is read or registered.
    report = (dry_run.compile_report(spec, args.topology, args.vocab_size) if args.topology
              else dry_run.run_report(spec, args.vocab_size))
    print(json.dumps(report, indent=1))
    print(dry_run.describe(report), flush=True)
    plan = dry_run.run_fine_tuning_plan(spec, args.vocab_size, args.compile_plan)
    print(dry_run.describe_fine_tuning_plan(plan, spec.train, spec.model.lora_rank), flush=True)
    dry_run.check_fits(report)
    return 0
  spec = configurables.run_spec()
  if not task_cache.for_run(spec.data):  # Without a cache, seqio's registry (TensorFlow).
    from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
    spec = from_gin.run_spec()
  train_loop.train(spec)
  return 0


if __name__ == '__main__':
  cli.run(main)
