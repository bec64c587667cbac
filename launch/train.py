"""Trains a translation model from gin files.

  python launch/train.py --gin_file=gin/runs/demo.gin [--gin.TRAIN_STEPS=200 ...] [--dry_run]

Re-running the same command resumes from the latest checkpoint in MODEL_DIR.
"""

import json

from t5x_mt import cli
from t5x_mt import gin_utils


def main(argv: list[str]) -> int:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = cli.argument_parser(__doc__)
  cli.add_gin_flags(parser, 'TRAIN_STEPS = 200')
  parser.add_argument('--dry_run', action='store_true',
                      help='print parameter count and per-device memory, then exit')
  parser.add_argument('--vocab_size', type=int, default=None,
                      help='with --dry_run: vocabulary size to assume (default: the '
                      "run's vocabulary file, else VOCAB_SIZE)")
  args = parser.parse_args(rest)
  gin_utils.check_gin_files(args.gin_file)
  cli.start_tensorflow()
  # pylint: disable=g-import-not-at-top  (gin needs the configurables)
  from t5x_mt import configurables
  from t5x_mt import dry_run
  from t5x_mt import train_loop
  # pylint: enable=g-import-not-at-top
  gin_utils.parse_gin(args.gin_file, args.gin_bindings + bindings)
  spec = configurables.run_spec()
  if args.dry_run:
    report = dry_run.run_report(spec, args.vocab_size)
    print(json.dumps(report, indent=1))
    print(f"parameters: {report['parameters'] / 1e6:.2f}M  per device: params "
          f"{report['param_bytes_per_device'] / 2**20:.1f} MiB, optimizer state "
          f"{report['optimizer_bytes_per_device'] / 2**20:.1f} MiB under mesh "
          f"{tuple(report['mesh_shape'])}")
    return 0
  train_loop.train(spec)
  return 0


if __name__ == '__main__':
  cli.run(main)
