"""LoRA: low-rank updates of a frozen model's dense layers (Hu et al., 2021; docs/lora.md).

A targeted dense layer y = x W + b computes y = x W + b + (alpha / rank) (dropout(x) A) B,
with A [inputs..., rank] and B [rank, outputs...]. B starts at zero, so a model with LoRA
added starts from the outputs of the model without. Only A and B train: the base stays
bit-identical and has no optimizer state, and a run started from another
(`training.TrainConfig.init_from`) checkpoints A and B alone with a reference to that base
(`t5x_mt.runs.checkpoints`). `merged` folds A B into W, for an export or a faster decoder.

Targets name the dense layers LoRA goes into, as paths STACK/SUBLAYER/PROJECTION
(`module_paths`: 'encoder/attention/query', 'decoder/encoder_decoder_attention/out',
'decoder/mlp/wi'): a target is such a path, or its last one or two parts ('value' in every
sublayer of both stacks, 'decoder/wo' in the decoder's MLP), each part an fnmatch pattern.
"""

import dataclasses
import fnmatch
import math
from typing import Any

from flax import traverse_util
import jax
import jax.numpy as jnp

from t5x_mt.core import validation
from t5x_mt.core.errors import UserError
from t5x_mt.model import parameter_layout

LORA_A = parameter_layout.LORA_A
LORA_B = parameter_layout.LORA_B
# Every dense projection of attention and of the MLP: Dettmers et al. (QLoRA) found LoRA
# on all of them needed to match full fine-tuning, where query and value alone fall short.
ALL_PROJECTIONS = (*parameter_layout.ATTENTION_PROJECTIONS, parameter_layout.ATTENTION_OUTPUT,
                   parameter_layout.MLP_INPUT, parameter_layout.MLP_OUTPUT)
SETTING = 'network.TransformerConfig.lora_targets (LORA_TARGETS)'


@dataclasses.dataclass(frozen=True)
class LoraSettings:
  """One dense layer's LoRA: its rank, the scale alpha / rank, the dropout on its input."""
  rank: int
  alpha: float
  dropout_rate: float = 0.0

  @property
  def scale(self) -> float:
    return self.alpha / self.rank


def module_paths(config: Any) -> list[str]:
  """'STACK/SUBLAYER/PROJECTION' of every dense layer a target may name, in `config`'s
  model (a language model has no encoder and no cross-attention)."""
  paths = []
  for stack in parameter_layout.STACKS:
    if stack == 'encoder' and config.decoder_only:
      continue
    for sublayer in parameter_layout.SUBLAYERS[stack]:
      if sublayer == 'cross_attention' and config.decoder_only:
        continue
      module = parameter_layout.SUBLAYER_MODULES[sublayer]
      projections = ((parameter_layout.MLP_INPUT, parameter_layout.MLP_OUTPUT)
                     if module == parameter_layout.MLP else
                     (*parameter_layout.ATTENTION_PROJECTIONS, parameter_layout.ATTENTION_OUTPUT))
      paths += [f'{stack}/{module}/{projection}' for projection in projections]
  return paths


def _matches(target: str, path: str) -> bool:
  """Whether `target` (1 to 3 trailing parts, fnmatch patterns) names `path`."""
  wanted, parts = target.split('/'), path.split('/')
  if len(wanted) == 2:
    wanted = [wanted[0], '*', wanted[1]]
  return len(wanted) <= 3 and all(
      fnmatch.fnmatchcase(part, pattern) for part, pattern in zip(parts[-len(wanted):], wanted))


def settings_for(config: Any, stack: str, module: str,
                 projection: str) -> LoraSettings | None:
  """The LoRA of the dense layer `projection` of `module` in `stack`, None where `config`
  puts none there."""
  path = f'{stack}/{module}/{projection}'
  if not config.lora_rank or not any(_matches(t, path) for t in config.lora_targets):
    return None
  return LoraSettings(config.lora_rank, config.lora_alpha, config.lora_dropout)


