"""A Hugging Face checkpoint folder of NLLB-200, M2M-100 or Marian as a t5x_mt run folder.

The folder is what `save_pretrained` writes and what the Hugging Face hub holds for
`facebook/nllb-200-*`, `facebook/m2m100_*` and `Helsinki-NLP/opus-mt-*`: config.json,
model.safetensors (or its shards with model.safetensors.index.json) and the tokenizer's
files. t5x_mt's Transformer expresses each architecture exactly:
- M2M-100 and NLLB-200 (transformers' M2M100ForConditionalGeneration): pre-LN layers and a
  final LayerNorm per stack; sinusoids laid out as tensor2tensor does, the first token at
  row pad_token_id + 1; the decoder starting from EOS, then the target language's token,
  which t5x_mt forces as its S-ENC-T-DEC decoder tag;
- Marian (MarianMTModel): post-LN layers; the paper's sinusoids from row 0; swish; a bias
  on the logits; the decoder starting from padding; a SentencePiece model per side.
Both: PyTorch's LayerNorm epsilon 1e-5 and one token embedding for both stacks and the
output, scaled by sqrt(d_model) on the way in (`scale_embedding`), logits not scaled. The
norm placement and the position embedding are the registered variants that list the
checkpoint's model type (`huggingface_model_types`).

The import writes a run folder every command reads: vocab.model (and source_vocab.model
for Marian: `hf_vocabulary`), config.gin (the architecture, tag strategy and vocabularies,
which a fine-tuning run takes as its last --gin_file) and a parameters-only checkpoint at
step 0. What the architecture cannot express (another model type, untied output weights,
an activation t5x_mt lacks, a weight it has no place for) is a UserError naming it.
"""

from collections.abc import Mapping, Sequence
import dataclasses
import json
import logging
import math
import pathlib
from typing import Any

from flax import traverse_util
import jax
import jax.numpy as jnp
import numpy as np

from t5x_mt.runs import checkpoints
from t5x_mt.core import files
from t5x_mt.core import host_memory
from t5x_mt.core.registry import Registry
from t5x_mt.model import models
from t5x_mt.model import network
from t5x_mt.model import norm_placements
from t5x_mt.model import parameter_layout as layout
from t5x_mt.model import position_embeddings
from t5x_mt.runs import run_layout
from t5x_mt.runs import run_vocabulary
from t5x_mt.data import tags
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.pretrained import hf_vocabulary

MODEL_TYPES = ('m2m_100', 'marian')
# Model types t5x_mt cannot import, and why.
UNSUPPORTED = {'nllb-moe': 'NLLB-MoE\'s mixture-of-experts layers have no t5x_mt form'}
# transformers' activation names whose function t5x_mt's MLP computes (its 'gelu' is
# erf's, as transformers' is).
ACTIVATIONS = {'relu': 'relu', 'gelu': 'gelu', 'swish': 'swish', 'silu': 'swish'}
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm's, which the checkpoints trained with.
# t5x_mt's sublayer of each of transformers' attention modules, per stack.
_ATTENTION = {'encoder': {'self_attn': 'attention'},
              'decoder': {'self_attn': 'self_attention', 'encoder_attn': 'cross_attention'}}
# transformers' norm before each sublayer.
_NORMS = {'self_attn': 'self_attn_layer_norm', 'encoder_attn': 'encoder_attn_layer_norm',
          'mlp': 'final_layer_norm'}


def read_config(directory: pathlib.Path) -> dict[str, Any]:
  """config.json, checked to be an architecture t5x_mt imports."""
  path = directory / 'config.json'
  if not path.is_file():
    raise UserError(f'{path}: not found; --path must name a Hugging Face checkpoint folder')
  try:
    config = json.loads(path.read_text(encoding='utf-8'))
  except ValueError as error:
    raise UserError(f'{path}: not readable JSON ({error})') from None
  model_type = config.get('model_type')
  if model_type in UNSUPPORTED:
    raise UserError(f'{path}: model_type {model_type!r} cannot be imported: '
                    f'{UNSUPPORTED[model_type]}')
  if model_type not in MODEL_TYPES:
    raise UserError(f'{path}: model_type {model_type!r} is not one t5x_mt imports '
                    f'({", ".join(MODEL_TYPES)}: M2M-100 and NLLB-200, Marian)')
  return config


def _setting(config: dict[str, Any], name: str, path: pathlib.Path) -> Any:
  if name not in config:
    raise UserError(f'{path}: has no {name}')
  return config[name]


