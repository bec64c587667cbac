"""What a norm placement is: where a layer's LayerNorms sit around its residual sublayers.

A placement is registered by name (`t5x_mt.model.norm_placements`) and answers, for every
module that depends on it, what that module needs: how a layer runs its sublayers
(`network`), the names of the norms and whether each stack ends in one of its own
(`parameter_layout`), what the initial layer weights are scaled by, its CTranslate2 form or
why it has none (`t5x_mt.export`), and the Hugging Face model types built with it
(`t5x_mt.pretrained`). Norms cost no model FLOPs (`flops`), so placements add none.
"""

from collections.abc import Callable, Sequence
from typing import Any, ClassVar, NamedTuple

import jax

Array = jax.Array


class Sublayer(NamedTuple):
  """One residual sublayer of a layer: what it computes, the norm that goes with it, and
  the dropout on its output before that joins the residual sum."""
  apply: Callable[[Array], Array]
  norm: Callable[[Array], Array]
  dropout: Callable[[Array], Array]


class NormPlacement:
  """A registered way of placing a layer's norms; subclasses set the class attributes and
  implement `layer`."""
  name: ClassVar[str]  # What TransformerConfig.layer_norm (the macro LAYER_NORM) says.
  # A sublayer's norm is named '<norm_prefix>_<sublayer>_norm' (parameter_layout), so that
  # a checkpoint restores only into a placement whose norms sit where its own did.
  norm_prefix: ClassVar[str]
  final_norm: ClassVar[bool]  # Whether each stack ends in a LayerNorm of its own.
  # transformers' model types whose layers place their norms this way.
  huggingface_model_types: ClassVar[tuple[str, ...]] = ()
  # Why CTranslate2 cannot compute the placement exactly; None where it can.
  ctranslate2_refusal: ClassVar[str | None] = None

  def layer(self, x: Array, sublayers: Sequence[Sublayer]) -> Array:
    """The layer's output for input `x`: each sublayer in order, with its norm and its
    residual connection."""
    raise NotImplementedError

  def init_scale(self, depth: int) -> float:
    """What the initial weights (other than norms and biases) of a stack of `depth`
    layers are multiplied by."""
    del depth
    return 1.0

  def ctranslate2_settings(self) -> dict[str, Any]:
    """Keyword arguments of CTranslate2's encoder and decoder specs that describe the
    placement (asked only where `ctranslate2_refusal` is None)."""
    raise NotImplementedError
