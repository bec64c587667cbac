"""`TranslationModel`: what training, scoring and translation need of the Transformer.

The Flax modules (`network`) compute; this class knows how they are used: the batch's
model inputs, the label-smoothed loss and its per-direction sums, a sentence's
log-likelihood, and the encoder and decoder steps over the decoding cache
(`decode_cache`) that `prediction` searches with. Its users (the train step, DRO
baselines, the Translator) see parameters and batches of arrays, never parameter paths
(`parameter_layout`) or the cache.
"""

import dataclasses
import functools
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.model import adapters
from t5x_mt.model import decode_cache
from t5x_mt.model import losses
from t5x_mt.model import network
from t5x_mt.model import parameter_layout
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.model import fused_loss

Array = jax.Array
Batch = dict[str, Array]

# Model inputs that a packed batch from DirectionEncDecFeatureConverter carries.
MODEL_INPUTS = ('encoder_input_tokens', 'decoder_input_tokens', 'decoder_target_tokens',
                'encoder_segment_ids', 'decoder_segment_ids', 'encoder_positions',
                'decoder_positions', 'decoder_direction_ids')

def dummy_batch(batch_size: int, encoder_length: int, decoder_length: int) -> Batch:
  """An all-padding batch with the shapes and dtypes of real ones, for initialisation."""
  shapes = {name: (batch_size, decoder_length if name.startswith('decoder') else encoder_length)
            for name in MODEL_INPUTS}
  return {name: jnp.ones(shape, jnp.int32) for name, shape in shapes.items()}


def model_kwargs(batch: Batch) -> dict[str, Array]:
  """The subset of a batch the model takes, tolerating unpacked batches."""
  return {name: batch[name] for name in MODEL_INPUTS if name in batch}


def abstract_variables(config: network.TransformerConfig) -> dict[str, Any]:
  """Shapes and dtypes (jax.ShapeDtypeStruct, boxed with logical axis names) of all
  variables of `Transformer(config)`, computed with `jax.eval_shape`: nothing is allocated.

  Each call gets containers of its own (callers may edit them); the tracing behind them is
  done once per config, since every load of a run and every import asks again."""
  return jax.tree.map(lambda leaf: leaf, _traced_abstract_variables(config))


@functools.lru_cache(maxsize=16)
def _traced_abstract_variables(config: network.TransformerConfig) -> dict[str, Any]:
  module = network.Transformer(config)
  tokens = jax.ShapeDtypeStruct((1, 1), jnp.int32)
  return jax.eval_shape(lambda rng, t: module.init(rng, t, t, t), jax.random.key(0), tokens)


def count_params(config: network.TransformerConfig) -> int:
  """Number of trainable parameters of `Transformer(config)`, without allocating any."""
  params = nn.meta.unbox(abstract_variables(config)['params'])
  return int(sum(np.prod(leaf.shape, dtype=np.int64) for leaf in jax.tree.leaves(params)))


def objective_scales(batch: Batch, direction_ids: Array, direction_scales: Array | None
                     ) -> tuple[Array, Array | None, Array]:
  """(loss weights, direction scales per token or None, their product): each token's
  weight in the objective the gradient follows."""
  weights = batch['decoder_loss_weights'].astype(jnp.float32)
  if direction_scales is None:
    return weights, None, weights
  token_scales = losses.direction_token_scales(batch['decoder_direction_ids'], direction_ids,
                                               direction_scales)
  return weights, token_scales, weights * token_scales


