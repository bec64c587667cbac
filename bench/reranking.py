"""Reranking and MBR on a run's own test split: what each feature set gains over the beam.

  python bench/reranking.py [--run=/tmp/t5x_mt/demo] [--mixture=cldr_demo]
      [--right_to_left=/tmp/t5x_mt/demo_r2l]
      [--language_model=/tmp/t5x_mt/demo_lm] [--backward=RUN] [--beam_size=8] [--nbest=8]
      [--tune_split=validation] [--report_split=test] [--metric=chrf++]
      [--work_dir=/tmp/t5x_mt/rerank_bench]

Every direction of the run's mixture is decoded on both splits into n-best lists, as
`translate.py --nbest` decodes them (`Translator.translate_nbest`), written under
--work_dir in the n-best format and read back from there on a later run. The hypotheses
get the features of `launch/rerank.py`: the list's own (forward, forward_normalized,
length), backward (--backward, by default the run itself, which translates both ways),
right-to-left and language-model scores (a run whose folder is missing, or given as '',
leaves its rows out). One
weight vector per feature set is tuned on --tune_split, pooled over directions, for
corpus --metric, and applied to --report_split; MBR needs no tuning. Naming one split for
both tunes on the first half of each direction's sentences and reports on the second
(FLORES-200's dev split, for a run of the real-data recipe:
--tune_split=dev --report_split=dev).

Each figure is the mean over directions of sacreBLEU's corpus chrF++ or BLEU on the
report split (the ALL figure of an evaluation), set against the list's first hypothesis,
beam search's own choice.
"""

import argparse
import dataclasses
import os
from typing import Any

import numpy as np

from t5x_mt.core import cli
from t5x_mt.evaluation import scoring
from t5x_mt.decoding import nbest
from t5x_mt.decoding import reranking

NBEST_FEATURES = (nbest.FORWARD, nbest.FORWARD_NORMALIZED, nbest.LENGTH)
RUN_FEATURES = (reranking.BACKWARD, reranking.RIGHT_TO_LEFT, reranking.LANGUAGE_MODEL)


def parse_flags() -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--run', default='/tmp/t5x_mt/demo', help='the forward run')
  parser.add_argument('--mixture', default='cldr_demo', help="the run's mixture")
  parser.add_argument('--backward', default=None,
                      help='run translating the other way (default: --run itself)')
  parser.add_argument('--right_to_left', default='/tmp/t5x_mt/demo_r2l')
  parser.add_argument('--language_model', default='/tmp/t5x_mt/demo_lm')
  parser.add_argument('--beam_size', type=int, default=8)
  parser.add_argument('--nbest', type=int, default=8)
  parser.add_argument('--tune_split', default='validation')
  parser.add_argument('--report_split', default='test')
  parser.add_argument('--metric', choices=reranking.METRICS, default='chrf++')
  parser.add_argument('--random_starts', type=int, default=20)
  parser.add_argument('--sentences', type=int, default=None,
                      help='at most this many sentences per direction and split (a quick look)')
  parser.add_argument('--work_dir', default='/tmp/t5x_mt/rerank_bench',
                      help='where the n-best lists are kept between runs')
  return parser.parse_args()


def split_pairs(mixture: str, split: str, sentences: int | None
                ) -> dict[str, tuple[Any, list[str], list[str]]]:
  """{direction name: (direction, sources, references)} of `split`, as the run's
  evaluations read them (under the run's config.gin, loaded with its model)."""
  from t5x_mt.evaluation import per_direction  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import mixtures  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top
  config = dataclasses.replace(configurables.eval_config(), max_sentences=sentences)
  return {direction.name: (direction, *map(list, zip(*pairs)))
          for direction, pairs in per_direction.evaluation_pairs(
              mixtures.mixture_view(mixture), config, split)}


def nbest_lists(translator, split: str, pairs, args: argparse.Namespace
                ) -> dict[str, reranking.Candidates]:
  """Each direction's candidates on `split`, decoded once and kept under --work_dir."""
  candidates = {}
  for name, (direction, sources, _) in pairs.items():
    path = os.path.join(args.work_dir, f'beam{args.beam_size}_n{args.nbest}', split,
                        f'{name}.{len(sources)}.nbest')
    if not os.path.exists(path):
      lists = translator.translate_nbest(sources, direction.src_lang, direction.tgt_lang,
                                         args.nbest)
      nbest.write(path, [[nbest.Entry(h.text, nbest.search_features(h.log_prob, h.score,
                                                                    h.length), h.score)
                          for h in hypotheses] for hypotheses in lists])
      print(f'decoded {split} {name}: {len(sources)} sentences', flush=True)
    candidates[name] = reranking.from_nbest(nbest.read(path), path)
  return candidates


def add_features(candidates: dict[str, reranking.Candidates], pairs, scorers
                 ) -> dict[str, reranking.Candidates]:
  return {name: reranking.add_run_features(
      candidates[name], pairs[name][1], pairs[name][0].src_lang, pairs[name][0].tgt_lang,
      scorers) for name in candidates}


# Each direction's candidates and their references.
Lists = dict[str, tuple[reranking.Candidates, list[str]]]


