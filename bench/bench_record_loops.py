"""The per-record Python of the batch send path, in one process: what each of the four processes of
a 3-replica batch send spends on a record before gRPC, the event loops and the kernel.

  client   quorumq's producer encoding a request: message ids, properties, records (RecordEncoder)
  master   MessageStore.append_encoded: each record patched, checked (framing, CRC, fields, the
           topic's message rules) and indexed, the request written with one pwrite
  slave    MessageStore.append_raw of what the master's read_raw hands its replication stream: each
           record checked again and indexed

Requests of 256 messages of 1 KiB to one queue, as bench_replicas.py's batch sends; the first
WARMUP requests are not counted. Prints a table and writes bench/results/record_loops.json. Issue
24's batch target needs about 18 us of CPU per message over all four processes (docs/benchmarks.md):
these loops are the part that native code could take over.

    .venv/bin/python bench/bench_record_loops.py [--requests N]
"""

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402
from quorumq import limits  # noqa: E402
from quorumq.client.producer import Message, RecordEncoder, _encoded_properties, new_message_id  # noqa: E402
from quorumq.clock import Clock  # noqa: E402
from quorumq.core.message_types import RecordRules, TopicMessageType  # noqa: E402
from quorumq.store import MessageStore  # noqa: E402

BATCH = 256
BODY = b"x" * 1024
WARMUP = 20
TOPIC = "BenchLoops"


def open_store(root: Path, host: str) -> MessageStore:
    store = MessageStore(root, segment_bytes=limits.COMMIT_LOG_SEGMENT_BYTES_DEFAULT, store_host=host, clock=Clock())
    store.open()
    return store


def measure(requests: int, work: Path) -> dict[str, float]:
    """Seconds per record of each loop, summed over the counted requests."""
    master, slave = open_store(work / "master", "127.0.0.1:10911"), open_store(work / "slave", "127.0.0.1:10921")
    rules = RecordRules(TOPIC, TopicMessageType.NORMAL, 0, 8)
    encoder, host = RecordEncoder(), b"127.0.0.1:54321"
    spent = {"client": 0.0, "master": 0.0, "slave": 0.0}
    try:
        for request in range(WARMUP + requests):
            messages = [Message(BODY) for _ in range(BATCH)]
            started = time.perf_counter()
            ids = [new_message_id() for _ in messages]
            accepted = [(index, _encoded_properties(message, ids[index]), message.body)
                        for index, message in enumerate(messages)]
            records = encoder.encode(TOPIC.encode(), 0, time.time_ns() // 1_000_000, host, accepted)
            encoded = time.perf_counter()
            start = master.max_offset
            master.append_encoded(TOPIC, 0, records, BATCH, limits.MESSAGE_BODY_BYTES_CEILING, rules.check)
            appended = time.perf_counter()
            raw = master.read_raw(start, len(records) + limits.MiB)
            copied = time.perf_counter()
            slave.append_raw(start, raw)
            ended = time.perf_counter()
            if request >= WARMUP:
                spent["client"] += encoded - started
                spent["master"] += appended - encoded
                spent["slave"] += ended - copied
    finally:
        master.close()
        slave.close()
    return {name: seconds / (requests * BATCH) for name, seconds in spent.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=400, help="counted requests of 256 messages")
    opts = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-record-loops-"))
    try:
        per_record = measure(opts.requests, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    rows = [{"loop": name, "us_per_record": round(seconds * 1e6, 2)} for name, seconds in per_record.items()]
    total = per_record["client"] + per_record["master"] + 2 * per_record["slave"]
    rows.append({"loop": "a 3-replica send (client + master + 2 slaves)", "us_per_record": round(total * 1e6, 2)})
    common.print_table(rows, [("loop", "loop"), ("us_per_record", "us per record")],
                       title=f"per-record Python of the batch path, {BATCH} x 1 KiB a request, one process")
    path = common.write_results("record_loops", {"options": vars(opts), "rows": rows})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
