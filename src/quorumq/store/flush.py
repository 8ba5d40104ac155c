"""Flushing the commit log from asyncio.

SYNC_FLUSH: group commit. Senders wait for their end offset; one fdatasync in a worker thread
serves every waiter whose offset it covers, and while waiters remain the next sync starts at once,
so the sync rate adapts to the disk instead of to the request rate. ASYNC_FLUSH: a sync every
interval. Either way the consume queues and the checkpoint are made durable every second.
"""

import asyncio
import heapq
import itertools
import logging
from concurrent.futures import ThreadPoolExecutor

from quorumq.store.message_store import MessageStore

log = logging.getLogger(__name__)

CHECKPOINT_INTERVAL_MS = 1000
_RETRY_AFTER_S = 0.1


def _give_up(future: asyncio.Future[bool]) -> None:
    if not future.done():
        future.set_result(False)


class Flusher:
    def __init__(self, store: MessageStore, sync_flush: bool, interval_ms: int,
                 checkpoint_interval_ms: int = CHECKPOINT_INTERVAL_MS) -> None:
        self._store = store
        self._sync_flush = sync_flush
        self._interval_s = interval_ms / 1000
        self._checkpoint_interval_s = checkpoint_interval_ms / 1000
        self._waiters: list[tuple[int, int, asyncio.Future[bool]]] = []  # a heap on the offset
        self._arrivals = itertools.count()  # breaks offset ties in the heap
        self._wakeup = asyncio.Event()
        self._flush_thread = ThreadPoolExecutor(1, thread_name_prefix="quorumq-flush")
        self._checkpoint_thread = ThreadPoolExecutor(1, thread_name_prefix="quorumq-checkpoint")
        self._tasks: list[asyncio.Task[None]] = []

    def start(self) -> None:
        assert not self._tasks, "flusher already started"
        self._tasks = [asyncio.create_task(self._flush_loop(), name="quorumq-flush"),
                       asyncio.create_task(self._checkpoint_loop(), name="quorumq-checkpoint")]

    async def stop(self) -> None:
        """Stop the loops, flush what was appended and answer every waiter."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        loop = asyncio.get_running_loop()
        # Work queued in the threads still runs; waiting behind it lets them shut down at once.
        await loop.run_in_executor(self._checkpoint_thread, self._store.checkpoint)
        self._release(await loop.run_in_executor(self._flush_thread, self._store.flush))
        while self._waiters:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():
                future.set_result(False)
        self._flush_thread.shutdown()
        self._checkpoint_thread.shutdown()

    async def wait_flushed(self, offset: int, timeout_s: float) -> bool:
        """True once the commit log is fsynced up to `offset`; False after `timeout_s`
        (the caller answers FLUSH_DISK_TIMEOUT)."""
        if offset <= self._store.flushed_offset:
            return True
        if offset > self._store.max_offset:
            raise ValueError(f"offset {offset} lies past the end of the commit log {self._store.max_offset}")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[bool] = loop.create_future()
        heapq.heappush(self._waiters, (offset, next(self._arrivals), future))
        self._wakeup.set()
        # A timer rather than asyncio.wait_for, which wraps every wait in a task of its own.
        timer = loop.call_later(timeout_s, _give_up, future)
        try:
            return await future
        finally:
            timer.cancel()

    def _release(self, flushed_offset: int) -> None:
        while self._waiters and self._waiters[0][0] <= flushed_offset:
            _, _, future = heapq.heappop(self._waiters)
            if not future.done():  # a waiter that timed out is cancelled already
                future.set_result(True)

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            self._release(self._store.flushed_offset)
            if self._sync_flush:
                if not self._waiters:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
            else:
                await asyncio.sleep(self._interval_s)
            try:
                self._release(await loop.run_in_executor(self._flush_thread, self._store.flush))
            except OSError as exc:  # a disk's error, not a bug: said in one line
                log.error("commit-log flush failed (%s); waiters time out until a flush succeeds", exc)
                await asyncio.sleep(_RETRY_AFTER_S)

    async def _checkpoint_loop(self) -> None:
        loop = asyncio.get_running_loop()
        failing = False  # said once, not every interval of a full disk
        while True:
            await asyncio.sleep(self._checkpoint_interval_s)
            try:
                await loop.run_in_executor(self._checkpoint_thread, self._store.checkpoint)
            except OSError as exc:
                if not failing:
                    log.error("checkpoint failed (%s); the next ones try again", exc)
                failing = True
                continue
            if failing:
                log.info("checkpoint written again")
            failing = False
