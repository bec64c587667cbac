"""Language identification accuracy per language on FLORES-200 dev.

  python bench/langid_accuracy.py

For every FLORES-200 dev file in the shared data folder: the share of its sentences that the
`language_id` step accepts as their own language under the 'exact' and 'tencent' policies
(threshold 0.5), the backend that judges the language (py3langid, CLD2, or none: refute
only), and, for English text labelled as that language, the share wrongly accepted.
The figure line compares the mean exact-policy acceptance over the supported languages
with 1.0 (every clean sentence kept).
"""

import time

import numpy as np

from t5x_mt.data import readers
from t5x_mt.data.cleaning import langid


def share(accept, sentences) -> float:
  return float(np.mean([accept(sentence) for sentence in sentences]))


def main() -> None:
  root = readers.shared_data_dir()
  if root is None:
    raise SystemExit('the shared data folder is absent: this benchmark reads FLORES-200 dev')
  files = {path.stem: path for path in sorted((root / 'flores200' / 'dev').glob('*.dev'))}
  english = readers.read_lines(files['eng_Latn'])
  print(f'{"language":10} {"backend":10} {"exact":>7} {"tencent":>8} {"English kept":>13}')
  supported, start, judged = [], time.perf_counter(), 0
  for lang, path in files.items():
    sentences = readers.read_lines(path)
    backend = ('py3langid' if lang in langid.PY3LANGID_LABELS else
               'cld2' if lang in langid.CLD2_CODES else 'refute')
    exact = share(langid.acceptor(lang, 'exact'), sentences)
    tencent = share(langid.acceptor(lang, 'tencent'), sentences)
    wrong = share(langid.acceptor(lang, 'exact'), english) if lang != 'eng_Latn' else float('nan')
    judged += 3 * len(sentences)
    if backend != 'refute':
      supported.append(exact)
    print(f'{lang:10} {backend:10} {exact:7.3f} {tencent:8.3f} {wrong:13.3f}')
  print(f'{judged / (time.perf_counter() - start):.0f} sentences/s')
  mean = float(np.mean(supported))
  print(f'language_id_exact_accuracy: ours={mean:.4f} share perfect=1.0 share ratio={mean:.4f}')


if __name__ == '__main__':
  main()
