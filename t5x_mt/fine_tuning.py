"""Starting a run from another run's parameters (fine-tuning, adapters on a trained base)."""

from collections.abc import Callable
import logging
from typing import Any

from flax import traverse_util
import jax

from t5x_mt import adapters
from t5x_mt import checkpoints
from t5x_mt import files
from t5x_mt import parameter_layout
from t5x_mt import run_layout
from t5x_mt.errors import UserError


def initial_params(init_from: str, vocabulary: bytes, target: Any) -> Any:
  """The latest parameters of run `init_from`, which must share this run's vocabulary,
  shaped, laid out and placed as `target`."""
  parent = files.path(init_from)
  parent_vocabulary = run_layout.RunLayout(parent).vocabulary
  if not parent_vocabulary.is_file():
    raise UserError(f'train.init_from: {parent_vocabulary} not found (not a run folder)')
  if parent_vocabulary.read_bytes() != vocabulary:
    raise UserError(f'train.init_from: {parent_vocabulary} differs from this run\'s '
                    'vocabulary; set VOCABULARY_PATH to it')
  parent_checkpoints = checkpoints.RunCheckpoints(str(parent), read_only=True)
  try:
    logging.info('Starting from the parameters of %s', parent)
    return in_parent_layout(parent_checkpoints, target,
                            lambda target: _with_new_adapters(parent_checkpoints, target))
  except UserError as error:
    raise UserError(f'train.init_from: {error}') from None
  finally:
    parent_checkpoints.close()


def in_parent_layout(parent: checkpoints.RunCheckpoints, target: Any,
                     restore: Callable[[Any], Any]) -> Any:
  """`restore(target)`, run in the parent's layer layout when it differs from this run's
  (one trained with TransformerConfig.scan_layers, the other without), the result
  converted back and placed as `target` is."""
  step = parent.latest_step()
  saved = parent.saved_shapes(step) if step is not None else {}
  parent_scanned = any(parameter_layout.is_scanned_path(path) for path in saved)
  if not saved or parent_scanned == parameter_layout.is_scanned(target):
    return restore(target)
  layouts = (parameter_layout.to_scanned, parameter_layout.to_unrolled)
  to_parent, back = layouts if parent_scanned else layouts[::-1]
  logging.info('Converting the parameters between scanned and unrolled layers')
  restored = back(restore(to_parent(target)))
  return jax.tree.map(lambda value, like: jax.device_put(value, like.sharding), restored,
                      target)


def _with_new_adapters(parent: checkpoints.RunCheckpoints, target: Any) -> Any:
  """The parent's latest parameters; adapters it was built without keep `target`'s fresh
  values (adapters added to a trained base start as the identity)."""
  step = parent.latest_step()
  saved = parent.saved_shapes(step) if step is not None else {}
  flat = traverse_util.flatten_dict(target)
  new = {path for path in flat if path not in saved and
         any(part.startswith(parameter_layout.ADAPTER_PREFIX) for part in path)}
  if not new:
    return parent.restore_params(step, target)
  logging.info('%d adapter parameters are new: they start at their initial values', len(new))
  restored = parent.restore_params(step, traverse_util.unflatten_dict(
      {path: leaf for path, leaf in flat.items() if path not in new}))
  merged = {**flat, **traverse_util.flatten_dict(restored)}
  return traverse_util.unflatten_dict(merged)
