"""Cached tasks: a recipe's seqio examples, written once to ArrayRecord files, read back
without TensorFlow.

`launch/cache_tasks.py` writes a folder (`task_caching`); `grain_pipeline` trains from it.
The folder holds, per task and split, the examples the seqio task yields in its order,
`<task>/<split>-<k>-of-<n>.array_record`, shard k holding examples k, k + n, k + 2n, ...
(seqio's own sharding of a source), and `<task>/<split>.stats.json`. `cache_info.json`,
written last, says what the cache holds and how it was made: the data settings and the
vocabulary's SHA-256 its examples were made with, each task's corpus, direction, splits
and counts, and the mixtures cached with their rates. A folder without it is not a cache.

An example is its features in one record: for each, in name order, the name, whether it
is token ids (int32) or text, and its bytes. No pickle: reading a cache runs no code of
its writer's.
"""

from collections.abc import Mapping, Sequence
import dataclasses
import hashlib
import json
import struct

import grain
import numpy as np

from t5x_mt.core import files
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.data import corpora
from t5x_mt.data import mixtures

INFO_FILE = 'cache_info.json'
# The vocabularies the examples were made with, and the files corpora keep with a run.
VOCABULARY_FILE, SOURCE_VOCABULARY_FILE = 'vocab.model', 'source_vocab.model'
RUN_FILES = 'run_files'
FORMAT = 1
SPLITS = ('train', 'validation', 'test')
# Text the examples keep beside their ids: a split's pairs, for evaluation.
SOURCE_TEXT, TARGET_TEXT = 'inputs_pretokenized', 'targets_pretokenized'
_IDS, _TEXT = 0, 1
_HEADER = struct.Struct('<HBI')  # name length, kind, value bytes
# Data settings that change the examples or the mixture's rates: the cache records them,
# and a run reading it must have the same.
CACHED_SETTINGS = ('tag_strategy', 'temperature', 'reverse_target', 'sampling_sides')


def encode_example(example: Mapping[str, np.ndarray | bytes | str]) -> bytes:
  """One example's features as one record."""
  parts = []
  for name in sorted(example):
    value = example[name]
    if isinstance(value, str):
      value = value.encode()
    if isinstance(value, bytes):
      kind, data = _TEXT, value
    else:
      kind, data = _IDS, np.asarray(value, '<i4').tobytes()
    key = name.encode()
    parts += [_HEADER.pack(len(key), kind, len(data)), key, data]
  return b''.join(parts)


def decode_example(record: bytes) -> dict[str, np.ndarray | bytes]:
  """The features of a record `encode_example` wrote: ids as int32 arrays, text as bytes."""
  example, offset = {}, 0
  while offset < len(record):
    key_length, kind, size = _HEADER.unpack_from(record, offset)
    offset += _HEADER.size
    name = record[offset:offset + key_length].decode()
    offset += key_length
    data = record[offset:offset + size]
    if len(data) != size or kind not in (_IDS, _TEXT):
      raise ValueError('truncated or unknown feature')
    offset += size
    example[name] = np.frombuffer(data, '<i4').astype(np.int32) if kind == _IDS else data
  return example


def shard_file(task: str, split: str, shard: int, num_shards: int) -> str:
  """A shard's path in the cache, relative to it."""
  return f'{task}/{split}-{shard:05d}-of-{num_shards:05d}.array_record'


def stats_file(task: str, split: str) -> str:
  return f'{task}/{split}.stats.json'


def example_stats(example: Mapping[str, np.ndarray | bytes]) -> dict[str, int]:
  """One example's counts, summed into a split's statistics (`merge_stats`)."""
  inputs, targets = len(example['inputs']), len(example['targets'])
  return {'examples': 1, 'inputs_tokens': inputs, 'targets_tokens': targets,
          'inputs_max_length': inputs, 'targets_max_length': targets}


def merge_stats(stats: Sequence[Mapping[str, int]]) -> dict[str, int]:
  """Statistics of several examples or shards: counts summed, maxima taken."""
  merged: dict[str, int] = {}
  for one in stats:
    for key, value in one.items():
      merged[key] = max(merged.get(key, 0), value) if key.endswith('_max_length') else (
          merged.get(key, 0) + value)
  return merged


def settings_record(data_settings) -> dict:
  """The `CACHED_SETTINGS` of a run's `DataSettings`."""
  return {key: dict(value) if isinstance(value, Mapping) else value
          for key, value in ((key, getattr(data_settings, key)) for key in CACHED_SETTINGS)}


def vocabulary_digest(vocabulary: bytes) -> str:
  return hashlib.sha256(vocabulary).hexdigest()


