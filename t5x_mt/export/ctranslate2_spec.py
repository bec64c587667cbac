"""The model as CTranslate2's `TransformerSpec`: the same architecture, the same weights.

CTranslate2 runs encoder-decoder Transformers on CPUs, in float32 or with int8 weights; its
`TransformerSpec` is the description its own converters fill. Each choice of
`network.TransformerConfig` maps to one it computes exactly:
- the norm placement and each stack's position embedding give the spec settings that
  describe them (`ctranslate2_settings`: pre-LN's norms before each sublayer and a final
  norm per stack are `pre_norm`; post-LN's after each residual sum, no final norm), or the
  reason CTranslate2 cannot compute them (`ctranslate2_refusal`). LayerNorm's epsilon is
  ours.
- absolute positions, learned or fixed, go in as tables from the row of the first
  position on (CTranslate2's own sinusoids count positions from 1); embeddings are
  multiplied by sqrt(d) where ours are (`scale_embeddings`), and the decoder starts from
  our start token.
- Shaw's relative positions are CTranslate2's `relative_position` tables: 2k + 1 rows
  shared across heads, picked by key position minus query position clipped to [-k, k],
  q . a / sqrt(head_dim) added to the logits and sum_j p_ij a_ij to the output. A stack
  with them has no absolute positions, as ours; each stack is configured on its own, so
  relative tables in the encoder alone leave the decoder its sinusoids. Key tables alone
  (`relative_values=False`) get a zero value table, which adds nothing.
- a separate encoder embedding, a head width of its own (`head_dim`), and the output
  projection: the tied embedding with `logit_scale` (CTranslate2's `scale_outputs`) or
  `logits_dense`, and the logits' bias where the model has one.
The vocabulary is the SentencePiece model's pieces: embedding rows past it
(`run_vocabulary.padded_vocab_size`) are left out, as the search never generates them.

A model CTranslate2 cannot compute is refused in one line (`check_exportable`), never
converted approximately; a parameter the spec has no place for is refused too.
"""

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import flax
import numpy as np
from ctranslate2.specs import common_spec
from ctranslate2.specs import transformer_spec

from t5x_mt.model import network
from t5x_mt.model import position_embeddings
from t5x_mt.model import parameter_layout as layout
from t5x_mt.data import vocab
from t5x_mt.core.errors import UserError

ACTIVATIONS = {'relu': common_spec.Activation.RELU, 'gelu': common_spec.Activation.GELU,
               'swish': common_spec.Activation.SWISH}
# Each of our sublayers in CTranslate2's layer spec.
SUBLAYER_SPECS = {'attention': 'self_attention', 'self_attention': 'self_attention',
                  'cross_attention': 'attention', 'mlp': 'ffn'}


def check_exportable(config: network.TransformerConfig) -> None:
  """A UserError naming --checkpoint_dir when CTranslate2 cannot compute the model
  exactly."""
  flag = '--checkpoint_dir'
  for setting, variant in (('layer_norm', config.norm_placement), (
      'position_embedding', position_embeddings.get(config.position_embedding))):
    if variant.ctranslate2_refusal:
      raise UserError(f'{flag}: {setting}={variant.name!r} has no CTranslate2 form: '
                      f'{variant.ctranslate2_refusal}')
  if config.adapter_keys:
    raise UserError(f'{flag}: the model has adapters (by {config.adapter_by}: '
                    f'{", ".join(config.adapter_keys)}), which CTranslate2 has no modules '
                    'for')
  if not config.num_encoder_layers or not config.num_decoder_layers:
    raise UserError(f'{flag}: CTranslate2 needs a layer in each stack; the model has '
                    f'{config.num_encoder_layers} encoder and {config.num_decoder_layers} '
                    'decoder layers')


