"""Compile time and memory of a deep model's train step: scanned vs unrolled layers, with
and without rematerialisation.

  python bench/compile_time.py [--model=gin/models/volctrans_2b.gin] [--batch_size=8] \
      [--length=256] [--vocab_size=32128] [--variants=scan,scan+full,unrolled,unrolled+full] \
      [--timeout=900] [--max_host_gib=16] [--gin.NAME=VALUE ...]

Lowers and compiles `trainer.make_train_step` (AdamW, the real loss) for abstract
arguments only: nothing is allocated, so a 2B-parameter model compiles on a laptop. Per
variant it prints the seconds of tracing + lowering + XLA compilation and XLA's buffer
assignment from `compiled.memory_analysis()`: `temp` (activations kept for the backward
pass and other temporaries) and `peak` (arguments + outputs + temporaries, outputs that
alias donated arguments counted once), and the compiling process's own peak resident
memory on the host. Variants: 'unrolled' or 'scan' (TransformerConfig.scan_layers),
optionally '+<policy>' (remat_policy: full, dots, dots_with_no_batch_dims). Each variant
compiles in its own process, stopped after --timeout seconds or --max_host_gib of host
memory (an unrolled 64+64 stack can need more than a laptop has); a stopped variant is
reported as such. The figure lines compare each variant with the first one.
"""

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from t5x_mt.core import cli
from t5x_mt.config import gin_utils
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.training import trainer
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

import train_throughput  # bench/: synthetic packed rows and the directions they use.


def variant_config(config: network.TransformerConfig, variant: str) -> network.TransformerConfig:
  layout, _, policy = variant.partition('+')
  if layout not in ('unrolled', 'scan'):
    raise UserError(f'--variants: {variant!r} does not start with unrolled or scan')
  return dataclasses.replace(config, scan_layers=layout == 'scan', remat_policy=policy or 'none')


def compile_train_step(config: network.TransformerConfig, batch_size: int,
                       length: int) -> dict[str, float]:
  """Seconds to trace, lower and compile the train step, and its memory in bytes."""
  model = models.TranslationModel(config)
  optimizer = trainer.make_optimizer()
  direction_ids = sorted(Direction(src, tgt).id
                         for src, tgt in train_throughput.DIRECTIONS)
  start = time.perf_counter()
  state = nn.meta.unbox(jax.eval_shape(
      lambda rng: trainer.init_train_state(model, optimizer, rng, length, length),
      jax.random.key(0)))
  batch = {name: jax.ShapeDtypeStruct((batch_size, length), jnp.int32)
           for name in models.MODEL_INPUTS + ('decoder_loss_weights',
                                              'decoder_direction_ids')}
  step = jax.jit(trainer.make_train_step(model, optimizer, direction_ids=direction_ids),
                 donate_argnums=(0,))
  compiled = step.lower(state, batch, jax.random.key(1)).compile()
  seconds = time.perf_counter() - start
  memory = compiled.memory_analysis()
  peak = (memory.argument_size_in_bytes + memory.output_size_in_bytes
          - memory.alias_size_in_bytes + memory.temp_size_in_bytes)
  return {'seconds': seconds, 'temp': memory.temp_size_in_bytes, 'peak': peak}


def _resident_gib(pid: int) -> float:
  with open(f'/proc/{pid}/status') as status:
    for line in status:
      if line.startswith('VmRSS:'):
        return int(line.split()[1]) / 2**20
  return 0.0


