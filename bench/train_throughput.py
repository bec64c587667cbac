"""Training throughput of the real sharded train step, against Hugging Face Transformers
(PyTorch) and against the machine's matmul peak.

  pip install -r bench/requirements.txt   # the PyTorch peer (skipped when not installed)
  python bench/train_throughput.py [--model=gin/models/base.gin] [--batch_size=8]
      [--length=64] [--steps=5] [--rounds=2] [--vocab_size=32128] [--no_peer]
      [--gin.NAME=VALUE ...]

Builds the model from a gin model file, compiles `trainer.make_train_step` through
`trainer.jit_train_step` on a one-device mesh, and times steady-state steps on synthetic
packed rows (random tokens, every position real, several sentence pairs per row with their
own segment ids, positions and directions). The peer is Transformers' MBart (pre-LN
encoder-decoder, ReLU, tied embeddings: the same layer shapes and parameter count within
the extra embedding LayerNorms) at the same rows x length, one full row per sentence,
trained the same way: label-smoothed cross entropy, AdamW, gradient clipping, dropout 0.1.
The two alternate in `--rounds` blocks of `--steps` steps, each side's median step taken.
Model FLOPs come from `t5x_mt.model.flops` for both; the peak is the best of NumPy, PyTorch and
jitted JAX, with and without XLA's oneDNN option (a subprocess each), on a 4096 x 4096
float32 matmul. XLA_FLAGS in the environment apply to our model and the in-process JAX
matmul. Ends with the figure lines bench/README.md describes.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

import jax
import numpy as np
import tqdm

from t5x_mt.core import cli
from t5x_mt.model import flops
from t5x_mt.config import gin_utils
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import partitioning
from t5x_mt.training import trainer
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

# Directions of the synthetic sentence pairs (only their ids matter to the step's cost).
DIRECTIONS = (('eng_Latn', 'hau_Latn'), ('fra_Latn', 'swh_Latn'), ('eng_Latn', 'yor_Latn'))
EOS_ID = 1
FIRST_WORD_ID = 3  # After pad 0, eos 1 and unk 2.
MATMUL_SIZE = 4096
# A pause before each block of steps: thread pools spin-wait for work a while after a call
# (PyTorch's OpenMP threads, XLA's), which would slow whichever side runs next.
SETTLE_SECONDS = 1.0


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


def our_train_steps(config: network.TransformerConfig, batch_size: int, length: int,
                    seed: int = 0, loss_chunk_length: int = 0):
  """Compiles the sharded train step; returns (compile seconds, tokens per step,
  run(steps) -> seconds of each step). Batches are placed on the device first, so the
  figures are the step's alone; the compile time is the first call's less a later one's.
  """
  mesh = partitioning.create_mesh((1, 1), jax.devices()[:1])
  rules = partitioning.logical_axis_rules()
  model = models.TranslationModel(config)
  optimizer = trainer.make_optimizer()
  direction_ids = sorted(Direction(src, tgt).id for src, tgt in DIRECTIONS)
  state, state_shardings = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, length, length),
      mesh, rules, jax.random.PRNGKey(seed))
  step = trainer.jit_train_step(
      trainer.make_train_step(model, optimizer, direction_ids=direction_ids,
                              loss_chunk_length=loss_chunk_length), state_shardings,
      mesh, rules)
  rng = np.random.default_rng(seed)
  batches = [partitioning.host_batch_to_global(
      synthetic_packed_batch(rng, batch_size, length, config.vocab_size, direction_ids), mesh)
             for _ in range(4)]
  step_rng = jax.random.PRNGKey(seed + 1)
  holder = {'state': state, 'calls': 0}

  def run(steps: int) -> list[float]:
    times = []
    for _ in tqdm.trange(steps, desc='ours', leave=False):
      start = time.perf_counter()
      holder['state'], metrics = jax.block_until_ready(
          step(holder['state'], batches[holder['calls'] % len(batches)], step_rng))
      times.append(time.perf_counter() - start)
      holder['calls'] += 1
    if not np.isfinite(float(metrics['loss_sum'])):
      raise RuntimeError('train step produced a non-finite loss')
    holder['tokens'] = float(metrics['tokens'])
    return times

  first_s = run(1)[0]
  compile_s = max(first_s - statistics.median(run(2)), 0.0)
  return compile_s, holder['tokens'], run


def peer_train_steps(config: network.TransformerConfig, batch_size: int, length: int,
                     seed: int = 0):
  """The PyTorch peer: (parameter count, tokens per step, run(steps) -> step seconds)."""
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  torch.manual_seed(seed)
  torch.set_num_threads(os.cpu_count())
  peer_config = transformers.MBartConfig(
      vocab_size=config.vocab_size, d_model=config.emb_dim,
      encoder_layers=config.num_encoder_layers, decoder_layers=config.num_decoder_layers,
      encoder_attention_heads=config.num_heads, decoder_attention_heads=config.num_heads,
      encoder_ffn_dim=config.mlp_dim, decoder_ffn_dim=config.mlp_dim,
      activation_function=config.mlp_activation, dropout=config.dropout_rate,
      attention_dropout=config.attention_dropout_rate, activation_dropout=0.0,
      max_position_embeddings=config.max_length, scale_embedding=False,
      tie_word_embeddings=True, pad_token_id=0, decoder_start_token_id=0)
  model = transformers.MBartForConditionalGeneration(peer_config).train()
  optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.1)
  generator = np.random.default_rng(seed)
  shape = (batch_size, length)
  batches = [{name: torch.from_numpy(generator.integers(FIRST_WORD_ID, config.vocab_size,
                                                          shape)) for name in
              ('input_ids', 'decoder_input_ids', 'labels')} for _ in range(4)]

  def step(batch):
    logits = model(input_ids=batch['input_ids'],
                   decoder_input_ids=batch['decoder_input_ids']).logits
    loss = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), batch['labels'].reshape(-1),
        label_smoothing=0.1)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return float(loss.detach())

  calls = [0]

  def run(steps: int) -> list[float]:
    times = []
    for _ in tqdm.trange(steps, desc='peer', leave=False):
      start = time.perf_counter()
      loss = step(batches[calls[0] % len(batches)])
      times.append(time.perf_counter() - start)
      calls[0] += 1
    if not np.isfinite(loss):
      raise RuntimeError('peer train step produced a non-finite loss')
    return times

  run(1)  # Warm-up: allocations.
  return sum(p.numel() for p in model.parameters()), batch_size * length, run


def _best_seconds(run, repeats: int) -> float:
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    run()
    times.append(time.perf_counter() - start)
  return min(times)


def matmul_peak(size: int = MATMUL_SIZE, repeats: int = 3) -> dict[str, float]:
  """FLOP/s of a [size, size] x [size, size] float32 matmul: NumPy, jitted JAX (this
  process's XLA_FLAGS), JAX with and without XLA's oneDNN option (fresh processes),
  PyTorch when installed; 'best' is the highest."""
  rng = np.random.default_rng(0)
  a = rng.standard_normal((size, size), np.float32)
  b = rng.standard_normal((size, size), np.float32)
  matmul_flops = 2.0 * size ** 3
  peaks = {'numpy': matmul_flops / _best_seconds(lambda: a @ b, repeats)}
  jax_matmul = jax.jit(lambda x, y: x @ y)
  a_device, b_device = jax.device_put(a), jax.device_put(b)
  jax_matmul(a_device, b_device).block_until_ready()  # Compile.
  peaks['jax'] = matmul_flops / _best_seconds(
      lambda: jax_matmul(a_device, b_device).block_until_ready(), repeats)
  for name, flags in (('jax_onednn', '--xla_cpu_use_onednn=true'),
                      ('jax_no_onednn', '--xla_cpu_use_onednn=false')):
    peaks[name] = _jax_matmul_in_subprocess(flags, size, repeats)
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    pass
  else:
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)
    peaks['torch'] = matmul_flops / _best_seconds(lambda: ta @ tb, repeats)
  peaks['best'] = max(peaks.values())
  return peaks


def _jax_matmul_in_subprocess(xla_flags: str, size: int, repeats: int) -> float:
  """The jitted JAX matmul's FLOP/s in a fresh process with `xla_flags` (XLA reads its
  flags once, at start-up)."""
  program = (
      'import time, jax, numpy as np\n'
      f'a = jax.device_put(np.random.default_rng(0).standard_normal(({size}, {size}), '
      'np.float32))\n'
      'f = jax.jit(lambda x, y: x @ y); f(a, a).block_until_ready()\n'
      'best = float("inf")\n'
      f'for _ in range({repeats}):\n'
      '  t = time.perf_counter(); f(a, a).block_until_ready()\n'
      '  best = min(best, time.perf_counter() - t)\n'
      f'print(2.0 * {size} ** 3 / best)\n')
  env = dict(os.environ, XLA_FLAGS=xla_flags)
  result = subprocess.run([sys.executable, '-c', program], env=env, capture_output=True,
                          text=True, check=True)
  return float(result.stdout.strip().splitlines()[-1])


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', default='gin/models/base.gin', help='gin model file')
  parser.add_argument('--batch_size', type=int, default=8, help='rows per step')
  parser.add_argument('--length', type=int, default=64,
                      help='source and target row length (positions per row)')
  parser.add_argument('--steps', type=int, default=5, help='timed steps per round')
  parser.add_argument('--rounds', type=int, default=2,
                      help='alternating blocks of --steps steps, ours then the peer')
  parser.add_argument('--no_peer', action='store_true', help='skip the PyTorch peer')
  parser.add_argument('--vocab_size', type=int, default=32128, help='embedding rows')
  parser.add_argument('--loss_chunk_length', type=int, default=0,
                      help='> 0: the chunked loss, this many decoder positions at a time')
  parser.add_argument('--seed', type=int, default=0)
  args = parser.parse_args(rest)
  for flag in ('batch_size', 'length', 'steps', 'rounds', 'vocab_size'):
    if getattr(args, flag) < 1:
      raise UserError(f'--{flag}: must be a positive integer, got {getattr(args, flag)}')
  if args.loss_chunk_length < 0:
    raise UserError(f'--loss_chunk_length: must be >= 0, got {args.loss_chunk_length}')
  if args.vocab_size <= FIRST_WORD_ID:
    raise UserError(f'--vocab_size: must exceed {FIRST_WORD_ID} (pad, eos, unk)')
  return args, bindings


def main(argv: list[str]) -> int:
  args, bindings = parse_args(argv)
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  gin_utils.parse_gin([args.model], bindings)
  config = configurables.model_config(args.vocab_size)
  if args.length > config.max_length:
    raise UserError(f'--length: {args.length} exceeds the model\'s max_length '
                    f'{config.max_length} ({args.model})')

  flops_per_token = flops.train_flops_per_target_token(config, args.length, args.length)
  print(f'model: {args.model} ({models.count_params(config) / 1e6:.1f}M parameters, '
        f'vocab {config.vocab_size}); batch {args.batch_size} x length {args.length}; '
        f'{flops_per_token / 1e6:.1f} MFLOP per target token')
  print(f'device: {jax.devices()[0].device_kind} ({os.cpu_count()} CPUs); '
        f'XLA_FLAGS={os.environ.get("XLA_FLAGS", "")!r}', flush=True)
  compile_s, tokens_per_step, run_ours = our_train_steps(config, args.batch_size, args.length,
                                                         args.seed, args.loss_chunk_length)
  run_peer = None
  if not args.no_peer:
    try:
      peer_params, peer_tokens, run_peer = peer_train_steps(config, args.batch_size,
                                                            args.length, args.seed)
    except ImportError:
      print('peer: torch/transformers not installed (pip install -r bench/requirements.txt)')
    else:
      print(f'peer: transformers MBart, {peer_params / 1e6:.1f}M parameters, '
            f'{peer_tokens} target tokens per step')
  ours_times, peer_times = [], []
  for _ in range(args.rounds):
    time.sleep(SETTLE_SECONDS)
    ours_times += run_ours(args.steps)
    if run_peer:
      time.sleep(SETTLE_SECONDS)
      peer_times += run_peer(args.steps)
  ours_step_s = statistics.median(ours_times)
  print(f'ours: median step {ours_step_s:.3f} s over {len(ours_times)} steps; '
        f'{tokens_per_step:.0f} target tokens per step')
  peak = matmul_peak()
  print(f'matmul {MATMUL_SIZE}^2 float32 GFLOP/s: ' + ', '.join(
      f'{name} {value / 1e9:.1f}' for name, value in peak.items() if name != 'best'))
  tokens_per_second = tokens_per_step / ours_step_s
  model_flops_per_second = tokens_per_second * flops_per_token
  print(f'compile_time: ours={compile_s:.1f} s')
  if run_peer:
    peer_step_s = statistics.median(peer_times)
    peer_tokens_per_second = peer_tokens / peer_step_s
    print(f'peer: median step {peer_step_s:.3f} s over {len(peer_times)} steps; '
          f'{peer_tokens_per_second * flops_per_token / peak["best"]:.3f} of the matmul peak')
    print(f'train_tokens_per_second: ours={tokens_per_second:.1f} tokens/s '
          f'transformers={peer_tokens_per_second:.1f} tokens/s '
          f'ratio={tokens_per_second / peer_tokens_per_second:.3f}')
  else:
    print(f'train_tokens_per_second: ours={tokens_per_second:.1f} tokens/s')
  print(f'model_flops_per_second: ours={model_flops_per_second / 1e9:.2f} GFLOP/s '
        f"matmul_peak={peak['best'] / 1e9:.2f} GFLOP/s "
        f"ratio={model_flops_per_second / peak['best']:.3f}")
  return 0


if __name__ == '__main__':
  cli.run(main)
