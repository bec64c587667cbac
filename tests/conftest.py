"""Test session set-up: eight fake CPU devices, so sharded and unsharded runs can be compared,
and one compilation cache shared by every test, worker and command of the session.

The flags must be set before JAX initialises its backend; single-device tests build their
mesh over `jax.devices()[:1]`.
"""

import os
import shutil
import tempfile

# XLA:CPU's older elemental emitters compile faster than its MLIR fusion emitters, and
# programs this small run in milliseconds either way; the tests compare runs with each
# other, never with a fixed compiler's bits (tests/README.md).
FAST_COMPILING_XLA_FLAGS = '--xla_cpu_use_fusion_emitters=false'


def xla_flags(device_count: int) -> str:
  """XLA_FLAGS for a test process or a command it starts: `device_count` CPU devices,
  compiled as the session compiles."""
  return f'{FAST_COMPILING_XLA_FLAGS} --xla_force_host_platform_device_count={device_count}'


os.environ['XLA_FLAGS'] = f"{os.environ.get('XLA_FLAGS', '')} {xla_flags(8)}".strip()
os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

# The suite compiles the same tiny programs again and again: each run builds its own jitted
# step, and each command started as a subprocess compiles from nothing. JAX's persistent
# cache serves every repeat from disk. A session makes its own folder, which the xdist
# workers and the commands the tests start inherit through the environment; a developer
# who sets JAX_COMPILATION_CACHE_DIR keeps one across sessions. A size limit turns on the
# cache's file lock, so two workers never read an entry half written; it also makes each
# write read every entry in the folder, to find what to evict. So only compilations over
# 0.1 s are written (JAX's default keeps those over a second): a tiny model's steps and
# searches, not the thousands of single operations run outside jit, which compile again
# in less time than a folder of them takes to scan.
_CACHE_OWNER = 'T5X_MT_TEST_CACHE_OWNER'
if 'JAX_COMPILATION_CACHE_DIR' not in os.environ:
  os.environ['JAX_COMPILATION_CACHE_DIR'] = tempfile.mkdtemp(prefix='t5x_mt_test_xla_cache_')
  os.environ[_CACHE_OWNER] = str(os.getpid())
os.environ.setdefault('JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS', '0.1')
os.environ.setdefault('JAX_COMPILATION_CACHE_MAX_SIZE', str(16 << 30))
# XLA's backend optimisation level 0: a tiny model compiles in half the time, and the tests
# compare runs with each other or with tolerances far above what optimisation changes.
os.environ.setdefault('JAX_DISABLE_MOST_OPTIMIZATIONS', '1')

import pathlib  # pylint: disable=g-import-not-at-top,wrong-import-position

from t5x_mt.core import cli  # pylint: disable=g-import-not-at-top,wrong-import-position

# TensorFlow's native start-up lines, which an xdist controller would print (it does not
# capture what its conftest writes), held back as the launch commands hold them back.
cli.start_tensorflow()

import gin  # pylint: disable=g-import-not-at-top,wrong-import-position
import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position
import pytest  # pylint: disable=g-import-not-at-top,wrong-import-position

import data_tasks  # pylint: disable=g-import-not-at-top,wrong-import-position
import filelock  # pylint: disable=g-import-not-at-top,wrong-import-position
from data_tasks import from_gin  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.runs import checkpoints  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.config import gin_utils  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.training import train_loop  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.data import corpora  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.data import corpus_types  # pylint: disable=g-import-not-at-top,wrong-import-position

# TensorFlow, JAX and seqio, imported above, left out of the collector's scans.
cli.collect_less_often()

TINY_RUN_STEPS = 4
TINY_RUN_CHECKPOINT_EVERY = 2


