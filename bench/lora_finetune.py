"""Full fine-tuning against LoRA: loss curves on an imported NLLB, a new direction on the demo.

  python bench/lora_finetune.py curves [--work_dir=/tmp/t5x_mt/lora_bench/curves] [--steps=60]
  python bench/lora_finetune.py new_direction [--base=/tmp/t5x_mt/demo] [--steps=150] \
      [--direction=fra_Latn-zul_Latn]

`curves` imports the tiny real NLLB-200 checkpoint of the tests
(tests/checkpoints/huggingface/nllb) and fine-tunes it on CLDR eng->hau twice through
launch/train.py, fully and with LoRA (rank 8 on every projection), at the same learning
rate schedule, and prints both training losses step by step.

`new_direction` fine-tunes the demo's run (launch/train.py --gin_file=gin/runs/demo.gin)
into a direction its mixture does not hold, on that direction's CLDR training split alone,
fully and with LoRA (gin/runs/lora/demo.gin), and scores the three runs on the test split
of the demo's 20 directions and of the new one: what each gains on the new direction and
what it costs on the ones the model knew (forgetting).
"""

import argparse
import json
import pathlib
import shutil
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
NLLB = REPO / 'tests' / 'checkpoints' / 'huggingface' / 'nllb'


def launch(script: str, *flags: str) -> str:
  """Runs launch/<script> as a user does; its stdout."""
  command = [sys.executable, str(REPO / 'launch' / script), *flags]
  print('+', ' '.join(command[1:]), flush=True)
  return subprocess.run(command, cwd=REPO, check=True, stdout=subprocess.PIPE,
                        text=True).stdout


def losses(run: pathlib.Path) -> dict[int, float]:
  return {record['step']: record['loss'] for record in map(
      json.loads, (run / 'metrics.jsonl').read_text().splitlines()) if 'loss' in record}


def curves(args: argparse.Namespace) -> None:
  work = pathlib.Path(args.work_dir)
  shutil.rmtree(work, ignore_errors=True)
  imported = work / 'nllb'
  launch('import_checkpoint.py', '--format=huggingface', f'--path={NLLB}',
         f'--output_dir={imported}')
  # The demo's run settings, the imported model's architecture and vocabulary (its
  # config.gin last, as docs/pretrained.md has it).
  common = ['--gin_file=gin/runs/demo.gin', f'--gin_file={imported}/config.gin',
            "--gin.MIXTURE_OR_TASK_NAME='cldr_eng_Latn.hau_Latn'",
            f'--gin.TRAIN_STEPS={args.steps}', '--gin.LOG_EVERY_STEPS=1',
            f'--gin.CHECKPOINT_EVERY_STEPS={args.steps}', '--gin.BATCH_SIZE=16',
            '--gin.LEARNING_RATE=1e-3', '--gin.WARMUP_STEPS=10',
            f"--gin.training.TrainConfig.init_from='{imported}'",
            '--gin.training.TrainConfig.evaluate_test_split=False']
  runs = {}
  for name, extra in (('full', []), ('lora', ['--gin.LORA_RANK=8'])):
    runs[name] = work / name
    launch('train.py', *common, f"--gin.MODEL_DIR='{runs[name]}'", *extra)
  full, lora = losses(runs['full']), losses(runs['lora'])
  print(f'{"step":>5} {"full":>8} {"LoRA r=8":>9}')
  for step in sorted(full):
    print(f'{step:5d} {full[step]:8.3f} {lora[step]:9.3f}')
  last = max(full)
  print(f'lora_final_loss: ours={lora[last]:.3f} full={full[last]:.3f} '
        f'ratio={lora[last] / full[last]:.3f}')


def new_direction(args: argparse.Namespace) -> None:
  base = pathlib.Path(args.base)
  work = pathlib.Path(args.work_dir)
  shutil.rmtree(work, ignore_errors=True)
  source, target = args.direction.split('-')
  task = f'cldr_{source}.{target}'
  scored = {}
  for name, extra in (('full', ['--gin.LORA_RANK=0']), ('lora', [])):
    run = work / name
    launch('train.py', '--gin_file=gin/runs/lora/demo.gin', f"--gin.MODEL_DIR='{run}'",
           f"--gin.training.TrainConfig.init_from='{base}'",
           f"--gin.MIXTURE_OR_TASK_NAME='{task}'", f'--gin.TRAIN_STEPS={args.steps}', *extra)
    scored[name] = run
  for name, run in (('base', base), *scored.items()):
    launch('evaluate.py', f'--checkpoint_dir={run}', '--split=test',
           f'--tasks=cldr_demo,{task}', f'--output_json={work / f"{name}_test.json"}')
  table = {name: json.loads((work / f'{name}_test.json').read_text())
           for name in ('base', 'full', 'lora')}
  new = f'{source}-{target}'
  print(f'{"test chrF++":28} {"base":>7} {"full FT":>8} {"LoRA":>7}')
  rows = [(f'{new} (new)', lambda r: r['directions'][new]['chrf']),
          ('the 20 known (mean)', lambda r: sum(
              d['chrf'] for key, d in r['directions'].items() if key != new) / 20)]
  for label, value in rows:
    print(f'{label:28} ' + ' '.join(f'{value(table[name]):7.2f}' for name in
                                     ('base', 'full', 'lora')))
  for name in ('full', 'lora'):
    print(f'{name}_new_direction_chrf: ours={rows[0][1](table[name]):.2f} '
          f'base={rows[0][1](table["base"]):.2f}')
    print(f'{name}_known_directions_chrf: ours={rows[1][1](table[name]):.2f} '
          f'base={rows[1][1](table["base"]):.2f} '
          f'ratio={rows[1][1](table[name]) / rows[1][1](table["base"]):.3f}')


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  commands = parser.add_subparsers(dest='command', required=True)
  curve_parser = commands.add_parser('curves')
  curve_parser.add_argument('--work_dir', default='/tmp/t5x_mt/lora_bench/curves')
  curve_parser.add_argument('--steps', type=int, default=60)
  direction_parser = commands.add_parser('new_direction')
  direction_parser.add_argument('--base', default='/tmp/t5x_mt/demo')
  direction_parser.add_argument('--work_dir', default='/tmp/t5x_mt/lora_bench/new_direction')
  direction_parser.add_argument('--steps', type=int, default=150)
  direction_parser.add_argument('--direction', default='fra_Latn-zul_Latn')
  args = parser.parse_args()
  (curves if args.command == 'curves' else new_direction)(args)


if __name__ == '__main__':
  main()
