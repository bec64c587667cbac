"""The training input over a streamed corpus: pairs per second, and memory that stays flat
as the corpus grows, against the same corpus read into memory.

  python bench/streaming_input.py [--sizes 1000000 10000000] [--batches=400] [--files=8]

Writes TSV corpora of each size (numbered sentence pairs, in `--files` files) to a
temporary folder and builds a SentencePiece vocabulary from the smallest. Each
measurement runs in a fresh process, which registers the corpus, builds the packed,
batched training pipeline of both its directions exactly as a run does
(`train_loop.training_batches`, one process, batches of 32 rows of 64 tokens) and reads
`--batches` batches after a warm-up. It prints the pairs per second the pipeline delivers
and the process's peak resident memory, for each streamed size and for the peer: the
smallest corpus registered with `corpora.register_tsv`, which reads it whole.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault('TF_CPP_MIN_LOG_LEVEL', '2')

WORDS = ('river market teacher window morning garden letter village doctor music '
         'bridge winter kitchen station forest number').split()
BATCH_SIZE = 32
LENGTH = 64
WARM_UP_BATCHES = 20


def write_corpus(folder: Path, pairs: int, files: int) -> list[str]:
  """`pairs` numbered pairs of 4-9 words a side, in `files` TSV files."""
  paths, per_file = [], -(-pairs // files)
  for part in range(files):
    path = folder / f'part{part}.tsv'
    first, last = part * per_file, min(pairs, (part + 1) * per_file)
    with path.open('w', encoding='utf-8') as f:
      for start in range(first, last, 100_000):
        f.write(''.join(_pair(n) for n in range(start, min(last, start + 100_000))))
    paths.append(str(path))
  return paths


def _pair(n: int) -> str:
  words = [WORDS[(n >> shift) % len(WORDS)] for shift in range(0, 4 + n % 6)]
  return f'the {" ".join(words)} {n}\tle {" ".join(reversed(words))} {n}\n'


def measure(files: list[str], vocabulary: str, batches: int, in_memory: bool) -> dict:
  """In this process: the pipeline's pairs per second and this process's peak RSS."""
  import data_tasks  # pylint: disable=g-import-not-at-top  (after TF's log level is set)
  from t5x_mt.core import partitioning  # pylint: disable=g-import-not-at-top
  from t5x_mt.training import run_config  # pylint: disable=g-import-not-at-top
  from t5x_mt.training import train_loop  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import corpora  # pylint: disable=g-import-not-at-top
  from t5x_mt.data import mixtures  # pylint: disable=g-import-not-at-top
  data_tasks.use_vocabulary(vocabulary)
  if in_memory:
    (path,) = files
    corpora.register_tsv('bench_corpus', 'eng_Latn', 'fra_Latn', path)
  else:
    corpora.register_streamed_tsv('bench_corpus', 'eng_Latn', 'fra_Latn', files)
  data_tasks.register_corpora_and_mixtures(mixtures={'bench_mixture': [
      'bench_corpus_eng_Latn.fra_Latn', 'bench_corpus_fra_Latn.eng_Latn']})
  mixture = mixtures.mixture_view('bench_mixture')
  mixtures.check_train_examples(mixture)
  config = run_config.TrainConfig(model_dir='unused', train_steps=1, batch_size=BATCH_SIZE,
                                  mixture_or_task_name='bench_mixture',
                                  inputs_length=LENGTH, targets_length=LENGTH)
  import jax  # pylint: disable=g-import-not-at-top
  stream = train_loop.training_batches(config, mixture, None,
                                       partitioning.create_mesh((-1, 1), jax.devices()[:1]), 1)
  for _ in range(WARM_UP_BATCHES):
    next(stream)
  start, pairs = time.perf_counter(), 0
  for _ in range(batches):
    segments = jax.device_get(next(stream)['decoder_segment_ids'])
    pairs += int(segments.max(axis=1).sum())
  seconds = time.perf_counter() - start
  return {'pairs_per_s': pairs / seconds,
          'rss_mib': resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def measure_in_child(files: list[str], vocabulary: str, batches: int, in_memory: bool
                     ) -> dict:
  command = [sys.executable, __file__, '--measure', json.dumps(
      {'files': files, 'vocabulary': vocabulary, 'batches': batches, 'in_memory': in_memory})]
  done = subprocess.run(command, capture_output=True, text=True, check=False)
  if done.returncode:
    raise SystemExit(f'measurement failed:\n{done.stderr[-3000:]}')
  return json.loads(done.stdout.strip().splitlines()[-1])


def build_vocabulary(files: list[str], path: str) -> None:
  from t5x_mt.data import vocab  # pylint: disable=g-import-not-at-top
  sentences = {'eng_Latn': [], 'fra_Latn': []}
  with open(files[0], encoding='utf-8') as f:
    for number, line in enumerate(f):
      if number == 100_000:
        break
      source, target = line.rstrip('\n').split('\t')
      sentences['eng_Latn'].append(source)
      sentences['fra_Latn'].append(target)
  vocab.train_sentencepiece(sentences, path, vocab_size=1000)


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--sizes', type=int, nargs='+', default=[1_000_000, 10_000_000])
  parser.add_argument('--batches', type=int, default=400)
  parser.add_argument('--files', type=int, default=8)
  parser.add_argument('--measure', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.measure:
    settings = json.loads(args.measure)
    print(json.dumps(measure(**settings)))
    return
  with tempfile.TemporaryDirectory() as folder:
    corpora = {}
    for size in args.sizes:
      (Path(folder) / str(size)).mkdir()
      corpora[size] = write_corpus(Path(folder) / str(size), size, args.files)
    smallest = min(args.sizes)
    vocabulary = str(Path(folder) / 'vocab.model')
    build_vocabulary(corpora[smallest], vocabulary)
    streamed = {size: measure_in_child(paths, vocabulary, args.batches, in_memory=False)
                for size, paths in corpora.items()}
    whole = Path(folder) / 'whole.tsv'
    whole.write_text(''.join(Path(path).read_text(encoding='utf-8')
                             for path in corpora[smallest]), encoding='utf-8')
    peer = measure_in_child([str(whole)], vocabulary, args.batches, in_memory=True)
  for size, result in streamed.items():
    print(f'{size} pairs streamed: {result["pairs_per_s"]:.0f} pairs/s, peak RSS '
          f'{result["rss_mib"]:.0f} MiB')
  print(f'{smallest} pairs in memory (peer): {peer["pairs_per_s"]:.0f} pairs/s, peak RSS '
        f'{peer["rss_mib"]:.0f} MiB')
  largest = max(args.sizes)
  print(f'streaming_input: pairs_per_s={streamed[smallest]["pairs_per_s"]:.0f} '
        f'rss_mib_{_short(smallest)}={streamed[smallest]["rss_mib"]:.0f} '
        f'rss_mib_{_short(largest)}={streamed[largest]["rss_mib"]:.0f}')
  print(f'streaming_input_vs_in_memory: pairs_per_s ratio='
        f'{streamed[smallest]["pairs_per_s"] / peer["pairs_per_s"]:.3f} rss ratio='
        f'{streamed[smallest]["rss_mib"] / peer["rss_mib"]:.3f} (streamed / in memory, '
        f'{smallest} pairs)')


def _short(size: int) -> str:
  return f'{size // 1_000_000}m' if size % 1_000_000 == 0 else str(size)


if __name__ == '__main__':
  main()
