"""Deduplication keys, a Bloom filter, and decontamination against evaluation sets.

Duplicates are found on normalised text, so that copies differing only in case, spacing,
punctuation or Unicode composition count as one: `normalised_key` keeps NFKC-folded
letters and digits. Keys are 128-bit BLAKE2b digests, small enough to hold hundreds of
millions in a set and to shuffle between Beam workers.
"""

import dataclasses
import hashlib
import math
import os
import unicodedata
from pathlib import Path
from typing import ClassVar, Iterable, Sequence

import numpy as np

from t5x_mt.data import readers
from t5x_mt.data.cleaning.steps import Keep
from t5x_mt.data.cleaning.steps import Step
from t5x_mt.data.cleaning.steps import register_step
from t5x_mt.core.errors import UserError

KEY_BYTES = 16


def normalised_text(text: str) -> str:
  """NFKC, case-folded, letters and digits only: what makes two sentences 'the same'."""
  folded = unicodedata.normalize('NFKC', text).casefold()
  return ''.join(char for char in folded if char.isalnum())


def text_key(text: str) -> bytes:
  """The 128-bit digest of a sentence's normalised text."""
  return hashlib.blake2b(normalised_text(text).encode('utf-8'), digest_size=KEY_BYTES).digest()


def pair_key(src: str, tgt: str) -> bytes:
  """The 128-bit digest of a normalised pair (the source/target boundary is kept)."""
  joined = normalised_text(src) + '\x00' + normalised_text(tgt)
  return hashlib.blake2b(joined.encode('utf-8'), digest_size=KEY_BYTES).digest()


def bloom_size(capacity: int, error_rate: float) -> tuple[int, int]:
  """(bits m, hashes k) of a Bloom filter holding `capacity` items at false-positive
  rate `error_rate`: m = -n ln p / (ln 2)^2 and k = (m / n) ln 2, rounded up."""
  if capacity < 1:
    raise UserError(f'Bloom filter capacity must be at least 1, not {capacity}')
  if not 0 < error_rate < 1:
    raise UserError(f'Bloom filter error rate must be in (0, 1), not {error_rate}')
  bits = math.ceil(-capacity * math.log(error_rate) / math.log(2) ** 2)
  hashes = max(1, math.ceil(bits / capacity * math.log(2)))
  return bits, hashes


class BloomFilter:
  """A set of 128-bit keys in m bits with k probes: never a false negative, false
  positives at rate ~p up to `capacity` items.

  The k bit positions of a key are h1 + i * h2 mod m (Kirsch-Mitzenmacher double hashing)
  from the key's two 64-bit halves, so a key is hashed once. Batches are vectorised with
  NumPy; `add_new` answers "was this key new?" for a batch, in order, as a set would.
  """

  def __init__(self, capacity: int, error_rate: float):
    self.capacity, self.error_rate = capacity, error_rate
    self.num_bits, self.num_hashes = bloom_size(capacity, error_rate)
    self.bits = np.zeros((self.num_bits + 7) // 8, dtype=np.uint8)
    self._probe_steps = np.arange(self.num_hashes, dtype=np.uint64)

  @property
  def memory_bytes(self) -> int:
    return self.bits.nbytes

  def _positions(self, keys: Sequence[bytes]) -> np.ndarray:
    """[len(keys), k] bit positions."""
    halves = np.frombuffer(b''.join(keys), dtype=np.uint64).reshape(len(keys), 2)
    first, second = halves[:, :1], halves[:, 1:] | np.uint64(1)
    with np.errstate(over='ignore'):
      return (first + self._probe_steps * second) % np.uint64(self.num_bits)

  def contains(self, keys: Sequence[bytes]) -> np.ndarray:
    """Boolean per key: possibly present (True) or certainly absent (False)."""
    if not keys:
      return np.zeros(0, dtype=bool)
    positions = self._positions(keys)
    set_bits = (self.bits[positions >> np.uint64(3)] >> (positions & np.uint64(7)).astype(
        np.uint8)) & 1
    return set_bits.all(axis=1)

  def add(self, keys: Sequence[bytes]) -> None:
    if not keys:
      return
    positions = self._positions(keys).ravel()
    np.bitwise_or.at(self.bits, positions >> np.uint64(3),
                     np.left_shift(1, positions & np.uint64(7)).astype(np.uint8))

  def add_new(self, keys: Sequence[bytes]) -> list[bool]:
    """Adds a batch of keys; True for each key not seen before (in this batch or earlier)."""
    seen_before = self.contains(keys)
    new, first_in_batch = [], set()
    for key, present in zip(keys, seen_before):
      is_new = not present and key not in first_in_batch
      first_in_batch.add(key)
      new.append(is_new)
    self.add([key for key, is_new in zip(keys, new) if is_new])
    return new


def evaluation_keys(files: Iterable[str | os.PathLike[str]]) -> set[bytes]:
  """The normalised-text keys of every line of `files` (evaluation sets to keep out)."""
  keys = set()
  for path in files:
    keys.update(text_key(line) for line in readers.read_lines(path) if line.strip())
  return keys


def flores_evaluation_files(root: str | os.PathLike[str] | None = None) -> list[Path]:
  """FLORES-200 dev and devtest files under `root` (default: the shared data folder's
  flores200/), every language; devtest is included wherever it exists."""
  if root is None:
    shared = readers.shared_data_dir()
    if shared is None:
      raise UserError('decontamination: no evaluation files given and the shared data '
                      'folder is absent (set decontaminate.files)')
    root = shared / 'flores200'
  root = Path(root)
  files = sorted(root.glob('dev/*.dev')) + sorted(root.glob('devtest/*.devtest'))
  if not files:
    raise UserError(f'{root}: no FLORES-200 dev/*.dev or devtest/*.devtest files')
  return files


@register_step
@dataclasses.dataclass
class Decontaminate(Step):
  """TenTrans/M2M-100: drops every pair whose source or target equals (after
  normalisation) a sentence of an evaluation set: `files`, or by default FLORES-200 dev
  and devtest (every language) from the shared data folder."""
  name: ClassVar[str] = 'decontaminate'
  kind: ClassVar[str] = 'filter'
  files: tuple[str, ...] = ()

  def __post_init__(self):
    self.files = tuple(str(path) for path in self.files)
    self._keys: set[bytes] | None = None

  def bind(self, src_lang, tgt_lang) -> Keep:
    if self._keys is None:
      self._keys = evaluation_keys(self.files or flores_evaluation_files())
    keys = self._keys
    return lambda pair: text_key(pair.src) not in keys and text_key(pair.tgt) not in keys
