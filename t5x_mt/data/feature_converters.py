"""seqio's encoder-decoder feature converter, extended with a per-token direction id.

Per-direction training losses (and, later, DRO's per-group losses) need to know which
translation direction every target token belongs to, also inside packed rows where
several directions share one row. seqio refuses pass-through features when packing, so the
direction travels as a sequence feature `targets_direction` that is packed exactly like
`targets` and reaches the model as `decoder_direction_ids` (0 on padding).
"""

from collections.abc import Mapping

import seqio
import tensorflow as tf


class DirectionEncDecFeatureConverter(seqio.EncDecFeatureConverter):
  """EncDecFeatureConverter that also packs and emits `decoder_direction_ids`."""

  TASK_FEATURES = {
      **seqio.EncDecFeatureConverter.TASK_FEATURES,
      'targets_direction': seqio.FeatureConverter.FeatureSpec(dtype=tf.int32),
  }
  MODEL_FEATURES = {
      **seqio.EncDecFeatureConverter.MODEL_FEATURES,
      'decoder_direction_ids': seqio.FeatureConverter.FeatureSpec(dtype=tf.int32),
  }

  def _convert_example(self, features: Mapping[str, tf.Tensor]) -> Mapping[str, tf.Tensor]:
    converted = dict(super()._convert_example(features))
    converted['decoder_direction_ids'] = features['targets_direction']
    return converted

  def get_model_feature_lengths(self, task_feature_lengths: Mapping[str, int]
                                ) -> Mapping[str, int]:
    lengths = dict(super().get_model_feature_lengths(task_feature_lengths))
    lengths['decoder_direction_ids'] = task_feature_lengths['targets']
    return lengths
