"""Corpus cleaning: step lists and their parameters, the per-pair cleaner, the local engine.

A cleaning run is a list of named steps (`t5x_mt.data.cleaning.steps.STEPS`). Per-pair
steps (rewrites and filters) run in their listed order on every pair; a pair is dropped by
the first filter that rejects it and counted under that filter's name. Both engines run
them with `PairCleaner`, over batches of pairs: each step decides at once for the pairs
the steps before it kept, which decides each pair as running the steps on it alone would.
Corpus steps (`duplicates`, `conflicting_translations`) then run, in their listed order,
on what survived. Both engines (this module's `clean_locally`, and `beam.clean_with_beam`)
follow exactly these rules and write the same folder (see `cleaning_io`), with a report:

  {"engine": .., "steps": [{"name", "kind", "params"}],
   "directions": {"eng_Latn-hau_Latn": {"pairs_in", "pairs_out", "dropped": {step: n},
                                        "rewritten": {step: n}}},
   "total": {"pairs_in", "pairs_out", "dropped": {step: n}}}

Presets are gin files `gin/cleaning/<name>.gin` binding `cleaning_steps.names` and the
steps' parameters (`long_word.max_chars = 40`); any step parameter can be overridden with
`--gin.<step>.<parameter>=VALUE`. The launch layer reads those bindings
(`t5x_mt.config.configurables`) and hands `resolve_specs` the configured steps.
"""

import dataclasses
import itertools
import json
import logging
import pickle
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np
from tqdm import tqdm

from t5x_mt.core import charts
from t5x_mt.core import files
from t5x_mt.data.cleaning import dedup
from t5x_mt.data.cleaning import io as cleaning_io
from t5x_mt.data.cleaning import langid
from t5x_mt.data.cleaning import mdl
from t5x_mt.data.cleaning.batches import PairBatch
from t5x_mt.data.cleaning.io import Record
from t5x_mt.data.cleaning.steps import Pair
from t5x_mt.data.cleaning.steps import STEPS
from t5x_mt.data.cleaning.steps import Step
from t5x_mt.data.cleaning.steps import build_step
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.core.files import REPO_ROOT

# Modules whose import registers steps (decontaminate, language_id, mdl_repeat).
STEP_MODULES = (dedup, langid, mdl)
PRESETS_DIR = REPO_ROOT / 'gin' / 'cleaning'
DEFAULT_PRESET = 'default'
# Pairs the per-pair steps decide at once: enough that the work of a step call is numpy
# and scans over the batch, few enough that a batch's arrays take a few megabytes.
BATCH_PAIRS = 10_000

@dataclasses.dataclass(frozen=True)
class StepSpec:
  """A step's name and every parameter: all a worker needs to rebuild it."""
  name: str
  params: tuple[tuple[str, Any], ...]

  def build(self):
    return build_step(self.name, dict(self.params))

  @property
  def kind(self) -> str:
    return STEPS[self.name].kind


def preset_names() -> tuple[str, ...]:
  return tuple(sorted(path.stem for path in PRESETS_DIR.glob('*.gin')))


def preset_file(name: str) -> Path:
  """The gin file of preset `name`; UserError naming the presets there are."""
  path = PRESETS_DIR / f'{name}.gin'
  if not path.is_file():
    raise UserError(f'--preset: unknown preset {name!r}; presets: {", ".join(preset_names())}')
  return path


def _default_step(name: str) -> Step:
  return STEPS[name]()


def resolve_specs(names: Sequence[str],
                  configured_step: Callable[[str], Step] = _default_step) -> list[StepSpec]:
  """Specs of the named steps, each with the parameters of `configured_step(name)` (the
  step with its default parameters unless the caller configures it)."""
  if not names:
    raise UserError('no cleaning steps chosen (give --preset or --filters)')
  specs = []
  for name in names:
    if name not in STEPS:
      raise UserError(f'unknown cleaning step {name!r}; known steps: '
                      f'{", ".join(sorted(STEPS))}')
    try:
      step = configured_step(name)
    except TypeError as e:
      raise UserError(f'cleaning step {name!r}: {e}') from None
    params = tuple((field.name, getattr(step, field.name))
                   for field in dataclasses.fields(step))
    specs.append(StepSpec(name, params))
  if len({spec.name for spec in specs}) != len(specs):
    raise UserError(f'a cleaning step is listed twice: {", ".join(names)}')
  return specs


