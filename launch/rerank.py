"""Reranks n-best lists (translate.py --nbest) with weights tuned on a dev set, or by MBR.

Tune on a dev set, saving the weights (prints the dev scores of the decoder's first
choices and of the reranked ones):

  python launch/rerank.py --nbest=dev.nbest --source=dev.eng --src_lang=eng_Latn \\
      --tgt_lang=hau_Latn [--backward=RUN] [--right_to_left=RUN] [--language_model=RUN] \\
      --reference=dev.hau --metric=chrf++ --save_weights=weights.json [--output=dev.out]

Apply them to a test set's lists, with the same runs (--reference also prints scores):

  python launch/rerank.py --nbest=test.nbest --source=test.eng --src_lang=eng_Latn \\
      --tgt_lang=hau_Latn [the same runs] --weights=weights.json --output=test.out

Or choose by minimum Bayes risk, the hypothesis with the highest expected chrF++ against
its list, uniformly or (--mbr_weighted) under the model's probabilities:

  python launch/rerank.py --nbest=test.nbest --mbr [--mbr_weighted] --output=test.out

or against N candidates per source that a run decodes here instead of a list: epsilon
samples (Freitag et al. 2023; --mbr_samples chooses sampling unless --search says
otherwise), or with --search=beam --beam_size=N the beam's N best:

  python launch/rerank.py --checkpoint_dir=RUN --source=test.eng --src_lang=eng_Latn \
      --tgt_lang=hau_Latn --mbr_samples=16 --epsilon=0.02 --output=test.out

The decoding flags are translate.py's; --seed seeds both the samples and the random
starts of tuning, and --batch_size counts sentences to decode or pairs to score.

Each hypothesis's features are those of its n-best line plus one per run given: --backward
(a run translating tgt_lang -> src_lang) scores the source given the hypothesis,
--right_to_left and --language_model score the hypothesis (docs/reranking.md).
"""

import argparse
import json
from typing import Any

from t5x_mt.config import decoding_flags
from t5x_mt.core import cli
from t5x_mt.evaluation import scoring
from t5x_mt.core import files
from t5x_mt.core import languages
from t5x_mt.decoding import nbest
from t5x_mt.decoding import reranking
from t5x_mt.data import readers
from t5x_mt.core.errors import UserError

RUN_FLAGS = ('backward', 'right_to_left', 'language_model')


def parse_flags(argv: list[str]) -> argparse.Namespace:
  parser = cli.argument_parser(__doc__)
  decoding = decoding_flags.add_decoding_flags(parser)
  cli.add_distributed_flags(parser)
  parser.add_argument('--nbest', default=None,
                      help='n-best list (translate.py --nbest), unless --mbr_samples')
  parser.add_argument('--source', default=None,
                      help='the source sentences of the lists, one per line (needed with runs)')
  parser.add_argument('--src_lang', default=None, help='FLORES-200 code of --source')
  parser.add_argument('--tgt_lang', default=None, help='FLORES-200 code of the hypotheses')
  parser.add_argument('--backward', default=None,
                      help='MODEL_DIR of a run translating tgt_lang -> src_lang')
  parser.add_argument('--right_to_left', default=None,
                      help='MODEL_DIR of a right-to-left run translating src_lang -> tgt_lang')
  parser.add_argument('--language_model', default=None,
                      help='MODEL_DIR of a language model of tgt_lang')
  parser.add_argument('--reference', default=None,
                      help='reference translations: tune on them, or print scores against them')
  parser.add_argument('--metric', choices=('chrf++', 'bleu'), default='chrf++',
                      help='corpus metric to tune for (default: chrf++)')
  parser.add_argument('--save_weights', default=None,
                      help='tune on --reference and write the weights here (JSON)')
  parser.add_argument('--random_starts', type=int, default=20,
                      help='random starting points of the tuning, besides the beam\'s own')
  parser.add_argument('--weights', default=None, help='apply the weights of this file')
  parser.add_argument('--mbr', action='store_true', help='choose by minimum Bayes risk')
  parser.add_argument('--mbr_weighted', action='store_true',
                      help='weigh MBR by the model probabilities softmax(forward / '
                      '--mbr_temperature) instead of uniformly')
  parser.add_argument('--mbr_temperature', type=float, default=1.0,
                      help='temperature of --mbr_weighted (default: 1, the model\'s own)')
  parser.add_argument('--mbr_samples', type=int, default=0,
                      help='choose by MBR among this many candidates per --source sentence '
                      'that the run (--checkpoint_dir or --ensemble) decodes here, instead '
                      'of --nbest: samples (by default), or the beam\'s best')
  parser.add_argument('--output', default=None,
                      help='write the chosen hypotheses here, one per source sentence')
  args = parser.parse_args(argv)
  _check_flags(args)
  _check_candidates(args, {name: parser.get_default(name) for name in decoding
                           if name not in ('batch_size', 'seed')})
  return args


