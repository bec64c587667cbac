"""Cleaning as an Apache Beam pipeline: the same steps, distributed.

Chunks of the inputs (`cleaning_io`) are the pipeline's elements, so a cluster reads
the corpus in parallel. Per-pair steps run in a DoFn, in the local engine's
`cleaning.PairCleaner` built from the same `StepSpec`s; the corpus steps use Beam's
distributed group-by instead of one machine's memory: `duplicates` groups pairs by their
normalised key and keeps the lowest line number; `conflicting_translations` groups by
source key and by target key, marks every line of a key with more than one partner, and
joins the marks back.

Survivors and dropped pairs are grouped by (direction, chunk), sorted by line number and
written as one shard file per chunk under `shard_dir` (any Beam filesystem: local, gs://,
hdfs://); the launching process then concatenates the shards in order into the same
folder the local engine writes, so both engines produce byte-identical corpora.
"""

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import apache_beam as beam
from apache_beam.io.filesystems import FileSystems
from apache_beam.options.pipeline_options import PipelineOptions

from t5x_mt.core import files
from t5x_mt.data.cleaning import dedup
from t5x_mt.data.cleaning import io as cleaning_io
from t5x_mt.data.cleaning import pipeline as cleaning
from t5x_mt.data.cleaning.pipeline import StepSpec
from t5x_mt.data.cleaning.steps import Pair
from t5x_mt.core.directions import Direction

KEPT, DROPPED, COUNTS = 'kept', 'dropped', 'counts'


class CleanChunk(beam.DoFn):
  """Reads one chunk and runs the per-pair steps: kept (direction, index, pair), dropped
  (direction, index, step, raw) and counts ((direction, 'rewritten'|'dropped', step), 1)."""

  def __init__(self, specs: Sequence[StepSpec]):
    self._specs = list(specs)
    self._cleaners: dict[str, cleaning.PairCleaner] = {}

  def _cleaner(self, direction: str) -> cleaning.PairCleaner:
    if direction not in self._cleaners:
      src_lang, tgt_lang = Direction.parse(direction, 'cleaned direction')
      self._cleaners[direction] = cleaning.PairCleaner(self._specs, src_lang, tgt_lang)
    return self._cleaners[direction]

  def process(self, chunk: cleaning_io.Chunk) -> Iterator:
    cleaner = self._cleaner(chunk.direction)
    rewritten: Counter = Counter()
    for record, pair, dropped_by in cleaner.clean(cleaning_io.read_chunk(chunk), rewritten):
      if pair is None:
        yield from _dropped(chunk.direction, record.index, dropped_by, record.raw)
      else:
        yield (chunk.direction, record.index, pair, record.raw)
    for name, count in rewritten.items():
      yield beam.pvalue.TaggedOutput(COUNTS, ((chunk.direction, 'rewritten', name), count))


def _dropped(direction: str, index: int, step: str, raw) -> Iterator:
  yield beam.pvalue.TaggedOutput(DROPPED, (direction, index, step, raw))
  yield beam.pvalue.TaggedOutput(COUNTS, ((direction, 'dropped', step), 1))


def _keep_first(grouped) -> Iterator:
  """Of the pairs sharing a key, the lowest line number survives; the others are dropped."""
  _, survivors = grouped
  survivors = sorted(survivors, key=lambda survivor: survivor[1])
  yield survivors[0]
  for direction, index, _, raw in survivors[1:]:
    yield from _dropped(direction, index, 'duplicates', raw)


def _conflicting_lines(grouped) -> Iterator:
  """(direction, index) of every line of a key with more than one distinct partner."""
  (direction, _), partners = grouped
  partners = list(partners)
  if len({partner for partner, _ in partners}) > 1:
    for _, index in partners:
      yield (direction, index), True


def _join_conflicts(joined) -> Iterator:
  (direction, index), groups = joined
  survivors, marks = list(groups['survivor']), list(groups['conflict'])
  for survivor in survivors:
    if marks:
      yield from _dropped(direction, index, 'conflicting_translations', survivor[3])
    else:
      yield survivor


