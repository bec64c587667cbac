"""Training throughput of the real sharded train step, against the machine's matmul peak.

  python bench/train_throughput.py [--model=gin/models/base.gin] [--batch_size=8]
      [--length=64] [--steps=5] [--vocab_size=32128] [--gin.NAME=VALUE ...]

Builds the model from a gin model file, compiles `trainer.make_train_step` through
`trainer.jit_train_step` on a one-device mesh, and times steady-state steps on synthetic
packed rows (random tokens, every position real, several sentence pairs per row with their
own segment ids, positions and directions). Model FLOPs come from `t5x_mt.flops`; the peer
is the best of NumPy and jitted JAX on a 4096 x 4096 float32 matmul. Ends with the figure
lines of DESIGN.md; XLA_FLAGS in the environment apply to both the model and the peak.
"""

import argparse
import os
import statistics
import time

import jax
import numpy as np
import tqdm

from t5x_mt import cli
from t5x_mt import flops
from t5x_mt import gin_utils
from t5x_mt import network
from t5x_mt import partitioning
from t5x_mt import trainer
from t5x_mt.data import directions
from t5x_mt.errors import UserError

# Directions of the synthetic sentence pairs (only their ids matter to the step's cost).
DIRECTIONS = (('eng_Latn', 'hau_Latn'), ('fra_Latn', 'swh_Latn'), ('eng_Latn', 'yor_Latn'))
EOS_ID = 1
FIRST_WORD_ID = 3  # After pad 0, eos 1 and unk 2.
MATMUL_SIZE = 4096


def _segments(rng: np.random.Generator, length: int, num_segments: int,
              min_segment_length: int) -> tuple[np.ndarray, np.ndarray]:
  """Segment ids (1..num_segments) and positions (restarting at 0) of one full row."""
  spare = length - num_segments * min_segment_length
  lengths = min_segment_length + rng.multinomial(spare, rng.dirichlet(np.ones(num_segments)))
  starts = np.cumsum(lengths) - lengths
  segment_ids = np.repeat(np.arange(1, num_segments + 1, dtype=np.int32), lengths)
  positions = np.arange(length, dtype=np.int32) - np.repeat(starts, lengths)
  return segment_ids, positions.astype(np.int32)


def synthetic_packed_batch(rng: np.random.Generator, batch_size: int, length: int,
                           vocab_size: int, direction_ids: list[int],
                           mean_pair_length: int = 16,
                           min_pair_length: int = 4) -> dict[str, np.ndarray]:
  """Rows packed full with sentence pairs, shaped like DirectionEncDecFeatureConverter's.

  Each row holds 1 to 2 * length / mean_pair_length pairs of at least `min_pair_length`
  tokens a side; a pair's source and target lengths differ (each side's lengths are drawn
  independently), every target ends in eos, and each decoder input is its target shifted
  right within its own segment.
  """
  names = ('encoder_input_tokens', 'encoder_segment_ids', 'encoder_positions',
           'decoder_target_tokens', 'decoder_input_tokens', 'decoder_segment_ids',
           'decoder_positions', 'decoder_loss_weights', 'decoder_direction_ids')
  batch = {name: np.zeros((batch_size, length), np.int32) for name in names}
  min_pair_length = min(min_pair_length, length)
  max_pairs = max(1, min(length // min_pair_length, 2 * length // mean_pair_length))
  for row in range(batch_size):
    num_pairs = int(rng.integers(1, max_pairs + 1))
    encoder_segments, encoder_positions = _segments(rng, length, num_pairs, min_pair_length)
    decoder_segments, decoder_positions = _segments(rng, length, num_pairs, min_pair_length)
    targets = rng.integers(FIRST_WORD_ID, vocab_size, length, dtype=np.int32)
    last_of_segment = np.append(decoder_segments[1:] != decoder_segments[:-1], True)
    targets[last_of_segment] = EOS_ID
    inputs = np.where(decoder_positions == 0, 0, np.roll(targets, 1))
    pair_directions = rng.choice(direction_ids, num_pairs)
    batch['encoder_input_tokens'][row] = rng.integers(FIRST_WORD_ID, vocab_size, length)
    batch['encoder_segment_ids'][row] = encoder_segments
    batch['encoder_positions'][row] = encoder_positions
    batch['decoder_target_tokens'][row] = targets
    batch['decoder_input_tokens'][row] = inputs
    batch['decoder_segment_ids'][row] = decoder_segments
    batch['decoder_positions'][row] = decoder_positions
    batch['decoder_loss_weights'][row] = 1
    batch['decoder_direction_ids'][row] = pair_directions[decoder_segments - 1]
  return batch


def time_train_steps(config: network.TransformerConfig, batch_size: int, length: int, steps: int,
                     seed: int = 0) -> dict[str, float]:
  """Compiles and runs the sharded train step; returns seconds and tokens per step.

  `compile_s` is the first call's time less a steady step's: tracing and compilation.
  Batches are placed on the device before timing, so the figures are the step's alone.
  """
  mesh = partitioning.create_mesh((1, 1), jax.devices()[:1])
  rules = partitioning.logical_axis_rules()
  model = network.Transformer(config)
  optimizer = trainer.make_optimizer()
  direction_ids = sorted(directions.direction_id(src, tgt) for src, tgt in DIRECTIONS)
  state, state_shardings = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, length, length),
      mesh, rules, jax.random.PRNGKey(seed))
  step = trainer.jit_train_step(
      trainer.make_train_step(model, optimizer, direction_ids=direction_ids), state_shardings,
      mesh, rules)
  rng = np.random.default_rng(seed)
  host_batches = [synthetic_packed_batch(rng, batch_size, length, config.vocab_size,
                                         direction_ids) for _ in range(min(steps + 1, 4))]
  batches = [partitioning.host_batch_to_global(batch, mesh) for batch in host_batches]
  step_rng = jax.random.PRNGKey(seed + 1)

  start = time.perf_counter()
  state, metrics = jax.block_until_ready(step(state, batches[0], step_rng))
  first_s = time.perf_counter() - start
  step_times = []
  for i in tqdm.trange(steps, desc='train steps', leave=False):
    start = time.perf_counter()
    state, metrics = jax.block_until_ready(step(state, batches[(i + 1) % len(batches)],
                                                step_rng))
    step_times.append(time.perf_counter() - start)
  if not np.isfinite(float(metrics['loss_sum'])):
    raise RuntimeError('train step produced a non-finite loss')
  median_s = statistics.median(step_times)
  return {'compile_s': max(first_s - median_s, 0.0), 'step_s': sum(step_times) / steps,
          'median_step_s': median_s, 'tokens_per_step': float(metrics['tokens'])}


