"""launch/serve.py under load: concurrent clients sending single sentences of mixed
directions, with batching on and off.

  python bench/serve_load.py --ctranslate2=/tmp/t5x_mt/demo_ct2 [--clients=1,8,32,128] \
      [--requests=256] [--data=/work/shared/data/flores200/dev] [--port=5077]
  python bench/serve_load.py --checkpoint_dir=/tmp/t5x_mt/demo ...

The server runs as a user runs it (`launch/serve.py`, a subprocess) twice: with its
default batching, and with --batch_pieces=1 (each sentence decoded on its own, one
at a time). For each number of clients, each client sends its share of --requests single
sentences one after another (LibreTranslate's JSON POST /translate), request i being
line i // D of FLORES-200 dev in the source language of direction i % D, over the D
directions the model trained on whose source has a dev file. Reported: sentences/s over
the level's wall time, p50/p95/p99 of the requests' latencies, errors, and how many
answers differ from what `translate.py` gives for the same line (run once per direction
beforehand, same decoding flags).
"""

import argparse
import concurrent.futures
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCH = REPO / 'launch'


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  model = parser.add_mutually_exclusive_group(required=True)
  model.add_argument('--ctranslate2')
  model.add_argument('--checkpoint_dir')
  parser.add_argument('--clients', default='1,8,32,128')
  parser.add_argument('--requests', type=int, default=256)
  parser.add_argument('--data', default='/work/shared/data/flores200/dev')
  parser.add_argument('--port', type=int, default=5077)
  args = parser.parse_args()
  model_flag = (f'--ctranslate2={args.ctranslate2}' if args.ctranslate2
                else f'--checkpoint_dir={args.checkpoint_dir}')
  model_dir = pathlib.Path(args.ctranslate2 or args.checkpoint_dir)
  work = [(direction, line) for direction, line in
          load_requests(model_dir, pathlib.Path(args.data), args.requests)]
  expected = translate_py(model_flag, work)
  print(f'{len(work)} requests over {len({d for d, _ in work})} directions; '
        f'model {model_flag}', flush=True)
  print('| batching | clients | sentences/s | p50 ms | p95 ms | p99 ms | errors | '
        'differ from translate.py |')
  print('|---|---|---|---|---|---|---|---|')
  for batching, flags in (('on', []), ('off', ['--batch_pieces=1'])):
    with server(model_flag, args.port, flags) as url:
      for clients in (int(c) for c in args.clients.split(',')):
        row = load(url, work, expected, clients)
        print(f'| {batching} | {clients} | {row["throughput"]:.1f} | {row["p50"]:.0f} | '
              f'{row["p95"]:.0f} | {row["p99"]:.0f} | {row["errors"]} | {row["differ"]} |',
              flush=True)


def load_requests(model_dir: pathlib.Path, data: pathlib.Path, count: int
                  ) -> list[tuple[str, str]]:
  """(direction, sentence) of each request: directions in turn, dev lines in order."""
  trained = json.loads((model_dir / 'directions.json').read_text())['directions']
  directions = [d for d in trained if (data / f'{d.split("-")[0]}.dev').is_file()]
  lines = {d: (data / f'{d.split("-")[0]}.dev').read_text(encoding='utf-8').splitlines()
           for d in directions}
  return [(directions[i % len(directions)],
           lines[directions[i % len(directions)]][i // len(directions)])
          for i in range(count)]


def translate_py(model_flag: str, work: list[tuple[str, str]]) -> list[str]:
  """translate.py's output for each request's line, one run per direction."""
  outputs = [''] * len(work)
  with tempfile.TemporaryDirectory() as folder:
    for direction in sorted({d for d, _ in work}):
      indices = [i for i, (d, _) in enumerate(work) if d == direction]
      source = pathlib.Path(folder) / 'input.txt'
      source.write_text(''.join(work[i][1] + '\n' for i in indices), encoding='utf-8')
      src_lang, tgt_lang = direction.split('-')
      done = subprocess.run(
          [sys.executable, str(LAUNCH / 'translate.py'), model_flag, f'--src_lang={src_lang}',
           f'--tgt_lang={tgt_lang}', f'--input={source}'],
          capture_output=True, text=True, check=True)
      for index, line in zip(indices, done.stdout.splitlines(), strict=True):
        outputs[index] = line
  return outputs


class server:  # pylint: disable=invalid-name  (used as a context manager, like open)
  """launch/serve.py on `port` while the block runs; its URL."""

  def __init__(self, model_flag: str, port: int, flags: list[str]):
    self.command = [sys.executable, str(LAUNCH / 'serve.py'), model_flag, f'--port={port}',
                    '--max_queue=100000', *flags]
    self.url = f'http://127.0.0.1:{port}/'

  def __enter__(self) -> str:
    self.process = subprocess.Popen(self.command, env=os.environ)
    while True:
      try:
        urllib.request.urlopen(self.url + 'health', timeout=5)
        return self.url
      except OSError:
        if self.process.poll() is not None:
          raise RuntimeError(f'{" ".join(self.command)} exited {self.process.returncode}')
        time.sleep(0.5)

  def __exit__(self, *exc) -> None:
    self.process.terminate()
    self.process.wait()


def post(url: str, direction: str, sentence: str) -> tuple[float, str | None]:
  """(seconds, translation or None on an error) of one request."""
  src_lang, tgt_lang = direction.split('-')
  request = urllib.request.Request(
      url + 'translate', json.dumps({'q': sentence, 'source': src_lang, 'target': tgt_lang}
                                    ).encode(), {'Content-Type': 'application/json'})
  started = time.perf_counter()
  try:
    with urllib.request.urlopen(request, timeout=300) as answer:
      text = json.load(answer)['translatedText']
  except (OSError, ValueError, KeyError):
    text = None
  return time.perf_counter() - started, text


def load(url: str, work: list[tuple[str, str]], expected: list[str], clients: int) -> dict:
  """Throughput, latency percentiles, errors and mismatches of `clients` clients sending
  `work` between them, each one request at a time."""
  def client(start: int) -> list[tuple[int, float, str | None]]:
    return [(i, *post(url, *work[i])) for i in range(start, len(work), clients)]

  post(url, *work[0])  # Warm-up.
  started = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(clients) as pool:
    results = [r for rs in pool.map(client, range(clients)) for r in rs]
  wall = time.perf_counter() - started
  latencies = np.array([seconds for _, seconds, _ in results]) * 1000
  errors = sum(text is None for _, _, text in results)
  differ = sum(text is not None and text != expected[i] for i, _, text in results)
  return dict(throughput=len(results) / wall, p50=np.percentile(latencies, 50),
              p95=np.percentile(latencies, 95), p99=np.percentile(latencies, 99),
              errors=errors, differ=differ)


if __name__ == '__main__':
  main()
