"""DRO during training: the group sampler, loss reweighting, and exact resume."""

import json
import pathlib

import gin
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from conftest import tiny_run_bindings, train_configured
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process
from test_network import random_params

import data_tasks
from t5x_mt.training import actions
from t5x_mt.training import dro
from t5x_mt.config import gin_utils
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.runs import run_vocabulary
from t5x_mt.training import trainer
from t5x_mt.data import group_sampler
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

GROUPS = ['eng_Latn-fra_Latn', 'hau_Latn-eng_Latn']


def _configure(model_dir: pathlib.Path, vocabulary: pathlib.Path, mixture: str,
               train_steps: int, baselines: pathlib.Path, **overrides: str) -> None:
  """gin/runs/dro/demo.gin, shrunk like the other tiny runs, on `mixture`."""
  gin.clear_config()
  bindings = tiny_run_bindings(model_dir, vocabulary, mixture, train_steps,
                               CHECKPOINT_EVERY_STEPS='3', INPUTS_LENGTH='16',
                               TARGETS_LENGTH='16', DRO_BASELINES=repr(str(baselines)),
                               DRO_INTERVAL='2', **overrides)
  gin_utils.parse_gin(['gin/runs/dro/demo.gin'], bindings)


def _write_baselines(path: pathlib.Path, losses: dict[str, float],
                     grouping: str = 'direction') -> pathlib.Path:
  path.write_text(json.dumps({'grouping': grouping, 'losses': losses}))
  return path


def _row_directions(batch: dict[str, np.ndarray]) -> list[str]:
  return [Direction.from_id(int(row.max())).name for row in
          batch['decoder_direction_ids']]


@pytest.fixture
def sampler_factory(tiny_mixture, tmp_path):
  run_vocabulary.run_vocabulary(str(tmp_path / 'vocab.model'), data_tasks.mixture_view(tiny_mixture),
                                run_vocabulary.VocabularyConfig(vocab_size=700),
                                tmp_path / 'run' / 'vocab.model')
  data_tasks.use_vocabulary(tmp_path / 'vocab.model')
  return lambda: group_sampler.GroupSampler(data_tasks.mixture_view(tiny_mixture),
                                            grouping='direction', batch_size=8,
                                            inputs_length=16, targets_length=16, seed=3)


def test_sampled_rows_follow_the_weights(sampler_factory):
  sampler = sampler_factory()
  assert sampler.groups == GROUPS
  sampler.set_weights([0.8, 0.2])
  drawn = [d for _ in range(40) for d in _row_directions(next(sampler))]
  share = drawn.count(GROUPS[0]) / len(drawn)
  # 320 rows: the binomial standard deviation of the share is 0.022.
  assert abs(share - 0.8) < 4 * np.sqrt(0.8 * 0.2 / len(drawn))
  sampler.set_weights([0.0, 1.0])
  assert {d for _ in range(5) for d in _row_directions(next(sampler))} == {GROUPS[1]}


def test_sampler_draws_at_the_weights_each_dro_update_sets(sampler_factory, tmp_path):
  # Both groups have baseline 1.0; hau->eng's loss 4.0 is 3 above it, eng->fra's is at it.
  # From p = (0.5, 0.5) the weights move d = sqrt(2 rho p_1 p_2) = 0.2236 towards hau->eng.
  baselines = _write_baselines(tmp_path / 'b.json', {GROUPS[0]: 1.0, GROUPS[1]: 1.0})
  robust = dro.DroTraining(dro.DroConfig(str(baselines), interval=1), GROUPS,
                           proportions={GROUPS[0]: 0.5, GROUPS[1]: 0.5},
                           sampling_shares={GROUPS[0]: 0.5, GROUPS[1]: 0.5})
  sampler = sampler_factory()
  sampler.set_weights(robust.weights)
  metrics = {'direction_loss_sums': np.array([10.0, 40.0]),
             'direction_tokens': np.array([10.0, 10.0])}
  actions.UpdateDro(robust, [sampler]).after_step(None, 1, metrics)
  target = robust.weights[1]
  assert target == pytest.approx(0.5 + np.sqrt(2 * 0.1 * 0.25), abs=1e-4)
  drawn = [d for _ in range(40) for d in _row_directions(next(sampler))]
  share = drawn.count(GROUPS[1]) / len(drawn)
  # 320 rows: the share's binomial deviation is 0.025, the move 0.224 (9 of them).
  assert abs(share - target) < 4.5 * np.sqrt(target * (1 - target) / len(drawn))


