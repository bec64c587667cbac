"""Orbax checkpoints of a run: save every N steps, keep K, resume where it stopped.

A checkpoint has two items, so that commands that only translate read only what they need:
  params      the model parameters
  optimizer   the step counter and the optimizer state
A run that trains LoRA on a frozen base started from another run (`set_base`) saves in
`params` only what trains (LoRA's matrices and adapters,
`parameter_layout.trains_on_frozen_base`), and every restore reads the rest from that
base run's checkpoint: a LoRA fine-tune of a large model checkpoints in megabytes.
and, beside it, the run's host-side state (`HostState`): the position of each input
shard, so that a resumed run sees exactly the batches an uninterrupted run would have
seen, and DRO's loss averages. These are written before Orbax commits the step, so a
step that exists always has them. A step whose write a crash cut short stays in Orbax's
temporary folder, which the next run removes; a step that exists but cannot be read is
set aside (`set_aside`) so that the run resumes from the one before it.

Every process of a multi-process run saves and restores together: each writes the shards
of the arrays it holds and Orbax's primary process the metadata; host states decide
which process writes what, and process 0 writes their manifest.
"""

from collections.abc import Callable, Iterator, Mapping
import contextlib
import json
import logging
from typing import Any, Protocol

import jax
import orbax.checkpoint as ocp

from flax import traverse_util

from t5x_mt.core import files
from t5x_mt.core import interrupts
from t5x_mt.core import processes
from t5x_mt.model import parameter_layout
from t5x_mt.runs import run_layout
from t5x_mt.core.errors import UserError

ITEMS = ('params', 'optimizer')
# Beside each process's host states: the names saved, written last.
HOST_STATES_SUFFIX = '.host_states.json'


class DamagedCheckpoint(UserError):
  """A checkpoint that exists but cannot be read: a file cut short, missing or corrupt."""


class HostState(Protocol):
  """Host-side state a checkpoint saves beside its arrays.

  Every process calls `write_state` and `read_state`; a state shared by all processes is
  written by process 0 alone, one split among them by each for its own part.
  """

  def write_state(self, prefix: str) -> None:
    """Writes the state to files named `prefix` (plus suffixes of its own)."""

  def read_state(self, prefix: str) -> None:
    """Restores what `write_state` wrote."""


