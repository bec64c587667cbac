"""Synthetic parallel data from monolingual text: back-translation and self-training.

Monolingual sentences in language L are translated into language X by a trained run. In
back-translation (BT) the pairs are X' -> L: the machine-translated side is the source
and the genuine sentence the target. In forward translation / self-training (FT) they are
L -> X'. Either way X is the synthetic language, and the pairs carry the tag scheme given
(`tags.synthetic_tags`: Caswell's `<BT>` or Tencent's `<DA>`), applied when the corpus is
read for training.

The output folder is a corpus the registry reads (`corpora.register_synthetic_dir`, or
`data_tasks.register_from_config.corpora_dirs` in a run's gin): per direction the two
line-aligned files `<src>-<tgt>.<src>` and `<src>-<tgt>.<tgt>` that launch/clean.py also
writes, and `synthetic.json`, which records each direction's synthetic language, tag
scheme, model and input. Several runs (one per direction) may write into one folder.

A run is resumable: translations are appended, one line each, to
`.partial/<direction>/translations.txt` and synced after every chunk; a killed run
restarted with the same flags drops a torn last line, continues at the next sentence, and
writes the final files only when every sentence is translated. No line is lost or repeated.
"""

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import pathlib
import shutil
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from t5x_mt.core import files
from t5x_mt.data import corpus_types
from t5x_mt.data import tags
from t5x_mt.core.errors import UserError

MODES = ('bt', 'ft')
PARTIAL = '.partial'
TRANSLATIONS = 'translations.txt'
FINGERPRINT = 'fingerprint.json'


@dataclasses.dataclass(frozen=True)
class Job:
  """What to make: `lang` is the monolingual language, `other_lang` the synthetic one.

  Attributes:
    mode: 'bt' writes pairs other_lang' -> lang, 'ft' writes lang -> other_lang'.
    tag: the tag scheme of the pairs: 'bt', 'da' or 'none'.
  """
  lang: str
  other_lang: str
  mode: str = 'bt'
  tag: str = 'bt'

  def __post_init__(self):
    if self.mode not in MODES:
      raise UserError(f'--mode: {self.mode!r} is not one of {", ".join(MODES)}')
    tags.check_synthetic_tag_scheme(self.tag, '--tag')
    if self.lang == self.other_lang:
      raise UserError(f'--lang and --into are both {self.lang}')

  @property
  def src_lang(self) -> str:
    return self.other_lang if self.mode == 'bt' else self.lang

  @property
  def tgt_lang(self) -> str:
    return self.lang if self.mode == 'bt' else self.other_lang

  @property
  def direction(self) -> str:
    return f'{self.src_lang}-{self.tgt_lang}'

  def pair(self, sentence: str, translation: str) -> tuple[str, str]:
    """The (source, target) pair of a monolingual sentence and its translation."""
    return (translation, sentence) if self.mode == 'bt' else (sentence, translation)


@dataclasses.dataclass(frozen=True)
class Summary:
  """What a run did: sentences translated now and before a restart, pairs written (pairs
  whose translation came out empty are left out), seconds spent translating."""
  direction: str
  translated_now: int
  resumed_from: int
  pairs_written: int
  seconds: float

  @property
  def sentences_per_second(self) -> float:
    return self.translated_now / self.seconds if self.seconds else 0.0


def fingerprint(job: Job, sentences: Sequence[str], provenance: dict[str, Any]) -> dict:
  """What a partial or finished direction was made from: a restart must match it."""
  digest = hashlib.sha256()
  for sentence in sentences:
    digest.update(sentence.encode('utf-8') + b'\n')
  made_from = {'job': dataclasses.asdict(job), 'sentences': len(sentences),
               'input_sha256': digest.hexdigest(), **provenance}
  return json.loads(json.dumps(made_from))  # As it reads back from disk (lists, not tuples).


class ResumableLines:
  """An append-only file of lines that survives a kill: every append is synced, and a
  torn last line (no newline) is cut off when the file is opened again."""

  def __init__(self, path: pathlib.Path):
    self.path = path
    self.path.parent.mkdir(parents=True, exist_ok=True)
    self.path.touch()
    data = self.path.read_bytes()
    complete = data[:data.rfind(b'\n') + 1]
    if len(complete) != len(data):
      with open(self.path, 'r+b') as f:
        f.truncate(len(complete))
    self.lines = complete.decode('utf-8').split('\n')[:-1] if complete else []

  def append(self, lines: Sequence[str]) -> None:
    with open(self.path, 'ab') as f:
      f.write(''.join(line + '\n' for line in lines).encode('utf-8'))
      f.flush()
      os.fsync(f.fileno())
    self.lines.extend(lines)


@contextlib.contextmanager
def _locked(output_dir: pathlib.Path) -> Iterator[None]:
  """Holds the folder's lock, so runs writing other directions never lose a manifest update."""
  with open(output_dir / f'.{corpus_types.SYNTHETIC_MANIFEST}.lock', 'w') as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    try:
      yield
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)


def _manifest(output_dir: pathlib.Path) -> dict:
  path = output_dir / corpus_types.SYNTHETIC_MANIFEST
  if not path.exists():
    return {'directions': {}}
  return json.loads(path.read_text(encoding='utf-8'))


def _check_partial(partial_dir: pathlib.Path, expected: dict) -> None:
  """Starts a partial direction or checks that a restart translates the same input."""
  path = partial_dir / FINGERPRINT
  if not path.exists():
    files.write_text_atomically(path, json.dumps(expected, indent=2, sort_keys=True))
    return
  if json.loads(path.read_text(encoding='utf-8')) != expected:
    raise UserError(f'{partial_dir}: an unfinished run of {partial_dir.name} with other '
                    'input, model or flags is here; rerun it with the same flags, or delete '
                    'this folder to start afresh')


