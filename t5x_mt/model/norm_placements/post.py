"""Post-LN (Vaswani et al. 2017, Marian's): every sublayer F maps x to
LN(x + Dropout(F(x))), and no stack ends in a norm of its own. An encoder layer is
h = LN(x + Attn(x)), x' = LN(h + FFN(h))."""

from collections.abc import Sequence
from typing import Any

from t5x_mt.model.norm_placements.base import Array
from t5x_mt.model.norm_placements.base import NormPlacement
from t5x_mt.model.norm_placements.base import Sublayer


class PostLN(NormPlacement):
  name = 'post'
  norm_prefix = 'post'
  final_norm = False
  huggingface_model_types = ('marian',)  # OPUS-MT.

  def layer(self, x: Array, sublayers: Sequence[Sublayer]) -> Array:
    for sublayer in sublayers:
      x = sublayer.norm(x + sublayer.dropout(sublayer.apply(x)))
    return x

  def ctranslate2_settings(self) -> dict[str, Any]:
    return {'pre_norm': False}


POST_LN = PostLN()
