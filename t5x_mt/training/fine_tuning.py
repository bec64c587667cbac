"""Starting a run from another run's parameters (fine-tuning, adapters on a trained base)."""

from collections.abc import Callable, Mapping
import logging
from typing import Any

from flax import traverse_util
import jax

from t5x_mt.runs import checkpoints
from t5x_mt.core import files
from t5x_mt.model import parameter_layout
from t5x_mt.runs import run_layout
from t5x_mt.core.errors import UserError


def initial_params(init_from: str, vocabulary: bytes, target: Any,
                   source_vocabulary_path: str | None = None) -> Any:
  """The latest parameters of run `init_from`, which must share this run's vocabulary (and
  source vocabulary, where either has one), shaped, laid out and placed as `target`."""
  parent = files.path(init_from)
  parent_vocabulary = run_layout.RunLayout(parent).vocabulary
  if not parent_vocabulary.is_file():
    raise UserError(f'train.init_from: {parent_vocabulary} not found (not a run folder)')
  if parent_vocabulary.read_bytes() != vocabulary:
    raise UserError(f'train.init_from: {parent_vocabulary} differs from this run\'s '
                    'vocabulary; set VOCABULARY_PATH to it')
  _check_source_vocabulary(run_layout.RunLayout(parent).source_vocabulary,
                           source_vocabulary_path)
  parent_checkpoints = checkpoints.RunCheckpoints(str(parent), read_only=True)
  try:
    step = parent_checkpoints.latest_step()
    if step is not None:
      _check_architecture(parent, parent_checkpoints.saved_shapes(step), target)
    logging.info('Starting from the parameters of %s', parent)
    return in_parent_layout(parent_checkpoints, target,
                            lambda target: _with_new_adapters(parent_checkpoints, target))
  except UserError as error:
    raise UserError(f'train.init_from: {error}') from None
  finally:
    parent_checkpoints.close()


def record_base(run_checkpoints: checkpoints.RunCheckpoints, init_from: str,
                params: Any) -> None:
  """Makes a LoRA run's checkpoints leave out the frozen base it starts from
  (`RunCheckpoints.set_base`), where run `init_from`'s latest checkpoint holds that base
  as this run's model has it; otherwise (another layer layout, a grown vocabulary) the
  run saves its whole model."""
  parent = checkpoints.RunCheckpoints(init_from, read_only=True)
  try:
    step = parent.latest_step()
    saved = parent.saved_shapes(step)
  finally:
    parent.close()
  frozen = {path: tuple(leaf.shape) for path, leaf in traverse_util.flatten_dict(params).items()
            if not parameter_layout.trains_on_frozen_base(path)}
  if any(saved.get(path) != shape for path, shape in frozen.items()):
    logging.info('%s holds the base in another layout or shape: checkpoints hold the whole '
                 'model', init_from)
    return
  run_checkpoints.set_base(init_from, step)


def _check_source_vocabulary(parent: files.AnyPath, own: str | None) -> None:
  """A UserError unless the parent and this run segment sources alike: both with their
  vocabulary, or both with the same source vocabulary."""
  theirs = parent.read_bytes() if parent.is_file() else None
  ours = files.path(own).read_bytes() if own else None
  if theirs != ours:
    where = f'its {parent}' if theirs is not None else 'its vocabulary'
    raise UserError(f'train.init_from: the parent segments sources with {where}, this run '
                    f'with {own or "its vocabulary"}; set data_tasks.source_vocabulary_path '
                    f'to {parent if theirs is not None else "None"}')


def _check_architecture(parent: files.AnyPath, saved: Mapping[tuple[str, ...], tuple],
                        target: Any) -> None:
  """UserError naming both architectures when the parent's parameters place the norms or
  encode positions otherwise than `target`'s: its weights would not fit this model. Post-LN
  and B2T have the same parameters, so either starts from the other's."""
  own = {path: tuple(leaf.shape) for path, leaf in traverse_util.flatten_dict(target).items()}
  dropped_lora = [path for path in saved
                  if parameter_layout.is_lora_path(path) and path not in own]
  if dropped_lora:
    raise UserError(f'{parent} trained LoRA ({"/".join(dropped_lora[0][:-1])} and others), '
                    'which this run\'s model lacks; start from it with its LORA_RANK and '
                    'LORA_TARGETS')
  parent_architecture, own_architecture = _architecture(saved), _architecture(own)
  if parent_architecture != own_architecture:
    raise UserError(f"{parent}'s model is {parent_architecture}, this run's is "
                    f'{own_architecture}; start from a parent with the same '
                    'network.TransformerConfig.layer_norm and position settings')


def _architecture(shapes: Mapping[tuple[str, ...], tuple]) -> str:
  """A model's norm placement and positions, in words, from its parameters' {path: shape}
  (either layer layout)."""
  norms = ('pre-LN' if any(parameter_layout.FINAL_NORMS['encoder'] in path for path in shapes)
           else 'post-LN (or B2T)')
  encoder, decoder = (_positions(stack, shapes) for stack in parameter_layout.STACKS)
  if encoder == decoder:
    return f'{norms} with {encoder}'
  return f'{norms} with {encoder} in the encoder and {decoder} in the decoder'


def _positions(stack: str, shapes: Mapping[tuple[str, ...], tuple]) -> str:
  """`stack`'s positions as its parameters show them: a learned table, Shaw's relative
  tables of 2k + 1 rows, or neither (sinusoids)."""
  own = [path for path in shapes if path[0] == stack]
  if any(parameter_layout.POSITION_EMBEDDING in path for path in own):
    return 'learned positions'
  tables = {path[-1]: shapes[path] for path in own if path[-1] in (
      parameter_layout.RELATIVE_KEYS, parameter_layout.RELATIVE_VALUES)}
  if parameter_layout.RELATIVE_KEYS not in tables:
    return 'sinusoidal positions'
  distance = (tables[parameter_layout.RELATIVE_KEYS][-2] - 1) // 2
  kinds = 'keys and values' if parameter_layout.RELATIVE_VALUES in tables else 'keys only'
  return f'relative positions (k={distance}, {kinds})'


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
  """The parent's latest parameters; adapters and LoRA matrices it was built without keep
  `target`'s fresh values (both added to a trained base start as the identity)."""
  step = parent.latest_step()
  saved = parent.saved_shapes(step) if step is not None else {}
  flat = traverse_util.flatten_dict(target)
  new = {path for path in flat
         if path not in saved and parameter_layout.trains_on_frozen_base(path)}
  if not new:
    return parent.restore_params(step, target)
  logging.info('%d adapter or LoRA parameters are new: they start at their initial values',
               len(new))
  restored = parent.restore_params(step, traverse_util.unflatten_dict(
      {path: leaf for path, leaf in flat.items() if path not in new}))
  merged = {**flat, **traverse_util.flatten_dict(restored)}
  return traverse_util.unflatten_dict(merged)
