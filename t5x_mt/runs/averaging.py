"""Checkpoint averaging: the mean of several restored parameter trees."""

from collections.abc import Iterable
from typing import Any

import jax
import jax.numpy as jnp


def mean_params(trees: Iterable[Any]) -> Any:
  """The element-wise mean of parameter trees of one structure, in their dtype.

  The trees are taken one at a time into a float32 running mean, so that memory holds
  two models whatever the number of trees (pass a generator that restores each in
  turn).
  """
  mean, dtypes = None, None
  for count, tree in enumerate(trees, start=1):
    if mean is None:
      mean = jax.tree_util.tree_map(lambda p: p.astype(jnp.float32), tree)
      dtypes = jax.tree_util.tree_map(lambda p: p.dtype, tree)
    else:
      mean = jax.tree_util.tree_map(lambda m, p: m + (p - m) / count, mean, tree)
    del tree
  if mean is None:
    raise ValueError('mean_params: no parameter trees to average')
  return jax.tree_util.tree_map(lambda m, dtype: m.astype(dtype), mean, dtypes)
