"""Quality of ensembles: two runs alone and as an ensemble, on a task's split.

  python bench/ensembles.py --runs=/tmp/t5x_mt/demo,/tmp/t5x_mt/demo_b \
      [--tasks=cldr_demo] [--split=test] [--corpus=NAME] [--beam_size=4] [--max_sentences=N]

Each model is scored by launch/evaluate.py as a user runs it (--checkpoint_dir for a run,
--ensemble for the ensemble, with each combination), every direction of --tasks on
--split, into JSON files; the table gives each model's chrF++ and BLEU over all
directions, and the last lines the ensembles against the better run alone.
"""

import argparse
import json
import pathlib
import subprocess
import sys
import tempfile

from t5x_mt.decoding.ensemble_combinations import COMBINATIONS

REPO = pathlib.Path(__file__).resolve().parents[1]


def score(model_flags: list[str], args: argparse.Namespace, output: pathlib.Path) -> dict:
  """The 'ALL' scores of launch/evaluate.py with `model_flags` on the task's split."""
  command = [sys.executable, str(REPO / 'launch' / 'evaluate.py'), *model_flags,
             f'--tasks={args.tasks}', f'--split={args.split}', f'--output_json={output}',
             *([f'--corpus={args.corpus}'] if args.corpus else []),
             *([f'--beam_size={args.beam_size}'] if args.beam_size else []),
             *([f'--max_sentences={args.max_sentences}'] if args.max_sentences else [])]
  subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
  return json.loads(output.read_text())['categories']['ALL']


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--runs', required=True, help='two run folders, comma-separated')
  parser.add_argument('--tasks', default='cldr_demo')
  parser.add_argument('--split', default='test')
  parser.add_argument('--corpus', default=None)
  parser.add_argument('--beam_size', type=int, default=None)
  parser.add_argument('--max_sentences', type=int, default=None,
                      help="the first N sentences of each direction (default: the split's all)")
  args = parser.parse_args()
  runs = args.runs.split(',')
  models = {run: [f'--checkpoint_dir={run}'] for run in runs}
  for combination in COMBINATIONS:
    models[f'ensemble {combination}'] = [f'--ensemble={args.runs}',
                                         f'--ensemble_combination={combination}']
  print(f'{args.tasks} {args.split}, every direction; runs: {", ".join(runs)}')
  scores = {}
  with tempfile.TemporaryDirectory() as scratch:
    for index, (name, flags) in enumerate(models.items()):
      scores[name] = score(flags, args, pathlib.Path(scratch) / f'{index}.json')
      print(f'{name:40s} chrF++ {scores[name]["chrf"]:6.2f}  BLEU {scores[name]["bleu"]:6.2f}',
            flush=True)
  best = max(runs, key=lambda run: scores[run]['chrf'])
  for combination in COMBINATIONS:
    ensemble = scores[f'ensemble {combination}']['chrf']
    print(f'ensemble_{combination}_chrf: ours={ensemble:.2f} chrF++ '
          f'best_run={scores[best]["chrf"]:.2f} chrF++ ratio={ensemble / scores[best]["chrf"]:.3f}')


if __name__ == '__main__':
  main()
