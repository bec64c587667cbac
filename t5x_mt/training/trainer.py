"""Train state, optimizer, learning-rate schedule and the sharded train step.

The train step is one `jax.jit` with explicit in/out shardings and the state donated, so
the same function runs on one CPU and on a pod. Gradient accumulation scans over
microbatches and normalises by the token count of the whole batch, which makes it equal
to one large batch (tested), and lets a user trade memory for steps without changing the
optimisation.
"""

from collections.abc import Callable, Sequence
from typing import Any

import flax
from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np
import optax

from t5x_mt.model import models
from t5x_mt.model import parameter_layout
from t5x_mt.training import optimizers
from t5x_mt.core import partitioning
from t5x_mt.core import processes
from t5x_mt.core import validation
from t5x_mt.core.errors import UserError

Batch = models.Batch


@flax.struct.dataclass
class TrainState:
  """Everything a resumed run needs from the device: step, parameters, optimizer state."""
  step: jax.Array
  params: Any
  opt_state: Any


def inverse_sqrt_schedule(peak_learning_rate: float = 1e-3,
                          warmup_steps: int = 4000) -> optax.Schedule:
  """Linear warmup to the peak, then decay with 1/sqrt(step) (Vaswani et al.).

  lr(s) = peak * min(s / warmup, sqrt(warmup / s)) for update number s = step + 1, so the
  first update already moves the parameters.
  """
  validation.number('trainer.inverse_sqrt_schedule.peak_learning_rate (LEARNING_RATE)',
                    peak_learning_rate, above=0.0)
  validation.integer('trainer.inverse_sqrt_schedule.warmup_steps (WARMUP_STEPS)',
                     warmup_steps, minimum=0)
  warmup = float(max(warmup_steps, 1))

  def schedule(step):
    s = jnp.asarray(step, jnp.float32) + 1.0
    return peak_learning_rate * jnp.minimum(s / warmup, jnp.sqrt(warmup / s))

  return schedule


def constant_schedule(learning_rate: float = 1e-5) -> optax.Schedule:
  """A fixed learning rate: fine-tuning on small clean data (docs/methods.md#fine-tuning)."""
  validation.number('trainer.constant_schedule.learning_rate', learning_rate, at_least=0.0)
  return optax.constant_schedule(learning_rate)


def _decay_mask(params: Any) -> Any:
  """Weight decay applies to matrices, not to norm scales, biases or other vectors."""
  return jax.tree_util.tree_map(lambda p: p.ndim > 1, params)


TRAINABLE = ('all', 'adapters')


def trains_on_frozen_base(trainable: str, with_lora: bool) -> bool:
  """Whether a run trains adapters or LoRA only, on a base that stays as it was."""
  return trainable == 'adapters' or with_lora


def trainable_mask(params: Any) -> Any:
  """True for the parameters that train on a frozen base, False for the base's."""
  return jax.tree_util.tree_map_with_path(
      lambda path, _: parameter_layout.trains_on_frozen_base(path), params)


def make_optimizer(learning_rate: optax.Schedule | None = None, b1: float = 0.9,
                   b2: float = 0.98, eps: float = 1e-9, weight_decay: float = 0.0,
                   clip_norm: float | None = 1.0, trainable: str = 'all',
                   with_lora: bool = False) -> optax.GradientTransformation:
  """AdamW with betas (0.9, 0.98) and global-norm clipping (docs/methods.md#training).

  On a frozen base (`trainable='adapters'`, or a model with LoRA, `with_lora`, which the
  run passes), only adapter and LoRA parameters are updated and have optimizer state:
  every other update is exactly zero (and clipping sees the trained parameters' gradients
  only), so the base stays bit-identical.
  """
  if trainable not in TRAINABLE:
    raise UserError(f'make_optimizer.trainable: {trainable!r} is not one of '
                    f'{", ".join(TRAINABLE)}')
  schedule = learning_rate or inverse_sqrt_schedule()
  # optax.chain(clip_by_global_norm, adamw) in one pass per parameter, same state layout.
  clipped_adamw = optimizers.clipped_adamw(schedule, b1=b1, b2=b2, eps=eps,
                                           weight_decay=weight_decay, mask=_decay_mask,
                                           clip_norm=clip_norm)
  if not trains_on_frozen_base(trainable, with_lora):
    return clipped_adamw
  # The label 'adapters' names every trained parameter, LoRA's too: the state layout of
  # runs that trained adapters alone before LoRA existed.
  return optax.multi_transform(
      {'adapters': clipped_adamw, 'frozen': optax.set_to_zero()},
      lambda params: jax.tree.map(lambda trains: 'adapters' if trains else 'frozen',
                                  trainable_mask(params)))


