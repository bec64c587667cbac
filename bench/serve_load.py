"""launch/serve.py under load: concurrent clients sending single sentences of mixed
directions, with batching on and off.

  python bench/serve_load.py --ctranslate2=/tmp/t5x_mt/demo_ct2 [--clients=1,8,32,128] \
      [--requests=256] [--data=/work/shared/data/flores200/dev] [--port=5077]
  python bench/serve_load.py --checkpoint_dir=/tmp/t5x_mt/demo ...

The server runs as a user runs it (`launch/serve.py`, a subprocess) three times (SERVERS):
with its default batching; with --batch_pieces=1, each sentence decoded on its own, as
many at once as the server decodes batches at once (for an export, one per CTranslate2
thread); and with --concurrent_batches=1 too, one sentence at a time. The three run side
by side, each idle while another is measured, and each level is measured on each in
turn, so that what else the machine runs weighs on their figures alike. For each number
of clients, each client sends its share of --requests single sentences one after
another (LibreTranslate's JSON POST /translate), request i being line i // D of
FLORES-200 dev in the source language of direction i % D, over the D directions the
model trained on whose source has a dev file. The clients are coroutines of one asyncio
loop, each over its own keep-alive connection, so that the load generator takes little
of the CPU the server measured runs on. Each level runs twice, once unmeasured (a run
folder's search compiles for the batch shapes it meets). Reported: sentences/s over the
level's wall time, p50/p95/p99 of the requests' latencies, errors, the server's CPU
milliseconds per sentence (all its threads, from /proc: what the server costs, which
depends less than sentences/s on what else the machine runs), how many answers differ
from what `translate.py` gives for the same line (run once per direction beforehand,
same decoding flags), and the machine's load average after the level. A line longer
than the model's input, which translate.py would cut, the server splits into sentences
(`t5x_mt.serving.segmenting`): its answer is compared with translate.py's translations
of those sentences, joined as the server joins them.
"""

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

import numpy as np

from t5x_mt.serving import segmenting

REPO = pathlib.Path(__file__).resolve().parent.parent
LAUNCH = REPO / 'launch'
HOST = '127.0.0.1'
# translate.py's warning for a line it cuts: "input.txt:3: longer than the model's input".
OVERLONG_WARNING = re.compile(r":(\d+): longer than the model's input")
# (name in the table and the figures, serve.py's flags) of each server measured; the
# first is the one the others are compared with.
SERVERS = (('on', []), ('off', ['--batch_pieces=1']),
           ('off, one at a time', ['--batch_pieces=1', '--concurrent_batches=1']))


