"""Post-LN with the bottom-to-top connection (Takase et al. 2023, NT5's): post-LN whose
last sublayer also adds the layer's input x before its norm, a path from the bottom of each
layer to its top that no norm but the last crosses.

  encoder: h = LN(x + Attn(x)), x' = LN(h + FFN(h) + x)
  decoder: h1 = LN(x + SelfAttn(x)), h2 = LN(h1 + CrossAttn(h1)), x' = LN(h2 + FFN(h2) + x)

Its initialisation multiplies every weight of a stack's layers other than norms and biases
by N^-1/2, N the stack's depth. The norms sit where post-LN's do and have their names, so
either placement starts from the other's checkpoints.
"""

from collections.abc import Sequence

from t5x_mt.model.norm_placements.base import Array
from t5x_mt.model.norm_placements.base import Sublayer
from t5x_mt.model.norm_placements.post import PostLN


class PostB2T(PostLN):
  name = 'post_b2t'
  huggingface_model_types = ()
  ctranslate2_refusal = ("B2T adds each layer's input to its last sublayer's residual sum, "
                         "and CTranslate2's post-LN layers have no such connection")

  def layer(self, x: Array, sublayers: Sequence[Sublayer]) -> Array:
    *below, last = sublayers
    h = super().layer(x, below)
    return last.norm(h + last.dropout(last.apply(h)) + x)

  def init_scale(self, depth: int) -> float:
    return depth ** -0.5 if depth else 1.0


POST_B2T = PostB2T()
