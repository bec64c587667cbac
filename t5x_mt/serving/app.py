"""The Starlette application launch/serve.py runs: LibreTranslate's API over a translator.

  POST /translate  q (a text or a list of texts), source (a code or 'auto'), target,
                   format ('text'): {"translatedText": ...} (a list for a list), and
                   "detectedLanguage" for source=auto, as LibreTranslate answers
  POST /detect     q: [{"language": ..., "confidence": percent}] of (its first) text
  GET /languages   [{"code", "name", "targets"}] of the languages the model translates
  GET /health      {"status": "ok", "queued": sentences waiting}
  GET /metrics     Prometheus metrics: requests, batch sizes, queue depth, latency
  GET /            a page to try translations (page.html)

A language may be named by its ISO 639-1, ISO 639-3 or FLORES-200 code
(`languages.any_code_to_flores`); answers name it as LibreTranslate's clients expect
(`languages.short_code`). Bad input is answered 400, a request over a size limit 413
naming the limit, and a full queue 503 with Retry-After, each with {"error": one line}.
"""

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
import contextlib
import dataclasses
import functools
import importlib.resources
import json
import time
from typing import Any

import babel
import prometheus_client
from starlette import applications
from starlette import requests
from starlette import responses
from starlette import routing

from t5x_mt.core import directions as directions_lib
from t5x_mt.core import languages
from t5x_mt.core.errors import UserError
from t5x_mt.data.cleaning import langid
from t5x_mt.decoding import inference
from t5x_mt.decoding import line_streaming
from t5x_mt.export import ctranslate2_translator
from t5x_mt.runs import run_layout
from t5x_mt.serving import batching
from t5x_mt.serving import segmenting

AUTO = 'auto'
# (lines, src_lang, tgt_lang) -> the indices of those longer than the model's input.
Overlong = Callable[[Sequence[str], str, str], list[int]]
# Seconds a client refused for a full queue is told to wait before trying again.
RETRY_AFTER_S = 1
# Status answered to a client that left before its translation was done (as nginx logs it).
CLIENT_GONE = 499


@dataclasses.dataclass(frozen=True)
class ServerSettings:
  """The server's limits and batching (launch/serve.py's flags of the same names).

  Attributes:
    char_limit: characters of q in one request, over all its texts.
    max_request_bytes: bytes of one request's body.
    max_queue: sentences waiting to be decoded; more are refused (503).
    batch_pieces: source pieces of one batch (at least one sentence); 1 decodes each
      sentence on its own.
    batch_wait_ms: how long a batch's first sentence waits for others after it
      arrived. 0: a free decoder takes what is waiting at once; under load,
      sentences queue while every decoder is busy and still leave together.
    concurrent_batches: batches decoded at once, each by its own thread. None: one per
      thread of a CTranslate2 export (its `parallel_batches`), each batch decoded by one
      of them; one for a run or ensemble, whose translator spreads each batch over its
      own `parallel_batches`.
  """
  char_limit: int = 5000
  max_request_bytes: int = 1 << 20
  max_queue: int = 1024
  batch_pieces: int = 4096
  batch_wait_ms: float = 0.0
  concurrent_batches: int | None = None


class ApiError(Exception):
  """A request answered `status` with {"error": message}."""

  def __init__(self, status: int, message: str, headers: dict[str, str] | None = None):
    super().__init__(message)
    self.status = status
    self.headers = headers


@dataclasses.dataclass(frozen=True)
class ModelLanguages:
  """Which languages the model translates from, and into which from each."""
  targets: dict[str, tuple[str, ...]]

  @classmethod
  def of_directions(cls, trained: Iterable[str] | None) -> 'ModelLanguages':
    """From the run's trained directions ('eng_Latn-hau_Latn'): each source language
    into every target language but itself (directions it did not train on too, as a
    multilingual model translates them), a language only translated into from none;
    None: every FLORES-200 language into every other."""
    if trained is None:
      sources, into = languages.FLORES200_CODES, languages.FLORES200_CODES
    else:
      parsed = [directions_lib.Direction.parse(name, 'directions.json') for name in trained]
      sources, into = {d.src_lang for d in parsed}, {d.tgt_lang for d in parsed}
    return cls({lang: tuple(sorted(t for t in into if t != lang)) if lang in sources else ()
                for lang in sorted({*sources, *into})})


