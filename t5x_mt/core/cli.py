"""What every command under launch/ shares: one clear line and exit 2 on bad input.

A command prints its own output and nothing else: TensorFlow's and XLA's start-up logging
is kept off stderr, and `--help` and argument errors are answered before TensorFlow or JAX
is imported at all (each command calls `start_tensorflow` once its flags are checked).
Its log (stderr) shows warnings, and progress lines where no progress bar is drawn (a log
file, a pipe); `--verbosity` on every command shows more or less (`set_verbosity`).
"""

import argparse
from collections.abc import Callable, Iterable, Iterator
import contextlib
import difflib
import functools
import gc
import logging
import os
import pathlib
import re
import signal
import sys
import tempfile
import traceback
from typing import NoReturn

from t5x_mt.core import host_memory
from t5x_mt.core.errors import RunFailure
from t5x_mt.core.errors import UserError

EXIT_USER_ERROR = 2
EXIT_RUN_FAILURE = 1
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, what a shell reports for a filter cut off.
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a command Ctrl-C stopped.
_COORDINATOR_ADDRESS = re.compile(r'^(\[[0-9a-fA-F:.]+\]|[\w.-]+):\d+$')
VERBOSITIES = ('debug', 'info', 'warning', 'error')
# The logger of the lines that stand in for a progress bar where none is drawn
# (`progress.report`): shown at a command's default verbosity.
PROGRESS_LOG = 't5x_mt.progress'

# Lines TensorFlow's native code prints while it loads and looks for GPUs, whatever
# TF_CPP_MIN_LOG_LEVEL says: that absl logs before it is set up, (on CPUs with AVX-512
# VNNI or AMX) that its oneDNN kernels are on, and (on every CPU-only machine) that no
# CUDA driver was found. None of them is about the command.
_START_UP_NOISE = re.compile('|'.join((
    r'All log messages before absl::InitializeLog\(\) is called',
    r'port\.cc:\d+\] oneDNN custom operations are on',
    r'cudart_stub\.cc:\d+\] Could not find cuda drivers',
    r'failed call to cuInit',
)))


def run(main: Callable[[list[str]], int | None]) -> None:
  """Runs `main(argv)`; bad input prints `error: <one line>` on stderr and exits 2, a run
  that cannot go on (RunFailure) the same and exits 1, and Ctrl-C prints `interrupted`
  and exits 130, as a shell reports a command SIGINT stopped.

  Bad input is a UserError, or a library error that only bad input causes (a file that
  is no SentencePiece model). Before anything starts a thread, malloc is set to keep
  freed memory (`host_memory.retain_freed_memory`).

  A Ctrl-C stops the command even where a library's `except` caught the
  KeyboardInterrupt it raised: the command then exits 130 once `main` returns. What
  the command was writing is gone by then (`files.atomic_writer`,
  `files.staged_folder`); a command that takes SIGINT itself (training saves and stops
  on it) sets its own handler meanwhile.
  """
  # TensorFlow's and XLA's own INFO and WARNING lines off; read when they load.
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  # A command speaks through what it prints; its log shows warnings and errors only, so
  # that bad input stays one line. Set first: a module-level logging call made before it
  # (malloc's set-up logs one) would install Python's default handler instead.
  logging.basicConfig(level=logging.WARNING, format='%(levelname)s %(name)s: %(message)s')
  set_verbosity(None)
  host_memory.retain_freed_memory()
  collect_less_often()
  logging.getLogger().addFilter(_not_a_gin_search_miss)
  with _interrupts_noted() as interrupted:
    try:
      code = main(sys.argv[1:])
    except KeyboardInterrupt:
      _exit_interrupted()
    except UserError as error:
      _exit_with(error)
    except BrokenPipeError:
      _exit_reader_gone()
    except RunFailure as error:
      _exit_with(error, EXIT_RUN_FAILURE)
    except (RuntimeError, OSError) as error:
      model_file = _unloadable_sentencepiece_model(error)
      if model_file is None:
        raise
      _exit_with(UserError(f'{model_file}: cannot load this SentencePiece model '
                           f'({_first_line(error)})'))
  if interrupted:
    _exit_interrupted()
  sys.exit(code or 0)


