"""kill -9 against a store writing with SYNC_FLUSH semantics.

A child process (store_writer.py) appends and prints a line for every message once it is flushed.
The parent SIGKILLs it at a random moment, sometimes also cuts or scribbles on the active segment
above the last acknowledged offset (a torn write), reopens the store and checks that every message
ever acknowledged is there, byte for byte, at its queue offset, and that queues have no gaps.
Seeded: a failure names the seed and round to replay.
"""

import hashlib
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from quorumq.clock import Clock
from quorumq.store import MessageStore

SEED = 20240611
ROUNDS = 5
SEGMENT_BYTES = 256 * 1024
WRITER = Path(__file__).with_name("store_writer.py")


def run_writer_until_killed(root: Path, seed: int, run_seconds: float) -> list[str]:
    """Start the writer, let it run, SIGKILL it; return the whole lines it printed."""
    lines: list[str] = []
    with subprocess.Popen([sys.executable, str(WRITER), str(root), str(seed), str(SEGMENT_BYTES)],
                          stdout=subprocess.PIPE, text=True) as child:
        reader = threading.Thread(target=lambda: lines.extend(child.stdout), daemon=True)
        try:
            reader.start()
            deadline = time.monotonic() + 20
            while not lines and time.monotonic() < deadline and child.poll() is None:
                time.sleep(0.01)
            assert lines and lines[0] == "ready\n", f"writer did not start (exit code {child.poll()})"
            time.sleep(run_seconds)
            assert child.poll() is None, f"writer died by itself with exit code {child.returncode}"
        finally:
            if child.poll() is None:
                os.kill(child.pid, signal.SIGKILL)
            child.wait()
            reader.join(10)
    return [line for line in lines[1:] if line.endswith("\n")]  # a line cut by the kill is not an ack


def tear_active_segment(root: Path, acked_end: int, generator: random.Random, how: str) -> str:
    """Tear the last segment at a random byte above the acknowledged end: truncate it there, or
    overwrite everything from there to past the end of its data with garbage."""
    active = sorted((root / "commitlog").iterdir())[-1]
    start = int(active.name)
    low = max(acked_end, start) - start
    if how == "none" or low >= SEGMENT_BYTES:
        return "none"
    position = generator.randrange(low, SEGMENT_BYTES)
    if how == "truncate":
        os.truncate(active, position)
        return f"truncated {active.name} at {position}"
    data_end = len(active.read_bytes().rstrip(b"\0"))
    garbage_end = min(SEGMENT_BYTES, max(data_end, position) + generator.randint(1, 5000))
    with open(active, "r+b") as file:
        file.seek(position)
        file.write(generator.randbytes(garbage_end - position))
    return f"garbage in {active.name} from {position} to {garbage_end}"


def check_store(root: Path, acked: dict[tuple[str, int, int], str], context: str) -> None:
    store = MessageStore(root, segment_bytes=SEGMENT_BYTES, store_host="127.0.0.1:10911", clock=Clock())
    report = store.open()
    try:
        assert report.corrupt_offset is None, f"{context}: {report}"
        for (topic, queue_id, queue_offset), digest in acked.items():
            found = store.get_messages(topic, queue_id, queue_offset, 1, 1 << 20).messages
            where = f"{context}: {topic}/{queue_id}@{queue_offset}"
            assert found and found[0].queue_offset == queue_offset, f"{where} lost"
            assert hashlib.sha256(found[0].body).hexdigest() == digest, f"{where} changed"
        for topic in store.topics():
            for queue_id in store.topic_queue_ids(topic):
                offset, count = 0, 0
                while (result := store.get_messages(topic, queue_id, offset, 256, 1 << 22)).messages:
                    offsets = [message.queue_offset for message in result.messages]
                    assert offsets == list(range(offset, offset + len(offsets))), f"{context}: out of order"
                    offset, count = result.next_offset, count + len(result.messages)
                assert count == store.queue_max_offset(topic, queue_id), f"{context}: gap in {topic}/{queue_id}"
    finally:
        store.close()


def test_acknowledged_messages_survive_kill_9(tmp_path):
    generator = random.Random(SEED)
    root = tmp_path / "store"
    acked: dict[tuple[str, int, int], str] = {}
    for round_number in range(ROUNDS):
        lines = run_writer_until_killed(root, SEED + round_number, generator.uniform(0.3, 1.2))
        acked_end = 0
        for line in lines:
            topic, queue_id, queue_offset, digest, end_offset = line.split()
            acked[(topic, int(queue_id), int(queue_offset))] = digest
            acked_end = max(acked_end, int(end_offset))
        how = ("none", "truncate", "garbage")[round_number % 3]
        tear = tear_active_segment(root, acked_end, generator, how)
        context = f"seed={SEED} round={round_number} tear={tear}"
        assert lines, f"{context}: nothing was acknowledged"
        check_store(root, acked, context)
