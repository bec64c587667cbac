"""Sampled against beam back-translation on the demo (Edunov et al., 2018, "Understanding
Back-Translation at Scale").

  python bench/bt_search.py [--base=/tmp/t5x_mt/demo] [--work_dir=/tmp/t5x_mt/bt_search]
      [--languages=amh_Ethi,zul_Latn,hau_Latn] [--max_sentences=1500] [--seed=0]

The demo's run (--base, trained by `launch/train.py --gin_file=gin/runs/demo.gin`)
back-translates the training side of each of --languages in the CLDR corpus into English,
once by its beam search and once by sampling from its full distribution, each into a
corpus folder of `<BT>`-tagged eng_Latn' -> X pairs (launch/back_translate.py). Each
folder then trains gin/runs/bt/demo.gin: the demo's model, steps and seed on the demo's
pairs plus the synthetic ones. Figures: test-split chrF++ of the two runs (the mean over
the back-translated directions eng_Latn -> X, and over all 20), as their final
evaluations wrote them (MODEL_DIR/test/eval/step_<N>.json). The commands run as a user
runs them; finished steps are reused on a later call.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parent.parent
SEARCHES = ('beam', 'sampling')


def parse_flags() -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--base', default='/tmp/t5x_mt/demo', help="the demo's run")
  parser.add_argument('--work_dir', default='/tmp/t5x_mt/bt_search')
  parser.add_argument('--languages', default='amh_Ethi,zul_Latn,hau_Latn')
  parser.add_argument('--max_sentences', type=int, default=1500)
  parser.add_argument('--seed', type=int, default=0, help="sampling's seed")
  return parser.parse_args()


def run(*command: str) -> None:
  print('+', ' '.join(command), flush=True)
  subprocess.run([sys.executable, *command], cwd=REPO, check=True)


def back_translate(args: argparse.Namespace, search: str, corpus: pathlib.Path) -> None:
  """Back-translations of each of --languages into `corpus`, by beam 4 or by sampling."""
  search_flags = (['--beam_size=4'] if search == 'beam' else
                  ['--search=sampling', f'--seed={args.seed}'])
  for lang in args.languages.split(','):
    run('launch/back_translate.py', f'--checkpoint_dir={args.base}', f'--lang={lang}',
        '--into=eng_Latn', '--from_corpus=cldr', f'--max_sentences={args.max_sentences}',
        f'--output={corpus}', *search_flags)


def test_scores(model_dir: pathlib.Path) -> dict:
  evals = sorted((model_dir / 'test' / 'eval').glob('step_*.json'),
                 key=lambda path: int(path.stem.split('_')[1]))
  return json.loads(evals[-1].read_text())


def mean_chrf(scores: dict, directions: list[str]) -> float:
  return sum(scores['directions'][d]['chrf'] for d in directions) / len(directions)


def main() -> None:
  args = parse_flags()
  work = pathlib.Path(args.work_dir)
  results = {}
  for search in SEARCHES:
    corpus, model_dir = work / f'corpus_{search}', work / f'run_{search}'
    back_translate(args, search, corpus)
    run('launch/train.py', '--gin_file=gin/runs/bt/demo.gin',
        f'--gin.MODEL_DIR={str(model_dir)!r}', f'--gin.BT_DIR={str(corpus)!r}')
    results[search] = test_scores(model_dir)
  base = test_scores(pathlib.Path(args.base))
  into = [f'eng_Latn-{lang}' for lang in args.languages.split(',')]
  rows = {'no back-translation': base, **{f'{s} back-translation': r
                                          for s, r in results.items()}}
  print(f'\ntest split chrF++{"":<14}{"eng->X (BT)":>12}{"all 20":>10}')
  for label, scores in rows.items():
    print(f'{label:<32}{mean_chrf(scores, into):>12.2f}{scores["average"]["chrf"]:>10.2f}')
  print()
  sampled, beam = results['sampling'], results['beam']
  print(f'bt_sampled_into_chrf: ours={mean_chrf(sampled, into):.2f} chrF++ '
        f'beam_bt={mean_chrf(beam, into):.2f} chrF++ '
        f'ratio={mean_chrf(sampled, into) / mean_chrf(beam, into):.3f}')
  print(f'bt_sampled_all_chrf: ours={sampled["average"]["chrf"]:.2f} chrF++ '
        f'beam_bt={beam["average"]["chrf"]:.2f} chrF++ '
        f'ratio={sampled["average"]["chrf"] / beam["average"]["chrf"]:.3f}')


if __name__ == '__main__':
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  main()