def _best_seconds(run, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return min(times)


def matmul_peak(size: int = MATMUL_SIZE, repeats: int = 3) -> dict[str, float]:
  """FLOP/s of a [size, size] x [size, size] float32 matmul: NumPy, jitted JAX, the best."""
  rng = np.random.default_rng(0)
  a = rng.standard_normal((size, size), np.float32)
  b = rng.standard_normal((size, size), np.float32)
  matmul_flops = 2.0 * size ** 3
  numpy_s = _best_seconds(lambda: a @ b, repeats)
  jax_matmul = jax.jit(lambda x, y: x @ y)
  a_device, b_device = jax.device_put(a), jax.device_put(b)
  jax_matmul(a_device, b_device).block_until_ready()  # Compile.
  jax_s = _best_seconds(lambda: jax_matmul(a_device, b_device).block_until_ready(), repeats)
  numpy_flops, jax_flops = matmul_flops / numpy_s, matmul_flops / jax_s
  return {'numpy': numpy_flops, 'jax': jax_flops, 'best': max(numpy_flops, jax_flops)}


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', default='gin/models/base.gin', help='gin model file')
  parser.add_argument('--batch_size', type=int, default=8, help='rows per step')
  parser.add_argument('--length', type=int, default=64,
                      help='source and target row length (positions per row)')
  parser.add_argument('--steps', type=int, default=5, help='timed steps after compilation')
  parser.add_argument('--vocab_size', type=int, default=32128, help='embedding rows')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(rest)
  for flag in ('batch_size', 'length', 'steps', 'vocab_size'):
    if getattr(args, flag) < 1:
      raise UserError(f'--{flag}: must be a positive integer, got {getattr(args, flag)}')
  if args.vocab_size <= FIRST_WORD_ID:
    raise UserError(f'--vocab_size: must exceed {FIRST_WORD_ID} (pad, eos, unk)')
  return args, bindings


def main(argv: list[str]) -> int:
  args, bindings = parse_args(argv)
  from t5x_mt import train_loop  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  gin_utils.parse_gin([args.model], bindings)
  config = train_loop.model_config(vocab_size=args.vocab_size)
  if args.length > config.max_length:
    raise UserError(f'--length: {args.length} exceeds the model\'s max_length '
                    f'{config.max_length} ({args.model})')

  flops_per_token = flops.train_flops_per_target_token(config, args.length, args.length)
  print(f'model: {args.model} ({network.count_params(config) / 1e6:.1f}M parameters, '
        f'vocab {config.vocab_size}); batch {args.batch_size} x length {args.length}; '
        f'{flops_per_token / 1e6:.1f} MFLOP per target token')
  print(f'device: {jax.devices()[0].device_kind} ({os.cpu_count()} CPUs); '
        f'XLA_FLAGS={os.environ.get("XLA_FLAGS", "")!r}', flush=True)
  timing = time_train_steps(config, args.batch_size, args.length, args.steps, args.seed)
  peak = matmul_peak()
  tokens_per_second = timing['tokens_per_step'] / timing['step_s']
  model_flops_per_second = tokens_per_second * flops_per_token
  print(f"steps: mean {timing['step_s']:.3f} s, median {timing['median_step_s']:.3f} s over "
        f"{args.steps}; {timing['tokens_per_step']:.0f} target tokens per step")
  print(f"matmul {MATMUL_SIZE}^2 float32: numpy {peak['numpy'] / 1e9:.1f} GFLOP/s, "
        f"jax {peak['jax'] / 1e9:.1f} GFLOP/s")
  print(f"compile_time: ours={timing['compile_s']:.1f} s")
  print(f'train_tokens_per_second: ours={tokens_per_second:.1f} tokens/s')
  print(f'model_flops_per_second: ours={model_flops_per_second / 1e9:.2f} GFLOP/s '
        f"matmul_peak={peak['best'] / 1e9:.2f} GFLOP/s "
        f"ratio={model_flops_per_second / peak['best']:.3f}")
  return 0


if __name__ == '__main__':
  cli.run(main)