@functools.cache
def collect_less_often() -> None:
  """Leaves the objects that exist at the first call (the modules imported so far) out
  of Python's cyclic collections, and runs those less often. Tracing a model allocates
  millions of objects, so the default thresholds (a collection every 700 allocations)
  start a full collection every few seconds, and each rescans every object of
  TensorFlow, JAX and the rest of what was imported, none of which ever becomes garbage.
  Once per process: a later call would also freeze whatever garbage awaits collection."""
  gc.freeze()
  gc.set_threshold(10_000, 10, 10)


@contextlib.contextmanager
def _interrupts_noted() -> Iterator[list[int]]:
  """Meanwhile Ctrl-C raises KeyboardInterrupt, as Python's own handler does, and is noted
  in the list yielded. A process started with SIGINT ignored (`nohup`, a background job
  of a script) keeps ignoring it."""
  interrupted = []
  if signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
    yield interrupted
    return

  def interrupt(number, frame):
    del frame
    interrupted.append(number)
    raise KeyboardInterrupt

  signal.signal(signal.SIGINT, interrupt)
  try:
    yield interrupted
  finally:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _exit_interrupted() -> NoReturn:
  print('interrupted', file=sys.stderr)
  sys.exit(EXIT_INTERRUPTED)


def set_verbosity(verbosity: str | None) -> None:
  """What a command's log shows: by default (None) warnings and errors, and the progress
  lines that stand in for a bar where none is drawn; else that level of `VERBOSITIES`
  and above (`info`: what a command does, such as the held-out lines of a corpus), progress
  lines from `info` on, and the lines of absl's libraries at `debug` alone.
  """
  logging.getLogger().setLevel(logging.WARNING if verbosity is None else verbosity.upper())
  logging.getLogger(PROGRESS_LOG).setLevel(logging.INFO if verbosity is None
                                           else logging.NOTSET)
  # seqio warns that in-memory sources shuffle poorly across restarts; runs here restore
  # the input iterator's exact position instead of restarting it.
  logging.getLogger('absl').setLevel(logging.DEBUG if verbosity == 'debug' else logging.ERROR)


def _exit_reader_gone() -> NoReturn:
  """Exits quietly when whatever reads stdout stopped reading (`translate.py ... | head`), as
  a Unix filter does: no traceback, and none either when Python flushes stdout at exit."""
  os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
  sys.exit(EXIT_BROKEN_PIPE)


def _not_a_gin_search_miss(record: logging.LogRecord) -> bool:
  """False for the error gin logs for each search path that lacks an included file, even
  when the next one has it (`include 'gin/models/tiny.gin'` run outside the repository)."""
  return not (record.getMessage().startswith('Path not found: ')
              and pathlib.Path(record.pathname).match('gin/resource_reader.py'))


def _exit_with(error: Exception, status: int = EXIT_USER_ERROR) -> NoReturn:
  print(f'error: {_first_line(error)}', file=sys.stderr)
  sys.exit(status)


def _first_line(error: Exception) -> str:
  """An error's message without what gin appends ("In call to configurable ...")."""
  lines = str(error).strip().splitlines()
  return lines[0] if lines else type(error).__name__


def _unloadable_sentencepiece_model(error: Exception) -> str | None:
  """The file SentencePiece was loading when it raised `error`, else None."""
  spm = sys.modules.get('sentencepiece')
  if spm is None:
    return None
  load = spm.SentencePieceProcessor.LoadFromFile.__code__
  for frame, _ in traceback.walk_tb(error.__traceback__):
    if frame.f_code is load:
      return str(frame.f_locals['filename'])
  return None


