"""LoRA: where it goes, that it starts as the base and merges into it, that only it trains
and only it is checkpointed, and that a LoRA run goes wherever a run goes."""

import dataclasses
import json

from flax import traverse_util
import flax.linen as nn
import gin
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import configure_tiny_run, saved_params, train_configured
from test_adapters import TASK, TINY, _packed_batch
from test_export import SENTENCES, export, random_run, translate
from test_launch_translate_evaluate import run_in_process
from test_multiprocess import keep_until, losses

from t5x_mt.config import run_loading
from t5x_mt.core.errors import UserError
from t5x_mt.model import lora
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.model import parameter_layout
from t5x_mt.runs import checkpoints
from t5x_mt.training import trainer

RANK = 4


def _config(**settings) -> network.TransformerConfig:
  return network.TransformerConfig(**{**TINY, 'lora_rank': RANK, **settings})


def _lora_paths(params) -> set[str]:
  """'stack/.../projection' of every dense layer that has LoRA matrices."""
  return {'/'.join(path[:-1]) for path in traverse_util.flatten_dict(params)
          if path[-1] == lora.LORA_A}


def _init(config: network.TransformerConfig):
  return models.TranslationModel(config).init(jax.random.PRNGKey(0), 8, 8)


def _logits(config: network.TransformerConfig, params) -> jax.Array:
  batch = _packed_batch()
  return network.Transformer(config).apply(
      {'params': params}, batch['encoder_input_tokens'], batch['decoder_input_tokens'],
      batch['decoder_target_tokens'], batch['encoder_segment_ids'],
      batch['decoder_segment_ids'], batch['encoder_positions'], batch['decoder_positions'])


def _without(params, predicate) -> dict:
  return traverse_util.unflatten_dict({path: leaf for path, leaf in
                                       traverse_util.flatten_dict(params).items()
                                       if not predicate(path)})


def test_targets_name_layers_by_projection_stack_and_sublayer():
  everywhere = _lora_paths(nn.unbox(_init(_config())))
  assert len(everywhere) == 2 * (4 + 2) + 2 * (4 + 4 + 2)  # 2+2 layers.
  assert _lora_paths(nn.unbox(_init(_config(lora_targets=('value',))))) == {
      'encoder/layers_0/attention/value', 'encoder/layers_1/attention/value',
      'decoder/layers_0/self_attention/value', 'decoder/layers_1/self_attention/value',
      'decoder/layers_0/encoder_decoder_attention/value',
      'decoder/layers_1/encoder_decoder_attention/value'}
  assert _lora_paths(nn.unbox(_init(_config(
      lora_targets=('decoder/wo', 'encoder/attention/q*'))))) == {
          'decoder/layers_0/mlp/wo', 'decoder/layers_1/mlp/wo',
          'encoder/layers_0/attention/query', 'encoder/layers_1/attention/query'}


def test_bad_lora_settings_are_named():
  with pytest.raises(UserError, match=r"lora_targets \(LORA_TARGETS\): 'querry' matches no "
                                      'module of this model; its modules are encoder/'):
    _config(lora_targets=('querry',))
  with pytest.raises(UserError, match=r"'encoder/encoder_decoder_attention/out' matches no"):
    _config(lora_targets=('encoder/encoder_decoder_attention/out',))
  # TINY's attention is 2 heads of 8 (16 wide), its MLP 32 wide, its embeddings 16.
  with pytest.raises(UserError, match=r'lora_rank \(LORA_RANK\): 17 is larger than '
                                      'encoder/attention/query, whose smaller side is 16'):
    _config(lora_rank=17)
  _config(lora_rank=16)
  with pytest.raises(UserError, match=r'lora_alpha \(LORA_ALPHA\)'):
    _config(lora_alpha=0.0)


@pytest.mark.slow  # The scanned model's compilation: ~18 s in a parallel run.
@pytest.mark.parametrize('scan_layers', [False, True])
def test_lora_starts_as_the_base_and_merges_into_it(scan_layers):
  config = _config(scan_layers=scan_layers, lora_alpha=8.0)
  params = nn.unbox(_init(config))
  base_config = lora.without_lora(config)
  base = _without(params, parameter_layout.is_lora_path)
  np.testing.assert_array_equal(_logits(config, params), _logits(base_config, base))
  # Trained matrices: the update W + alpha / rank A B computed apart from W, then merged.
  rng = np.random.default_rng(0)
  trained = jax.tree_util.tree_map_with_path(
      lambda path, leaf: (rng.normal(scale=0.3, size=leaf.shape).astype(np.float32)
                          if parameter_layout.is_lora_path(path) else leaf), params)
  with_lora = _logits(config, trained)
  assert np.abs(with_lora - _logits(base_config, base)).max() > 0.1
  merged = lora.merged(trained, config)
  assert jax.tree.structure(merged) == jax.tree.structure(base)
  np.testing.assert_allclose(_logits(base_config, merged), with_lora, atol=2e-4)


