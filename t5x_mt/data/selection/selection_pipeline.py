"""In-domain selection over corpus folders, for gradual fine-tuning: the candidates (one or
more `launch/clean.py` folders) scored per direction against an in-domain sample, and one
clean.py-format folder per threshold written with the pairs that reach it.

Each candidate direction src-tgt gets its own scorer (`scorers.DomainClassifier` or
`scorers.CrossEntropyDifference`), trained on the sample's pairs of that direction (or
of tgt-src, swapped). Thresholds apply to the classifier's probabilities, or to the
percentile ranks of cross-entropy differences among the direction's candidates. Ascending
thresholds give nested folders, each inside the one before.

The output folder:
  threshold_<t>/<src>-<tgt>.<src>, .<tgt>  the pairs scoring at least t, in candidate order
                                           (empty files where none does)
  scores/<src>-<tgt>.tsv                   score, percentile rank, source, target of every
                                           candidate, in candidate order, under a header
  report.json                              pairs kept per direction and threshold and, with
                                           a held-out sample, the share of it at or above
                                           each threshold (its recall)
"""

from collections.abc import Iterable, Sequence
import dataclasses
import json
import logging
import os
from pathlib import Path

import numpy as np
from tqdm import tqdm

from t5x_mt.core import files
from t5x_mt.data import readers
from t5x_mt.data.selection import scorers
from t5x_mt.data.cleaning import io as cleaning_io
from t5x_mt.data.cleaning import langid
from t5x_mt.data.cleaning import steps as cleaning_steps
from t5x_mt.data.corpus_types import Corpus
from t5x_mt.data.corpus_types import MultiwayCorpus
from t5x_mt.data.corpus_types import clean_dir_corpus
from t5x_mt.core.directions import Direction
from t5x_mt.core.errors import UserError
from t5x_mt.core.languages import FLORES200_CODES

METHODS = ('classifier', 'cross_entropy')
DEFAULT_THRESHOLDS = (0.7, 0.8, 0.9, 0.99)
SCORES_FOLDER, REPORT_FILE, THRESHOLD_PREFIX = 'scores', 'report.json', 'threshold_'
# The language check of a sample: of a side's sentences of at least LANGUAGE_CHECK_CHARS
# characters (shorter text is identified poorly), at least half must be identified as the
# side's language; a side with fewer than LANGUAGE_CHECK_SENTENCES such sentences is not
# judged, and at most LANGUAGE_CHECK_LIMIT of them (evenly spread) are looked at.
LANGUAGE_CHECK_CHARS, LANGUAGE_CHECK_SENTENCES, LANGUAGE_CHECK_LIMIT = 20, 10, 1000
Pair = scorers.Pair
_SCORING_BATCH = 2000  # Pairs scored per step of the progress bar.


def check_method(method: str) -> None:
  """UserError unless `method` is one of METHODS."""
  if method not in METHODS:
    raise UserError(f'--method: {method!r} is not one of {", ".join(METHODS)}')


def parse_thresholds(text: str, flag: str) -> tuple[float, ...]:
  """Comma-separated thresholds, strictly ascending and each in [0, 1]."""
  try:
    thresholds = tuple(float(item) for item in text.split(','))
  except ValueError:
    raise UserError(f'{flag}: {text!r} is not comma-separated numbers') from None
  if any(not 0.0 <= threshold <= 1.0 for threshold in thresholds):
    raise UserError(f'{flag}: thresholds must be in [0, 1], got {text}')
  if any(later <= earlier for earlier, later in zip(thresholds, thresholds[1:])):
    raise UserError(f'{flag}: thresholds must ascend, got {text}')
  return thresholds


def threshold_folder(threshold: float) -> str:
  """The folder of a threshold's selection: threshold_0.7, threshold_0.99."""
  return f'{THRESHOLD_PREFIX}{threshold}'


