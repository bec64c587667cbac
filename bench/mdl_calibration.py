"""Calibrates the MDL repeat filter's threshold on FLORES-200 dev, per unit.

  python bench/mdl_calibration.py [--max_flagged=0.005]

For each unit (characters, whitespace tokens) it computes the searched MDL per unit of
every FLORES-200 dev sentence in ../shared/data (every language there), prints the low
quantiles per language, and proposes the threshold: the largest multiple of 0.05 below
the `max_flagged` quantile of all clean sentences, so that fewer than that share of clean
text is flagged. It then scores examples of repeat-pattern web noise at that threshold.
The figure line compares the flagged share of clean text with `max_flagged`.
"""

import argparse
import math

import numpy as np

from t5x_mt.data import mdl
from t5x_mt.data import readers

NOISE = [
    'mm mm mm mm mm mm mm mm mm mm',
    'Buy cheap viagra | Buy cheap cialis | Buy cheap levitra | Buy cheap pills | Buy cheap meds',
    'Nike shoes Nike shoes Nike shoes Nike shoes cheap Nike shoes',
    'Hotel Paris Hotel Paris Hotel Paris Hotel Paris booking',
    '1 cm 2 cm 3 cm 4 cm 5 cm 6 cm 7 cm 8 cm',
    'click here click here click here click here',
    'Home | About | Contact | Home | About | Contact | Home | About | Contact',
    'iPhone case iPhone cover iPhone case iPhone cover iPhone case iPhone cover',
    'kg kg kg kg kg kg kg kg',
]


def ratios(sentences: list[str], unit: str) -> np.ndarray:
  return np.array([mdl.mdl_per_unit(sentence, unit) for sentence in sentences])


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--max_flagged', type=float, default=0.005)
  args = parser.parse_args()
  root = readers.shared_data_dir()
  if root is None:
    raise SystemExit('../shared/data is absent: calibration reads FLORES-200 dev')
  files = sorted((root / 'flores200' / 'dev').glob('*.dev'))
  by_language = {path.stem: readers.read_lines(path) for path in files}
  for unit, min_units in (('chars', 12), ('tokens', 6)):
    print(f'\n== unit: {unit} (sides shorter than {min_units} {unit} are never flagged)')
    values = {}
    for lang, sentences in by_language.items():
      kept = [s for s in sentences if len(mdl.as_units(s, unit)) >= min_units]
      values[lang] = ratios(kept, unit)
      q = np.quantile(values[lang], [0.0, 0.005, 0.05, 0.5])
      print(f'{lang:10} min {q[0]:.3f}  q0.5% {q[1]:.3f}  q5% {q[2]:.3f}  median {q[3]:.3f}')
    pooled = np.concatenate(list(values.values()))
    threshold = math.floor(np.quantile(pooled, args.max_flagged) / 0.05) * 0.05
    flagged = float((pooled < threshold).mean())
    print(f'threshold {threshold:.2f} nats per {unit[:-1]}: flags {100 * flagged:.3f}% of '
          f'{len(pooled)} clean sentences')
    step = mdl.MdlRepeat(threshold=threshold, unit=unit, min_units=min_units)
    for text in NOISE:
      print(f'  {mdl.mdl_per_unit(text, unit):.3f} {"FLAGGED" if step.is_noisy(text) else "kept   "}'
            f' {text}')
    print(f'mdl_clean_flagged_{unit}: ours={flagged:.5f} share max_flagged='
          f'{args.max_flagged:.5f} share ratio={flagged / args.max_flagged:.3f}')


if __name__ == '__main__':
  main()