def _state_and_step(config: network.TransformerConfig):
  model = models.TranslationModel(config)
  optimizer = trainer.make_optimizer(learning_rate=optax.constant_schedule(1e-2),
                                     with_lora=bool(config.lora_rank))
  state = trainer.init_train_state(model, optimizer, jax.random.PRNGKey(0), 8, 8)
  state = state.replace(params=nn.unbox(state.params), opt_state=nn.unbox(state.opt_state))
  step = jax.jit(trainer.make_train_step(model, optimizer, direction_ids=[
      int(i) for i in np.unique(_packed_batch()['decoder_direction_ids']) if i]))
  return model, state, step


@pytest.mark.slow  # Compiles a train step and the gradients of the whole model: ~20 s.
def test_only_lora_trains_and_has_optimizer_state_and_the_base_stays_bit_identical():
  config = _config(lora_targets=('query', 'value', 'wi'))
  model, state, step = _state_and_step(config)
  lora_leaves = {path: leaf for path, leaf in traverse_util.flatten_dict(state.params).items()
                 if parameter_layout.is_lora_path(path)}
  moments = [leaf for leaf in jax.tree.leaves(state.opt_state) if leaf.ndim]
  assert len(moments) == 2 * len(lora_leaves)  # Adam's two moments, of LoRA's alone.
  assert sum(leaf.size for leaf in moments) == 2 * sum(
      leaf.size for leaf in lora_leaves.values())
  batch = _packed_batch()
  batch = dict(batch, decoder_loss_weights=(batch['decoder_target_tokens'] > 0).astype(
      jnp.float32))
  new_state, metrics = step(state, batch, jax.random.PRNGKey(1))
  before, after = (traverse_util.flatten_dict(s.params) for s in (state, new_state))
  for path, leaf in before.items():
    if parameter_layout.is_lora_path(path):
      if path[-1] == lora.LORA_B:  # Zero at first; A moves from the second step on.
        assert np.abs(after[path]).max() > 0
    else:
      np.testing.assert_array_equal(after[path], leaf)
  # The reported gradient norm is LoRA's, computed apart from the base's.
  grads = jax.jit(jax.grad(lambda params: model.loss_fn(
      params, batch, None, label_smoothing=0.1, direction_ids=jnp.asarray(
          sorted(int(i) for i in np.unique(batch['decoder_direction_ids']) if i)))[
              'objective_sum']))(state.params)
  weight = float(batch['decoder_loss_weights'].sum())
  lora_grads = [leaf for path, leaf in traverse_util.flatten_dict(grads).items()
                if parameter_layout.is_lora_path(path)]
  np.testing.assert_allclose(float(metrics['grad_norm']),
                             float(optax.tree.norm(lora_grads)) / weight, rtol=1e-4)


@pytest.mark.slow  # Compiles a train step: ~10 s in a parallel run.
def test_a_model_without_lora_still_trains_every_parameter():
  _, state, step = _state_and_step(dataclasses.replace(_config(), lora_rank=0))
  batch = dict(_packed_batch(), decoder_loss_weights=(
      _packed_batch()['decoder_target_tokens'] > 0).astype(jnp.float32))
  new_state, _ = step(state, batch, jax.random.PRNGKey(1))
  moved = [not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.params),
                                                     jax.tree.leaves(new_state.params))]
  assert all(moved)


def _configure_lora(trained_run, model_dir, steps: int = 4, **overrides: str) -> None:
  configure_tiny_run(model_dir, trained_run / 'vocab.model', TASK, steps, **{
      'training.TrainConfig.init_from': repr(str(trained_run)), 'LORA_RANK': str(RANK),
      'LEARNING_RATE': '1e-2', **overrides})


@pytest.fixture(scope='module')
def lora_run(trained_run, tmp_path_factory):
  """(MODEL_DIR, the base's step-4 parameters read before) of LoRA trained for 4 steps
  (checkpoints at 2 and 4) on the frozen `trained_run`."""
  base_before = saved_params(trained_run, 4)
  run = tmp_path_factory.mktemp('lora') / 'run'
  _configure_lora(trained_run, run)
  try:
    train_configured()
  finally:
    gin.clear_config()
  return run, base_before


