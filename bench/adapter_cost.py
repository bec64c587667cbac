"""What language-specific adapters add to a training step, and what sharing their
normalisation saves.

  python bench/adapter_cost.py [--rows=32] [--length=64] [--repeats=4]

The tiny demo model (3+3 layers, d 256) with the demo's 7 target-language adapters
(bottlenecks 4 x 256, 2 x 128, 64; gin/runs/adapters/demo.gin) after every layer, on packed
rows that mix two directions. Times the gradient of the loss (forward and backward) of
three models, interleaved in one process so machine noise hits all alike:
  base          no adapters
  adapters      t5x_mt.model.adapters as shipped: one normalisation of each layer's output,
                shared by the adapters' LayerNorms (each its own scale and bias)
  adapters_ln   the same adapters, each normalising the layer output itself
The FLOPs of their bottleneck matmuls are the cost to expect (bench/README.md compares).
"""

import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.model import adapters
from t5x_mt.model import network
from t5x_mt.core.directions import Direction

KEYS = ('eng_Latn', 'fra_Latn', 'hau_Latn', 'swh_Latn', 'zul_Latn', 'amh_Ethi', 'yor_Latn')
BOTTLENECKS = (256, 256, 256, 256, 128, 128, 64)


class AdaptersOwnNorm(adapters.Adapters):
  """Adapters whose LayerNorms each normalise the input again (the textbook layout)."""

  @nn.compact
  def __call__(self, x, index):
    for number, (key, bottleneck) in enumerate(zip(self.keys, self.bottlenecks)):
      residual = adapters.Adapter(bottleneck, self.dtype, name=key)(x)
      if index is not None:
        x = x + jnp.where((index == number)[..., None], residual, 0).astype(x.dtype)
    return x


def batch(rows: int, length: int) -> dict[str, jax.Array]:
  rng = np.random.default_rng(0)
  tokens = {name: jnp.asarray(rng.integers(3, 4000, (rows, length)), jnp.int32)
            for name in ('encoder_input_tokens', 'decoder_input_tokens',
                         'decoder_target_tokens')}
  pair = [Direction('eng_Latn', 'hau_Latn').id,
          Direction('eng_Latn', 'fra_Latn').id]
  ids = np.where(np.arange(length)[None, :] < length // 2, pair[0], pair[1])
  segments = np.where(np.arange(length)[None, :] < length // 2, 1, 2)
  return dict(tokens, decoder_direction_ids=jnp.asarray(np.repeat(ids, rows, 0)),
              encoder_segment_ids=jnp.asarray(np.repeat(segments, rows, 0)),
              decoder_segment_ids=jnp.asarray(np.repeat(segments, rows, 0)))


def gradient_fn(config: network.TransformerConfig, inputs):
  model = network.Transformer(config)
  params = nn.meta.unbox(model.init(jax.random.PRNGKey(0), **inputs)['params'])
  grad = jax.jit(jax.grad(lambda p: model.apply({'params': p}, **inputs).sum()))
  jax.block_until_ready(grad(params))  # Compile.
  return lambda: jax.block_until_ready(grad(params))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--rows', type=int, default=32)
  parser.add_argument('--length', type=int, default=64)
  parser.add_argument('--repeats', type=int, default=4)
  args = parser.parse_args()
  inputs = batch(args.rows, args.length)
  tiny = dict(vocab_size=4096, emb_dim=256, num_heads=4, head_dim=64, mlp_dim=1024,
              num_encoder_layers=3, num_decoder_layers=3, max_length=256)
  with_adapters = network.TransformerConfig(**tiny, adapter_keys=KEYS,
                                            adapter_bottlenecks=BOTTLENECKS)
  variants = {'base': gradient_fn(network.TransformerConfig(**tiny), inputs),
              'adapters': gradient_fn(with_adapters, inputs)}
  shipped = adapters.Adapters
  network.adapters.Adapters = AdaptersOwnNorm  # network builds adapters through this name.
  try:
    variants['adapters_ln'] = gradient_fn(with_adapters, inputs)
  finally:
    network.adapters.Adapters = shipped
  times = {name: [] for name in variants}
  for _ in range(args.repeats):
    for name, run in variants.items():
      start = time.perf_counter()
      run()
      times[name].append(time.perf_counter() - start)
  best = {name: min(values) for name, values in times.items()}
  print(f'jax {jax.__version__} on {jax.devices()[0].device_kind}; {args.rows} rows x '
        f'{args.length} tokens; best of {args.repeats}')
  for name in ('adapters', 'adapters_ln'):
    print(f'{name}_step_time: ours={best[name]:.3f} s base={best["base"]:.3f} s '
          f'ratio={best[name] / best["base"]:.2f}')
  print(f'shared_normalisation_speedup: ours={best["adapters"]:.3f} s '
        f'adapters_ln={best["adapters_ln"]:.3f} s '
        f'ratio={best["adapters_ln"] / best["adapters"]:.2f}')


if __name__ == '__main__':
  main()
