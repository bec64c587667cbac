"""Orbax checkpoints of a run: save every N steps, keep K, resume where it stopped.

A checkpoint has two items, so that commands that only translate read only what they need:
  params      the model parameters
  optimizer   the step counter and the optimizer state
and, beside it, the position of every host's input pipeline (a tf.data iterator
checkpoint per process) so that a resumed run sees exactly the batches an uninterrupted
run would have seen. The input position is written before Orbax commits the step, so a
step that exists always has its input position.
"""

import logging
import os
import pathlib
import shutil
from typing import Any

import jax
import orbax.checkpoint as ocp
import tensorflow as tf

from t5x_mt.errors import UserError

CHECKPOINTS = 'checkpoints'
INPUT_STATE = 'input_state'


class RunCheckpoints:
  """The checkpoints of one MODEL_DIR."""

  def __init__(self, model_dir: str, *, keep: int = 3, read_only: bool = False):
    self.model_dir = pathlib.Path(model_dir)
    self.directory = self.model_dir / CHECKPOINTS
    if read_only and not self.directory.is_dir():
      raise UserError(f'{model_dir}: no checkpoints found (expected {self.directory})')
    options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=not read_only,
                                           read_only=read_only)
    self._manager = ocp.CheckpointManager(self.directory.absolute(), options=options)

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def _input_state_prefix(self, step: int) -> str:
    return str(self.model_dir / INPUT_STATE / f'step_{step}' / f'process_{jax.process_index()}')

  def save(self, step: int, state: Any, input_iterator: Any | None = None) -> None:
    """Saves `state` (a TrainState) and the input position at `step` (asynchronously)."""
    if input_iterator is not None:
      tf.train.Checkpoint(iterator=input_iterator).write(self._input_state_prefix(step))
    self._manager.save(step, args=ocp.args.Composite(
        params=ocp.args.StandardSave(state.params),
        optimizer=ocp.args.StandardSave({'step': state.step, 'opt_state': state.opt_state})))
    self._drop_stale_input_states()

  def restore(self, step: int, target: Any) -> Any:
    """Restores a TrainState shaped and sharded like `target` (arrays or ShapeDtypeStructs)."""
    restored = self._manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(_abstract(target.params)),
        optimizer=ocp.args.StandardRestore(
            _abstract({'step': target.step, 'opt_state': target.opt_state}))))
    return target.replace(params=restored['params'], step=restored['optimizer']['step'],
                          opt_state=restored['optimizer']['opt_state'])

  def restore_params(self, step: int | None, target_params: Any) -> Any:
    """Restores only the parameters (for translation and evaluation)."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise UserError(f'{self.directory}: holds no finished checkpoint')
    restored = self._manager.restore(step, args=ocp.args.Composite(
        params=ocp.args.StandardRestore(_abstract(target_params))))
    return restored['params']

  def restore_input(self, step: int, input_iterator: Any) -> None:
    """Moves `input_iterator` to where it was when `step` was saved."""
    prefix = self._input_state_prefix(step)
    if not tf.io.gfile.exists(prefix + '.index'):
      raise UserError(f'{prefix}: input position of checkpoint {step} is missing; the run '
                      'cannot resume its data where it stopped')
    tf.train.Checkpoint(iterator=input_iterator).read(prefix).assert_consumed()

  def _drop_stale_input_states(self) -> None:
    """Input positions of checkpoints Orbax has deleted go too."""
    root = self.model_dir / INPUT_STATE
    if jax.process_index() != 0 or not root.is_dir():
      return
    kept = {f'step_{step}' for step in self._manager.all_steps()}
    for child in root.iterdir():
      step = child.name.removeprefix('step_')
      if child.name not in kept and step.isdigit() and int(step) < max(
          self._manager.all_steps(), default=0):
        shutil.rmtree(child, ignore_errors=True)

  def wait(self) -> None:
    """Blocks until asynchronous saves are on disk."""
    self._manager.wait_until_finished()

  def close(self) -> None:
    self._manager.wait_until_finished()
    self._manager.close()


def _abstract(tree: Any) -> Any:
  """ShapeDtypeStructs (with shardings) describing a tree of arrays."""
  def to_struct(x):
    if isinstance(x, jax.ShapeDtypeStruct):
      return x
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, 'sharding', None))
  return jax.tree_util.tree_map(to_struct, tree)


def check_writable(model_dir: str) -> None:
  """Fails early, naming MODEL_DIR, if the run could not write its outputs there."""
  path = pathlib.Path(model_dir)
  try:
    path.mkdir(parents=True, exist_ok=True)
    probe = path / '.write_test'
    probe.write_text('')
    probe.unlink()
  except OSError as error:
    raise UserError(f'MODEL_DIR: cannot write to {model_dir} ({error.strerror or error})') from None
  logging.info('Writing to %s', os.path.abspath(model_dir))
