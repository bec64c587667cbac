"""Cleans parallel text into a corpus folder the registry reads, locally or on Beam.

  python launch/clean.py --src_file=F --tgt_file=G --src_lang=eng_Latn --tgt_lang=hau_Latn \\
      (--preset=NAME | --filters=a,b,c) --output_dir=D [--dropped] [--runner=direct|beam]
  python launch/clean.py --tsv_file=F.tsv.gz --src_lang=.. --tgt_lang=.. [--score_columns=laser:2]
  python launch/clean.py --corpus=gettext_l10n [--split=train] [--directions=eng_Latn-zul_Latn,..]

Presets: gin/cleaning/<name>.gin (default, volctrans, lanbridge, nt5, m2m, tencent); step
parameters from `--gin.<step>.<parameter>=VALUE`. `--runner=beam` runs the Apache Beam
pipeline; everything after `--` goes to Beam as pipeline options (DirectRunner without
any). Writes <D>/<src>-<tgt>.<lang> pairs, report.json, removed.png and, with --dropped,
dropped/<src>-<tgt>.tsv, under a temporary name renamed to D once complete.
"""

import argparse
import json

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.config import gin_utils
from t5x_mt.data.cleaning import io as cleaning_io
from t5x_mt.data.cleaning import pipeline
from t5x_mt.data.cleaning import steps as cleaning_steps
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.core.languages import check_language


def _parser() -> argparse.ArgumentParser:
  parser = cli.argument_parser(__doc__)
  inputs = parser.add_argument_group('input (one of: two files, a TSV, a registered corpus)')
  inputs.add_argument('--src_file', help='source side, one sentence per line (.gz allowed)')
  inputs.add_argument('--tgt_file', help='target side, line-aligned with --src_file')
  inputs.add_argument('--tsv_file', help='TSV (.gz allowed) with source and target columns')
  inputs.add_argument('--src_column', type=int, default=0, help='TSV source column (0-based)')
  inputs.add_argument('--tgt_column', type=int, default=1, help='TSV target column')
  inputs.add_argument('--score_columns', default='',
                      help='TSV score columns for mined_scores, e.g. laser:2,language_score:3')
  inputs.add_argument('--src_lang', help='FLORES-200 code of the source (files, TSV)')
  inputs.add_argument('--tgt_lang', help='FLORES-200 code of the target (files, TSV)')
  inputs.add_argument('--corpus', help='a registered corpus name')
  inputs.add_argument('--split', default='train', help='split of --corpus')
  inputs.add_argument('--directions', default='',
                      help='directions of --corpus, e.g. eng_Latn-hau_Latn,eng_Latn-zul_Latn '
                           '(default: English to every other language)')
  steps = parser.add_argument_group('steps')
  steps.add_argument('--preset', help=f'one of: {", ".join(pipeline.preset_names())}')
  steps.add_argument('--filters', help='comma-separated step names, in order: '
                     + ', '.join(cleaning_steps.step_names()))
  steps.add_argument('--gin_file', action='append', default=[],
                     help='extra gin file with step parameters (repeatable)')
  parser.add_argument('--output_dir', required=True, help='folder to create')
  parser.add_argument('--overwrite', action='store_true', help='replace --output_dir')
  parser.add_argument('--dropped', action='store_true',
                      help='also write every dropped pair with the step that dropped it')
  parser.add_argument('--runner', choices=('direct', 'beam'), default='direct',
                      help='direct: this process; beam: an Apache Beam pipeline')
  parser.add_argument('--chunk_lines', type=int, default=cleaning_io.DEFAULT_CHUNK_LINES,
                      help='pairs per chunk (the unit of parallel work)')
  parser.add_argument('--shard_dir', default=None,
                      help='beam: where workers write shards (e.g. gs://bucket/tmp)')
  return parser