def init_train_state(model: models.TranslationModel, optimizer: optax.GradientTransformation,
                     rng: jax.Array, encoder_length: int, decoder_length: int) -> TrainState:
  """Initialises a TrainState (boxed with logical axis names; see partitioning.shard_init)."""
  params = model.init(rng, encoder_length, decoder_length)
  return TrainState(step=jnp.zeros((), jnp.int32), params=params,
                    opt_state=optimizer.init(params))


def _microbatches(batch: Batch, num_microbatches: int) -> Batch:
  """[B, ...] -> [num_microbatches, B / num_microbatches, ...]."""
  return jax.tree_util.tree_map(
      lambda x: x.reshape((num_microbatches, x.shape[0] // num_microbatches) + x.shape[1:]),
      batch)


def _direction_id_array(direction_ids: Sequence[int]) -> jax.Array:
  return jnp.asarray(sorted(direction_ids) or [0], jnp.int32)


def make_eval_step(model: models.TranslationModel, *, direction_ids: Sequence[int],
                   label_smoothing: float = 0.1,
                   loss_chunk_length: int = 0) -> Callable[[Any, Batch], dict]:
  """The jitted loss of a batch without dropout or updates: the sums `make_train_step`
  reports, so that a plain model's per-direction losses (DRO baselines) are in the units
  of the training losses they are compared with."""
  ids = _direction_id_array(direction_ids)
  return jax.jit(lambda params, batch: model.loss_fn(
      params, batch, None, direction_ids=ids, label_smoothing=label_smoothing,
      loss_chunk_length=loss_chunk_length))


def training_objective(model: models.TranslationModel, *, direction_ids: Sequence[int],
                       label_smoothing: float, loss_chunk_length: int = 0
                       ) -> Callable[..., tuple[jax.Array, dict]]:
  """The function the train step differentiates, of (params, microbatch, dropout_rng,
  direction_scales, objective_weight): the microbatch's objective over the whole batch's
  weight, and the microbatch's sums (`TranslationModel.loss_fn`). The dry run traces it
  too, for what its backward pass keeps."""
  ids = _direction_id_array(direction_ids)

  def loss_and_sums(params, microbatch, dropout_rng, direction_scales, objective_weight):
    sums = model.loss_fn(params, microbatch, dropout_rng, direction_ids=ids,
                         label_smoothing=label_smoothing, direction_scales=direction_scales,
                         loss_chunk_length=loss_chunk_length)
    return sums['objective_sum'] / objective_weight, sums

  return loss_and_sums


def make_train_step(model: models.TranslationModel, optimizer: optax.GradientTransformation, *,
                    direction_ids: Sequence[int], label_smoothing: float = 0.1,
                    num_microbatches: int = 1,
                    loss_chunk_length: int = 0) -> Callable[[TrainState, Batch, jax.Array],
                                                           tuple[TrainState, dict]]:
  """The (unjitted) train step: accumulate gradients, clip, AdamW update.

  On a frozen base (an optimizer state of `make_optimizer`'s multi_transform) the step
  differentiates the trained parameters (`trainable_mask`) alone, so the base costs no
  weight gradients, and returns the base's parameters as they came in.

  Returns new state and metrics: the loss sum and token count of the whole batch, the
  learning rate, the global gradient norm, and per-direction loss sums and token counts
  in the order of sorted `direction_ids`, and `nonfinite`: 1 where the loss or gradient
  norm was not finite and the update was skipped (its sums are then 0). `loss_chunk_length`
  > 0 computes the loss that many decoder positions at a time
  (`fused_loss.chunked_label_smoothed_objective`): the same loss and gradients without the
  [batch, length, vocab] logits.
  """
  ids = _direction_id_array(direction_ids)
  loss_and_sums = training_objective(model, direction_ids=direction_ids,
                                     label_smoothing=label_smoothing,
                                     loss_chunk_length=loss_chunk_length)

  def trained_loss_and_sums(trained, frozen, *arguments):
    return loss_and_sums(traverse_util.unflatten_dict({**trained, **frozen}), *arguments)

  def train_step(state: TrainState, batch: Batch, rng: jax.Array,
                 direction_scales: jax.Array | None = None):
    """`direction_scales`: per direction (sorted ids), the loss scale of DRO's
    reweighting variant; None trains on the plain token-mean loss."""
    # What is differentiated: every parameter, or on a frozen base the trained ones
    # ({path: leaf}, `_split_trained`), the base passed alongside.
    frozen_base = on_frozen_base(state.opt_state)
    if frozen_base:
      differentiated = lambda params: _split_trained(params)[0]
      grad_fn = lambda params, *arguments: jax.grad(trained_loss_and_sums, has_aux=True)(
          *_split_trained(params), *arguments)
    else:
      differentiated = lambda params: params
      grad_fn = jax.grad(loss_and_sums, has_aux=True)
    dropout_rng = jax.random.fold_in(rng, state.step)
    # The whole batch's weight, known before any microbatch runs: the loss is normalised
    # by it before differentiation, so the gradients need no pass of their own for it.
    objective_weight = jnp.maximum(
        models.objective_scales(batch, ids, direction_scales)[2].sum(), 1e-9)

    def microbatch_grads(index, microbatch):
      return grad_fn(state.params, microbatch, jax.random.fold_in(dropout_rng, index),
                     direction_scales, objective_weight)

    if num_microbatches == 1:
      grads, sums = microbatch_grads(0, batch)
    else:
      def accumulate(carry, index_and_microbatch):
        return jax.tree_util.tree_map(jnp.add, carry,
                                      microbatch_grads(*index_and_microbatch)), None

      zero_grads = jax.tree_util.tree_map(jnp.zeros_like, differentiated(state.params))
      zero_sums = {'loss_sum': jnp.zeros(()), 'tokens': jnp.zeros(()),
                   'direction_loss_sums': jnp.zeros(ids.shape),
                   'direction_tokens': jnp.zeros(ids.shape),
                   'objective_sum': jnp.zeros(()), 'objective_weight': jnp.zeros(())}
      (grads, sums), _ = jax.lax.scan(
          accumulate, (zero_grads, zero_sums),
          (jnp.arange(num_microbatches), _microbatches(batch, num_microbatches)))
    grad_norm = optax.tree.norm(grads)
    if frozen_base:  # Zeros for the base, which the optimizer ignores: XLA drops them.
      grads = traverse_util.unflatten_dict({
          **grads, **{path: jnp.zeros_like(leaf)
                      for path, leaf in _split_trained(state.params)[1].items()}})
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    if frozen_base:  # The base as it came in, bit for bit.
      params = traverse_util.unflatten_dict({**_split_trained(params)[0],
                                             **_split_trained(state.params)[1]})
    finite = jnp.isfinite(sums['objective_sum']) & jnp.isfinite(grad_norm)
    new_state = _unless_nonfinite(
        finite, TrainState(step=state.step + 1, params=params, opt_state=opt_state), state)
    # A skipped step's sums are zero: window means and DRO's averages leave it out.
    sums = jax.tree_util.tree_map(lambda x: jnp.where(finite, x, jnp.zeros_like(x)), sums)
    return new_state, dict(sums, grad_norm=grad_norm,
                           nonfinite=jnp.logical_not(finite).astype(jnp.int32))

  return train_step


def on_frozen_base(opt_state: Any) -> bool:
  """Whether `opt_state` is of `make_optimizer`'s multi_transform: a step that trains
  adapters or LoRA alone, on a frozen base."""
  return isinstance(opt_state, optax.MultiTransformState)


def differentiated_parameters(params: Any, opt_state: Any) -> tuple[dict, dict]:
  """({path: leaf} of the parameters the train step differentiates under `opt_state`,
  {path: leaf} of those it holds fixed): all and none, or on a frozen base the trained
  parameters and the base's."""
  if on_frozen_base(opt_state):
    return _split_trained(params)
  return traverse_util.flatten_dict(params), {}


def _split_trained(params: Any) -> tuple[dict, dict]:
  """({path: leaf} of the trained parameters, {path: leaf} of the frozen base's)."""
  flat = traverse_util.flatten_dict(params)
  trained = {path: leaf for path, leaf in flat.items()
             if parameter_layout.trains_on_frozen_base(path)}
  return trained, {path: leaf for path, leaf in flat.items() if path not in trained}


def _unless_nonfinite(finite: jax.Array, updated: TrainState, state: TrainState) -> TrainState:
  """`updated` if the step's loss and gradient norm are finite, else `state` unchanged:
  one bad batch (or an overflow) skips its update instead of turning every parameter
  into NaN, and the step counter (dropout's key, the optimizer's schedule count) does not
  move, so the run goes on exactly as without that batch."""
  return jax.tree_util.tree_map(lambda new, old: jnp.where(finite, new, old), updated, state)


def check_microbatches(batch_size: int, num_microbatches: int, data_parallel: int) -> None:
  """Each microbatch must still split evenly over the data-parallel devices."""
  if num_microbatches < 1 or batch_size % (num_microbatches * data_parallel):
    raise UserError(f'NUM_MICROBATCHES: BATCH_SIZE {batch_size} must be divisible by '
                    f'NUM_MICROBATCHES ({num_microbatches}) x data-parallel devices '
                    f'({data_parallel})')


def sharded_train_step(train_step, state_shardings, mesh):
  """The step jitted with explicit shardings, the input state's buffers donated: call or
  lower it under `partitioning.activation_sharding` (`--dry_run --topology` lowers it)."""
  batch_sharding = partitioning.batch_sharding(mesh)
  replicated = partitioning.replicated(mesh)
  return jax.jit(train_step,
                 in_shardings=(state_shardings, batch_sharding, replicated, replicated),
                 out_shardings=(state_shardings, replicated), donate_argnums=(0,))


def jit_train_step(train_step, state_shardings, mesh, rules):
  """Compiles the step (`sharded_train_step`) to run under the mesh and rules.

  The step compiles at its first call, and the processes of a multi-process run wait for
  each other once it has (`processes.wait_for_all`), so none starts its collectives long
  before another.
  """
  jitted = sharded_train_step(train_step, state_shardings, mesh)
  compiled = {}

  def step(state, batch, rng, direction_scales=None):
    arguments = (state, batch, rng, direction_scales)
    with partitioning.activation_sharding(mesh, rules):
      if not compiled:
        compiled['step'] = jitted.lower(*arguments).compile()
        processes.wait_for_all('train step compiled')
      return compiled['step'](*arguments)

  return step


def summarize_metrics(metric_sums: dict, direction_names: Sequence[str]) -> dict[str, Any]:
  """Host-side figures from summed step metrics: mean loss, tokens, and each direction's
  loss and target tokens (`tokens/<direction>`, from which a run's epochs are counted)."""
  metric_sums = jax.device_get(metric_sums)
  tokens = float(metric_sums['tokens'])
  # NaN when every step of the window was skipped (non-finite): logged as null.
  summary = {'loss': float(metric_sums['loss_sum']) / tokens if tokens else float('nan'),
             'tokens': tokens}
  for name, loss_sum, count in zip(direction_names,
                                   np.asarray(metric_sums['direction_loss_sums']),
                                   np.asarray(metric_sums['direction_tokens'])):
    if count > 0:
      summary[f'loss/{name}'] = float(loss_sum) / float(count)
      summary[f'tokens/{name}'] = float(count)
  return summary
