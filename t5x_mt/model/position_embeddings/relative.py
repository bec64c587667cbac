"""Shaw et al.'s (2018) relative positions: each self-attention layer that has them learns
a key table a^K and a value table a^V of 2k + 1 rows (k = `relative_max_distance`) shared
by its heads; query i and key j use row clip(j - i, -k, k) + k, the logits gain
q_i . a^K_ij / sqrt(d) and the output sum_j p_ij a^V_ij (`relative_values = False`: key
tables only). The encoder's self-attention has them and no absolute positions; the
decoder keeps sinusoids unless `relative_in_decoder`, which gives its self-attention
tables of its own. `layers.MultiHeadAttention` learns and applies the tables.

Model FLOPs per self-attention layer over L positions, with T tables (2 with values, 1
keys only) of R = 2k + 1 rows and A = heads * head_dim: 2 * T * A * R * L, what the shared
tables need (every query times every key row; each query's probabilities, summed per row,
times every value row).
"""

from typing import Any

from t5x_mt.core.errors import UserError
from t5x_mt.model.position_embeddings.base import FieldName
from t5x_mt.model.position_embeddings.base import PositionEmbedding
from t5x_mt.model.position_embeddings.sinusoidal import SINUSOIDS

# Attention implementations that compute the value tables' term (no fused kernel holds
# the probabilities it needs; 'auto' picks XLA for it).
VALUE_TABLE_IMPLEMENTATIONS = ('auto', 'xla')


class RelativePositions(PositionEmbedding):
  name = 'relative'
  absolute = False
  exclusive_settings = ('relative_in_decoder',)

  def for_stack(self, config: Any, stack: str) -> PositionEmbedding:
    if stack == 'decoder' and not config.relative_in_decoder:
      return SINUSOIDS
    return self

  def check(self, config: Any, field_name: FieldName) -> None:
    if config.relative_values and (config.attention_implementation
                                   not in VALUE_TABLE_IMPLEMENTATIONS):
      raise UserError(f"{field_name('attention_implementation')}: "
                      f'{config.attention_implementation!r} has no relative value tables; '
                      f"use {' or '.join(map(repr, VALUE_TABLE_IMPLEMENTATIONS))}, or set "
                      f"{field_name('relative_values')} = False")

  def relative_distance(self, config: Any) -> int:
    return config.relative_max_distance

  def describe(self, config: Any) -> str:
    return f'{self.name} (k={config.relative_max_distance})'

  def self_attention_flops(self, config: Any, length: int) -> int:
    tables = 2 if config.relative_values else 1
    rows = 2 * config.relative_max_distance + 1
    return 2 * tables * config.num_heads * config.head_dim * rows * length

  def ctranslate2_settings(self, config: Any) -> dict[str, Any]:
    # CTranslate2's relative_position tables: the same rows, picked the same way; a zero
    # value table stands in for keys alone.
    del config
    return {'relative_position': True}


RELATIVE = RelativePositions()
