"""What every command under launch/ shares: one clear line and exit 2 on bad input."""

import argparse
from collections.abc import Callable
import logging
import os
import sys
from typing import Any

from t5x_mt import host_memory
from t5x_mt import languages
from t5x_mt.errors import UserError

EXIT_USER_ERROR = 2


def run(main: Callable[[list[str]], int | None], uses_tensorflow: bool = True) -> None:
  """Runs `main(argv)`; a UserError prints `error: <message>` on stderr and exits 2.

  Commands that never touch TensorFlow pass `uses_tensorflow=False` and skip importing it.
  Before anything starts a thread, malloc is set to keep freed memory
  (`host_memory.retain_freed_memory`).
  """
  host_memory.retain_freed_memory()
  logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
  for noisy in ('jax._src', 'orbax', 'tensorflow'):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  # seqio warns that in-memory sources shuffle poorly across restarts; runs here restore
  # the input iterator's exact position instead of restarting it.
  logging.getLogger('absl').setLevel(logging.ERROR)
  if uses_tensorflow:
    _keep_tensorflow_off_accelerators()
  try:
    code = main(sys.argv[1:])
  except UserError as error:
    print(f'error: {error}', file=sys.stderr)
    sys.exit(EXIT_USER_ERROR)
  sys.exit(code or 0)


def _keep_tensorflow_off_accelerators() -> None:
  """tf.data runs on the host; TensorFlow must not take GPU memory that JAX needs."""
  os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  tf.config.set_visible_devices([], 'GPU')


def add_gin_flags(parser: argparse.ArgumentParser, example_binding: str) -> None:
  """--gin_file (repeatable) and --gin_bindings; `--gin.NAME=VALUE` is handled by
  gin_utils.split_gin_overrides before argparse sees the arguments."""
  parser.add_argument('--gin_file', action='append', required=True,
                      help='gin file (repeatable); later files override earlier ones')
  parser.add_argument('--gin_bindings', action='append', default=[],
                      help=f'extra binding, e.g. "{example_binding}" (same as --gin.NAME=VALUE)')


def add_decoding_flags(parser: argparse.ArgumentParser, family_models: bool = False) -> None:
  """Which run and checkpoint to load, and how to decode (translate.py, evaluate.py, ...).

  With `family_models`, --family_models may name one run per target-language family group
  instead of --checkpoint_dir (language family grouping, METHODS.md section 7).
  """
  parser.add_argument('--checkpoint_dir', required=not family_models,
                      help="the training run's MODEL_DIR")
  if family_models:
    parser.add_argument('--family_models', default=None,
                        help='one run per family group instead of --checkpoint_dir: '
                        '1=DIR,2=DIR,...; each direction goes to its target\'s group (swh: 3)')
  parser.add_argument('--step', type=int, default=None,
                      help='checkpoint step to load (default: the latest)')
  parser.add_argument('--beam_size', type=int, default=4, help='beam width; 1 is greedy')
  parser.add_argument('--alpha', type=float, default=1.0, help='length penalty exponent')
  parser.add_argument('--batch_size', type=int, default=64, help='sentences per batch')
  parser.add_argument('--parallel_batches', type=int, default=None,
                      help='batches decoded at once, a thread each (default: the CPU cores '
                      'on one CPU device, else 1)')
  parser.add_argument('--pivot_via', default=None,
                      help='translate through this language (X -> pivot -> Y), e.g. eng_Latn')


def decoding_overrides(args: argparse.Namespace) -> dict[str, Any]:
  """The Translator settings the decoding flags fix, checked so a typo fails before loading."""
  if args.beam_size < 1:
    raise UserError(f'--beam_size: must be >= 1, got {args.beam_size}')
  if args.batch_size < 1:
    raise UserError(f'--batch_size: must be >= 1, got {args.batch_size}')
  if args.parallel_batches is not None and args.parallel_batches < 1:
    raise UserError(f'--parallel_batches: must be >= 1, got {args.parallel_batches}')
  if hasattr(args, 'family_models'):
    if (args.checkpoint_dir is None) == (args.family_models is None):
      raise UserError('give exactly one of --checkpoint_dir and --family_models')
    if args.family_models is not None:
      parse_family_models(args.family_models)
      if args.step is not None:
        raise UserError('--step: family models each load their latest checkpoint')
  overrides = {'beam_size': args.beam_size, 'alpha': args.alpha, 'batch_size': args.batch_size}
  if args.parallel_batches is not None:
    overrides['parallel_batches'] = args.parallel_batches
  if args.pivot_via:
    overrides['pivot_language'] = languages.check_language(args.pivot_via, '--pivot_via')
    overrides['pivot_directions'] = ('*',)
  return overrides


def parse_family_models(text: str) -> dict[int, str]:
  """{family group: run folder} from '1=DIR,2=DIR,...' (--family_models)."""
  models = {}
  for entry in filter(None, (e.strip() for e in text.split(','))):
    group, sep, directory = entry.partition('=')
    if not sep or not group.strip().isdigit() or not directory.strip():
      raise UserError(f'--family_models: {entry!r} is not GROUP=DIR (e.g. 3=/runs/lfg3)')
    models[int(group)] = directory.strip()
  if not models:
    raise UserError('--family_models: give at least one GROUP=DIR')
  return models
