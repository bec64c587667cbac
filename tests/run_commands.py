"""Runs several launch commands one after another in one process, as
`python launch/A.py ... && python launch/B.py ...` runs them in as many.

  python tests/run_commands.py --commands='[["train.py", "--gin_file=..."], ...]' \
      [--coordinator_address=HOST:PORT --num_processes=N --process_id=I]

tests/test_multiprocess.py starts it where a test is about what commands write rather than
how each process starts: importing TensorFlow and JAX and joining the processes costs
more than the commands themselves. The process joins the others once, with the distributed
flags every command takes; each command then runs through `cli.run` as in a process of its
own, on an empty gin config and the registry's default data settings. Before each command
a line `MARK <index>` goes to stdout and to stderr (`split_output` cuts them there); the
first command that fails ends the process with its exit code.
"""

import argparse
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


def main() -> int:
  from t5x_mt.core import cli  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser()
  parser.add_argument('--commands', required=True)
  cli.add_distributed_flags(parser)
  args = parser.parse_args()
  cli.start_jax(args)  # Joins the other processes: the commands below start as one.
  import gin  # pylint: disable=g-import-not-at-top
  import data_tasks  # pylint: disable=g-import-not-at-top
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
    data_tasks.configure(data_tasks.DataSettings())
    code = 0
    try:
      cli.run(module.main)
    except SystemExit as exit_info:
      code = exit_info.code
    sys.stdout.flush()
    sys.stderr.flush()
    if code:
      return code
  return 0


if __name__ == '__main__':
  sys.exit(main())
