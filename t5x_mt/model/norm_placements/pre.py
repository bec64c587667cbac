"""Pre-LN (fairseq's, the WMT systems'): every sublayer F maps x to x + Dropout(F(LN(x))),
and each stack ends in a LayerNorm of its own, since its layers leave their output
unnormalised. An encoder layer is h = x + Attn(LN(x)), x' = h + FFN(LN(h))."""

from collections.abc import Sequence
from typing import Any

from t5x_mt.model.norm_placements.base import Array
from t5x_mt.model.norm_placements.base import NormPlacement
from t5x_mt.model.norm_placements.base import Sublayer


class PreLN(NormPlacement):
  name = 'pre'
  norm_prefix = 'pre'
  final_norm = True
  huggingface_model_types = ('m2m_100',)  # M2M-100 and NLLB-200.

  def layer(self, x: Array, sublayers: Sequence[Sublayer]) -> Array:
    for sublayer in sublayers:
      x = x + sublayer.dropout(sublayer.apply(sublayer.norm(x)))
    return x

  def ctranslate2_settings(self) -> dict[str, Any]:
    return {'pre_norm': True}


PRE_LN = PreLN()