@functools.cache
def start_tensorflow() -> None:
  """Imports TensorFlow quietly and keeps it off the accelerators.

  Commands call it after checking their flags and before importing anything that loads
  TensorFlow or JAX. tf.data runs on the host: TensorFlow must not take GPU memory that
  JAX needs. A host without TensorFlow (one that trains from cached tasks) has none to
  start.
  """
  with _start_up_noise_dropped():
    try:
      import tensorflow as tf  # pylint: disable=g-import-not-at-top
    except ImportError:
      return
    tf.config.set_visible_devices([], 'GPU')


class _NoBigQueryNotice(logging.Filter):
  """Drops the warning Apache Beam logs on import where BigQuery's clients are missing:
  no command reads BigQuery."""

  def filter(self, record: logging.LogRecord) -> bool:
    return 'bigquery client libraries are not available' not in record.getMessage()


def import_beam() -> None:
  """Imports Apache Beam without its start-up warning, before a command's Beam modules."""
  quiet = _NoBigQueryNotice()
  logging.getLogger().addFilter(quiet)
  try:
    import apache_beam  # pylint: disable=g-import-not-at-top,unused-import
  finally:
    logging.getLogger().removeFilter(quiet)


@contextlib.contextmanager
def _start_up_noise_dropped() -> Iterator[None]:
  """Holds back what is written to file descriptor 2 (native code's stderr) meanwhile,
  then writes it out without the `_START_UP_NOISE` lines."""
  sys.stderr.flush()
  saved_stderr = os.dup(2)
  with tempfile.TemporaryFile() as held:
    os.dup2(held.fileno(), 2)
    try:
      yield
    finally:
      sys.stderr.flush()
      os.dup2(saved_stderr, 2)
      os.close(saved_stderr)
      held.seek(0)
      lines = held.read().decode('utf-8', errors='replace').splitlines(keepends=True)
      sys.stderr.write(''.join(line for line in lines if not _START_UP_NOISE.search(line)))
      sys.stderr.flush()


class _ArgumentParser(argparse.ArgumentParser):
  """Argument errors are UserErrors: one line naming the flag, not the usage and a line.

  A misspelt flag is named before the required flag it leaves missing. --verbosity takes
  effect as the flags are parsed, before the command logs anything.
  """

  def parse_args(self, args=None, namespace=None):
    arguments = sys.argv[1:] if args is None else list(args)
    if '--' in arguments:
      arguments = arguments[:arguments.index('--')]
    for argument in arguments:
      flag = argument.partition('=')[0]
      if flag.startswith('--') and flag not in self._option_string_actions:
        close = _meant_flag(flag, self._option_string_actions)
        self.error(f'unknown flag {argument}' + (f' (did you mean {close}?)' if close else ''))
    parsed = super().parse_args(args, namespace)
    if parsed.verbosity is not None:
      set_verbosity(parsed.verbosity)
    return parsed

  def error(self, message: str) -> NoReturn:
    raise UserError(f'{message}; see --help')


def _meant_flag(flag: str, known: Iterable[str]) -> str | None:
  """The flag an unknown `flag` most likely means: the shortest it abbreviates (flags must
  be spelled in full), else the closest spelling, else None."""
  known = list(known)
  abbreviated = sorted((name for name in known if name.startswith(flag)), key=len)
  if abbreviated:
    return abbreviated[0]
  close = difflib.get_close_matches(flag, known, n=1)
  return close[0] if close else None


def argument_parser(description: str) -> argparse.ArgumentParser:
  """The flag parser of a command whose --help shows `description` (its docstring).

  Flags must be spelled in full: an abbreviation (`--src=` for `--src_lang`) could
  silently mean another flag after a typo. Every command has --verbosity (`set_verbosity`).
  """
  parser = _ArgumentParser(description=description, allow_abbrev=False,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--verbosity', choices=VERBOSITIES, default=None,
                      help='what the log on stderr shows (default: warnings, and progress '
                      'lines where no progress bar is drawn, as in a log file; info: also '
                      'what the command does)')
  return parser