class RunCheckpoints:
  """The checkpoints of one MODEL_DIR."""

  def __init__(self, model_dir: str, *, keep: int = 3, read_only: bool = False,
               asynchronous: bool = True):
    self.model_dir = files.path(model_dir)
    self.layout = run_layout.RunLayout(model_dir)
    self.directory = self.layout.checkpoints
    if read_only and not self.directory.is_dir():
      raise UserError(f'{model_dir}: no checkpoints found (expected {self.directory})')
    self._protected = _ProtectedStep()
    options = ocp.CheckpointManagerOptions(
        create=not read_only, read_only=read_only, enable_async_checkpointing=asynchronous,
        cleanup_tmp_directories=not read_only,
        preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(
            [ocp.checkpoint_managers.LatestN(keep), self._protected]))
    # Handlers named up front let `item_metadata` read saved shapes before a restore.
    self._manager = ocp.CheckpointManager(
        files.absolute(self.directory), options=options,
        item_handlers={name: ocp.StandardCheckpointHandler() for name in ITEMS})

  def protect(self, step: int | None) -> None:
    """Keeps checkpoint `step` (early stopping's best) through the rotation that keeps the
    latest `keep`; the step protected before it becomes an ordinary one again."""
    self._protected.step = step

  @contextlib.contextmanager
  def _reading(self, step: int) -> Iterator[None]:
    """Turns a failure to read checkpoint `step` (a file cut short or missing: Orbax and
    TensorStore raise their own errors) into one line naming the checkpoint."""
    try:
      yield
    except UserError:
      raise
    except Exception as error:  # pylint: disable=broad-except
      raise DamagedCheckpoint(f'{self.directory / str(step)}: cannot be read, the checkpoint '
                              f'is damaged or incomplete ({_root_cause(error)})') from None

  def set_base(self, base_dir: str, step: int) -> None:
    """Records that this run's frozen parameters are those of run `base_dir` at `step`:
    its checkpoints leave them out from then on (process 0 writes, every process waits)."""
    if processes.is_primary():
      files.write_text_atomically(self.layout.base_run, json.dumps(
          {'run': str(files.absolute(base_dir)), 'step': step}) + '\n')
    processes.wait_for_all('base run recorded')

  def base(self) -> tuple[str, int] | None:
    """(run folder, step) whose parameters this run's checkpoints leave out, or None."""
    if not self.layout.base_run.is_file():
      return None
    record = json.loads(self.layout.base_run.read_text(encoding='utf-8'))
    return record['run'], int(record['step'])

  def _own(self, params: Any) -> Any:
    """The part of `params` this run's checkpoints hold: all, or with a base run what
    trains on it."""
    if self.base() is None:
      return params
    return traverse_util.unflatten_dict({
        path: leaf for path, leaf in traverse_util.flatten_dict(params).items()
        if parameter_layout.trains_on_frozen_base(path)})

  def _with_base(self, own: Any, target: Any) -> Any:
    """`own` restored parameters completed by the base run's (shaped like `target`)."""
    base = self.base()
    if base is None:
      return own
    base_dir, step = base
    frozen = traverse_util.unflatten_dict({
        path: leaf for path, leaf in traverse_util.flatten_dict(target).items()
        if not parameter_layout.trains_on_frozen_base(path)})
    base_checkpoints = RunCheckpoints(base_dir, read_only=True)
    try:
      if step not in base_checkpoints.all_steps():
        raise UserError(f'{self.model_dir}: its base run {base_dir} no longer has checkpoint '
                        f'{step}, whose parameters this run trained LoRA on')
      restored = base_checkpoints.restore_params(step, frozen)
    finally:
      base_checkpoints.close()
    return traverse_util.unflatten_dict({**traverse_util.flatten_dict(restored),
                                         **traverse_util.flatten_dict(own)})

  def latest_step(self) -> int | None:
    return self._manager.latest_step()

  def all_steps(self) -> list[int]:
    return sorted(self._manager.all_steps())

  def save(self, step: int, state: Any,
           host_states: Mapping[str, HostState] | None = None) -> None:
    """Saves `state` (a TrainState) at `step`, the arrays asynchronously unless the
    manager was made otherwise, and `host_states` beside it (named as
    `restore_host_states` will ask)."""
    prefix = self.layout.host_state_prefix(step)
    for name, host_state in (host_states or {}).items():
      host_state.write_state(f'{prefix}.{name}')
    if processes.is_primary():
      files.write_text_atomically(prefix + HOST_STATES_SUFFIX,
                                  json.dumps(sorted(host_states or {})) + '\n')
    self._manager.save(step, args=ocp.args.Composite(
        params=ocp.args.StandardSave(self._own(state.params)),
        optimizer=ocp.args.StandardSave({'step': state.step, 'opt_state': state.opt_state})))
    self._drop_stale_input_states()

  def restore(self, step: int, target: Any) -> Any:
    """Restores a TrainState shaped and sharded like `target` (a freshly initialised one).

    A checkpoint saved with a smaller vocabulary (before `launch/merge_vocab.py` grew it)
    restores into the leading rows of the larger arrays; the appended rows keep `target`'s
    fresh values (new embeddings from the initialiser, zero optimizer moments).
    """
    optimizer_target = {'step': target.step, 'opt_state': target.opt_state}
    own_target = self._own(target.params)
    args = ocp.args.Composite(
        params=ocp.args.StandardRestore(self._saved_like('params', step, own_target)),
        optimizer=ocp.args.StandardRestore(
            self._saved_like('optimizer', step, optimizer_target)))
    with self._reading(step):
      restored = self._manager.restore(step, args=args)
    params = self._with_base(_grow(restored['params'], own_target), target.params)
    optimizer = _grow(restored['optimizer'], optimizer_target)
    return target.replace(params=params, step=optimizer['step'],
                          opt_state=optimizer['opt_state'])

  def saved_shapes(self, step: int, item: str = 'params') -> dict[tuple[str, ...], tuple]:
    """{path as strings: shape} of the arrays of `item` saved at `step`, read without
    restoring them; a run's parameters include those its base run holds for it."""
    with self._reading(step):
      metadata = self._manager.item_metadata(step)[item]
    shapes = {_path_key(path): tuple(leaf.shape)
              for path, leaf in jax.tree_util.tree_leaves_with_path(metadata)
              if hasattr(leaf, 'shape')}
    if item != 'params':
      return shapes
    return self._over_base(shapes, lambda base, step: base.saved_shapes(step))

  def _over_base(self, own: dict[tuple[str, ...], Any],
                 read_base: Callable[['RunCheckpoints', int], dict[tuple[str, ...], Any]]
                 ) -> dict[tuple[str, ...], Any]:
    """{path: value} of this run's parameters: `own`, and where the run has a base run,
    the frozen ones `read_base(its checkpoints, its step)` gives."""
    base = self.base()
    if base is None:
      return own
    base_checkpoints = RunCheckpoints(base[0], read_only=True)
    try:
      theirs = read_base(base_checkpoints, base[1])
    finally:
      base_checkpoints.close()
    return {**{path: value for path, value in theirs.items()
               if not parameter_layout.trains_on_frozen_base(path)}, **own}

  def _saved_like(self, item: str, step: int, target: Any) -> Any:
    """Abstract arrays like `target` but with the shapes saved at `step`.

    UserError if a saved array is larger than the model's on any axis: only growth
    (a vocabulary extended by appending pieces) can be restored into a different shape.
    """
    saved = self.saved_shapes(step, item)

    def like(path, leaf):
      if _path_key(path) not in saved:
        raise UserError(f'{self.directory}/{step}: {item} has no '
                        f'{jax.tree_util.keystr(path)}: it was saved by another model than '
                        "the run's config.gin describes")
      shape = saved[_path_key(path)]
      if len(shape) != len(leaf.shape) or any(a > b for a, b in zip(shape, leaf.shape)):
        raise UserError(f'{self.directory}/{step}: {item} {jax.tree_util.keystr(path)} was '
                        f'saved with shape {shape} but the model has {tuple(leaf.shape)}; '
                        'only a grown vocabulary can change shapes')
      return jax.ShapeDtypeStruct(shape, leaf.dtype, sharding=getattr(leaf, 'sharding', None))
    return jax.tree_util.tree_map_with_path(like, target)

  def restore_params(self, step: int | None, target_params: Any) -> Any:
    """Restores only the parameters (for translation and evaluation)."""
    step = self.latest_step() if step is None else step
    if step is None:
      raise UserError(f'{self.directory}: holds no finished checkpoint')
    own_target = self._own(target_params)
    if not jax.tree.leaves(own_target):  # All in the base run (a LoRA run's child's base).
      return self._with_base({}, target_params)
    saved = self._saved_like('params', step, own_target)
    if jax.tree_util.tree_leaves(jax.tree_util.tree_map(
        lambda a, b: a.shape != b.shape, saved, _abstract(own_target))).count(True):
      raise UserError(f'{self.directory}/{step}: saved before the vocabulary grew; '
                      'translate with a checkpoint saved after training resumed with it')
    with self._reading(step):
      restored = self._manager.restore(step, args=ocp.args.Composite(
          params=ocp.args.StandardRestore(_abstract(own_target))))
    return self._with_base(restored['params'], target_params)

  def restore_saved_params(self, step: int) -> Any:
    """The parameters saved at `step` as they were saved (shapes, dtypes, layout), with
    those a base run holds for this run: for a command that rewrites a run's weights
    without building its model."""
    with self._reading(step):
      own = self._manager.restore(step, args=ocp.args.Composite(
          params=ocp.args.StandardRestore()))['params']
    return traverse_util.unflatten_dict(self._over_base(
        traverse_util.flatten_dict(own),
        lambda base, step: traverse_util.flatten_dict(base.restore_saved_params(step))))

  def save_params(self, step: int, params: Any) -> None:
    """Saves parameters alone at `step`: a checkpoint to translate, evaluate or fine-tune
    from (an averaged one has no optimizer state of its own). A Ctrl-C meanwhile waits
    until Orbax's threads are done writing (`interrupts.deferred`)."""
    with interrupts.deferred():
      self._manager.save(step, args=ocp.args.Composite(
          params=ocp.args.StandardSave(self._own(params))))

  def restore_host_states(self, step: int, host_states: Mapping[str, HostState]) -> None:
    """Restores each of `host_states` to what it was when `step` was saved."""
    prefix = self.layout.host_state_prefix(step)
    manifest = prefix + HOST_STATES_SUFFIX
    saved = (json.loads(files.path(manifest).read_text())
             if files.path(manifest).exists() else [])
    for name, host_state in host_states.items():
      if name not in saved:
        raise UserError(f'{prefix}: checkpoint {step} was saved without {name} state; the run '
                        'cannot resume it (a run of another kind starts from it with '
                        'train.init_from)')
      host_state.read_state(f'{prefix}.{name}')

  def _drop_stale_input_states(self) -> None:
    """Input positions of checkpoints Orbax has deleted go too."""
    root = self.layout.input_state
    if not processes.is_primary() or not root.is_dir():
      return
    kept = {f'step_{step}' for step in self._manager.all_steps()}
    for child in root.iterdir():
      step = child.name.removeprefix('step_')
      if child.name not in kept and step.isdigit() and int(step) < max(
          self._manager.all_steps(), default=0):
        files.remove_folder(child)

  def set_aside(self, step: int) -> None:
    """Moves checkpoint `step` and its host states to MODEL_DIR/damaged/, out of the
    steps a run resumes from or writes again (process 0 moves, every process waits)."""
    if processes.is_primary():
      target = self.layout.damaged / str(step)
      files.remove_folder(target)
      target.mkdir(parents=True)
      (self.directory / str(step)).rename(target / 'checkpoint')
      input_state = files.path(self.layout.host_state_prefix(step)).parent
      if input_state.exists():
        input_state.rename(target / 'input_state')
    processes.wait_for_all(f'checkpoint {step} set aside')
    self._manager.reload()

  def wait(self) -> None:
    """Blocks until asynchronous saves are on disk, a Ctrl-C meanwhile too."""
    with interrupts.deferred():
      self._manager.wait_until_finished()

  def close(self) -> None:
    """Waits for asynchronous saves (a Ctrl-C too), then lets the manager go."""
    with interrupts.deferred():
      self._manager.wait_until_finished()
      self._manager.close()


