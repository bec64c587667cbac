"""Learned absolute positions: a table [max_length, d] drawn from N(0, 0.02^2), a row of
which is added to each embedded token."""

from collections.abc import Mapping
from typing import Any

import flax.linen as nn
import numpy as np

from t5x_mt.model import parameter_layout
from t5x_mt.model.position_embeddings.base import Array
from t5x_mt.model.position_embeddings.base import PositionEmbedding


class LearnedPositions(PositionEmbedding):
  name = 'learned'

  def table(self, module: nn.Module, rows: int, features: int, param_dtype: Any) -> Array:
    return module.param(
        parameter_layout.POSITION_TABLE,
        nn.with_logical_partitioning(nn.initializers.normal(stddev=0.02), (None, 'embed')),
        (rows, features), param_dtype)

  def exported_table(self, stack_params: Mapping[str, Any], rows: int,
                     features: int) -> np.ndarray:
    del rows, features  # The table has the rows and features the model was built with.
    return stack_params[parameter_layout.POSITION_EMBEDDING][parameter_layout.POSITION_TABLE]


LEARNED = LearnedPositions()
