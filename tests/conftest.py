"""Test session set-up: eight fake CPU devices, so sharded and unsharded runs can be compared.

The flag must be set before JAX initialises its backend; single-device tests build their
mesh over `jax.devices()[:1]`.
"""

import os

os.environ['XLA_FLAGS'] = (os.environ.get('XLA_FLAGS', '') +
                           ' --xla_force_host_platform_device_count=8').strip()
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
