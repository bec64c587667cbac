"""Freed host memory is reused: an XLA:CPU execution's temporaries map no fresh pages."""

import json
import pathlib
import subprocess
import sys

import pytest

from t5x_mt.core import host_memory

ROOT = pathlib.Path(__file__).resolve().parents[1]
TEMP_MIB = 64

# Runs a jitted function whose one temporary is a 64 MiB matrix and prints the median
# page faults of 15 calls after 8 (the first calls' other allocations still settle into
# the heap around the freed block). A fresh process: malloc must be set before JAX
# starts its threads.
PROBE = f"""
import json, resource, statistics, sys
from t5x_mt.core import host_memory
retained = sys.argv[1] == 'retain' and host_memory.retain_freed_memory()
import jax, jax.numpy as jnp
x = jnp.linspace(0.0, 1.0, {TEMP_MIB} << 18, dtype=jnp.float32)
side = {TEMP_MIB * 64}
f = jax.jit(lambda x: (jnp.exp(x).reshape(side, side).T @ jnp.cos(x[:side])).sum())
temp = f.lower(x).compile().memory_analysis().temp_size_in_bytes
faults = []
for call in range(8 + 15):
  before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  f(x).block_until_ready()
  faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
faults = statistics.median(faults[8:])
print(json.dumps({{'retained': retained, 'temp': temp, 'faults_per_call': faults}}))
"""


def _probe(mode: str) -> dict:
  result = subprocess.run([sys.executable, '-c', PROBE, mode], cwd=ROOT, check=True,
                          capture_output=True, text=True, timeout=300,
                          env={'PATH': '', 'JAX_PLATFORMS': 'cpu',
                               'PYTHONPATH': str(ROOT)})
  return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_temporaries_reuse_freed_pages_once_malloc_keeps_them():
  retained = _probe('retain')
  if not retained['retained']:
    pytest.skip('this C library has no glibc mallopt')
  default = _probe('default')
  temp_pages = retained['temp'] / 4096
  assert retained['temp'] >= TEMP_MIB << 20
  # By default every call maps its temporary afresh; kept, a call maps (almost) nothing.
  assert default['faults_per_call'] > 0.9 * temp_pages
  assert retained['faults_per_call'] < 0.01 * temp_pages


def test_the_environment_can_keep_mallocs_defaults(monkeypatch):
  monkeypatch.setenv(host_memory.OPT_OUT_VARIABLE, '1')
  assert not host_memory.retain_freed_memory()
