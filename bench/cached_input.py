"""Training input from cached tasks through Grain against seqio's tf.data, on the real-data
mixture: input tokens per second on one core, and the share of a training step spent
waiting for the next batch.

  python bench/cached_input.py [--gin_file=gin/runs/ntrex_flores.gin] [--batches=200]
      [--batch_size=64] [--steps=12] [--model_gin=gin/models/base.gin]
      [--cache_dir=/tmp/t5x_mt/ntrex_flores_cache]

The recipe's mixture is cached first with launch/cache_tasks.py where --cache_dir holds
no cache yet (and its cleaned gettext folder made with launch/clean.py, as
docs/real_data.md does, where it is missing). Each measurement then runs in a fresh
process, both paths built as a run builds them (`train_loop.training_batches`, one input
shard, --batch_size rows of the recipe's lengths):

1. Input alone, the process held to one core (`sched_setaffinity`): --batches batches
   after a warm-up, counting the non-padding input and target tokens they carry.
2. Training: the --model_gin model's steps on those batches (the recipe's mixture,
   --batch_size rows), each step's wait for its batch timed apart from the step it feeds.
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')
REPO = pathlib.Path(__file__).resolve().parents[1]
WARM_UP_BATCHES = 10
CLEAN_COMMAND = [
    'launch/clean.py', '--corpus=gettext_l10n', '--preset=default',
    '--directions=eng_Latn-afr_Latn,eng_Latn-hau_Latn,eng_Latn-swh_Latn,eng_Latn-zul_Latn',
    '--output_dir=/tmp/t5x_mt/gettext_l10n_clean']


def _spec(gin_files: list[str], bindings: list[str]):
  """The recipe's run spec, its data set up as launch/train.py sets it up."""
  from t5x_mt.config import configurables  # pylint: disable=g-import-not-at-top
  from t5x_mt.config import gin_utils  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import task_cache  # pylint: disable=g-import-not-at-top
  gin_utils.parse_gin(gin_files, bindings)
  spec = configurables.run_spec()
  if not task_cache.for_run(spec.data):
    from data_tasks import from_gin  # pylint: disable=g-import-not-at-top
    spec = from_gin.run_spec()
  return spec


def _batches(spec, mesh):
  from t5x_mt.data import mixtures  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import task_cache  # pylint: disable=g-import-not-at-top
  from t5x_mt.training import train_loop  # pylint: disable=g-import-not-at-top
  name = spec.train.mixture_or_task_name
  cache = (task_cache.TaskCache(spec.data.cached_tasks_dir) if spec.data.cached_tasks_dir
           else None)
  mixture = cache.mixture_view(name) if cache else mixtures.mixture_view(name)
  return mixture, train_loop.training_batches(spec.train, mixture, None, mesh, 1, cache)


def measure_input(gin_files: list[str], bindings: list[str], batches: int) -> dict:
  """In this process, on one core: input tokens per second."""
  os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
  import jax  # pylint: disable=g-import-not-at-top
  from t5x_mt.core import partitioning  # pylint: disable=g-import-not-at-top
  _, stream = _batches(_spec(gin_files, bindings),
                       partitioning.create_mesh((-1, 1), jax.devices()[:1]))
  for _ in range(WARM_UP_BATCHES):
    next(stream)
  start, tokens = time.perf_counter(), 0
  for _ in range(batches):
    batch = jax.device_get(next(stream))
    tokens += int((batch['encoder_input_tokens'] != 0).sum()
                  + (batch['decoder_target_tokens'] != 0).sum())
  seconds = time.perf_counter() - start
  return {'tokens_per_s': tokens / seconds, 'seconds': seconds}


