"""Sequence-level knowledge distillation: a teacher's beam outputs become a student's corpus.

  python launch/distill.py --checkpoint_dir=/tmp/t5x_mt/teacher --corpus=ntrex128 \\
      --directions=eng_Latn-hau_Latn,hau_Latn-eng_Latn --output=/tmp/t5x_mt/kd \\
      [--split=train] [--max_sentences=N] [--beam_size=4 ...]

For each direction, the distinct sources of the corpus's pairs are translated by the teacher
(--checkpoint_dir) with beam search (or another --search: --search=sampling distils
samples), and the pairs (source, teacher translation) are written untagged into --output,
a corpus folder a student run names in
`data_tasks.register_from_config.corpora_dirs` (gin/runs/distill/student.gin). The
student learns the teacher's single mode instead of the references' spread (Kim & Rush).
Resumable as launch/back_translate.py is: rerun the same command after a kill.
--ensemble=RUN[:WEIGHT],... instead of --checkpoint_dir makes an ensemble of runs the
teacher (docs/decoding.md#ensembles).
"""

import argparse

from t5x_mt.core import cli
from t5x_mt.config import decoding_flags
from t5x_mt.core import files
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError


def parse_flags(argv: list[str]) -> argparse.Namespace:
  parser = cli.argument_parser(__doc__)
  decoding_flags.add_decoding_flags(parser)
  cli.add_distributed_flags(parser)
  parser.add_argument('--corpus', required=True, help='registered corpus to distil')
  parser.add_argument('--directions', required=True,
                      help='comma-separated <src>-<tgt> directions, e.g. eng_Latn-hau_Latn')
  parser.add_argument('--split', default='train', help='split of --corpus')
  parser.add_argument('--max_sentences', type=int, default=None,
                      help='distil only the first N distinct sources per direction')
  parser.add_argument('--output', required=True, help='corpus folder to write (or add to)')
  args = parser.parse_args(argv)
  files.check_output(args.output, '--output', folder=True)
  directions = [Direction.parse(d, '--directions')
                for d in args.directions.split(',') if d.strip()]
  if not directions:
    raise UserError('--directions: give at least one <src>-<tgt>')
  args.directions = directions
  if args.max_sentences is not None and args.max_sentences < 1:
    raise UserError(f'--max_sentences: must be >= 1, got {args.max_sentences}')
  return args


def main(argv: list[str]) -> int:
  args = parse_flags(argv)
  decoding = decoding_flags.decoding_overrides(args)
  cli.start_jax(args)
  from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
  from t5x_mt.decoding import back_translation  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import corpora  # pylint: disable=g-import-not-at-top
  model = decoding_flags.model_choice(args)
  run_loading.adopt_run_config(*decoding_flags.first_run(args))
  from_gin.configure_data()  # --corpus may be the teacher run's.
  corpus = corpora.get_corpus(args.corpus)
  sources = {(src, tgt): list(dict.fromkeys(
      s for s, _ in corpus.pairs(args.split, src, tgt) if s.strip()))[:args.max_sentences]
             for src, tgt in args.directions}
  teacher = run_loading.load_teacher(
      args.checkpoint_dir, args.step, decoding, model['ensemble_members'],
      model['ensemble_combination'])
  for src, tgt in args.directions:
    job = back_translation.Job(lang=src, other_lang=tgt, mode='ft', tag='none')
    summary = teacher.make_corpus(job, sources[(src, tgt)], args.output)
    print(back_translation.summary_line(summary), flush=True)
  return 0


if __name__ == '__main__':
  cli.run(main)
