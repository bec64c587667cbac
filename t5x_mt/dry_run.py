"""A run's size and per-device memory, from shapes alone (`launch/train.py --dry_run`)."""

from collections.abc import Sequence
import dataclasses
from typing import Any

import flax.linen as nn
import jax
from jax.sharding import PartitionSpec
import numpy as np
import tensorflow as tf

from t5x_mt import models
from t5x_mt import network
from t5x_mt import partitioning
from t5x_mt import run_config
from t5x_mt import run_vocabulary
from t5x_mt import trainer


def _shard_bytes(abstract_tree: Any, mesh_sizes: dict[str, int], rules) -> int:
  """Bytes one device holds of a boxed abstract tree under the given mesh axis sizes."""
  specs = nn.get_partition_spec(abstract_tree)
  mesh_specs = nn.logical_to_mesh(specs, rules)
  total = 0
  for leaf, spec in zip(jax.tree_util.tree_leaves(nn.unbox(abstract_tree)),
                        jax.tree_util.tree_leaves(
                            mesh_specs, is_leaf=lambda x: isinstance(x, PartitionSpec))):
    shape = list(leaf.shape)
    for dim, axes in enumerate(tuple(spec)[:len(shape)]):
      for axis in (axes if isinstance(axes, tuple) else (axes,)):
        if axis is not None:
          shape[dim] = -(-shape[dim] // mesh_sizes[axis])
    total += int(np.prod(shape, dtype=np.int64)) * leaf.dtype.itemsize
  return total


def memory_report(config: network.TransformerConfig, mesh_shape: Sequence[int],
                  inputs_length: int, targets_length: int,
                  rules: partitioning.LogicalRules | None = None) -> dict[str, Any]:
  """Parameter count and the bytes of parameters and optimizer state per device.

  Nothing is allocated: shapes come from `jax.eval_shape`.
  """
  model = models.TranslationModel(config)
  optimizer = trainer.make_optimizer()
  abstract = jax.eval_shape(
      lambda rng: trainer.init_train_state(model, optimizer, rng, inputs_length, targets_length),
      jax.random.PRNGKey(0))
  mesh_sizes = (partitioning.mesh_axis_sizes(mesh_shape, jax.device_count())
                if -1 in mesh_shape else partitioning.mesh_axis_sizes(
                    mesh_shape, int(np.prod(mesh_shape))))
  rules = rules or partitioning.logical_axis_rules()
  return {
      'parameters': models.count_params(config),
      'vocab_size': config.vocab_size,
      'mesh_shape': list(mesh_sizes.values()),
      'param_bytes_per_device': _shard_bytes(abstract.params, mesh_sizes, rules),
      'optimizer_bytes_per_device': _shard_bytes(abstract.opt_state, mesh_sizes, rules),
  }


def run_report(spec: run_config.RunSpec, vocab_size: int | None = None) -> dict[str, Any]:
  """`memory_report` of a configured run. The vocabulary size is `vocab_size` if given,
  else that of the run's vocabulary file if it exists, else the size it would be built
  with."""
  if vocab_size is None:
    if tf.io.gfile.exists(spec.data.vocabulary_path):
      vocab_size = run_vocabulary.num_pieces(
          tf.io.gfile.GFile(spec.data.vocabulary_path, 'rb').read())
    else:
      vocab_size = (spec.vocabulary or run_vocabulary.VocabularyConfig()).vocab_size
  config = dataclasses.replace(spec.model,
                               vocab_size=run_vocabulary.padded_vocab_size(vocab_size))
  return memory_report(config, spec.train.mesh_shape, spec.train.inputs_length,
                       spec.train.targets_length)