class _Metrics:
  """The Prometheus metrics of one application, in a registry of its own."""

  def __init__(self):
    self.registry = prometheus_client.CollectorRegistry()
    self.requests = prometheus_client.Counter(
        'translate_requests', 'POST /translate requests, by answer status', ['status'],
        registry=self.registry)
    self.sentences = prometheus_client.Counter(
        'translate_sentences', 'sentences translated', registry=self.registry)
    self.batch_sentences = prometheus_client.Histogram(
        'translate_batch_sentences', 'sentences per decoded batch',
        buckets=[2 ** i for i in range(11)], registry=self.registry)
    self.queue_depth = prometheus_client.Gauge(
        'translate_queue_sentences', 'sentences waiting to be decoded',
        registry=self.registry)
    self.latency = prometheus_client.Histogram(
        'translate_latency_seconds', 'time from a /translate request to its answer',
        buckets=(.01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30), registry=self.registry)


def create_app(translate_rows: batching.RowsFn, count_pieces: Callable[[str], int],
               check_direction: Callable[[str, str], None], overlong: Overlong,
               model_languages: ModelLanguages, settings: ServerSettings
               ) -> applications.Starlette:
  """The application over a translator: `translate_rows` and `count_pieces` as the batcher
  takes them, `check_direction` a UserError for a direction the model cannot translate
  and `overlong` the lines longer than its input (`Translator.check_direction` and
  `overlong`)."""
  metrics = _Metrics()

  @contextlib.asynccontextmanager
  async def lifespan(app: applications.Starlette) -> AsyncIterator[None]:
    batcher = batching.Batcher(
        translate_rows, count_pieces, max_batch_pieces=settings.batch_pieces,
        max_wait_s=settings.batch_wait_ms / 1000, max_queue=settings.max_queue,
        max_batches=settings.concurrent_batches or 1, on_batch=metrics.batch_sentences.observe)
    metrics.queue_depth.set_function(lambda: batcher.depth)
    app.state.batcher = batcher
    task = asyncio.create_task(batcher.run())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
      await task

  async def translate_route(request: requests.Request) -> responses.Response:
    started = time.monotonic()
    status = 200
    try:
      answer = await _translate(request, request.app.state.batcher, check_direction,
                                overlong, model_languages, settings)
      metrics.sentences.inc(answer.pop('sentences'))
      return responses.JSONResponse(answer)
    except ApiError as error:
      status = error.status
      raise
    finally:
      metrics.requests.labels(str(status)).inc()
      if status == 200:
        metrics.latency.observe(time.monotonic() - started)

  async def detect_route(request: requests.Request) -> responses.Response:
    text = _texts(await _fields(request, settings))[0]
    return responses.JSONResponse([_detection(text, model_languages)])

  async def languages_route(request: requests.Request) -> responses.Response:
    del request
    return responses.JSONResponse([
        {'code': languages.short_code(lang), 'name': _name(lang),
         'targets': [languages.short_code(t) for t in targets]}
        for lang, targets in model_languages.targets.items()])

  async def health_route(request: requests.Request) -> responses.Response:
    return responses.JSONResponse({'status': 'ok', 'queued': request.app.state.batcher.depth})

  async def metrics_route(request: requests.Request) -> responses.Response:
    del request
    return responses.Response(prometheus_client.generate_latest(metrics.registry),
                              media_type=prometheus_client.CONTENT_TYPE_LATEST)

  async def page_route(request: requests.Request) -> responses.Response:
    del request
    page = importlib.resources.files(__package__).joinpath('page.html')
    return responses.HTMLResponse(page.read_text(encoding='utf-8'))

  async def api_error(request: requests.Request, error: ApiError) -> responses.Response:
    del request
    return responses.JSONResponse({'error': str(error)}, error.status, error.headers)

  return applications.Starlette(
      routes=[routing.Route('/translate', translate_route, methods=['POST']),
              routing.Route('/detect', detect_route, methods=['POST']),
              routing.Route('/languages', languages_route, methods=['GET']),
              routing.Route('/health', health_route, methods=['GET']),
              routing.Route('/metrics', metrics_route, methods=['GET']),
              routing.Route('/', page_route, methods=['GET'])],
      exception_handlers={ApiError: api_error}, lifespan=lifespan)