def _saved_item(run, step: int, item: str) -> dict:
  run_checkpoints = checkpoints.RunCheckpoints(str(run), read_only=True)
  try:
    return run_checkpoints._manager.restore(step)[item]  # pylint: disable=protected-access
  finally:
    run_checkpoints.close()


@pytest.mark.slow
def test_a_lora_run_checkpoints_lora_alone_and_reads_its_base_from_the_base_run(
    trained_run, lora_run):
  run, base_before = lora_run
  assert json.loads((run / 'base_run.json').read_text()) == {'run': str(trained_run),
                                                             'step': 4}
  saved = traverse_util.flatten_dict(_saved_item(run, 4, 'params'))
  assert saved and all(parameter_layout.is_lora_path(path) for path in saved)
  lora_sizes = sorted(np.asarray(leaf).size for leaf in saved.values())
  moments = [np.asarray(leaf) for leaf in jax.tree.leaves(_saved_item(run, 4, 'optimizer'))
             if np.ndim(leaf)]
  assert sorted(leaf.size for leaf in moments) == sorted(lora_sizes * 2)
  base_bytes = sum(leaf.nbytes for leaf in base_before)
  assert 10 * sum(np.asarray(leaf).nbytes for leaf in saved.values()) < base_bytes
  # Read as a whole: the base's parameters bit for bit, with the run's LoRA.
  run_checkpoints = checkpoints.RunCheckpoints(str(run), read_only=True)
  config = models.TranslationModel(_tiny_lora_config(run)).config
  try:
    params = run_checkpoints.restore_params(4, nn.unbox(models.abstract_variables(config)[
        'params']))
  finally:
    run_checkpoints.close()
  flat = traverse_util.flatten_dict(params)
  base = [flat[path] for path in sorted(flat) if not parameter_layout.is_lora_path(path)]
  assert len(base) == len(base_before)
  for got, want in zip(base, base_before):
    np.testing.assert_array_equal(got, want)
  for path, leaf in saved.items():
    np.testing.assert_array_equal(flat[path], leaf)
  assert any(np.abs(leaf).max() > 0 for path, leaf in saved.items()
             if path[-1] == lora.LORA_B)
  for got, want in zip(saved_params(trained_run, 4), base_before):
    np.testing.assert_array_equal(got, want)  # The base run is untouched.


def _tiny_lora_config(run) -> network.TransformerConfig:
  return run_loading.read_run(str(run)).model


@pytest.mark.slow
def test_a_lora_run_resumed_on_an_fsdp_mesh_continues_the_same_curve(trained_run, lora_run,
                                                                     tmp_path):
  run, _ = lora_run
  resumed = keep_until(run, tmp_path / 'resumed', 2)
  _configure_lora(trained_run, resumed, MESH_SHAPE='(2, 4, 1)')
  train_configured()
  want, got = losses(run), losses(resumed)
  assert sorted(got) == sorted(want) == [1, 2, 3, 4]
  np.testing.assert_allclose([got[s] for s in (3, 4)], [want[s] for s in (3, 4)], rtol=1e-5)


@pytest.mark.slow
def test_a_lora_run_translates_averages_and_ensembles_as_runs_do(trained_run, lora_run,
                                                                 tmp_path, monkeypatch,
                                                                 capsys):
  run, _ = lora_run
  source = tmp_path / 'input.eng'
  source.write_text(''.join(f'{line}\n' for line in SENTENCES), encoding='utf-8')
  own = translate(f'--checkpoint_dir={run}', source, monkeypatch, capsys, '--beam_size=2')
  base = translate(f'--checkpoint_dir={trained_run}', source, monkeypatch, capsys,
                   '--beam_size=2')
  assert len(own) == len(SENTENCES) and own != base
  # Two copies of the LoRA run over the one base translate as the run does.
  assert translate(f'--ensemble={run},{run}', source, monkeypatch, capsys,
                   '--beam_size=2') == own
  averaged = tmp_path / 'averaged'
  code, _, err = run_in_process('average_checkpoints.py', [
      f'--checkpoint_dir={run}', '--steps=4', f'--output_dir={averaged}'],
                                monkeypatch, capsys)
  assert code == 0, err
  assert (averaged / 'base_run.json').read_text() == (run / 'base_run.json').read_text()
  saved = traverse_util.flatten_dict(_saved_item(averaged, 4, 'params'))
  assert all(parameter_layout.is_lora_path(path) for path in saved)
  assert translate(f'--checkpoint_dir={averaged}', source, monkeypatch, capsys,
                   '--beam_size=2') == own


