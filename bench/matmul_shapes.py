"""XLA's float32 products at the shapes of a training step and of a beam-search step,
against PyTorch's on the same shapes, threads and machine.

  pip install -r bench/requirements.txt   # the PyTorch peer
  python bench/matmul_shapes.py [--train_model=gin/models/base.gin] [--vocab_size=32128]
      [--train_rows=512] [--decode_model=gin/models/tiny.gin] [--decode_vocab_size=4096]
      [--decode_rows=64] [--products=20] [--repeats=5]

train_throughput.py and decode_throughput.py compare whole programs; this one isolates
the products inside them, the part XLA hands to its matmul library (YNNPACK/Eigen on CPU)
and that a program cannot do better than. A training step at `--train_rows` tokens runs
each layer's projections (queries, keys, values, output), its MLP and the output layer
against the tied embedding, forward and, for the gradients, with the output gradient
times the transposed weight and the transposed input times the output gradient. A beam
step runs the decoder's projections at `--decode_rows` = batch x beam rows (the
cross-attention's keys and values are computed once, before the loop) and the output
layer. Each distinct shape is timed `--products` times in a row (inside one jitted
`fori_loop` for XLA, so there is no dispatch per product; a Python loop for PyTorch, its
dispatch being microseconds), XLA and PyTorch alternating, best of `--repeats`; the step's
figure weights every shape by how often the step runs it. Ends with the figure lines of
bench/README.md: `ratio` is the fraction of PyTorch's product throughput XLA reaches.

Both sides use every core the process may run on; `taskset -c 0` gives one core's
figures, as decoding runs (a batch per core, `decoding.DecodeSettings.parallel_batches`).
"""

import argparse
import dataclasses
import os
import time

import gin
import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.core import cli
from t5x_mt.config import gin_utils
from t5x_mt.model import network
from t5x_mt.core.errors import UserError


@dataclasses.dataclass(frozen=True)
class Product:
  """[rows, inner] x [inner, cols], with either operand stored transposed, as the
  program holds it (the tied embedding is [vocab, embed]; weight gradients contract the
  token axis of both operands)."""
  rows: int
  inner: int
  cols: int
  lhs_transposed: bool = False
  rhs_transposed: bool = False

  @property
  def flops(self) -> float:
    return 2.0 * self.rows * self.inner * self.cols

  def operand_shapes(self) -> tuple[tuple[int, int], tuple[int, int]]:
    lhs = (self.inner, self.rows) if self.lhs_transposed else (self.rows, self.inner)
    rhs = (self.cols, self.inner) if self.rhs_transposed else (self.inner, self.cols)
    return lhs, rhs

  def __str__(self) -> str:
    return (f'[{self.rows},{self.inner}]{"^T" if self.lhs_transposed else ""} x '
            f'[{self.inner},{self.cols}]{"^T" if self.rhs_transposed else ""}')


def _add(counts: dict[Product, int], product: Product, times: int) -> None:
  counts[product] = counts.get(product, 0) + times


def forward_products(config: network.TransformerConfig, rows: int, *,
                     decode_step: bool) -> dict[Product, int]:
  """The products of one forward pass at `rows` tokens and how often each runs."""
  embed, heads = config.emb_dim, config.num_heads * config.head_dim
  # Lists, not dicts: with embed == heads the projections share a shape and must add up.
  def layer(stack: str) -> list[tuple[Product, int]]:
    mlp = config.mlp_dim_of(stack)
    return [(Product(rows, embed, heads), 3), (Product(rows, heads, embed), 1),
            (Product(rows, embed, mlp), 1), (Product(rows, mlp, embed), 1)]
  cross = [(Product(rows, embed, heads), 1 if decode_step else 3),
           (Product(rows, heads, embed), 1)]
  stacks = [(config.num_decoder_layers, layer('decoder') + cross)]
  if not decode_step:
    stacks.append((config.num_encoder_layers, layer('encoder')))
  counts: dict[Product, int] = {}
  for depth, products in stacks:
    for product, times in products:
      _add(counts, product, depth * times)
  _add(counts, Product(rows, embed, config.vocab_size, rhs_transposed=True), 1)
  return counts


def training_products(config: network.TransformerConfig, rows: int) -> dict[Product, int]:
  """Forward products plus, for each, the input gradient (output gradient times the
  transposed weight) and the weight gradient (transposed input times output gradient)."""
  counts: dict[Product, int] = {}
  for p, times in forward_products(config, rows, decode_step=False).items():
    _add(counts, p, times)
    _add(counts, Product(p.rows, p.cols, p.inner, rhs_transposed=not p.rhs_transposed), times)
    weight_rows, weight_cols = (p.cols, p.inner) if p.rhs_transposed else (p.inner, p.cols)
    _add(counts, Product(weight_rows, p.rows, weight_cols, lhs_transposed=True), times)
  return counts


def _xla_seconds(product: Product, lhs: np.ndarray, rhs: np.ndarray, repeat: int):
  """run() -> seconds per product over `repeat` products in one jitted loop. Each
  product's left operand is shifted by the step number, so XLA cannot hoist it."""
  def body(step, carry):
    shifted = lhs_device + step.astype(jnp.float32)
    left = shifted.T if product.lhs_transposed else shifted
    right = rhs_device.T if product.rhs_transposed else rhs_device
    return carry + left @ right

  lhs_device, rhs_device = jax.device_put(lhs), jax.device_put(rhs)
  loop = jax.jit(lambda: jax.lax.fori_loop(
      0, repeat, body, jnp.zeros((product.rows, product.cols), jnp.float32)))
  loop().block_until_ready()  # Compile.

  def run() -> float:
    start = time.perf_counter()
    loop().block_until_ready()
    return (time.perf_counter() - start) / repeat
  return run


