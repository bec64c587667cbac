"""A mixture's seqio tasks cached to ArrayRecord files by an Apache Beam pipeline.

What `launch/cache_tasks.py` runs, in the habit of seqio's `cache_tasks_main`: each
(task, split, shard) is one piece of work that runs the task's preprocessing over its
shard of the source (seqio's `ShardInfo`: examples k, k + n, ...) and writes the
examples, unshuffled and untrimmed, to its own ArrayRecord file; the shards' statistics
are combined per split. The folder is built beside its destination and replaces it whole
once `cache_info.json` is written (`task_cache`), so an interrupted cache leaves none.

The pipeline runs wherever Beam runs it: the DirectRunner here (its multi-processing mode
for several cores), any other runner at scale, whose workers set the registry up from the
recipe first (`set_up`); the output folder must then be one they all write to.
"""

from collections.abc import Callable, Iterator, Mapping, Sequence
import dataclasses
import json
import math

import apache_beam as beam
from array_record.python import array_record_module
import seqio

from t5x_mt.core import files
from t5x_mt.core.errors import UserError
from t5x_mt.data import corpora
from t5x_mt.data import mixtures
from t5x_mt.data import task_cache

EXAMPLES_PER_SHARD = 100_000


@dataclasses.dataclass(frozen=True)
class ShardJob:
  """One shard of one split of one task: a file of the cache."""
  task: str
  split: str
  shard: int
  num_shards: int

  @property
  def path(self) -> str:
    return task_cache.shard_file(self.task, self.split, self.shard, self.num_shards)


def cached_tasks(mixture: mixtures.MixtureView, evaluation_corpus: str | None,
                 register_task: Callable[[str, str, str], str]
                 ) -> dict[str, mixtures.TaskSource]:
  """{task: what it reads} of a cache: the mixture's tasks, and where the run evaluates
  on another corpus (`EvalConfig.corpus`, FLORES-200 for the real-data recipe), that
  corpus's task of each of the mixture's directions (`register_task(corpus, src, tgt)`
  registers it), so that a run from the cache evaluates without the corpus's files."""
  tasks = {member.task: mixtures.TaskSource(member.corpus, member.direction)
           for member in mixture.members}
  if evaluation_corpus:
    for direction in mixture.directions():
      tasks.setdefault(register_task(evaluation_corpus, *direction),
                       mixtures.TaskSource(evaluation_corpus, direction))
  return tasks


def check_cacheable(mixture: mixtures.MixtureView, data_settings) -> None:
  """A UserError for what a cache cannot hold: a streamed corpus (endless, shuffled by
  its own stream) or a segmentation sampled anew every epoch."""
  for member in mixture.members:
    if corpora.is_streamed(member.corpus):
      raise UserError(f'{member.task}: corpus {member.corpus} is streamed '
                      '(register_streamed_tsv): its tasks are read from their files by '
                      'seqio, not cached; train this mixture with CACHED_TASKS_DIR empty')
  sampled = {direction: side for direction, side in data_settings.sampling_sides.items()
             if side != 'none'}
  if sampled:
    raise UserError(f'subword_sampling.sides: {sampled} samples a segmentation every '
                    'epoch, and a cache holds one; train with CACHED_TASKS_DIR empty')


def shard_jobs(tasks: Mapping[str, mixtures.TaskSource], examples_per_shard: int
               ) -> list[ShardJob]:
  """Every shard of every split each task has, in task order."""
  jobs = []
  for task, (corpus_name, direction) in tasks.items():
    corpus = corpora.get_corpus(corpus_name)
    for split in task_cache.SPLITS:
      if split not in corpus.splits():
        continue
      pairs = len(corpus.pairs(split, *direction))
      if pairs:
        shards = math.ceil(pairs / examples_per_shard)
        jobs += [ShardJob(task, split, shard, shards) for shard in range(shards)]
  return jobs


