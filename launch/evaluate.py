"""Scores a trained run: BLEU, chrF++ and spBLEU of its translations.

One direction from two line-aligned files prints one JSON object {bleu, chrf, spbleu, n}:

  python launch/evaluate.py --checkpoint_dir=/tmp/t5x_mt/demo --src_lang=eng_Latn \
      --tgt_lang=hau_Latn --src_file=dev.eng --ref_file=dev.hau [--spm_model=flores200.model]

--family_models=1=DIR,2=DIR,... (instead of --checkpoint_dir) translates each direction
with the run of its target's language family group, and --ctranslate2=DIR with the model
folder launch/export.py wrote, on CPU through CTranslate2 (for both, --tasks' scores are
printed and written to --output_json only).

--hyp_file=F instead of a model scores the translations F holds, one per line, against
--ref_file, as a model's translations are scored (a reranked n-best list, another system's
output): the same JSON object, and the same numbers for the translations translate.py
wrote. No model loads, so the model's and the languages' flags are left out; --src_file
is needed only for --baseline=copy:

  python launch/evaluate.py --hyp_file=out.hau --ref_file=dev.hau [--spm_model=F]

Registered mixtures or tasks (data_tasks) evaluate every direction's --split into
MODEL_DIR/eval/step_<N>.json (other splits: MODEL_DIR/<split>/eval/step_<N>.json, as
training writes 'test'; with --output_json into that file instead, leaving the run's
records as training wrote them) and print the per-direction and per-category table:

  python launch/evaluate.py --checkpoint_dir=/tmp/t5x_mt/demo --tasks=cldr_demo

spBLEU needs the FLORES-200 SentencePiece model file (--spm_model); without it spbleu is
null. --baseline=copy also scores the sources copied unchanged (under "copy"), the score a
model must beat; "looping" is the share of translations that repeat a word 4-gram 3 times
or more. The decoding flags override the run's config.gin.
"""

import argparse
import dataclasses
import json
from typing import Any

from t5x_mt.core import cli
from t5x_mt.config import decoding_flags
from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.core.errors import UserError

SINGLE_DIRECTION_FLAGS = ('src_lang', 'tgt_lang', 'src_file', 'ref_file')
# What only --tasks reads.
TASK_FLAGS = ('tasks', 'split', 'corpus', 'max_sentences')


def parse_flags(argv: list[str]) -> argparse.Namespace:
  parser = cli.argument_parser(__doc__)
  # What names, decodes or runs a model, which --hyp_file leaves out.
  model_flags = decoding_flags.add_decoding_flags(parser, family_models=True)
  decoding_flags.add_ctranslate2_flag(parser)
  model_flags += ['ctranslate2'] + cli.add_distributed_flags(parser)
  parser.add_argument('--src_lang', help='FLORES-200 code of --src_file, e.g. eng_Latn')
  parser.add_argument('--tgt_lang', help='FLORES-200 code of --ref_file, e.g. hau_Latn')
  parser.add_argument('--src_file', help='source sentences, one per line')
  parser.add_argument('--ref_file', help='reference translations, line-aligned with --src_file')
  parser.add_argument('--spm_model', default=None,
                      help='FLORES-200 SentencePiece model for spBLEU (default: no spBLEU)')
  parser.add_argument('--output_json', default=None,
                      help="write the scores here (with --tasks: instead of MODEL_DIR's eval/)")
  parser.add_argument('--tasks', default=None,
                      help='registered mixtures or tasks, comma-separated, instead of files')
  parser.add_argument('--split', default='validation', help='split of --tasks to evaluate')
  parser.add_argument('--corpus', default=None,
                      help="evaluate --tasks' directions on this registered corpus's --split "
                      "(e.g. flores200 for NTREX-128 tasks; default: the run's setting, "
                      "else each direction's own corpus)")
  parser.add_argument('--baseline', choices=['copy'], default=None,
                      help='also score the sources copied unchanged as translations, '
                      'beside the model')
  parser.add_argument('--max_sentences', type=int, default=None,
                      help="sentences per direction of --tasks (default: the run's setting)")
  parser.add_argument('--hyp_file', default=None,
                      help='translations to score against --ref_file, one per line, '
                      'instead of a model\'s (no model loads)')
  args = parser.parse_args(argv)
  if args.output_json is not None:
    files.check_output(args.output_json, '--output_json')
  if args.hyp_file is not None:
    _check_hypothesis_flags(parser, args, model_flags)
    return args
  if args.max_sentences is not None and args.max_sentences < 1:
    raise UserError(f'--max_sentences: must be >= 1, got {args.max_sentences}')
  given = [f'--{name}' for name in SINGLE_DIRECTION_FLAGS if getattr(args, name) is not None]
  if args.tasks is not None and given:
    raise UserError(f'--tasks: evaluates registered tasks; leave out {", ".join(given)}')
  if args.tasks is None:
    missing = [f'--{name}' for name in SINGLE_DIRECTION_FLAGS if getattr(args, name) is None]
    if missing:
      raise UserError(f'{", ".join(missing)}: required unless --tasks is given')
    decoding_flags.add_model_languages(args)
    languages.check_language(args.src_lang, '--src_lang')
    languages.check_language(args.tgt_lang, '--tgt_lang')
  _check_input_files(args)
  decoding_flags.decoding_overrides(args)  # Fails on bad decoding flags before anything loads.
  return args


