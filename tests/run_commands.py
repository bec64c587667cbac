"""Runs several launch commands one after another in one process, as
`python launch/A.py ... && python launch/B.py ...` runs them in as many.

  python tests/run_commands.py --commands='[["train.py", "--gin_file=..."], ...]' \
      [--coordinator_address=HOST:PORT --num_processes=N --process_id=I] \
      [--without_tensorflow] [--record_distributions=PATH]

tests/test_multiprocess.py starts it where a test is about what commands write rather than
how each process starts: importing TensorFlow and JAX and joining the processes costs
more than the commands themselves. The process joins the others once, with the distributed
flags every command takes; each command then runs through `cli.run` as in a process of its
own, on an empty gin config and the registry's default data settings. Before each command
a line `MARK <index>` goes to stdout and to stderr (`split_output` cuts them there); the
first command that fails ends the process with its exit code. --without_tensorflow makes
TensorFlow, seqio, TFDS and tensorflow-text unimportable first, as on a host that lacks
them; --record_distributions writes the installed distributions the commands imported
modules from (a JSON list) once they are done.
"""

import argparse
import importlib.abc
import importlib.metadata
import importlib.util
import json
import pathlib
import re
import sys

REPO = pathlib.Path(__file__).resolve().parents[1]
MARK = '\x1e run_commands: command'


def split_output(text: str, commands: int) -> list[str]:
  """What each of `commands` commands printed on a stream carrying the marks; '' for each
  where the stream has none (what a process other than 0 prints on stdout)."""
  parts = re.split(rf'{MARK} \d+\n', text)
  if len(parts) == 1:
    return [text, *[''] * (commands - 1)] if text else [''] * commands
  assert parts[0] == '' or not parts[0].strip(), f'output before the first command: {parts[0]}'
  assert len(parts) - 1 <= commands, text[-2000:]
  return parts[1:] + [''] * (commands - len(parts) + 1)


TENSORFLOW_PACKAGES = ('tensorflow', 'seqio', 'tensorflow_datasets', 'tensorflow_text')


class _WithoutTensorFlow(importlib.abc.MetaPathFinder):
  """The import system's finders, which find none of TENSORFLOW_PACKAGES: importing one
  fails, and `importlib.util.find_spec` answers None, as where they are not installed."""

  def __init__(self, finders):
    self._finders = finders

  def find_spec(self, name, path, target=None):
    if name.split('.')[0] in TENSORFLOW_PACKAGES:
      return None
    for finder in self._finders:
      spec = finder.find_spec(name, path, target)
      if spec is not None:
        return spec
    return None

  def invalidate_caches(self):
    for finder in self._finders:
      getattr(finder, 'invalidate_caches', lambda: None)()

  def find_distributions(self, *args, **kwargs):
    for finder in self._finders:
      for distribution in getattr(finder, 'find_distributions', lambda *_, **__: ())(
          *args, **kwargs):
        if distribution.metadata['Name'].replace('-', '_').lower() not in TENSORFLOW_PACKAGES:
          yield distribution


def main() -> int:
  at_start = set(sys.modules)  # What the interpreter's start-up imported.
  if '--without_tensorflow' in sys.argv:
    sys.argv.remove('--without_tensorflow')
    sys.meta_path[:] = [_WithoutTensorFlow(list(sys.meta_path))]
  from t5x_mt.core import cli  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser()
  parser.add_argument('--commands', required=True)
  parser.add_argument('--record_distributions', default=None)
  cli.add_distributed_flags(parser)
  args = parser.parse_args()
  cli.start_jax(args)  # Joins the other processes: the commands below start as one.
  import gin  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import settings  # pylint: disable=g-import-not-at-top
  for index, (script, *argv) in enumerate(json.loads(args.commands)):
    for stream in (sys.stdout, sys.stderr):
      stream.write(f'{MARK} {index}\n')
      stream.flush()
    spec = importlib.util.spec_from_file_location(f'launch_{script[:-3]}',
                                                  REPO / 'launch' / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.argv = [str(REPO / 'launch' / script), *argv]
    gin.clear_config()
    if 'data_tasks' in sys.modules:
      sys.modules['data_tasks'].configure(settings.DataSettings())
    code = 0
    try:
      cli.run(module.main)
    except SystemExit as exit_info:
      code = exit_info.code
    sys.stdout.flush()
    sys.stderr.flush()
    if code:
      return code
  if args.record_distributions:
    _record_distributions(args.record_distributions, at_start)
  return 0


def _record_distributions(path: str, at_start: set[str]) -> None:
  """The installed distributions whose files the modules imported since start-up are."""
  owners = {}
  for distribution in importlib.metadata.distributions():
    for file in distribution.files or ():
      if file.suffix in ('.py', '.so'):
        owners[str(file.locate())] = distribution.metadata['Name']
  names = {owners.get(getattr(module, '__file__', None) or '')
           for name, module in list(sys.modules.items()) if name not in at_start}
  pathlib.Path(path).write_text(json.dumps(sorted(names - {None})) + '\n', encoding='utf-8')


if __name__ == '__main__':
  sys.exit(main())
