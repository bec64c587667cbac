"""MBR over epsilon samples against MBR over the beam's n-best and against plain beam
search, on a run's own test split.

  python bench/mbr_sampling.py [--run=/tmp/t5x_mt/demo] [--mixture=cldr_demo]
      [--split=test] [--beam_size=4] [--samples=16] [--epsilon=0.02] [--seed=0]
      [--sentences=N]

Every direction of the run's mixture is decoded three ways, as `launch/rerank.py` decodes
its candidates: beam search's best (what translate.py writes), the minimum-Bayes-risk
choice (expected sentence chrF++, uniform over the list) among the beam's --beam_size
best, and the MBR choice among --samples epsilon samples (Freitag et al. 2023, "Epsilon
Sampling Rocks"). Each figure is the mean over directions of sacreBLEU's corpus chrF++
(and BLEU) of the choices, as an evaluation's ALL row.
"""

import argparse
import dataclasses
from typing import Any

import numpy as np

from t5x_mt.core import cli


def parse_flags() -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--run', default='/tmp/t5x_mt/demo', help='the trained run')
  parser.add_argument('--mixture', default='cldr_demo', help="the run's mixture")
  parser.add_argument('--split', default='test')
  parser.add_argument('--beam_size', type=int, default=4)
  parser.add_argument('--samples', type=int, default=16)
  parser.add_argument('--epsilon', type=float, default=0.02)
  parser.add_argument('--seed', type=int, default=0)
  parser.add_argument('--sentences', type=int, default=None,
                      help='at most this many sentences per direction (a quick look)')
  return parser.parse_args()


def candidate_lists(translator, pairs, nbest: int) -> dict[str, Any]:
  """{direction name: (rerank candidates, references)} of `nbest` hypotheses a sentence."""
  from t5x_mt.decoding import reranking  # pylint: disable=g-import-not-at-top
  lists = {}
  for direction, direction_pairs in pairs:
    sources, references = map(list, zip(*direction_pairs))
    hypotheses = translator.translate_nbest(sources, direction.src_lang, direction.tgt_lang,
                                            nbest)
    lists[direction.name] = (reranking.from_hypotheses(hypotheses, direction.name),
                             references)
    print(f'decoded {direction.name}: {len(sources)} sentences x {nbest}', flush=True)
  return lists


def mean_scores(lists: dict[str, Any], choose) -> dict[str, float]:
  """Mean over directions of corpus chrF++ and BLEU of the hypotheses `choose` picks."""
  from t5x_mt.evaluation import scoring  # pylint: disable=g-import-not-at-top
  scores = [scoring.score_direction(candidates.chosen(choose(candidates)), references)
            for candidates, references in lists.values()]
  return {metric: float(np.mean([row[metric] for row in scores])) for metric in ('chrf', 'bleu')}


def main() -> None:
  args = parse_flags()
  cli.start_tensorflow()
  # pylint: disable=g-import-not-at-top
  from data_tasks import from_gin
  from t5x_mt.config import configurables
  from t5x_mt.config import run_loading
  from t5x_mt.data import mixtures
  from t5x_mt.decoding import reranking
  from t5x_mt.evaluation import per_direction
  # pylint: enable=g-import-not-at-top
  run_loading.adopt_run_config(args.run)
  from_gin.configure_data()  # The run's corpora and mixtures.
  config = dataclasses.replace(configurables.eval_config(), max_sentences=args.sentences)
  pairs = list(per_direction.evaluation_pairs(mixtures.mixture_view(args.mixture), config,
                                              args.split))
  beam = run_loading.load_translator(args.run, search='beam', beam_size=args.beam_size)
  sampler = run_loading.load_translator(args.run, search='sampling', epsilon=args.epsilon,
                                        seed=args.seed)
  beam_lists = candidate_lists(beam, pairs, args.beam_size)
  sample_lists = candidate_lists(sampler, pairs, args.samples)
  rows = {
      f'beam {args.beam_size}': mean_scores(beam_lists, lambda c: [0] * c.sentences),
      f'MBR, beam {args.beam_size}-best': mean_scores(beam_lists, reranking.mbr_choices),
      f'MBR, {args.samples} epsilon samples': mean_scores(sample_lists,
                                                          reranking.mbr_choices),
  }
  print(f'\n{args.split}, mean of {len(pairs)} directions, epsilon {args.epsilon}')
  print(f'{"":<30}{"chrF++":>8}{"BLEU":>8}')
  for label, row in rows.items():
    print(f'{label:<30}{row["chrf"]:>8.2f}{row["bleu"]:>8.2f}')
  print()
  beam_row, nbest_row, sampled_row = rows.values()
  for metric, unit in (('chrf', 'chrF++'), ('bleu', 'BLEU')):
    print(f'mbr_epsilon_samples_{metric}: ours={sampled_row[metric]:.2f} {unit} '
          f'beam={beam_row[metric]:.2f} {unit} '
          f'ratio={sampled_row[metric] / beam_row[metric]:.3f}')
    print(f'mbr_epsilon_samples_vs_nbest_{metric}: ours={sampled_row[metric]:.2f} {unit} '
          f'mbr_beam_nbest={nbest_row[metric]:.2f} {unit} '
          f'ratio={sampled_row[metric] / nbest_row[metric]:.3f}')


if __name__ == '__main__':
  main()
