"""Makes synthetic parallel data from monolingual text with a trained run (BT or FT/ST).

  python launch/back_translate.py --checkpoint_dir=/tmp/t5x_mt/ntrex_flores \\
      --lang=hau_Latn --into=eng_Latn --monolingual=hau.txt [--from_corpus=gettext_l10n] \\
      --output=/tmp/bt_round1 [--mode=bt|ft] [--tag=bt|da|none] [--max_sentences=N]

Translates the --lang sentences of the --monolingual files (one sentence per line) and of
the --lang sides of the --from_corpus corpora (VolcTrans' trick), deduplicated, into
--into with batched beam search, or with --search=sampling sampled (Edunov et al. 2018;
docs/back_translation.md). --mode=bt (back-translation) writes the pairs
<into>' -> <lang>; --mode=ft (forward translation, self-training) writes <lang> -> <into>'.
--tag picks how the synthetic pairs are marked for training: 'bt' puts <BT> before the
source (Caswell et al.), 'da' ends the synthetic side with <DA> (Tencent), 'none'.

--output is a corpus folder: register it in a run with
  data_tasks.register_from_config.corpora_dirs = {'bt1': '/tmp/bt_round1'}
and name 'bt1' among a mixture's members (gin/runs/bt/). A killed run restarted with the
same flags continues where it stopped; no sentence is lost or translated twice.
--ensemble=RUN[:WEIGHT],... instead of --checkpoint_dir translates with an ensemble of
runs (docs/decoding.md#ensembles).
"""

import argparse

from t5x_mt.core import cli
from t5x_mt.config import decoding_flags
from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.core.errors import UserError


def parse_flags(argv: list[str]) -> argparse.Namespace:
  parser = cli.argument_parser(__doc__)
  decoding_flags.add_decoding_flags(parser)
  cli.add_distributed_flags(parser)
  parser.add_argument('--lang', required=True,
                      help='language of the monolingual text (FLORES-200 code)')
  parser.add_argument('--into', required=True,
                      help='language to translate it into: the synthetic side')
  parser.add_argument('--monolingual', action='append', default=[],
                      help='text file, one sentence per line, gzipped if *.gz (repeatable)')
  parser.add_argument('--from_corpus', action='append', default=[],
                      help='registered corpus whose --lang side to use (repeatable)')
  parser.add_argument('--split', default='train', help='split of the --from_corpus corpora')
  parser.add_argument('--mode', default='bt', help='bt: <into>\' -> <lang>; ft: <lang> -> '
                      '<into>\'')
  parser.add_argument('--tag', default='bt', help='synthetic-data tags: bt, da or none')
  parser.add_argument('--max_sentences', type=int, default=None,
                      help='translate only the first N distinct sentences')
  parser.add_argument('--output', required=True, help='corpus folder to write (or add to)')
  args = parser.parse_args(argv)
  files.check_output(args.output, '--output', folder=True)
  if not args.monolingual and not args.from_corpus:
    raise UserError('give --monolingual files or --from_corpus corpora (or both)')
  for path in args.monolingual:
    files.check_input(path, '--monolingual')
  if args.max_sentences is not None and args.max_sentences < 1:
    raise UserError(f'--max_sentences: must be >= 1, got {args.max_sentences}')
  return args


def main(argv: list[str]) -> int:
  args = parse_flags(argv)
  from t5x_mt.decoding import back_translation  # pylint: disable=g-import-not-at-top
  job = back_translation.Job(
      lang=languages.check_language(args.lang, '--lang'),
      other_lang=languages.check_language(args.into, '--into'), mode=args.mode, tag=args.tag)
  decoding = decoding_flags.decoding_overrides(args)
  cli.start_jax(args)
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import monolingual  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import task_cache  # pylint: disable=g-import-not-at-top
  model = decoding_flags.model_choice(args)
  run_loading.adopt_run_config(*decoding_flags.first_run(args))
  # --from_corpus may name the run's own corpora: its task cache's, or the registry's.
  if not task_cache.for_run(configurables.data_settings()):
    from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
    from_gin.configure_data()
  sentences = monolingual.gather(job.lang, args.monolingual, args.from_corpus, args.split)
  sentences = sentences[:args.max_sentences]
  print(f'{len(sentences)} distinct {job.lang} sentences; writing {job.direction} pairs '
        f'({job.other_lang} synthetic, tag {job.tag}) into {args.output}', flush=True)
  teacher = run_loading.load_teacher(
      args.checkpoint_dir, args.step, decoding, model['ensemble_members'],
      model['ensemble_combination'])
  summary = teacher.make_corpus(job, sentences, args.output)
  print(back_translation.summary_line(summary), flush=True)
  return 0


if __name__ == '__main__':
  cli.run(main)
