"""Memory and time of the output softmax loss at large vocabularies: chunked vs plain.

  python bench/loss_memory.py [--vocab_sizes=131072,262144] [--rows=4] [--length=256] \
      [--embed=512] [--chunk_length=16] [--repeats=2]

The gradient (d hidden, d projection) of the label-smoothed cross entropy of logits =
hidden . embedding^T / sqrt(d), a tied [vocab, embed] embedding as in the models here, two
ways in one process:
  chunked  fused_loss.chunked_label_smoothed_objective (train.loss_chunk_length):
           `chunk` decoder positions of every row at a time, gradients in the same pass
  plain    logits materialised, losses.label_smoothed_cross_entropy, jax.grad
`temp_memory` is XLA's buffer assignment for the compiled gradient (temporaries beyond the
inputs and outputs, from `compiled.memory_analysis()`), so it is exact and independent of
machine load; `seconds` is the best of --repeats runs, interleaved. Runs whose plain
logits would not fit in this machine's memory can still be compared by memory with
--no_run.
"""

import argparse
import time

import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.model import losses
from t5x_mt.model import fused_loss

LABEL_SMOOTHING = 0.1


def gradient_fns(chunk_length: int, scale: float):
  def chunked(hidden, embedding, targets, weights):
    return fused_loss.chunked_label_smoothed_objective(
        hidden, embedding, targets, weights, LABEL_SMOOTHING, scale, True, chunk_length)[0]

  def plain(hidden, embedding, targets, weights):
    logits = jnp.einsum('ble,ve->blv', hidden, embedding,
                        preferred_element_type=jnp.float32) * scale
    return losses.label_smoothed_cross_entropy(logits, targets, weights,
                                               LABEL_SMOOTHING).sum()

  return {name: jax.jit(jax.grad(fn, argnums=(0, 1))) for name, fn in
          (('chunked', chunked), ('plain', plain))}


def inputs(rows: int, length: int, embed: int, vocab: int):
  rng = np.random.default_rng(0)
  return (jnp.asarray(rng.normal(size=(rows, length, embed)), jnp.float32),
          jnp.asarray(rng.normal(size=(vocab, embed)), jnp.float32),
          jnp.asarray(rng.integers(0, vocab, (rows, length)), jnp.int32),
          jnp.ones((rows, length), jnp.float32))


def best_seconds(compiled: dict, args, repeats: int) -> dict[str, float]:
  """Best time of each compiled function, the runs interleaved so load hits all alike."""
  best = {name: float('inf') for name in compiled}
  for _ in range(repeats):
    for name, fn in compiled.items():
      start = time.perf_counter()
      jax.block_until_ready(fn(*args))
      best[name] = min(best[name], time.perf_counter() - start)
  return best


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--vocab_sizes', default='131072,262144')
  parser.add_argument('--rows', type=int, default=4)
  parser.add_argument('--length', type=int, default=256)
  parser.add_argument('--embed', type=int, default=512)
  parser.add_argument('--chunk_length', type=int, default=16)
  parser.add_argument('--repeats', type=int, default=2)
  parser.add_argument('--no_run', action='store_true', help='compare memory only')
  args = parser.parse_args()
  print(f'jax {jax.__version__} on {jax.devices()[0].device_kind}; {args.rows} rows x '
        f'{args.length} positions, embed {args.embed}, chunk {args.chunk_length} positions')
  fns = gradient_fns(args.chunk_length, 1.0 / np.sqrt(args.embed))
  for vocab in (int(v) for v in args.vocab_sizes.split(',')):
    arrays = inputs(args.rows, args.length, args.embed, vocab)
    compiled = {name: fn.lower(*arrays).compile() for name, fn in fns.items()}
    memory = {name: c.memory_analysis().temp_size_in_bytes / 2**20
              for name, c in compiled.items()}
    logits_mib = args.rows * args.length * vocab * 4 / 2**20
    print(f'vocab {vocab}: full float32 logits would be {logits_mib:.0f} MiB')
    print(f'temp_memory_vocab_{vocab}: ours={memory["chunked"]:.1f} MiB '
          f'plain={memory["plain"]:.1f} MiB ratio={memory["chunked"] / memory["plain"]:.3f}')
    if args.no_run:
      continue
    results = {name: jax.device_get(c(*arrays)) for name, c in compiled.items()}
    gap = max(float(np.max(np.abs(a - b)) / (np.max(np.abs(b)) + 1e-30))
              for a, b in zip(results['chunked'], results['plain']))
    print(f'  largest gradient difference relative to its array max: {gap:.2e}')
    seconds = best_seconds(compiled, arrays, args.repeats)
    print(f'seconds_vocab_{vocab}: ours={seconds["chunked"]:.2f} s '
          f'plain={seconds["plain"]:.2f} s ratio={seconds["chunked"] / seconds["plain"]:.3f}')


if __name__ == '__main__':
  main()
