"""Language-specific adapters: identity at start, per-token routing, each row of a decoded
batch through its own direction's, frozen-base training."""

import shutil

import gin
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import configure_tiny_run, train_configured
from conftest import saved_params
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process
from test_network import PAIRS, padded_batch, random_params

from t5x_mt.decoding import prediction
from t5x_mt.decoding import search
from t5x_mt.model import adapters
from t5x_mt.model import models
from t5x_mt.runs import checkpoints
from t5x_mt.model import network
from t5x_mt.model import parameter_layout
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError

TASK = 'cldr_eng_Latn.hau_Latn'
TINY = dict(vocab_size=64, emb_dim=16, num_heads=2, head_dim=8, mlp_dim=32,
            num_encoder_layers=2, num_decoder_layers=2, dropout_rate=0.0)
ENG_HAU = Direction('eng_Latn', 'hau_Latn').id
ENG_FRA = Direction('eng_Latn', 'fra_Latn').id


def _packed_batch() -> dict[str, jnp.ndarray]:
  """One row packing an eng->hau pair (segment 1) and an eng->fra pair (segment 2)."""
  return {
      'encoder_input_tokens': jnp.asarray([[5, 6, 7, 1, 8, 9, 1, 0]]),
      'encoder_segment_ids': jnp.asarray([[1, 1, 1, 1, 2, 2, 2, 0]]),
      'encoder_positions': jnp.asarray([[0, 1, 2, 3, 0, 1, 2, 0]]),
      'decoder_target_tokens': jnp.asarray([[10, 11, 1, 12, 13, 14, 1, 0]]),
      'decoder_input_tokens': jnp.asarray([[0, 10, 11, 0, 12, 13, 14, 0]]),
      'decoder_segment_ids': jnp.asarray([[1, 1, 1, 2, 2, 2, 2, 0]]),
      'decoder_positions': jnp.asarray([[0, 1, 2, 0, 1, 2, 3, 0]]),
      'decoder_direction_ids': jnp.asarray([[ENG_HAU] * 3 + [ENG_FRA] * 4 + [0]]),
  }


def _adapter_model(**config) -> network.Transformer:
  return network.Transformer(network.TransformerConfig(
      **TINY, adapter_by='target', adapter_keys=('hau_Latn', 'fra_Latn'),
      adapter_bottlenecks=(4, 8), **config))


def test_encoder_tokens_take_the_direction_of_their_segment():
  batch = _packed_batch()
  got = adapters.encoder_direction_ids(batch['encoder_segment_ids'],
                                       batch['decoder_segment_ids'],
                                       batch['decoder_direction_ids'])
  assert got.tolist() == [[ENG_HAU] * 4 + [ENG_FRA] * 3 + [0]]


def test_adapter_index_by_target_and_by_direction():
  ids = jnp.asarray([ENG_HAU, ENG_FRA, Direction('fra_Latn', 'hau_Latn').id, 0])
  assert adapters.adapter_index(ids, 'target', ('fra_Latn', 'hau_Latn')).tolist() == [
      1, 0, 1, -1]
  assert adapters.adapter_index(ids, 'direction', ('eng_Latn-hau_Latn',)).tolist() == [
      0, -1, -1, -1]


@pytest.mark.slow
def test_new_adapters_leave_the_base_model_outputs_unchanged():
  batch = _packed_batch()
  base = network.Transformer(network.TransformerConfig(**TINY))
  base_params = base.init(jax.random.PRNGKey(0), **batch)['params']
  model = _adapter_model()
  fresh = model.init(jax.random.PRNGKey(1), **batch)['params']
  params = dict(base_params)
  for stack in ('encoder', 'decoder'):
    params[stack] = {**base_params[stack],
                     **{name: value for name, value in fresh[stack].items()
                        if name.startswith(parameter_layout.ADAPTER_PREFIX)}}
  np.testing.assert_array_equal(model.apply({'params': params}, **batch),
                                base.apply({'params': base_params}, **batch))