# A record after the per-pair steps: its cleaned pair, or None and the step that dropped it.
Outcome = tuple[Record, Pair | None, str | None]


class PairCleaner:
  """The per-pair steps of a spec list, bound to one direction, run over batches."""

  def __init__(self, specs: Sequence[StepSpec], src_lang: str, tgt_lang: str,
               batch_pairs: int = BATCH_PAIRS):
    self._steps = [(spec.name, spec.kind, spec.build().bind_batch(src_lang, tgt_lang))
                   for spec in specs if spec.kind != 'corpus']
    self._batch_pairs = batch_pairs

  def clean(self, records: Iterable[Record], rewritten: Counter) -> Iterator[Outcome]:
    """The outcome of each record, in order (undecodable ones are dropped as
    invalid_utf8); adds to `rewritten` how many pairs each rewrite changed."""
    records = iter(records)
    while batch := list(itertools.islice(records, self._batch_pairs)):
      yield from self._clean_batch(batch, rewritten)

  def _clean_batch(self, records: list[Record], rewritten: Counter) -> Iterator[Outcome]:
    dropped_by = [None if record.pair is not None else cleaning_io.INVALID_UTF8
                  for record in records]
    positions = np.array([number for number, step in enumerate(dropped_by) if step is None],
                         np.int64)
    batch = PairBatch([records[number].pair for number in positions.tolist()])
    positions, batch = self._run_steps(batch, positions, dropped_by, rewritten)
    cleaned = [None] * len(records)
    for number, pair in zip(positions.tolist(), batch.pairs):
      cleaned[number] = pair
    return zip(records, cleaned, dropped_by)

  def _run_steps(self, batch: PairBatch, positions: np.ndarray, dropped_by: list,
                 rewritten: Counter) -> tuple[np.ndarray, PairBatch]:
    """The positions and the batch of the pairs every filter kept; sets `dropped_by` at
    the positions of the others."""
    for name, kind, apply in self._steps:
      if not len(batch):
        break
      if kind == 'rewrite':
        pairs = apply(batch)
        changed = sum(new != old for new, old in zip(pairs, batch.pairs))
        if changed:
          rewritten[name] += changed
          batch = PairBatch(pairs)
        continue
      keep = apply(batch)
      if not keep.all():
        for number in positions[~keep].tolist():
          dropped_by[number] = name
        positions, batch = positions[keep], batch.select(keep)
    return positions, batch


class DirectionTally:
  """Counts for one direction's report entry; `drop` also lists the pair when asked."""

  def __init__(self, step_names: Sequence[str], writer: cleaning_io.CorpusWriter | None):
    self.pairs_in = 0
    self.pairs_out = 0
    self.dropped = Counter({name: 0 for name in [cleaning_io.INVALID_UTF8, *step_names]})
    self.rewritten: Counter = Counter()
    self._writer = writer

  def drop(self, step: str, record: Record) -> None:
    self.dropped[step] += 1
    if self._writer is not None:
      self._writer.dropped(step, record.index, record.raw)

  def as_json(self) -> dict:
    return {'pairs_in': self.pairs_in, 'pairs_out': self.pairs_out,
            'dropped': dict(self.dropped), 'rewritten': dict(self.rewritten)}


def build_report(engine: str, specs: Sequence[StepSpec],
                 directions: dict[str, dict]) -> dict:
  """The report JSON object from per-direction entries (as `DirectionTally.as_json`)."""
  total_dropped: Counter = Counter()
  for entry in directions.values():
    total_dropped.update(entry['dropped'])
  return {
      'engine': engine,
      'steps': [{'name': spec.name, 'kind': spec.kind, 'params': dict(spec.params)}
                for spec in specs],
      'directions': dict(sorted(directions.items())),
      'total': {'pairs_in': sum(entry['pairs_in'] for entry in directions.values()),
                'pairs_out': sum(entry['pairs_out'] for entry in directions.values()),
                'dropped': {name: total_dropped[name] for name in
                            next(iter(directions.values()))['dropped']} if directions else {}},
  }