def is_marian(config: dict[str, Any]) -> bool:
  return config['model_type'] == 'marian'


def model_settings(config: dict[str, Any], directory: pathlib.Path) -> dict[str, Any]:
  """The `network.TransformerConfig` fields (all but vocab_size) of the checkpoint, with
  its decoder start still in the checkpoint's ids."""
  path = directory / 'config.json'
  get = lambda name: _setting(config, name, path)
  heads = get('encoder_attention_heads')
  if get('decoder_attention_heads') != heads:
    raise UserError(f'{path}: encoder_attention_heads {heads} and decoder_attention_heads '
                    f'{get("decoder_attention_heads")} differ; t5x_mt\'s stacks share one')
  if get('d_model') % heads:
    raise UserError(f'{path}: d_model {get("d_model")} is not a multiple of {heads} heads')
  activation = get('activation_function')
  if activation not in ACTIVATIONS:
    raise UserError(f'{path}: activation_function {activation!r} is not one t5x_mt computes '
                    f'({", ".join(ACTIVATIONS)})')
  for shared in ('tie_word_embeddings', 'share_encoder_decoder_embeddings'):
    if not config.get(shared, True):
      raise UserError(f'{path}: {shared} is false; t5x_mt shares one token embedding '
                      'between the stacks and the output')
  marian = is_marian(config)
  return dict(
      emb_dim=get('d_model'), num_heads=heads, head_dim=get('d_model') // heads,
      mlp_dim=get('encoder_ffn_dim'), encoder_mlp_dim=get('encoder_ffn_dim'),
      decoder_mlp_dim=get('decoder_ffn_dim'), num_encoder_layers=get('encoder_layers'),
      num_decoder_layers=get('decoder_layers'),
      layer_norm=_variant_of(norm_placements.REGISTRY, config['model_type']),
      position_embedding=_variant_of(position_embeddings.REGISTRY, config['model_type']),
      position_offset=0 if marian else get('pad_token_id') + 1,
      max_length=get('max_position_embeddings'), share_encoder_embedding=True,
      logits_via_embedding=True, logits_bias=marian, mlp_activation=ACTIVATIONS[activation],
      scale_embeddings=bool(config.get('scale_embedding', False)),
      layer_norm_epsilon=LAYER_NORM_EPSILON,
      decoder_start_token=get('decoder_start_token_id'))


def _variant_of(registry: Registry, model_type: str) -> str:
  """The name of the variant in `registry` (norm placements, position embeddings) that
  transformers' `model_type` is built with."""
  return next(variant.name for variant in registry
              if model_type in variant.huggingface_model_types)


def tag_strategy(config: dict[str, Any], vocabulary: hf_vocabulary.ConvertedVocabulary) -> str:
  """fairseq's S-ENC-T-DEC; Marian's target tag before the source (T-ENC) where it has
  language tokens, no tags in a bilingual model."""
  if not is_marian(config):
    return tags.S_ENC_T_DEC
  return tags.T_ENC if vocabulary.languages else tags.NO_TAGS


# safetensors' dtype names, as numpy reads them.
_SAFETENSORS_DTYPES = {'F64': np.float64, 'F32': np.float32, 'F16': np.float16,
                       'BF16': jnp.bfloat16, 'I64': np.int64, 'I32': np.int32,
                       'I16': np.int16, 'I8': np.int8, 'U8': np.uint8, 'BOOL': np.bool_}


class CheckpointTensors(Mapping):
  """The tensors of a checkpoint's safetensors files by name (without transformers'
  'model.' prefix), each read in float32 when asked for and not kept: a conversion that
  reads them one at a time holds one copy of the weights. Their names, shapes and bytes
  come from the files' headers, before any tensor is read.

  Each tensor is read from its byte range with plain file reads (the format: an 8-byte
  little-endian header length, a JSON header of dtype, shape and data offsets, then the
  data): the safetensors package maps the whole file, which leaves every byte read
  resident in the process beside the converted copy."""

  def __init__(self, directory: pathlib.Path, shards: Sequence[str]):
    self._where, self._shapes = {}, {}
    for shard in shards:
      path = directory / shard
      try:
        header, data_start = _safetensors_header(path)
      except (OSError, ValueError, KeyError, TypeError) as error:
        raise UserError(f'{path}: not a readable safetensors file ({error})') from None
      for key, entry in header.items():
        if key == '__metadata__':
          continue
        name = key.removeprefix('model.')
        begin, end = entry['data_offsets']
        self._where[name] = (path, data_start + begin, end - begin, entry['dtype'])
        self._shapes[name] = tuple(entry['shape'])

  def __getitem__(self, name: str) -> np.ndarray:
    path, offset, size, dtype = self._where[name]
    data = np.empty(size, np.uint8)
    with open(path, 'rb') as stored:
      stored.seek(offset)
      if stored.readinto(memoryview(data)) != size:
        raise UserError(f'{path}: {name} is cut short (a truncated safetensors file)')
    return data.view(_SAFETENSORS_DTYPES[dtype]).reshape(self._shapes[name]).astype(
        np.float32, copy=False)

  def __iter__(self):
    return iter(self._where)

  def __len__(self) -> int:
    return len(self._where)

  def float32_bytes(self) -> tuple[int, int]:
    """(all tensors', the largest tensor's) bytes in float32."""
    sizes = [4 * math.prod(shape) for shape in self._shapes.values()]
    return sum(sizes), max(sizes, default=0)