class TranslationModel:
  """A `network.Transformer` of `config` with its loss, its scores, and the steps of its
  search (a `prediction.StepwiseModel`).

  Parameters are in the layout of `config.scan_layers`; decoding caches keys and values
  per layer, so it runs the unrolled stack on parameters converted inside its program.
  """

  def __init__(self, config: network.TransformerConfig):
    # Checked here, where the vocabulary is known: gin binds the rest of the config first.
    if config.decoder_start_token >= config.vocab_size:
      raise UserError(f'network.TransformerConfig.decoder_start_token: '
                      f'{config.decoder_start_token} is no token of the {config.vocab_size} '
                      'the model embeds')
    self.config = config
    self.module = network.Transformer(config)
    self._decoding_module = self.module
    if config.scan_layers:
      self._decoding_module = network.Transformer(
          dataclasses.replace(config, scan_layers=False))
    self.vocab_size = config.vocab_size
    self.max_length = config.max_length
    self._hash = hash(config)

  # Models of one config compute the same functions: comparing and hashing them by it lets
  # jitted programs that take the model as a static argument (the encoder below, the
  # searches) reuse their traces across every load of runs of one architecture.
  def __eq__(self, other: Any) -> bool:
    return type(other) is type(self) and other.config == self.config

  def __hash__(self) -> int:
    return self._hash

  # prediction.StepwiseModel: the decoder's step gives logits.
  step_gives_scores = False

  def check_direction(self, direction: Direction, command: str) -> None:
    """A UserError naming `command` if the model has adapters and none for `direction`."""
    if self.config.adapter_keys:
      adapters.check_directions([direction], self.config.adapter_by,
                                self.config.adapter_keys, command)

  def init(self, rng: Array, encoder_length: int, decoder_length: int) -> Any:
    """Fresh parameters (boxed with logical axis names; see partitioning.shard_init)."""
    batch = dummy_batch(1, encoder_length, decoder_length)
    return self.module.init(rng, **model_kwargs(batch), enable_dropout=False)['params']

  def loss_fn(self, params: Any, batch: Batch, dropout_rng: Array | None, *,
              direction_ids: Array, label_smoothing: float,
              direction_scales: Array | None = None,
              loss_chunk_length: int = 0) -> dict[str, Array]:
    """Loss sum, token count and per-direction sums of a batch; dropout iff a key is given.

    The objective the gradient follows is the loss sum, or with `direction_scales` (one
    per id in `direction_ids`, sorted) each token's loss times its direction's scale,
    normalised by the equally scaled token count (`objective_sum` / `objective_weight`).
    The reported sums stay unscaled, so logged losses mean the same with and without
    scales. With `loss_chunk_length` the loss comes from the decoder's states through
    `fused_loss.chunked_label_smoothed_objective`, never holding all the logits.
    """
    weights, token_scales, scales = objective_scales(batch, direction_ids, direction_scales)
    kwargs = dict(enable_dropout=dropout_rng is not None,
                  rngs={} if dropout_rng is None else {'dropout': dropout_rng})
    targets = batch['decoder_target_tokens']
    if loss_chunk_length and self.config.logits_bias:
      raise UserError('loss_chunk_length: the chunked loss has no logits bias; train a model '
                      'with network.TransformerConfig.logits_bias without it')
    if loss_chunk_length:
      hidden = self.module.apply({'params': params}, **model_kwargs(batch),
                                 return_hidden=True, **kwargs)
      projection, vocab_major = parameter_layout.output_projection(self.config, params)
      objective_sum, raw_loss = fused_loss.chunked_label_smoothed_objective(
          hidden, projection, targets, scales, label_smoothing,
          parameter_layout.logit_scale(self.config), vocab_major,
          loss_chunk_length)
      token_loss = raw_loss * weights
    else:
      logits = self.module.apply({'params': params}, **model_kwargs(batch), **kwargs)
      token_loss = losses.label_smoothed_cross_entropy(logits, targets, weights,
                                                       label_smoothing)
      objective_sum = jnp.sum(token_loss if token_scales is None else token_loss * token_scales)
    direction_loss, direction_tokens = losses.direction_sums(
        token_loss, weights, batch['decoder_direction_ids'], direction_ids)
    return {'loss_sum': token_loss.sum(), 'tokens': weights.sum(),
            'direction_loss_sums': direction_loss, 'direction_tokens': direction_tokens,
            'objective_sum': objective_sum, 'objective_weight': scales.sum()}

  def score_batch(self, params: Any, batch: Batch) -> Array:
    """Each row's log-likelihood [B] of its targets, teacher-forced without dropout: the
    sum of log p(token) over the targets' weighted tokens (`decoder_loss_weights`, or
    every non-padding token without them)."""
    targets = batch['decoder_target_tokens']
    weights = batch.get('decoder_loss_weights', targets > 0).astype(jnp.float32)
    logits = self.module.apply({'params': params}, **model_kwargs(batch))
    token_loss = losses.label_smoothed_cross_entropy(logits, targets, weights, 0.0)
    return -token_loss.sum(axis=-1)

  @functools.partial(jax.jit, static_argnums=0, static_argnames=('padded_length',))
  def encode(self, params, encoder_tokens, direction, *, padded_length: int):
    """prediction.StepwiseModel's encoder, compiled once per length: the encoder's output for a batch of tokens cut to its longest input, zero-padded
    to `padded_length` positions (the search's bucket; padding is masked there). The
    model runs in its own layout, so scanned layers compile once whatever the depth."""
    if self.config.decoder_only:
      raise UserError('the run is a language model (network.TransformerConfig.decoder_only):'
                      ' it scores sentences and translates none')
    encoded = self.module.apply({'params': params}, encoder_tokens,
                                encoder_direction_ids=direction[:, None],
                                method=network.Transformer.encode)
    return jnp.pad(encoded, ((0, 0), (0, padded_length - encoder_tokens.shape[1]), (0, 0)))

  def start_decoding(self, params: Any, encoded: Array, encoder_tokens: Array,
                     direction: Array, cache_length: int
                     ) -> tuple[decode_cache.TokensToLogits, decode_cache.Cache]:
    """(the decoder's step, its first cache) for `prediction.predict_batch`: the
    cross-attention keys and values are projected here, once, and stay in the step's
    closure (every hypothesis of an example reads them; the search neither repeats nor
    reorders them). Decoding runs the unrolled stack."""
    if self.config.scan_layers:
      params = parameter_layout.to_unrolled(params)
    module = self._decoding_module
    cross_attention, cache = decode_cache.split_fixed(decode_cache.init(
        module, params, encoded, encoder_tokens, cache_length))

    def step(tokens, model_cache):
      hypotheses_direction = jnp.repeat(direction, tokens.shape[0] // direction.shape[0])
      logits, variables = module.apply(
          {'params': params, 'cache': decode_cache.merge(cross_attention, model_cache)},
          encoded, encoder_tokens, tokens, tokens, decode=True, mutable=['cache'],
          decoder_direction_ids=hypotheses_direction[:, None],
          method=network.Transformer.decode)
      return logits[:, -1, :], decode_cache.split_fixed(variables['cache'])[1]

    return step, cache

  @staticmethod
  def expand_cache(cache: decode_cache.Cache, beam_size: int) -> decode_cache.Cache:
    return decode_cache.expand(cache, beam_size)

  @staticmethod
  def extend_cache(cache: decode_cache.Cache, length: int) -> decode_cache.Cache:
    return decode_cache.extend(cache, length)
