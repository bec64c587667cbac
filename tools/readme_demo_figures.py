"""Rewrites the README's demo figures from a finished run of the demo.

  python launch/train.py --gin_file=gin/runs/demo.gin
  python tools/readme_demo_figures.py --model_dir=/tmp/t5x_mt/demo

Replaces what README.md holds between its `<!-- demo-figures:start -->` and
`<!-- demo-figures:end -->` lines with the run's own figures: the training loss of each
logging window (MODEL_DIR/metrics.jsonl) and the table the run printed last, its scores on
the held-out test split at its last step (MODEL_DIR/test/eval/step_<N>.json), as
`scoring.format_table` prints it. The lines outside the markers are kept as they are,
and the README is replaced in one rename, so the figures are regenerated, never typed,
after any change that moves them.
"""

from collections.abc import Mapping, Sequence
import json
import pathlib
from typing import Any

from t5x_mt.core import cli
from t5x_mt.evaluation import scoring
from t5x_mt.core import files
from t5x_mt.runs import run_layout
from t5x_mt.runs import training_curve
from t5x_mt.core.errors import UserError

README = pathlib.Path(__file__).resolve().parents[1] / 'README.md'
START = '<!-- demo-figures:start -->'
END = '<!-- demo-figures:end -->'
_GENERATED = ('<!-- Written by tools/readme_demo_figures.py from the demo run: regenerate, '
              'do not edit. -->')


def loss_table(records: Sequence[Mapping[str, Any]]) -> str:
  """A one-row Markdown table of the loss at each logged step."""
  steps, losses = training_curve.loss_points(records)
  if not steps:
    raise UserError('metrics.jsonl: no record with a finite loss')
  return '\n'.join([
      '| step | ' + ' | '.join(str(step) for step in steps) + ' |',
      '|---|' + '---|' * len(steps),
      '| loss | ' + ' | '.join(f'{loss:.2f}' for loss in losses) + ' |'])


def figures_block(records: Sequence[Mapping[str, Any]], test_summary: Mapping[str, Any]) -> str:
  """The Markdown between the markers: the loss table and the final test table."""
  step = test_summary['step']
  return '\n'.join([
      _GENERATED,
      'The loss (`metrics.jsonl`, the mean over each logging window):',
      '',
      loss_table(records),
      '',
      'The last table it prints scores the test split, whose compositions (years, numbers,',
      f'lists) never occur in training (`MODEL_DIR/test/eval/step_{step}.json`):',
      '',
      '```',
      scoring.format_table(test_summary),
      '```'])


def replace_block(readme_text: str, block: str, readme_name: str) -> str:
  """`readme_text` with the lines between its START and END marker lines set to `block`."""
  lines = readme_text.split('\n')
  starts = [number for number, line in enumerate(lines) if line.strip() == START]
  ends = [number for number, line in enumerate(lines) if line.strip() == END]
  if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
    raise UserError(f'{readme_name}: needs one line {START} and, after it, one line {END} '
                    f'(found {len(starts)} and {len(ends)})')
  return '\n'.join(lines[:starts[0] + 1] + block.split('\n') + lines[ends[0]:])


def run_figures(model_dir: str) -> tuple[list[dict], dict[str, Any]]:
  """The demo run's metrics records and its test scores at its last logged step."""
  layout = run_layout.RunLayout(model_dir)
  if not layout.metrics.is_file():
    raise UserError(f'--model_dir: {layout.metrics} not found (not a training run?)')
  records = files.read_json_lines(layout.metrics)
  if not records:
    raise UserError(f'{layout.metrics}: no records')
  last_step = max(int(record['step']) for record in records)
  test_record = layout.eval_record(last_step, 'test')
  if not test_record.is_file():
    raise UserError(f'{test_record} not found: the test split is scored when the run '
                    'reaches TRAIN_STEPS; run the demo to its end')
  return records, json.loads(test_record.read_text(encoding='utf-8'))


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--model_dir', required=True, help="the demo run's MODEL_DIR")
  parser.add_argument('--readme', default=str(README), help='the README to rewrite')
  args = parser.parse_args(argv)
  readme = pathlib.Path(args.readme)
  if not readme.is_file():
    raise UserError(f'--readme: {readme} not found')
  records, test_summary = run_figures(args.model_dir)
  text = readme.read_text(encoding='utf-8')
  updated = replace_block(text, figures_block(records, test_summary), args.readme)
  files.write_text_atomically(readme, updated)
  all_directions = test_summary['categories']['ALL']
  print(f'{args.readme}: demo figures of step {test_summary["step"]} written (test ALL: '
        f'{all_directions["bleu"]:.2f} BLEU, {all_directions["chrf"]:.2f} chrF++)'
        + ('' if updated != text else ', unchanged'))
  return 0


if __name__ == '__main__':
  cli.run(main)