class _DropDuplicates(beam.PTransform):

  def expand(self, survivors):
    return (survivors
            | 'KeyByPair' >> beam.Map(lambda s: ((s[0], dedup.pair_key(s[2].src, s[2].tgt)), s))
            | 'GroupByPair' >> beam.GroupByKey()
            | 'KeepFirst' >> beam.FlatMap(_keep_first).with_outputs(DROPPED, COUNTS, main=KEPT))


class _DropConflicts(beam.PTransform):

  def expand(self, survivors):
    by_source = (survivors
                 | 'KeyBySource' >> beam.Map(lambda s: ((s[0], dedup.text_key(s[2].src)),
                                                        (dedup.text_key(s[2].tgt), s[1])))
                 | 'GroupBySource' >> beam.GroupByKey()
                 | 'SourceConflicts' >> beam.FlatMap(_conflicting_lines))
    by_target = (survivors
                 | 'KeyByTarget' >> beam.Map(lambda s: ((s[0], dedup.text_key(s[2].tgt)),
                                                        (dedup.text_key(s[2].src), s[1])))
                 | 'GroupByTarget' >> beam.GroupByKey()
                 | 'TargetConflicts' >> beam.FlatMap(_conflicting_lines))
    conflicts = (by_source, by_target) | 'AllConflicts' >> beam.Flatten()
    keyed = survivors | 'KeyByLine' >> beam.Map(lambda s: ((s[0], s[1]), s))
    return ({'survivor': keyed, 'conflict': conflicts}
            | 'JoinConflicts' >> beam.CoGroupByKey()
            | 'Mark' >> beam.FlatMap(_join_conflicts).with_outputs(DROPPED, COUNTS, main=KEPT))


class _WriteShards(beam.DoFn):
  """One JSON-lines file per (direction, chunk) group, sorted by line number."""

  def __init__(self, folder: str, chunk_lines: int):
    self._folder, self._chunk_lines = folder, chunk_lines

  def process(self, grouped) -> Iterator[str]:
    (direction, chunk_number), rows = grouped
    rows = sorted(rows)
    path = FileSystems.join(self._folder, direction, f'{chunk_number:09d}.jsonl')
    temporary = path + '.tmp'
    with FileSystems.create(temporary) as f:
      for row in rows:
        f.write((json.dumps(row, ensure_ascii=False) + '\n').encode('utf-8'))
    FileSystems.rename([temporary], [path])
    yield path


