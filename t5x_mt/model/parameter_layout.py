"""Where the Transformer keeps its parameters, for every module that reads them by path.

`network` builds its modules under these names; training, fine-tuning, adapters, the dry
run, FLOP counts, checkpoints and the CTranslate2 exporter ask this module instead of
spelling paths themselves, so a renamed module or a new architecture changes one place.

Layout of a parameter tree (unrolled):
  shared_embedding/embedding        the decoder's input table (and, tied, its output)
  encoder_embedding/embedding       only when the encoder's table is not shared
  {encoder,decoder}/layers_<i>/...  one layer: a module per sublayer (`SUBLAYER_MODULES`)
                                    and its norm (`layer_norm_names`)
  {encoder,decoder}/adapters_<i>    adapters after layer i (`adapter_name`)
  {encoder,decoder}/posembed        a learned absolute position table (`POSITION_TABLE`)
  {encoder,decoder}/<final norm>    where the norm placement ends a stack in one (pre-LN):
                                    `FINAL_NORMS`
  decoder/logits_dense/kernel       the output projection when it is not tied
  decoder/logits_bias               a bias on the logits (`logits_bias`)
Scanned stacks (`TransformerConfig.scan_layers`) hold the layers as [layers, ...] arrays
under {encoder,decoder}/layers/layer (and layers/adapters_stacked); `to_scanned` and
`to_unrolled` convert between the two. A language model (`TransformerConfig.decoder_only`)
has no encoder/ and no cross-attention (or its norm) in its decoder's layers.
"""

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.model import norm_placements


STACKS = ('encoder', 'decoder')
SCANNED_LAYERS = 'layers'  # encoder/layers, decoder/layers: the scanned stacks.
SCANNED_LAYER = 'layer'
# Adapters (t5x_mt.model.adapters) after layer i: every parameter under a name with this prefix.
ADAPTER_PREFIX = 'adapters_'
SCANNED_ADAPTERS = ADAPTER_PREFIX + 'stacked'
UNROLLED_LAYER_PREFIX = 'layers_'
DECODER_EMBEDDING = 'shared_embedding'
ENCODER_EMBEDDING = 'encoder_embedding'
POSITION_EMBEDDING = 'posembed'
OUTPUT_PROJECTION = 'logits_dense'
LOGITS_BIAS = 'logits_bias'  # decoder/logits_bias [vocab], where the model has one.
FINAL_NORMS = {'encoder': 'encoder_norm', 'decoder': 'decoder_norm'}
# The sublayers of a layer of each stack, in order, and their attention modules.
SUBLAYERS = {'encoder': ('attention', 'mlp'),
             'decoder': ('self_attention', 'cross_attention', 'mlp')}
ATTENTION_MODULES = {'attention': 'attention', 'self_attention': 'self_attention',
                     'cross_attention': 'encoder_decoder_attention'}
RELATIVE_KEYS = 'relative_keys'      # [2k + 1, head_dim] in a self-attention module.
RELATIVE_VALUES = 'relative_values'
MLP = 'mlp'
SUBLAYER_MODULES = {**ATTENTION_MODULES, 'mlp': MLP}
# Inside an attention module: its projections [embed, heads, head_dim] and its output
# [heads, head_dim, embed]; inside the MLP: [embed, mlp] then [mlp, embed].
ATTENTION_PROJECTIONS = ('query', 'key', 'value')
ATTENTION_OUTPUT = 'out'
MLP_INPUT = 'wi'
MLP_OUTPUT = 'wo'
# The leaves: of a dense layer, of a norm, of a token and a learned position table.
KERNEL = 'kernel'
# LoRA's matrices beside a dense layer's kernel (t5x_mt.model.lora).
LORA_A = 'lora_a'
LORA_B = 'lora_b'
BIAS = 'bias'
NORM_SCALE = 'scale'
EMBEDDING_TABLE = 'embedding'
POSITION_TABLE = 'pos_embedding'


def _names(path: Any) -> list[str]:
  """A parameter path (a jax tree path or names from the root) as its module and
  parameter names; the attributes of a box around a leaf (`nn.Partitioned.value`) are
  not names."""
  return [str(entry.key) if hasattr(entry, 'key') else entry for entry in path
          if isinstance(entry, str) or hasattr(entry, 'key')]


def is_adapter_path(path: Any) -> bool:
  """Whether the parameter at `path` lies in an adapter module."""
  return any(name.startswith(ADAPTER_PREFIX) for name in _names(path))


def is_lora_path(path: Any) -> bool:
  """Whether the parameter at `path` is one of LoRA's matrices."""
  return bool(path) and _names(path)[-1] in (LORA_A, LORA_B)


def trains_on_frozen_base(path: Any) -> bool:
  """Whether the parameter at `path` is one that trains on a frozen base (an adapter's or
  LoRA's): what such a run updates, and what its checkpoints hold."""
  return is_adapter_path(path) or is_lora_path(path)


