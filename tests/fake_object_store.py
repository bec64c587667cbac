"""A gs:// bucket kept in TensorFlow's in-memory ram:// filesystem, so that tests take the
object-store code path without reaching the network.

Every tf.io.gfile function (which etils.epath's gs:// backend calls, as does code that
uses tf.io.gfile itself) gets gs://... paths as ram://... and returns the paths it lists
as gs://... again: only the storage behind the scheme is swapped. Two quirks of ram://
are kept out of the tests: a write there does not replace an existing file (an object
write does, so the fake removes it first), and a folder lists the files of folders whose
names extend its own (keep names in one folder from being prefixes of one another).
"""

from collections.abc import Iterator
import inspect
import uuid

from etils.epath import gpath
import pytest
import tensorflow as tf

_GFILE_FUNCTIONS = ('GFile', 'exists', 'isdir', 'listdir', 'glob', 'walk', 'makedirs',
                    'mkdir', 'rmtree', 'remove', 'rename', 'copy', 'stat')


def in_ram(location: str) -> str:
  """Where gs:// `location` is kept."""
  return 'ram://' + location.removeprefix('gs://')


def _to_ram(value):
  return in_ram(value) if isinstance(value, str) and value.startswith('gs://') else value


def _to_gs(value):
  if isinstance(value, str) and value.startswith('ram://'):
    return 'gs://' + value.removeprefix('ram://')
  if isinstance(value, (list, tuple)):
    return type(value)(_to_gs(item) for item in value)
  return value


def _replacing_gfile(gfile):
  def open_file(name, mode='r'):
    if 'w' in mode and tf.io.gfile.exists(name):
      tf.io.gfile.remove(name)
    return gfile(name, mode)
  return open_file


def _redirected(function):
  def call(*args, **kwargs):
    result = function(*map(_to_ram, args), **{k: _to_ram(v) for k, v in kwargs.items()})
    return (map(_to_gs, result) if inspect.isgenerator(result) else _to_gs(result))
  return call


@pytest.fixture
def gcs_bucket(monkeypatch) -> Iterator[str]:
  """The gs:// URL of an empty bucket of its own, removed afterwards."""
  for name in _GFILE_FUNCTIONS:
    monkeypatch.setattr(tf.io.gfile, name, _redirected(getattr(tf.io.gfile, name)))
  monkeypatch.setattr(tf.io.gfile, 'GFile', _replacing_gfile(tf.io.gfile.GFile))
  # epath asks Cloud Storage whether a bucket is zonal; a bucket in memory is not.
  monkeypatch.setattr(gpath, '_is_zonal_gcs_bucket', lambda bucket: False)
  bucket = f'gs://bucket-{uuid.uuid4().hex[:12]}'
  tf.io.gfile.makedirs(bucket)
  yield bucket
  tf.io.gfile.rmtree(bucket)