def main() -> None:
  parser = argparse.ArgumentParser(description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
  model = parser.add_mutually_exclusive_group(required=True)
  model.add_argument('--ctranslate2')
  model.add_argument('--checkpoint_dir')
  parser.add_argument('--clients', default='1,8,32,128')
  parser.add_argument('--requests', type=int, default=256)
  parser.add_argument('--data', default='/work/shared/data/flores200/dev')
  parser.add_argument('--port', type=int, default=5077,
                      help='the first of the servers\' ports, one each (SERVERS)')
  args = parser.parse_args()
  model_flag = (f'--ctranslate2={args.ctranslate2}' if args.ctranslate2
                else f'--checkpoint_dir={args.checkpoint_dir}')
  model_dir = pathlib.Path(args.ctranslate2 or args.checkpoint_dir)
  work = load_requests(model_dir, pathlib.Path(args.data), args.requests)
  expected = translate_py(model_flag, work)
  levels = [int(c) for c in args.clients.split(',')]
  print(f'{len(work)} requests over {len({d for d, _ in work})} directions; '
        f'model {model_flag}', flush=True)
  print('| clients | batching | sentences/s | p50 ms | p95 ms | p99 ms | errors | '
        'server CPU ms/sentence | differ from translate.py | load average |')
  print('|---|---|---|---|---|---|---|---|---|---|')
  throughputs = {}
  with contextlib.ExitStack() as servers:
    pids = [servers.enter_context(server(model_flag, args.port + i, flags))
            for i, (_, flags) in enumerate(SERVERS)]
    for clients in levels:
      for i, ((batching, _), pid) in enumerate(zip(SERVERS, pids)):
        asyncio.run(load(args.port + i, work, expected, clients))  # Unmeasured.
        row = asyncio.run(load(args.port + i, work, expected, clients, pid))
        throughputs[batching, clients] = row['throughput']
        print(f'| {clients} | {batching} | {row["throughput"]:.1f} | {row["p50"]:.0f} | '
              f'{row["p95"]:.0f} | {row["p99"]:.0f} | {row["errors"]} | '
              f'{row["cpu_ms"]:.1f} | {row["differ"]} | {os.getloadavg()[0]:.2f} |',
              flush=True)
  (ours, _), *peers = SERVERS
  for clients in levels:
    for peer, _ in peers:
      on, off = throughputs[ours, clients], throughputs[peer, clients]
      print(f'sentences_per_second_{clients}_clients: ours={on:.1f} sentences/s '
            f'{peer.replace(",", "").replace(" ", "_")}={off:.1f} sentences/s '
            f'ratio={on / off:.2f}')


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
  """translate.py's output for each request's line, one run per direction; for a line it
  cuts, its translations of the line's sentences, joined as the server joins them."""
  outputs = [''] * len(work)
  with tempfile.TemporaryDirectory() as folder:
    for direction in sorted({d for d, _ in work}):
      indices = [i for i, (d, _) in enumerate(work) if d == direction]
      split = [segmenting.segment(work[i][1], lambda line: True) for i in indices]
      lines = [work[i][1] for i in indices] + [s for parts in split for s in parts.sentences]
      source = pathlib.Path(folder) / 'input.txt'
      source.write_text(''.join(line + '\n' for line in lines), encoding='utf-8')
      src_lang, tgt_lang = direction.split('-')
      done = subprocess.run(
          [sys.executable, str(LAUNCH / 'translate.py'), model_flag, f'--src_lang={src_lang}',
           f'--tgt_lang={tgt_lang}', f'--input={source}'],
          capture_output=True, text=True, check=True)
      translations = done.stdout.splitlines()
      cut = {int(number) - 1 for number in OVERLONG_WARNING.findall(done.stderr)}
      start = len(indices)
      for line, (index, parts) in enumerate(zip(indices, split)):
        sentences = translations[start:start + len(parts.sentences)]
        outputs[index] = parts.reassembled(sentences) if line in cut else translations[line]
        start += len(parts.sentences)
  return outputs


class server:  # pylint: disable=invalid-name  (used as a context manager, like open)
  """launch/serve.py on `port` while the block runs; its process id."""

  def __init__(self, model_flag: str, port: int, flags: list[str]):
    self.command = [sys.executable, str(LAUNCH / 'serve.py'), model_flag, f'--port={port}',
                    '--max_queue=100000', *flags]
    self.url = f'http://{HOST}:{port}/'

  def __enter__(self) -> int:
    self.process = subprocess.Popen(self.command, env=os.environ)
    while True:
      try:
        urllib.request.urlopen(self.url + 'health', timeout=5)
        return self.process.pid
      except OSError:
        if self.process.poll() is not None:
          raise RuntimeError(f'{" ".join(self.command)} exited {self.process.returncode}')
        time.sleep(0.5)

  def __exit__(self, *exc) -> None:
    self.process.terminate()
    self.process.wait()


class Connection:
  """One client's keep-alive HTTP/1.1 connection, one request at a time (opened again
  after an error)."""

  def __init__(self, port: int):
    self.port = port
    self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

  async def post(self, direction: str, sentence: str) -> tuple[float, str | None]:
    """(seconds, translation or None on an error) of one POST /translate."""
    src_lang, tgt_lang = direction.split('-')
    body = json.dumps({'q': sentence, 'source': src_lang, 'target': tgt_lang}).encode()
    started = time.perf_counter()
    try:
      if self.streams is None:
        self.streams = await asyncio.open_connection(HOST, self.port)
      reader, writer = self.streams
      writer.write(b'POST /translate HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json'
                   b'\r\nContent-Length: %d\r\n\r\n%s' % (HOST.encode(), len(body), body))
      status = int((await reader.readline()).split()[1])
      headers = {}
      while (line := await reader.readline()) not in (b'\r\n', b''):
        name, _, value = line.decode('latin-1').partition(':')
        headers[name.strip().lower()] = value.strip()
      answer = json.loads(await reader.readexactly(int(headers['content-length'])))
      text = answer['translatedText'] if status == 200 else None
    except (OSError, ValueError, KeyError, IndexError, asyncio.IncompleteReadError):
      self.close()
      text = None
    return time.perf_counter() - started, text

  def close(self) -> None:
    if self.streams is not None:
      self.streams[1].close()
      self.streams = None


def cpu_seconds(pid: int) -> float:
  """User and system CPU seconds of process `pid` so far, all its threads."""
  fields = pathlib.Path(f'/proc/{pid}/stat').read_text().rsplit(')', 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf('SC_CLK_TCK')


async def load(port: int, work: list[tuple[str, str]], expected: list[str], clients: int,
               pid: int | None = None) -> dict:
  """Throughput, latency percentiles, errors, mismatches and (given the server's `pid`)
  its CPU milliseconds per sentence, of `clients` clients sending `work` between them,
  each one request at a time over its own connection."""
  async def client(start: int) -> list[tuple[int, float, str | None]]:
    connection = Connection(port)
    try:
      return [(i, *await connection.post(*work[i])) for i in range(start, len(work), clients)]
    finally:
      connection.close()

  cpu_before = cpu_seconds(pid) if pid else 0.0
  started = time.perf_counter()
  results = [r for rs in await asyncio.gather(*map(client, range(clients))) for r in rs]
  wall = time.perf_counter() - started
  cpu = cpu_seconds(pid) - cpu_before if pid else float('nan')
  latencies = np.array([seconds for _, seconds, _ in results]) * 1000
  errors = sum(text is None for _, _, text in results)
  differ = sum(text is not None and text != expected[i] for i, _, text in results)
  return dict(throughput=len(results) / wall, p50=np.percentile(latencies, 50),
              p95=np.percentile(latencies, 95), p99=np.percentile(latencies, 99),
              errors=errors, differ=differ, cpu_ms=1000 * cpu / len(results))


if __name__ == '__main__':
  main()
