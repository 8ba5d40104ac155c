"""Micro benchmark of the store: append and read throughput with 1 KiB bodies.

Cases: appends in batches of 256 with ASYNC_FLUSH (no sync on the path), with one flush (fdatasync)
per batch, and with SYNC_FLUSH group commit (several producers awaiting the Flusher); then a clean
open of that store (which checks every record and consume-queue entry), get_messages reading
everything back 32 at a time, and a slave's copy of it: read_raw 256 KiB at a time (as the master's
replication stream reads) and append_raw into an empty store (which checks and indexes each
record). Prints a table and writes bench/results/store.json. Run: .venv/bin/python bench/bench_store.py [--messages N]
"""

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from quorumq import limits
from quorumq.clock import Clock
from quorumq.store import Flusher, MessageIn, MessageStore

BODY_BYTES = 1024
BATCH = 256
QUEUES = 8
PRODUCERS = 4
REPEATS = 3
HERE = Path(__file__).resolve().parent


def make_batches(count: int) -> list[list[MessageIn]]:
    body = os.urandom(BODY_BYTES)
    return [[MessageIn(topic="BenchTopic", queue_id=(batch + index) % QUEUES, body=body,
                       properties={"TAGS": "TagA", "KEYS": f"key-{batch}-{index}",
                                   "UNIQ_KEY": f"7F00{batch:08X}{index:04X}"},
                       born_timestamp_ms=1_700_000_000_000, born_host="127.0.0.1:54321")
             for index in range(BATCH)] for batch in range(count)]


def open_store(root: Path) -> MessageStore:
    store = MessageStore(root, segment_bytes=limits.COMMIT_LOG_SEGMENT_BYTES_DEFAULT,
                         store_host="127.0.0.1:10911", clock=Clock())
    store.open()
    return store


def append_async(root: Path, batches) -> float:
    store = open_store(root)
    started = time.perf_counter()
    for batch in batches:
        store.append(batch)
    elapsed = time.perf_counter() - started
    store.close()
    return len(batches) * BATCH / elapsed


def append_flush_each(root: Path, batches) -> float:
    store = open_store(root)
    started = time.perf_counter()
    for batch in batches:
        store.append(batch)
        store.flush()
    elapsed = time.perf_counter() - started
    store.close()
    return len(batches) * BATCH / elapsed


def append_group_commit(root: Path, batches) -> tuple[float, float]:
    store = open_store(root)

    async def run() -> float:
        flusher = Flusher(store, sync_flush=True, interval_ms=10)
        flusher.start()

        async def producer(mine) -> None:
            for batch in mine:
                assert await flusher.wait_flushed(store.append(batch).end_offset, 10.0)

        started = time.perf_counter()
        await asyncio.gather(*(producer(batches[number::PRODUCERS]) for number in range(PRODUCERS)))
        elapsed = time.perf_counter() - started
        await flusher.stop()
        return elapsed

    elapsed = asyncio.run(run())
    batches_per_sync = len(batches) / max(1, store.sync_count)
    store.close()
    return len(batches) * BATCH / elapsed, batches_per_sync


def open_checked(root: Path, messages: int) -> float:
    """Records a clean open checks per second."""
    started = time.perf_counter()
    store = open_store(root)
    elapsed = time.perf_counter() - started
    store.close()
    return messages / elapsed


def read_all(root: Path) -> float:
    store = open_store(root)
    started = time.perf_counter()
    read = 0
    for queue_id in range(QUEUES):
        offset = 0
        while (result := store.get_messages("BenchTopic", queue_id, offset, 32, 1 << 20)).messages:
            read += len(result.messages)
            offset = result.next_offset
    elapsed = time.perf_counter() - started
    store.close()
    return read / elapsed


REPLICATION_READ_BYTES = 256 * 1024


def replicate(source: Path, target: Path) -> float:
    """Records per second a slave's store appends from the master's log (append_raw), the reads
    of the master's log (read_raw) not counted."""
    master, slave = open_store(source), open_store(target)
    chunks, offset = [], 0
    while chunk := master.read_raw(offset, REPLICATION_READ_BYTES):
        chunks.append((offset, chunk))
        offset += len(chunk)
    started = time.perf_counter()
    for at, chunk in chunks:
        slave.append_raw(at, chunk)
    elapsed = time.perf_counter() - started
    messages = sum(slave.queue_max_offset("BenchTopic", q) for q in slave.topic_queue_ids("BenchTopic"))
    master.close()
    slave.close()
    return messages / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    arguments = parser.parse_args()
    batches = make_batches(max(1, arguments.messages // BATCH))
    work = HERE / "work"
    work.mkdir(exist_ok=True)
    runs: dict[str, list[float]] = {"append_async": [], "append_flush_per_batch": [],
                                    "append_sync_group_commit": [], "open_checking_every_record": [],
                                    "get_messages": [], "replicate_append_raw": []}
    batches_per_sync = []
    for _ in range(REPEATS):
        root = Path(tempfile.mkdtemp(dir=work))
        try:
            runs["append_async"].append(append_async(root / "async", batches))
            runs["open_checking_every_record"].append(open_checked(root / "async", len(batches) * BATCH))
            runs["get_messages"].append(read_all(root / "async"))
            runs["replicate_append_raw"].append(replicate(root / "async", root / "slave"))
            runs["append_flush_per_batch"].append(append_flush_each(root / "flush", batches))
            rate, per_sync = append_group_commit(root / "group", batches)
            runs["append_sync_group_commit"].append(rate)
            batches_per_sync.append(per_sync)
        finally:
            shutil.rmtree(root)
    medians = {name: statistics.median(values) for name, values in runs.items()}
    print(f"store, {len(batches) * BATCH} messages of {BODY_BYTES} B, batches of {BATCH}, {QUEUES} queues, "
          f"median of {REPEATS}")
    print(f"{'case':28} {'msgs/s':>10} {'MiB/s':>8}")
    for name, rate in medians.items():
        print(f"{name:28} {rate:10,.0f} {rate * BODY_BYTES / 2**20:8.1f}")
    print(f"group commit: {statistics.median(batches_per_sync):.1f} batches per fdatasync "
          f"({PRODUCERS} producers)")
    result = {
        "benchmark": "store", "messages": len(batches) * BATCH, "body_bytes": BODY_BYTES, "batch": BATCH,
        "queues": QUEUES, "repeats": REPEATS, "msgs_per_s_median": {k: round(v) for k, v in medians.items()},
        "msgs_per_s_runs": {k: [round(v) for v in values] for k, values in runs.items()},
        "group_commit_producers": PRODUCERS,
        "group_commit_batches_per_sync": round(statistics.median(batches_per_sync), 2),
        "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    (results / "store.json").write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
