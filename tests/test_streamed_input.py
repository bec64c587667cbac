"""Two processes reading a streamed corpus share out every pair exactly once per epoch,
and a resumed pair of processes continues the order where it was saved."""

import json
import os
import re
import subprocess
import sys

import pytest

from t5x_mt.data import mixtures
from t5x_mt.runs import run_vocabulary
from conftest import xla_flags
from test_multiprocess import REPO
from test_multiprocess import free_port
import read_streamed_batches

PAIRS = 300
BATCHES = 200
SAVE_AT = 100


def read_in_two_processes(tmp_path, files, vocabulary, *flags):
  """Each process's decoded target rows, batch by batch."""
  address = f'127.0.0.1:{free_port()}'
  started = [subprocess.Popen(
      [sys.executable, 'tests/read_streamed_batches.py', f'--coordinator_address={address}',
       '--num_processes=2', f'--process_id={index}', f'--vocabulary={vocabulary}',
       '--files', *files, f'--state={tmp_path / "input"}', *flags],
      cwd=REPO, env=dict(os.environ, XLA_FLAGS=xla_flags(1)),
      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for index in range(2)]
  for index, process in enumerate(started):
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, f'process {index}:\n{stderr[-3000:]}'
  out = [flag.removeprefix('--out=') for flag in flags if flag.startswith('--out=')][0]
  return [json.loads(open(f'{out}.{index}.json', encoding='utf-8').read()) for index in range(2)]


def pair_numbers(rows_by_batch):
  return [int(re.search(r'uno (\d+) dos', row)[1]) for rows in rows_by_batch for row in rows]


@pytest.fixture(scope='module')
def corpus(tmp_path_factory):
  folder = tmp_path_factory.mktemp('streamed_corpus')
  files = []
  for part in range(3):
    path = folder / f'part{part}.tsv'
    path.write_text(''.join(f'one {n} two\tuno {n} dos\n'
                            for n in range(part * PAIRS // 3, (part + 1) * PAIRS // 3)))
    files.append(str(path))
  read_streamed_batches.register(files)
  vocabulary = folder / 'vocab.model'
  run_vocabulary.build_vocabulary(run_vocabulary.VocabularyConfig(vocab_size=700),
                                  mixtures.mixture_view(read_streamed_batches.TASK),
                                  str(vocabulary))
  return files, vocabulary


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_see_every_pair_once_per_epoch_and_resume_in_order(tmp_path, corpus):
  files, vocabulary = corpus
  straight = read_in_two_processes(tmp_path, files, vocabulary, f'--batches={BATCHES}',
                                   f'--save_at={SAVE_AT}', f'--out={tmp_path / "straight"}')
  first_epochs = []
  for rows in straight:
    numbers = pair_numbers(rows)
    epoch = next(i for i, number in enumerate(numbers) if number in numbers[:i])
    assert sorted(numbers[epoch:2 * epoch]) == sorted(numbers[:epoch])  # The next epoch.
    assert numbers[epoch:2 * epoch] != numbers[:epoch]  # ... in another order.
    first_epochs.append(numbers[:epoch])
  assert sorted(first_epochs[0] + first_epochs[1]) == list(range(PAIRS))
  assert min(len(numbers) for numbers in first_epochs) > PAIRS // 4  # Shared out.

  resumed = read_in_two_processes(tmp_path, files, vocabulary, '--resume',
                                  f'--batches={BATCHES - SAVE_AT}',
                                  f'--out={tmp_path / "resumed"}')
  for process in range(2):
    assert resumed[process] == straight[process][SAVE_AT:]
