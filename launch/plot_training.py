"""Draws a run's learning curve (PNG) and prints its evaluations and epochs per direction.

  python launch/plot_training.py --model_dir=/tmp/t5x_mt/ntrex_flores --output=/tmp/curve.png

Reads MODEL_DIR/metrics.jsonl (the training loss, tokens/s and each direction's target
tokens per logging window) and MODEL_DIR/eval/step_N.json (validation chrF++, and the
copy-source floor where the run scored it). The first table lists each evaluation with
the loss logged at its step; the second, per direction, the target tokens of one pass over
the mixture's training text (tokenized with the run's vocabulary, as the run cuts them) and
the epochs trained. A run started before per-direction tokens were logged has no second
table.
"""

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.runs import run_layout
from t5x_mt.runs import training_curve
from t5x_mt.core.errors import UserError


def corpus_tokens(layout: run_layout.RunLayout) -> dict[str, float]:
  """Target tokens of one pass over each direction's training text in the run's mixture
  (a streamed corpus: its sample's mean length times its pair count)."""
  cli.start_tensorflow()
  import sentencepiece  # pylint: disable=g-import-not-at-top  (TensorFlow, JAX: after the flags)
  import data_tasks  # pylint: disable=g-import-not-at-top
  from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import corpora  # pylint: disable=g-import-not-at-top
  run_loading.adopt_run_config(str(layout.root))
  from_gin.configure_data()  # The run's data settings, corpora and mixtures.
  config = configurables.train_config()
  processor = sentencepiece.SentencePieceProcessor(model_file=str(layout.vocabulary))
  totals: dict[str, float] = {}
  for member in data_tasks.mixture_view(config.mixture_or_task_name).members:
    pairs = corpora.training_pairs(member.corpus, *member.direction)
    if pairs:
      tokens = training_curve.target_tokens([target for _, target in pairs], processor.encode,
                                            config.targets_length)
      name = member.direction.name
      totals[name] = totals.get(name, 0.0) + tokens * member.pairs / len(pairs)
  return totals


def print_evaluations(steps: list[int], losses: list[float],
                      evaluated: list[training_curve.Evaluation], records: list[dict]) -> None:
  loss_at = dict(zip(steps, losses))
  print(f'{"step":>6} {"loss":>7} {"chrF++":>7} {"copy":>7} {"gain":>7}')
  for evaluation in evaluated:
    loss = loss_at.get(evaluation.step)
    copy = evaluation.copy_chrf
    print(f'{evaluation.step:>6} {"-" if loss is None else f"{loss:.3f}":>7} '
          f'{evaluation.chrf:7.2f} {"-" if copy is None else f"{copy:.2f}":>7} '
          f'{"-" if copy is None else f"{evaluation.chrf - copy:+.2f}":>7}')
  speeds = [record['tokens_per_second'] for record in records[1:]
            if isinstance(record.get('tokens_per_second'), (int, float))]
  if speeds:  # The first window holds compilation.
    print(f'training target tokens/s: {sum(speeds) / len(speeds):.0f} '
          f'(mean over {len(speeds)} logging windows after the first)')


def print_epochs(trained: dict[str, float], corpus: dict[str, float]) -> None:
  print(f'{"direction":<20} {"tokens/pass":>11} {"trained":>10} {"epochs":>7}')
  for direction, passes in training_curve.epochs(trained, corpus).items():
    print(f'{direction:<20} {corpus[direction]:>11.0f} {trained[direction]:>10.0f} '
          f'{passes:>7.2f}')
  total = sum(corpus.get(direction, 0.0) for direction in trained)
  if total:
    print(f'{"all":<20} {total:>11.0f} {sum(trained.values()):>10.0f} '
          f'{sum(trained.values()) / total:>7.2f}')


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--model_dir', required=True, help="a training run's MODEL_DIR")
  parser.add_argument('--output', required=True, help='PNG file to write')
  args = parser.parse_args(argv)
  files.check_output(args.output, '--output')
  layout = run_layout.RunLayout(args.model_dir)
  if not layout.metrics.is_file():
    raise UserError(f'--model_dir: {layout.metrics} not found (not a training run?)')
  records = files.read_json_lines(layout.metrics)
  steps, losses = training_curve.loss_points(records)
  evaluated = training_curve.evaluations(layout)
  title = f'{layout.root.name}: training loss and validation chrF++'
  files.write_bytes_atomically(args.output,
                               training_curve.chart(steps, losses, evaluated, title))
  print_evaluations(steps, losses, evaluated, records)
  trained = training_curve.trained_tokens(records)
  if trained:
    print_epochs(trained, corpus_tokens(layout))
  print(f'wrote {args.output}')
  return 0


if __name__ == '__main__':
  cli.run(main)