@dataclasses.dataclass(frozen=True)
class CachedSplit:
  """One split of a cached task: its shards' paths (relative) and example count."""
  shards: tuple[str, ...]
  examples: int


@dataclasses.dataclass(frozen=True)
class CachedTask:
  """A cached task: the corpus direction it reads and its cached splits."""
  name: str
  corpus: str
  direction: Direction
  splits: Mapping[str, CachedSplit]


class TaskCache:
  """A cache folder, checked on opening: its tasks, mixtures and how it was made."""

  def __init__(self, location: str):
    self.location = files.expand(location)
    self.root = files.path(self.location)
    info_path = self.root / INFO_FILE
    if not info_path.exists():
      raise UserError(f'CACHED_TASKS_DIR: {self.location} holds no {INFO_FILE}: not a '
                      'finished task cache (write one with launch/cache_tasks.py)')
    try:
      info = json.loads(info_path.read_text())
      if info['format'] != FORMAT:
        raise UserError(f'{info_path}: cache format {info["format"]}, this version reads '
                        f'{FORMAT}; rebuild it with launch/cache_tasks.py')
      self.data_settings: dict = info['data_settings']
      self.vocabulary_sha256: str = info['vocabulary_sha256']
      self.source_vocabulary_sha256: str | None = info.get('source_vocabulary_sha256')
      self.mixtures: dict[str, list[tuple[str, float]]] = {
          name: [(task, float(rate)) for task, rate in members]
          for name, members in info['mixtures'].items()}
      self.tasks = {name: CachedTask(
          name, task['corpus'], Direction(*task['direction']),
          {split: CachedSplit(tuple(one['shards']), int(one['examples']))
           for split, one in task['splits'].items()})
          for name, task in info['tasks'].items()}
    except (ValueError, KeyError, TypeError) as error:
      raise UserError(f'{info_path}: not a cache_info file this version can read '
                      f'({type(error).__name__}: {error}); rebuild the cache') from None

  def vocabulary(self) -> bytes:
    """The SentencePiece model the cache's examples were made with."""
    return (self.root / VOCABULARY_FILE).read_bytes()

  def task(self, name: str) -> CachedTask:
    if name not in self.tasks:
      raise UserError(f'CACHED_TASKS_DIR: {self.location} holds no task {name!r} (cached '
                      f'tasks: {", ".join(sorted(self.tasks))}); cache the recipe that '
                      'trains on it with launch/cache_tasks.py')
    return self.tasks[name]

  def split(self, task: str, split: str) -> CachedSplit:
    cached = self.task(task)
    if split not in cached.splits:
      raise UserError(f'CACHED_TASKS_DIR: task {task!r} has no cached {split} split '
                      f'(cached: {", ".join(cached.splits)})')
    return cached.splits[split]

  def mixture_view(self, name: str) -> mixtures.MixtureView:
    """The cached mixture (or task) `name` as the run's readers see a registered one."""
    if name in self.mixtures:
      rated = self.mixtures[name]
    elif name in self.tasks:
      rated = [(name, 1.0)]
    else:
      raise UserError(f'MIXTURE_OR_TASK_NAME: {name!r} is not in the task cache '
                      f'{self.location} (it holds the mixtures '
                      f'{", ".join(sorted(self.mixtures)) or "none"}); cache it with '
                      'launch/cache_tasks.py')
    return mixtures.MixtureView(name, tuple(
        mixtures.MixtureMember(task, self.task(task).corpus, self.task(task).direction,
                               rate=rate, pairs=self._train_examples(task))
        for task, rate in rated))

  def _train_examples(self, task: str) -> int:
    split = self.task(task).splits.get('train')
    return split.examples if split else 0

  def check_made_for(self, data_settings, vocabulary: bytes,
                     source_vocabulary: bytes | None) -> None:
    """A UserError naming the first difference between how the cache's examples were
    made and how the run makes its own: its vocabularies, then each data setting."""
    for what, expected, cached in (
        ('VOCABULARY_PATH', vocabulary_digest(vocabulary), self.vocabulary_sha256),
        ('SOURCE_VOCABULARY_PATH',
         source_vocabulary and vocabulary_digest(source_vocabulary),
         self.source_vocabulary_sha256)):
      if expected != cached:
        raise UserError(f'CACHED_TASKS_DIR: {self.location} was cached with another '
                        f'vocabulary than the run\'s {what} (SHA-256 {str(cached)[:12]} '
                        f'cached, {str(expected)[:12]} the run\'s); cache the recipe again '
                        'with this vocabulary')
    for key, value in sorted(settings_record(data_settings).items()):
      if key in self.data_settings and self.data_settings[key] != value:
        raise UserError(f'CACHED_TASKS_DIR: {self.location} was cached with {key} = '
                        f'{self.data_settings[key]!r}, the run sets {value!r}; cache the '
                        'recipe again with its settings')


