"""Writes a trained run as a model for a serving engine.

  python launch/export.py --checkpoint_dir=/tmp/t5x_mt/demo --format=ctranslate2 \
      --quantization=int8 --output_dir=/tmp/t5x_mt/demo_ct2 [--step=N]

--format=ctranslate2 writes a CTranslate2 model (pre-LN and post-LN, learned, sinusoidal
or Shaw relative positions, shared or separate embeddings) with --quantization weights
(float32, int8, int8_float32 or float16), beside the run's vocabulary, tags and decoding
settings and a README.md saying how to call it. translate.py serves it:

  python launch/translate.py --ctranslate2=/tmp/t5x_mt/demo_ct2 --src_lang=eng_Latn \
      --tgt_lang=fra_Latn

A model CTranslate2 cannot compute exactly (B2T's residual, adapters) is refused with one
line and nothing is written. A decoding setting of the run CTranslate2 cannot honour
(max_length_ratio) is a warning, and the export decodes as CTranslate2 can. An earlier
export in --output_dir is replaced; a folder holding anything else is refused, and
nothing in it is touched. docs/serving.md has the details.
"""

from t5x_mt.core import cli
from t5x_mt import export
from t5x_mt.core import files
from t5x_mt.export import export_folder

FORMATS = ('ctranslate2',)


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--checkpoint_dir', required=True,
                      help="the training run's MODEL_DIR")
  parser.add_argument('--step', type=int, default=None,
                      help='checkpoint step to export (default: the latest)')
  parser.add_argument('--format', required=True, choices=FORMATS, help='serving engine')
  parser.add_argument('--quantization', default='float32',
                      choices=export.CTRANSLATE2_QUANTIZATIONS,
                      help='weight type (default: float32)')
  parser.add_argument('--output_dir', required=True, help='model folder to write')
  args = parser.parse_args(argv)
  export_folder.check_output_dir(args.output_dir)
  files.check_input(args.checkpoint_dir, '--checkpoint_dir', folder=True)
  cli.start_tensorflow()
  from t5x_mt.export import ctranslate2_export  # pylint: disable=g-import-not-at-top
  exported = ctranslate2_export.export_run(args.checkpoint_dir, args.output_dir,
                                         args.quantization, args.step)
  print(f'exported {args.checkpoint_dir} checkpoint {exported.step} ({exported.model}) as '
        f'a CTranslate2 model with {exported.quantization} weights into '
        f'{exported.output_dir}; see {exported.output_dir}/README.md')
  return 0


if __name__ == '__main__':
  cli.run(main)
