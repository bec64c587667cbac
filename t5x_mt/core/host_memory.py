"""Host memory: freed memory stays in the process for the next step to reuse.

XLA:CPU allocates an execution's temporaries as one buffer and frees it when the
execution ends: hundreds of MB for a train step. glibc's malloc serves a block that
large from a fresh `mmap` (a worker thread's arena cannot hold it) and unmaps it on
free, so at every step the kernel maps and zero-fills all of it again, a page fault per
page and a large share of the step in system time. With one arena, no `mmap` for large
blocks and no trimming of the heap's top, the freed buffer stays mapped and the next
step reuses it without faults (figures: bench/README.md, train_throughput). The process keeps
its peak heap instead of returning it between steps, which a training or translation
process reaches at every step anyway.

Elsewhere than glibc (macOS, musl) this does nothing. `T5X_MT_SYSTEM_MALLOC=1` in the
environment keeps malloc's defaults.
"""

import ctypes
import logging
import os

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4
_M_ARENA_MAX = -8
# The largest threshold mallopt takes (an int): free space at the heap's top below this
# stays with the process.
_LARGEST_TRIM_THRESHOLD = 2**31 - 1

OPT_OUT_VARIABLE = 'T5X_MT_SYSTEM_MALLOC'


def available_bytes() -> int | None:
  """The memory the kernel says a new allocation can have without swapping (Linux's
  MemAvailable); None where it does not say."""
  try:
    with open('/proc/meminfo', encoding='ascii') as meminfo:
      for line in meminfo:
        if line.startswith('MemAvailable:'):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


def retain_freed_memory() -> bool:
  """Sets glibc's malloc to keep freed memory for reuse; returns whether it applied.

  Call it before the first JAX computation: a thread that already allocated keeps the
  arena it has, and XLA's worker threads start with the CPU client.
  """
  if os.environ.get(OPT_OUT_VARIABLE) == '1':
    return False
  try:
    mallopt = ctypes.CDLL(None).mallopt
  except (OSError, AttributeError):
    return False
  mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
  applied = all(mallopt(parameter, value) == 1 for parameter, value in (
      (_M_ARENA_MAX, 1), (_M_MMAP_MAX, 0), (_M_TRIM_THRESHOLD, _LARGEST_TRIM_THRESHOLD)))
  logging.debug('malloc keeps freed memory: %s', applied)
  return applied