@pytest.mark.slow  # Four translations through two commands: ~10 s in a parallel run.
def test_a_lora_run_exports_merged_and_translates_as_the_run(trained_run, tmp_path,
                                                             monkeypatch, capsys):
  run, config, params = random_run(trained_run, tmp_path / 'run', {
      'network.TransformerConfig.lora_rank': str(RANK),
      'network.TransformerConfig.lora_targets': "('query', 'out', 'wi', 'decoder/value')"})
  assert config.lora_rank == RANK and any(
      parameter_layout.is_lora_path(path) for path in traverse_util.flatten_dict(params))
  output = tmp_path / 'ct2'
  code, _, err = export(run, output, monkeypatch, capsys)
  assert code == 0, err
  assert not (output / 'base_run.json').exists()
  source = tmp_path / 'input.eng'
  source.write_text(''.join(f'{line}\n' for line in SENTENCES), encoding='utf-8')
  for beam_size in (1, 4):
    flags = (f'--beam_size={beam_size}',)
    assert translate(f'--ctranslate2={output}', source, monkeypatch, capsys, *flags) == (
        translate(f'--checkpoint_dir={run}', source, monkeypatch, capsys, *flags))


@pytest.mark.slow  # Compiles a train step with adapters: ~18 s.
def test_lora_and_adapters_train_together_on_the_frozen_base():
  config = _config(lora_targets=('value',), adapter_keys=('hau_Latn', 'fra_Latn'),
                   adapter_bottlenecks=(4, 8))
  _, state, step = _state_and_step(config)
  batch = dict(_packed_batch(), decoder_loss_weights=(
      _packed_batch()['decoder_target_tokens'] > 0).astype(jnp.float32))
  new_state, _ = step(state, batch, jax.random.PRNGKey(1))
  before, after = (traverse_util.flatten_dict(s.params) for s in (state, new_state))
  for path, leaf in before.items():
    if path[-1] == lora.LORA_B or path[-2:] == ('up', 'kernel'):  # Both start at zero.
      assert np.abs(after[path]).max() > 0, path
    elif not parameter_layout.trains_on_frozen_base(path):
      np.testing.assert_array_equal(after[path], leaf)


@pytest.mark.slow
def test_a_run_without_lora_refuses_to_start_from_a_lora_run(lora_run, tmp_path):
  run, _ = lora_run
  configure_tiny_run(tmp_path / 'full', run / 'vocab.model', TASK, 2, **{
      'training.TrainConfig.init_from': repr(str(run))})
  with pytest.raises(UserError, match=r'trained LoRA \(decoder/layers_0/.* and others\), '
                                      "which this run's model lacks; start from it with its "
                                      'LORA_RANK and LORA_TARGETS'):
    train_configured()
  assert not (tmp_path / 'full').exists()


@pytest.mark.slow  # Two more training steps: ~10 s.
def test_a_lora_run_started_from_a_lora_run_continues_its_lora_on_the_same_base(
    trained_run, lora_run, tmp_path):
  run, base_before = lora_run
  child = tmp_path / 'child'
  configure_tiny_run(child, trained_run / 'vocab.model', TASK, 2, **{
      'training.TrainConfig.init_from': repr(str(run)), 'LORA_RANK': str(RANK),
      'training.TrainConfig.learning_rate_schedule': '@trainer.constant_schedule()',
      'trainer.constant_schedule.learning_rate': '0.0'})
  train_configured()
  assert json.loads((child / 'base_run.json').read_text()) == {'run': str(run), 'step': 4}
  saved = traverse_util.flatten_dict(_saved_item(child, 2, 'params'))
  assert all(parameter_layout.is_lora_path(path) for path in saved)
  # At learning rate 0 the child's LoRA is the parent's, read on the base of the base.
  parent = traverse_util.flatten_dict(_saved_item(run, 4, 'params'))
  assert saved.keys() == parent.keys()
  for path, leaf in saved.items():
    np.testing.assert_array_equal(leaf, parent[path])
  run_checkpoints = checkpoints.RunCheckpoints(str(child), read_only=True)
  try:
    params = run_checkpoints.restore_params(2, nn.unbox(models.abstract_variables(
        _tiny_lora_config(child))['params']))
  finally:
    run_checkpoints.close()
  flat = traverse_util.flatten_dict(params)
  base = [flat[path] for path in sorted(flat) if not parameter_layout.is_lora_path(path)]
  for got, want in zip(base, base_before, strict=True):
    np.testing.assert_array_equal(got, want)
