"""Dynamic batching: many clients' sentences decoded together.

Each request's sentences wait in one queue. Whenever one of the batcher's `max_batches`
decoders is free, it takes the sentences pending, up to a budget of source pieces and a
`max_batches`-th of them, once the budget is full or the first of them has waited
`max_wait_s` since it arrived (what queued while every decoder was busy leaves at once),
and decodes them in a worker thread, so that the event loop goes on accepting and
answering requests meanwhile. Where the model takes its direction per row (both
CTranslate2 and the JAX search force each row's own target tag), the sentences of every
direction that does not pivot decode in the same batches (`mixing`); the others are
decoded direction by direction, each through the translator as translate.py decodes a
file (tags, pivots, Yoruba tone marks, output limits: `by_direction`). Either way a sentence
gets the translation translate.py gives its line. A request whose client has gone
cancels its futures, and the batcher drops what it has not yet taken.
"""

import asyncio
from collections.abc import Callable, Sequence
import collections
import concurrent.futures
import dataclasses
import time

Direction = tuple[str, str]
# (sentences, src_lang, tgt_lang) -> their translations, line for line.
TranslateFn = Callable[[Sequence[str], str, str], list[str]]
# (sentences, the (src_lang, tgt_lang) of each) -> their translations, line for line.
MixedFn = Callable[[Sequence[str], Sequence[Direction]], list[str]]
# The same, each sentence's translation or the error that stopped it.
RowsFn = Callable[[Sequence[str], Sequence[Direction]], list['str | Exception']]


def by_direction(translate: TranslateFn) -> RowsFn:
  """Rows decoded direction by direction through `translate`; an error answers the rows
  of its direction."""
  def decode(sentences: Sequence[str], directions: Sequence[Direction]
             ) -> list[str | Exception]:
    grouped = collections.defaultdict(list)
    for index, direction in enumerate(directions):
      grouped[direction].append(index)
    results: list[str | Exception] = [''] * len(sentences)
    for (src_lang, tgt_lang), indices in grouped.items():
      for index, result in zip(indices, _answers_or_error(
          lambda: translate([sentences[i] for i in indices], src_lang, tgt_lang),
          len(indices))):
        results[index] = result
    return results
  return decode


def mixing(translate_mixed: MixedFn, mixes: Callable[[str, str], bool],
           translate: TranslateFn) -> RowsFn:
  """Rows of the directions that `mixes` decoded together through `translate_mixed`, the
  others `by_direction` through `translate`."""
  separately = by_direction(translate)

  def decode(sentences: Sequence[str], directions: Sequence[Direction]
             ) -> list[str | Exception]:
    mixed = [i for i, direction in enumerate(directions) if mixes(*direction)]
    alone = [i for i, direction in enumerate(directions) if not mixes(*direction)]
    results: list[str | Exception] = [''] * len(sentences)
    for indices, outputs in (
        (mixed, _answers_or_error(lambda: translate_mixed(
            [sentences[i] for i in mixed], [directions[i] for i in mixed]), len(mixed))),
        (alone, separately([sentences[i] for i in alone], [directions[i] for i in alone]))):
      for index, output in zip(indices, outputs):
        results[index] = output
    return results
  return decode


def _answers_or_error(translate: Callable[[], list[str]], count: int
                      ) -> list[str | Exception]:
  """`translate()`, or the error it raised `count` times (answered to its clients)."""
  if not count:
    return []
  try:
    return list(translate())
  except Exception as error:  # pylint: disable=broad-except  (answered to its clients)
    return [error] * count


class QueueFull(Exception):
  """The queue holds as many sentences as it may: the request is refused, to try later."""


@dataclasses.dataclass
class _Pending:
  sentence: str
  direction: Direction
  pieces: int
  future: asyncio.Future
  arrived: float  # time.monotonic()


