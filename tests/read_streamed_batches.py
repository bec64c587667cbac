"""Reads training batches of a streamed corpus as launch/train.py does, in one process of
several, and writes the targets of the rows this process holds, batch by batch.

tests/test_streamed_input.py starts it in two processes joined by gloo, to see what each
process trains on: `--save_at` saves the input position after that many batches, and
`--resume` starts from a saved position instead of the beginning.
"""

import argparse
import json
import os

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position
import numpy as np  # pylint: disable=g-import-not-at-top,wrong-import-position

import data_tasks  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.core import partitioning  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.core import processes  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.training import run_config  # pylint: disable=g-import-not-at-top,wrong-import-position
from t5x_mt.training import train_loop  # pylint: disable=g-import-not-at-top,wrong-import-position

CORPUS = 'epoch_web'
TASK = f'{CORPUS}_eng_Latn.hau_Latn'
BATCH_SIZE = 4


def register(files: list[str]) -> None:
  """The streamed corpus, chunked finely so that each input shard reads several chunks,
  and its task, registered as launch/train.py registers the run's."""
  data_tasks.register_corpora_and_mixtures(streamed_corpora={CORPUS: {
      'languages': ['eng_Latn', 'hau_Latn'], 'files': files, 'buffer_size': 40,
      'num_pointers': 3, 'chunk_bytes': 500}})
  data_tasks.get_mixture_or_task(TASK)


def local_targets(batch: dict[str, jax.Array]) -> list[str]:
  """The decoded targets of this process's rows, in row order."""
  shards = sorted(batch['decoder_target_tokens'].addressable_shards,
                  key=lambda shard: shard.index[0].start)
  rows = np.concatenate([np.asarray(shard.data) for shard in shards])
  return [data_tasks.VOCABULARY.decode([int(i) for i in row if i > 0]) for row in rows]


def main() -> None:
  parser = argparse.ArgumentParser()
  parser.add_argument('--coordinator_address')
  parser.add_argument('--process_id', type=int)
  parser.add_argument('--num_processes', type=int)
  parser.add_argument('--vocabulary', required=True)
  parser.add_argument('--files', nargs='+', required=True)
  parser.add_argument('--batches', type=int, required=True)
  parser.add_argument('--state', required=True)
  parser.add_argument('--save_at', type=int, default=0)
  parser.add_argument('--resume', action='store_true')
  parser.add_argument('--out', required=True)
  args = parser.parse_args()
  processes.initialize(args.coordinator_address, args.num_processes, args.process_id, None)
  data_tasks.use_vocabulary(args.vocabulary)
  register(args.files)
  config = run_config.TrainConfig(model_dir=os.path.dirname(args.state), train_steps=1,
                                  batch_size=BATCH_SIZE, mixture_or_task_name=TASK,
                                  inputs_length=32, targets_length=32, pack=False)
  batches = train_loop.training_batches(config, data_tasks.mixture_view(TASK), None,
                                        partitioning.create_mesh((-1, 1)), num_shards=2)
  if args.resume:
    batches.read_state(args.state)
  targets = []
  for count in range(1, args.batches + 1):
    targets.append(local_targets(next(batches)))
    if count == args.save_at:
      batches.write_state(args.state)
  with open(f'{args.out}.{jax.process_index()}.json', 'w', encoding='utf-8') as f:
    json.dump(targets, f)


if __name__ == '__main__':
  main()