def _check_candidates(args: argparse.Namespace, decoding_defaults: dict[str, Any]) -> None:
  """Candidates from --nbest, or decoded with --mbr_samples by the model the decoding
  flags name; the decoding flags (`decoding_defaults`: their defaults) only with
  --mbr_samples."""
  if not args.mbr_samples:
    if args.nbest is None:
      raise UserError('--nbest: give the n-best list to rerank (or --mbr_samples and a run)')
    given = [f'--{name}' for name, default in decoding_defaults.items()
             if getattr(args, name) != default]
    if given:
      raise UserError(f'{given[0]}: decodes candidates, only with --mbr_samples')
    return
  if args.mbr_samples < 2:
    raise UserError(f'--mbr_samples: MBR needs at least 2 candidates, got {args.mbr_samples}')
  if args.nbest is not None:
    raise UserError('--nbest: not with --mbr_samples, which decodes the candidates')
  for flag in ('source', 'src_lang', 'tgt_lang'):
    if getattr(args, flag) is None:
      raise UserError(f'--{flag}: needed with --mbr_samples')
  args.decoding = {'search': 'sampling', **decoding_flags.decoding_overrides(args)}


def _check_flags(args: argparse.Namespace) -> None:
  """Refuses flags that do not make one command, before anything is read."""
  modes = [flag for flag, given in (('--save_weights', args.save_weights is not None),
                                    ('--weights', args.weights is not None),
                                    ('--mbr', args.mbr or args.mbr_samples)) if given]
  if len(modes) != 1:
    raise UserError('give exactly one of --save_weights (tune), --weights (apply) and --mbr'
                    + (f'; got {" and ".join(modes)}' if modes else ''))
  runs = [f'--{flag}' for flag in _runs(args)]
  mbr = args.mbr or args.mbr_samples
  if mbr and runs:
    raise UserError(f'{runs[0]}: --mbr chooses from the n-best list alone; leave out the runs')
  if not mbr and (args.mbr_weighted or args.mbr_temperature != 1.0):
    raise UserError('--mbr_weighted, --mbr_temperature: only with --mbr')
  if args.mbr_temperature <= 0:
    raise UserError(f'--mbr_temperature: must be > 0, got {args.mbr_temperature}')
  if args.save_weights is not None and args.reference is None:
    raise UserError('--reference: needed to tune (--save_weights)')
  if (mbr or args.weights is not None) and args.output is None:
    raise UserError('--output: needed to apply weights or MBR')
  if runs:
    for flag in ('source', 'src_lang', 'tgt_lang'):
      if getattr(args, flag) is None:
        raise UserError(f'--{flag}: needed with {", ".join(runs)}')
  for flag in ('src_lang', 'tgt_lang'):
    if getattr(args, flag) is not None:
      languages.check_language(getattr(args, flag), f'--{flag}')
  if args.batch_size is not None and args.batch_size < 1:
    raise UserError(f'--batch_size: must be >= 1, got {args.batch_size}')
  if args.random_starts < 0:
    raise UserError(f'--random_starts: must be >= 0, got {args.random_starts}')
  if args.seed is not None and args.seed < 0:
    raise UserError(f'--seed: must be >= 0, got {args.seed}')
  for flag in ('save_weights', 'output'):
    if getattr(args, flag) is not None:
      files.check_output(getattr(args, flag), f'--{flag}')
  for flag in ('nbest', 'source', 'reference', 'weights'):
    if getattr(args, flag) is not None:
      files.check_input(getattr(args, flag), f'--{flag}')
  for flag, run_dir in _runs(args).items():
    files.check_input(run_dir, f'--{flag}', folder=True)


