"""Caches a recipe's seqio tasks to ArrayRecord files, for training without TensorFlow.

  python launch/cache_tasks.py --gin_file=gin/runs/demo.gin --output_dir=DIR
      [--gin.NAME=VALUE ...] [--examples_per_shard=100000]
      [--beam_options="--direct_num_workers=2 --direct_running_mode=multi_processing"]

Runs the preprocessing of every task of the recipe's MIXTURE_OR_TASK_NAME, every split it
has, as an Apache Beam pipeline (the DirectRunner unless --beam_options names another
runner) and writes the examples, token for token those the seqio tasks yield, with their
statistics; where the recipe evaluates on another corpus (evaluation.EvalConfig.corpus),
that corpus's task of each of the mixture's directions too. A run then trains and
evaluates from DIR with CACHED_TASKS_DIR = 'DIR' and needs neither TensorFlow nor seqio
(docs/data.md#cached-tasks-training-without-tensorflow). The recipe's vocabulary is built
first if it does not exist yet, as training would build it.
"""

import json
import shlex

import gin

from t5x_mt.core import cli
from t5x_mt.core import files
from t5x_mt.config import gin_utils
from t5x_mt.core.errors import UserError


def _check_output_dir(output_dir: str) -> None:
  """A UserError unless --output_dir is new, empty, or an earlier cache to replace."""
  files.check_output(output_dir, '--output_dir', folder=True)
  if files.on_object_store(output_dir):
    raise UserError(f'--output_dir: {output_dir}: a cache is written to a local or '
                    'mounted shared folder (ArrayRecord writes local files)')
  folder = files.path(output_dir)
  if folder.exists() and any(folder.iterdir()) and not (folder / 'cache_info.json').exists():
    raise UserError(f'--output_dir: {output_dir} is not empty and holds no cache_info.json; '
                    'name a new folder or an earlier cache to replace')


def main(argv: list[str]) -> int:
  bindings, rest = gin_utils.split_gin_overrides(argv)
  parser = cli.argument_parser(__doc__)
  cli.add_gin_flags(parser, "MIXTURE_OR_TASK_NAME = 'cldr_demo'")
  parser.add_argument('--output_dir', required=True, help='the cache folder to write')
  parser.add_argument('--examples_per_shard', type=int, default=None,
                      help='examples of one ArrayRecord file at most (default 100000)')
  parser.add_argument('--beam_options', default='',
                      help='Apache Beam pipeline options, as one string')
  args = parser.parse_args(rest)
  if args.examples_per_shard is not None and args.examples_per_shard < 1:
    raise UserError('--examples_per_shard: must be at least 1')
  _check_output_dir(args.output_dir)
  gin_files, all_bindings = args.gin_file, args.gin_bindings + bindings
  gin_utils.check_recipe(gin_files, all_bindings)
  cli.start_tensorflow()
  cli.import_beam()
  # pylint: disable=g-import-not-at-top  (gin needs the configurables)
  import functools
  import data_tasks
  from data_tasks import from_gin
  from t5x_mt.config import configurables
  from t5x_mt.data import mixtures
  from t5x_mt.data import task_cache
  from t5x_mt.data import task_caching
  from t5x_mt.runs import run_vocabulary
  # pylint: enable=g-import-not-at-top
  gin_utils.parse_gin(gin_files, all_bindings)
  data = from_gin.configure_data()
  try:
    name = gin.query_parameter('%MIXTURE_OR_TASK_NAME')
  except ValueError:
    raise UserError('--gin_file: MIXTURE_OR_TASK_NAME is not set') from None
  from_gin.registry_for_recipe(gin_files, all_bindings, [name])
  mixture = mixtures.mixture_view(name)
  task_caching.check_cacheable(mixture, data)
  vocabulary = run_vocabulary.run_vocabulary(
      data.vocabulary_path, mixture, configurables.vocabulary_config(), None)
  mixtures.check_vocabulary(name, data.vocabulary_path, data.source_vocabulary_path)
  source_vocabulary = (files.path(data.source_vocabulary_path).read_bytes()
                       if data.source_vocabulary_path else None)
  tasks = task_caching.cached_tasks(mixture, configurables.eval_config().corpus,
                                    data_tasks.register_direction_task)
  jobs = task_caching.shard_jobs(
      tasks, args.examples_per_shard or task_caching.EXAMPLES_PER_SHARD)
  set_up = functools.partial(from_gin.registry_for_recipe, gin_files, all_bindings,
                             sorted({job.task for job in jobs}))
  with files.staged_folder(args.output_dir) as staging:
    task_caching.run_pipeline(jobs, str(staging), set_up, shlex.split(args.beam_options))
    task_caching.write_run_inputs(staging, mixture, vocabulary, source_vocabulary)
    info = task_caching.cache_info(str(staging), jobs, tasks, mixture, data, vocabulary,
                                   source_vocabulary)
    files.write_text_atomically(staging / task_cache.INFO_FILE,
                                json.dumps(info, indent=1) + '\n')
  for task, cached in info['tasks'].items():
    print(task, ' '.join(f'{split}: {one["examples"]}' for split, one in cached['splits'].items()))
  print(f'wrote {args.output_dir}: {len(info["tasks"])} tasks of {name}')
  return 0


if __name__ == '__main__':
  cli.run(main)
