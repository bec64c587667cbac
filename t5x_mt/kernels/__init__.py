"""One attention entry point for the whole model, dispatching to a kernel by name.

Layers call `attention(...)` and never a kernel directly, so a kernel plugs in by
`register_implementation(name, fn, platform=...)` without touching any caller. Registered:

- 'xla': the reference, on any platform (`xla_attention`).
- 'pallas_tpu': flash attention on TPUs, JAX's Pallas kernel through Mosaic
  (`tpu_flash.tpu_flash_attention`).
- 'cudnn': cuDNN's fused flash attention on NVIDIA GPUs, through
  `jax.nn.dot_product_attention(implementation='cudnn')`, for bfloat16 and float16.
- 'pallas': this project's Pallas flash kernel (`flash.flash_attention`), lowered through
  Triton for NVIDIA GPUs; it covers float32 too.

'auto' decides by the platform the program is lowered for, not the one the process runs
on: it stages every platform's choice with `jax.lax.platform_dependent`, so a program
lowered for TPUs or GPUs from a CPU host (`jax.export`, ahead-of-time compiles for a TPU
topology) carries that platform's kernel, and one run on a CPU uses XLA. For each platform
it takes the registered kernel of highest `auto_priority` that supports the call. On TPUs
that is the Mosaic kernel. On GPUs it is cuDNN where it applies (bfloat16 or float16,
head_dim a multiple of 8 up to 128, and a process that can reach cuDNN: JAX checks its
version while tracing), because NVIDIA's library runs the fastest flash attention on
Hopper and keeps up with each generation while Pallas' Triton backend is deprecated, and
the Pallas kernel otherwise; either only for calls of GPU_AUTO_MIN_LENGTH or longer, below
which XLA's fused attention is measured to be as fast. 'auto' uses XLA for attention
dropout and Shaw's relative value tables (no fused kernel holds the probabilities they
need) and for single-query calls (a one-row tile would waste a kernel).

A kernel named explicitly runs natively in a process on its platform and in the Pallas
interpreter elsewhere (CPU tests); `interpret=True` interprets it everywhere. Kernels run
under `shard_map` over the mesh the model runs in: Mosaic and Triton calls cannot be
partitioned by XLA, so each device attends over its own batch rows and heads.

`decoding_step_attention` is the attention of a decoding step to its KV cache, which the
layers keep in the layout that step's products read; 'auto' stages the ragged decoding
kernel for TPUs and GPUs there, which reads only the filled part of each cache row.

May import core only: kernels know nothing of the model that calls them.
"""

import dataclasses
import functools
from typing import Callable, Optional, Protocol

import flax.linen as nn
import jax
import jax.numpy as jnp

from t5x_mt.kernels.decode_attention import kv_lengths_from_valid
from t5x_mt.kernels.decode_attention import ragged_decode_attention
from t5x_mt.kernels.flash import flash_attention
from t5x_mt.kernels.tpu_flash import queries_with_a_key
from t5x_mt.kernels.tpu_flash import tpu_flash_attention
from t5x_mt.kernels.xla_attention import attention_mask
from t5x_mt.kernels import xla_attention as _xla
from t5x_mt.kernels.xla_attention import xla_attention

Array = jax.Array

__all__ = ['ACCELERATOR_PLATFORMS', 'GPU_AUTO_MIN_LENGTH', 'attention', 'attention_mask', 'auto_choices',
           'decoding_step_attention', 'flash_attention', 'implementations',
           'ragged_decode_attention',
           'process_platform', 'register_implementation', 'tpu_flash_attention',
           'xla_attention']

# The lowering platforms 'auto' stages a kernel for; every other platform gets XLA.
ACCELERATOR_PLATFORMS = ('tpu', 'cuda')


class AttentionFn(Protocol):
  """What every attention implementation computes; see `attention` for the contract."""

  def __call__(self, q: Array, k: Array, v: Array, *,
               q_segment_ids: Optional[Array], kv_segment_ids: Optional[Array],
               bias: Optional[Array], causal: bool, dropout_rate: float,
               dropout_rng: Optional[Array], interpret: bool,
               relative_values: Optional[tuple[Array, Array]] = None) -> Array:
    ...


# Why an implementation cannot run a call (q, k, dropout active), or None when it can.
Unsupported = Callable[[Array, Array, bool], Optional[str]]


@dataclasses.dataclass(frozen=True)
class _Implementation:
  fn: AttentionFn
  platform: Optional[str]  # The lowering platform it runs natively on; None: every one.
  auto_priority: Optional[int]  # None: 'auto' never picks it.
  is_available: Callable[[], bool]
  unsupported: Unsupported
  interpretable: bool
  auto_min_length: int  # 'auto' takes it for calls at least this long (query or key side).


