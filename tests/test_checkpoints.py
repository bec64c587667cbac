"""Checkpoints restored into a model whose vocabulary grew keep every trained value."""

import dataclasses

import jax
import numpy as np
import pytest

from t5x_mt.runs import checkpoints
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.core import partitioning
from t5x_mt.training import trainer
from t5x_mt.core.errors import UserError

CONFIG = network.TransformerConfig(vocab_size=128, emb_dim=16, num_heads=2, head_dim=8,
                                   mlp_dim=32, num_encoder_layers=1, num_decoder_layers=1)


def _state(config, seed):
  mesh = partitioning.create_mesh((1, 1), jax.devices()[:1])
  model = models.TranslationModel(config)
  optimizer = trainer.make_optimizer()
  state, _ = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, 8, 8), mesh,
      partitioning.DEFAULT_RULES, jax.random.PRNGKey(seed))
  return state


def _with_moments(state):
  """The state with non-zero Adam moments, as after training."""
  return state.replace(opt_state=jax.tree_util.tree_map(lambda x: x + 0.5, state.opt_state),
                       step=state.step + 7)


def test_restore_into_a_grown_vocabulary_keeps_old_rows_and_fresh_new_ones(tmp_path):
  saved = _with_moments(_state(CONFIG, seed=0))
  run = checkpoints.RunCheckpoints(str(tmp_path))
  run.save(7, saved)
  run.wait()
  fresh = _state(dataclasses.replace(CONFIG, vocab_size=256), seed=1)
  restored = run.restore(7, fresh)
  run.close()
  assert int(restored.step) == 7
  embedding = np.asarray(restored.params['shared_embedding']['embedding'])
  assert embedding.shape[0] == 256
  np.testing.assert_array_equal(embedding[:128],
                                np.asarray(saved.params['shared_embedding']['embedding']))
  np.testing.assert_array_equal(embedding[128:],
                                np.asarray(fresh.params['shared_embedding']['embedding'])[128:])
  mu = restored.opt_state[1][0].mu['shared_embedding']['embedding']
  np.testing.assert_array_equal(np.asarray(mu)[:128], 0.5)
  np.testing.assert_array_equal(np.asarray(mu)[128:], 0.0)
  same_shape = restored.params['encoder']['encoder_norm']['scale']
  np.testing.assert_array_equal(np.asarray(same_shape),
                                np.asarray(saved.params['encoder']['encoder_norm']['scale']))


def test_restore_into_a_smaller_model_is_a_user_error(tmp_path):
  run = checkpoints.RunCheckpoints(str(tmp_path))
  run.save(1, _state(CONFIG, seed=0))
  run.wait()
  with pytest.raises(UserError, match='saved with shape'):
    run.restore(1, _state(dataclasses.replace(CONFIG, emb_dim=8, head_dim=4), seed=0))
  run.close()


@pytest.mark.parametrize('asynchronous', [True, False])
def test_an_asynchronous_save_returns_while_its_arrays_are_still_being_written(
    tmp_path, asynchronous):
  """async_checkpointing: training goes on while Orbax writes (about 100 MB here) in the
  background, and the checkpoint is whole once waited for; without it, save returns with
  the checkpoint written."""
  saved = _with_moments(_state(dataclasses.replace(CONFIG, vocab_size=32768, emb_dim=256,
                                                   head_dim=128), seed=0))
  run = checkpoints.RunCheckpoints(str(tmp_path), asynchronous=asynchronous)
  run.save(7, saved)
  assert run._manager.is_saving_in_progress() == asynchronous  # pylint: disable=protected-access
  run.wait()
  restored = checkpoints.RunCheckpoints(str(tmp_path), read_only=True).restore(
      7, _state(dataclasses.replace(CONFIG, vocab_size=32768, emb_dim=256, head_dim=128),
                seed=1))
  run.close()
  np.testing.assert_array_equal(np.asarray(restored.params['shared_embedding']['embedding']),
                                np.asarray(saved.params['shared_embedding']['embedding']))
