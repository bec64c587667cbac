"""Sharding changes how the work is split, never what is computed."""

import dataclasses

import jax
import numpy as np
import pytest

from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import partitioning
from t5x_mt.training import trainer
from t5x_mt.core.errors import UserError

TINY = network.TransformerConfig(vocab_size=256, emb_dim=32, num_heads=4, head_dim=8,
                                 mlp_dim=64, num_encoder_layers=2, num_decoder_layers=2,
                                 dropout_rate=0.1, max_length=64)
# Each mesh compiles its own initialisation and step: one layer a stack takes 40% off both,
# and a sharded layer computes what an unsharded one does whether the stack holds one or many.
ONE_LAYER = dataclasses.replace(TINY, num_encoder_layers=1, num_decoder_layers=1)
DIRECTIONS = (3, 7)


def packed_batch(seed: int, batch_size: int = 16, length: int = 24) -> dict[str, np.ndarray]:
  """Rows of two packed sentence pairs each, followed by padding, as seqio packs them."""
  rng = np.random.default_rng(seed)
  batch = {name: np.zeros((batch_size, length), np.int32)
           for name in models.MODEL_INPUTS + ('decoder_loss_weights', 'decoder_direction_ids')}
  for row in range(batch_size):
    start = {'encoder': 0, 'decoder': 0}
    for segment in (1, 2):
      for side in ('encoder', 'decoder'):
        size = int(rng.integers(3, length // 2 - 1))
        span = slice(start[side], start[side] + size)
        tokens = rng.integers(3, TINY.vocab_size, size)
        if side == 'encoder':
          batch['encoder_input_tokens'][row, span] = tokens
        else:
          batch['decoder_target_tokens'][row, span] = tokens
          batch['decoder_input_tokens'][row, span] = np.concatenate([[0], tokens[:-1]])
          batch['decoder_loss_weights'][row, span] = 1
          batch['decoder_direction_ids'][row, span] = DIRECTIONS[segment - 1]
        batch[f'{side}_segment_ids'][row, span] = segment
        batch[f'{side}_positions'][row, span] = np.arange(size)
        start[side] += size
  return batch


def train(mesh_shape, devices, steps: int = 5) -> tuple[list[float], dict]:
  """Each step's loss and the final parameters (as NumPy) of a few steps on `mesh_shape`."""
  mesh = partitioning.create_mesh(mesh_shape, devices)
  rules = partitioning.DEFAULT_RULES
  model = models.TranslationModel(ONE_LAYER)
  # Adam's eps well above rounding noise: a key bias's gradient is zero but for rounding
  # (softmax ignores a constant shift), and with eps=1e-9 Adam would blow that noise up to
  # learning-rate-sized steps that differ between meshes.
  optimizer = trainer.make_optimizer(trainer.inverse_sqrt_schedule(1e-3, 10), eps=1e-4)
  state, shardings = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, 24, 24), mesh, rules,
      jax.random.PRNGKey(0))
  step = trainer.jit_train_step(
      trainer.make_train_step(model, optimizer, direction_ids=DIRECTIONS), shardings, mesh,
      rules)
  losses = []
  for i in range(steps):
    batch = partitioning.host_batch_to_global(packed_batch(i), mesh)
    state, metrics = step(state, batch, jax.random.PRNGKey(1))
    losses.append(float(metrics['loss_sum'] / metrics['tokens']))
  return losses, jax.device_get(state.params)


@pytest.fixture(scope='module')
def single_device_run():
  assert jax.device_count() == 8, 'tests/conftest.py fakes 8 CPU devices'
  return train((1, 1), jax.devices()[:1])


@pytest.mark.slow
@pytest.mark.parametrize('mesh_shape', [(8, 1), (4, 2), (1, 8, 1), (2, 2, 2), (4, 1, 2)])
def test_losses_and_parameters_agree_across_meshes(single_device_run, mesh_shape):
  single_losses, single_params = single_device_run
  losses, params = train(mesh_shape, jax.devices())
  assert single_losses[-1] < single_losses[0]  # It learns: equal curves are not constant.
  np.testing.assert_allclose(losses, single_losses, rtol=1e-5)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6),
               params, single_params)


def test_parameters_are_sharded_over_model_axis():
  mesh = partitioning.create_mesh((4, 2))
  model = models.TranslationModel(ONE_LAYER)
  optimizer = trainer.make_optimizer()
  state, _ = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, 8, 8), mesh,
      partitioning.DEFAULT_RULES, jax.random.PRNGKey(0))
  wi = state.params['encoder']['layers_0']['mlp']['wi']['kernel']
  assert wi.sharding.spec == jax.sharding.PartitionSpec('fsdp', 'model')
  assert wi.addressable_shards[0].data.shape == (ONE_LAYER.emb_dim, ONE_LAYER.mlp_dim // 2)
  embedding = state.params['shared_embedding']['embedding']
  assert embedding.addressable_shards[0].data.shape == (ONE_LAYER.vocab_size // 2,
                                                        ONE_LAYER.emb_dim)


def test_parameters_and_optimizer_state_are_sharded_over_fsdp():
  mesh = partitioning.create_mesh((1, 4, 2))
  model = models.TranslationModel(ONE_LAYER)
  state, _ = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, trainer.make_optimizer(), rng, 8, 8), mesh,
      partitioning.DEFAULT_RULES, jax.random.PRNGKey(0))
  wi = state.params['encoder']['layers_0']['mlp']['wi']['kernel']
  assert wi.addressable_shards[0].data.shape == (ONE_LAYER.emb_dim // 4,
                                                ONE_LAYER.mlp_dim // 2)
  moments = [leaf for leaf in jax.tree.leaves(state.opt_state) if leaf.shape == wi.shape]
  assert moments and all(m.addressable_shards[0].data.shape == (ONE_LAYER.emb_dim // 4,
                                                                ONE_LAYER.mlp_dim // 2)
                         for m in moments)


def test_activations_shard_their_batch_over_data_and_fsdp():
  mesh = partitioning.create_mesh((2, 2, 2))
  assert partitioning.batch_shards(mesh) == 4
  batch = partitioning.host_batch_to_global(packed_batch(0, batch_size=8), mesh)
  rows = {shard.data.shape[0] for shard in batch['encoder_input_tokens'].addressable_shards}
  assert rows == {2}


def test_mesh_shape_fills_minus_one_and_rejects_mismatch():
  assert partitioning.create_mesh((-1, 2)).shape == {'data': 4, 'fsdp': 1, 'model': 2}
  assert partitioning.create_mesh((2, -1, 2)).shape == {'data': 2, 'fsdp': 2, 'model': 2}
  with pytest.raises(UserError, match='MESH_SHAPE'):
    partitioning.create_mesh((3, 2))


def test_unknown_mesh_axis_in_rules_is_a_user_error():
  with pytest.raises(UserError, match='logical_axis_rules.rules'):
    partitioning.logical_axis_rules((('batch', 'dta'),))


def test_batch_must_divide_over_data_axis():
  with pytest.raises(UserError, match='BATCH_SIZE'):
    partitioning.check_batch_divisible(12, partitioning.create_mesh((8, 1)))
