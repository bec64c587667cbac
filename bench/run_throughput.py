"""A finished or stopped run's training throughput: target tokens per second and MFU.

  python bench/run_throughput.py --model_dir=DIR [--skip_steps=50]

Reads the run's metrics.jsonl (each logging window's target tokens per second) and
config.gin (its model and lengths), leaves out the windows up to --skip_steps (the first
holds the compilation), and prints the mean tokens/s with the model FLOP/s it means
(`flops.train_flops_per_target_token`) and, on an accelerator whose peak
bench/kernel_roofline.py knows, the MFU. On a CPU it prints the FLOP/s alone.
"""

import argparse
import json
import pathlib
import statistics
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model_dir', required=True)
  parser.add_argument('--skip_steps', type=int, default=50)
  args = parser.parse_args()
  import kernel_roofline  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import run_loading  # pylint: disable=g-import-not-at-top
  from t5x_mt.model import flops  # pylint: disable=g-import-not-at-top
  run_dir = pathlib.Path(args.model_dir)
  records = [json.loads(line) for line in (run_dir / 'metrics.jsonl').read_text().splitlines()]
  windows = [r['tokens_per_second'] for r in records if r['step'] > args.skip_steps]
  if not windows:
    raise SystemExit(f'{run_dir}: no logged step after {args.skip_steps}')
  saved = run_loading.read_run(str(run_dir))
  lengths = [int(_bound(run_dir, macro)) for macro in ('INPUTS_LENGTH', 'TARGETS_LENGTH')]
  tokens = statistics.mean(windows)
  model_flops = tokens * flops.train_flops_per_target_token(saved.model, *lengths)
  chip = kernel_roofline.native_chip()
  mfu = (f', MFU {model_flops / kernel_roofline.CHIPS[chip].peak_flops:.3f} of '
         f'{kernel_roofline.CHIPS[chip].name}' if chip else ', no peak known for this device')
  print(f'run_throughput: {tokens:,.0f} target tokens/s over {len(windows)} windows, '
        f'{model_flops / 1e12:.2f} model TFLOP/s{mfu}')


def _bound(run_dir: pathlib.Path, macro: str) -> str:
  """A macro's value as the run's config.gin binds it."""
  for line in (run_dir / 'config.gin').read_text().splitlines():
    if line.startswith(f'{macro} = '):
      return line.split(' = ', 1)[1]
  raise SystemExit(f'{run_dir}/config.gin binds no {macro}')


if __name__ == '__main__':
  main()