def test_rows_are_whole_packed_rows_of_one_group(sampler_factory):
  batch = next(sampler_factory())
  for row_directions, row_segments in zip(batch['decoder_direction_ids'],
                                          batch['decoder_segment_ids']):
    assert len(set(row_directions[row_segments > 0])) == 1
    assert row_segments.max() >= 2  # Packed: several pairs per row.


@pytest.mark.slow  # Opens the sampler's datasets twice; a DRO run resumes exactly in the fast loop's stead.
def test_restored_sampler_draws_the_same_batches(sampler_factory, tmp_path):
  first = sampler_factory()
  first.set_weights([0.3, 0.7])
  for _ in range(3):
    next(first)
  first.write_state(str(tmp_path / 'state' / 'sampler'))
  expected = [next(first) for _ in range(4)]
  second = sampler_factory()
  second.read_state(str(tmp_path / 'state' / 'sampler'))
  assert second.weights == pytest.approx([0.3, 0.7])
  for want in expected:
    got = next(second)
    for name in want:
      np.testing.assert_array_equal(got[name], want[name])


def test_direction_scales_are_weight_over_sampling_share(tmp_path):
  baselines = _write_baselines(tmp_path / 'b.json', {'fra_Latn': 1.0, 'hau_Latn': 1.0},
                               grouping='target')
  config = dro.DroConfig(str(baselines), grouping='target', mode='reweighting')
  training = dro.DroTraining(
      config, ['eng_Latn-fra_Latn', 'eng_Latn-hau_Latn', 'swh_Latn-hau_Latn'],
      proportions={'fra_Latn': 0.5, 'hau_Latn': 0.5},
      sampling_shares={'fra_Latn': 0.25, 'hau_Latn': 0.75})
  assert training.direction_scales() == pytest.approx([2.0, 2 / 3, 2 / 3])
  # Steps: hau's EMA rises above its baseline, fra's stays at it.
  training.observe([10.0, 30.0, 30.0], [10.0, 10.0, 10.0])
  assert not training.after_step(1)
  assert training.after_step(100)
  q = training.weights
  assert q[1] > 0.5 > q[0]
  assert training.direction_scales() == pytest.approx([q[0] / 0.25, q[1] / 0.75, q[1] / 0.75])


@pytest.mark.slow
def test_scaled_loss_equals_the_loss_without_the_zero_scaled_direction():
  config = network.TransformerConfig(vocab_size=64, emb_dim=16, num_heads=2, head_dim=8,
                                     mlp_dim=32, num_encoder_layers=1, num_decoder_layers=1,
                                     dropout_rate=0.0)
  model = models.TranslationModel(config)
  optimizer = optax.sgd(1.0)  # The update is the gradient itself.
  params = random_params(config)  # Any values do: no initialiser runs op by op.
  state = trainer.TrainState(step=jnp.zeros((), jnp.int32), params=params,
                             opt_state=optimizer.init(params))
  rng = np.random.default_rng(0)
  batch = {name: jnp.asarray(rng.integers(1, 64, (4, 8)), jnp.int32)
           for name in ('encoder_input_tokens', 'decoder_input_tokens',
                        'decoder_target_tokens')}
  batch['decoder_loss_weights'] = jnp.ones((4, 8), jnp.int32)
  batch['decoder_direction_ids'] = jnp.asarray([[5] * 8, [9] * 8, [5] * 8, [9] * 8])
  step = jax.jit(trainer.make_train_step(model, optimizer, direction_ids=[5, 9]))
  scaled_state, scaled = step(state, batch, jax.random.PRNGKey(1), jnp.asarray([0.0, 3.0]))
  dropped = dict(batch, decoder_loss_weights=batch['decoder_loss_weights'].at[::2].set(0))
  plain_state, _ = step(state, dropped, jax.random.PRNGKey(1))
  for got, want in zip(jax.tree_util.tree_leaves(scaled_state.params),
                       jax.tree_util.tree_leaves(plain_state.params)):
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-6)
  # The reported losses stay unscaled: both directions count.
  assert float(scaled['tokens']) == 32.0
  assert np.asarray(scaled['direction_tokens']).tolist() == [16.0, 16.0]


def _logged(run: pathlib.Path) -> list[dict]:
  return [json.loads(line) for line in (run / 'metrics.jsonl').open()]


