"""Computes DRO baselines: a trained run's per-token loss on each group of a mixture.

  python launch/compute_baselines.py --checkpoint_dir=/tmp/t5x_mt/ntrex_flores \
      --mixture=ntrex128 --output=/tmp/t5x_mt/ntrex_baselines.json \
      [--grouping=direction|target] [--max_batches_per_task=N] [--batch_size=32]

Every training example of the mixture is scored once with the run's model (no dropout,
the run's label smoothing), in packed batches; the output JSON holds per group the mean
per-token loss and the token count, and the run and step it came from. A DRO run reads it
(the baselines b_g of a plain model trained on the same data, docs/methods.md#dro).
"""

import json

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.core.errors import UserError


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--checkpoint_dir', required=True, help="the plain run's MODEL_DIR")
  parser.add_argument('--step', type=int, default=None, help='checkpoint (default: latest)')
  parser.add_argument('--mixture', required=True, help='mixture or task of the DRO run')
  parser.add_argument('--output', required=True, help='JSON file to write')
  parser.add_argument('--grouping', default='direction', choices=('direction', 'target'))
  parser.add_argument('--batch_size', type=int, default=32, help='packed rows per batch')
  parser.add_argument('--max_batches_per_task', type=int, default=None,
                      help='score at most N batches of each task (default: all)')
  args = parser.parse_args(argv)
  for flag in ('batch_size', 'max_batches_per_task'):
    value = getattr(args, flag)
    if value is not None and value < 1:
      raise UserError(f'--{flag}: must be >= 1, got {value}')
  files.check_output(args.output, '--output')
  files.check_input(args.checkpoint_dir, '--checkpoint_dir', folder=True)
  cli.start_tensorflow()
  import data_tasks  # pylint: disable=g-import-not-at-top
  from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
  from t5x_mt.training import baselines  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import mixtures  # pylint: disable=g-import-not-at-top
  step = run_loading.checkpoint_step(args.checkpoint_dir, args.step)
  translator = run_loading.load_translator(args.checkpoint_dir, step)
  run_loading.adopt_run_config(args.checkpoint_dir)
  # The registry encodes with the run's vocabulary and tags, and knows its corpora.
  from_gin.configure_data(translator.vocabulary_file)
  with cli.setting_named_as('MIXTURE_OR_TASK_NAME', '--mixture'):
    data_tasks.get_mixture_or_task(args.mixture)
    mixture = mixtures.mixture_view(args.mixture)
    mixtures.check_train_examples(mixture)
  run = configurables.train_config()  # The run's settings, from its config.gin.
  result = baselines.group_losses(
      translator, mixture, grouping=args.grouping, batch_size=args.batch_size,
      inputs_length=run.inputs_length, targets_length=run.targets_length,
      label_smoothing=run.label_smoothing, max_batches_per_task=args.max_batches_per_task,
      loss_chunk_length=run.loss_chunk_length)
  result.update(checkpoint_dir=args.checkpoint_dir, step=step, mixture=args.mixture)
  files.write_text_atomically(args.output, json.dumps(result, indent=2, sort_keys=True) + '\n')
  for group, loss in sorted(result['losses'].items()):
    print(f'{group:<24}{loss:8.4f}{result["tokens"][group]:>12.0f} tokens')
  print(f'wrote {args.output}')
  return 0


if __name__ == '__main__':
  cli.run(main)