def _safetensors_header(path: pathlib.Path) -> tuple[dict[str, Any], int]:
  """(the JSON header, where the data starts) of a safetensors file."""
  with open(path, 'rb') as stored:
    length = int.from_bytes(stored.read(8), 'little')
    if not 0 < length <= path.stat().st_size - 8:
      raise ValueError('its header length is past the end of the file')
    header = json.loads(stored.read(length))
  for key, entry in header.items():
    if key != '__metadata__' and entry['dtype'] not in _SAFETENSORS_DTYPES:
      raise ValueError(f'{key} has the dtype {entry["dtype"]}, which t5x_mt does not read')
  return header, 8 + length


def read_weights(directory: pathlib.Path) -> CheckpointTensors:
  """The tensors of model.safetensors (or of the shards its index lists)."""
  index = directory / 'model.safetensors.index.json'
  if index.is_file():
    shards = sorted(set(json.loads(index.read_text(encoding='utf-8'))['weight_map'].values()))
  elif (directory / 'model.safetensors').is_file():
    shards = ['model.safetensors']
  else:
    other = [name for name in ('pytorch_model.bin', 'tf_model.h5', 'flax_model.msgpack')
             if (directory / name).is_file()]
    raise UserError(f'{directory}: no model.safetensors' + (
        f' ({other[0]} only: t5x_mt reads safetensors, which save_pretrained writes)'
        if other else ''))
  return CheckpointTensors(directory, shards)


def _dense(weights, prefix: str) -> dict[str, np.ndarray]:
  """torch's Linear (y = x W^T + b) as a t5x_mt dense layer."""
  return {layout.KERNEL: weights[f'{prefix}.weight'].T, layout.BIAS: weights[f'{prefix}.bias']}


def _attention(weights, prefix: str, heads: int, head_dim: int) -> dict[str, Any]:
  module = {}
  for name, projection in zip(layout.ATTENTION_PROJECTIONS, ('q_proj', 'k_proj', 'v_proj')):
    dense = _dense(weights, f'{prefix}.{projection}')
    module[name] = {layout.KERNEL: dense[layout.KERNEL].reshape(-1, heads, head_dim),
                    layout.BIAS: dense[layout.BIAS].reshape(heads, head_dim)}
  out = _dense(weights, f'{prefix}.out_proj')
  module[layout.ATTENTION_OUTPUT] = {
      layout.KERNEL: out[layout.KERNEL].reshape(heads, head_dim, -1),
      layout.BIAS: out[layout.BIAS]}
  return module


def _norm(weights, prefix: str) -> dict[str, np.ndarray]:
  return {layout.NORM_SCALE: weights[f'{prefix}.weight'], layout.BIAS: weights[f'{prefix}.bias']}


def _layer(weights, stack: str, index: int, config: network.TransformerConfig
           ) -> dict[str, Any]:
  prefix = f'{stack}.layers.{index}'
  layer = {}
  for theirs, sublayer in _ATTENTION[stack].items():
    layer[layout.SUBLAYER_MODULES[sublayer]] = _attention(
        weights, f'{prefix}.{theirs}', config.num_heads, config.head_dim)
    layer[layout.layer_norm_name(sublayer, config.layer_norm)] = _norm(
        weights, f'{prefix}.{_NORMS[theirs]}')
  layer[layout.MLP] = {layout.MLP_INPUT: _dense(weights, f'{prefix}.fc1'),
                       layout.MLP_OUTPUT: _dense(weights, f'{prefix}.fc2')}
  layer[layout.layer_norm_name('mlp', config.layer_norm)] = _norm(
      weights, f'{prefix}.{_NORMS["mlp"]}')
  return layer


