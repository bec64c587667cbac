"""Translates text, one sentence per line, with a trained run.

  python launch/translate.py --checkpoint_dir=/tmp/t5x_mt/demo \
      --src_lang=eng_Latn --tgt_lang=hau_Latn [--input=F] [--output=F] [--step=N]

--family_models=1=DIR,2=DIR,... instead of --checkpoint_dir translates with the run of the
target's language family group (swh: group 3). Reads stdin and writes stdout unless
--input/--output are given. Output line i is the translation of input line i; empty lines
stay empty. The model, vocabulary and tag strategy come from the run's MODEL_DIR; the
decoding flags override its config.gin.
"""

from t5x_mt import cli
from t5x_mt import files
from t5x_mt import languages

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
  cli.start_jax(args)
  from t5x_mt import processes  # pylint: disable=g-import-not-at-top
  from t5x_mt import run_loading  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import readers  # pylint: disable=g-import-not-at-top
  lines = readers.read_lines(args.input or STDIN)
  translator = run_loading.load_model(args.checkpoint_dir, cli.family_models(args), args.step,
                                      overrides)
  translations = run_loading.translate_lines(translator, lines, src_lang, tgt_lang,
                                             progress_bar=args.input is not None,
                                             source_name=args.input or 'stdin')
  text = ''.join(line + '\n' for line in translations)
  if args.output is None:
    print(text, end='', flush=True)
  elif processes.is_primary():
    files.write_text_atomically(args.output, text)
  return 0


if __name__ == '__main__':
  cli.run(main)
