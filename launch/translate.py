"""Translates text, one sentence per line, with a trained run.

  python launch/translate.py --checkpoint_dir=/tmp/t5x_mt/demo \
      --src_lang=eng_Latn --tgt_lang=hau_Latn [--input=F] [--output=F] [--step=N]

Reads stdin and writes stdout unless --input/--output are given. Output line i is the
translation of input line i; empty lines stay empty. The model, vocabulary and tag
strategy come from the run's MODEL_DIR; the decoding flags override its config.gin.
"""

import argparse

from t5x_mt import cli
from t5x_mt import files
from t5x_mt import languages
from t5x_mt.errors import UserError

STDIN = '/dev/stdin'


def add_decoding_flags(parser: argparse.ArgumentParser) -> None:
  """Which run and checkpoint, and how to decode (evaluate.py takes the same flags)."""
  parser.add_argument('--checkpoint_dir', required=True, help="the training run's MODEL_DIR")
  parser.add_argument('--step', type=int, default=None,
                      help='checkpoint step to load (default: the latest)')
  parser.add_argument('--beam_size', type=int, default=4, help='beam width; 1 is greedy')
  parser.add_argument('--alpha', type=float, default=1.0, help='length penalty exponent')
  parser.add_argument('--batch_size', type=int, default=64, help='sentences per batch')


def decoding_overrides(args: argparse.Namespace) -> dict[str, float | int]:
  """The Translator settings the flags fix, checked so a typo fails before loading."""
  if args.beam_size < 1:
    raise UserError(f'--beam_size: must be >= 1, got {args.beam_size}')
  if args.batch_size < 1:
    raise UserError(f'--batch_size: must be >= 1, got {args.batch_size}')
  return {'beam_size': args.beam_size, 'alpha': args.alpha, 'batch_size': args.batch_size}


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  add_decoding_flags(parser)
  parser.add_argument('--src_lang', required=True, help='FLORES-200 code, e.g. eng_Latn')
  parser.add_argument('--tgt_lang', required=True, help='FLORES-200 code, e.g. hau_Latn')
  parser.add_argument('--input', default=None, help='text file (default: stdin)')
  parser.add_argument('--output', default=None, help='text file (default: stdout)')
  args = parser.parse_args(argv)
  src_lang = languages.check_language(args.src_lang, '--src_lang')
  tgt_lang = languages.check_language(args.tgt_lang, '--tgt_lang')
  overrides = decoding_overrides(args)
  # TensorFlow and JAX load after cli.run has kept TensorFlow off the accelerators.
  from t5x_mt import run_loading  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import readers  # pylint: disable=g-import-not-at-top
  lines = readers.read_lines(args.input or STDIN)
  translator = run_loading.load_translator(args.checkpoint_dir, args.step, **overrides)
  translations = run_loading.translate_lines(translator, lines, src_lang, tgt_lang,
                                             progress_bar=args.input is not None)
  text = ''.join(line + '\n' for line in translations)
  if args.output is None:
    print(text, end='', flush=True)
  else:
    files.write_text_atomically(args.output, text)
  return 0


if __name__ == '__main__':
  cli.run(main)