def register_implementation(name: str, fn: AttentionFn, *, platform: Optional[str] = None,
                            auto_priority: Optional[int] = None,
                            is_available: Callable[[], bool] = lambda: True,
                            unsupported: Unsupported = lambda q, k, dropout: None,
                            interpretable: bool = True, auto_min_length: int = 0) -> None:
  """Makes `fn` callable as `attention(..., implementation=name)`.

  Args:
    name: the name users put in `TransformerConfig.attention_implementation`.
    fn: the kernel, with the `AttentionFn` signature.
    platform: the lowering platform ('tpu', 'cuda') the kernel is native to; None for one
      that runs on every platform.
    auto_priority: rank among the platform's candidates for 'auto' (higher wins); None to
      never auto-pick.
    is_available: whether this process can trace the kernel; checked by 'auto'.
    unsupported: the reason the kernel cannot run a call, or None; 'auto' then takes the
      next candidate, and naming the kernel explicitly raises a ValueError with the reason.
    interpretable: whether `fn(..., interpret=True)` runs on any platform (Pallas kernels);
      one that is not can only be named where it is native.
    auto_min_length: the shortest call (the longer of its query and key lengths) 'auto'
      gives the kernel; shorter ones get XLA, where it is measured to be faster.
  """
  if name == 'auto':
    raise ValueError("'auto' is reserved for automatic selection")
  _IMPLEMENTATIONS[name] = _Implementation(fn, platform, auto_priority, is_available,
                                           unsupported, interpretable, auto_min_length)


_IMPLEMENTATIONS: dict[str, _Implementation] = {}


def implementations() -> tuple[str, ...]:
  """Registered implementation names, sorted."""
  return tuple(sorted(_IMPLEMENTATIONS))


def _refusal(name: str, q: Array, k: Array, dropout: bool,
             relative_values: Optional[tuple[Array, Array]]) -> Optional[str]:
  """Why implementation `name` cannot compute this call, or None."""
  if relative_values is not None and name != 'xla':
    return 'relative value tables (TransformerConfig.relative_values)'
  return _IMPLEMENTATIONS[name].unsupported(q, k, dropout)


def auto_choices(q: Array, k: Array, *, dropout: bool = False,
                 relative_values: Optional[tuple[Array, Array]] = None) -> dict[str, str]:
  """The implementation 'auto' lowers this call to on each of ACCELERATOR_PLATFORMS."""
  choices = {}
  for platform in ACCELERATOR_PLATFORMS:
    candidates = [(impl.auto_priority, name) for name, impl in _IMPLEMENTATIONS.items()
                  if impl.platform == platform and impl.auto_priority is not None
                  and q.shape[1] > 1 and max(q.shape[1], k.shape[1]) >= impl.auto_min_length
                  and impl.is_available()
                  and _refusal(name, q, k, dropout, relative_values) is None]
    choices[platform] = max(candidates)[1] if candidates else 'xla'
  return choices


def _checked_name(implementation: str) -> str:
  if implementation != 'auto' and implementation not in _IMPLEMENTATIONS:
    valid = ', '.join(('auto',) + implementations())
    raise ValueError(f'unknown attention implementation {implementation!r}; valid: {valid}')
  return implementation


