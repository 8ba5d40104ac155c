"""Flushing: group commit under SYNC_FLUSH, the timer under ASYNC_FLUSH, timeouts, and a flush
thread running beside appends."""

import asyncio
import json
import threading

from test_store_support import SEGMENT_BYTES, STORE_HOST, ManualClock, message, open_store

from harness import async_check_for
from quorumq.store import Flusher, MessageStore
from quorumq.store.message_store import FSYNC_LOG_NAME, FSYNC_LOG_VARIABLE


async def test_group_commit_serves_many_waiters_with_few_syncs(tmp_path):
    store = open_store(tmp_path / "s")
    flusher = Flusher(store, sync_flush=True, interval_ms=10)
    flusher.start()
    acked = []

    async def producer(number: int) -> None:
        for round_number in range(5):
            result = store.append([message(number * 100 + round_number, queue_id=number % 4)])
            assert await flusher.wait_flushed(result.end_offset, 5.0)
            assert store.flushed_offset >= result.end_offset
            acked.append(result.end_offset)

    await asyncio.gather(*(producer(number) for number in range(50)))
    await flusher.stop()
    assert len(acked) == 250
    assert 0 < store.sync_count <= len(acked) // 5
    store.close()


class StalledDiskStore(MessageStore):
    """A store whose fdatasync does not return until the test lets it: a stalled disk."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.disk_free = threading.Event()

    def flush(self) -> int:
        self.disk_free.wait(10)
        return super().flush()


async def test_wait_flushed_times_out_on_a_stalled_disk_then_succeeds(tmp_path):
    store = StalledDiskStore(tmp_path / "s", segment_bytes=SEGMENT_BYTES, store_host=STORE_HOST,
                             clock=ManualClock())
    store.disk_free.set()
    store.open()
    store.disk_free.clear()
    flusher = Flusher(store, sync_flush=True, interval_ms=10)
    flusher.start()
    end = store.append([message(0)]).end_offset
    assert not await flusher.wait_flushed(end, 0.05)  # the broker answers FLUSH_DISK_TIMEOUT
    store.disk_free.set()
    assert await flusher.wait_flushed(end, 5.0)
    assert await flusher.wait_flushed(0, 0.0)  # already flushed: no wait at all
    await flusher.stop()
    store.close()


async def test_async_flush_syncs_on_its_timer_and_writes_checkpoints(tmp_path):
    store = open_store(tmp_path / "s")
    flusher = Flusher(store, sync_flush=False, interval_ms=20, checkpoint_interval_ms=50)
    flusher.start()
    end = store.append([message(i) for i in range(10)]).end_offset
    assert store.flushed_offset < end
    assert await flusher.wait_flushed(end, 2.0)
    expected = {"flushed_offset": end, "dispatched_offset": end}
    await async_check_for(5.0, 0.01, lambda: json.loads((store.root / "checkpoint").read_text()) == expected,
                          "the timer's checkpoint")
    await flusher.stop()
    store.close()


async def test_stop_answers_every_waiter(tmp_path):
    store = open_store(tmp_path / "s")
    flusher = Flusher(store, sync_flush=False, interval_ms=60_000)
    flusher.start()
    end = store.append([message(0)]).end_offset
    waiter = asyncio.create_task(flusher.wait_flushed(end, 30.0))
    await asyncio.sleep(0)  # one turn of the loop, not a wait: the task runs until it waits
    assert not waiter.done(), "the waiter waits for the flush"
    await flusher.stop()  # the final flush covers it
    assert await waiter
    store.close()


def test_flush_thread_beside_appends(tmp_path):
    store = open_store(tmp_path / "s")
    done = threading.Event()
    flushed = []

    def flush_loop() -> None:
        while not done.is_set():
            flushed.append(store.flush())
            store.checkpoint()

    thread = threading.Thread(target=flush_loop)
    thread.start()
    try:
        for batch in range(300):
            store.append([message(batch * 8 + i, queue_id=i % 3, body_bytes=900) for i in range(8)])
    finally:
        done.set()
        thread.join()
    assert flushed == sorted(flushed) and store.flush() == store.max_offset
    assert store.max_offset > 10 * SEGMENT_BYTES
    store.close()


def test_with_the_fsync_log_on_the_store_records_what_it_fsynced(tmp_path, monkeypatch):
    """The fault suite's power cut (F11) cuts the log back to this offset: it must name the end of
    the last completed flush, never a byte beyond it."""
    monkeypatch.setenv(FSYNC_LOG_VARIABLE, "1")
    store = open_store(tmp_path / "s")
    fsync_log = tmp_path / "s" / FSYNC_LOG_NAME
    written = store.append([message(1)]).end_offset
    assert int(fsync_log.read_bytes() or b"0") < written, "appended is not fsynced"
    assert store.flush() == written
    assert int(fsync_log.read_bytes()) == written
    store.close()
