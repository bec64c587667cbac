"""The seed architectures with the features that handle their parameters or activations:
scanned stacks and rematerialisation, adapters, sharding over 'fsdp' and 'model', the dry
run and --topology, checkpoint layouts and fine-tuning from another run."""

import dataclasses
import math
import pathlib

from flax import traverse_util
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from t5x_mt.runs import checkpoints
from t5x_mt.config import configurables
from t5x_mt.training import dry_run as dry_runs
from t5x_mt.training import fine_tuning
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.model import parameter_layout
from t5x_mt.core import partitioning
from t5x_mt.training import trainer
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

from test_dry_run import compiled_report, needs_libtpu
from test_network import random_params
from test_partitioning import DIRECTIONS, TINY, packed_batch

# At once, everything the features below could treat otherwise than a pre-LN model: no
# final norms, B2T's bottom-to-top residual and scaled initialisation, relative tables in
# both stacks' self-attention (k = 4, below the packed sequences' lengths, so distances
# clip), a feed-forward width per stack, and adapters for the packed batches' targets.
B2T_RELATIVE = dataclasses.replace(
    TINY, layer_norm='post_b2t', position_embedding='relative', relative_in_decoder=True,
    relative_max_distance=4, encoder_mlp_dim=48, decoder_mlp_dim=96)
ADAPTER_KEYS = tuple(sorted({Direction.from_id(i).tgt_lang for i in DIRECTIONS}))
WITH_ADAPTERS = dataclasses.replace(B2T_RELATIVE, adapter_keys=ADAPTER_KEYS,
                                    adapter_bottlenecks=(4, 8))
MESH_SHAPE = (1, 2, 2)  # Parameters split over 'fsdp' and 'model', rows over 'fsdp'.


def _scanned(config: network.TransformerConfig, **overrides) -> network.TransformerConfig:
  return dataclasses.replace(config, scan_layers=True, **overrides)


def _mesh() -> jax.sharding.Mesh:
  return partitioning.create_mesh(MESH_SHAPE, jax.devices()[:math.prod(MESH_SHAPE)])


def _assert_trees_close(actual, expected, atol: float = 0.0) -> None:
  assert jax.tree.structure(actual) == jax.tree.structure(expected)
  jax.tree.map(lambda a, e: np.testing.assert_allclose(a, e, rtol=0, atol=atol), actual,
               expected)


def _loss_and_grads(config: network.TransformerConfig, params, mesh=None, **loss_options):
  """The training objective of packed rows (relative distances restart in each sequence)
  and its gradients, on one device or sharded over `mesh` by the default rules."""
  model = models.TranslationModel(config)
  objective = jax.value_and_grad(lambda p, batch: model.loss_fn(
      p, batch, None, direction_ids=jnp.asarray(DIRECTIONS), label_smoothing=0.1,
      **loss_options)['objective_sum'])
  batch = packed_batch(0, batch_size=4)
  if mesh is None:
    return jax.jit(objective)(params, batch)
  rules = partitioning.DEFAULT_RULES
  shardings = partitioning.logical_to_shardings(models.abstract_variables(config), mesh,
                                                rules)['params']
  with partitioning.activation_sharding(mesh, rules):
    return jax.device_get(jax.jit(objective)(jax.device_put(params, shardings),
                                             partitioning.host_batch_to_global(batch, mesh)))


@pytest.mark.slow
def test_scanned_rematerialised_and_sharded_b2t_relative_layers_compute_the_unrolled_model():
  # Relative ids broadcast into the scan, remat's static flags, relative tables whole on
  # every device, and the loss from the decoder's states in chunks.
  params = random_params(WITH_ADAPTERS)
  loss, grads = _loss_and_grads(WITH_ADAPTERS, params)
  scanned_loss, scanned_grads = _loss_and_grads(
      _scanned(WITH_ADAPTERS, remat_policy='full'), parameter_layout.to_scanned(params),
      _mesh(), loss_chunk_length=8)
  assert float(scanned_loss) == pytest.approx(float(loss), rel=1e-5)
  _assert_trees_close(scanned_grads, parameter_layout.to_scanned(grads), atol=1e-4)
  # Relative tables and adapters (through B2T's layers) learn.
  for stack, module in (('encoder', 'attention'), ('decoder', 'self_attention')):
    layer = grads[stack][parameter_layout.layer_name(0)][module]
    for table in (parameter_layout.RELATIVE_KEYS, parameter_layout.RELATIVE_VALUES):
      assert np.abs(layer[table]).max() > 1e-3
  adapter = grads['encoder'][parameter_layout.adapter_name(0)][ADAPTER_KEYS[0]]
  assert np.abs(adapter['down']['kernel']).max() > 1e-3