# Weights a checkpoint may hold that the model computes without: the tied copies of the
# token embedding (checked equal) and the fixed sinusoids under `{stack}.embed_positions.`
# (checked to be the model's where they are a table).
_COPIES = ('encoder.embed_tokens.weight', 'decoder.embed_tokens.weight', 'lm_head.weight')


class _Weights(Mapping):
  """The checkpoint's tensors by name, each name recorded when read."""

  def __init__(self, tensors: Mapping[str, np.ndarray]):
    self._tensors = tensors
    self.read = set()

  def __getitem__(self, name: str) -> np.ndarray:
    tensor = self._tensors[name]
    self.read.add(name)
    return tensor

  def __iter__(self):
    return iter(self._tensors)

  def __len__(self) -> int:
    return len(self._tensors)


def shared_embedding(weights: _Weights, directory: pathlib.Path) -> np.ndarray:
  """The embedding every copy of the tied tables must equal (a UserError otherwise)."""
  if 'shared.weight' not in weights:
    raise UserError(f'{directory}: the weights have no shared.weight (the token embedding)')
  table = weights['shared.weight']
  for name in _COPIES:
    if name in weights and not np.array_equal(weights[name], table):
      raise UserError(f'{directory}: {name} differs from shared.weight; t5x_mt ties every '
                      'token table to one')
  return table


def _check_position_tables(weights: _Weights, config: network.TransformerConfig,
                           directory: pathlib.Path) -> None:
  """A UserError where a saved position table is not, in the rows the model reads (from
  `position_offset` on), the sinusoids the model computes."""
  for name in [name for name in weights if '.embed_positions.' in name]:
    saved = weights[name]
    if saved.ndim != 2:
      continue  # fairseq's placeholder for the table's dtype and device.
    ours = position_embeddings.get(config.position_embedding).fixed_table(*saved.shape)
    first = config.position_offset
    if not np.allclose(saved[first:], ours[first:], atol=1e-5):
      raise UserError(f'{directory}: {name} is not the {config.position_embedding} table '
                      'of its config.json; t5x_mt computes the sinusoids')


def convert_params(tensors: Mapping[str, np.ndarray], config: network.TransformerConfig,
                   checkpoint_ids: np.ndarray, directory: pathlib.Path) -> dict[str, Any]:
  """t5x_mt's parameter tree (unrolled layers) for `config`: each checkpoint tensor moved
  to its place, rows of the embedding (and the logits' bias) in t5x_mt's token order, rows
  past the vocabulary zero. A UserError for a tensor missing, or one left over."""
  weights = _Weights(tensors)
  params: dict[str, Any] = {layout.DECODER_EMBEDDING: {
      layout.EMBEDDING_TABLE: _rows(shared_embedding(weights, directory), checkpoint_ids,
                                    config.vocab_size)}}
  _check_position_tables(weights, config, directory)
  try:
    for stack in layout.STACKS:
      side = {layout.layer_name(i): _layer(weights, stack, i, config)
              for i in range(getattr(config, f'num_{stack}_layers'))}
      if layout.has_final_norm(config.layer_norm):
        side[layout.FINAL_NORMS[stack]] = _norm(weights, f'{stack}.layer_norm')
      params[stack] = side
    if config.logits_bias:
      params['decoder'][layout.LOGITS_BIAS] = _rows(
          weights['final_logits_bias'].reshape(-1), checkpoint_ids, config.vocab_size)
  except KeyError as error:
    raise UserError(f'{directory}: the weights have no {error.args[0]}, which a model of '
                    'its config.json holds') from None
  left = sorted(set(weights) - weights.read)
  if left:
    raise UserError(f'{directory}: the weights hold {", ".join(left[:3])}' +
                    (' ...' if len(left) > 3 else '') + ', which t5x_mt\'s model has no '
                    'place for')
  _check_shapes(params, config, directory)
  return params


def _rows(table: np.ndarray, checkpoint_ids: np.ndarray, rows: int) -> np.ndarray:
  """`table`'s rows in t5x_mt's token order, zero past the vocabulary up to `rows`."""
  ordered = np.zeros((rows, *table.shape[1:]), np.float32)
  ordered[:len(checkpoint_ids)] = table[checkpoint_ids]
  return ordered