class _Parameters(Mapping):
  """A parameter tree whose leaves come out as float32 numpy arrays, each path recorded
  when read, so that a parameter the spec never took is noticed."""

  def __init__(self, tree: Mapping, path: tuple[str, ...] = (), read: set | None = None):
    self._tree, self._path = tree, path
    self.read = set() if read is None else read

  def __getitem__(self, name: str) -> Any:
    value, path = self._tree[name], self._path + (name,)
    if isinstance(value, Mapping):
      return _Parameters(value, path, self.read)
    self.read.add(path)
    return np.array(value, np.float32)  # A copy: quantization rewrites it in place.

  def __iter__(self) -> Iterator[str]:
    return iter(self._tree)

  def __len__(self) -> int:
    return len(self._tree)


def _linear(spec: common_spec.LinearSpec, dense: Mapping, num_input_axes: int = 1) -> None:
  """Our DenseGeneral [in..., out...] as CTranslate2's [out, in] weight and its bias."""
  _fused(spec, [dense], num_input_axes)


def _fused(spec: common_spec.LinearSpec, denses: Sequence[Mapping],
           num_input_axes: int = 1) -> None:
  """Several of our DenseGenerals of one input as one linear layer, outputs stacked."""
  weights, biases = [], []
  for dense in denses:
    kernel = dense[layout.KERNEL]
    inputs = int(np.prod(kernel.shape[:num_input_axes]))
    weights.append(kernel.reshape(inputs, -1).T)
    biases.append(dense[layout.BIAS].reshape(-1))
  spec.weight = np.ascontiguousarray(np.concatenate(weights))
  spec.bias = np.concatenate(biases)


def _norm(spec: common_spec.LayerNormSpec, norm: Mapping) -> None:
  spec.gamma = norm[layout.NORM_SCALE]
  spec.beta = norm[layout.BIAS]


def _attention(spec, module: Mapping, cross: bool, relative_values: bool) -> None:
  """Self-attention: fused query/key/value, output. Cross-attention: query, fused
  key/value (of the encoder's output), output. Relative tables where the spec has them."""
  query, key, value = (module[name] for name in layout.ATTENTION_PROJECTIONS)
  projections = [[query], [key, value]] if cross else [[query, key, value]]
  for linear, denses in zip(spec.linear, projections):
    _fused(linear, denses)
  _linear(spec.linear[-1], module[layout.ATTENTION_OUTPUT], num_input_axes=2)
  if hasattr(spec, 'relative_position_keys'):
    keys = module[layout.RELATIVE_KEYS]
    spec.relative_position_keys = keys
    spec.relative_position_values = (module[layout.RELATIVE_VALUES] if relative_values
                                     else np.zeros_like(keys))


def _mlp(spec: transformer_spec.FeedForwardSpec, module: Mapping) -> None:
  _linear(spec.linear_0, module[layout.MLP_INPUT])
  _linear(spec.linear_1, module[layout.MLP_OUTPUT])


def _fill_layers(stack_spec, config: network.TransformerConfig, params: Mapping,
                 stack: str) -> None:
  """Every layer of `stack`: each sublayer's module and the norm that goes with it."""
  norms = layout.layer_norm_names(stack, config.layer_norm)
  for index, layer_spec in enumerate(stack_spec.layer):
    layer = params[stack][layout.layer_name(index)]
    for sublayer, norm in zip(layout.SUBLAYERS[stack], norms):
      spec = getattr(layer_spec, SUBLAYER_SPECS[sublayer])
      _norm(spec.layer_norm, layer[norm])
      module = layer[layout.SUBLAYER_MODULES[sublayer]]
      if sublayer == layout.MLP:
        _mlp(spec, module)
      else:
        _attention(spec, module, cross=sublayer == 'cross_attention',
                   relative_values=config.relative_values)


