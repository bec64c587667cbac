"""One attention entry point for the whole model, dispatching to a kernel by name.

Layers call `attention(...)` and never a kernel directly, so a kernel plugs in by
`register_implementation(name, fn, ...)` without touching any caller. Registered:
'xla' (the reference, any backend) and 'pallas' (`flash_attention`: on GPU through
Triton; on CPU the Pallas interpreter, for tests; see flash.py for TPUs). 'auto' picks the
available implementation with the highest priority that supports the call, else 'xla':
'pallas' on GPU, except for attention dropout (which the kernel does not implement) and
single-query decoding steps (a one-row tile would waste the kernel).

`decoding_step_attention` is the attention of a decoding step to its KV cache, which the
layers keep in the layout that step's products read (see its docstring).
"""

import dataclasses
from typing import Callable, Optional, Protocol

import jax

from t5x_mt.kernels.flash import flash_attention
from t5x_mt.kernels.xla_attention import attention_mask
from t5x_mt.kernels.xla_attention import decoding_step_attention
from t5x_mt.kernels.xla_attention import xla_attention

Array = jax.Array

__all__ = ['attention', 'attention_mask', 'decoding_step_attention', 'flash_attention',
           'implementations', 'register_implementation', 'resolve_implementation',
           'xla_attention']


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
  auto_priority: Optional[int]  # None: 'auto' never picks it.
  is_available: Callable[[], bool]
  unsupported: Unsupported


def register_implementation(name: str, fn: AttentionFn, *, auto_priority: Optional[int] = None,
                            is_available: Callable[[], bool] = lambda: True,
                            unsupported: Unsupported = lambda q, k, dropout: None) -> None:
  """Makes `fn` callable as `attention(..., implementation=name)`.

  Args:
    name: the name users put in `TransformerConfig.attention_implementation`.
    fn: the kernel, with the `AttentionFn` signature.
    auto_priority: rank among candidates for 'auto' (higher wins); None to never auto-pick.
    is_available: whether the kernel can run here (e.g. on this backend); checked by 'auto'.
    unsupported: the reason the kernel cannot run a call, or None; 'auto' then falls back
      to 'xla', and naming the kernel explicitly raises a ValueError with the reason.
  """
  if name == 'auto':
    raise ValueError("'auto' is reserved for automatic selection")
  _IMPLEMENTATIONS[name] = _Implementation(fn, auto_priority, is_available, unsupported)


_IMPLEMENTATIONS: dict[str, _Implementation] = {}


def implementations() -> tuple[str, ...]:
  """Registered implementation names, sorted."""
  return tuple(sorted(_IMPLEMENTATIONS))


def resolve_implementation(implementation: str) -> str:
  """Turns 'auto' into a concrete name; raises ValueError for unknown names."""
  if implementation == 'auto':
    candidates = [(impl.auto_priority, name) for name, impl in _IMPLEMENTATIONS.items()
                  if impl.auto_priority is not None and impl.is_available()]
    return max(candidates)[1]
  if implementation not in _IMPLEMENTATIONS:
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
    implementation: a registered name ('xla', ...) or 'auto'.
    interpret: run Pallas kernels in interpret mode (CPU tests); ignored by 'xla'.
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
  name = resolve_implementation(implementation)
  dropout = dropout_rate > 0.0 and dropout_rng is not None
  reason = _IMPLEMENTATIONS[name].unsupported(q, k, dropout)
  if relative_values is not None and name != 'xla':
    reason = 'relative value tables (TransformerConfig.relative_values)'
  if implementation == 'auto' and (reason or q.shape[1] == 1):
    name = 'xla'
  elif reason:
    raise ValueError(f'attention implementation {name!r} does not support {reason}; use '
                     "'xla' or 'auto'")
  fn = _IMPLEMENTATIONS[name].fn
  extra = {} if relative_values is None else {'relative_values': relative_values}
  return fn(q, k, v, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids, bias=bias,
            causal=causal, dropout_rate=dropout_rate, dropout_rng=dropout_rng,
            interpret=interpret, **extra)


def _pallas_attention(q: Array, k: Array, v: Array, *, q_segment_ids: Optional[Array],
                      kv_segment_ids: Optional[Array], bias: Optional[Array], causal: bool,
                      dropout_rate: float, dropout_rng: Optional[Array],
                      interpret: bool) -> Array:
  del dropout_rate, dropout_rng  # Calls with active dropout are refused by _pallas_unsupported.
  return flash_attention(q, k, v, q_segment_ids=q_segment_ids, kv_segment_ids=kv_segment_ids,
                         bias=bias, causal=causal,
                         interpret=interpret or jax.default_backend() == 'cpu')


def _pallas_unsupported(q: Array, k: Array, dropout: bool) -> Optional[str]:
  del k
  if dropout:
    return 'attention dropout (TransformerConfig.attention_dropout_rate > 0 in training)'
  if q.shape[-1] > 256:
    return f'head_dim {q.shape[-1]} (at most 256)'
  return None


register_implementation('xla', xla_attention, auto_priority=0)
register_implementation('pallas', _pallas_attention, auto_priority=1,
                        is_available=lambda: jax.default_backend() == 'gpu',
                        unsupported=_pallas_unsupported)
