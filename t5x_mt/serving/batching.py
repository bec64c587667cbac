"""Dynamic batching: many clients' sentences decoded together.

Each request's sentences wait in one queue. The batcher takes the sentences pending, up
to a budget of source pieces, once the budget is full or the first of them has waited
`max_wait_s`, and decodes them in a worker thread, so that the event loop goes on
accepting and answering requests meanwhile. A batch's sentences are decoded by direction,
each direction's through the translator as translate.py decodes a file (tags, pivots,
Yoruba tone marks, output limits), so a sentence gets the translation translate.py gives
it. A request whose client has gone cancels its futures, and the batcher drops what it
has not yet taken.
"""

import asyncio
from collections.abc import Callable, Sequence
import collections
import concurrent.futures
import dataclasses
import time

# (sentences, src_lang, tgt_lang) -> their translations, line for line.
TranslateFn = Callable[[Sequence[str], str, str], list[str]]


class QueueFull(Exception):
  """The queue holds as many sentences as it may: the request is refused, to try later."""


@dataclasses.dataclass
class _Pending:
  sentence: str
  direction: tuple[str, str]
  pieces: int
  future: asyncio.Future


class Batcher:
  """Decodes queued sentences in batches of up to `max_batch_pieces` source pieces (at
  least one sentence each), waiting at most `max_wait_s` after a batch's first sentence
  for more; refuses sentences beyond `max_queue` waiting (`QueueFull`).

  `count_pieces` measures a sentence; `on_batch` hears each batch's size in sentences.
  """

  def __init__(self, translate: TranslateFn, count_pieces: Callable[[str], int], *,
               max_batch_pieces: int, max_wait_s: float, max_queue: int,
               on_batch: Callable[[int], None] = lambda size: None):
    self._translate = translate
    self._count_pieces = count_pieces
    self.max_batch_pieces = max_batch_pieces
    self.max_wait_s = max_wait_s
    self.max_queue = max_queue
    self._on_batch = on_batch
    self._pending: collections.deque[_Pending] = collections.deque()
    self._arrived = asyncio.Event()
    # One decoding thread: batches follow each other, each using the translator's own
    # parallelism (`parallel_batches`).
    self._worker = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix='decode')

  @property
  def depth(self) -> int:
    """Sentences waiting to be decoded (their clients still waiting)."""
    return sum(not pending.future.cancelled() for pending in self._pending)

  def submit(self, sentences: Sequence[str], src_lang: str, tgt_lang: str
             ) -> list[asyncio.Future]:
    """A future of each sentence's translation; QueueFull if they do not fit the queue."""
    self._drop_cancelled()
    if len(self._pending) + len(sentences) > self.max_queue:
      raise QueueFull(f'{len(self._pending)} sentences are waiting, at most {self.max_queue}')
    loop = asyncio.get_running_loop()
    futures = []
    for sentence in sentences:
      futures.append(loop.create_future())
      self._pending.append(_Pending(sentence, (src_lang, tgt_lang),
                                    self._count_pieces(sentence), futures[-1]))
    self._arrived.set()
    return futures

  async def run(self) -> None:
    """Decodes batch after batch, for ever (cancel the task to stop it)."""
    loop = asyncio.get_running_loop()
    try:
      while True:
        batch = await self._next_batch()
        if batch:
          self._on_batch(len(batch))
          results = await loop.run_in_executor(self._worker, self._decode, batch)
          for pending, result in zip(batch, results):
            if not pending.future.done():
              if isinstance(result, BaseException):
                pending.future.set_exception(result)
              else:
                pending.future.set_result(result)
    finally:
      self._worker.shutdown(wait=False, cancel_futures=True)

  async def _next_batch(self) -> list[_Pending]:
    """The sentences of the next batch, in arrival order, once its budget is full or
    its first sentence has waited max_wait_s."""
    while not self._pending:
      self._arrived.clear()
      await self._arrived.wait()
    deadline = time.monotonic() + self.max_wait_s
    while self._pieces_pending() < self.max_batch_pieces and time.monotonic() < deadline:
      self._arrived.clear()
      try:
        await asyncio.wait_for(self._arrived.wait(), deadline - time.monotonic())
      except TimeoutError:
        break
    self._drop_cancelled()
    batch, pieces = [], 0
    while self._pending and (not batch or
                             pieces + self._pending[0].pieces <= self.max_batch_pieces):
      batch.append(self._pending.popleft())
      pieces += batch[-1].pieces
    return batch

  def _pieces_pending(self) -> int:
    return sum(pending.pieces for pending in self._pending)

  def _drop_cancelled(self) -> None:
    self._pending = collections.deque(p for p in self._pending if not p.future.cancelled())

  def _decode(self, batch: list[_Pending]) -> list[str | BaseException]:
    """Each sentence's translation (or the error that stopped its direction), decoded
    direction by direction (in the worker thread)."""
    by_direction = collections.defaultdict(list)
    for index, pending in enumerate(batch):
      by_direction[pending.direction].append(index)
    results: list[str | BaseException] = [''] * len(batch)
    for (src_lang, tgt_lang), indices in by_direction.items():
      try:
        translations = self._translate([batch[i].sentence for i in indices], src_lang,
                                       tgt_lang)
      except Exception as error:  # pylint: disable=broad-except  (answered to its clients)
        translations = [error] * len(indices)
      for index, translation in zip(indices, translations):
        results[index] = translation
    return results
