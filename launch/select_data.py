"""Selects the candidate pairs most like an in-domain sample, for gradual fine-tuning.

  python launch/select_data.py --candidates=DIR[,DIR...] --in_domain=DIR \\
      --output_dir=/tmp/t5x_mt/gradual [--method=classifier|cross_entropy] \\
      [--thresholds=0.7,0.8,0.9,0.99] [--held_out=DIR] [--seed=0]

Candidates are launch/clean.py folders. The in-domain sample (and the held-out one) is a
clean.py folder or a multi-way aligned one (FLORES-200's <code>.dev files, NTREX-128).
Each candidate direction is scored by a scorer trained on the sample's pairs of that
direction (or its reverse): --method=classifier (TenTrans: logistic regression over
character n-grams, the sample against random candidates) scores the probability of
in-domain, and the thresholds apply to it; --method=cross_entropy (bilingual Moore-Lewis
over character n-gram models) scores cross-entropy differences, and the thresholds apply
to their percentile ranks among the direction's candidates (0.9 keeps the top 10%).

Writes <D>/threshold_<t>/ per threshold (clean.py folders, each inside the one before),
<D>/scores/<src>-<tgt>.tsv and <D>/report.json (pairs kept and, with --held_out, the share
of the held-out sample at or above each threshold), under a temporary name renamed to D
once complete. A sample in another language than its direction (most of each side, where
language identification covers the language) is refused.
"""

import argparse

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.data.selection import selection_pipeline


def _parser() -> argparse.ArgumentParser:
  parser = cli.argument_parser(__doc__)
  parser.add_argument('--candidates', required=True,
                      help='comma-separated launch/clean.py folders to select from')
  parser.add_argument('--in_domain', required=True,
                      help='the in-domain sample: a clean.py folder or a multi-way one')
  parser.add_argument('--held_out', default=None,
                      help='a held-out in-domain sample (same layouts) to measure recall on')
  parser.add_argument('--output_dir', required=True, help='folder to create')
  parser.add_argument('--overwrite', action='store_true',
                      help='replace an earlier selection in --output_dir')
  parser.add_argument('--method', default='classifier',
                      help='classifier (default): thresholds on the probability of in-domain; '
                           'cross_entropy: thresholds on percentile ranks')
  parser.add_argument('--thresholds',
                      default=','.join(map(str, selection_pipeline.DEFAULT_THRESHOLDS)),
                      help='ascending, in [0, 1]: one output folder each')
  parser.add_argument('--seed', type=int, default=0,
                      help="the classifier's draw of random candidates as negatives")
  return parser


def main(argv: list[str]) -> int:
  args = _parser().parse_args(argv)
  files.check_output(args.output_dir, '--output_dir', folder=True)
  selection_pipeline.check_method(args.method)
  thresholds = selection_pipeline.parse_thresholds(args.thresholds, '--thresholds')
  selection_pipeline.check_output_dir(args.output_dir, args.overwrite)
  candidates = selection_pipeline.read_candidates(
      [folder for folder in args.candidates.split(',') if folder], '--candidates')
  samples = selection_pipeline.read_samples(args.in_domain, '--in_domain', candidates)
  held_out = None
  if args.held_out:
    held_out = selection_pipeline.read_samples(args.held_out, '--held_out', candidates)
  report = selection_pipeline.select_in_domain(
      candidates, samples, held_out, args.output_dir, method=args.method,
      thresholds=thresholds, seed=args.seed)
  print(selection_pipeline.format_report(report))
  return 0


if __name__ == '__main__':
  cli.run(main)