def _fill_inputs(stack_spec, config: network.TransformerConfig, params: Mapping,
                 stack: str) -> None:
  """`stack`'s absolute positions (if any) and its final norm (pre-LN)."""
  stack_spec.scale_embeddings = config.scale_embeddings
  positions = config.positions_of(stack)
  if positions.absolute:
    first = config.position_offset  # The row position 0 reads.
    stack_spec.position_encodings.encodings = positions.exported_table(
        params[stack], config.max_length + first, config.emb_dim)[first:]
  if layout.has_final_norm(config.layer_norm):
    _norm(stack_spec.layer_norm, params[stack][layout.FINAL_NORMS[stack]])


def _stack_spec(spec_class, config: network.TransformerConfig, stack: str):
  return spec_class(getattr(config, f'num_{stack}_layers'), config.num_heads,
                    activation=ACTIVATIONS[config.mlp_activation], head_dim=config.head_dim,
                    **config.norm_placement.ctranslate2_settings(),
                    **config.positions_of(stack).ctranslate2_settings(config))


def transformer_spec_of(config: network.TransformerConfig, params: Any,
                        pieces: Sequence[str]) -> transformer_spec.TransformerSpec:
  """The TransformerSpec of the model `config` with `params` (either layout) and the
  SentencePiece `pieces`, validated; a UserError if it has no exact CTranslate2 form."""
  check_exportable(config)
  tree = flax.core.unfreeze(layout.convert_layout(params, scanned=False))
  params = _Parameters(tree)
  spec = transformer_spec.TransformerSpec(
      _stack_spec(transformer_spec.TransformerEncoderSpec, config, 'encoder'),
      _stack_spec(transformer_spec.TransformerDecoderSpec, config, 'decoder'))
  rows = len(pieces)
  tables = {stack: params[name][layout.EMBEDDING_TABLE][:rows] for stack, name in (
      ('encoder', layout.encoder_embedding_name(config.share_encoder_embedding)),
      ('decoder', layout.DECODER_EMBEDDING))}
  spec.encoder.embeddings[0].weight = tables['encoder']
  spec.decoder.embeddings.weight = tables['decoder']
  for stack, stack_spec in (('encoder', spec.encoder), ('decoder', spec.decoder)):
    _fill_inputs(stack_spec, config, params, stack)
    _fill_layers(stack_spec, config, params, stack)
  projection, vocab_major = layout.output_projection(config, params)
  spec.decoder.projection.weight = np.ascontiguousarray(
      projection[:rows] if vocab_major else projection.T[:rows])
  if layout.logit_scale(config) != 1.0:
    spec.decoder.scale_outputs = np.float32(layout.logit_scale(config))
  if config.logits_bias:
    spec.decoder.projection.bias = params['decoder'][layout.LOGITS_BIAS][:rows]
  _check_all_read(tree, params.read)
  _set_vocabulary(spec, pieces, pieces[config.decoder_start_token])
  spec.config.layer_norm_epsilon = config.layer_norm_epsilon
  spec.validate()
  return spec


def _check_all_read(tree: Mapping, read: set) -> None:
  """A UserError naming a parameter the spec did not take: a module this exporter does
  not know would otherwise be dropped from the model without a word."""
  left = sorted('/'.join(path) for path in flax.traverse_util.flatten_dict(tree)
                if path not in read)
  if left:
    raise UserError(f'--checkpoint_dir: the model has parameters CTranslate2 has no place '
                    f'for: {", ".join(left[:3])}' + (' ...' if len(left) > 3 else ''))


def _set_vocabulary(spec: transformer_spec.TransformerSpec, pieces: Sequence[str],
                    start: str) -> None:
  """One vocabulary for both sides; the decoder starts from `start` (the padding piece,
  or an imported model's EOS), as ours does, and EOS ends a translation."""
  spec.register_source_vocabulary(list(pieces))
  spec.register_target_vocabulary(list(pieces))
  spec.config.decoder_start_token = start
  spec.config.bos_token = start
  spec.config.eos_token = pieces[vocab.EOS_ID]
  spec.config.unk_token = pieces[vocab.UNK_ID]
