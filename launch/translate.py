"""Translates text, one sentence per line, with a trained run.

  python launch/translate.py --checkpoint_dir=/tmp/t5x_mt/demo \
      --src_lang=eng_Latn --tgt_lang=hau_Latn [--input=F] [--output=F] [--step=N]

--ensemble=RUN[:WEIGHT],RUN[:WEIGHT],... instead of --checkpoint_dir decodes with several
runs sharing one vocabulary as one model (docs/decoding.md#ensembles); --family_models=
1=DIR,2=DIR,... with the run of the target's language family group (swh: group 3);
--ctranslate2=DIR with the model folder launch/export.py wrote, on CPU through
CTranslate2 (docs/serving.md).

--search=beam|greedy|sampling chooses the search (docs/decoding.md#search-methods), and
each method's settings are flags of their own: --beam_size, --stop; --temperature,
--top_k, --top_p, --epsilon, --seed.

--nbest=N writes each line's N best hypotheses (N <= the beam size; every line gets N),
or with --search=sampling N samples, instead, in Moses' n-best format, which
launch/rerank.py reads (docs/decoding.md#n-best-lists):

  0 ||| hypothesis ||| forward=-4.1 forward_normalized=-0.82 length=5 ||| -0.82

Reads stdin and
writes stdout unless --input/--output are given. Output line i is the translation of
input line i; empty lines stay empty. Input is read as it is translated, a chunk of lines
at a time, and stdout gets each chunk's translations as soon as they are done; --output
appears whole at the end. The model, vocabulary and tag strategy come from the run's
MODEL_DIR (or the exported folder); the decoding flags override its config.gin.
"""

from collections.abc import Callable, Iterator
import argparse
import contextlib
import os

from t5x_mt.core import cli
from t5x_mt.config import decoding_flags
from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.data import readers
from t5x_mt.core.errors import UserError

STDIN = '/dev/stdin'


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  decoding_flags.add_decoding_flags(parser, family_models=True)
  cli.add_distributed_flags(parser)
  parser.add_argument('--src_lang', required=True, help='FLORES-200 code, e.g. eng_Latn')
  parser.add_argument('--tgt_lang', required=True, help='FLORES-200 code, e.g. hau_Latn')
  parser.add_argument('--input', default=None, help='text file (default: stdin)')
  parser.add_argument('--output', default=None, help='text file (default: stdout)')
  decoding_flags.add_ctranslate2_flag(parser)
  parser.add_argument('--nbest', type=int, default=0,
                      help='write the N best hypotheses of each line with their scores, in '
                      "Moses' n-best format (N <= the beam size, or N samples; default: the "
                      'best alone)')
  args = parser.parse_args(argv)
  _check_nbest(args)
  decoding_flags.add_model_languages(args)
  src_lang = languages.check_language(args.src_lang, '--src_lang')
  tgt_lang = languages.check_language(args.tgt_lang, '--tgt_lang')
  if args.output is not None:
    files.check_output(args.output, '--output')
  if args.input is not None:
    files.check_input(args.input, '--input')
  overrides = decoding_flags.decoding_overrides(args)
  total = _line_count(args.input)
  cli.start_jax(args)
  # pylint: disable=g-import-not-at-top  (JAX loads after start_jax)
  from t5x_mt.decoding import line_streaming
  from t5x_mt.export import ctranslate2_translator
  # pylint: enable=g-import-not-at-top
  translator = ctranslate2_translator.load_for_direction(args, overrides, src_lang, tgt_lang)
  chunks = line_streaming.stream_translations(
      translator, readers.iter_lines(args.input or STDIN), src_lang, tgt_lang, total=total,
      progress_bar=args.input is not None, source_name=args.input or 'stdin',
      nbest=args.nbest)
  with _output(args.output) as write:
    first_index = 0
    for chunk in chunks:
      write(_nbest_lines(chunk, first_index) if args.nbest
            else ''.join(line + '\n' for line in chunk))
      first_index += len(chunk)
  return 0


def _check_nbest(args: argparse.Namespace) -> None:
  """--nbest's value, and a model it can come from, before anything loads."""
  if args.nbest < 0:
    raise UserError(f'--nbest: must be >= 1, got {args.nbest}')
  if not args.nbest:
    return
  if args.beam_size is not None and args.nbest > args.beam_size:
    raise UserError(f'--nbest: at most --beam_size ({args.beam_size}) hypotheses, got '
                    f'{args.nbest}')
  if args.family_models is not None:
    raise UserError('--nbest: not with --family_models; n-best lists come from '
                    '--checkpoint_dir, --ensemble or --ctranslate2')


def _nbest_lines(lists: list, first_index: int) -> str:
  """Moses n-best lines of consecutive sentences' hypotheses, the first sentence's
  index `first_index`: the summed log-probability, the beam's length-normalised score
  (also the total) and the generated pieces, EOS included."""
  from t5x_mt.decoding import nbest  # pylint: disable=g-import-not-at-top
  return ''.join(
      nbest.format_entry(first_index + offset, hypothesis.text,
                         nbest.search_features(hypothesis.log_prob, hypothesis.score,
                                               hypothesis.length), hypothesis.score)
      for offset, hypotheses in enumerate(lists) for hypothesis in hypotheses)


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
  from t5x_mt.core import processes  # pylint: disable=g-import-not-at-top
  if output_file is None:
    yield lambda text: print(text, end='', flush=True)
  elif not processes.is_primary():
    yield lambda text: None
  else:
    with files.atomic_writer(output_file) as output:
      yield lambda text: output.write(text.encode('utf-8'))


if __name__ == '__main__':
  cli.run(main)
