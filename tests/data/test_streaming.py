"""The streaming shuffle: every line once per epoch, seeded, resumable, well mixed."""

import itertools
import json

import numpy as np
import pytest

from t5x_mt.data.streaming import StreamingShuffle
from t5x_mt.core.errors import UserError


@pytest.fixture
def files(tmp_path):
  paths = []
  for number, count in enumerate((700, 1300, 37)):
    path = tmp_path / f'part{number}.txt'
    path.write_text(''.join(f'{number}:{i}\n' for i in range(count)))
    paths.append(str(path))
  return paths


def shuffle(files, seed=0):
  return StreamingShuffle(files, seed=seed, num_pointers=8, buffer_size=100, chunk_bytes=500)


def test_each_line_once_per_epoch(files):
  lines = list(itertools.islice(iter(shuffle(files)), 2 * 2037))
  expected = sorted(f'{n}:{i}' for n, count in enumerate((700, 1300, 37)) for i in range(count))
  assert sorted(lines[:2037]) == expected
  assert sorted(lines[2037:]) == expected
  assert lines[:2037] != lines[2037:]


def test_order_follows_the_seed(files):
  first = list(itertools.islice(iter(shuffle(files, seed=1)), 500))
  assert first == list(itertools.islice(iter(shuffle(files, seed=1)), 500))
  assert first != list(itertools.islice(iter(shuffle(files, seed=2)), 500))


def test_restored_state_continues_exactly(files):
  straight = list(itertools.islice(iter(shuffle(files)), 3000))
  stopped = shuffle(files)
  head = list(itertools.islice(iter(stopped), 1234))
  state = json.loads(json.dumps(stopped.state()))
  resumed = shuffle(files, seed=99)
  resumed.restore(state)
  assert head + list(itertools.islice(iter(resumed), 3000 - 1234)) == straight


def test_consecutive_lines_are_far_apart_in_the_files(files):
  lines = list(itertools.islice(iter(shuffle(files)), 2037))
  positions = np.array([int(line.split(':')[1]) + (0, 700, 2000)[int(line.split(':')[0])]
                        for line in lines])
  assert abs(np.corrcoef(positions[:-1], positions[1:])[0, 1]) < 0.2
  assert np.median(np.abs(np.diff(positions))) > 200


def test_missing_file_is_named(tmp_path):
  with pytest.raises(UserError, match='nothere.txt: no such file'):
    StreamingShuffle([str(tmp_path / 'nothere.txt')])