def _check_hypothesis_flags(parser: argparse.ArgumentParser, args: argparse.Namespace,
                            model_flags: list[str]) -> None:
  """--hyp_file's company: --ref_file, --src_file for the copy baseline, and none of the
  flags that only a model or --tasks reads, which would change nothing."""
  unread = model_flags + ['src_lang', 'tgt_lang', *TASK_FLAGS]
  given = [f'--{name}' for name in unread if getattr(args, name) != parser.get_default(name)]
  if given:
    raise UserError('--hyp_file: scores the translations it holds, without a model; '
                    f'leave out {", ".join(given)}')
  if args.ref_file is None:
    raise UserError('--ref_file: required with --hyp_file')
  if args.baseline == 'copy' and args.src_file is None:
    raise UserError('--baseline: copy scores the sources as translations; give --src_file')
  _check_input_files(args)


def _check_input_files(args: argparse.Namespace) -> None:
  for flag in ('hyp_file', 'src_file', 'ref_file', 'spm_model'):
    if getattr(args, flag) is not None:
      files.check_input(getattr(args, flag), f'--{flag}')


def _read_aligned(*named_files: tuple[str, str]) -> list[list[str]]:
  """The lines of each (flag, file), which must all have as many lines, and some."""
  from t5x_mt.data import readers  # pylint: disable=g-import-not-at-top
  contents = [readers.read_lines(path) for _, path in named_files]
  (first_flag, first_file), first_lines = named_files[0], contents[0]
  for (flag, path), lines in zip(named_files[1:], contents[1:]):
    if len(lines) != len(first_lines):
      raise UserError(f'{first_file} has {len(first_lines)} lines but {path} has '
                      f'{len(lines)}: {first_flag} and {flag} must be line-aligned')
  if not first_lines:
    names = ' and '.join(path for _, path in named_files)
    raise UserError(f'{names} are empty: no sentences to score')
  return contents


def score_hypotheses(args: argparse.Namespace) -> dict[str, Any]:
  """Scores --hyp_file's lines against --ref_file as `evaluate_files` scores a model's
  translations (so a file translate.py wrote scores as evaluate.py scores the model)."""
  from t5x_mt.evaluation import scoring  # pylint: disable=g-import-not-at-top
  named = [('--hyp_file', args.hyp_file), ('--ref_file', args.ref_file)]
  if args.src_file is not None:
    named.append(('--src_file', args.src_file))
  hypotheses, references, *sources = _read_aligned(*named)
  return scoring.score_translations(sources[0] if sources else [], hypotheses, references,
                                    spm_model_path=args.spm_model, baseline=args.baseline)


def evaluate_files(args: argparse.Namespace, decoding: dict[str, Any]) -> dict[str, Any]:
  """Scores the translations of --src_file against --ref_file."""
  from t5x_mt.evaluation import scoring  # pylint: disable=g-import-not-at-top
  from t5x_mt.decoding import line_streaming  # pylint: disable=g-import-not-at-top
  from t5x_mt.export import ctranslate2_translator  # pylint: disable=g-import-not-at-top
  sources, references = _read_aligned(('--src_file', args.src_file),
                                      ('--ref_file', args.ref_file))
  translator = ctranslate2_translator.load_for_direction(args, decoding, args.src_lang,
                                                         args.tgt_lang)
  hypotheses = line_streaming.translate_lines(translator, sources, args.src_lang,
                                              args.tgt_lang, progress_bar=True,
                                              source_name=args.src_file)
  return scoring.score_translations(sources, hypotheses, references,
                                      spm_model_path=args.spm_model, baseline=args.baseline)


def _mixture(name: str, cache: Any) -> Any:
  """The mixture or task --tasks names, as a `mixtures.MixtureView`: the run's task
  cache's, else the registered one."""
  if cache:
    with cli.setting_named_as('MIXTURE_OR_TASK_NAME', '--tasks'):
      return cache.mixture_view(name)
  import data_tasks  # pylint: disable=g-import-not-at-top
  with cli.setting_named_as('MIXTURE_OR_TASK_NAME', '--tasks'):
    data_tasks.get_mixture_or_task(name)
    return data_tasks.mixture_view(name)


