"""What a position embedding is: how each stack of the model learns where its tokens are.

A variant is registered by name (`t5x_mt.model.position_embeddings`) and answers, for
every module that depends on it, what that module needs:
- which variant positions each stack (`for_stack`: relative positions leave the decoder
  sinusoids unless configured otherwise);
- an absolute table added to the embedded tokens (`absolute`, `table`), which
  `layers.PositionEmbedding` reads row by row, and its values for an export
  (`exported_table`) or, where it is fixed, to compare with a saved one (`fixed_table`);
- the distance k of relative tables in self-attention (`relative_distance`), which
  `layers.MultiHeadAttention` learns and attends with;
- the model FLOPs it adds to a self-attention layer (`self_attention_flops`);
- its CTranslate2 form (`ctranslate2_settings`) or why it has none (`ctranslate2_refusal`);
- the Hugging Face model types built with it (`huggingface_model_types`);
- the TransformerConfig settings it checks (`check`) and the switches only it reads
  (`exclusive_settings`), which any other variant refuses.
"""

from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

Array = jax.Array
# The name of a TransformerConfig field as a gin binding writes it.
FieldName = Callable[[str], str]


class PositionEmbedding:
  """A registered position embedding; by default an absolute, fixed table, which a subclass
  gives by `fixed_table`. Subclasses set `name` and override what differs."""
  name: ClassVar[str]  # What TransformerConfig.position_embedding (POSITION_EMBEDDING) says.
  absolute: ClassVar[bool] = True  # A table added to the embedded tokens.
  huggingface_model_types: ClassVar[tuple[str, ...]] = ()
  ctranslate2_refusal: ClassVar[str | None] = None
  # TransformerConfig booleans that only this variant reads: set under another variant,
  # they would silently do nothing, so they are refused.
  exclusive_settings: ClassVar[tuple[str, ...]] = ()

  def for_stack(self, config: Any, stack: str) -> 'PositionEmbedding':
    """The variant that positions `stack` ('encoder' or 'decoder') under `config`."""
    del config, stack
    return self

  def check(self, config: Any, field_name: FieldName) -> None:
    """A UserError for settings of `config` that do not hold with this variant."""
    del config, field_name

  def fixed_table(self, rows: int, features: int) -> np.ndarray | None:
    """The fixed [rows, features] table of an absolute variant with no parameters; None
    for one that learns its table or has none."""
    del rows, features
    return None

  def table(self, module: nn.Module, rows: int, features: int, param_dtype: Any) -> Array:
    """The [rows, features] table `module` (a `layers.PositionEmbedding`) adds a row of
    to each token: a parameter it creates, or the fixed table."""
    del module, param_dtype
    return jnp.asarray(self.fixed_table(rows, features))

  def exported_table(self, stack_params: Mapping[str, Any], rows: int,
                     features: int) -> np.ndarray:
    """The table's values for a serving format: read from `stack_params` (the stack's
    parameters), or the fixed table."""
    del stack_params
    return self.fixed_table(rows, features)

  def relative_distance(self, config: Any) -> int:
    """Shaw's k of the relative tables in a self-attention layer; 0 for none."""
    del config
    return 0

  def describe(self, config: Any) -> str:
    """The variant in a few words, as an export's description names it."""
    del config
    return self.name

  def self_attention_flops(self, config: Any, length: int) -> int:
    """Model FLOPs the variant adds to one self-attention layer over `length` positions;
    absolute tables are added to the embeddings, which FLOP counts leave out."""
    del config, length
    return 0

  def ctranslate2_settings(self, config: Any) -> dict[str, Any]:
    """Keyword arguments of CTranslate2's encoder or decoder spec for a stack this variant
    positions (asked only where `ctranslate2_refusal` is None); an absolute table goes in
    as the spec's position encodings."""
    del config
    return {}