def test_remat_traces_every_variant_with_its_static_flags():
  # A Python flag a layer branches on (deterministic, decode) left out of the static
  # arguments would be traced, and branching on it fails here.
  for config in (B2T_RELATIVE, _scanned(B2T_RELATIVE),
                 dataclasses.replace(TINY, layer_norm='post', position_embedding='sinusoidal')):
    remat = dataclasses.replace(config, remat_policy='dots')
    params = nn.meta.unbox(models.abstract_variables(config))['params']
    loss, grads = jax.eval_shape(lambda p, remat=remat: _loss_and_grads(remat, p), params)
    assert loss.shape == () and jax.tree.structure(grads) == jax.tree.structure(params)


def test_post_ln_layouts_round_trip_and_are_the_scanned_models_own():
  # No final norm and a width per stack: the stacked layout is what a scanned model builds.
  params = random_params(B2T_RELATIVE)
  scanned = parameter_layout.to_scanned(params)
  scanned_model = nn.meta.unbox(models.abstract_variables(_scanned(B2T_RELATIVE)))['params']
  assert jax.tree.map(np.shape, scanned) == jax.tree.map(np.shape, scanned_model)
  assert scanned['decoder']['layers']['layer']['mlp']['wi']['kernel'].shape == (2, 32, 96)
  _assert_trees_close(parameter_layout.to_unrolled(scanned), params)


def test_adapters_only_updates_leave_every_base_parameter_of_a_b2t_relative_model():
  params = random_params(_scanned(WITH_ADAPTERS))
  optimizer = trainer.make_optimizer(trainable='adapters')

  @jax.jit
  def step(params):
    gradients = jax.tree.map(jnp.ones_like, params)
    return optax.apply_updates(params, optimizer.update(gradients, optimizer.init(params),
                                                        params)[0])

  updated = step(params)
  trains = trainer.trainable_mask(params)
  moved = jax.tree.map(lambda label, new, old: (label, bool(np.any(new != old))), trains,
                       updated, params)
  moved = jax.tree.leaves(moved, is_leaf=lambda leaf: isinstance(leaf, tuple))
  assert {label for label, changed in moved} == {True, False}
  assert all(changed == label for label, changed in moved)