def _sources(args) -> list[cleaning_io.Source]:
  given = [name for name, value in (('--src_file/--tgt_file', args.src_file or args.tgt_file),
                                    ('--tsv_file', args.tsv_file), ('--corpus', args.corpus))
           if value]
  if len(given) != 1:
    raise UserError('give exactly one input: --src_file and --tgt_file, --tsv_file, or '
                    f'--corpus (got {", ".join(given) or "none"})')
  if args.corpus:
    directions = None
    if args.directions:
      directions = [Direction.parse(d, '--directions') for d in args.directions.split(',')]
    return list(cleaning_io.corpus_sources(args.corpus, args.split, directions))
  for flag, value in (('--src_lang', args.src_lang), ('--tgt_lang', args.tgt_lang)):
    if not value:
      raise UserError(f'{flag} is required with file input')
    check_language(value, flag)
  if args.tsv_file:
    return [cleaning_io.TsvFile(args.tsv_file, args.src_lang, args.tgt_lang, args.src_column,
                                args.tgt_column, _score_columns(args.score_columns))]
  if not (args.src_file and args.tgt_file):
    raise UserError('--src_file and --tgt_file go together')
  return [cleaning_io.ParallelFiles(args.src_file, args.tgt_file, args.src_lang,
                                    args.tgt_lang)]


def _score_columns(spec: str) -> tuple[tuple[str, int], ...]:
  columns = []
  for item in filter(None, spec.split(',')):
    name, sep, column = item.partition(':')
    if not sep or not column.isdigit():
      raise UserError(f'--score_columns: {item!r} is not NAME:COLUMN')
    columns.append((name, int(column)))
  return tuple(columns)


def _gin_files(args) -> list[str]:
  """The preset's gin file, then --gin_file's: the steps' parameters."""
  if bool(args.preset) == bool(args.filters):
    raise UserError('give exactly one of --preset and --filters')
  return ([str(pipeline.preset_file(args.preset))] if args.preset else []) + args.gin_file


def _check_input_files(args) -> None:
  """The input files given exist: a typo is named before TensorFlow starts."""
  for flag in ('src_file', 'tgt_file', 'tsv_file'):
    if getattr(args, flag):
      files.check_input(getattr(args, flag), f'--{flag}')


def _step_names(args, gin_files: list[str], bindings: list[str]) -> list[str]:
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top  (gin names)
  gin_utils.parse_gin(gin_files, bindings)
  if args.filters:
    return [name.strip() for name in args.filters.split(',') if name.strip()]
  return list(configurables.cleaning_step_names())


def main(argv: list[str]) -> int:
  beam_args = argv[argv.index('--') + 1:] if '--' in argv else []
  argv = argv[:argv.index('--')] if '--' in argv else argv
  bindings, rest = gin_utils.split_gin_overrides(argv)
  args = _parser().parse_args(rest)
  files.check_output(args.output_dir, '--output_dir', folder=True)
  if args.chunk_lines < 1:
    raise UserError(f'--chunk_lines: must be >= 1, got {args.chunk_lines}')
  _check_input_files(args)
  gin_files = _gin_files(args)
  gin_utils.check_recipe(gin_files, bindings, inputs=False)
  cli.start_tensorflow()
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top
  specs = configurables.cleaning_specs(_step_names(args, gin_files, bindings))
  sources = _sources(args)
  options = dict(write_dropped=args.dropped, overwrite=args.overwrite,
                 chunk_lines=args.chunk_lines)
  if args.runner == 'beam':
    cli.import_beam()
    from t5x_mt.data.cleaning import beam  # pylint: disable=g-import-not-at-top  (heavy)
    report = beam.clean_with_beam(sources, specs, args.output_dir,
                                           beam_args=beam_args, shard_dir=args.shard_dir,
                                           **options)
  else:
    if beam_args:
      raise UserError('Beam pipeline options after -- need --runner=beam')
    report = pipeline.clean_locally(sources, specs, args.output_dir, **options)
  print(pipeline.format_report(report))
  print(json.dumps({'pairs_in': report['total']['pairs_in'],
                    'pairs_out': report['total']['pairs_out'],
                    'output_dir': args.output_dir}))
  return 0


if __name__ == '__main__':
  cli.run(main)
