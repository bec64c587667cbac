"""Serves a model over HTTP: LibreTranslate's API, and a page to try it at /.

  python launch/serve.py --ctranslate2=/tmp/t5x_mt/demo_ct2 --host=127.0.0.1 --port=5000

--checkpoint_dir=RUN serves a run with JAX (for accelerators), --ensemble=RUN[:WEIGHT],...
an ensemble, --ctranslate2=DIR an export of launch/export.py on CPU; the decoding flags
are translate.py's, and the run's tags, pivots, Yoruba tone marks and output limits apply
as there. Clients' sentences are queued and decoded together, up to --batch_pieces source
pieces per batch, a batch's first sentence waiting at most --batch_wait_ms for others,
--concurrent_batches batches at once (an export: one per CTranslate2 thread).
SIGTERM (or Ctrl-C) stops accepting requests, answers every request accepted, and exits 0.
docs/serving.md describes the API, the limits and /metrics.
"""

import argparse
import signal

from t5x_mt.core import cli
from t5x_mt.config import decoding_flags
from t5x_mt.core.errors import UserError

# (flag, type, default, at least, help) of the server's limits and batching.
SERVER_FLAGS = (
    ('char_limit', int, 5000, 1, 'characters of q in one request (413 beyond)'),
    ('max_request_bytes', int, 1 << 20, 1, 'bytes of one request body (413 beyond)'),
    ('max_queue', int, 1024, 1, 'sentences waiting to be decoded (503 beyond)'),
    ('batch_pieces', int, 4096, 1, 'source pieces of one batch; 1: each sentence alone'),
    ('batch_wait_ms', float, 0.0, 0, "how long a batch's first sentence waits for others"),
    ('concurrent_batches', int, None, 1, 'batches decoded at once (default: an export, '
     'one per --parallel_batches thread; a run, 1)'),
)


def main(argv: list[str]) -> int:
  parser = cli.argument_parser(__doc__)
  decoding_flags.add_decoding_flags(parser)
  decoding_flags.add_ctranslate2_flag(parser)
  parser.add_argument('--host', default='127.0.0.1', help='address to listen on')
  parser.add_argument('--port', type=int, default=5000, help='port to listen on')
  for name, kind, default, _, description in SERVER_FLAGS:
    parser.add_argument(f'--{name}', type=kind, default=default,
                        help=f'{description} (default: {default})')
  args = parser.parse_args(argv)
  settings = _server_settings(args)
  decoding_flags.add_model_languages(args)
  overrides = decoding_flags.decoding_overrides(args)
  cli.start_tensorflow()
  # pylint: disable=g-import-not-at-top  (JAX loads after start_tensorflow)
  import uvicorn
  from t5x_mt.export import ctranslate2_translator
  from t5x_mt.serving import app
  # pylint: enable=g-import-not-at-top
  translator = ctranslate2_translator.load_model(args, overrides)
  model_dir = decoding_flags.first_run(args)[0]
  served = app.translator_app(translator, model_dir, app.ServerSettings(**settings))
  # uvicorn answers SIGTERM and SIGINT by closing its socket and answering every request
  # it accepted, then raises the signal again to the handler in place before it started:
  # this one, so that a server stopped so exits 0.
  for stop in (signal.SIGTERM, signal.SIGINT):
    signal.signal(stop, lambda number, frame: None)
  uvicorn.run(served, host=args.host, port=args.port, log_level='warning')
  return 0


def _server_settings(args: argparse.Namespace) -> dict:
  """`app.ServerSettings`' fields from their flags, checked."""
  if not 0 < args.port < 65536:
    raise UserError(f'--port: a port number from 1 to 65535, got {args.port}')
  for name, _, _, at_least, _ in SERVER_FLAGS:
    if getattr(args, name) is not None and getattr(args, name) < at_least:
      raise UserError(f'--{name}: must be >= {at_least}, got {getattr(args, name)}')
  return {name: getattr(args, name) for name, *_ in SERVER_FLAGS}


if __name__ == '__main__':
  cli.run(main)
