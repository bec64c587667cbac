"""Adds a language a run lacks to a copy of the run: new pieces, its tag, their rows.

  python launch/extend_vocab.py --checkpoint_dir=/tmp/t5x_mt/nllb --language=ach_Latn \\
      --text=ach.txt --output_dir=/tmp/t5x_mt/nllb_ach [--new_pieces=2000]

--language is a code shaped as FLORES-200's (ISO 639-3 language, ISO 15924 script) that
the run has no tag for, --text that language's text, one sentence per line, in that
script. A SentencePiece model of the vocabulary's kind (unigram or BPE) learned from the
text offers its pieces; at most --new_pieces of those the run's pieces cannot spell, its
characters first, are appended to the vocabulary, so the old languages' text segments
exactly as before, and so is the language's tag. Each new token gets an embedding row
(and output-projection row where the run has one of its own) from the mean of the rows
of the old pieces that spell it (<unk> for characters none has); the tag's row is the
mean of the old tags' rows. Old rows are unchanged: the run's old tokens get the same
logits and its greedy translations stay as they were. The output is a run folder
(config.gin, vocab.model, a parameters-only checkpoint) for a fine-tuning run to start
from (training.TrainConfig.init_from; docs/pretrained.md, "Adding a language").
"""

import argparse

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.core import validation
from t5x_mt.core.errors import UserError
from t5x_mt.data import readers
from t5x_mt.data import tags
from t5x_mt.data import vocab_merge
from t5x_mt.data.cleaning import steps
from t5x_mt.runs import run_layout


def parse_flags(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
  """The flags, checked, and the text's lines."""
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--checkpoint_dir', required=True, help='the run to add the language to')
  parser.add_argument('--language', required=True,
                      help='the new language\'s code, shaped as FLORES-200\'s, e.g. ach_Latn')
  parser.add_argument('--text', required=True,
                      help='text in the new language, one sentence per line')
  parser.add_argument('--output_dir', required=True, help='new run folder to write')
  parser.add_argument('--new_pieces', type=int, default=2000,
                      help='at most this many new pieces (default: 2000)')
  args = parser.parse_args(argv)
  files.check_output(args.output_dir, '--output_dir', folder=True)
  files.check_new_folder(args.output_dir, '--output_dir')
  validation.integer('--new_pieces', args.new_pieces, minimum=1)
  files.check_input(args.checkpoint_dir, '--checkpoint_dir', folder=True)
  run = run_layout.RunLayout(args.checkpoint_dir)
  run.check_is_run('--checkpoint_dir')
  run.check_one_vocabulary('--checkpoint_dir')
  vocab_merge.load_model(run.vocabulary, '--checkpoint_dir')
  tags.check_new_language(run.vocabulary.read_bytes(), args.language, args.checkpoint_dir)
  steps.check_known_script(args.language, '--language')
  files.check_input(args.text, '--text')
  lines = [line for line in readers.read_lines(args.text) if line.strip()]
  if not lines:
    raise UserError(f'--text: {args.text} holds no text')
  steps.check_script(lines, args.language, f'--text: {args.text}')
  return args, lines


def main(argv: list[str]) -> int:
  args, lines = parse_flags(argv)
  cli.start_tensorflow()
  from t5x_mt.runs import language_extension  # pylint: disable=g-import-not-at-top
  extension = language_extension.extend_run(args.checkpoint_dir, args.language, lines,
                                            args.output_dir, args.new_pieces)
  print(f'{args.output_dir}: {args.checkpoint_dir} with {extension.language}: its tag (id '
        f'{extension.tag_id}) and {extension.pieces} new pieces of the {extension.learned} '
        f'learned from {args.text} ({extension.spellable} spelled by old pieces, '
        f'{extension.present} present; {extension.unknown} start at <unk>\'s row, no old '
        f'piece spelling any part of them); {extension.rows[0]} -> {extension.rows[1]} '
        f'token rows, checkpoint {extension.step}')
  return 0


if __name__ == '__main__':
  cli.run(main)
