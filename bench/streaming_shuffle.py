"""Streaming shuffle against a full in-memory shuffle: throughput and randomness.

  python bench/streaming_shuffle.py [--lines=2000000] [--buffer_size=10000] [--num_pointers=64]

Writes a corpus of numbered lines to a temporary folder (4 files), then reads one epoch
with `StreamingShuffle` and with the peer: read every line into memory, shuffle with
NumPy, iterate. Randomness is the lag-1 correlation of consecutive examples' positions in
the corpus (0 for a perfect shuffle, 1 for file order) and their mean distance as a
share of the corpus (1/3 for a perfect shuffle). Memory: the streaming shuffle holds
buffer_size lines plus 64 KiB read-ahead per pointer; the peer holds the whole corpus.
"""

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from t5x_mt.data.streaming import StreamingShuffle


def randomness(positions: np.ndarray) -> tuple[float, float]:
  correlation = float(np.corrcoef(positions[:-1], positions[1:])[0, 1])
  distance = float(np.mean(np.abs(np.diff(positions))) / len(positions))
  return correlation, distance


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--lines', type=int, default=2_000_000)
  parser.add_argument('--buffer_size', type=int, default=10_000)
  parser.add_argument('--num_pointers', type=int, default=64)
  args = parser.parse_args()
  with tempfile.TemporaryDirectory() as folder:
    files = []
    per_file = args.lines // 4
    for number in range(4):
      path = Path(folder) / f'part{number}.tsv'
      first = number * per_file
      path.write_text(''.join(f'{i}\tsource sentence {i}\ttarget sentence {i}\n'
                              for i in range(first, first + per_file)))
      files.append(str(path))
    total = per_file * 4
    start = time.perf_counter()
    stream = iter(StreamingShuffle(files, seed=0, num_pointers=args.num_pointers,
                                   buffer_size=args.buffer_size))
    streamed = np.array([int(next(stream).split('\t', 1)[0]) for _ in range(total)])
    streaming_rate = total / (time.perf_counter() - start)
    start = time.perf_counter()
    lines = [line for path in files for line in Path(path).read_text().splitlines()]
    order = np.random.default_rng(0).permutation(len(lines))
    shuffled = np.array([int(lines[i].split('\t', 1)[0]) for i in order])
    full_rate = total / (time.perf_counter() - start)
  assert sorted(streamed.tolist()) == list(range(total))
  stream_corr, stream_distance = randomness(streamed)
  full_corr, full_distance = randomness(shuffled)
  print(f'{total} lines in 4 files; streaming: {args.num_pointers} pointers, buffer '
        f'{args.buffer_size} lines')
  print(f'lag-1 position correlation: streaming {stream_corr:+.4f}, full shuffle '
        f'{full_corr:+.4f}; mean consecutive distance / corpus: streaming '
        f'{stream_distance:.4f}, full shuffle {full_distance:.4f} (ideal 0.3333)')
  print(f'shuffle_lines_per_second: ours={streaming_rate:.4g} lines/s '
        f'full_shuffle={full_rate:.4g} lines/s ratio={streaming_rate / full_rate:.3f}')
  print(f'consecutive_distance_share: ours={stream_distance:.4f} share '
        f'full_shuffle={full_distance:.4f} share ratio={stream_distance / full_distance:.3f}')


if __name__ == '__main__':
  main()