async def _translate(request: requests.Request, batcher: batching.Batcher,
                     check_direction: Callable[[str, str], None], overlong: Overlong,
                     model_languages: ModelLanguages, settings: ServerSettings
                     ) -> dict[str, Any]:
  """The answer to POST /translate, with the number of sentences translated."""
  fields = await _fields(request, settings)
  texts = _texts(fields)
  characters = sum(len(text) for text in texts)
  if characters > settings.char_limit:
    raise ApiError(413, f'q: {characters} characters, over the limit of '
                   f'{settings.char_limit} per request (--char_limit)')
  if fields.get('format', 'text') != 'text':
    raise ApiError(400, f"format: only 'text' is translated, got {fields['format']!r}")
  target = _language(fields, 'target')
  if target not in {t for targets in model_languages.targets.values() for t in targets}:
    raise ApiError(400, f'target: the model does not translate into {target}')
  detections = None
  if fields.get('source') == AUTO:
    detections = [_detection(text, model_languages) for text in texts]
    sources = [languages.any_code_to_flores(d['language']) for d in detections]
  else:
    sources = [_language(fields, 'source')] * len(texts)
  for source in set(sources):
    _check_direction(source, target, check_direction, model_languages)
  segmented = [segmenting.segment(text, lambda line, source=source: bool(overlong(
      [line], source, target))) for text, source in zip(texts, sources)]
  sentences = [sentence for parts in segmented for sentence in parts.sentences]
  if len(sentences) > settings.max_queue:
    raise ApiError(413, f'q: {len(sentences)} sentences, over the limit of '
                   f'{settings.max_queue} waiting (--max_queue)')
  try:
    futures = batcher.submit(sentences, [
        (source, target) for source, parts in zip(sources, segmented) for _ in parts.sentences])
  except batching.QueueFull as full:
    raise ApiError(503, f'the server is busy ({full}); try again',
                   {'Retry-After': str(RETRY_AFTER_S)}) from full
  translated = await _answers(request, futures)
  outputs, start = [], 0
  for parts in segmented:
    outputs.append(parts.reassembled(translated[start:start + len(parts.sentences)]))
    start += len(parts.sentences)
  answer: dict[str, Any] = {'translatedText': outputs if isinstance(fields['q'], list)
                            else outputs[0], 'sentences': len(translated)}
  if detections is not None:
    answer['detectedLanguage'] = (detections if isinstance(fields['q'], list)
                                  else detections[0])
  return answer


async def _fields(request: requests.Request, settings: ServerSettings) -> dict[str, Any]:
  """The request's fields, from a JSON object or a form (a field given several times is a
  list, as `q` may be); 413 for a body over max_request_bytes."""
  declared = request.headers.get('content-length')
  if declared is not None and declared.isdigit() and int(declared) > settings.max_request_bytes:
    raise ApiError(413, f'the request has {declared} bytes, over the limit of '
                   f'{settings.max_request_bytes} (--max_request_bytes)')
  body = await request.body()
  if len(body) > settings.max_request_bytes:
    raise ApiError(413, f'the request has {len(body)} bytes, over the limit of '
                   f'{settings.max_request_bytes} (--max_request_bytes)')
  if request.headers.get('content-type', '').startswith('application/json'):
    try:
      fields = json.loads(body)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
      raise ApiError(400, f'the body is not valid JSON ({error})') from error
    if not isinstance(fields, dict):
      raise ApiError(400, 'the body is not a JSON object of fields (q, source, target)')
    return fields
  form = await request.form()
  return {key: values[0] if len(values) == 1 else values
          for key in form for values in [form.getlist(key)]}


def _texts(fields: dict[str, Any]) -> list[str]:
  """q as a list of texts: 400 where it is missing or holds anything but text."""
  if 'q' not in fields:
    raise ApiError(400, 'q: missing; give the text to translate')
  q = fields['q']
  texts = q if isinstance(q, list) else [q]
  if not texts or not all(isinstance(text, str) for text in texts):
    raise ApiError(400, 'q: give a text, or a non-empty list of texts')
  return texts