def _shards(collection, name: str, folder: str, chunk_lines: int, row) -> None:
  (collection
   | f'KeyByChunk{name}' >> beam.Map(lambda item: ((item[0], item[1] // chunk_lines),
                                                   row(item)))
   | f'GroupByChunk{name}' >> beam.GroupByKey()
   | f'Write{name}' >> beam.ParDo(_WriteShards(folder, chunk_lines)))


def _read_shards(folder: str, direction: str) -> Iterator[list]:
  """The rows of a direction's shards, in line order."""
  pattern = FileSystems.join(folder, direction, '*.jsonl')
  matches = FileSystems.match([pattern])[0].metadata_list
  for path in sorted(metadata.path for metadata in matches):
    with FileSystems.open(path) as f:
      for line in f:
        yield json.loads(line)


def build_pipeline(pipeline: beam.Pipeline, chunks: Iterable[cleaning_io.Chunk],
                   specs: Sequence[StepSpec], shard_dir: str, chunk_lines: int,
                   write_dropped: bool) -> None:
  """Adds the cleaning transforms to `pipeline`; shards and counts go under `shard_dir`."""
  outputs = (pipeline
             | 'Chunks' >> beam.Create(list(chunks), reshuffle=True)
             | 'CleanPairs' >> beam.ParDo(CleanChunk(specs)).with_outputs(
                 DROPPED, COUNTS, main=KEPT))
  survivors, dropped, counts = outputs[KEPT], [outputs[DROPPED]], [outputs[COUNTS]]
  for spec in specs:
    if spec.name == 'duplicates':
      step = survivors | 'Duplicates' >> _DropDuplicates()
    elif spec.name == 'conflicting_translations':
      step = survivors | 'Conflicts' >> _DropConflicts()
    else:
      continue
    survivors = step[KEPT]
    dropped.append(step[DROPPED])
    counts.append(step[COUNTS])
  _shards(survivors, 'Kept', FileSystems.join(shard_dir, 'kept'), chunk_lines,
          lambda s: (s[1], s[2].src, s[2].tgt))
  if write_dropped:
    _shards(tuple(dropped) | 'AllDropped' >> beam.Flatten(), 'Dropped',
            FileSystems.join(shard_dir, 'dropped'), chunk_lines,
            lambda d: (d[1], d[2], d[3][0], d[3][1]))
  (tuple(counts)
   | 'AllCounts' >> beam.Flatten()
   | 'Count' >> beam.CombinePerKey(sum)
   | 'CountsAsJson' >> beam.Map(lambda item: json.dumps([*item[0], item[1]]))
   | 'WriteCounts' >> beam.io.WriteToText(FileSystems.join(shard_dir, 'counts', 'part'),
                                          file_name_suffix='.jsonl'))


def clean_with_beam(sources: Sequence[cleaning_io.Source], specs: Sequence[StepSpec],
                    output_dir: str | Path, *, write_dropped: bool = False,
                    overwrite: bool = False,
                    chunk_lines: int = cleaning_io.DEFAULT_CHUNK_LINES,
                    beam_args: Sequence[str] = (), shard_dir: str | None = None) -> dict:
  """Cleans every source with a Beam pipeline (`beam_args` pick the runner); returns the
  report. Without `shard_dir`, shards go inside the unfinished output folder."""
  output_dir = cleaning_io.check_output_dir(output_dir, overwrite)
  chunks_by_direction = cleaning.group_chunks(sources, chunk_lines)
  with files.staged_folder(output_dir) as partial:
    shard_dir = shard_dir or str(partial / 'shards')
    options = PipelineOptions(list(beam_args) or ['--runner=DirectRunner'])
    logging.info('Running the cleaning pipeline (%s)', ' '.join(beam_args) or 'DirectRunner')
    with beam.Pipeline(options=options) as pipeline:
      build_pipeline(pipeline, [chunk for chunks in chunks_by_direction.values()
                                for chunk in chunks], specs, shard_dir, chunk_lines,
                     write_dropped)
    counts = _read_counts(shard_dir)
    entries = {}
    for direction, chunks in chunks_by_direction.items():
      tally = cleaning.DirectionTally([spec.name for spec in specs], None)
      tally.pairs_in = sum(chunk.count for chunk in chunks)
      for (kind, step), count in counts.get(direction, {}).items():
        (tally.dropped if kind == 'dropped' else tally.rewritten)[step] += count
      tally.pairs_out = _assemble(partial, shard_dir, direction, write_dropped)
      entries[direction] = tally.as_json()
    if shard_dir == str(partial / 'shards'):
      FileSystems.delete([shard_dir])
    report = cleaning.build_report('beam', specs, entries)
    cleaning.write_report(partial, output_dir, report)
  return report


def _read_counts(shard_dir: str) -> dict[str, dict[tuple[str, str], int]]:
  counts: dict[str, dict[tuple[str, str], int]] = {}
  pattern = FileSystems.join(shard_dir, 'counts', 'part*')
  for metadata in FileSystems.match([pattern])[0].metadata_list:
    with FileSystems.open(metadata.path) as f:
      for line in f:
        direction, kind, step, count = json.loads(line)
        counts.setdefault(direction, {})[(kind, step)] = count
  return counts


def _assemble(partial: Path, shard_dir: str, direction: str, write_dropped: bool) -> int:
  """Concatenates a direction's shards into the corpus files; returns the pairs kept."""
  writer = cleaning_io.CorpusWriter(partial, direction, write_dropped)
  kept = 0
  try:
    for _, src, tgt in _read_shards(FileSystems.join(shard_dir, 'kept'), direction):
      writer.kept(Pair(src, tgt))
      kept += 1
    if write_dropped:
      for index, step, src, tgt in _read_shards(FileSystems.join(shard_dir, 'dropped'),
                                                direction):
        writer.dropped(step, index, (src, tgt))
  finally:
    writer.close()
  return kept
