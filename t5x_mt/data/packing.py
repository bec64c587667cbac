"""Examples to model rows in NumPy, as seqio's tf.data feature converter makes them.

The Grain input pipeline (`grain_pipeline`) feeds the same rows as the seqio path
(`input_pipeline`, `DirectionEncDecFeatureConverter`) without TensorFlow, so every step of
seqio's conversion is repeated here exactly:
- each feature is trimmed to its length; a sequence that ends with EOS keeps it
  (seqio's `append_eos_after_trim`: the first length - 1 tokens, then EOS);
- packing takes the examples in chunks of max(feature lengths) consecutive examples
  (seqio's `trim_and_pack_dataset` packs each padded batch of that many on its own) and
  fills rows greedily in order: an example that does not fit beside the row's others
  closes the row and starts the next; a chunk's last row closes with the chunk;
- segment ids count the examples of a row from 1 on its non-padding tokens; positions
  count from 0 within each example; decoder inputs are the targets shifted right by one
  within each example, 0 where one starts.
Tests compare these rows with seqio's on the same examples.
"""

from collections.abc import Mapping, Sequence

import numpy as np

Example = Mapping[str, np.ndarray]
Row = dict[str, np.ndarray]

EOS_ID = 1
# What is packed: the task features, each with the length it is trimmed and packed to.
PACKED_FEATURES = ('inputs', 'targets', 'targets_direction')
# Sequences that end with EOS: trimmed to their first length - 1 tokens and EOS.
ENDS_WITH_EOS = ('inputs', 'targets')


def feature_lengths(inputs_length: int, targets_length: int) -> dict[str, int]:
  """Each packed feature's length; the direction feature is packed like the targets."""
  return {'inputs': inputs_length, 'targets': targets_length,
          'targets_direction': targets_length}


def trimmed(example: Example, lengths: Mapping[str, int]) -> dict[str, np.ndarray]:
  """The example's packed features at most their lengths long, EOS kept at the end."""
  out = {}
  for name in PACKED_FEATURES:
    value = np.asarray(example[name], np.int32)
    length = lengths[name]
    if value.shape[0] > length:
      value = value[:length]
      if name in ENDS_WITH_EOS and length:
        value = np.concatenate([value[:-1], [EOS_ID]]).astype(np.int32)
    out[name] = value
  return out


def chunk_size(lengths: Mapping[str, int], pack: bool) -> int:
  """How many consecutive examples are packed together: seqio's padded batch."""
  return max(lengths.values()) if pack else 1


def pack_chunk(examples: Sequence[Example], lengths: Mapping[str, int]) -> list[Row]:
  """One chunk of trimmed examples packed into rows: the task features with their
  `_segment_ids` and `_positions`, each as long as its feature."""
  rows, parts = [], {name: [] for name in PACKED_FEATURES}
  for example in examples:
    # seqio's packer reads each sequence back from a zero-padded batch: its non-zero count.
    tokens = {name: example[name][:np.count_nonzero(example[name])] for name in PACKED_FEATURES}
    fits = all(sum(len(part) for part in parts[name]) + len(tokens[name]) <= lengths[name]
               for name in PACKED_FEATURES)
    if not fits:
      rows.append(_packed_row(parts, lengths))
      parts = {name: [] for name in PACKED_FEATURES}
    for name in PACKED_FEATURES:
      parts[name].append(tokens[name])
  rows.append(_packed_row(parts, lengths))
  return rows


def _packed_row(parts: Mapping[str, list[np.ndarray]], lengths: Mapping[str, int]) -> Row:
  row = {}
  for name, sequences in parts.items():
    length = lengths[name]
    tokens = np.zeros(length, np.int32)
    positions = np.zeros(length, np.int32)
    used = sum(len(sequence) for sequence in sequences)
    if sequences and used:
      tokens[:used] = np.concatenate(sequences)
      positions[:used] = np.concatenate([np.arange(len(s), dtype=np.int32) for s in sequences])
    starts = np.cumsum(positions == 0, dtype=np.int32)
    row[name] = tokens
    row[f'{name}_positions'] = positions
    row[f'{name}_segment_ids'] = starts * (tokens != 0).astype(np.int32)
  return row


def padded_row(example: Example, lengths: Mapping[str, int]) -> Row:
  """One trimmed example alone in a row, zero-padded: seqio's rows without packing."""
  row = {}
  for name in PACKED_FEATURES:
    value = np.zeros(lengths[name], np.int32)
    value[:len(example[name])] = example[name]
    row[name] = value
  return row


def _shifted_right(values: np.ndarray) -> np.ndarray:
  shifted = np.zeros_like(values)
  shifted[1:] = values[:-1]
  return shifted


def model_features(row: Row, pack: bool) -> Row:
  """A row as the model reads it: `DirectionEncDecFeatureConverter`'s features."""
  targets = row['targets']
  decoder_inputs = _shifted_right(targets)
  features = {
      'encoder_input_tokens': row['inputs'],
      'decoder_target_tokens': targets,
      'decoder_loss_weights': (targets != 0).astype(np.int32),
      'decoder_direction_ids': row['targets_direction'],
  }
  if pack:
    segments = row['targets_segment_ids']
    decoder_inputs = decoder_inputs * (segments == _shifted_right(segments))
    features.update(encoder_segment_ids=row['inputs_segment_ids'],
                    decoder_segment_ids=segments,
                    encoder_positions=row['inputs_positions'],
                    decoder_positions=row['targets_positions'])
  features['decoder_input_tokens'] = decoder_inputs.astype(np.int32)
  return features


def chunk_rows(examples: Sequence[Example], lengths: Mapping[str, int], pack: bool) -> list[Row]:
  """A chunk of examples (`chunk_size` of them, fewer at the end of a pass) as model rows."""
  cut = [trimmed(example, lengths) for example in examples]
  rows = pack_chunk(cut, lengths) if pack else [padded_row(example, lengths) for example in cut]
  return [model_features(row, pack) for row in rows]


def stacked(rows: Sequence[Row]) -> Row:
  """Rows as one batch: each feature's rows stacked."""
  return {name: np.stack([row[name] for row in rows]) for name in rows[0]}