@pytest.mark.slow
def test_each_token_goes_through_its_own_directions_adapter():
  batch = _packed_batch()
  model = _adapter_model()
  params = model.init(jax.random.PRNGKey(0), **batch)['params']
  before = model.apply({'params': params}, **batch)
  # Give the fra adapters a non-zero output (random: a constant shift would vanish in the
  # next LayerNorm): only the eng->fra pair (segment 2) may change.
  noise = np.random.default_rng(0)
  changed = jax.tree_util.tree_map_with_path(
      lambda path, x: x + noise.normal(size=x.shape).astype(np.float32)
      if "'fra_Latn'" in jax.tree_util.keystr(path) and "'up'" in jax.tree_util.keystr(path)
      else x, params)
  after = model.apply({'params': changed}, **batch)
  np.testing.assert_array_equal(after[0, :3], before[0, :3])
  assert np.abs(after[0, 3:7] - before[0, 3:7]).min() > 0


def test_rows_of_two_directions_decode_in_one_batch_as_in_their_own():
  """predict_batch reads each row's direction and forced tag: a batch mixing eng->hau and
  eng->fra rows gives each row what a batch of its own direction gives it, and the
  random adapters make the two directions' outputs differ."""
  config = network.TransformerConfig(**{**TINY, 'vocab_size': 20}, max_length=16,
                                     adapter_by='target', adapter_keys=('hau_Latn', 'fra_Latn'),
                                     adapter_bottlenecks=(4, 8))
  model = models.TranslationModel(config)
  params = random_params(config, seed=2)
  tokens = np.asarray(padded_batch(PAIRS, encoder_length=8)[0])
  options = dict(input_length=8, max_decode_length=6, alpha=1.0, num_pieces=20, nbest=2,
                 search_settings=search.BeamSettings(beam_size=2))
  row_directions, row_tags = [ENG_HAU, ENG_FRA, ENG_HAU], [10, 11, 10]
  mixed = prediction.predict_batch(model, params, tokens, direction=row_directions,
                                   prefix_id=row_tags, **options)
  for direction, tag in ((ENG_HAU, 10), (ENG_FRA, 11)):
    own = prediction.predict_batch(model, params, tokens, direction=direction, prefix_id=tag,
                                   **options)
    rows = [row for row, row_direction in enumerate(row_directions) if row_direction == direction]
    np.testing.assert_array_equal(np.asarray(mixed.sequences)[rows],
                                  np.asarray(own.sequences)[rows])
    np.testing.assert_allclose(np.asarray(mixed.log_probs)[rows],
                               np.asarray(own.log_probs)[rows], rtol=1e-6)
  assert (np.asarray(mixed.sequences)[:, :, 0] == np.asarray(row_tags)[:, None]).all()
  through_fra = prediction.predict_batch(model, params, tokens, direction=ENG_FRA,
                                         prefix_id=10, **options)
  assert not np.allclose(np.asarray(through_fra.log_probs)[0], np.asarray(mixed.log_probs)[0])


def test_bad_adapter_settings_are_named():
  with pytest.raises(UserError, match="'xx_Latn' is not a FLORES-200"):
    network.TransformerConfig(**TINY, adapter_keys=('xx_Latn',), adapter_bottlenecks=(4,))
  with pytest.raises(UserError, match='one size >= 1 per adapter key'):
    network.TransformerConfig(**TINY, adapter_keys=('hau_Latn',), adapter_bottlenecks=())
  with pytest.raises(UserError, match="adapter_keys: 'hau_Latn' is not <src>-<tgt>"):
    network.TransformerConfig(**TINY, adapter_by='direction', adapter_keys=('hau_Latn',),
                              adapter_bottlenecks=(4,))