def run_variant(variant: str, argv: list[str], timeout: float,
                max_host_gib: float) -> dict[str, float | str]:
  """One variant compiled in a fresh process: its figures; a variant stopped or failed
  has 'stopped' (why), 'seconds' (so far) and 'host' only."""
  process = subprocess.Popen([sys.executable, __file__, f'--only={variant}'] + argv,
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  start, host_gib = time.perf_counter(), 0.0
  while process.poll() is None:
    try:
      host_gib = max(host_gib, _resident_gib(process.pid))
    except OSError:
      pass
    elapsed = time.perf_counter() - start
    if elapsed > timeout or host_gib > max_host_gib:
      process.kill()
      process.wait()
      why = (f'stopped after {elapsed:.0f} s (start-up included) at {host_gib:.1f} GiB '
             'host memory, still compiling')
      return {'stopped': why, 'seconds': elapsed, 'host': host_gib * 2**30}
    time.sleep(0.5)
  lines = process.stdout.read().strip().splitlines()
  if process.returncode or not lines:
    return {'stopped': f'failed (exit {process.returncode})',
            'seconds': time.perf_counter() - start, 'host': host_gib * 2**30}
  return dict(json.loads(lines[-1]), host=host_gib * 2**30)


def print_figures(results: dict[str, dict]) -> None:
  """Each variant against 'unrolled' (no remat); a stopped 'unrolled' gives bounds."""
  peer = results.get('unrolled')
  if peer is None:
    return
  for variant, ours in results.items():
    if variant == 'unrolled' or 'stopped' in ours:
      continue
    name = variant.replace('+', '_')
    if 'stopped' in peer:
      print(f"compile_time_{name}: ours={ours['seconds']:.1f} s unrolled>{peer['seconds']:.0f} s "
            f"(stopped) ratio<{ours['seconds'] / peer['seconds']:.3f}")
      print(f"host_memory_{name}: ours={ours['host'] / 2**30:.2f} GiB "
            f"unrolled>{peer['host'] / 2**30:.2f} GiB (stopped) "
            f"ratio<{ours['host'] / peer['host']:.3f}")
      continue
    for figure, key in (('compile_time', 'seconds'), ('peak_memory', 'peak'),
                        ('host_memory', 'host')):
      unit, scale = ('s', 1) if key == 'seconds' else ('GiB', 2**30)
      print(f'{figure}_{name}: ours={ours[key] / scale:.2f} {unit} '
            f'unrolled={peer[key] / scale:.2f} {unit} ratio={ours[key] / peer[key]:.3f}')


def main(argv: list[str]) -> int:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', default='gin/models/volctrans_2b.gin', help='gin model file')
  parser.add_argument('--batch_size', type=int, default=8)
  parser.add_argument('--length', type=int, default=256)
  parser.add_argument('--vocab_size', type=int, default=32128)
  parser.add_argument('--variants', default='scan,scan+full,unrolled,unrolled+full')
  parser.add_argument('--timeout', type=float, default=900.0)
  parser.add_argument('--max_host_gib', type=float, default=16.0)
  parser.add_argument('--only', default=None, help=argparse.SUPPRESS)
  args = parser.parse_args(rest)
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  gin_utils.parse_gin([args.model], bindings)
  base = configurables.model_config(args.vocab_size)
  if args.only:  # The child process: one variant, one JSON line.
    print(json.dumps(compile_train_step(variant_config(base, args.only), args.batch_size,
                                        args.length)))
    return 0
  variants = [v.strip() for v in args.variants.split(',') if v.strip()]
  for variant in variants:
    variant_config(base, variant)  # Bad names fail before anything compiles.
  print(f'model: {args.model} ({base.num_encoder_layers}+{base.num_decoder_layers} layers, '
        f'{models.count_params(base) / 1e9:.2f}B parameters, vocab {base.vocab_size}); '
        f'batch {args.batch_size} x length {args.length}; jax {jax.__version__} on '
        f'{jax.devices()[0].device_kind} ({os.cpu_count()} CPUs)', flush=True)
  child_argv = [a for a in argv if not a.startswith('--variants')]
  results = {}
  for variant in variants:
    results[variant] = r = run_variant(variant, child_argv, args.timeout, args.max_host_gib)
    if 'stopped' in r:
      print(f"{variant:<28} {r['stopped']}", flush=True)
      continue
    print(f"{variant:<28} compile {r['seconds']:7.1f} s   temp {r['temp'] / 2**30:7.2f} GiB   "
          f"peak {r['peak'] / 2**30:7.2f} GiB   host {r['host'] / 2**30:6.2f} GiB", flush=True)
  print_figures(results)
  return 0


if __name__ == '__main__':
  cli.run(main)