@pytest.mark.slow
def test_dro_run_moves_weights_and_resumes_exactly(tiny_mixture, tmp_path):
  # hau->eng's baseline is far below what the model reaches: its excess is the larger.
  baselines = _write_baselines(tmp_path / 'b.json', {GROUPS[0]: 6.0, GROUPS[1]: 0.5})
  vocabulary = tmp_path / 'vocab.model'
  _configure(tmp_path / 'straight', vocabulary, tiny_mixture, 6, baselines)
  train_configured()
  _configure(tmp_path / 'stopped', vocabulary, tiny_mixture, 3, baselines)
  train_configured()
  _configure(tmp_path / 'stopped', vocabulary, tiny_mixture, 6, baselines)
  train_configured()
  straight, resumed = _logged(tmp_path / 'straight'), _logged(tmp_path / 'stopped')
  assert [r['step'] for r in resumed] == [1, 2, 3, 4, 5, 6]
  for got, want in zip(resumed, straight):
    for name in want:
      if name != 'tokens_per_second':
        assert got[name] == pytest.approx(want[name], rel=1e-5), (got['step'], name)
  # Data shares until the first recomputation at step 2, then the high-excess group up.
  assert straight[0][f'dro_weight/{GROUPS[1]}'] == pytest.approx(0.5)
  assert straight[2][f'dro_weight/{GROUPS[1]}'] > 0.6


@pytest.mark.slow
def test_reweighting_keeps_plain_sampling_and_moves_weights(tiny_mixture, tmp_path):
  baselines = _write_baselines(tmp_path / 'b.json', {GROUPS[0]: 6.0, GROUPS[1]: 0.5})
  _configure(tmp_path / 'run', tmp_path / 'vocab.model', tiny_mixture, 3, baselines,
             **{'dro.DroConfig.mode': "'reweighting'"})
  train_configured()
  logged = _logged(tmp_path / 'run')
  assert logged[0][f'dro_weight/{GROUPS[1]}'] == pytest.approx(0.5)
  assert logged[2][f'dro_weight/{GROUPS[1]}'] > 0.6
  # Its input is the plain mixture's: the saved input position is a tf.data checkpoint.
  assert not list((tmp_path / 'run' / 'input_state').rglob(
      '*' + group_sampler.SAMPLER_STATE_SUFFIX))


def test_baselines_missing_a_group_is_one_clear_error(tiny_mixture, tmp_path):
  baselines = _write_baselines(tmp_path / 'b.json', {GROUPS[0]: 1.0})
  _configure(tmp_path / 'run', tmp_path / 'vocab.model', tiny_mixture, 2, baselines)
  with pytest.raises(UserError, match=r'b\.json.*no baseline for hau_Latn-eng_Latn'):
    train_configured()


def test_baselines_of_another_grouping_are_refused(tiny_mixture, tmp_path):
  baselines = _write_baselines(tmp_path / 'b.json', {'fra_Latn': 1.0, 'eng_Latn': 1.0},
                               grouping='target')
  _configure(tmp_path / 'run', tmp_path / 'vocab.model', tiny_mixture, 2, baselines)
  with pytest.raises(UserError, match="holds 'target' groups, the run groups by 'direction'"):
    train_configured()


def test_weight_history_and_plot_command(tmp_path, monkeypatch, capsys):
  records = [{'step': 1, 'loss': 2.0}, {'step': 2, 'dro_weight/a': 0.5, 'dro_weight/b': 0.5},
             {'step': 4, 'dro_weight/a': 0.3, 'dro_weight/b': 0.7}]
  assert dro.weight_history(records) == ([2, 4], {'a': [0.5, 0.3], 'b': [0.5, 0.7]})
  # A last record cut short by a kill is left out of the plot.
  (tmp_path / 'metrics.jsonl').write_text(
      '\n'.join(map(json.dumps, records)) + '\n\n{"step": 5, "dro_wei')
  (tmp_path / 'dro_groups.json').write_text(json.dumps({'groups': {
      'a': {'proportion': 0.6}, 'b': {'proportion': 0.4}}}))
  output = tmp_path / 'weights.png'
  code, out, err = run_in_process('plot_dro.py', [f'--model_dir={tmp_path}',
                                                  f'--output={output}'], monkeypatch, capsys)
  assert code == 0, err
  assert output.read_bytes()[:4] == b'\x89PNG'
  rows = [line.split() for line in out.splitlines()[1:3]]
  assert rows == [['b', '0.4000', '0.7000', '0.5000', '0.7000'],
                  ['a', '0.6000', '0.3000', '0.3000', '0.5000']]
  (tmp_path / 'dro_groups.json').unlink()
  code, _, err = run_in_process('plot_dro.py', [f'--model_dir={tmp_path}',
                                                f'--output={output}'], monkeypatch, capsys)
  assert code == 2 and 'dro_groups.json not found' in error_lines(err)[0]