def attention(q: Array, k: Array, v: Array, *,
              q_segment_ids: Optional[Array] = None,
              kv_segment_ids: Optional[Array] = None,
              bias: Optional[Array] = None,
              causal: bool = False,
              implementation: str = 'auto',
              interpret: bool = False,
              dropout_rate: float = 0.0,
              dropout_rng: Optional[Array] = None,
              relative_values: Optional[tuple[Array, Array]] = None) -> Array:
  """Multi-head scaled dot-product attention with segment (packing) masks.

  Args:
    q: queries [batch, q_length, heads, head_dim].
    k: keys [batch, kv_length, heads, head_dim].
    v: values [batch, kv_length, heads, head_dim].
    q_segment_ids: int [batch, q_length]; 0 marks padding. None: all ones.
    kv_segment_ids: int [batch, kv_length]; 0 marks padding. None: all ones.
    bias: optional additive logits bias broadcastable to [batch, heads, q_length, kv_length]
      (e.g. relative positions).
    causal: a query also may not attend to keys at a later array index.
    implementation: a registered name ('xla', 'pallas_tpu', ...) or 'auto' (see the module
      docstring for how it decides).
    interpret: run Pallas kernels in interpret mode everywhere; ignored by 'xla'.
    dropout_rate: attention-probability dropout; applied only when `dropout_rng` is given.
    dropout_rng: PRNG key for dropout, or None for deterministic attention.
    relative_values: optional (table [rows, head_dim], ids int [batch or 1, q_length,
      kv_length]): Shaw's relative value term, each query's probabilities summed per
      table row times the row, added to the output. It needs the probabilities
      themselves, which a fused kernel never holds, so only 'xla' computes it and 'auto'
      picks 'xla' for it (relative keys come in through `bias`, which every kernel takes).

  Returns:
    [batch, q_length, heads, head_dim] in q's dtype. A query attends to a key only when
    their segment ids are equal and nonzero; queries with no such key return zeros. Scores are
    scaled by 1/sqrt(head_dim) and normalised in float32.
  """
  name = _checked_name(implementation)
  dropout = dropout_rate > 0.0 and dropout_rng is not None
  if bias is not None:
    bias = jnp.reshape(bias, (1,) * (4 - bias.ndim) + bias.shape)
  operands = (q, k, v, q_segment_ids, kv_segment_ids, bias)
  static = dict(causal=causal, dropout_rate=dropout_rate, dropout_rng=dropout_rng)
  if name != 'auto':
    reason = _refusal(name, q, k, dropout, relative_values)
    if reason:
      raise ValueError(f'attention implementation {name!r} does not support {reason}; use '
                       "'xla' or 'auto'")
    return _named_call(name, interpret, static, relative_values)(*operands)
  choices = auto_choices(q, k, dropout=dropout, relative_values=relative_values)
  branches = {platform: _kernel_call(choice, False, static)
              for platform, choice in choices.items() if choice != 'xla'}
  extra = {} if relative_values is None else {'relative_values': relative_values}
  default = _kernel_call('xla', False, static, **extra)
  if not branches:
    return default(*operands)
  return jax.lax.platform_dependent(
      *operands, default=default,
      **{platform: _across_the_mesh(call, operands, _ATTENTION_AXES, _ROWS)
         for platform, call in branches.items()})


# Logical axes of `attention`'s operands and output; the mesh splits rows and heads.
_ROWS = ('batch', None, 'heads', None)
_ATTENTION_AXES = (_ROWS, _ROWS, _ROWS, ('batch', None), ('batch', None),
                   ('batch', 'heads', None, None))


def _kernel_call(name: str, interpret: bool, static: dict, **extra) -> Callable[..., Array]:
  """The implementation as a function of the array operands of `attention`."""
  if name != 'xla' and not static['dropout_rate'] and not extra:
    return functools.partial(_staged_kernel, name=name, interpret=interpret,
                             causal=static['causal'])

  def call(q, k, v, q_segment_ids, kv_segment_ids, bias):
    return _IMPLEMENTATIONS[name].fn(q, k, v, q_segment_ids=q_segment_ids,
                                     kv_segment_ids=kv_segment_ids, bias=bias,
                                     interpret=interpret, **static, **extra)
  return call


@functools.partial(jax.jit, static_argnames=('name', 'interpret', 'causal'))
def _staged_kernel(q, k, v, q_segment_ids, kv_segment_ids, bias, *, name: str,
                   interpret: bool, causal: bool) -> Array:
  """A kernel call, jitted so that staging it again for the same shapes (every layer of a
  stack, every platform branch of 'auto' in every compile) reuses its trace."""
  return _IMPLEMENTATIONS[name].fn(q, k, v, q_segment_ids=q_segment_ids,
                                   kv_segment_ids=kv_segment_ids, bias=bias, causal=causal,
                                   dropout_rate=0.0, dropout_rng=None, interpret=interpret)


def _named_call(name: str, interpret: bool, static: dict,
                relative_values: Optional[tuple[Array, Array]]) -> Callable[..., Array]:
  """A named kernel: native in a process on its platform, interpreted in a CPU process (or
  on its own platform with `interpret`), else an error: Pallas' TPU interpreter runs on CPUs
  alone, and cuDNN has none. (A program lowered for another platform than the process's
  gets its kernel through 'auto'.)"""
  impl = _IMPLEMENTATIONS[name]
  if impl.platform is None:
    extra = {} if relative_values is None else {'relative_values': relative_values}
    return _kernel_call(name, interpret, static, **extra)
  platform = process_platform()
  if impl.platform == platform and not interpret:
    return _kernel_call(name, False, static)
  if not impl.interpretable or platform not in (impl.platform, 'cpu'):
    raise ValueError(f'attention implementation {name!r} runs only on {impl.platform} '
                     "(or interpreted on a CPU) and this process is on "
                     f"{platform}; use 'auto' or 'xla'")
  return _kernel_call(name, True, static)