def check_output_dir(output_dir: str | os.PathLike[str], overwrite: bool) -> Path:
  """`output_dir` if it is new, or with `overwrite` holds nothing but an earlier selection
  (run folders that gradual fine-tuning writes beside the thresholds are never replaced)."""
  output_dir = cleaning_io.check_output_dir(output_dir, overwrite)
  if output_dir.exists():
    for entry in sorted(output_dir.iterdir()):
      if not (entry.name in (SCORES_FOLDER, REPORT_FILE)
              or entry.name.startswith(THRESHOLD_PREFIX)):
        raise UserError(f'--output_dir: {output_dir} holds {entry.name}, which no selection '
                        'writes: --overwrite replaces an earlier selection only (move it '
                        'out first)')
  return output_dir


def read_candidates(folders: Sequence[str], flag: str) -> dict[Direction, list[Pair]]:
  """The pairs of every direction of the clean.py `folders`, a direction's pairs from
  several folders one after the other."""
  if not folders:
    raise UserError(f'{flag}: give at least one launch/clean.py folder')
  candidates: dict[Direction, list[Pair]] = {}
  for folder in folders:
    if not _holds_clean_files(_require_folder(folder, flag)):
      raise UserError(f'{flag}: {folder} has no <src>-<tgt>.<src> files (not a '
                      'launch/clean.py output folder)')
    corpus = clean_dir_corpus('candidates', folder)
    for src, tgt in corpus.directions():
      candidates.setdefault(Direction(src, tgt), []).extend(
          corpus.pairs('train', src, tgt))
  return candidates


def read_samples(folder: str, flag: str, directions: Iterable[Direction]
                 ) -> dict[Direction, list[Pair]]:
  """The in-domain pairs of each of `directions` in sample `folder` (`read_sample`),
  checked by `sample_pairs`."""
  sample = read_sample(folder, flag)
  return {direction: sample_pairs(sample, direction, folder, flag) for direction in directions}


def read_sample(folder: str, flag: str) -> Corpus:
  """An in-domain sample: a clean.py folder, or a multi-way aligned one (`<code><suffix>`
  files as FLORES-200 has, or NTREX-128's newstest2019 files)."""
  directory = _require_folder(folder, flag)
  if (directory / 'newstest2019-src.eng.txt').is_file():
    return MultiwayCorpus('sample', {'sample': readers.read_multiway(
        readers.ntrex_files(directory))})
  suffixes = sorted({path.suffix for path in directory.iterdir()
                     if path.stem in FLORES200_CODES and path.suffix})
  if len(suffixes) > 1:
    raise UserError(f'{flag}: {folder} holds multi-way files of several suffixes '
                    f'({", ".join(suffixes)}): give one split\'s folder')
  if suffixes:
    return MultiwayCorpus('sample', {'sample': readers.read_multiway(
        readers.flores_files(directory, suffixes[0]))})
  if not _holds_clean_files(directory):
    raise UserError(f'{flag}: {folder} is neither a launch/clean.py folder (<src>-<tgt>.<src> '
                    'files) nor a multi-way one (<code>.dev files as FLORES-200 has, or '
                    'NTREX-128\'s newstest2019-*.txt)')
  return clean_dir_corpus('sample', directory)


def _require_folder(folder: str, flag: str) -> Path:
  directory = Path(folder)
  if not directory.is_dir():
    raise UserError(f'{flag}: {folder}: no such folder')
  return directory


def _holds_clean_files(directory: Path) -> bool:
  """Whether `directory` has a `<src>-<tgt>.<src>` file."""
  return any(path.stem.partition('-')[0] == path.suffix[1:] and '-' in path.stem
             for path in directory.iterdir())


