"""Calibrates the MDL repeat filter's threshold on FLORES-200 dev, per unit.

  python bench/mdl_calibration.py [--max_flagged=0.005] [--throughput]

For each unit (characters, whitespace tokens) it runs the filter itself over every
FLORES-200 dev sentence of the shared data folder (every language there) and finds, for
each sentence, the lowest threshold on a grid (multiples of 0.05) at which the filter
flags it: a sentence flagged at one threshold is flagged at every higher one, since the
search visits the same segmentations and stops at the first under the threshold. It
proposes the largest grid threshold that flags no more than `max_flagged` of all clean
sentences, prints how many it flags per language, and scores examples of repeat-pattern
web noise: their searched MDL per unit and whether the filter flags them. The figure line
compares the flagged share of clean text with `max_flagged`.

With --throughput it times the filter instead, at its default settings, on every 4th
sentence of FLORES-200 dev and of NTREX-128 (best of 3 runs in this one process: pin it
to one core), against the 2,000 sentences/s per core the filter must keep.
"""

import argparse
import time

import numpy as np

from t5x_mt.data import readers
from t5x_mt.data.cleaning import mdl

GRIDS = {'chars': np.round(np.arange(0.8, 1.501, 0.05), 2),
         'tokens': np.round(np.arange(1.0, 2.001, 0.05), 2)}
NOISE = [
    # Spam listings and repeated product names.
    'Buy cheap viagra | Buy cheap cialis | Buy cheap levitra | Buy cheap pills | Buy cheap meds',
    'Nike shoes Nike shoes Nike shoes Nike shoes cheap Nike shoes',
    'iPhone case iPhone cover iPhone case iPhone cover iPhone case iPhone cover',
    'Samsung Galaxy S21 Ultra case, Samsung Galaxy S21 Ultra screen protector, Samsung '
    'Galaxy S21 Ultra charger',
    'Hotel Paris Hotel Paris Hotel Paris Hotel Paris booking',
    'Home | About | Contact | Home | About | Contact | Home | About | Contact',
    'Home | News | Sport | Weather | Home | News | Sport | Weather',
    'Free shipping! Free shipping! Free shipping! Order now.',
    'click here click here click here click here',
    # A phrase twice inside a longer line.
    'Cheap flights to London, cheap hotels in London, cheap flights to London and Paris',
    'Click here to download the free PDF version of this book. Click here to download the '
    'free PDF',
    'Watch free movies online HD - watch free movies online HD',
    'Bonyeza hapa kupakua programu bure. Bonyeza hapa kupakua programu bure sasa.',
    'Best price for Samsung Galaxy S21 cases - buy Samsung Galaxy S21 cases online with free '
    'delivery',
    # Repeated units.
    'Size: S M L XL | Size: S M L XL | Size: S M L XL',
    '1 cm 2 cm 3 cm 4 cm 5 cm 6 cm 7 cm 8 cm',
    '10 pcs 20 pcs 30 pcs 50 pcs 100 pcs',
    'mm mm mm mm mm mm mm mm mm mm',
    'kg kg kg kg kg kg kg kg',
    # Short lines.
    'ok ok ok',
    'la la la la',
    'haha haha',
    'yes yes yes',
    'no no no!',
    'bongobongo',
]


def lowest_flagging_threshold(step: mdl.MdlRepeat, text: str, grid: np.ndarray) -> float:
  """The lowest threshold of `grid` at which `step` (its threshold replaced) flags `text`;
  infinity if none does. Tries the highest first, which keeps most sentences, then
  bisects, since flags only grow with the threshold."""
  step.threshold = grid[-1]
  if not step.is_noisy(text):
    return np.inf
  low, high = 0, len(grid) - 1  # grid[high] flags; grid[low - 1] does not
  while low < high:
    middle = (low + high) // 2
    step.threshold = grid[middle]
    if step.is_noisy(text):
      high = middle
    else:
      low = middle + 1
  return grid[low]


def sentences_per_second(step: mdl.MdlRepeat, sentences: list[str], runs: int = 3) -> float:
  best = np.inf
  for _ in range(runs):
    start = time.perf_counter()
    for sentence in sentences:
      step.is_noisy(sentence)
    best = min(best, time.perf_counter() - start)
  return len(sentences) / best


def throughput(root) -> None:
  step = mdl.MdlRepeat()
  corpora = {'flores200_dev': sorted((root / 'flores200' / 'dev').glob('*.dev')),
             'ntrex128': sorted((root / 'ntrex128').glob('newstest2019-ref.*.txt'))}
  for name, paths in corpora.items():
    sentences = [line for path in paths for line in readers.read_lines(path)][::4]
    rate = sentences_per_second(step, sentences)
    print(f'{name}: {len(sentences)} sentences, one process')
    print(f'mdl_{name}_sentences_per_second: ours={rate:.0f} sentences/s target=2000 '
          f'sentences/s ratio={rate / 2000:.3f}')


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--max_flagged', type=float, default=0.005)
  parser.add_argument('--throughput', action='store_true')
  args = parser.parse_args()
  root = readers.shared_data_dir()
  if root is None:
    raise SystemExit('the shared data folder is absent: calibration reads FLORES-200 dev')
  if args.throughput:
    throughput(root)
    return
  files = sorted((root / 'flores200' / 'dev').glob('*.dev'))
  by_language = {path.stem: readers.read_lines(path) for path in files}
  for unit, min_units in (('chars', 12), ('tokens', 6)):
    step = mdl.MdlRepeat(unit=unit, min_units=min_units)
    print(f'\n== unit: {unit} (shorter than {min_units} {unit}: {step.min_repeats} repeats of '
          f'one unit; search escalates within {step.search_margin} of the threshold)')
    grid = GRIDS[unit]
    lowest = {lang: np.array([lowest_flagging_threshold(step, s, grid) for s in sentences])
              for lang, sentences in by_language.items()}
    pooled = np.concatenate(list(lowest.values()))
    shares = [(pooled <= t).mean() for t in grid]
    print('share flagged at ' + ', '.join(f'{t:.2f}: {100 * share:.3f}%'
                                          for t, share in zip(grid, shares)))
    allowed = [t for t, share in zip(grid, shares) if share <= args.max_flagged]
    threshold = max(allowed)
    flagged = float((pooled <= threshold).mean())
    print(f'threshold {threshold:.2f} nats per {unit[:-1]}: flags {100 * flagged:.3f}% of '
          f'{len(pooled)} clean sentences')
    print(', '.join(f'{lang} {int((values <= threshold).sum())}'
                    for lang, values in lowest.items()))
    step.threshold = threshold
    for text in NOISE:
      verdict = 'FLAGGED' if step.is_noisy(text) else 'kept   '
      print(f'  {mdl.mdl_per_unit(text, unit):.3f} {verdict} {text}')
    print(f'mdl_clean_flagged_{unit}: ours={flagged:.5f} share max_flagged='
          f'{args.max_flagged:.5f} share ratio={flagged / args.max_flagged:.3f}')


if __name__ == '__main__':
  main()