def measure_training(gin_files: list[str], bindings: list[str], steps: int) -> dict:
  """In this process: the share of each step's time spent waiting for its batch."""
  import jax  # pylint: disable=g-import-not-at-top
  from t5x_mt.core import partitioning  # pylint: disable=g-import-not-at-top
  from t5x_mt.model import models  # pylint: disable=g-import-not-at-top
  from t5x_mt.runs import run_vocabulary  # pylint: disable=g-import-not-at-top
  from t5x_mt.training import trainer  # pylint: disable=g-import-not-at-top
  import dataclasses  # pylint: disable=g-import-not-at-top
  spec = _spec(gin_files, bindings)
  mesh = partitioning.create_mesh(spec.train.mesh_shape)
  vocabulary = pathlib.Path(os.path.expanduser(spec.data.vocabulary_path)).read_bytes()
  model = models.TranslationModel(dataclasses.replace(spec.model, vocab_size=(
      run_vocabulary.padded_vocab_size(run_vocabulary.num_pieces(vocabulary)))))
  optimizer = spec.train.make_optimizer(spec.model)
  state, shardings = partitioning.shard_init(
      lambda rng: trainer.init_train_state(model, optimizer, rng, spec.train.inputs_length,
                                           spec.train.targets_length),
      mesh, spec.axis_rules, jax.random.PRNGKey(0))
  mixture, stream = _batches(spec, mesh)
  step = trainer.jit_train_step(
      trainer.make_train_step(model, optimizer,
                              direction_ids=[d.id for d in mixture.directions()]),
      shardings, mesh, spec.axis_rules)
  rng = jax.random.PRNGKey(1)
  state, metrics = step(state, next(stream), rng, None)  # Compiles.
  jax.block_until_ready(metrics)
  waited = total = 0.0
  for _ in range(steps):
    start = time.perf_counter()
    batch = next(stream)
    got = time.perf_counter()
    state, metrics = step(state, batch, rng, None)
    jax.block_until_ready(metrics)
    waited += got - start
    total += time.perf_counter() - start
  return {'wait_share': waited / total, 'step_s': total / steps}


def in_child(kind: str, **settings) -> dict:
  done = subprocess.run([sys.executable, __file__, f'--measure={kind}',
                         f'--settings={json.dumps(settings)}'],
                        capture_output=True, text=True, check=False, cwd=REPO)
  if done.returncode:
    raise SystemExit(f'{kind} measurement failed:\n{done.stderr[-3000:]}')
  return json.loads(done.stdout.strip().splitlines()[-1])


def ensure_cache(gin_file: str, cache_dir: str) -> None:
  if not pathlib.Path('/tmp/t5x_mt/gettext_l10n_clean').exists() and 'ntrex_flores' in gin_file:
    subprocess.run([sys.executable, *CLEAN_COMMAND], cwd=REPO, check=True)
  if not (pathlib.Path(cache_dir) / 'cache_info.json').exists():
    subprocess.run([sys.executable, 'launch/cache_tasks.py', f'--gin_file={gin_file}',
                    f'--output_dir={cache_dir}'], cwd=REPO, check=True)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--gin_file', default='gin/runs/ntrex_flores.gin')
  parser.add_argument('--cache_dir', default='/tmp/t5x_mt/ntrex_flores_cache')
  parser.add_argument('--batches', type=int, default=200)
  parser.add_argument('--batch_size', type=int, default=64)
  parser.add_argument('--steps', type=int, default=12)
  parser.add_argument('--model_gin', default='gin/models/base.gin')
  parser.add_argument('--measure', help=argparse.SUPPRESS)
  parser.add_argument('--settings', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.measure:
    settings = json.loads(args.settings)
    measure = measure_input if args.measure == 'input' else measure_training
    print(json.dumps(measure(**settings)))
    return
  ensure_cache(args.gin_file, args.cache_dir)
  paths = {'tf.data': [], 'Grain': [f"CACHED_TASKS_DIR = '{args.cache_dir}'"]}
  common = [f'BATCH_SIZE = {args.batch_size}']
  results = {}
  for name, bindings in paths.items():
    results[name] = {
        **in_child('input', gin_files=[args.gin_file], bindings=[*common, *bindings],
                   batches=args.batches),
        **in_child('training', gin_files=[args.gin_file, args.model_gin],
                   bindings=[*common, *bindings], steps=args.steps)}
    result = results[name]
    print(f'{name}: {result["tokens_per_s"]:,.0f} input tokens/s on one core; training '
          f'{pathlib.Path(args.model_gin).stem} steps of {result["step_s"]:.2f} s, '
          f'{100 * result["wait_share"]:.1f}% waiting for input', flush=True)
  grain, tfdata = results['Grain'], results['tf.data']
  print(f'cached_input: grain_vs_tfdata tokens_per_s_per_core ratio='
        f'{grain["tokens_per_s"] / tfdata["tokens_per_s"]:.2f} wait_share grain='
        f'{grain["wait_share"]:.3f} tfdata={tfdata["wait_share"]:.3f}')


if __name__ == '__main__':
  main()
