"""Ctrl-C (SIGINT) held back while work that must not stop half-way finishes.

Ctrl-C raises KeyboardInterrupt in a command's main thread alone. Orbax writes a
checkpoint from threads of its own, which go on after the main thread is interrupted:
they would write into a staged output (`files.staged_folder`) after its removal and
leave it half made. So a checkpoint's write, and the renames and removals that put a
staged output in place or take it away, run with Ctrl-C `deferred`: they finish, then the
Ctrl-C is handled as anywhere else (`cli.run`: one line, exit 130).
"""

from collections.abc import Iterator
import contextlib
import signal
import threading


@contextlib.contextmanager
def deferred() -> Iterator[None]:
  """Runs the block whole: a Ctrl-C that comes meanwhile is given, once the block is done,
  to the SIGINT handler in place before it (Python's raises KeyboardInterrupt; training's
  saves and stops).

  Signal handlers belong to the main thread: elsewhere the block runs as it is.
  """
  previous = (signal.getsignal(signal.SIGINT)
              if threading.current_thread() is threading.main_thread() else None)
  if previous is None:  # Another thread, or a handler set outside Python.
    yield
    return
  interrupted = []
  signal.signal(signal.SIGINT, lambda number, frame: interrupted.append(number))
  try:
    yield
  finally:
    signal.signal(signal.SIGINT, previous)
    if interrupted:
      signal.raise_signal(signal.SIGINT)