def process_platform() -> str:
  """The lowering platform of this process's devices: 'tpu', 'cuda', 'rocm' or 'cpu'."""
  backend = jax.default_backend()
  if backend != 'gpu':
    return backend
  return 'rocm' if 'rocm' in jax.devices()[0].client.platform_version else 'cuda'


def _across_the_mesh(call: Callable[..., Array], operands, operand_axes,
                     out_axes) -> Callable[..., Array]:
  """`call` under shard_map over the mesh the model runs in (`jax.set_mesh`): each device
  computes its own batch rows and heads, since XLA cannot partition a kernel's custom call.

  `operand_axes` name each operand's axes ('batch', 'heads' or None); the mesh axes follow
  the logical rules of `nn.logical_axis_rules`. An axis is split only where it is longer
  than 1 (a broadcast bias) and divides evenly; every other axis, lengths included, stays
  whole on each device.
  """
  mesh = jax.sharding.get_abstract_mesh()
  if mesh.empty or mesh.size == 1:
    return call
  mesh_axes = dict(zip(('batch', 'heads'), nn.logical_to_mesh_axes(('batch', 'heads'))))

  def split(logical, size):
    axes = mesh_axes.get(logical)
    named = () if axes is None else (axes,) if isinstance(axes, str) else tuple(axes)
    parts = 1
    for axis in named:
      parts *= mesh.shape[axis]
    return axes if size > 1 and size % parts == 0 else None

  def spec(array, axes):
    if array is None:
      return None
    return jax.P(*(split(logical, size) for logical, size in zip(axes, array.shape)))

  in_specs = tuple(spec(array, axes) for array, axes in zip(operands, operand_axes))
  batch_size, heads = (operands[0].shape[out_axes.index(name)] for name in ('batch', 'heads'))
  out_spec = jax.P(*(split(name, batch_size if name == 'batch' else heads)
                     if name else None for name in out_axes))
  return jax.shard_map(call, in_specs=in_specs, out_specs=out_spec, check_vma=False)


def _pallas_attention(q: Array, k: Array, v: Array, *, q_segment_ids: Optional[Array],
                      kv_segment_ids: Optional[Array], bias: Optional[Array], causal: bool,
                      dropout_rate: float, dropout_rng: Optional[Array],
                      interpret: bool) -> Array:
  del dropout_rate, dropout_rng  # Calls with active dropout are refused by _flash_unsupported.
  return flash_attention(q, k, v, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids,
                         bias=bias, causal=causal, interpret=interpret)


def _pallas_tpu_attention(q: Array, k: Array, v: Array, *, q_segment_ids: Optional[Array],
                          kv_segment_ids: Optional[Array], bias: Optional[Array],
                          causal: bool, dropout_rate: float, dropout_rng: Optional[Array],
                          interpret: bool) -> Array:
  del dropout_rate, dropout_rng  # Calls with active dropout are refused by _flash_unsupported.
  return tpu_flash_attention(q, k, v, q_segment_ids=q_segment_ids,
                             kv_segment_ids=kv_segment_ids, bias=bias, causal=causal,
                             interpret=interpret)


def _cudnn_attention(q: Array, k: Array, v: Array, *, q_segment_ids: Optional[Array],
                     kv_segment_ids: Optional[Array], bias: Optional[Array], causal: bool,
                     dropout_rate: float, dropout_rng: Optional[Array],
                     interpret: bool) -> Array:
  """cuDNN's fused attention; segment ids become its mask, and queries that see no key are
  zeroed (cuDNN averages their masked values)."""
  del dropout_rate, dropout_rng, interpret
  mask = None
  if q_segment_ids is not None or kv_segment_ids is not None:
    mask = attention_mask(q_segment_ids, kv_segment_ids, q.shape[0], q.shape[1], k.shape[1],
                          False)[:, None]
  if bias is not None:
    bias = jnp.reshape(bias, (1,) * (4 - bias.ndim) + bias.shape).astype(q.dtype)
  out = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, is_causal=causal,
                                     implementation='cudnn')
  if mask is None:
    return out
  batch, q_length = q.shape[:2]
  ones = lambda length: jnp.ones((batch, length), jnp.int32)  # noqa: E731
  visible = queries_with_a_key(
      ones(q_length) if q_segment_ids is None else q_segment_ids.astype(jnp.int32),
      ones(k.shape[1]) if kv_segment_ids is None else kv_segment_ids.astype(jnp.int32),
      causal)
  return jnp.where(visible[:, :, None, None], out, jnp.zeros((), out.dtype))