# --- Corpus steps, locally ----------------------------------------------------------------

Survivor = tuple[Record, Pair]


def _drop_duplicates(survivors: Iterable[Survivor], tally: DirectionTally,
                     bloom: dedup.BloomFilter | None) -> Iterator[Survivor]:
  """Keeps the first pair of each normalised (source, target); a set, or a Bloom filter."""
  seen: set[bytes] = set()
  for record, pair in survivors:
    key = dedup.pair_key(pair.src, pair.tgt)
    if bloom is not None:
      is_new = bloom.add_new([key])[0]
    else:
      is_new = key not in seen
      seen.add(key)
    if is_new:
      yield record, pair
    else:
      tally.drop('duplicates', record)


def _drop_conflicts(survivors: Iterable[Survivor], tally: DirectionTally,
                    spill_dir: Path) -> Iterator[Survivor]:
  """Drops pairs whose source has two targets, or target two sources (normalised).

  Needs every survivor before it can decide, so it spills them to a file in `spill_dir`
  while it learns, for each source and each target key, whether it has one partner.
  """
  partners = ({}, {})  # source key -> target key (or None: several), and the reverse.
  with tempfile.TemporaryFile(dir=spill_dir) as spill:
    for record, pair in survivors:
      src_key, tgt_key = dedup.text_key(pair.src), dedup.text_key(pair.tgt)
      for mapping, key, partner in ((partners[0], src_key, tgt_key),
                                    (partners[1], tgt_key, src_key)):
        if mapping.setdefault(key, partner) != partner:
          mapping[key] = None
      pickle.dump((record, pair, src_key, tgt_key), spill)
    spill.seek(0)
    while True:
      try:
        record, pair, src_key, tgt_key = pickle.load(spill)
      except EOFError:
        return
      if partners[0][src_key] is None or partners[1][tgt_key] is None:
        tally.drop('conflicting_translations', record)
      else:
        yield record, pair


# --- The local engine ---------------------------------------------------------------------


def _clean_direction(chunks: Sequence[cleaning_io.Chunk], specs: Sequence[StepSpec],
                     tally: DirectionTally, writer: cleaning_io.CorpusWriter,
                     spill_dir: Path, progress: tqdm) -> None:
  src_lang, tgt_lang = Direction.parse(chunks[0].direction, 'cleaned direction')
  cleaner = PairCleaner(specs, src_lang, tgt_lang)

  def survivors() -> Iterator[Survivor]:
    for chunk in chunks:
      for record, pair, dropped_by in cleaner.clean(cleaning_io.read_chunk(chunk),
                                                    tally.rewritten):
        tally.pairs_in += 1
        progress.update()
        if pair is None:
          tally.drop(dropped_by, record)
        else:
          yield record, pair

  stream: Iterable[Survivor] = survivors()
  for spec in specs:
    if spec.name == 'duplicates':
      error_rate = dict(spec.params)['bloom_error_rate']
      capacity = sum(chunk.count for chunk in chunks)
      bloom = dedup.BloomFilter(capacity, error_rate) if error_rate else None
      stream = _drop_duplicates(stream, tally, bloom)
    elif spec.name == 'conflicting_translations':
      stream = _drop_conflicts(stream, tally, spill_dir)
  for _, pair in stream:
    writer.kept(pair)
    tally.pairs_out += 1


