"""The demo's training step and beam search with 'auto' attention kernels against XLA's
attention, on whatever device JAX runs on (bench/accelerator_check.sh runs it on a GPU or TPU).

  python bench/accelerator_timing.py [--model=gin/models/tiny.gin] [--batch_size=32]
      [--length=64] [--beam_size=4] [--decode_batch=64] [--steps=10] [--rounds=2]
      [--dtype=float32|bfloat16]

The model is the demo's (gin/models/tiny.gin at the demo's batch 32 x 64; any model file
and size can be given). Training times the real sharded train step
(`train_throughput.our_train_steps`, synthetic packed rows); decoding times one jitted
beam search (`prediction.predict_batch`) over `--decode_batch` random source rows, from
randomly initialised parameters and to the full `--length`, since an untrained model's
outputs run on. The two attention settings alternate in `--rounds` blocks; each side's
median is reported with the ratio, XLA's time over the kernels'. Reads the model file
without the data pipeline (`t5x_mt.config.gin_model`), so it needs no TensorFlow.
"""

import argparse
import dataclasses
import os
import pathlib
import statistics
import sys
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import train_throughput  # pylint: disable=g-import-not-at-top,wrong-import-position

from t5x_mt.config import gin_model  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.config import gin_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt import kernels  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.model import models  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.decoding import prediction  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.decoding import search as search_methods  # pylint: disable=g-import-not-at-top,wrong-import-position

SETTINGS = ('xla', 'auto')


def beam_search_runner(config, batch: int, length: int, beam_size: int, seed: int = 0):
  """run(repeats) -> seconds of each jitted beam search over one fixed batch."""
  model = models.TranslationModel(config)
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(seed), length, length))
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, config.vocab_size, size=(batch, length)).astype(np.int32)

  def search():
    return prediction.predict_batch(
        model, params, tokens, input_length=length, direction=0, prefix_id=None,
        max_decode_length=length, alpha=0.6, num_pieces=config.vocab_size,
        search_settings=search_methods.BeamSettings(beam_size=beam_size))

  jax.block_until_ready(search())

  def run(repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
      start = time.perf_counter()
      jax.block_until_ready(search())
      times.append(time.perf_counter() - start)
    return times
  return run


def parse_args(argv: list[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--model', default='gin/models/tiny.gin')
  parser.add_argument('--vocab_size', type=int, default=4000)
  parser.add_argument('--batch_size', type=int, default=32)
  parser.add_argument('--length', type=int, default=64)
  parser.add_argument('--beam_size', type=int, default=4)
  parser.add_argument('--decode_batch', type=int, default=64)
  parser.add_argument('--steps', type=int, default=10)
  parser.add_argument('--rounds', type=int, default=2)
  parser.add_argument('--dtype', default='float32', choices=('float32', 'bfloat16'),
                      help="compute dtype (the demo's ACTIVATION_DTYPE is float32)")
  return parser.parse_args(argv)


def main(argv: list[str]) -> int:
  args = parse_args(argv)
  gin_utils.parse_gin([args.model], [])
  base = dataclasses.replace(gin_model.model_config(args.vocab_size),
                             dtype=jnp.dtype(args.dtype))
  print(f'device: {jax.devices()[0].device_kind} (process platform '
        f'{kernels.process_platform()}); XLA_FLAGS={os.environ.get("XLA_FLAGS", "")!r}')
  print(f'model: {args.model} ({models.count_params(base) / 1e6:.1f}M parameters, '
        f'{args.dtype}); train '
        f'batch {args.batch_size} x {args.length}; beam {args.beam_size} over '
        f'{args.decode_batch} rows to length {args.length}', flush=True)
  train, decode = {}, {}
  for setting in SETTINGS:
    config = dataclasses.replace(base, attention_implementation=setting)
    train[setting] = train_throughput.our_train_steps(config, args.batch_size, args.length)[2]
    decode[setting] = beam_search_runner(config, args.decode_batch, args.length,
                                         args.beam_size)
  train_times = {setting: [] for setting in SETTINGS}
  decode_times = {setting: [] for setting in SETTINGS}
  for _ in range(args.rounds):
    for setting in SETTINGS:
      train_times[setting] += train[setting](args.steps)
      decode_times[setting] += decode[setting](max(args.steps // 4, 2))
  for what, times in (('train step', train_times), ('beam search', decode_times)):
    xla, auto = (statistics.median(times[setting]) for setting in SETTINGS)
    print(f'{what}: xla {xla * 1e3:.2f} ms, auto {auto * 1e3:.2f} ms; xla / auto '
          f'{xla / auto:.2f}x')
  return 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