def _flash_unsupported(max_head_dim: int, q: Array, k: Array, dropout: bool) -> Optional[str]:
  del k
  if dropout:
    return 'attention dropout (TransformerConfig.attention_dropout_rate > 0 in training)'
  if q.shape[-1] > max_head_dim:
    return f'head_dim {q.shape[-1]} (at most {max_head_dim})'
  return None


def _cudnn_unsupported(q: Array, k: Array, dropout: bool) -> Optional[str]:
  if q.dtype not in (jnp.bfloat16, jnp.float16):
    return f'{q.dtype} inputs (cuDNN attends in bfloat16 or float16)'
  if q.shape[-1] % 8:
    return f'head_dim {q.shape[-1]} (a multiple of 8)'
  return _flash_unsupported(128, q, k, dropout)


def _cudnn_reachable() -> bool:
  """cuDNN is traced only where JAX finds it: in a process on an NVIDIA GPU."""
  return process_platform() == 'cuda'


register_implementation('xla', xla_attention)
register_implementation('pallas_tpu', _pallas_tpu_attention, platform='tpu', auto_priority=1,
                        unsupported=functools.partial(_flash_unsupported, 256))
# Measured on a Hopper GPU (bench/README.md, kernel_roofline.py): from this length both GPU
# kernels beat XLA's attention; at short lengths XLA is as fast or faster.
GPU_AUTO_MIN_LENGTH = 1024
register_implementation('pallas', _pallas_attention, platform='cuda', auto_priority=1,
                        unsupported=functools.partial(_flash_unsupported, 256),
                        auto_min_length=GPU_AUTO_MIN_LENGTH)
register_implementation('cudnn', _cudnn_attention, platform='cuda', auto_priority=2,
                        is_available=_cudnn_reachable, unsupported=_cudnn_unsupported,
                        interpretable=False, auto_min_length=GPU_AUTO_MIN_LENGTH)


# The variant of the decoding-step kernel each platform, and each named kernel, runs.
_DECODE_TARGETS = {'tpu': 'tpu', 'cuda': 'gpu'}
_DECODE_AXES = (_ROWS, ('batch', 'heads', None, None), ('batch', 'heads', None, None),
                ('batch', None, None), ('batch',), ('batch', 'heads', None, None))


def decoding_step_attention(q: Array, key_cache: Array, value_cache: Array, kv_valid: Array,
                            *, bias: Optional[Array] = None,
                            relative_values: Optional[tuple[Array, Array]] = None,
                            implementation: str = 'auto') -> Array:
  """One decoding step's attention to its KV cache (`xla_attention.decoding_step_attention`
  defines the layout and the arguments).

  'auto' stages the ragged decoding kernel (`decode_attention.ragged_decode_attention`) for
  TPUs and NVIDIA GPUs, which reads each cache row only up to its last valid entry, and XLA
  for every other platform and for Shaw's value tables. 'xla' always uses XLA; any other
  kernel name runs the variant of its platform, natively in a process on that platform and
  interpreted elsewhere.
  """
  name = _checked_name(implementation)
  if name == 'xla' or relative_values is not None:
    return _xla.decoding_step_attention(q, key_cache, value_cache, kv_valid, bias=bias,
                                        relative_values=relative_values)
  valid = kv_valid if kv_valid.ndim == 3 else kv_valid[:, None, :]
  operands = (q, key_cache, value_cache, valid, kv_lengths_from_valid(valid), bias)

  def xla(q, key_cache, value_cache, valid, lengths, bias):
    del lengths
    return _xla.decoding_step_attention(q, key_cache, value_cache, valid, bias=bias)

  def ragged(target, interpret):
    return functools.partial(_staged_decode, target=target, interpret=interpret)

  if name != 'auto':
    platform = _IMPLEMENTATIONS[name].platform
    if platform is None:
      return xla(*operands)
    return ragged(_DECODE_TARGETS[platform], platform != process_platform())(*operands)
  return jax.lax.platform_dependent(
      *operands, default=xla,
      **{platform: _across_the_mesh(ragged(target, False), operands, _DECODE_AXES, _ROWS)
         for platform, target in _DECODE_TARGETS.items()})


@functools.partial(jax.jit, static_argnames=('target', 'interpret'))
def _staged_decode(q, key_cache, value_cache, valid, lengths, bias, *, target: str,
                   interpret: bool) -> Array:
  """The decoding kernel, jitted so that staging it again for the same shapes (every layer,
  every platform branch of 'auto', every decoding compile) reuses its trace."""
  return ragged_decode_attention(q, key_cache, value_cache, valid, lengths, bias=bias,
                                 target=target, interpret=interpret)
