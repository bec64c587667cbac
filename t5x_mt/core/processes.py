"""A run's processes: joining them into one JAX system, and which of them writes.

One command runs as one process per host (TPU VM worker, Slurm task, or a process on
localhost); `jax.distributed.initialize` joins them, after which every process sees all
devices and runs the same program on its own. Arrays are global, so the processes compute
the same metrics and translations; process 0 alone writes run files and logs, and shows
progress. The others log with a prefix naming their index.
"""

import atexit
from collections.abc import Callable, Sequence
import itertools
import logging
import os
import re
import sys
import threading
from typing import BinaryIO

import jax
from jax.experimental import multihost_utils
import numpy as np
import orbax.checkpoint as ocp

from t5x_mt.core.errors import UserError

# Every process passes the same barriers in the same order, so they number them alike.
_barriers = itertools.count()
# What gloo prints on stdout each time it connects a group of processes for a collective:
# nothing a user acts on, and every process prints it again for every new group. A process
# with several devices connects them from several threads at once, whose reports interleave
# piece by piece, so a line made of nothing but these pieces is one of them or a fragment
# of one (a rank number left alone on its line).
_GLOO_PIECES = re.compile(rb'(?:\[Gloo\] Rank | is connected to | peer ranks\. '
                          rb'|Expected number of connected peer ranks is : |\d+|\s)+')


def initialize(coordinator_address: str | None, num_processes: int | None,
               process_id: int | None, local_device_ids: Sequence[int] | None) -> None:
  """Joins this process to the run's others; stays single-process where there are none.

  With none of the first three given (`cli.add_distributed_flags` checks them), a Cloud
  TPU VM slice, Slurm or MPI job is detected and `jax.distributed.initialize()` reads its
  processes from the environment. On CPU the processes' devices exchange data through
  gloo, so they form one mesh.
  """
  if coordinator_address is None and not _cluster_detected():
    if local_device_ids is not None:
      raise UserError('--local_device_ids: only for a multi-process run (give '
                      '--coordinator_address, --num_processes and --process_id)')
    return
  jax.config.update('jax_cpu_collectives_implementation', 'gloo')
  native_output = _NativeOutput()
  native_output.redirect()
  jax.distributed.initialize(coordinator_address=coordinator_address,
                             num_processes=num_processes, process_id=process_id,
                             local_device_ids=local_device_ids)
  if jax.process_index() > 0:
    prefix = f'[process {jax.process_index()}] '
    native_output.prefix = prefix.encode()
    _prefix_log_lines(prefix)
    # Results (scores, translations) are printed once, by process 0.
    sys.stdout = open(os.devnull, 'w', encoding='utf-8')  # pylint: disable=consider-using-with


def _cluster_detected() -> bool:
  """Whether JAX finds a cluster (Cloud TPU VM, Slurm, Open MPI, Kubernetes) to read the
  processes from, as `jax.distributed.initialize()` looks for one: clusters that JAX uses
  only when asked by name (mpi4py, present wherever the package is installed) do not
  count. JAX's detection is private, so a JAX without it finds none."""
  try:
    from jax._src import clusters  # pylint: disable=g-import-not-at-top
    return any(cluster.is_env_present()
               for cluster in clusters.ClusterEnv._cluster_types  # pylint: disable=protected-access
               if not getattr(cluster, 'opt_in_only_method', False))
  except (ImportError, AttributeError):
    return False


class _NativeOutput:
  """What native code writes to file descriptor 1, sent to stderr a line at a time.

  The collectives' native code reports on descriptor 1, which would mix with what a
  command prints (translations, scores) on Python's stdout. Its lines go to stderr
  instead, each with `prefix` (the process's, as log lines have), and gloo's reports of
  connections made are left out.
  """

  def __init__(self):
    self.prefix = b''

  def copy(self, source: BinaryIO, sink: BinaryIO) -> None:
    """Copies the lines of `source` to `sink` until `source` ends."""
    for line in source:
      if not _GLOO_PIECES.fullmatch(line):
        sink.write(self.prefix + line)
        sink.flush()

  def redirect(self) -> None:
    """Points descriptor 1 at a pipe that a daemon thread copies to stderr, and keeps
    Python's stdout on the real descriptor 1. At exit descriptor 1 turns to the null
    device, which ends the pipe once the thread has copied what it holds."""
    sys.stdout.flush()
    real_stdout = os.dup(1)
    read_end, write_end = os.pipe()
    os.dup2(write_end, 1)
    os.close(write_end)
    sys.stdout = os.fdopen(real_stdout, 'w', encoding='utf-8', buffering=1)
    source = os.fdopen(read_end, 'rb')
    sink = os.fdopen(os.dup(2), 'wb')
    copier = threading.Thread(target=self.copy, args=(source, sink), daemon=True,
                              name='native stdout')
    copier.start()

    def close_pipe() -> None:
      null = os.open(os.devnull, os.O_WRONLY)
      os.dup2(null, 1)
      os.close(null)
      copier.join(timeout=1)
    atexit.register(close_pipe)


def _prefix_log_lines(prefix: str) -> None:
  for handler in logging.getLogger().handlers:
    handler.setFormatter(logging.Formatter(prefix + '%(levelname)s %(name)s: %(message)s'))


def is_primary() -> bool:
  """Whether this process writes run files, logs and prints results (process 0)."""
  return jax.process_index() == 0


def wait_for_all(name: str, timeout_seconds: int = 3600) -> None:
  """Returns once every process has reached the point named `name` (a no-op alone).

  The barrier is the coordinator's, not a collective on the devices: on CPU, gloo gives
  up on a collective that one process reaches 30 s after another, so processes meet here
  before one where they may arrive far apart (after a compilation, or while process 0
  builds the vocabulary).
  """
  if jax.process_count() > 1:
    ocp.multihost.get_barrier_sync_fn()(key=f'{name}.{next(_barriers)}',
                                        timeout_ms=timeout_seconds * 1000)


def from_primary(make: Callable[[], bytes]) -> bytes:
  """What `make()` returns on process 0, on every process (`make` runs there alone)."""
  if jax.process_count() == 1:
    return make()
  data = np.frombuffer(make(), np.uint8) if is_primary() else np.zeros(0, np.uint8)
  wait_for_all('made on process 0')
  size = int(multihost_utils.broadcast_one_to_all(np.int32(data.size)))
  if not is_primary():
    data = np.zeros(size, np.uint8)
  return np.asarray(multihost_utils.broadcast_one_to_all(data)).tobytes()


def gather(array: jax.Array) -> np.ndarray:
  """The whole of a global array as NumPy on every process, however it is sharded."""
  if array.is_fully_addressable:
    return np.asarray(array)
  return np.asarray(multihost_utils.process_allgather(array, tiled=True))
