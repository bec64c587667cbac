"""One optimizer update (global-norm clipping + AdamW) over a model's parameters: ours
against the optax chain it replaces and against PyTorch's AdamW.

  python bench/optimizer_update.py [--model=gin/models/base.gin] [--vocab_size=32128] \
      [--repeats=10] [--gin.NAME=VALUE ...]

The update is memory-bound: it reads every parameter, gradient and both moments and writes
three of them back, so its time is a fixed cost of every training step whatever the batch.
Timed, each on the model's real parameter shapes, interleaved, best of --repeats:
  ours         t5x_mt.training.optimizers.clipped_adamw then optax.apply_updates, jitted, the
               parameters and state donated (as the train step does)
  optax_chain  optax.chain(clip_by_global_norm, adamw(mask=...)), jitted the same way
  torch_*      torch.nn.utils.clip_grad_norm_ then torch.optim.AdamW, 'fused=True' (one
               kernel per parameter) and the default implementation (when torch is
               installed: pip install -r bench/requirements.txt)
"""

import argparse
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax

from t5x_mt.core import cli
from t5x_mt.config import gin_utils
from t5x_mt.model import models
from t5x_mt.training import optimizers

SETTINGS = dict(b1=0.9, b2=0.98, eps=1e-9, weight_decay=0.1,
                mask=lambda params: jax.tree.map(lambda p: p.ndim > 1, params))


def jax_update(transformation: optax.GradientTransformation, params):
  """run() -> one jitted, donated update of fresh copies of `params`."""
  def step(params, state, grads):
    updates, state = transformation.update(grads, state, params)
    return optax.apply_updates(params, updates), state

  step = jax.jit(step, donate_argnums=(0, 1))
  holder = {'params': jax.tree.map(jnp.copy, params)}
  holder['state'] = transformation.init(holder['params'])
  grads = jax.tree.map(lambda p: 1e-3 * p, params)

  def run():
    holder['params'], holder['state'] = jax.block_until_ready(
        step(holder['params'], holder['state'], grads))

  return run


def torch_update(params, fused: bool):
  import torch  # pylint: disable=g-import-not-at-top
  tensors = [torch.nn.Parameter(torch.from_numpy(np.array(p)))
             for p in jax.tree.leaves(params)]
  for tensor in tensors:
    tensor.grad = 1e-3 * tensor.detach().clone()
  optimizer = torch.optim.AdamW(tensors, lr=1e-3, betas=(0.9, 0.98), eps=1e-9,
                                weight_decay=0.1, fused=fused or None)

  def run():
    torch.nn.utils.clip_grad_norm_(tensors, 1.0)
    optimizer.step()

  return run


def main(argv: list[str]) -> int:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--model', default='gin/models/base.gin')
  parser.add_argument('--vocab_size', type=int, default=32128)
  parser.add_argument('--repeats', type=int, default=10)
  args = parser.parse_args(rest)
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top  (TF after cli setup)
  gin_utils.parse_gin([args.model], bindings)
  config = configurables.model_config(args.vocab_size)
  abstract = nn.meta.unbox(models.abstract_variables(config)['params'])
  params = jax.tree.map(lambda p: jnp.full(p.shape, 0.01, p.dtype), abstract)
  count = sum(p.size for p in jax.tree.leaves(params))
  print(f'model: {args.model} ({count / 1e6:.1f}M parameters in '
        f'{len(jax.tree.leaves(params))} arrays), float32')
  runs = {'ours': jax_update(optimizers.clipped_adamw(1e-3, clip_norm=1.0, **SETTINGS),
                            params),
          'optax_chain': jax_update(optax.chain(optax.clip_by_global_norm(1.0),
                                                optax.adamw(1e-3, **SETTINGS)), params)}
  try:
    runs['torch_fused'] = torch_update(params, fused=True)
    runs['torch_default'] = torch_update(params, fused=False)
  except ImportError:
    print('torch not installed: pip install -r bench/requirements.txt')
  best = {name: float('inf') for name in runs}
  for run in runs.values():
    run()  # Compilation, allocations.
  for _ in range(args.repeats):
    for name, run in runs.items():
      start = time.perf_counter()
      run()
      best[name] = min(best[name], time.perf_counter() - start)
  for name in runs:
    if name != 'ours':
      print(f'optimizer_update_seconds: ours={best["ours"]:.4f} s {name}={best[name]:.4f} s '
            f'ratio={best["ours"] / best[name]:.3f}')
  return 0


if __name__ == '__main__':
  cli.run(main)