class Batcher:
  """Decodes queued sentences through `translate_rows` (`by_direction` or `mixing`) in
  batches of up to `max_batch_pieces` source pieces (at least one sentence each),
  `max_batches` at once, waiting at most `max_wait_s` after a batch's first sentence
  arrived for more; refuses sentences beyond `max_queue` waiting (`QueueFull`).

  `count_pieces` measures a sentence; `on_batch` hears each batch's size in sentences.
  """

  def __init__(self, translate_rows: RowsFn, count_pieces: Callable[[str], int], *,
               max_batch_pieces: int, max_wait_s: float, max_queue: int,
               max_batches: int = 1, on_batch: Callable[[int], None] = lambda size: None):
    self._translate_rows = translate_rows
    self._count_pieces = count_pieces
    self.max_batch_pieces = max_batch_pieces
    self.max_wait_s = max_wait_s
    self.max_queue = max_queue
    self.max_batches = max_batches
    self._on_batch = on_batch
    self._pending: collections.deque[_Pending] = collections.deque()
    self._arrived = asyncio.Event()
    # A decoding thread per batch decoding at once, each batch using the translator's
    # own parallelism (`parallel_batches`) as the caller of `translate_rows` chose.
    self._workers = concurrent.futures.ThreadPoolExecutor(max_batches,
                                                          thread_name_prefix='decode')

  @property
  def depth(self) -> int:
    """Sentences waiting to be decoded (their clients still waiting)."""
    return sum(not pending.future.cancelled() for pending in self._pending)

  def submit(self, sentences: Sequence[str], directions: Sequence[Direction]
             ) -> list[asyncio.Future]:
    """A future of each sentence's translation in its (src_lang, tgt_lang); QueueFull if
    they do not all fit the queue (then none is queued)."""
    self._drop_cancelled()
    if len(self._pending) + len(sentences) > self.max_queue:
      raise QueueFull(f'{len(self._pending)} sentences are waiting, at most {self.max_queue}')
    loop = asyncio.get_running_loop()
    arrived = time.monotonic()
    futures = []
    for sentence, direction in zip(sentences, directions, strict=True):
      futures.append(loop.create_future())
      self._pending.append(_Pending(sentence, direction, self._count_pieces(sentence),
                                    futures[-1], arrived))
    self._arrived.set()
    return futures

  async def run(self) -> None:
    """Decodes batches, up to max_batches at once, for ever (cancel the task to stop it)."""
    decoding: set[asyncio.Task] = set()
    try:
      while True:
        decoding = {task for task in decoding if not task.done()}
        if len(decoding) == self.max_batches:
          await asyncio.wait(decoding, return_when=asyncio.FIRST_COMPLETED)
          continue
        batch = await self._next_batch()
        if batch:
          decoding.add(asyncio.create_task(self._answer(batch)))
    finally:
      for task in decoding:
        task.cancel()
      self._workers.shutdown(wait=False, cancel_futures=True)

  async def _next_batch(self) -> list[_Pending]:
    """The sentences of the next batch, in arrival order, once its budget is full or
    its first sentence has waited max_wait_s: at most a max_batches-th of those
    pending, the rest left to the next decoder free, so that a burst never lands on one
    decoder while another is idle or about to be."""
    while not self._pending:
      self._arrived.clear()
      await self._arrived.wait()
    deadline = self._pending[0].arrived + self.max_wait_s
    while self._pieces_pending() < self.max_batch_pieces and time.monotonic() < deadline:
      self._arrived.clear()
      try:
        await asyncio.wait_for(self._arrived.wait(), deadline - time.monotonic())
      except TimeoutError:
        break
    self._drop_cancelled()
    share = -(-len(self._pending) // self.max_batches)
    batch, pieces = [], 0
    while self._pending and (not batch or (
        len(batch) < share and pieces + self._pending[0].pieces <= self.max_batch_pieces)):
      batch.append(self._pending.popleft())
      pieces += batch[-1].pieces
    return batch

  def _pieces_pending(self) -> int:
    return sum(pending.pieces for pending in self._pending)

  def _drop_cancelled(self) -> None:
    self._pending = collections.deque(p for p in self._pending if not p.future.cancelled())

  async def _answer(self, batch: list[_Pending]) -> None:
    """Decodes `batch` in a worker thread and answers each sentence's future."""
    self._on_batch(len(batch))
    results = await asyncio.get_running_loop().run_in_executor(self._workers, self._decode,
                                                               batch)
    for pending, result in zip(batch, results):
      if not pending.future.done():
        if isinstance(result, Exception):
          pending.future.set_exception(result)
        else:
          pending.future.set_result(result)

  def _decode(self, batch: list[_Pending]) -> list[str | Exception]:
    """Each sentence's translation or the error that stopped it (in a worker thread)."""
    return self._translate_rows([pending.sentence for pending in batch],
                                [pending.direction for pending in batch])