def tiny_run_bindings(model_dir: pathlib.Path, vocabulary: pathlib.Path, mixture: str,
                      train_steps: int, **overrides: str) -> list[str]:
  """gin/runs/demo.gin shrunk to a model and data that train, checkpoint and evaluate in
  seconds; `overrides` replace any of these bindings."""
  bindings = {
      'network.TransformerConfig.emb_dim': '32', 'network.TransformerConfig.num_heads': '2',
      'network.TransformerConfig.head_dim': '16', 'network.TransformerConfig.mlp_dim': '64',
      'network.TransformerConfig.num_encoder_layers': '1',
      'network.TransformerConfig.num_decoder_layers': '1',
      'MIXTURE_OR_TASK_NAME': repr(mixture), 'TRAIN_STEPS': str(train_steps),
      'CHECKPOINT_EVERY_STEPS': str(TINY_RUN_CHECKPOINT_EVERY),
      'BATCH_SIZE': '8',  # One row per fake CPU device.
      'INPUTS_LENGTH': '32', 'TARGETS_LENGTH': '32',
      'VOCAB_SIZE': '700',  # Tags, bytes and characters alone take ~560 pieces.
      'VOCABULARY_PATH': repr(str(vocabulary)), 'MODEL_DIR': repr(str(model_dir)),
      'WARMUP_STEPS': '5', 'LOG_EVERY_STEPS': '1',
      'training.TrainConfig.evaluate_test_split': 'False',
      'training.TrainConfig.progress_bar': 'False',
      'evaluation.EvalConfig.max_sentences': '4',
      'decoding.DecodeSettings.beam_size': '1',
      'decoding.DecodeSettings.batch_size': '8',
      'decoding.DecodeSettings.max_decode_length': '8',
      **overrides}
  return [f'{name} = {value}' for name, value in bindings.items()]


def tiny_run_flags(*args, **overrides) -> list[str]:
  """tiny_run_bindings(*args, **overrides) as launch/train.py's flags, after demo.gin."""
  return ['--gin_file=gin/runs/demo.gin', *(
      '--gin.' + binding.replace(' = ', '=', 1) for binding in tiny_run_bindings(
          *args, **overrides))]


def configure_tiny_run(*args, **overrides) -> None:
  """Replaces the gin config with demo.gin and tiny_run_bindings(*args, **overrides)."""
  gin.clear_config()
  gin_utils.parse_gin(['gin/runs/demo.gin'], tiny_run_bindings(*args, **overrides))


def train_configured() -> dict:
  """Trains the run the parsed gin config describes, as launch/train.py does."""
  return train_loop.train(from_gin.run_spec())


def saved_params(run_dir: pathlib.Path, step: int) -> list[np.ndarray]:
  """The parameter arrays a run saved at `step`, as written (no model needed to read them)."""
  run_checkpoints = checkpoints.RunCheckpoints(str(run_dir), read_only=True)
  try:
    restored = run_checkpoints._manager.restore(step)  # pylint: disable=protected-access
  finally:
    run_checkpoints.close()
  return [np.asarray(leaf) for leaf in jax.tree_util.tree_leaves(restored['params'])]


def _train_tiny_run(root: pathlib.Path) -> None:
  configure_tiny_run(root / 'run', root / 'vocab' / 'eng_hau.model', 'cldr_eng_Latn.hau_Latn',
                     TINY_RUN_STEPS)
  try:
    train_configured()
  finally:
    gin.clear_config()


@pytest.fixture(scope='session')
def trained_run(tmp_path_factory, worker_id) -> pathlib.Path:
  """MODEL_DIR of a finished tiny eng->hau CLDR run with checkpoints at steps 2 and 4.

  Under xdist the first worker to ask trains it once in the session's shared folder while
  the others wait, and each worker gets a copy of its own to read and write."""
  root = tmp_path_factory.getbasetemp() / 'tiny_run'
  if worker_id == 'master':
    _train_tiny_run(root)
    return root / 'run'
  shared = tmp_path_factory.getbasetemp().parent / 'tiny_run'
  with filelock.FileLock(f'{shared}.lock'):
    if not (shared / 'trained').exists():
      shutil.rmtree(shared, ignore_errors=True)
      _train_tiny_run(shared)
      (shared / 'trained').touch()
  shutil.copytree(shared, root)
  return root / 'run'