def sample_pairs(sample: Corpus, direction: Direction, folder: str, flag: str) -> list[Pair]:
  """The sample's non-blank pairs of `direction` (or of its reverse, swapped), their
  sides checked to be in the direction's languages."""
  try:
    pairs = sample.pairs(sample.splits()[0], *direction)
  except UserError:
    raise UserError(f'{flag}: {folder} has no {direction.name} pairs (nor '
                    f'{direction.tgt_lang}-{direction.src_lang}), which candidate direction '
                    f'{direction.name} needs (it has: {", ".join(sample.languages())})'
                    ) from None
  pairs = [(source, target) for source, target in pairs if source.strip() and target.strip()]
  if not pairs:
    raise UserError(f'{flag}: {folder}: the {direction.name} sample is empty: give sentence '
                    'pairs of the domain to select for')
  for side, lang in enumerate(direction):
    check_sample_language([pair[side] for pair in pairs], lang, f'{flag}: {folder}')
  return pairs


def check_sample_language(sentences: Sequence[str], lang: str, where: str) -> None:
  """UserError unless at least half of the `sentences` long enough to judge are identified
  as `lang` (`langid`, policy 'exact'); languages it does not cover pass unjudged."""
  if lang not in langid.supported_languages():
    return
  judged = [text for text in sentences if len(text) >= LANGUAGE_CHECK_CHARS]
  if len(judged) < LANGUAGE_CHECK_SENTENCES:
    return
  judged = [judged[index] for index in
            np.linspace(0, len(judged) - 1, min(len(judged), LANGUAGE_CHECK_LIMIT), dtype=int)]
  accept = langid.acceptor(lang)
  identified = sum(accept(text) for text in judged)
  if 2 * identified < len(judged):
    raise UserError(f'{where}: only {identified} of {len(judged)} {lang} sentences are '
                    f'identified as {lang}: a sample in another language, or sides swapped?')


@dataclasses.dataclass
class ScoredDirection:
  """One candidate direction scored: the values thresholds apply to, for its candidates
  and (if given) its held-out sample."""
  direction: Direction
  candidates: list[Pair]
  scores: np.ndarray
  ranks: np.ndarray  # Percentile ranks of `scores` among themselves.
  selected_by: np.ndarray  # What thresholds apply to: scores or ranks.
  sample_size: int
  held_out_values: np.ndarray | None


def score_direction(direction: Direction, candidates: list[Pair], sample: list[Pair],
                    held_out: list[Pair] | None, *, method: str, seed: int,
                    bar: tqdm) -> ScoredDirection:
  """Trains `method`'s scorer on `sample` against `candidates` and scores both the
  candidates and `held_out`; a direction without candidates has nothing to score."""
  if not candidates:
    nothing = np.zeros(0)
    return ScoredDirection(direction, candidates, nothing, nothing, nothing, len(sample), None)
  if method == 'classifier':
    scorer = scorers.DomainClassifier.train(sample, candidates, seed=seed)
  else:
    scorer = scorers.CrossEntropyDifference.train(sample, candidates)
  scores = np.zeros(len(candidates))
  for start in range(0, len(candidates), _SCORING_BATCH):
    batch = candidates[start:start + _SCORING_BATCH]
    scores[start:start + len(batch)] = scorer.scores(batch)
    bar.update(len(batch))
  ranks = scorers.percentile_ranks(scores)
  held_out_values = None
  if held_out is not None:
    held_out_scores = scorer.scores(held_out)
    held_out_values = (held_out_scores if method == 'classifier'
                       else scorers.percentile_ranks(held_out_scores, among=scores))
  return ScoredDirection(direction, candidates, scores, ranks,
                         scores if method == 'classifier' else ranks, len(sample),
                         held_out_values)


