"""Averages the parameters of a run's last K (or listed) checkpoints into a new run folder.

  python launch/average_checkpoints.py --checkpoint_dir=/tmp/t5x_mt/ntrex_flores \\
      --output_dir=/tmp/t5x_mt/ntrex_flores_avg [--last=5 | --steps=1500,1750,2000]

The output holds the run's config.gin and vocab.model and one checkpoint (parameters
only) at the last averaged step: translate.py and evaluate.py read it with
--checkpoint_dir, and a fine-tuning run can start from it. Checkpoints are read one at a
time into a running mean, so memory holds two models. VolcTrans found K = 10 captures
most of the gain; a run keeps as many checkpoints as `train.keep_checkpoints` (gin) says.
"""

import argparse

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.core.errors import UserError


def parse_flags(argv: list[str]) -> argparse.Namespace:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--checkpoint_dir', required=True, help="the training run's MODEL_DIR")
  parser.add_argument('--output_dir', required=True, help='new run folder to write')
  parser.add_argument('--last', type=int, default=None, help='average the last K checkpoints')
  parser.add_argument('--steps', default=None, help='comma-separated checkpoint steps')
  args = parser.parse_args(argv)
  files.check_output(args.output_dir, '--output_dir', folder=True)
  if (args.last is None) == (args.steps is None):
    raise UserError('give exactly one of --last=K and --steps=N1,N2,...')
  if args.last is not None and args.last < 1:
    raise UserError(f'--last: must be >= 1, got {args.last}')
  if args.steps is not None:
    try:
      args.steps = sorted({int(step) for step in args.steps.split(',') if step.strip()})
    except ValueError:
      raise UserError(f'--steps: {args.steps!r} is not a comma-separated list of steps'
                      ) from None
  files.check_input(args.checkpoint_dir, '--checkpoint_dir', folder=True)
  return args


def main(argv: list[str]) -> int:
  args = parse_flags(argv)
  cli.start_tensorflow()
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  available = run_loading.saved_steps(args.checkpoint_dir)
  steps = args.steps
  if steps is None:
    if args.last > len(available):
      raise UserError(f'--last: {args.checkpoint_dir} keeps {len(available)} checkpoints '
                      f'({", ".join(map(str, available))}), fewer than {args.last}')
    steps = available[-args.last:]
  missing = [step for step in steps if step not in available]
  if missing:
    raise UserError(f'--steps: {args.checkpoint_dir} has no checkpoint '
                    f'{", ".join(map(str, missing))} (it keeps {", ".join(map(str, available))})')
  step = run_loading.average_checkpoints(args.checkpoint_dir, steps, args.output_dir)
  print(f'averaged steps {", ".join(map(str, steps))} of {args.checkpoint_dir} into '
        f'{args.output_dir} (checkpoint {step})')
  return 0


if __name__ == '__main__':
  cli.run(main)