@pytest.fixture(autouse=True)
def clean_gin():
  """Tests that parse or load a run's gin config leave none behind for the next test."""
  yield
  gin.clear_config()


@pytest.fixture(autouse=True)
def default_data_settings():
  """Tests that choose the registry's data settings (vocabulary, tags, temperature, ...)
  leave the defaults behind for the next test."""
  yield
  data_tasks.configure(data_tasks.DataSettings())


LANGS = ('eng_Latn', 'fra_Latn', 'hau_Latn')
WORDS = {'eng_Latn': ['one', 'two', 'three', 'four', 'five', 'six'],
         'fra_Latn': ['un', 'deux', 'trois', 'quatre', 'cinq', 'six'],
         'hau_Latn': ['daya', 'biyu', 'uku', 'hudu', 'biyar', 'shida']}


def _rows(count: int, offset: int) -> list[dict[str, str]]:
  rows = []
  for i in range(count):
    picks = [(i * 7 + offset + k) % 6 for k in range(1 + i % 3)]
    rows.append({lang: ' '.join(WORDS[lang][p] for p in picks) for lang in LANGS})
  return rows


@pytest.fixture(scope='session')
def tiny_mixture():
  """A three-language multi-way corpus of number words; its mixture trains eng->fra and
  hau->eng."""
  if 'test_loop_numbers' not in corpora.registered_corpora():
    corpora.register_corpus('test_loop_numbers', lambda: corpus_types.MultiwayCorpus(
        'test_loop_numbers',
        {'train': _rows(60, 0), 'validation': _rows(4, 1), 'test': _rows(4, 2)}))
    data_tasks.register_mixture('test_loop_numbers', 'test_loop_numbers',
                                [('eng_Latn', 'fra_Latn'), ('hau_Latn', 'eng_Latn')])
  return 'test_loop_numbers'


def pytest_unconfigure(config):  # pylint: disable=unused-argument
  """The session that made the compilation cache's folder removes it."""
  if os.environ.get(_CACHE_OWNER) == str(os.getpid()):
    shutil.rmtree(os.environ['JAX_COMPILATION_CACHE_DIR'], ignore_errors=True)


def pytest_xdist_auto_num_workers(config):  # pylint: disable=unused-argument
  """`-n auto` (the default in pyproject.toml): a worker per core, as many as memory holds.

  A worker with its eight fake devices, TensorFlow, and the runs it trains and compiles
  peaks near WORKER_MEMORY_GIB; the commands some tests start take more beside it.
  """
  cores = (len(os.sched_getaffinity(0)) if hasattr(os, 'sched_getaffinity')  # Not on macOS.
           else os.cpu_count() or 1)
  memory_gib = os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30
  return max(1, min(cores, int(memory_gib // WORKER_MEMORY_GIB)))


SLOW_TEST_SECONDS = 20
WORKER_MEMORY_GIB = 6
_unmarked_test_seconds: dict[str, float] = {}


def pytest_runtest_logreport(report):
  """Records the call time of each test not marked slow. Set-up is left out: it holds the
  session's shared fixtures (a trained run), which whichever test comes first pays for."""
  if report.when == 'call' and 'slow' not in report.keywords:
    _unmarked_test_seconds[report.nodeid] = report.duration


def pytest_terminal_summary(terminalreporter):
  """Names the tests outside the slow marker that took longer than the fast loop allows."""
  over = sorted(((seconds, nodeid) for nodeid, seconds in _unmarked_test_seconds.items()
                 if seconds > SLOW_TEST_SECONDS), reverse=True)
  if over:
    terminalreporter.section(f'not marked slow, over {SLOW_TEST_SECONDS} s')
    for seconds, nodeid in over:
      terminalreporter.write_line(f'{seconds:7.1f}s {nodeid}')


def pytest_collection_modifyitems(items):
  """Slow tests first: each worker starts on a long module while the short ones fill in
  around it, instead of one worker finishing a long module alone at the end."""
  items.sort(key=lambda item: item.get_closest_marker('slow') is None)
