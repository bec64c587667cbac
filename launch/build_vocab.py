"""Trains a run's SentencePiece vocabulary on the training side of its mixture.

  python launch/build_vocab.py --gin_file=gin/runs/demo.gin [--gin.VOCAB_SIZE=8000 ...]
      [--output=PATH]

Languages are sampled with p ∝ n^alpha (gin `runs.VocabularyConfig.alpha`, 0.3) before
SentencePiece sees them. The model goes to the run's VOCABULARY_PATH (or --output); the
command prints its number of pieces and, per language, its share of the sampled text and
its pieces per word on the training text.
"""

import gin

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.config import gin_utils
from t5x_mt.core.errors import UserError


def main(argv: list[str]) -> int:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = cli.argument_parser(__doc__)
  cli.add_gin_flags(parser, 'VOCAB_SIZE = 8000')
  parser.add_argument('--output', default=None,
                      help="where to write the model (default: the run's VOCABULARY_PATH)")
  args = parser.parse_args(rest)
  gin_utils.check_recipe(args.gin_file, args.gin_bindings + bindings)
  if args.output is not None:
    files.check_output(args.output, '--output')
  cli.start_tensorflow()
  # pylint: disable=g-import-not-at-top  (gin needs the configurables)
  import data_tasks
  from data_tasks import from_gin
  from t5x_mt.config import configurables
  from t5x_mt.runs import run_vocabulary
  from t5x_mt.data import mixtures
  from t5x_mt.data import vocab
  # pylint: enable=g-import-not-at-top
  gin_utils.parse_gin(args.gin_file, args.gin_bindings + bindings)
  data = from_gin.configure_data()  # With the corpora and mixtures the run names.
  try:
    mixture_or_task_name = gin.query_parameter('%MIXTURE_OR_TASK_NAME')
  except ValueError:
    raise UserError('--gin_file: MIXTURE_OR_TASK_NAME is not set') from None
  data_tasks.get_mixture_or_task(mixture_or_task_name)
  mixture = mixtures.mixture_view(mixture_or_task_name)
  sentences = mixtures.training_sentences(mixture)
  settings = configurables.vocabulary_config()
  output = run_vocabulary.build_vocabulary(settings, mixture,
                                           args.output or data.vocabulary_path)
  report = vocab.vocabulary_report(output, sentences, alpha=settings.alpha,
                                   num_sentences=settings.num_sentences, seed=settings.seed)
  print(vocab.format_report(report))
  print(f'wrote {output}')
  return 0


if __name__ == '__main__':
  cli.run(main)