def _torch_seconds(product: Product, lhs: np.ndarray, rhs: np.ndarray, repeat: int):
  """run() -> seconds per product over `repeat` products, as `_xla_seconds` computes them."""
  import torch  # pylint: disable=g-import-not-at-top
  lhs_t, rhs_t = torch.from_numpy(lhs), torch.from_numpy(rhs)
  shifted = torch.empty_like(lhs_t)
  total = torch.zeros((product.rows, product.cols))

  def run() -> float:
    start = time.perf_counter()
    for step in range(repeat):
      torch.add(lhs_t, float(step), out=shifted)
      left = shifted.T if product.lhs_transposed else shifted
      right = rhs_t.T if product.rhs_transposed else rhs_t
      total.addmm_(left, right)
    return (time.perf_counter() - start) / repeat
  run()  # Warm-up: allocations and thread start.
  return run


def time_products(counts: dict[Product, int], repeat: int,
                  repeats: int) -> dict[Product, tuple[float, float]]:
  """(XLA seconds, PyTorch seconds) per product, each the best of `repeats` blocks."""
  rng = np.random.default_rng(0)
  seconds = {}
  for product in counts:
    lhs_shape, rhs_shape = product.operand_shapes()
    lhs = rng.standard_normal(lhs_shape, np.float32)
    rhs = rng.standard_normal(rhs_shape, np.float32)
    runs = (_xla_seconds(product, lhs, rhs, repeat), _torch_seconds(product, lhs, rhs, repeat))
    best = [float('inf'), float('inf')]
    for _ in range(repeats):
      for side, run in enumerate(runs):
        best[side] = min(best[side], run())
    seconds[product] = (best[0], best[1])
  return seconds


def report(figure: str, counts: dict[Product, int],
           seconds: dict[Product, tuple[float, float]]) -> None:
  """Prints the shapes' table and the figure line: FLOP-weighted throughput of the step's
  products, XLA against PyTorch."""
  print(f'{figure}: product, times per step, GFLOP/s xla, torch, ratio')
  totals = np.zeros(3)
  for product, times in sorted(counts.items(), key=lambda item: -item[0].flops * item[1]):
    xla_s, torch_s = seconds[product]
    print(f'  {str(product):28s} x{times:3d}  {product.flops / xla_s / 1e9:7.1f} '
          f'{product.flops / torch_s / 1e9:7.1f}  {torch_s / xla_s:5.2f}')
    totals += (product.flops * times, xla_s * times, torch_s * times)
  flops, xla_s, torch_s = totals
  print(f'{figure}: ours={flops / xla_s / 1e9:.1f} GFLOP/s torch={flops / torch_s / 1e9:.1f} '
        f'GFLOP/s ratio={torch_s / xla_s:.3f}')


def model_config(gin_file: str, vocab_size: int) -> network.TransformerConfig:
  """The TransformerConfig a gin model file sets, with `vocab_size` embedding rows."""
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  gin.clear_config()
  gin_utils.parse_gin([gin_file], [])
  return configurables.model_config(vocab_size)


def parse_args(argv: list[str]) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--train_model', default='gin/models/base.gin')
  parser.add_argument('--vocab_size', type=int, default=32128,
                      help="training model's embedding rows")
  parser.add_argument('--train_rows', type=int, default=512,
                      help='tokens per training step (train_throughput: batch x length)')
  parser.add_argument('--decode_model', default='gin/models/tiny.gin',
                      help="decoding model (decode_throughput's demo run is tiny.gin)")
  parser.add_argument('--decode_vocab_size', type=int, default=4096,
                      help="decoding model's embedding rows (the demo's 4000 pieces, padded)")
  parser.add_argument('--decode_rows', type=int, default=64, help='batch x beam')
  parser.add_argument('--products', type=int, default=20, help='products per timed block')
  parser.add_argument('--repeats', type=int, default=5, help='timed blocks; best taken')
  args = parser.parse_args(argv)
  for flag in ('vocab_size', 'train_rows', 'decode_vocab_size', 'decode_rows', 'products',
               'repeats'):
    if getattr(args, flag) < 1:
      raise UserError(f'--{flag}: must be a positive integer, got {getattr(args, flag)}')
  return args


def main(argv: list[str]) -> int:
  args = parse_args(argv)
  try:
    import torch  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise UserError('the peer needs torch: pip install -r bench/requirements.txt') from None
  cores = len(os.sched_getaffinity(0))
  torch.set_num_threads(cores)
  print(f'device: {jax.devices()[0].device_kind} ({cores} CPUs); '
        f'XLA_FLAGS={os.environ.get("XLA_FLAGS", "")!r}; torch {torch.__version__}, '
        f'{torch.get_num_threads()} threads', flush=True)
  train = training_products(model_config(args.train_model, args.vocab_size), args.train_rows)
  decode = forward_products(model_config(args.decode_model, args.decode_vocab_size),
                            args.decode_rows, decode_step=True)
  for figure, counts in (('train_step_products', train), ('decode_step_products', decode)):
    report(figure, counts, time_products(counts, args.products, args.repeats))
  return 0


if __name__ == '__main__':
  cli.run(main)
