"""Adds a new language's pieces to an existing SentencePiece model (VolcTrans).

  python launch/merge_vocab.py --base_model=A.model --new_model=B.model --output=C.model \\
      [--score_scale=0.5] [--old_text=F1,F2,...] [--new_text=G]

Old pieces keep their ids and scores; pieces of B that old pieces cannot spell are
appended with scores + log(score_scale) (unigram models; two BPE models: with scores
below every old one, so that they merge after every old piece). With --old_text, checks that every line the old
model covers (without byte fallback or the unknown piece) segments identically (exit 1
if any does not); with --new_text, prints the new language's byte-fallback share and
pieces per word before and after the merge.

launch/extend_vocab.py does this for a run: the pieces, the language's tag and the
embedding rows they need.
"""

import sentencepiece as spm

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.data import readers
from t5x_mt.data import vocab
from t5x_mt.data import vocab_merge


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--base_model', required=True, help='the model to grow')
  parser.add_argument('--new_model', required=True, help='a model trained on the new language')
  parser.add_argument('--output', required=True, help='where to write the merged model')
  parser.add_argument('--score_scale', type=float, default=0.5,
                      help='lambda in (0, 1]: appended scores are lowered by log(1/lambda) '
                      '(unigram models)')
  parser.add_argument('--old_text', default='',
                      help='comma-separated files of old-language text to check identity on')
  parser.add_argument('--new_text', default=None, help='a file of new-language text')
  args = parser.parse_args(argv)
  files.check_output(args.output, '--output')
  summary = vocab_merge.merge_files(args.base_model, args.new_model, args.output,
                                    args.score_scale)
  print(f'{args.base_model}: {summary.old_pieces} pieces kept with their ids; '
        f'{args.new_model}: {summary.new_model_pieces} pieces, {summary.appended} appended, '
        f'{summary.spellable} spellable by old pieces, {summary.already_present} present')
  old = spm.SentencePieceProcessor(model_file=args.base_model)
  merged = spm.SentencePieceProcessor(model_file=args.output)
  changed_total = 0
  for path in filter(None, args.old_text.split(',')):
    lines = readers.read_lines(path)
    covered, changed = vocab_merge.changed_segmentations(old, merged, lines)
    changed_total += changed
    print(f'{path}: {changed} of {covered} covered lines segment differently '
          f'({len(lines) - covered} need byte fallback or the unknown piece in the old '
          'model)')
  if args.new_text:
    lines = readers.read_lines(args.new_text)
    for name, processor in (('before', old), ('after', merged)):
      print(f'{args.new_text} {name}: byte-fallback share '
            f'{vocab_merge.byte_fallback_share(processor, lines):.4f}, pieces per word '
            f'{vocab.pieces_per_word(processor, lines):.3f}')
  print(f'wrote {args.output}')
  return 1 if changed_total else 0


if __name__ == '__main__':
  cli.run(main)
