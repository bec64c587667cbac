"""Norm placement and positions of the seed architectures, measured on the demo.

  nice -n 5 python bench/architectures.py [--runs_dir=/tmp/t5x_mt] \
      [--comparisons=layer_norm,positions] [--chart=docs/layer_norm_curves.png]

Trains the demo (gin/runs/demo.gin: its CLDR corpus, seed, steps, learning rate and
warmup) once per variant, one run after another, into <runs_dir>/arch_<variant>; a run
that already finished there is read, not trained again.

- layer_norm: pre-LN, post-LN and post-LN with B2T (LAYER_NORM 'pre', 'post', 'post_b2t')
  on a deep, narrow model with a shorter schedule, DEEP_NARROW (12+12 layers, d 64, 2
  heads of 32, FFN 256; 150 steps, warmup 50, greedy decoding).
  Per run: the last logged training loss, the steps skipped as non-finite, the validation
  loss (the label-smoothed cross-entropy per target token over every validation pair, as
  the training loss is computed, without dropout) and the test split's chrF++ (the run's
  own final evaluation). --chart draws the three training-loss curves in one PNG.
- positions: the demo's tiny model with learned positions against relative ones
  (POSITION_EMBEDDING 'learned', 'relative'). Per run: the test split's chrF++ and the
  chrF++ on the CLDR corpus's 'long' split (lists of 10 to 12 names, longer than any
  training sentence), which launch/evaluate.py --split=long scores with the run's beam.

chrF++ is the mean over the run's directions (its `average`). The figure lines compare
B2T with post-LN and with pre-LN, and relative with learned positions.
"""

from collections.abc import Mapping, Sequence
import dataclasses
import json
import pathlib
import subprocess
import sys
from typing import Any

from t5x_mt.core import charts
from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.runs import run_layout
from t5x_mt.runs import training_curve
from t5x_mt.core.errors import UserError

REPO = pathlib.Path(__file__).resolve().parents[1]
DEMO = 'gin/runs/demo.gin'
TASK = 'cldr_demo'
_CONFIG = '--gin.network.TransformerConfig'
# The layer_norm runs: a deep, narrow model, a shorter schedule with the demo's peak
# learning rate reached sooner (as Takase et al. expose post-LN's instability), a loss
# logged every 10 steps for the curves, and greedy decoding for their evaluations.
DEEP_NARROW = (f'{_CONFIG}.num_encoder_layers=12', f'{_CONFIG}.num_decoder_layers=12',
               f'{_CONFIG}.emb_dim=64', f'{_CONFIG}.num_heads=2', f'{_CONFIG}.head_dim=32',
               f'{_CONFIG}.mlp_dim=256', f'{_CONFIG}.scan_layers=True', '--gin.TRAIN_STEPS=150',
               '--gin.WARMUP_STEPS=50', '--gin.LOG_EVERY_STEPS=10',
               '--gin.decoding.DecodeSettings.beam_size=1')


@dataclasses.dataclass(frozen=True)
class Variant:
  """One demo run: its name (the run folder is arch_<name>) and its gin flags."""
  name: str
  flags: tuple[str, ...]


COMPARISONS = {
    'layer_norm': tuple(Variant(norm, DEEP_NARROW + (f"--gin.LAYER_NORM='{norm}'",))
                        for norm in ('pre', 'post', 'post_b2t')),
    'positions': tuple(Variant(positions, (f"--gin.POSITION_EMBEDDING='{positions}'",))
                       for positions in ('learned', 'relative')),
}


def train(variant: Variant, runs_dir: pathlib.Path) -> run_layout.RunLayout:
  """The variant's finished run, trained by launch/train.py unless it already is."""
  model_dir = runs_dir / f'arch_{variant.name}'
  subprocess.run([sys.executable, 'launch/train.py', f'--gin_file={DEMO}',
                  f"--gin.MODEL_DIR='{model_dir}'", *variant.flags], cwd=REPO, check=True)
  return run_layout.RunLayout(model_dir)


def scores(layout: run_layout.RunLayout, step: int, split: str) -> dict[str, Any]:
  """The run's eval record of `split` at `step`, scored by launch/evaluate.py if absent."""
  record = layout.eval_record(step, split)
  if not record.is_file():
    subprocess.run([sys.executable, 'launch/evaluate.py', f'--checkpoint_dir={layout.root}',
                    f'--tasks={TASK}', f'--split={split}'], cwd=REPO, check=True)
  return json.loads(record.read_text(encoding='utf-8'))


def validation_loss(layout: run_layout.RunLayout, step: int) -> float:
  """Label-smoothed cross-entropy per target token over the validation split."""
  from data_tasks import from_gin  # pylint: disable=g-import-not-at-top  (after the flags)
  from t5x_mt.training import baselines  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import mixtures  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  translator = run_loading.load_translator(str(layout.root), step)
  run_loading.adopt_run_config(str(layout.root))
  from_gin.configure_data(translator.vocabulary_file)
  run = configurables.train_config()  # The run's settings, from its config.gin.
  result = baselines.group_losses(
      translator, mixtures.mixture_view(TASK), split='validation', inputs_length=run.inputs_length,
      targets_length=run.targets_length, label_smoothing=run.label_smoothing,
      loss_chunk_length=run.loss_chunk_length)
  tokens = result['tokens']
  return sum(loss * tokens[group] for group, loss in result['losses'].items()) / sum(
      tokens.values())


