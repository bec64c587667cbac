"""Compile time and memory of a deep model's train step: scanned vs unrolled layers, with
and without rematerialisation.

  python bench/compile_time.py [--model=gin/models/volctrans_2b.gin] [--batch_size=8] \
      [--length=256] [--vocab_size=32128] [--variants=unrolled,scan,scan+full,unrolled+full]

Lowers and compiles `trainer.make_train_step` (AdamW, the real loss) for abstract
arguments only: nothing is allocated, so a 2B-parameter model compiles on a laptop. Per
variant it prints the seconds of tracing + lowering + XLA compilation and XLA's buffer
assignment from `compiled.memory_analysis()`: `temp` (activations kept for the backward
pass and other temporaries) and `peak` (arguments + outputs + temporaries, outputs that
alias donated arguments counted once). Variants: 'unrolled' or 'scan' (TransformerConfig.
scan_layers), optionally '+<policy>' (remat_policy: full, dots, dots_with_no_batch_dims).
The figure lines compare each variant with the first one ('unrolled', no remat).
"""

import argparse
import dataclasses
import os
import time

import flax.linen as nn
import jax
import jax.numpy as jnp

from t5x_mt import cli
from t5x_mt import gin_utils
from t5x_mt import network
from t5x_mt import trainer
from t5x_mt.data import directions
from t5x_mt.errors import UserError

import train_throughput  # bench/: synthetic packed rows and the directions they use.


def variant_config(config: network.TransformerConfig, variant: str) -> network.TransformerConfig:
  layout, _, policy = variant.partition('+')
  if layout not in ('unrolled', 'scan'):
    raise UserError(f'--variants: {variant!r} does not start with unrolled or scan')
  return dataclasses.replace(config, scan_layers=layout == 'scan', remat_policy=policy or 'none')


def compile_train_step(config: network.TransformerConfig, batch_size: int,
                       length: int) -> dict[str, float]:
  """Seconds to trace, lower and compile the train step, and its memory in bytes."""
  model = network.Transformer(config)
  optimizer = trainer.make_optimizer()
  direction_ids = sorted(directions.direction_id(src, tgt)
                         for src, tgt in train_throughput.DIRECTIONS)
  start = time.perf_counter()
  state = nn.meta.unbox(jax.eval_shape(
      lambda rng: trainer.init_train_state(model, optimizer, rng, length, length),
      jax.random.key(0)))
  batch = {name: jax.ShapeDtypeStruct((batch_size, length), jnp.int32)
           for name in trainer.MODEL_INPUTS + ('decoder_loss_weights',
                                               'decoder_direction_ids')}
  step = jax.jit(trainer.make_train_step(model, optimizer, direction_ids=direction_ids),
                 donate_argnums=(0,))
  compiled = step.lower(state, batch, jax.random.key(1)).compile()
  seconds = time.perf_counter() - start
  memory = compiled.memory_analysis()
  peak = (memory.argument_size_in_bytes + memory.output_size_in_bytes
          - memory.alias_size_in_bytes + memory.temp_size_in_bytes)
  return {'seconds': seconds, 'temp': memory.temp_size_in_bytes, 'peak': peak}


def main(argv: list[str]) -> int:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', default='gin/models/volctrans_2b.gin', help='gin model file')
  parser.add_argument('--batch_size', type=int, default=8)
  parser.add_argument('--length', type=int, default=256)
  parser.add_argument('--vocab_size', type=int, default=32128)
  parser.add_argument('--variants', default='unrolled,scan,scan+full,unrolled+full')
  args = parser.parse_args(rest)
  from t5x_mt import train_loop  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  gin_utils.parse_gin([args.model], bindings)
  base = train_loop.model_config(vocab_size=args.vocab_size)
  variants = [v.strip() for v in args.variants.split(',') if v.strip()]
  configs = {variant: variant_config(base, variant) for variant in variants}
  print(f'model: {args.model} ({base.num_encoder_layers}+{base.num_decoder_layers} layers, '
        f'{network.count_params(base) / 1e9:.2f}B parameters, vocab {base.vocab_size}); '
        f'batch {args.batch_size} x length {args.length}; jax {jax.__version__} on '
        f'{jax.devices()[0].device_kind} ({os.cpu_count()} CPUs)', flush=True)
  results = {}
  for variant, config in configs.items():
    results[variant] = compile_train_step(config, args.batch_size, args.length)
    r = results[variant]
    print(f"{variant:<28} compile {r['seconds']:7.1f} s   temp {r['temp'] / 2**30:7.2f} GiB   "
          f"peak {r['peak'] / 2**30:7.2f} GiB", flush=True)
  reference = variants[0]
  for variant in variants[1:]:
    ours, peer = results[variant], results[reference]
    name = variant.replace('+', '_')
    print(f"compile_time_{name}: ours={ours['seconds']:.1f} s {reference}={peer['seconds']:.1f} s "
          f"ratio={ours['seconds'] / peer['seconds']:.3f}")
    print(f"peak_memory_{name}: ours={ours['peak'] / 2**30:.2f} GiB "
          f"{reference}={peer['peak'] / 2**30:.2f} GiB ratio={ours['peak'] / peer['peak']:.3f}")
  return 0


if __name__ == '__main__':
  cli.run(main)