def _check_shapes(params: dict[str, Any], config: network.TransformerConfig,
                  directory: pathlib.Path) -> None:
  """A UserError unless `params` fills every parameter of `config`'s model, shape for
  shape."""
  expected = traverse_util.flatten_dict(
      models.abstract_variables(config)['params'], sep='/')
  got = traverse_util.flatten_dict(params, sep='/')
  for path, leaf in expected.items():
    shape = tuple(getattr(leaf, 'value', leaf).shape)
    if path not in got or got[path].shape != shape:
      raise UserError(f'{directory}: {path} has shape '
                      f'{got[path].shape if path in got else "none"}, the model {shape}')


def _special_ids(config: dict[str, Any], path: pathlib.Path) -> dict[str, int | None]:
  ids = {role: config.get(f'{role}_token_id') for role in ('pad', 'eos', 'bos')}
  for role in ('pad', 'eos'):
    if not isinstance(ids[role], int):
      raise UserError(f'{path}: has no {role}_token_id')
  return ids


def vocabulary_of(directory: pathlib.Path,
                  config: dict[str, Any]) -> hf_vocabulary.ConvertedVocabulary:
  """The tokenizer in checkpoint folder `directory` as a t5x_mt vocabulary, numbered as
  its config.json (`config`) says the model reads tokens."""
  return hf_vocabulary.convert(directory, _special_ids(config, directory / 'config.json'),
                               _setting(config, 'vocab_size', directory / 'config.json'))


def gin_config(settings: dict[str, Any], strategy: str, vocabulary_path: str,
               source_vocabulary_path: str | None) -> str:
  """config.gin of an imported run: its architecture, tag strategy and vocabularies, and
  nothing of training, so that it can close a fine-tuning run's --gin_file list."""
  lines = ['# The architecture, vocabulary and tags of a checkpoint imported by',
           '# launch/import_checkpoint.py. A run that starts from it gives this file as its',
           '# last --gin_file (README, "Start from NLLB or OPUS-MT").',
           'import data_tasks', 'import t5x_mt.config.configurables', '',
           f'LAYER_NORM = {settings["layer_norm"]!r}',
           f'POSITION_EMBEDDING = {settings["position_embedding"]!r}',
           f'TAG_STRATEGY = {strategy!r}',
           f'VOCABULARY_PATH = {vocabulary_path!r}',
           'data_tasks.tag_strategy.strategy = %TAG_STRATEGY',
           'data_tasks.vocabulary_path.path = %VOCABULARY_PATH',
           f'data_tasks.source_vocabulary_path.path = {source_vocabulary_path!r}',
           'network.TransformerConfig.layer_norm = %LAYER_NORM',
           'network.TransformerConfig.position_embedding = %POSITION_EMBEDDING']
  for name, value in sorted(settings.items()):
    if name not in ('layer_norm', 'position_embedding'):
      lines.append(f'network.TransformerConfig.{name} = {value!r}')
  return '\n'.join(lines) + '\n'


@dataclasses.dataclass(frozen=True)
class ImportedRun:
  """What an import wrote: the model, its tokens and the FLORES-200 codes of the
  languages it has a token for."""
  config: network.TransformerConfig
  num_tokens: int
  languages: tuple[str, ...]


def _checked_directions(names: Sequence[str], vocabulary: hf_vocabulary.ConvertedVocabulary,
                        strategy: str) -> list[str]:
  """`names` ('eng_Latn-hau_Latn') parsed; where the checkpoint has language tokens, each
  language that the tag strategy tags must have one (a multilingual OPUS-MT model tags
  the target alone: its sources may be in any language)."""
  parsed = [Direction.parse(name, '--directions') for name in names]
  for direction in parsed:
    tagged = ((direction.tgt_lang,) if strategy == tags.T_ENC
              else (direction.src_lang, direction.tgt_lang))
    for lang in tagged:
      if vocabulary.languages and lang not in vocabulary.languages:
        raise UserError(f'--directions: {direction.name}: the checkpoint has no token for '
                        f'{lang} (launch/extend_vocab.py adds a language to the imported run)')
  return [direction.name for direction in parsed]


STORAGE_DTYPES = ('float32', 'bfloat16')


# Beside the weights, what an import's process holds at its peak: TensorFlow and JAX, the
# largest tensor twice (read, then converted) and Orbax's buffers as it writes
# (bench/import_memory.py measures the peak at NLLB-200's shapes, below this bound).
_IMPORT_OVERHEAD_BYTES = 3 * 2**29