def pooled(lists: Lists, names: tuple[str, ...]) -> tuple[reranking.Candidates, list[str]]:
  """Every direction's candidates as one list, with the features `names`, and their
  references."""
  parts = [candidates.only(names) for candidates, _ in lists.values()]
  return (reranking.Candidates([h for part in parts for h in part.hypotheses], names,
                               [f for part in parts for f in part.features]),
          [reference for _, references in lists.values() for reference in references])


def halves(lists: Lists) -> tuple[Lists, Lists]:
  """(the first half of each direction's sentences, the second half)."""
  first, second = {}, {}
  for name, (candidates, references) in lists.items():
    middle = candidates.sentences // 2
    for half, part in ((first, slice(None, middle)), (second, slice(middle, None))):
      half[name] = (dataclasses.replace(candidates, hypotheses=candidates.hypotheses[part],
                                        features=candidates.features[part]),
                    references[part])
  return first, second


def mean_scores(lists: Lists, choices: dict[str, list[int]]) -> dict[str, float]:
  """Mean over directions of corpus chrF++ and BLEU of `choices`."""
  direction_scores = [scoring.score_direction(candidates.chosen(choices[name]), references)
                      for name, (candidates, references) in lists.items()]
  return {metric: float(np.mean([scores[metric] for scores in direction_scores]))
          for metric in ('chrf', 'bleu')}


def load_scorers(translator, args: argparse.Namespace) -> dict[str, Any]:
  """The scorer of each feature whose run exists, the forward run itself as backward by
  default (it translates both ways)."""
  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import run_loading
  from t5x_mt.decoding import sequence_scoring
  # pylint: enable=g-import-not-at-top
  scorers = {reranking.BACKWARD: (sequence_scoring.RunScorer(translator) if args.backward is None
                                  else run_loading.load_scorer(args.backward))}
  for feature, run_dir in ((reranking.RIGHT_TO_LEFT, args.right_to_left),
                           (reranking.LANGUAGE_MODEL, args.language_model)):
    if run_dir and os.path.exists(run_dir):
      scorers[feature] = run_loading.load_scorer(run_dir)
      if scorers[feature].kind != reranking.RUN_FEATURES[feature]:
        raise SystemExit(f'{run_dir} is a {scorers[feature].kind} run, not {feature}')
    else:
      print(f'{feature}: no run at {run_dir}; its rows are left out', flush=True)
  return scorers


def main() -> None:
  args = parse_flags()
  cli.start_tensorflow()
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  translator = run_loading.load_translator(args.run, beam_size=args.beam_size)
  from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
  run_loading.adopt_run_config(args.run)
  from_gin.configure_data()  # The run's data settings, corpora and mixtures.
  splits = dict.fromkeys((args.tune_split, args.report_split))
  pairs = {split: split_pairs(args.mixture, split, args.sentences) for split in splits}
  candidates = {split: nbest_lists(translator, split, pairs[split], args) for split in splits}
  scorers = load_scorers(translator, args)
  lists = {split: {name: (with_features, pairs[split][name][2]) for name, with_features in
                   add_features(candidates[split], pairs[split], scorers).items()}
           for split in splits}
  if len(splits) == 1:  # One split: tune on the first half, report on the second.
    tune, report = halves(lists[args.tune_split])
    tune_name, report_name = f'{args.tune_split} 1st half', f'{args.report_split} 2nd half'
  else:
    tune, report = lists[args.tune_split], lists[args.report_split]
    tune_name, report_name = args.tune_split, args.report_split
  feature_sets = {'n-best features': NBEST_FEATURES}
  for feature in scorers:
    feature_sets[f'+{feature}'] = (*NBEST_FEATURES, feature)
  if len(scorers) > 1:
    feature_sets['+all'] = (*NBEST_FEATURES, *scorers)
  rows = {'first best': {name: [0] * c.sentences for name, (c, _) in report.items()}}
  for label, names in feature_sets.items():
    tuned = reranking.tune(*pooled(tune, names), args.metric,
                           random_starts=args.random_starts)
    weights = tuned.weights.vector(names, label)
    rows[label] = {name: c.only(names).choose(weights) for name, (c, _) in report.items()}
    print(f'{label}: tuned on {tune_name} {args.metric} {tuned.first_best:.2f} -> '
          f'{tuned.reranked:.2f}, weights '
          + ' '.join(f'{n}={w:.3g}' for n, w in tuned.weights.features.items()), flush=True)
  for label, weighted in (('MBR uniform', False), ('MBR weighted', True)):
    rows[label] = {name: reranking.mbr_choices(c, weighted) for name, (c, _) in report.items()}
  scores = {label: mean_scores(report, choices) for label, choices in rows.items()}
  baseline = scores['first best']
  directions = len(report)
  print(f'\n{report_name}, mean of {directions} directions, beam {args.beam_size}, '
        f'{args.nbest}-best lists, weights tuned on {tune_name} for {args.metric}:')
  print(f'{"":<22}{"chrF++":>8}{"BLEU":>8}')
  for label, row in scores.items():
    print(f'{label:<22}{row["chrf"]:>8.2f}{row["bleu"]:>8.2f}')
  print()
  for label, row in scores.items():
    if label == 'first best':
      continue
    for metric, unit in (('chrf', 'chrF++'), ('bleu', 'BLEU')):
      print(f'{report_name} {unit} {label}: ours={row[metric]:.2f} {unit} '
            f'first_best={baseline[metric]:.2f} {unit} '
            f'ratio={row[metric] / baseline[metric]:.4f}')


if __name__ == '__main__':
  main()
