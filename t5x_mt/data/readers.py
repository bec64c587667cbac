"""Readers for parallel text on disk: multi-way aligned folders, two-file pairs and TSV.

All files are UTF-8, one segment per line. Line ends may be LF or CRLF (NTREX-128 ships
CRLF); a lone '\\r' inside a line is kept, so that a stray carriage return never shifts the
alignment of a multi-way corpus. A byte-order mark that starts a file (Windows editors
write one) is not text and is dropped: kept, it would be part of the first segment, in a
reference the scores read too. Every problem is a UserError naming the file (and line).
"""

import codecs
import gzip
import json
import os
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from t5x_mt.core import files
from t5x_mt.core.errors import UserError
from t5x_mt.core.languages import FLORES200_CODES
from t5x_mt.core.languages import NTREX_TO_FLORES

SHARED_DATA_ENV = 'T5X_MT_SHARED_DATA'


def shared_data_dir() -> Path | None:
  """The shared sample-data folder, or None where it is absent.

  `$T5X_MT_SHARED_DATA` if set, else `../shared/data` beside the repository root (the
  parent of the `t5x_mt/` package). Tests skip when this returns None.
  """
  configured = os.environ.get(SHARED_DATA_ENV)
  if configured:
    folder = Path(configured)
  else:
    folder = files.REPO_ROOT.parent / 'shared' / 'data'
  return folder if folder.is_dir() else None


def read_lines(path: str | os.PathLike[str]) -> list[str]:
  """The lines of a UTF-8 text file (gzipped if named *.gz), without line ends."""
  return list(iter_lines(path))


def iter_lines(path: str | os.PathLike[str]) -> Iterator[str]:
  """`read_lines` one line at a time: the file is read only as far as the lines taken, so
  a pipe's writer may still be writing the rest."""
  path = Path(path)
  try:
    with gzip.open(path, 'rb') if path.suffix == '.gz' else open(path, 'rb') as f:
      for number, raw in enumerate(f, start=1):
        if number == 1:
          raw = raw.removeprefix(codecs.BOM_UTF8)
        try:
          line = raw.decode('utf-8')
        except UnicodeDecodeError as e:
          raise UserError(f'{path}:{number}: not valid UTF-8 ({e.reason} at byte {e.start})'
                          ) from None
        line = line[:-1] if line.endswith('\n') else line
        yield line[:-1] if line.endswith('\r') else line
  except FileNotFoundError:
    raise UserError(f'{path}: no such file') from None
  except (OSError, EOFError) as e:
    raise UserError(f'{path}: cannot read: {e}') from None


def read_parallel_files(src_file: str | os.PathLike[str],
                        tgt_file: str | os.PathLike[str]) -> list[tuple[str, str]]:
  """Line-aligned pairs from a source file and a target file of equal length."""
  src_lines, tgt_lines = read_lines(src_file), read_lines(tgt_file)
  if len(src_lines) != len(tgt_lines):
    raise UserError(f'{src_file} has {len(src_lines)} lines but {tgt_file} has '
                    f'{len(tgt_lines)}: parallel files must have one line per segment')
  return list(zip(src_lines, tgt_lines))


def read_tsv(path: str | os.PathLike[str], src_column: int = 0,
             tgt_column: int = 1) -> list[tuple[str, str]]:
  """Pairs from two tab-separated columns (0-based) of a TSV file, gzipped if *.gz.

  No quoting: a field is everything between tabs, as in OPUS/Tatoeba/gettext dumps.
  """
  pairs = []
  needed = max(src_column, tgt_column) + 1
  for number, line in enumerate(read_lines(path), start=1):
    fields = line.split('\t')
    if len(fields) < needed:
      raise UserError(f'{path}:{number}: {len(fields)} tab-separated columns, need at least '
                      f'{needed} (columns {src_column} and {tgt_column})')
    pairs.append((fields[src_column], fields[tgt_column]))
  return pairs


def read_jsonl(path: str | os.PathLike[str]) -> list[dict]:
  """One JSON object per line (gzipped if *.gz); UserError naming the line that is not."""
  rows = []
  for number, line in enumerate(read_lines(path), start=1):
    if not line.strip():
      continue
    try:
      row = json.loads(line)
    except json.JSONDecodeError as e:
      raise UserError(f'{path}:{number}: not JSON ({e.msg})') from None
    if not isinstance(row, dict):
      raise UserError(f'{path}:{number}: expected a JSON object')
    rows.append(row)
  return rows


def read_multiway(files: Mapping[str, str | os.PathLike[str]]) -> list[dict[str, str]]:
  """Rows {language: text} from line-aligned files, one file per language.

  All files must have the same number of lines: line i of each translates the same segment.
  """
  lines = {lang: read_lines(path) for lang, path in files.items()}
  counts = {lang: len(segments) for lang, segments in lines.items()}
  if len(set(counts.values())) > 1:
    listed = ', '.join(f'{files[lang]} ({count})' for lang, count in counts.items())
    raise UserError(f'multi-way files differ in line count: {listed}')
  count = next(iter(counts.values()), 0)
  return [{lang: segments[i] for lang, segments in lines.items()} for i in range(count)]


def require_dir(directory: str | os.PathLike[str]) -> Path:
  directory = Path(directory)
  if not directory.is_dir():
    raise UserError(f'{directory}: no such folder')
  return directory


def flores_files(directory: str | os.PathLike[str], suffix: str = '.dev') -> dict[str, Path]:
  """{FLORES code: file} for the `<code><suffix>` files of a FLORES-200 split folder."""
  directory = require_dir(directory)
  found = {path.name[:-len(suffix)]: path for path in sorted(directory.glob(f'*{suffix}'))}
  files = {code: path for code, path in found.items() if code in FLORES200_CODES}
  if not files:
    raise UserError(f'{directory}: no FLORES-200 files named <code>{suffix} (e.g. '
                    f'eng_Latn{suffix})')
  return files


def ntrex_files(directory: str | os.PathLike[str]) -> dict[str, Path]:
  """{FLORES code: file} for NTREX-128 (`newstest2019-src.eng.txt`, `-ref.<code>.txt`).

  Reference files whose NTREX code has no FLORES-200 equivalent (see
  `t5x_mt.core.languages.NTREX_TO_FLORES`, e.g. 'fuc' Pulaar) are left out.
  """
  directory = require_dir(directory)
  source = directory / 'newstest2019-src.eng.txt'
  if not source.is_file():
    raise UserError(f'{source}: no such file (the NTREX-128 English source)')
  files = {'eng_Latn': source}
  prefix, suffix = 'newstest2019-ref.', '.txt'
  for path in sorted(directory.glob(f'{prefix}*{suffix}')):
    ntrex_code = path.name[len(prefix):-len(suffix)]
    if ntrex_code in NTREX_TO_FLORES:
      files[NTREX_TO_FLORES[ntrex_code]] = path
  return files


def split_last(rows: Sequence, count: int) -> tuple[list, list]:
  """(all but the last `count` rows, the last `count` rows): a held-out tail split."""
  if not 0 <= count <= len(rows):
    raise UserError(f'cannot hold out the last {count} of {len(rows)} rows')
  cut = len(rows) - count
  return list(rows[:cut]), list(rows[cut:])