class _WriteShard(beam.DoFn):
  """Runs a task's preprocessing over one shard and writes its examples."""

  def __init__(self, folder: str, set_up: Callable[[], None]):
    super().__init__()
    self._folder = folder
    self._set_up = set_up

  def setup(self):
    self._set_up()

  def process(self, job: ShardJob) -> Iterator[tuple[tuple[str, str], dict[str, int]]]:
    dataset = seqio.get_mixture_or_task(job.task).get_dataset(
        sequence_length=None, split=job.split, shuffle=False, num_epochs=1,
        shard_info=seqio.ShardInfo(job.shard, job.num_shards), try_in_mem_cache=False)
    path = files.path(self._folder) / job.path
    path.parent.mkdir(parents=True, exist_ok=True)
    writer = array_record_module.ArrayRecordWriter(str(path), 'group_size:1')
    stats = []
    try:
      for example in dataset.as_numpy_iterator():
        writer.write(task_cache.encode_example(example))
        stats.append(task_cache.example_stats(example))
    finally:
      writer.close()
    yield (job.task, job.split), task_cache.merge_stats(stats)


def _write_stats(folder: str, keyed: tuple[tuple[str, str], Mapping[str, int]]) -> None:
  (task, split), stats = keyed
  files.write_text_atomically(files.path(folder) / task_cache.stats_file(task, split),
                              json.dumps(stats, indent=1, sort_keys=True) + '\n')


def run_pipeline(jobs: Sequence[ShardJob], folder: str, set_up: Callable[[], None],
                 beam_options: Sequence[str] = ()) -> None:
  """Writes every job's shard and each split's statistics into `folder`."""
  options = beam.options.pipeline_options.PipelineOptions(list(beam_options))
  with beam.Pipeline(options=options) as pipeline:
    _ = (pipeline
         | 'Jobs' >> beam.Create(list(jobs))
         | 'Spread' >> beam.Reshuffle()
         | 'Write shards' >> beam.ParDo(_WriteShard(folder, set_up))
         | 'Per split' >> beam.CombinePerKey(lambda stats: task_cache.merge_stats(list(stats)))
         | 'Write stats' >> beam.Map(lambda keyed: _write_stats(folder, keyed)))


def write_run_inputs(folder: files.AnyPath, mixture: mixtures.MixtureView, vocabulary: bytes,
                     source_vocabulary: bytes | None) -> None:
  """The vocabularies the examples were made with, and the files each corpus keeps with
  a run (a run from the cache writes them into MODEL_DIR as a run from seqio does)."""
  files.write_bytes_atomically(folder / task_cache.VOCABULARY_FILE, vocabulary)
  if source_vocabulary:
    files.write_bytes_atomically(folder / task_cache.SOURCE_VOCABULARY_FILE, source_vocabulary)
  for corpus in sorted({member.corpus for member in mixture.members}):
    for name, content in getattr(corpora.get_corpus(corpus), 'run_files', dict)().items():
      target = folder / task_cache.RUN_FILES / corpus / name
      target.parent.mkdir(parents=True, exist_ok=True)
      files.write_bytes_atomically(target, content)


def cache_info(folder: str, jobs: Sequence[ShardJob], tasks: Mapping[str, mixtures.TaskSource],
               mixture: mixtures.MixtureView, data_settings, vocabulary: bytes,
               source_vocabulary: bytes | None) -> dict:
  """What `cache_info.json` says of a folder the pipeline wrote: the cached `tasks`,
  the training `mixture` over some of them, and how their examples were made."""
  described: dict[str, dict] = {}
  for task, (corpus, direction) in tasks.items():
    splits = {}
    for split in task_cache.SPLITS:
      shards = [job.path for job in jobs if (job.task, job.split) == (task, split)]
      if shards:
        stats = json.loads((files.path(folder) / task_cache.stats_file(task, split))
                           .read_text())
        splits[split] = {'shards': shards, 'examples': stats['examples']}
    described[task] = {'corpus': corpus, 'direction': list(direction), 'splits': splits}
  return {
      'format': task_cache.FORMAT,
      'data_settings': task_cache.settings_record(data_settings),
      'vocabulary_sha256': task_cache.vocabulary_digest(vocabulary),
      'source_vocabulary_sha256': (source_vocabulary and
                                   task_cache.vocabulary_digest(source_vocabulary)),
      'mixtures': {mixture.name: [[m.task, m.rate] for m in mixture.members]},
      'tasks': described,
  }