@contextlib.contextmanager
def setting_named_as(setting: str, flag: str) -> Iterator[None]:
  """UserErrors that name a gin `setting` (MIXTURE_OR_TASK_NAME) name the command's `flag`
  (--mixture) instead: the user gave the value with the flag."""
  try:
    yield
  except UserError as error:
    message = str(error)
    if not message.startswith(f'{setting}: '):
      raise
    raise UserError(f'{flag}: {message.removeprefix(f"{setting}: ")}') from None


def add_gin_flags(parser: argparse.ArgumentParser, example_binding: str) -> None:
  """--gin_file (repeatable) and --gin_bindings; `--gin.NAME=VALUE` is handled by
  gin_utils.split_gin_overrides before argparse sees the arguments."""
  parser.add_argument('--gin_file', action='append', required=True,
                      help='gin file (repeatable); later files override earlier ones')
  parser.add_argument('--gin_bindings', action='append', default=[],
                      help=f'extra binding, e.g. "{example_binding}" (same as --gin.NAME=VALUE)')


def add_distributed_flags(parser: argparse.ArgumentParser) -> list[str]:
  """--coordinator_address, --num_processes, --process_id and --local_device_ids: how this
  process joins a multi-process run (`start_jax`); returns the flags' names (argparse's
  dests)."""
  return [action.dest for action in (
      parser.add_argument('--coordinator_address', default=None,
                          help='HOST:PORT where process 0 coordinates a multi-process run '
                          '(default: read from a Cloud TPU VM slice or Slurm job, else one '
                          'process)'),
      parser.add_argument('--num_processes', type=int, default=None,
                          help='processes in the run (one per host, or per GPU)'),
      parser.add_argument('--process_id', type=int, default=None,
                          help="this process's index, 0 to --num_processes - 1"),
      parser.add_argument('--local_device_ids', default=None,
                          help='comma-separated accelerators this process uses (Slurm with '
                          "one process per node: all the node's GPUs)"))]


def _check_distributed_flags(args: argparse.Namespace) -> None:
  """A multi-process run names its coordinator, its size and this process's index."""
  given = {'--coordinator_address': args.coordinator_address,
           '--num_processes': args.num_processes, '--process_id': args.process_id}
  if all(value is None for value in given.values()):
    return
  missing = [flag for flag, value in given.items() if value is None]
  if missing:
    raise UserError(f'{missing[0]}: needed with '
                    f'{", ".join(flag for flag in given if flag not in missing)} '
                    '(a multi-process run names all three)')
  if not _COORDINATOR_ADDRESS.match(args.coordinator_address):
    raise UserError(f'--coordinator_address: {args.coordinator_address!r} is not HOST:PORT')
  if args.num_processes < 1:
    raise UserError(f'--num_processes: must be >= 1, got {args.num_processes}')
  if not 0 <= args.process_id < args.num_processes:
    raise UserError(f'--process_id: {args.process_id} is out of range for '
                    f'--num_processes={args.num_processes} (0 to {args.num_processes - 1})')


def start_jax(args: argparse.Namespace) -> None:
  """Starts TensorFlow quietly, then joins this process to the run's others (with the
  flags of `add_distributed_flags`): before anything touches a device."""
  _check_distributed_flags(args)
  local_device_ids = None
  if args.local_device_ids is not None:
    try:
      local_device_ids = [int(i) for i in args.local_device_ids.split(',')]
    except ValueError:
      raise UserError(f'--local_device_ids: {args.local_device_ids!r} is not a comma-separated '
                      'list of device numbers') from None
  start_tensorflow()
  from t5x_mt.core import processes  # pylint: disable=g-import-not-at-top  (imports JAX)
  processes.initialize(args.coordinator_address, args.num_processes, args.process_id,
                       local_device_ids)