def _language(fields: dict[str, Any], name: str) -> str:
  """The FLORES-200 code of field `name`; 400 where it is missing or no language code."""
  if not isinstance(fields.get(name), str):
    raise ApiError(400, f'{name}: missing; give a language code (ISO 639-1, ISO 639-3 '
                   'or FLORES-200)')
  code = languages.any_code_to_flores(fields[name])
  if code is None:
    raise ApiError(400, f'{name}: {fields[name]!r} is no ISO 639-1, ISO 639-3 or '
                   'FLORES-200 language code')
  return code


def _check_direction(source: str, target: str, check_direction: Callable[[str, str], None],
                     model_languages: ModelLanguages) -> None:
  """400 for a direction the model cannot translate."""
  if source == target:
    raise ApiError(400, f'source and target are both {source}')
  if not model_languages.targets.get(source):
    raise ApiError(400, f'source: the model does not translate from {source}')
  try:
    check_direction(source, target)
  except UserError as error:
    raise ApiError(400, str(error)) from error


def _detection(text: str, model_languages: ModelLanguages) -> dict[str, Any]:
  """LibreTranslate's answer for `text`'s language, the likeliest of those the model
  reads: 400 where identification knows none of them."""
  lang, probability = langid.identify(
      text, among={lang for lang, targets in model_languages.targets.items() if targets})
  if lang is None:
    raise ApiError(400, 'source=auto: the text is in none of the languages identification '
                   'tells apart that the model translates from; name the source language')
  return {'language': languages.short_code(lang), 'confidence': round(100 * probability, 1)}


async def _answers(request: requests.Request, futures: Sequence[asyncio.Future]
                   ) -> list[str]:
  """The futures' results in order, once all are done; if the client leaves first, the
  futures are cancelled (the batcher drops what it has not taken) and the request is
  answered CLIENT_GONE."""
  gathered = asyncio.gather(*futures)
  watcher = asyncio.create_task(_disconnected(request))
  done, _ = await asyncio.wait({gathered, watcher}, return_when=asyncio.FIRST_COMPLETED)
  watcher.cancel()
  if gathered not in done:
    gathered.cancel()
    raise ApiError(CLIENT_GONE, 'the client left before its translation was done')
  try:
    return gathered.result()
  except UserError as error:
    raise ApiError(400, str(error)) from error


async def _disconnected(request: requests.Request) -> None:
  """Returns once the client has gone: with the body read, the server's next message is
  the disconnection (none while a thousand requests wait, rather than a thousand polls)."""
  while (await request.receive())['type'] != 'http.disconnect':
    pass


def _name(lang: str) -> str:
  """The language's English name (babel's), else its code."""
  names = babel.Locale('en').languages
  return names.get(languages.short_code(lang).split('_')[0]) or names.get(
      lang.split('_')[0], lang)


def translator_app(translator: Any, model_dir: str, settings: ServerSettings
                   ) -> applications.Starlette:
  """The application over a loaded translator (`ctranslate2_translator.load_model`), the
  languages it offers those of the directions `model_dir` (a run, or an export) trained.
  Sentences are translated as translate.py translates lines (`line_streaming`); those of
  different directions share batches, each row forced its own target tag (a translator
  wrapped to restore Yoruba tone marks decodes direction by direction). A CTranslate2
  export decodes a batch per CTranslate2 thread at once; a JAX model one batch at a time,
  since each spreads its work over every core itself."""
  trained = run_layout.RunLayout(model_dir).trained_directions()
  translate = functools.partial(line_streaming.translate_lines, translator)
  if isinstance(translator, inference.Translator):
    concurrent = settings.concurrent_batches or (
        translator.parallel_batches
        if isinstance(translator, ctranslate2_translator.CTranslate2Translator) else 1)
    # The threads the concurrent batches leave idle share each batch.
    spread_over = max(1, translator.parallel_batches // concurrent)
    translate_rows = batching.mixing(
        lambda sentences, directions: [line_streaming.one_line(text) for text in
                                       translator.translate_mixed(sentences, directions,
                                                                  spread_over)],
        lambda src_lang, tgt_lang: not translator.pivots(src_lang, tgt_lang), translate)
  else:
    concurrent = settings.concurrent_batches or 1
    translate_rows = batching.by_direction(translate)
  settings = dataclasses.replace(settings, concurrent_batches=concurrent)
  return create_app(
      translate_rows, lambda sentence: len(translator.source_tokenizer.encode(sentence)),
      translator.check_direction, translator.overlong, ModelLanguages.of_directions(trained),
      settings)
