"""What two processes cost against one with as many devices, training the demo.

  python bench/multiprocess_cost.py [--steps=60] [--devices=4] [--rounds=2] [--workdir=DIR]

Each round runs `launch/train.py --gin_file=gin/runs/demo.gin` for --steps steps as one
process with --devices CPU devices, then as two processes (gloo on localhost) with half
each, both reading the same two input shards, so they train on the same batches. The
figure is the median logged `tokens_per_second` after the first window (which holds the
compilation) and the wall time of the whole command, ours being two processes, the peer
one process.
"""

import argparse
import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(('127.0.0.1', 0))
    return s.getsockname()[1]


def _train(num_processes: int, devices: int, steps: int, workdir: pathlib.Path,
           name: str) -> tuple[float, float]:
  """(median tokens/s after the first log window, wall seconds) of one run."""
  model_dir = workdir / name
  shutil.rmtree(model_dir, ignore_errors=True)
  flags = ['--gin_file=gin/runs/demo.gin', f"--gin.MODEL_DIR='{model_dir}'",
           f'--gin.TRAIN_STEPS={steps}', f'--gin.LOG_EVERY_STEPS={max(steps // 6, 1)}',
           f"--gin.VOCABULARY_PATH='{workdir / 'vocab.model'}'", '--gin.INPUT_SHARDS=2',
           f'--gin.CHECKPOINT_EVERY_STEPS={steps}',
           '--gin.training.TrainConfig.evaluate_test_split=False',
           '--gin.training.TrainConfig.progress_bar=False',
           '--gin.evaluation.EvalConfig.max_sentences=1',
           '--gin.decoding.DecodeSettings.beam_size=1']
  env = dict(os.environ, XLA_FLAGS='--xla_force_host_platform_device_count='
             f'{devices // num_processes}')
  port = _free_port()
  started = time.perf_counter()
  processes = [subprocess.Popen(
      [sys.executable, 'launch/train.py', *flags,
       *([f'--coordinator_address=127.0.0.1:{port}', f'--num_processes={num_processes}',
          f'--process_id={index}'] if num_processes > 1 else [])],
      cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
      for index in range(num_processes)]
  for process in processes:
    _, stderr = process.communicate()
    if process.returncode:
      sys.exit(f'{name} failed:\n{stderr[-2000:]}')
  wall = time.perf_counter() - started
  records = [json.loads(line) for line in (model_dir / 'metrics.jsonl').read_text().splitlines()]
  return statistics.median(r['tokens_per_second'] for r in records[1:]), wall


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--steps', type=int, default=60)
  parser.add_argument('--devices', type=int, default=4)
  parser.add_argument('--rounds', type=int, default=2)
  parser.add_argument('--workdir', default=None)
  args = parser.parse_args()
  workdir = pathlib.Path(args.workdir or tempfile.mkdtemp(prefix='multiprocess_cost_'))
  print(f'demo, {args.steps} steps, {args.devices} CPU devices, {os.cpu_count()} cores, '
        f'{args.rounds} rounds, in {workdir}', flush=True)
  one, two = [], []
  for round_index in range(args.rounds):
    one.append(_train(1, args.devices, args.steps, workdir, f'one_{round_index}'))
    two.append(_train(2, args.devices, args.steps, workdir, f'two_{round_index}'))
    print(f'round {round_index}: one process {one[-1][0]:.0f} tokens/s, {one[-1][1]:.0f} s; '
          f'two processes {two[-1][0]:.0f} tokens/s, {two[-1][1]:.0f} s', flush=True)
  for index, (figure, unit) in enumerate((('train_tokens_per_second', 'tokens/s'),
                                          ('command_wall_time', 's'))):
    ours = statistics.median(run[index] for run in two)
    peer = statistics.median(run[index] for run in one)
    print(f'{figure}: ours={ours:.1f} {unit} one_process={peer:.1f} {unit} '
          f'ratio={ours / peer:.3f}')


if __name__ == '__main__':
  main()