def select_in_domain(candidates: dict[Direction, list[Pair]],
                     samples: dict[Direction, list[Pair]],
                     held_out: dict[Direction, list[Pair]] | None, output_dir: str | Path, *,
                     method: str, thresholds: Sequence[float], seed: int = 0,
                     progress: bool = True) -> dict:
  """Scores every candidate direction, writes the output folder (see the module's
  docstring) under a temporary name renamed to `output_dir` once complete, and returns
  the report."""
  check_method(method)
  total = sum(len(pairs) for pairs in candidates.values())
  scored = []
  with tqdm(total=total, unit='pairs', desc='score', disable=not progress,
            mininterval=2.0) as bar:
    for direction, pairs in candidates.items():
      bar.set_postfix_str(direction.name)
      scored.append(score_direction(
          direction, pairs, samples[direction],
          None if held_out is None else held_out[direction], method=method, seed=seed,
          bar=bar))
  report = {'method': method, 'thresholds': list(thresholds), 'seed': seed,
            'held_out': held_out is not None, 'directions': {}}
  with files.staged_folder(output_dir) as partial:
    for entry in scored:
      kept = scorers.selections(entry.selected_by, thresholds)
      _write_scores(partial / SCORES_FOLDER, entry)
      for threshold, indices in zip(thresholds, kept):
        _write_pairs(partial / threshold_folder(threshold), entry.direction,
                     [entry.candidates[index] for index in indices])
      report['directions'][entry.direction.name] = _direction_report(entry, thresholds, kept)
    files.write_text_atomically(partial / REPORT_FILE, json.dumps(report, indent=1) + '\n')
  for line in empty_selections(report):
    logging.warning('%s', line)
  return report


def _write_scores(folder: Path, entry: ScoredDirection) -> None:
  src, tgt = entry.direction
  with files.atomic_writer(folder / f'{entry.direction.name}.tsv') as f:
    f.write(f'score\tpercentile\t{src}\t{tgt}\n'.encode('utf-8'))
    for score, rank, (source, target) in zip(entry.scores, entry.ranks, entry.candidates):
      f.write(f'{float(score)!r}\t{float(rank)!r}\t{source}\t{target}\n'.encode('utf-8'))


def _write_pairs(folder: Path, direction: Direction, pairs: list[Pair]) -> None:
  folder.mkdir(exist_ok=True)
  writer = cleaning_io.CorpusWriter(folder, direction.name, write_dropped=False)
  try:
    for pair in pairs:
      writer.kept(cleaning_steps.Pair(*pair))
  finally:
    writer.close()


def _direction_report(entry: ScoredDirection, thresholds: Sequence[float],
                      kept: list[np.ndarray]) -> dict:
  report = {'candidates': len(entry.candidates), 'in_domain': entry.sample_size,
            'thresholds': {}}
  if entry.held_out_values is not None:
    report['held_out'] = len(entry.held_out_values)
  for threshold, indices in zip(thresholds, kept):
    row = {'kept': len(indices)}
    if entry.held_out_values is not None:
      row['held_out_recall'] = float(np.mean(entry.held_out_values >= threshold))
    report['thresholds'][str(threshold)] = row
  return report


def empty_selections(report: dict) -> list[str]:
  """A warning for each direction and threshold that keeps no pair."""
  return [f'{threshold_folder(float(threshold))} keeps no {direction} pairs: its files are '
          'empty and a stage trained on them has nothing to learn from'
          for direction, entry in report['directions'].items()
          for threshold, row in entry['thresholds'].items() if not row['kept']]


def format_report(report: dict) -> str:
  """The report as a table: a row per direction and threshold."""
  on = 'probability of in-domain' if report['method'] == 'classifier' else 'percentile rank'
  held_out = report['held_out']
  width = max([len('direction'), *map(len, report['directions'])]) + 2
  header = (f'{"direction":<{width}}{"threshold":>10}{"kept":>9}{"of":>9}{"share":>8}'
            + ('  held-out recall' if held_out else ''))
  rows = [f'{report["method"]} selection (thresholds on the {on})', header,
          '-' * len(header)]
  for direction, entry in report['directions'].items():
    for threshold, row in entry['thresholds'].items():
      share = row['kept'] / max(1, entry['candidates'])
      line = (f'{direction:<{width}}{threshold:>10}{row["kept"]:>9}{entry["candidates"]:>9}'
              f'{share:>8.1%}')
      if 'held_out_recall' in row:
        line += f'{row["held_out_recall"]:>17.3f}'
      elif held_out:
        line += f'{"-":>17}'
      rows.append(line + ('  none kept' if not row['kept'] else ''))
  return '\n'.join(rows)
