"""Restores the tone marks and underdots of Yoruba text, one line at a time.

  python launch/restore_diacritics.py --checkpoint_dir=/tmp/t5x_mt/yoruba_diacritics \
      [--input=F] [--output=F] [--step=N] [--batch_size=N] [--lexicon_weight=W] \
      [--unknown_words=bare|model] < unmarked.txt > marked.txt

The run is one trained with gin/runs/yoruba_diacritics.gin
(docs/methods.md#yoruba-diacritics): its model chooses each letter's marks, leaning
towards the markings the run's training lines gave each word they hold (the run's
marking_lexicon.json, weighed by --lexicon_weight), and leaves words those lines never
held bare (--unknown_words=model lets the model mark them too). Reads stdin and writes
stdout unless --input/--output are given. Output line i is input line i with its marks
restored: it strips back to exactly the input line. A line that already carries any
Yoruba mark, and an empty line, is written unchanged. Input is read as it is restored, a chunk of lines at a time, and
stdout gets each chunk as soon as it is done; --output appears whole at the end.
"""

from collections.abc import Callable, Iterator
import contextlib
import itertools

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.data import readers
from t5x_mt.core.errors import UserError

STDIN = '/dev/stdin'
# Lines restored at once, in batches of --batch_size: enough for batches of similar
# lengths, few enough that a pipe's reader sees output early.
CHUNK_BATCHES = 16


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--checkpoint_dir', required=True,
                      help='MODEL_DIR of a run of gin/runs/yoruba_diacritics.gin')
  parser.add_argument('--step', type=int, default=None,
                      help='checkpoint step to load (default: the latest)')
  parser.add_argument('--batch_size', type=int, default=None,
                      help="lines per batch (default: the run's setting, else 64)")
  parser.add_argument('--lexicon_weight', type=float, default=None,
                      help='how strongly a word seen in training leans to the markings it was '
                      "seen with, beside the model (default: the weight tuned on the run's "
                      'validation lines, docs/methods.md#yoruba-diacritics; 0: the model alone)')
  parser.add_argument('--unknown_words', default='bare',
                      help='words the training lines never held: bare (left unmarked, as '
                      'Yoruba writes most names and loanwords) or model (the model marks them)')
  parser.add_argument('--input', default=None, help='text file (default: stdin)')
  parser.add_argument('--output', default=None, help='text file (default: stdout)')
  args = parser.parse_args(argv)
  if args.batch_size is not None and args.batch_size < 1:
    raise UserError(f'--batch_size: must be >= 1, got {args.batch_size}')
  if args.output is not None:
    files.check_output(args.output, '--output')
  files.check_input(args.checkpoint_dir, '--checkpoint_dir', folder=True)
  if args.input is not None:
    files.check_input(args.input, '--input')
  cli.start_tensorflow()
  # pylint: disable=g-import-not-at-top  (imports JAX)
  from t5x_mt.config import run_loading
  from t5x_mt.decoding import diacritics
  # pylint: enable=g-import-not-at-top
  weight = {} if args.lexicon_weight is None else {'lexicon_weight': args.lexicon_weight}
  restorer = run_loading.load_restorer(args.checkpoint_dir, args.step, args.batch_size,
                                      unknown_words=args.unknown_words, **weight)
  lines = readers.iter_lines(args.input or STDIN)
  chunk_size = restorer.translator.batch_size * CHUNK_BATCHES
  with _output(args.output) as write:
    while chunk := list(itertools.islice(lines, chunk_size)):
      write(''.join(line + '\n' for line in diacritics.restore_lines(restorer, chunk)))
  return 0


@contextlib.contextmanager
def _output(output_file: str | None) -> Iterator[Callable[[str], None]]:
  """What writes each chunk of restored lines: to stdout, flushed at once, or to
  --output, which appears whole when the last chunk is written."""
  if output_file is None:
    yield lambda text: print(text, end='', flush=True)
  else:
    with files.atomic_writer(output_file) as output:
      yield lambda text: output.write(text.encode('utf-8'))


if __name__ == '__main__':
  cli.run(main)