class CachedExamples(grain.sources.RandomAccessDataSource):
  """One cached split of a task as a random-access source of examples, in the order
  the seqio task yields them (shard k holds examples k, k + n, ...)."""

  def __init__(self, cache: 'TaskCache', task: str, split: str):
    cached = cache.split(task, split)
    self._paths = [f'{cache.location}/{shard}' for shard in cached.shards]
    self._length = cached.examples
    self._sources = []
    for shard, path in enumerate(self._paths):
      expected = len(range(shard, self._length, len(self._paths)))
      try:
        source = grain.sources.ArrayRecordDataSource([path])
        found = len(source)
      except Exception as error:  # pylint: disable=broad-except  (array_record's own)
        raise UserError(f'{path}: not a readable ArrayRecord shard ({error}); cache the '
                        'recipe again with launch/cache_tasks.py') from None
      if found != expected:
        raise UserError(f'{path}: holds {found} examples, the cache says {expected}; cache '
                        'the recipe again with launch/cache_tasks.py')
      self._sources.append(source)

  def __len__(self) -> int:
    return self._length

  def __getitem__(self, index: int) -> dict[str, np.ndarray | bytes]:
    shard, offset = index % len(self._sources), index // len(self._sources)
    try:
      return decode_example(self._sources[shard][offset])
    except Exception as error:  # pylint: disable=broad-except  (a damaged record)
      raise UserError(f'{self._paths[shard]}: record {offset} cannot be read ({error}); '
                      'cache the recipe again with launch/cache_tasks.py') from None

  def __repr__(self) -> str:
    return f'CachedExamples({self._paths[0]}, ...{len(self._paths)} shards)'


class CachedCorpus:
  """A corpus as its cached tasks hold it: the pairs of each cached direction and split,
  read from the examples' text, and the files the corpus keeps with every run. What a
  process without the corpus registry (without TensorFlow) evaluates on."""

  def __init__(self, cache: TaskCache, name: str):
    self.name = name
    self._cache = cache
    self._tasks = {task.direction: task for task in cache.tasks.values() if task.corpus == name}
    self._pairs: dict[tuple[str, Direction], list[tuple[str, str]]] = {}

  def languages(self) -> tuple[str, ...]:
    return tuple(sorted({lang for direction in self._tasks for lang in direction}))

  def splits(self) -> tuple[str, ...]:
    return tuple(split for split in SPLITS
                 if any(split in task.splits for task in self._tasks.values()))

  def pairs(self, split: str, src: str, tgt: str) -> list[tuple[str, str]]:
    direction = Direction(src, tgt)
    task = self._tasks.get(direction)
    if task is None or split not in task.splits:
      raise UserError(f'corpus {self.name!r}: the task cache {self._cache.location} holds no '
                      f'{split} pairs of {src}-{tgt}')
    if (split, direction) not in self._pairs:
      examples = CachedExamples(self._cache, task.name, split)
      self._pairs[split, direction] = [
          (example[SOURCE_TEXT].decode(), example[TARGET_TEXT].decode())
          for example in map(examples.__getitem__, range(len(examples)))]
    return list(self._pairs[split, direction])

  def sentences(self, split: str, lang: str) -> list[str]:
    return list(dict.fromkeys(
        text for direction in self._tasks if lang in direction and split in self.splits()
        for pair in self.pairs(split, *direction)
        for text, side in zip(pair, direction) if side == lang))

  def run_files(self) -> dict[str, bytes]:
    folder = self._cache.root / RUN_FILES / self.name
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())} if (
        folder.exists()) else {}


def for_run(data_settings) -> TaskCache | None:
  """The task cache a run's data settings name (CACHED_TASKS_DIR), its corpora registered
  as it holds them; None where the run reads seqio's tasks."""
  if not data_settings.cached_tasks_dir:
    return None
  cache = TaskCache(data_settings.cached_tasks_dir)
  register_corpora(cache)
  return cache


def register_corpora(cache: TaskCache) -> None:
  """Registers each corpus of the cache as it holds it, in place of any of that name."""
  for name in sorted({task.corpus for task in cache.tasks.values()}):
    corpora.register_corpus(name, lambda name=name: CachedCorpus(cache, name), overwrite=True)