def clean_locally(sources: Sequence[cleaning_io.Source], specs: Sequence[StepSpec],
                  output_dir: str | Path, *, write_dropped: bool = False,
                  overwrite: bool = False,
                  chunk_lines: int = cleaning_io.DEFAULT_CHUNK_LINES,
                  progress: bool = True) -> dict:
  """Cleans every source into `output_dir` on this machine; returns the report."""
  output_dir = cleaning_io.check_output_dir(output_dir, overwrite)
  chunks_by_direction = group_chunks(sources, chunk_lines)
  total = sum(chunk.count for chunks in chunks_by_direction.values() for chunk in chunks)
  entries = {}
  with files.staged_folder(output_dir) as partial, tqdm(
      total=total, unit='pairs', desc='clean', disable=not progress, mininterval=2.0) as bar:
    for direction, chunks in chunks_by_direction.items():
      writer = cleaning_io.CorpusWriter(partial, direction, write_dropped)
      tally = DirectionTally([spec.name for spec in specs], writer)
      try:
        _clean_direction(chunks, specs, tally, writer, partial, bar)
      finally:
        writer.close()
      entries[direction] = tally.as_json()
    report = build_report('local', specs, entries)
    write_report(partial, output_dir, report)
  return report


def group_chunks(sources: Sequence[cleaning_io.Source],
                 chunk_lines: int) -> dict[str, list[cleaning_io.Chunk]]:
  """Chunks of every source, by direction; a direction given twice is an error."""
  grouped: dict[str, list[cleaning_io.Chunk]] = {}
  for source in sources:
    chunks = source.chunks(chunk_lines)
    direction = chunks[0].direction
    if direction in grouped:
      raise UserError(f'direction {direction} is given twice')
    grouped[direction] = chunks
  return grouped


def write_report(partial: Path, output_dir: Path, report: dict) -> None:
  """Writes the report and its chart into `partial`, which becomes `output_dir` next."""
  files.write_text_atomically(partial / 'report.json', json.dumps(report, indent=1) + '\n')
  files.write_bytes_atomically(partial / 'removed.png', removal_chart(report))
  logging.info('Wrote %s: %d of %d pairs kept', output_dir, report['total']['pairs_out'],
               report['total']['pairs_in'])


def removal_chart(report: dict) -> bytes:
  """PNG: per direction, the share of its pairs each step removed (stacked bars)."""
  pyplot = charts.pyplot()
  directions = list(report['directions'])
  steps = [name for name in report['total']['dropped'] if report['total']['dropped'][name]]
  # Tall enough for a bar per direction and for the legend's line per step beside them.
  figure, axes = pyplot.subplots(figsize=(9, max(1.5 + 0.32 * max(1, len(directions)),
                                                 0.8 + 0.2 * len(steps))))
  left = [0.0] * len(directions)
  colours = pyplot.get_cmap('tab20')
  for number, step in enumerate(steps):
    shares = [100 * entry['dropped'].get(step, 0) / max(1, entry['pairs_in'])
              for entry in report['directions'].values()]
    axes.barh(directions, shares, left=left, label=step, color=colours(number % 20))
    left = [a + b for a, b in zip(left, shares)]
  axes.set_xlabel('% of input pairs removed')
  axes.set_xlim(0, max(5.0, max(left, default=0) * 1.1))
  axes.invert_yaxis()
  if steps:
    charts.legend_outside(axes, fontsize='small')
  axes.set_title('What each cleaning step removed')
  return charts.png_bytes(figure)


def format_report(report: dict) -> str:
  """The report as a table: one row per direction, one column per step that removed any."""
  steps = [name for name, count in report['total']['dropped'].items() if count]
  entries = [*report['directions'].items(), ('total', report['total'])]
  name_width = max(len('direction'), *(len(direction) for direction, _ in entries)) + 2
  # Each column as wide as its step's full name or its largest count, with a gap of 2.
  widths = [max(len(name), len(str(report['total']['dropped'][name]))) + 2 for name in steps]
  header = f'{"direction":<{name_width}}{"in":>9}{"out":>9}' + ''.join(
      f'{name:>{width}}' for name, width in zip(steps, widths))
  rows = [header, '-' * len(header)]
  for direction, entry in entries:
    rows.append(f'{direction:<{name_width}}{entry["pairs_in"]:>9}{entry["pairs_out"]:>9}'
                + ''.join(f'{entry["dropped"].get(name, 0):>{width}}'
                          for name, width in zip(steps, widths)))
  return '\n'.join(rows)
