"""What every command under launch/ shares: one clear line and exit 2 on bad input."""

from collections.abc import Callable
import logging
import os
import sys

from t5x_mt.errors import UserError

EXIT_USER_ERROR = 2


def run(main: Callable[[list[str]], int | None]) -> None:
  """Runs `main(argv)`; a UserError prints `error: <message>` on stderr and exits 2."""
  logging.basicConfig(level=logging.INFO, format='%(levelname)s %(name)s: %(message)s')
  for noisy in ('jax._src', 'orbax', 'tensorflow'):
    logging.getLogger(noisy).setLevel(logging.WARNING)
  # seqio warns that in-memory sources shuffle poorly across restarts; runs here restore
  # the input iterator's exact position instead of restarting it.
  logging.getLogger('absl').setLevel(logging.ERROR)
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
