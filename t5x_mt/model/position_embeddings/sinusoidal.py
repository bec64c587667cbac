"""Fixed sinusoids laid out as tensor2tensor and fairseq do (and M2M-100 and NLLB-200
with them): sines in the first half of the features, cosines in the second, timescales
from 1 to 10^4 spread geometrically over half - 1 steps, 10000^(-i/(d/2 - 1))."""

import numpy as np

from t5x_mt.model.position_embeddings.base import PositionEmbedding

MAX_TIMESCALE = 10000.0


class Sinusoids(PositionEmbedding):
  name = 'sinusoidal'
  huggingface_model_types = ('m2m_100',)

  def timescale_steps(self, half: int) -> int:
    """The steps the timescales of `half` features are spread over."""
    return max(half - 1, 1)

  def fixed_table(self, rows: int, features: int) -> np.ndarray:
    half = features // 2
    position = np.arange(rows, dtype=np.float64)[:, None]
    inv_timescale = np.exp(-np.log(MAX_TIMESCALE) * np.arange(half, dtype=np.float64)
                           / self.timescale_steps(half))
    angles = position * inv_timescale[None, :]
    table = np.zeros((rows, features), np.float32)
    table[:, :half] = np.sin(angles)
    table[:, half:2 * half] = np.cos(angles)
    return table


SINUSOIDS = Sinusoids()
