"""Turns a pretrained Hugging Face checkpoint (NLLB-200, M2M-100, OPUS-MT) into a run folder.

  python launch/import_checkpoint.py --format=huggingface \\
      --path=/data/nllb-200-distilled-600M --output_dir=/tmp/t5x_mt/nllb

--path is a checkpoint folder as the Hugging Face hub holds it or `save_pretrained` writes
it: config.json, model.safetensors (or shards with their index) and the tokenizer's files
(sentencepiece.bpe.model with NLLB's tokenizer.json or M2M-100's vocab.json; OPUS-MT's
source.spm, target.spm and vocab.json). Nothing is downloaded: bring the folder. The
output holds vocab.model (and OPUS-MT's source_vocab.model), config.gin and a parameters-
only checkpoint at step 0, so that translate.py, evaluate.py, average_checkpoints.py and a
fine-tuning run (TrainConfig.init_from, with the output's config.gin as its last --gin_file) read
it like any run. Languages are FLORES-200 codes as everywhere: --src_lang=eng_Latn
--tgt_lang=hau_Latn, whichever codes the checkpoint's tokenizer uses. --directions records
the directions a model translates (a bilingual OPUS-MT model's: its files do not say), so
that commands refuse any other target.

The weights are read one tensor at a time, so the import holds one copy of them; one that
the host's free memory cannot hold is refused before any is read, with the bytes it needs.
--storage_dtype=bfloat16 saves them rounded to bfloat16: half the checkpoint on disk;
every reader computes in float32 from the rounded weights.
"""

import argparse

from t5x_mt.core import cli
from t5x_mt.core import files

FORMATS = ('huggingface',)


def parse_flags(argv: list[str]) -> argparse.Namespace:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--format', default='huggingface', choices=FORMATS,
                      help='the checkpoint\'s format')
  parser.add_argument('--path', required=True, help='the checkpoint folder')
  parser.add_argument('--output_dir', required=True, help='new run folder to write')
  parser.add_argument('--directions', default='',
                      help='comma-separated directions the model translates, e.g. '
                           'eng_Latn-hau_Latn for a bilingual OPUS-MT model: recorded so that '
                           'commands refuse other targets (default: none recorded)')
  parser.add_argument('--storage_dtype', default='float32', choices=('float32', 'bfloat16'),
                      help='the dtype the weights are saved in (default: float32)')
  args = parser.parse_args(argv)
  files.check_output(args.output_dir, '--output_dir', folder=True)
  files.check_input(args.path, '--path', folder=True)
  return args


def main(argv: list[str]) -> int:
  args = parse_flags(argv)
  cli.start_tensorflow()
  from t5x_mt.pretrained import huggingface  # pylint: disable=g-import-not-at-top
  imported = huggingface.import_checkpoint(
      args.path, args.output_dir,
      [name for name in args.directions.split(',') if name.strip()], args.storage_dtype)
  config = imported.config
  print(f'imported {args.path} into {args.output_dir}: {config.num_encoder_layers}+'
        f'{config.num_decoder_layers} layers, d {config.emb_dim}, {imported.num_tokens} '
        f'tokens, {len(imported.languages)} languages')
  return 0


if __name__ == '__main__':
  cli.run(main)
