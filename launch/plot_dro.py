"""Draws how a DRO run's group weights moved over training (PNG) and prints them.

  python launch/plot_dro.py --model_dir=/tmp/t5x_mt/demo_dro --output=/tmp/demo_dro.png

Reads MODEL_DIR/metrics.jsonl (dro_weight/<group> at every logged step) and
MODEL_DIR/dro_groups.json (each group's data share p_g, the centre of the ball). The table
lists, per group, p_g, q_g at the end, and the lowest and highest q_g seen.
"""

import json

from t5x_mt.core import cli
from t5x_mt.training import dro
from t5x_mt.core import files
from t5x_mt.runs import run_layout
from t5x_mt.core.errors import UserError


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--model_dir', required=True, help="a DRO run's MODEL_DIR")
  parser.add_argument('--output', required=True, help='PNG file to write')
  args = parser.parse_args(argv)
  files.check_output(args.output, '--output')
  layout = run_layout.RunLayout(args.model_dir)
  metrics, groups = layout.metrics, layout.dro_groups
  for path in (metrics, groups):
    if not path.is_file():
      raise UserError(f'--model_dir: {path} not found (not a DRO run?)')
  steps, history = dro.weight_history(files.read_json_lines(metrics))
  if not steps:
    raise UserError(f'--model_dir: {metrics} logs no DRO weights (not a DRO run)')
  initial = {group: record['proportion'] for group, record in
             json.loads(groups.read_text(encoding='utf-8'))['groups'].items()}
  title = f'{layout.root.name}: DRO weights, steps {steps[0]}-{steps[-1]}'
  files.write_bytes_atomically(args.output, dro.weights_chart(steps, history, initial, title))
  print(f'{"group":<24}{"p_g":>8}{"q_g end":>9}{"min":>8}{"max":>8}')
  for group, weights in sorted(history.items(), key=lambda item: -item[1][-1]):
    print(f'{group:<24}{initial.get(group, float("nan")):8.4f}{weights[-1]:9.4f}{min(weights):8.4f}'
          f'{max(weights):8.4f}')
  print(f'wrote {args.output}')
  return 0


if __name__ == '__main__':
  cli.run(main)
