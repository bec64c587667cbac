"""Which environments start a multi-process run without flags."""

import pytest

from t5x_mt.core import processes
from t5x_mt.core.errors import UserError

SLURM_JOB = {'SLURM_JOB_ID': '77', 'SLURM_STEP_NODELIST': 'node[1-2]', 'SLURM_NTASKS': '2',
             'SLURM_PROCID': '1', 'SLURM_LOCALID': '0'}


def test_a_slurm_job_is_detected_and_a_plain_machine_is_not(monkeypatch):
  for name in SLURM_JOB:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv('TPU_SKIP_MDS_QUERY', '1')  # No metadata server to ask here.
  assert not processes._cluster_detected()  # pylint: disable=protected-access
  for name, value in SLURM_JOB.items():
    monkeypatch.setenv(name, value)
  assert processes._cluster_detected()  # pylint: disable=protected-access


def test_an_installed_mpi4py_is_no_cluster(monkeypatch):
  """JAX joins an mpi4py job only when asked by name; mpi4py is 'present' wherever it is
  installed, so a plain run on such a machine must stay one process."""
  from jax._src.clusters import mpi4py_cluster  # pylint: disable=g-import-not-at-top
  for name in SLURM_JOB:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv('TPU_SKIP_MDS_QUERY', '1')
  monkeypatch.setattr(mpi4py_cluster.Mpi4pyCluster, 'is_env_present', classmethod(
      lambda cls: True))
  assert not processes._cluster_detected()  # pylint: disable=protected-access


def test_device_ids_without_a_multi_process_run_are_refused(monkeypatch):
  for name in SLURM_JOB:
    monkeypatch.delenv(name, raising=False)
  monkeypatch.setenv('TPU_SKIP_MDS_QUERY', '1')
  with pytest.raises(UserError, match='--local_device_ids: only for a multi-process'):
    processes.initialize(None, None, None, [0, 1])
