"""The child of the store crash test: appends random batches with SYNC_FLUSH semantics (append,
wait for the group-commit flush, then acknowledge) and prints one line per acknowledged message:
`topic queue_id queue_offset sha256(body) end_offset`. The parent kills it with SIGKILL.

Usage: python store_writer.py ROOT SEED SEGMENT_BYTES
"""

import asyncio
import hashlib
import random
import sys
from pathlib import Path

from quorumq.clock import Clock
from quorumq.store import Flusher, MessageIn, MessageStore

PRODUCERS = 4


async def produce(store: MessageStore, flusher: Flusher, generator: random.Random) -> None:
    while True:
        batch = [MessageIn(topic=generator.choice(["A", "B", "C"]), queue_id=generator.randrange(4),
                           body=generator.randbytes(generator.randint(1, 2000)),
                           properties={"TAGS": generator.choice(["x", "y"])},
                           born_timestamp_ms=0, born_host="127.0.0.1:1")
                 for _ in range(generator.randint(1, 32))]
        result = store.append(batch)
        if not await flusher.wait_flushed(result.end_offset, 30.0):
            raise SystemExit("flush timed out")
        sys.stdout.write("".join(
            f"{message.topic} {message.queue_id} {queue_offset} {hashlib.sha256(message.body).hexdigest()} "
            f"{result.end_offset}\n" for message, (_, queue_offset) in zip(batch, result.offsets)))
        sys.stdout.flush()
        await asyncio.sleep(0)


async def main(root: Path, seed: int, segment_bytes: int) -> None:
    store = MessageStore(root, segment_bytes=segment_bytes, store_host="127.0.0.1:10911", clock=Clock())
    store.open()
    flusher = Flusher(store, sync_flush=True, interval_ms=10, checkpoint_interval_ms=100)
    flusher.start()
    print("ready", flush=True)
    await asyncio.gather(*(produce(store, flusher, random.Random(seed * 100 + number))
                           for number in range(PRODUCERS)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])))
