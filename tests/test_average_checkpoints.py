"""Tests for checkpoint averaging (averaging.mean_params, launch/average_checkpoints.py)
on the session's tiny trained run, which saved steps 2 and 4."""

import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from t5x_mt.runs import averaging
from t5x_mt.runs import checkpoints
from t5x_mt.config import run_loading
from t5x_mt.decoding import line_streaming
from conftest import saved_params
from test_launch_translate_evaluate import error_lines
from test_launch_translate_evaluate import run_in_process


@pytest.mark.slow
def test_average_of_two_checkpoints_is_their_mean_and_translates(trained_run, tmp_path,
                                                                 monkeypatch, capsys):
  output = tmp_path / 'averaged'
  code, out, err = run_in_process('average_checkpoints.py', [
      f'--checkpoint_dir={trained_run}', f'--output_dir={output}', '--last=2'],
      monkeypatch, capsys)
  assert code == 0, err
  assert 'averaged steps 2, 4' in out
  assert sorted(p.name for p in output.iterdir()) == ['checkpoints', 'config.gin', 'directions.json',
                                                   'vocab.model']
  averaged = saved_params(output, 4)
  for mean, a, b in zip(averaged, saved_params(trained_run, 2), saved_params(trained_run, 4)):
    np.testing.assert_allclose(mean, (a + b) / 2, rtol=1e-6, atol=1e-7)
  assert not np.allclose(averaged[0], saved_params(trained_run, 4)[0])
  translator = run_loading.load_translator(str(output), beam_size=1)
  assert line_streaming.translate_lines(translator, ['Monday'], 'eng_Latn', 'hau_Latn')[0]


def test_one_step_average_is_that_checkpoint(trained_run, tmp_path, monkeypatch, capsys):
  output = tmp_path / 'one'
  code, _, err = run_in_process('average_checkpoints.py', [
      f'--checkpoint_dir={trained_run}', f'--output_dir={output}', '--steps=2'],
      monkeypatch, capsys)
  assert code == 0, err
  for mean, saved in zip(saved_params(output, 2), saved_params(trained_run, 2)):
    np.testing.assert_array_equal(mean, saved)


def test_bad_requests_are_one_line_and_write_nothing(trained_run, tmp_path, monkeypatch,
                                                     capsys):
  busy = tmp_path / 'busy'
  busy.mkdir()
  (busy / 'file').write_text('x')
  for flags, message in (
      (['--last=3'], 'keeps 2 checkpoints (2, 4), fewer than 3'),
      (['--steps=2,3'], '--steps: '),
      (['--steps=2,x'], "--steps: '2,x' is not a comma-separated list"),
      (['--last=2', '--steps=2'], 'exactly one of --last=K and --steps'),
      (['--last=2', f'--output_dir={busy}'], f'{busy} exists and is not empty'),
  ):
    code, _, err = run_in_process('average_checkpoints.py', [
        f'--checkpoint_dir={trained_run}', f'--output_dir={tmp_path / "out"}', *flags],
        monkeypatch, capsys)
    assert code == 2 and len(error_lines(err)) == 1 and message in err, (flags, err)
  assert sorted(p.name for p in tmp_path.iterdir()) == ['busy']


def test_checkpoints_of_different_shapes_are_refused(trained_run, tmp_path, monkeypatch,
                                                     capsys):
  run_dir = tmp_path / 'run'
  shutil.copytree(trained_run, run_dir)
  run_checkpoints = checkpoints.RunCheckpoints(str(run_dir), read_only=True)
  params = run_checkpoints._manager.restore(4)['params']  # pylint: disable=protected-access
  run_checkpoints.close()
  grown = jax.tree_util.tree_map(lambda leaf: np.concatenate([leaf, leaf]) if leaf.ndim == 2
                                 else leaf, params)
  writer = checkpoints.RunCheckpoints(str(run_dir), keep=5)
  writer.save_params(6, grown)
  writer.close()
  code, _, err = run_in_process('average_checkpoints.py', [
      f'--checkpoint_dir={run_dir}', f'--output_dir={tmp_path / "out"}', '--steps=4,6'],
      monkeypatch, capsys)
  assert code == 2
  assert error_lines(err) == [f'error: {run_dir / "checkpoints"}: checkpoints 4 and 6 have '
                              'different shapes (a vocabulary grew between them); average '
                              'steps of one shape']
  assert sorted(p.name for p in tmp_path.iterdir()) == ['run']


def test_mean_params_is_the_element_wise_mean_in_the_trees_dtype():
  values = ([1.0, 2.0], [2.0, 4.0], [4.0, 9.0])
  trees = ({'w': jnp.array(w, jnp.bfloat16), 'b': {'bias': jnp.array(w[:1], jnp.float32)}}
           for w in values)
  mean = averaging.mean_params(trees)
  assert mean['w'].dtype == jnp.bfloat16 and mean['b']['bias'].dtype == jnp.float32
  np.testing.assert_array_equal(np.asarray(mean['w'], np.float32), [2.328125, 5.0])  # 7/3 in bf16
  np.testing.assert_allclose(np.asarray(mean['b']['bias']), [7 / 3], rtol=1e-7)
