"""Shared helpers for the store tests (this module holds no tests)."""

import shutil
from pathlib import Path

from quorumq.clock import Clock
from quorumq.store import MessageIn, MessageStore

SEGMENT_BYTES = 64 * 1024  # the smallest segment the store accepts, so tests roll often
STORE_HOST = "10.0.0.1:10911"


class ManualClock(Clock):
    """Wall time that moves only when a test moves it."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        super().__init__(offset_ms=0)
        self.now = now_ms

    def now_ms(self) -> int:
        return self.now


def new_store(root: Path, clock: Clock | None = None, **options) -> MessageStore:
    """A store not yet opened, so a test can look at the report `open()` returns."""
    options.setdefault("segment_bytes", SEGMENT_BYTES)
    return MessageStore(root, store_host=STORE_HOST, clock=clock or ManualClock(), **options)


def open_store(root: Path, clock: Clock | None = None, **options) -> MessageStore:
    store = new_store(root, clock, **options)
    store.open()
    return store


def message(index: int, topic: str = "T", queue_id: int = 0, body_bytes: int = 100,
            tag: str | None = None) -> MessageIn:
    body = (f"m{index}:".encode() * body_bytes)[:body_bytes]
    properties = {"KEYS": f"key-{index}"}
    if tag is not None:
        properties["TAGS"] = tag
    return MessageIn(topic=topic, queue_id=queue_id, body=body, properties=properties,
                     born_timestamp_ms=1_600_000_000_000 + index, born_host="10.0.0.9:40000")


def crash_copy(store: MessageStore, target: Path) -> Path:
    """The files of an open store as a kill -9 would leave them: page-cache contents, abort
    marker present, checkpoint as last written."""
    shutil.copytree(store.root, target)
    return target


def queue_bodies(store: MessageStore, topic: str, queue_id: int) -> list[tuple[int, bytes]]:
    """(queue offset, body) of every message of a queue, read from its min offset."""
    found = []
    offset = store.queue_min_offset(topic, queue_id)
    while True:
        result = store.get_messages(topic, queue_id, offset, 64, 1 << 20)
        if not result.messages:
            return found
        found.extend((m.queue_offset, m.body) for m in result.messages)
        offset = result.next_offset


def segment_files(root: Path) -> list[Path]:
    return sorted((root / "commitlog").iterdir())


def queue_files(root: Path) -> dict[str, bytes]:
    base = root / "consumequeue"
    return {str(path.relative_to(base)): path.read_bytes()
            for path in sorted(base.rglob("*")) if path.is_file()}
