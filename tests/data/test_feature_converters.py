"""Tests for t5x_mt.data.feature_converters: direction ids packed along with the targets."""

import numpy as np
import seqio
import tensorflow as tf

from t5x_mt.data.feature_converters import DirectionEncDecFeatureConverter

LENGTHS = {'inputs': 8, 'targets': 8, 'targets_direction': 8}
# Two examples of different directions (12356 is eng_Latn-hau_Latn; any positive id works).
EXAMPLES = [
    {'inputs': [70, 5, 6, 1], 'targets': [70, 7, 1], 'targets_direction': [12356] * 3},
    {'inputs': [51, 8, 1], 'targets': [51, 9, 10, 11, 1], 'targets_direction': [43] * 5},
]


def _dataset(with_direction: bool = True) -> tf.data.Dataset:
  def generator():
    for example in EXAMPLES:
      yield {name: np.array(value, np.int32) for name, value in example.items()
             if with_direction or name != 'targets_direction'}
  names = ('inputs', 'targets') + (('targets_direction',) if with_direction else ())
  return tf.data.Dataset.from_generator(
      generator, output_signature={name: tf.TensorSpec([None], tf.int32) for name in names})


def _as_lists(dataset: tf.data.Dataset) -> list[dict[str, list[int]]]:
  return [{name: value.tolist() for name, value in example.items()}
          for example in dataset.as_numpy_iterator()]


def test_packed_row_carries_each_segments_direction():
  [row] = _as_lists(DirectionEncDecFeatureConverter(pack=True)(_dataset(), LENGTHS))
  assert row['decoder_target_tokens'] == [70, 7, 1, 51, 9, 10, 11, 1]
  assert row['decoder_segment_ids'] == [1, 1, 1, 2, 2, 2, 2, 2]
  assert row['decoder_direction_ids'] == [12356, 12356, 12356, 43, 43, 43, 43, 43]
  assert row['encoder_input_tokens'] == [70, 5, 6, 1, 51, 8, 1, 0]


def test_padding_has_direction_zero():
  short = {'inputs': 8, 'targets': 10, 'targets_direction': 10}
  [row] = _as_lists(DirectionEncDecFeatureConverter(pack=True)(_dataset(), short))
  assert row['decoder_segment_ids'] == [1, 1, 1, 2, 2, 2, 2, 2, 0, 0]
  assert row['decoder_direction_ids'] == [12356] * 3 + [43] * 5 + [0, 0]
  unpacked = _as_lists(DirectionEncDecFeatureConverter(pack=False)(_dataset(), LENGTHS))
  assert [r['decoder_direction_ids'] for r in unpacked] == [
      [12356] * 3 + [0] * 5, [43] * 5 + [0] * 3]


def test_other_features_are_exactly_seqios():
  for pack in (True, False):
    ours = _as_lists(DirectionEncDecFeatureConverter(pack=pack)(_dataset(), LENGTHS))
    seqios = _as_lists(seqio.EncDecFeatureConverter(pack=pack)(
        _dataset(with_direction=False), {'inputs': 8, 'targets': 8}))
    for row, reference in zip(ours, seqios, strict=True):
      assert set(row) == set(reference) | {'decoder_direction_ids'}
      assert {name: row[name] for name in reference} == reference


def test_model_feature_lengths_follow_the_targets():
  lengths = DirectionEncDecFeatureConverter(pack=True).get_model_feature_lengths(
      {'inputs': 16, 'targets': 12, 'targets_direction': 12})
  assert lengths['decoder_direction_ids'] == lengths['decoder_target_tokens'] == 12
  assert lengths['encoder_input_tokens'] == 16