def _configure_adapters(trained_run, model_dir, keys: str, trainable: str = "'adapters'"):
  configure_tiny_run(model_dir, trained_run / 'vocab.model', TASK, 2, **{
      'training.TrainConfig.init_from': repr(str(trained_run)),
      'network.TransformerConfig.adapter_keys': keys,
      'network.TransformerConfig.adapter_bottlenecks': '(8,)',
      'trainer.make_optimizer.trainable': trainable,
      'LEARNING_RATE': '1e-2'})


@pytest.fixture(scope='module')
def hau_adapters(trained_run, tmp_path_factory):
  """(MODEL_DIR, the parent's step-4 parameters read before it trained) of hau_Latn
  adapters trained for 2 steps on the frozen `trained_run`, once for the tests that read
  it (or a copy of it)."""
  parent_before = saved_params(trained_run, 4)
  run = tmp_path_factory.mktemp('adapters') / 'hau'
  _configure_adapters(trained_run, run, "('hau_Latn',)")
  try:
    train_configured()
  finally:
    gin.clear_config()
  return run, parent_before


@pytest.mark.slow
def test_adapters_train_on_a_frozen_base_that_stays_bit_identical(trained_run, hau_adapters):
  run, parent_before = hau_adapters
  run_checkpoints = checkpoints.RunCheckpoints(str(run), read_only=True)
  shapes = run_checkpoints.saved_shapes(2)
  run_checkpoints.close()
  paths = sorted(shapes)  # saved_params lists leaves in this (sorted-key) order.
  child = dict(zip(paths, saved_params(run, 2)))
  base = [value for path, value in child.items()
          if not any(p.startswith(parameter_layout.ADAPTER_PREFIX) for p in path)]
  assert len(base) == len(parent_before)
  for got, want in zip(base, parent_before):
    np.testing.assert_array_equal(got, want)
  up = [value for path, value in child.items() if path[-2:] == ('up', 'kernel')]
  assert len(up) == 2  # One adapter after each layer of the 1+1-layer tiny model.
  assert all(np.abs(value).max() > 0 for value in up)  # Trained away from zero init.
  for got, want in zip(saved_params(trained_run, 4), parent_before):
    np.testing.assert_array_equal(got, want)  # The parent checkpoint is untouched.


@pytest.mark.slow
def test_joint_training_moves_the_base_too(trained_run, tmp_path):
  _configure_adapters(trained_run, tmp_path / 'joint', "('hau_Latn',)", trainable="'all'")
  train_configured()
  moved = [not np.array_equal(got, want) for got, want in
           zip(saved_params(tmp_path / 'joint', 2), saved_params(trained_run, 4))]
  assert any(moved)


@pytest.mark.slow
def test_a_direction_without_its_adapter_is_one_clear_error(trained_run, hau_adapters,
                                                            tmp_path, monkeypatch, capsys):
  _configure_adapters(trained_run, tmp_path / 'fra', "('fra_Latn',)")
  with pytest.raises(UserError, match="eng_Latn-hau_Latn needs the adapter 'hau_Latn'"):
    train_configured()
  shutil.copytree(hau_adapters[0], tmp_path / 'hau')  # The run that trained hau_Latn's.
  source = tmp_path / 'src.txt'
  source.write_text('Monday\n')
  output = tmp_path / 'out.txt'
  translate_into_french = lambda: run_in_process('translate.py', [
      f'--checkpoint_dir={tmp_path / "hau"}', '--src_lang=eng_Latn', '--tgt_lang=fra_Latn',
      f'--input={source}', f'--output={output}'], monkeypatch, capsys)
  code, _, err = translate_into_french()
  assert code == 2 and error_lines(err) == [
      'error: fra_Latn: the model was never trained to translate into it; it translates '
      'into hau_Latn']
  # A run that did not record its directions is stopped by the missing adapter.
  (tmp_path / 'hau' / 'directions.json').unlink()
  code, _, err = translate_into_french()
  assert code == 2 and error_lines(err) == [
      "error: translate: direction eng_Latn-fra_Latn needs the adapter 'fra_Latn', which "
      'the model was not built with (adapters: hau_Latn)']
  assert not output.exists()
