"""Translates text, one sentence per line, with a trained run.

  python launch/translate.py --checkpoint_dir=/tmp/t5x_mt/demo \
      --src_lang=eng_Latn --tgt_lang=hau_Latn [--input=F] [--output=F] [--step=N]

--family_models=1=DIR,2=DIR,... instead of --checkpoint_dir translates with the run of the
target's language family group (swh: group 3). Reads stdin and writes stdout unless
--input/--output are given. Output line i is the translation of input line i; empty lines
stay empty. Input is read as it is translated, a chunk of lines at a time, and stdout gets
each chunk's translations as soon as they are done; --output appears whole at the end.
The model, vocabulary and tag strategy come from the run's MODEL_DIR; the decoding flags
override its config.gin.
"""

from collections.abc import Callable, Iterator
import contextlib
import os

from t5x_mt import cli
from t5x_mt import files
from t5x_mt import languages
from t5x_mt import run_layout
from t5x_mt.data import readers

STDIN = '/dev/stdin'


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  cli.add_decoding_flags(parser, family_models=True)
  cli.add_distributed_flags(parser)
  parser.add_argument('--src_lang', required=True, help='FLORES-200 code, e.g. eng_Latn')
  parser.add_argument('--tgt_lang', required=True, help='FLORES-200 code, e.g. hau_Latn')
  parser.add_argument('--input', default=None, help='text file (default: stdin)')
  parser.add_argument('--output', default=None, help='text file (default: stdout)')
  args = parser.parse_args(argv)
  src_lang = languages.check_language(args.src_lang, '--src_lang')
  tgt_lang = languages.check_language(args.tgt_lang, '--tgt_lang')
  overrides = cli.decoding_overrides(args)
  if args.output is not None:
    files.check_output(args.output, '--output')
  total = _line_count(args.input)
  cli.start_jax(args)
  from t5x_mt import run_loading  # pylint: disable=g-import-not-at-top
  translator = run_loading.load_model(args.checkpoint_dir, cli.family_models(args), args.step,
                                      overrides)
  if args.checkpoint_dir is not None:
    run_layout.RunLayout(args.checkpoint_dir).warn_untrained(translator.legs(src_lang, tgt_lang))
  chunks = run_loading.stream_translations(
      translator, readers.iter_lines(args.input or STDIN), src_lang, tgt_lang, total=total,
      progress_bar=args.input is not None, source_name=args.input or 'stdin')
  with _output(args.output) as write:
    for chunk in chunks:
      write(''.join(line + '\n' for line in chunk))
  return 0


def _line_count(input_file: str | None) -> int | None:
  """The lines of --input, for the progress bar's total (read once more to count them,
  which checks them before the model loads); None for stdin or a pipe, which can be read
  only once."""
  if input_file is None or (os.path.exists(input_file) and not os.path.isfile(input_file)):
    return None
  return sum(1 for _ in readers.iter_lines(input_file))


@contextlib.contextmanager
def _output(output_file: str | None) -> Iterator[Callable[[str], None]]:
  """What writes each chunk of translations: to stdout, flushed at once, or to
  --output, which appears whole when the last chunk is written. Process 0 alone writes
  (the others translate alike)."""
  from t5x_mt import processes  # pylint: disable=g-import-not-at-top
  if output_file is None:
    yield lambda text: print(text, end='', flush=True)
  elif not processes.is_primary():
    yield lambda text: None
  else:
    with files.atomic_writer(output_file) as output:
      yield lambda text: output.write(text.encode('utf-8'))


if __name__ == '__main__':
  cli.run(main)