def main(argv: list[str]) -> int:
  args = parse_flags(argv)
  sources = references = None
  if args.source is not None:
    sources = readers.read_lines(args.source)
  if args.mbr_samples:
    candidates = _decoded_candidates(args, sources)
  else:
    candidates = reranking.from_nbest(nbest.read(args.nbest), args.nbest)
  lists = args.nbest or args.source  # What names the lists in errors.
  if sources is not None:
    reranking.check_aligned(candidates, sources, lists, args.source)
  if args.reference is not None:
    references = readers.read_lines(args.reference)
    reranking.check_aligned(candidates, references, lists, args.reference)
  weights = None
  if args.weights is not None:  # Checked against the runs' features before they load.
    weights = reranking.load_weights(args.weights)
    weights.vector((*candidates.feature_names, *_runs(args)), args.weights)
  candidates = _add_run_features(candidates, sources, args)
  if args.mbr or args.mbr_samples:
    choices = reranking.mbr_choices(candidates, args.mbr_weighted, args.mbr_temperature)
  elif weights is not None:
    choices = candidates.choose(weights.vector(candidates.feature_names, args.weights))
  else:
    tuned = reranking.tune(candidates, references, args.metric,
                           random_starts=args.random_starts,
                           seed=0 if args.seed is None else args.seed)
    reranking.save_weights(args.save_weights, tuned.weights,
                           {'first_best': tuned.first_best, 'reranked': tuned.reranked,
                            'sentences': candidates.sentences})
    choices = candidates.choose(tuned.weights.vector(candidates.feature_names, args.save_weights))
  if args.output is not None:
    files.write_text_atomically(
        args.output, ''.join(line + '\n' for line in candidates.chosen(choices)))
  if references is not None:
    print(json.dumps(_scores(candidates, choices, references), sort_keys=True))
  return 0


def _decoded_candidates(args: argparse.Namespace, sources: list[str]) -> reranking.Candidates:
  """--mbr_samples candidates of each source, decoded by the run the flags name, with the
  features translate.py --nbest writes."""
  cli.start_jax(args)
  from t5x_mt.decoding import line_streaming  # pylint: disable=g-import-not-at-top  (loads JAX)
  translator = decoding_flags.load_model(args, args.step, args.decoding)
  lists = line_streaming.stream_translations(
      translator, sources, args.src_lang, args.tgt_lang, total=len(sources),
      progress_bar=True, source_name=args.source, nbest=args.mbr_samples)
  return reranking.from_hypotheses([hypotheses for chunk in lists for hypotheses in chunk],
                                   args.source)


def _runs(args: argparse.Namespace) -> dict[str, str]:
  """{feature name: MODEL_DIR} of the run flags given; a feature is named as its flag."""
  return {flag: getattr(args, flag) for flag in RUN_FLAGS if getattr(args, flag) is not None}


def _add_run_features(candidates: reranking.Candidates, sources: list[str] | None,
                      args: argparse.Namespace) -> reranking.Candidates:
  """`candidates` with the features of the runs given, each loaded and checked to be
  the kind of run its flag needs."""
  runs = _runs(args)
  if not runs:
    return candidates
  cli.start_tensorflow()
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  for flag, run_dir in runs.items():
    scorer = run_loading.load_scorer(run_dir, batch_size=args.batch_size or 64)
    if scorer.kind != reranking.RUN_FEATURES[flag]:
      raise UserError(f'--{flag}: {run_dir} is a {scorer.kind} run; it needs a '
                      f'{reranking.RUN_FEATURES[flag]} run')
    try:
      candidates = reranking.add_run_features(candidates, sources, args.src_lang,
                                              args.tgt_lang, {flag: scorer}, progress_bar=True)
    except UserError as error:
      raise UserError(f'--{flag}: {run_dir}: {error}') from None
  return candidates


def _scores(candidates: reranking.Candidates, choices: list[int], references: list[str]
            ) -> dict:
  """BLEU and chrF++ of the decoder's first choices and of `choices`."""
  scores = {}
  for name, chosen in (('first_best', [0] * candidates.sentences), ('chosen', choices)):
    direction_scores = scoring.score_direction(candidates.chosen(chosen), references)
    scores[name] = {metric: direction_scores[metric] for metric in ('bleu', 'chrf')}
  return {'n': candidates.sentences, **scores}


if __name__ == '__main__':
  cli.run(main)