def measure(variant: Variant, runs_dir: pathlib.Path, comparison: str) -> dict[str, Any]:
  """The variant's figures: training curve, losses and chrF++ (see the module doc)."""
  layout = train(variant, runs_dir)
  records = files.read_json_lines(layout.metrics)
  steps, losses = training_curve.loss_points(records)
  step = records[-1]['step']
  figures = {'steps': steps, 'losses': losses, 'final_loss': losses[-1],
             'skipped': sum(record.get('nonfinite_steps', 0) for record in records),
             'test_chrf': scores(layout, step, 'test')['average']['chrf']}
  if comparison == 'layer_norm':
    figures['validation_loss'] = validation_loss(layout, step)
  else:
    figures['long_chrf'] = scores(layout, step, 'long')['average']['chrf']
  return figures


def loss_chart(curves: Mapping[str, tuple[Sequence[int], Sequence[float]]],
               title: str) -> bytes:
  """PNG: each run's training loss against the step."""
  pyplot = charts.pyplot()
  figure, axes = pyplot.subplots(figsize=(8, 4.5))
  for label, (steps, losses) in curves.items():
    axes.plot(steps, losses, marker='o', markersize=3, linewidth=1.4, label=label)
  axes.set_xlabel('step')
  axes.set_ylabel('training loss (label-smoothed cross-entropy)')
  axes.set_title(title)
  charts.legend_outside(axes, fontsize='small')
  return charts.png_bytes(figure)


_COLUMNS = (('final_loss', 'final loss', '.3f'), ('skipped', 'skipped', 'd'),
            ('validation_loss', 'val loss', '.3f'), ('test_chrf', 'test chrF++', '.2f'),
            ('long_chrf', 'long chrF++', '.2f'))


def print_table(measured: Mapping[str, Mapping[str, Any]]) -> None:
  """One line per run with the figures it has."""
  columns = [column for column in _COLUMNS
             if any(column[0] in figures for figures in measured.values())]
  print(f'{"run":<16}' + ''.join(f'{heading:>13}' for _, heading, _ in columns))
  for name, figures in measured.items():
    print(f'{name:<16}' + ''.join(
        f'{format(figures[key], spec) if key in figures else "-":>13}'
        for key, _, spec in columns))


def figure_line(figure: str, ours: float, peer_name: str, peer: float, unit: str) -> str:
  return (f'{figure}: ours={ours:.3f} {unit} {peer_name}={peer:.3f} {unit} '
          f'ratio={ours / peer:.3f}')


def figure_lines(measured: Mapping[str, Mapping[str, Any]]) -> list[str]:
  """B2T against post-LN and pre-LN; relative against learned positions."""
  lines = []
  if 'post_b2t' in measured:
    for peer in ('post', 'pre'):
      lines.append(figure_line(f'b2t_vs_{peer}_validation_loss',
                               measured['post_b2t']['validation_loss'], peer,
                               measured[peer]['validation_loss'], 'nats/token'))
      lines.append(figure_line(f'b2t_vs_{peer}_test_chrf', measured['post_b2t']['test_chrf'],
                               peer, measured[peer]['test_chrf'], 'chrF++'))
  if 'relative' in measured:
    for split in ('test', 'long'):
      lines.append(figure_line(f'relative_vs_learned_{split}_chrf',
                               measured['relative'][f'{split}_chrf'], 'learned',
                               measured['learned'][f'{split}_chrf'], 'chrF++'))
  return lines


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--runs_dir', default='/tmp/t5x_mt', help='where the arch_* runs go')
  parser.add_argument('--comparisons', default=','.join(COMPARISONS),
                      help=f'comma-separated, of: {", ".join(COMPARISONS)}')
  parser.add_argument('--chart', default=None,
                      help="PNG of the layer_norm runs' training-loss curves")
  args = parser.parse_args(argv)
  chosen = [name.strip() for name in args.comparisons.split(',') if name.strip()]
  unknown = [name for name in chosen if name not in COMPARISONS]
  if unknown or not chosen:
    raise UserError(f'--comparisons: {", ".join(unknown) or "none given"}; choose from '
                    f'{", ".join(COMPARISONS)}')
  if args.chart is not None:
    files.check_output(args.chart, '--chart')
  runs_dir = files.path(args.runs_dir)
  cli.start_tensorflow()
  measured = {variant.name: measure(variant, runs_dir, comparison)
              for comparison in chosen for variant in COMPARISONS[comparison]}
  print(f'the demo ({DEMO}); layer_norm runs: {" ".join(DEEP_NARROW)}')
  print_table(measured)
  if args.chart is not None and 'layer_norm' in chosen:
    curves = {variant.name: (measured[variant.name]['steps'], measured[variant.name]['losses'])
              for variant in COMPARISONS['layer_norm']}
    files.write_bytes_atomically(args.chart, loss_chart(
        curves, 'Norm placement, 12+12 layers, d 64: training loss on the demo'))
    print(f'wrote {args.chart}')
  for line in figure_lines(measured):
    print(line)
  return 0


if __name__ == '__main__':
  cli.run(main)