def check_config(config: Any) -> None:
  """UserError for a LoRA setting that cannot hold: a target naming no module, a rank
  larger than a targeted layer's smaller side, an alpha or dropout out of range."""
  validation.integer('network.TransformerConfig.lora_rank (LORA_RANK)', config.lora_rank,
                     minimum=0)
  if not config.lora_rank:
    return
  validation.number('network.TransformerConfig.lora_alpha (LORA_ALPHA)', config.lora_alpha,
                    above=0.0)
  validation.number('network.TransformerConfig.lora_dropout (LORA_DROPOUT)',
                    config.lora_dropout, at_least=0.0, below=1.0)
  paths = module_paths(config)
  if not config.lora_targets:
    raise UserError(f'{SETTING}: empty; name the layers LoRA goes into, e.g. {ALL_PROJECTIONS}')
  for target in config.lora_targets:
    if not any(_matches(target, path) for path in paths):
      raise UserError(f'{SETTING}: {target!r} matches no module of this model; its modules '
                      f'are {", ".join(paths)}')
  for path in paths:
    if not any(_matches(target, path) for target in config.lora_targets):
      continue
    side = min(_dense_sides(config, *path.split('/')))
    if config.lora_rank > side:
      raise UserError(f'network.TransformerConfig.lora_rank (LORA_RANK): {config.lora_rank} is '
                      f'larger than {path}, whose smaller side is {side}')


def _dense_sides(config: Any, stack: str, module: str, projection: str) -> tuple[int, int]:
  """(inputs, outputs) of a dense layer, each side's axes multiplied out."""
  attention = config.num_heads * config.head_dim
  if module == parameter_layout.MLP:
    width = config.mlp_dim_of(stack)
    return ((config.emb_dim, width) if projection == parameter_layout.MLP_INPUT
            else (width, config.emb_dim))
  if projection == parameter_layout.ATTENTION_OUTPUT:
    return attention, config.emb_dim
  return config.emb_dim, attention


def delta(kernel: jax.Array, lora_a: jax.Array, lora_b: jax.Array, scale: float) -> jax.Array:
  """scale * A B in `kernel`'s shape, over any leading axes A, B and the kernel share
  (the stacked layers of a scanned stack)."""
  leading = lora_a.ndim + lora_b.ndim - 2 - kernel.ndim
  inputs = lora_a.shape[leading:-1]
  outputs = lora_b.shape[leading + 1:]
  lead = lora_a.shape[:leading]
  a = lora_a.reshape(lead + (math.prod(inputs), lora_a.shape[-1])).astype(jnp.float32)
  b = lora_b.reshape(lead + (lora_b.shape[leading], math.prod(outputs))).astype(jnp.float32)
  product = jnp.einsum('...ir,...ro->...io', a, b, precision=jax.lax.Precision.HIGHEST)
  return (scale * product).reshape(kernel.shape)


def merged(params: Any, config: Any) -> Any:
  """`params` of the model `config` describes with every LoRA folded into its kernel
  (W + alpha / rank A B) and the matrices dropped: the parameters of `without_lora(config)`."""
  scale = config.lora_alpha / config.lora_rank
  flat = traverse_util.flatten_dict(params)
  out = {}
  for path, value in flat.items():
    if parameter_layout.is_lora_path(path):
      continue
    lora_a = flat.get(path[:-1] + (LORA_A,))
    if path[-1] == parameter_layout.KERNEL and lora_a is not None:
      update = delta(value, lora_a, flat[path[:-1] + (LORA_B,)], scale)
      value = (value.astype(jnp.float32) + update).astype(value.dtype)
    out[path] = value
  return traverse_util.unflatten_dict(out)


def without_lora(config: Any) -> Any:
  """`config` with LoRA off: the model `merged` parameters belong to."""
  return dataclasses.replace(config, lora_rank=0)


def counts(params: Any) -> tuple[int, int]:
  """(LoRA parameters, all parameters) of a tree of arrays or shapes."""
  lora = total = 0
  for path, leaf in traverse_util.flatten_dict(params).items():
    size = math.prod(leaf.shape)
    total += size
    lora += size if parameter_layout.is_lora_path(path) else 0
  return lora, total