def test_relative_tables_replicate_each_stacks_ffn_shards_and_the_dry_run_counts_that():
  abstract = models.abstract_variables(B2T_RELATIVE)
  shardings = partitioning.logical_to_shardings(abstract, _mesh(),
                                                partitioning.DEFAULT_RULES)['params']
  for stack, module in (('encoder', 'attention'), ('decoder', 'self_attention')):
    layer = shardings[stack][parameter_layout.layer_name(0)]
    for table in (parameter_layout.RELATIVE_KEYS, parameter_layout.RELATIVE_VALUES):
      assert layer[module][table].spec == jax.sharding.PartitionSpec(None, None)
    wi = layer['mlp']['wi']['kernel']
    width = B2T_RELATIVE.mlp_dim_of(stack)
    assert wi.spec == jax.sharding.PartitionSpec('fsdp', 'model')
    assert wi.shard_shape((TINY.emb_dim, width)) == (TINY.emb_dim // 2, width // 2)
  shapes = jax.tree.leaves(nn.meta.unbox(abstract)['params'])
  device_bytes = sum(4 * math.prod(sharding.shard_shape(leaf.shape))
                     for leaf, sharding in zip(shapes, jax.tree.leaves(shardings)))
  report = dry_runs.memory_report(B2T_RELATIVE, MESH_SHAPE, 24, 24)
  assert report['param_bytes_per_device'] == device_bytes
  assert report['parameters'] == sum(math.prod(leaf.shape) for leaf in shapes)


@pytest.mark.slow
@needs_libtpu
def test_a_scanned_rematerialised_b2t_relative_step_compiles_for_tpu_chips():
  report = compiled_report(
      'v5e:2x2', 'MESH_SHAPE = (1, 2, 2)', 'BATCH_SIZE = 8', "LAYER_NORM = 'post_b2t'",
      "POSITION_EMBEDDING = 'relative'", 'network.TransformerConfig.relative_in_decoder = True',
      'network.TransformerConfig.encoder_mlp_dim = 256',
      'network.TransformerConfig.decoder_mlp_dim = 512',
      'network.TransformerConfig.scan_layers = True',
      "network.TransformerConfig.remat_policy = 'full'")
  config = dry_runs.run_model_config(configurables.run_spec(), vocab_size=256)
  assert (config.layer_norm, config.position_embedding, config.relative_in_decoder,
          config.scan_layers) == ('post_b2t', 'relative', True, True)
  assert report['parameters'] == models.count_params(config)
  assert report['chips'] == 4 and report['flops_count_scanned_layers_once']
  assert report['flops_per_step'] == 4 * report['flops_per_chip'] > 0
  # The step takes the state the dry run counts, sharded as it says, and a batch.
  assert report['argument_bytes_per_chip'] > (report['param_bytes_per_device']
                                              + report['optimizer_bytes_per_device'])


VOCABULARY = b'the bytes of a SentencePiece model'


def _parent(folder: pathlib.Path, params) -> str:
  """A run folder whose only checkpoint holds `params` (what TrainConfig.init_from reads)."""
  folder.mkdir()
  (folder / 'vocab.model').write_bytes(VOCABULARY)
  saved = checkpoints.RunCheckpoints(str(folder))
  saved.save_params(1, params)
  saved.close()
  return str(folder)


@pytest.mark.parametrize('parent_config, child_config', [
    (B2T_RELATIVE, _scanned(WITH_ADAPTERS)),
    # Post-LN and B2T share their parameters: either starts from the other's.
    (_scanned(B2T_RELATIVE), dataclasses.replace(B2T_RELATIVE, layer_norm='post')),
], ids=['unrolled_into_scanned_with_new_adapters', 'scanned_b2t_into_unrolled_post_ln'])
def test_init_from_restores_a_parent_of_the_same_parameters_in_either_layout(
    tmp_path, parent_config, child_config):
  parent_params = random_params(parent_config)
  child_params = random_params(child_config, seed=1)
  restored = fine_tuning.initial_params(_parent(tmp_path / 'parent', parent_params),
                                        VOCABULARY, child_params)
  # Adapters the parent was built without keep their fresh values.
  kept = traverse_util.flatten_dict(parameter_layout.convert_layout(
      parent_params, child_config.scan_layers))
  fresh = traverse_util.flatten_dict(child_params)
  new = set(fresh) - set(kept)
  assert set(kept) <= set(fresh) and bool(new) == bool(child_config.adapter_keys)
  assert all(parameter_layout.SCANNED_ADAPTERS in path for path in new)
  _assert_trees_close(restored, traverse_util.unflatten_dict(
      {path: kept.get(path, leaf) for path, leaf in fresh.items()}))


@pytest.mark.parametrize('parent_config, child_config, architectures', [
    # Before, "params has no ...: it was saved by another model than the run's config.gin
    # describes".
    (TINY, B2T_RELATIVE,
     "pre-LN with learned positions, this run's is post-LN (or B2T) with relative positions "
     '(k=4, keys and values)'),
    # Before, "cannot be read, the checkpoint is damaged or incomplete": the parent holds
    # parameters the child has not.
    (TINY, dataclasses.replace(TINY, position_embedding='sinusoidal'),
     "pre-LN with learned positions, this run's is pre-LN with sinusoidal positions"),
    # Before, "saved before the vocabulary grew": the relative tables grow.
    (B2T_RELATIVE, dataclasses.replace(B2T_RELATIVE, relative_max_distance=8,
                                       relative_values=False, relative_in_decoder=False),
     "post-LN (or B2T) with relative positions (k=4, keys and values), this run's is post-LN "
     '(or B2T) with relative positions (k=8, keys only) in the encoder and sinusoidal '
     'positions in the decoder'),
], ids=['norms', 'positions', 'relative_tables'])
def test_init_from_a_parent_of_another_architecture_is_one_line_naming_both(
    tmp_path, parent_config, child_config, architectures):
  parent = _parent(tmp_path / 'parent', random_params(parent_config))
  with pytest.raises(UserError) as error:
    fine_tuning.initial_params(parent, VOCABULARY, random_params(child_config))
  assert str(error.value) == (
      f"train.init_from: {parent}'s model is {architectures}; start from a parent with the "
      'same network.TransformerConfig.layer_norm and position settings')