def _finish(output_dir: pathlib.Path, job: Job, sentences: Sequence[str],
            translations: Sequence[str], expected: dict) -> int:
  """Writes the direction's pair files and manifest entry; returns the pairs written."""
  pairs = [job.pair(s, t) for s, t in zip(sentences, translations) if t.strip()]
  for side, lang in ((0, job.src_lang), (1, job.tgt_lang)):
    files.write_text_atomically(output_dir / f'{job.direction}.{lang}',
                                ''.join(pair[side] + '\n' for pair in pairs))
  with _locked(output_dir):
    manifest = _manifest(output_dir)
    manifest['directions'][job.direction] = {
        'synthetic_lang': job.other_lang, 'tag': job.tag, 'mode': job.mode,
        'pairs': len(pairs), 'made_from': expected}
    files.write_text_atomically(output_dir / corpus_types.SYNTHETIC_MANIFEST,
                                json.dumps(manifest, indent=2, sort_keys=True) + '\n')
  return len(pairs)


def _plan(output_dir: pathlib.Path, job: Job, partial_dir: pathlib.Path,
          expected: dict) -> dict[str, int]:
  """Where a direction's translation starts: {'pairs': n} if it is finished from the same
  input, else {'resumed_from': translations an interrupted run left}."""
  output_dir.mkdir(parents=True, exist_ok=True)
  finished = _manifest(output_dir)['directions'].get(job.direction)
  if finished and not partial_dir.exists():
    if finished.get('made_from') == expected:
      return {'pairs': finished['pairs']}
    raise UserError(f'{output_dir}: already holds {job.direction} made from other input, '
                    'model or flags; choose another --output')
  _check_partial(partial_dir, expected)
  return {'resumed_from': len(ResumableLines(partial_dir / TRANSLATIONS).lines)}


def translate_into_corpus(
    translate_chunks: Callable[[Sequence[str], int], Iterator[list[str]]], job: Job,
    sentences: Sequence[str], output_dir: str | os.PathLike[str],
    provenance: dict[str, Any]) -> Summary:
  """Translates `sentences` (language job.lang) into job.other_lang and writes the pairs.

  Args:
    translate_chunks: `(sentences, start) -> chunks of translations of sentences[start:]`
      in order (`line_streaming.translation_chunks` bound to a translator and direction).
    job: the languages, mode and tag scheme.
    sentences: the monolingual sentences, none empty.
    output_dir: the corpus folder (created if needed).
    provenance: what else identifies the output (checkpoint, step, decoding flags); a
      restart with different provenance is refused rather than mixed in.

  In a multi-process run every process translates (decoding splits each batch over all
  processes' devices) and process 0 alone reads and writes the corpus folder.
  """
  from t5x_mt.core import processes  # pylint: disable=g-import-not-at-top  (loads JAX)
  if not sentences:
    raise UserError(f'no {job.lang} sentences to translate')
  output_dir = pathlib.Path(output_dir)
  expected = fingerprint(job, sentences, provenance)
  partial_dir = output_dir / PARTIAL / job.direction
  plan = json.loads(processes.from_primary(lambda: json.dumps(
      _plan(output_dir, job, partial_dir, expected)).encode()))
  if 'pairs' in plan:
    return Summary(job.direction, 0, len(sentences), plan['pairs'], 0.0)
  resumed_from = plan['resumed_from']
  started = time.perf_counter()
  if not processes.is_primary():
    for _ in translate_chunks(sentences, resumed_from):
      pass
    return Summary(job.direction, len(sentences) - resumed_from, resumed_from, 0,
                   time.perf_counter() - started)
  done = ResumableLines(partial_dir / TRANSLATIONS)
  for chunk in translate_chunks(sentences, resumed_from):
    done.append(chunk)
  seconds = time.perf_counter() - started
  if len(done.lines) != len(sentences):
    raise RuntimeError(f'{done.path}: {len(done.lines)} translations for {len(sentences)} '
                       'sentences')
  pairs = _finish(output_dir, job, sentences, done.lines, expected)
  shutil.rmtree(partial_dir)
  with contextlib.suppress(OSError):
    partial_dir.parent.rmdir()  # Gone once no direction is unfinished.
  return Summary(job.direction, len(sentences) - resumed_from, resumed_from, pairs, seconds)


@dataclasses.dataclass(frozen=True)
class Teacher:
  """A trained run's translator and what identifies its output (checkpoint, step, flags)."""
  translator: Any
  provenance: dict[str, Any]

  def make_corpus(self, job: Job, sentences: Sequence[str], output_dir: str,
                  progress_bar: bool = True) -> Summary:
    """`translate_into_corpus` with this model, in chunks, with a progress bar."""
    from t5x_mt.decoding import line_streaming  # pylint: disable=g-import-not-at-top  (loads JAX)

    def translate_chunks(lines, start):
      return line_streaming.translation_chunks(self.translator, lines, job.lang,
                                               job.other_lang, start=start,
                                               progress_bar=progress_bar)

    return translate_into_corpus(translate_chunks, job, sentences, output_dir, self.provenance)


def summary_line(summary: Summary) -> str:
  """The JSON line the commands print last."""
  return json.dumps({
      'direction': summary.direction, 'translated_now': summary.translated_now,
      'resumed_from': summary.resumed_from, 'pairs_written': summary.pairs_written,
      'seconds': round(summary.seconds, 2),
      'sentences_per_second': round(summary.sentences_per_second, 2)})