def layer_name(index: int) -> str:
  """The unrolled name of layer `index` of a stack."""
  return f'{UNROLLED_LAYER_PREFIX}{index}'


def adapter_name(index: int) -> str:
  """The unrolled name of the adapters after layer `index`."""
  return f'{ADAPTER_PREFIX}{index}'


def layer_norm_name(sublayer: str, placement: str) -> str:
  """The norm of `sublayer` under the norm placement `placement` (a name in
  `t5x_mt.model.norm_placements`): '<prefix>_<sublayer>_norm', the prefix saying where it
  sits (before the sublayer, or after its residual sum)."""
  return f'{norm_placements.get(placement).norm_prefix}_{sublayer}_norm'


def layer_norm_names(stack: str, placement: str) -> tuple[str, ...]:
  """The norms of a layer of `stack`, one per sublayer in order (`layer_norm_name`)."""
  return tuple(layer_norm_name(sublayer, placement) for sublayer in SUBLAYERS[stack])


def has_final_norm(placement: str) -> bool:
  """Whether each stack ends in a norm of its own (`FINAL_NORMS`) under the norm placement
  `placement`: pre-LN stacks, whose layers leave their output unnormalised."""
  return norm_placements.get(placement).final_norm


def encoder_embedding_name(shared: bool) -> str:
  return DECODER_EMBEDDING if shared else ENCODER_EMBEDDING


def logit_scale(config: Any) -> float:
  """What the decoder's states times the output projection are multiplied by: 1/sqrt(d)
  for the tied embedding (its N(0, 1) rows would otherwise give logits of variance d, as
  in T5X), 1 for a projection of its own or where the inputs scale the embedding up
  instead (`scale_embeddings`, fairseq's convention)."""
  if config.logits_via_embedding and not config.scale_embeddings:
    return 1.0 / float(np.sqrt(config.emb_dim))
  return 1.0


def output_projection(config: Any, params: Any) -> tuple[Any, bool]:
  """(projection, vocab-major): the tied embedding [vocab, embed] or `logits_dense`'s
  kernel [embed, vocab]; logits = states . projection * `logit_scale`."""
  if config.logits_via_embedding:
    return params[DECODER_EMBEDDING][EMBEDDING_TABLE], True
  return params['decoder'][OUTPUT_PROJECTION][KERNEL], False


def stack_depth(params: Any, stack: str) -> int:
  """The number of layers of `stack` in either layout."""
  side = params[stack]
  if SCANNED_LAYERS in side:
    return jax.tree.leaves(side[SCANNED_LAYERS][SCANNED_LAYER])[0].shape[0]
  return sum(1 for name in side if name.startswith(UNROLLED_LAYER_PREFIX))


def stacks_of(params: Any) -> tuple[str, ...]:
  """The stacks `params` hold: both, or a language model's decoder alone."""
  return tuple(stack for stack in STACKS if stack in params)


def is_scanned(params: Any) -> bool:
  """Whether `params` are in the scanned layout (`to_scanned`)."""
  return SCANNED_LAYERS in params['decoder']


def is_scanned_path(path: tuple[str, ...]) -> bool:
  """Whether a parameter path (names from the root) lies in a scanned stack."""
  return len(path) > 1 and path[0] in STACKS and path[1] == SCANNED_LAYERS


def to_scanned(params: Any) -> Any:
  """Unrolled parameters (`layers_<i>`, `adapters_<i>`) in the layout of scan_layers=True:
  each stack's layers (and adapters) stacked on a leading axis."""
  params = dict(params)
  for stack in stacks_of(params):
    side = dict(params[stack])
    depth = stack_depth(params, stack)
    scanned = {SCANNED_LAYER: [side.pop(layer_name(i)) for i in range(depth)]}
    if adapter_name(0) in side:
      scanned[SCANNED_ADAPTERS] = [side.pop(adapter_name(i))
                                   for i in range(depth)]
    side[SCANNED_LAYERS] = {
        name: jax.tree.map(lambda *leaves: jnp.stack(leaves), *stacked)
        for name, stacked in scanned.items()}
    params[stack] = side
  return params


def to_unrolled(params: Any) -> Any:
  """The inverse of `to_scanned`: scanned parameters in the unrolled layout."""
  params = dict(params)
  for stack in stacks_of(params):
    side = dict(params[stack])
    depth = stack_depth(params, stack)
    scanned = side.pop(SCANNED_LAYERS)
    for i in range(depth):
      for name, unrolled in ((SCANNED_LAYER, layer_name(i)),
                             (SCANNED_ADAPTERS, adapter_name(i))):
        if name in scanned:
          side[unrolled] = jax.tree.map(lambda leaf, i=i: leaf[i], scanned[name])
    params[stack] = side
  return params


def convert_layout(params: Any, scanned: bool) -> Any:
  """`params` in the scanned (True) or unrolled layout, whichever they are in now."""
  if is_scanned(params) == scanned:
    return params
  return to_scanned(params) if scanned else to_unrolled(params)