def _check_split(task_mixtures: list[Any], split: str, corpus: str | None) -> None:
  """A UserError before any translation when no corpus the tasks read (or --corpus) has
  the split: it names the splits they have."""
  from t5x_mt.data import corpora  # pylint: disable=g-import-not-at-top
  corpus_names = [corpus] if corpus else [
      member.corpus for mixture in task_mixtures for member in mixture.members]
  splits = dict.fromkeys(name for corpus_name in dict.fromkeys(corpus_names)
                         for name in corpora.get_corpus(corpus_name).splits())
  if split not in splits:
    read = f'--corpus {corpus}' if corpus else ', '.join(mixture.name for mixture in task_mixtures)
    raise UserError(f'--split: {read} has no {split!r} split (it has: {", ".join(splits)})')


def evaluate_tasks(args: argparse.Namespace, decoding: dict[str, Any]) -> dict[str, Any]:
  """Scores every direction of the --tasks and writes the run's eval/step_<N>.json."""
  from t5x_mt.evaluation import scoring  # pylint: disable=g-import-not-at-top
  from t5x_mt.core import processes  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  from t5x_mt.evaluation import per_direction  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import corpora  # pylint: disable=g-import-not-at-top
  from t5x_mt.export import ctranslate2_translator  # pylint: disable=g-import-not-at-top
  names = [name.strip() for name in args.tasks.split(',') if name.strip()]
  if not names:
    raise UserError('--tasks: give at least one registered mixture or task name')
  step = None
  if args.checkpoint_dir is not None:
    step = run_loading.checkpoint_step(args.checkpoint_dir, args.step)
  translator = ctranslate2_translator.load_model(args, decoding, step)
  # The (first) run's config.gin may import or name its own corpora and mixtures.
  run_loading.adopt_run_config(*decoding_flags.first_run(args))
  from t5x_mt.data import task_cache  # pylint: disable=g-import-not-at-top
  cache = task_cache.for_run(configurables.data_settings())
  if not cache:  # Without a cache, seqio's registry (TensorFlow).
    from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
    from_gin.configure_data()
  task_mixtures = [_mixture(name, cache) for name in names]
  if args.family_models is not None:  # A missing group fails before any translation.
    for mixture in task_mixtures:
      for direction in mixture.directions():
        translator.model_for(direction.tgt_lang)
  options: dict[str, Any] = {'split': args.split}
  if args.max_sentences is not None:
    options['max_sentences'] = args.max_sentences
  if args.corpus is not None:
    try:  # An unknown corpus fails before any translation.
      corpora.get_corpus(args.corpus)
    except UserError as error:
      raise UserError(f'--corpus: {error}') from None
    options['corpus'] = args.corpus
  _check_split(task_mixtures, args.split, args.corpus)
  if args.spm_model is not None:
    options['spm_model_path'] = args.spm_model
  if args.baseline is not None:
    options['baseline'] = args.baseline
  # The flags given replace the run's own evaluation settings (its config.gin).
  settings = dataclasses.replace(configurables.eval_config(), **options)
  direction_scores = {}
  for mixture in task_mixtures:
    summary = per_direction.evaluate_directions(translator, mixture, step, settings,
                                                progress_bar=True)
    direction_scores.update(summary['directions'])
  summary = scoring.summarize(step, direction_scores)
  summary.update(split=args.split, task=', '.join(names))
  # The scores of family models and of an export belong to no run's record; with
  # --output_json the scores go there alone, so an evaluation under other settings never
  # replaces the run's own record.
  if args.checkpoint_dir is not None and args.output_json is None and processes.is_primary():
    scoring.write_eval_json(args.checkpoint_dir, summary, args.split)
  return summary


def main(argv: list[str]) -> int:
  args = parse_flags(argv)
  if args.hyp_file is not None:  # One process, and neither TensorFlow nor JAX.
    result = score_hypotheses(args)
    print(json.dumps(result, sort_keys=True), flush=True)
    _write_scores(args.output_json, result)
    return 0
  decoding = decoding_flags.decoding_overrides(args)
  cli.start_jax(args)
  from t5x_mt.core import processes  # pylint: disable=g-import-not-at-top
  if args.tasks is None:
    result = evaluate_files(args, decoding)
    print(json.dumps(result, sort_keys=True), flush=True)
  else:
    result = evaluate_tasks(args, decoding)
    from t5x_mt.evaluation import scoring  # pylint: disable=g-import-not-at-top
    print(scoring.format_table(result), flush=True)
  if processes.is_primary():
    _write_scores(args.output_json, result)
  return 0


def _write_scores(output_json: str | None, result: dict[str, Any]) -> None:
  if output_json is not None:
    files.write_text_atomically(output_json, json.dumps(result, indent=2, sort_keys=True) + '\n')


if __name__ == '__main__':
  cli.run(main)
