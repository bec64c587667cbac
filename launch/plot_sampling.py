"""Draws a mixture's original and temperature-sampled distributions per language (PNG).

  python launch/plot_sampling.py --mixture=ntrex128 --output=/tmp/ntrex128_sampling.png \\
      [--temperature=5] [--by=language|direction] [--gin_file=RUN.gin ...]

Prints the table the chart draws. --temperature overrides the run's tau
(`temperature_rate.temperature`); --gin_file loads a run config first, so the mixtures and
corpora it registers (register_from_config, wmt22_corpora) can be plotted.
"""

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.config import gin_utils
from t5x_mt.core.errors import UserError


def main(argv: list[str]) -> int:
  bindings, argv = gin_utils.split_gin_overrides(argv)
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--mixture', required=True, help='registered mixture or task name')
  parser.add_argument('--output', required=True, help='PNG file to write')
  parser.add_argument('--temperature', type=float, default=None, help='sampling tau')
  parser.add_argument('--by', default='language', choices=('language', 'direction'))
  parser.add_argument('--gin_file', action='append', default=[], help='run config (repeatable)')
  args = parser.parse_args(argv)
  files.check_output(args.output, '--output')
  if args.temperature is not None:
    if args.temperature <= 0:
      raise UserError(f'--temperature: must be > 0, got {args.temperature}')
    bindings.append(f'temperature_rate.temperature = {args.temperature}')
  gin_utils.check_recipe(args.gin_file, bindings)
  cli.start_tensorflow()
  import data_tasks  # pylint: disable=g-import-not-at-top
  from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import mixtures  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import sampling  # pylint: disable=g-import-not-at-top
  gin_utils.parse_gin(args.gin_file, bindings)
  data = from_gin.configure_data()
  with cli.setting_named_as('MIXTURE_OR_TASK_NAME', '--mixture'):
    data_tasks.get_mixture_or_task(args.mixture)
    mixture = mixtures.mixture_view(args.mixture)
    mixtures.check_train_examples(mixture)
  shares = sampling.mixture_shares(mixture, args.by)
  title = f'{args.mixture}: {len(shares)} {args.by}s, temperature {data.temperature:g}'
  files.write_bytes_atomically(args.output, sampling.shares_chart(shares, title))
  print(sampling.format_shares(shares))
  print(f'wrote {args.output}')
  return 0


if __name__ == '__main__':
  cli.run(main)