class _ProtectedStep:
  """An Orbax preservation policy that keeps one step, which may change as a run goes."""

  def __init__(self):
    self.step: int | None = None

  def should_preserve(self, checkpoints, *, context) -> list[bool]:
    del context
    return [checkpoint.step == self.step for checkpoint in checkpoints]


def _root_cause(error: BaseException, limit: int = 300) -> str:
  """The first line of the innermost error in `error`'s chain, at most `limit` characters."""
  while error.__cause__ is not None or error.__context__ is not None:
    error = error.__cause__ or error.__context__
  first_line = (str(error).strip().splitlines() or [type(error).__name__])[0]
  return first_line if len(first_line) <= limit else first_line[:limit] + '...'


def _path_key(path) -> tuple[str, ...]:
  """A tree path as plain strings, equal for a namedtuple field and the dict key Orbax
  saves it under."""
  parts = []
  for entry in path:
    for attribute in ('key', 'name', 'idx'):
      if hasattr(entry, attribute):
        parts.append(str(getattr(entry, attribute)))
        break
  return tuple(parts)


def _grow(restored: Any, target: Any) -> Any:
  """`restored` arrays written over the leading part of `target`'s where they are smaller."""
  def grow(saved, fresh):
    if saved.shape == fresh.shape:
      return saved
    return fresh.at[tuple(slice(0, size) for size in saved.shape)].set(saved)
  return jax.tree_util.tree_map(grow, restored, target)


def _abstract(tree: Any) -> Any:
  """ShapeDtypeStructs (with shardings) describing a tree of arrays."""
  def to_struct(x):
    if isinstance(x, jax.ShapeDtypeStruct):
      return x
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=getattr(x, 'sharding', None))
  return jax.tree_util.tree_map(to_struct, tree)


def check_writable(model_dir: str) -> None:
  """Fails early, naming MODEL_DIR, if the run could not write its outputs there; creates
  nothing. Only process 0 writes run files, so only it checks."""
  if not processes.is_primary():
    return
  files.check_output(model_dir, 'MODEL_DIR', folder=True)
  logging.info('Writing to %s', files.absolute(model_dir))