def import_bytes_needed(total: int, largest: int) -> int:
  """A bound on an import's peak host memory for `total` bytes of float32 weights whose
  largest tensor has `largest`."""
  return int(1.1 * total) + 2 * largest + _IMPORT_OVERHEAD_BYTES


def check_fits_host(weights: CheckpointTensors, available: int | None) -> None:
  """Refuses, before any tensor is read, an import that `available` bytes of host memory
  cannot hold (`import_bytes_needed`; a bfloat16 cast replaces one array at a time)."""
  total, largest = weights.float32_bytes()
  needed = import_bytes_needed(total, largest)
  if available is not None and needed > available:
    raise UserError(f'--path: importing needs {needed / 2**30:.1f} GiB of host memory '
                    f'({total / 2**30:.1f} GiB of float32 weights), {available / 2**30:.1f} '
                    'GiB is available')


def _stored(params: dict[str, Any], storage_dtype: str) -> dict[str, Any]:
  """`params` as JAX arrays in `storage_dtype`, moved one array at a time (each numpy
  array is freed as its copy replaces it). Orbax saves JAX arrays without the copy of
  the whole tree it makes of numpy arrays."""
  flat = traverse_util.flatten_dict(params)
  params.clear()
  for path in list(flat):
    flat[path] = jax.device_put(flat[path].astype(storage_dtype, copy=False))
  return traverse_util.unflatten_dict(flat)


def import_checkpoint(path: str, output_dir: str, directions: Sequence[str] = (),
                      storage_dtype: str = 'float32') -> ImportedRun:
  """Writes the checkpoint folder `path` as a run folder at `output_dir` (whole or not at
  all). `directions` ('eng_Latn-hau_Latn'), if any, are recorded as the run's
  (directions.json), so that commands refuse any other target: a bilingual OPUS-MT model's
  direction is in its name on the hub, not in its files. The weights are read one tensor
  at a time and saved in `storage_dtype` ('bfloat16' halves the checkpoint; every
  reader computes in float32 as before, from the rounded weights)."""
  directory = pathlib.Path(path).expanduser()
  if not directory.is_dir():
    raise UserError(f'--path: {path} is not a directory')
  output = files.path(output_dir)
  if output.exists() and any(output.iterdir()):
    raise UserError(f'--output_dir: {output} exists and is not empty')
  hf_config = read_config(directory)
  settings = model_settings(hf_config, directory)
  vocabulary = vocabulary_of(directory, hf_config)
  directions = _checked_directions(directions, vocabulary, tag_strategy(hf_config, vocabulary))
  checkpoint_ids = list(vocabulary.checkpoint_ids)
  settings['decoder_start_token'] = checkpoint_ids.index(settings['decoder_start_token'])
  _warn_training_only(hf_config)
  config = network.TransformerConfig(
      vocab_size=run_vocabulary.padded_vocab_size(len(checkpoint_ids)), **settings)
  if storage_dtype not in STORAGE_DTYPES:
    raise UserError(f'--storage_dtype: {storage_dtype!r} is not one of '
                    f'{", ".join(STORAGE_DTYPES)}')
  weights = read_weights(directory)
  check_fits_host(weights, host_memory.available_bytes())
  params = _stored(convert_params(weights, config, vocabulary.checkpoint_ids, directory),
                   storage_dtype)
  # config.gin names the vocabularies wherever the run is read from: by absolute paths.
  final = run_layout.RunLayout(files.absolute(output))
  with files.staged_folder(output) as staging:
    run = run_layout.RunLayout(staging)
    files.write_bytes_atomically(run.vocabulary, vocabulary.model)
    if vocabulary.source_model:
      files.write_bytes_atomically(run.source_vocabulary, vocabulary.source_model)
    if directions:
      run.write_directions(directions)
    files.write_text_atomically(run.config, gin_config(
        settings, tag_strategy(hf_config, vocabulary), str(final.vocabulary),
        str(final.source_vocabulary) if vocabulary.source_model else None))
    # Written at once: an asynchronous save would copy the weights first.
    saver = checkpoints.RunCheckpoints(str(staging), keep=1, asynchronous=False)
    try:
      saver.save_params(0, params)
    finally:
      saver.close()
  return ImportedRun(config, len(checkpoint_ids), vocabulary.languages)


def _warn_training_only(config: dict[str, Any]) -> None:
  """Settings that change training alone: the run's own dropout replaces them."""
  if config.get('activation_dropout'):
    logging.warning('activation_dropout %s is not imported: t5x_mt drops out after each '
                    'sublayer (network.TransformerConfig.dropout_rate)',
                    config['activation_dropout'])
