"""The message store: one commit log for all topics plus a consume queue per topic and queue id.

Layout under `root`:

    commitlog/<20-digit start offset>                      fixed-size segments of records
    consumequeue/<topic>/<queue id>/<20-digit start>       20-byte entries, built from the log
    checkpoint                                             flushed and dispatched offsets
    abort                                                  present while open: an unclean exit
    lock                                                   flock'ed by the process that has it open

`MessageStore` is a facade over parts that share one `StoreState` (state.py: the log, the queues,
the published offsets, flush and checkpoint): `Appender` (append.py: the three ways in, and a
topic's deletion record), `Reader` (read.py), `Recovery` (recovery.py: open, close, truncate)
and `Retention` (retention.py). Consume-queue entries are derived from the commit-log bytes alone (the
dispatcher), so a replica that appends a master's bytes through `append_raw` builds the same queues.

Threads: every method runs on one thread (the event loop) except `flush` and `checkpoint`, which
may run in worker threads at the same time as appends (see state.py).
"""

from collections.abc import Callable, Sequence
from pathlib import Path

from quorumq import limits
from quorumq.clock import Clock
from quorumq.errors import Error, QuorumqError
from quorumq.store.append import Appender
from quorumq.store.interface import AppendResult, GetResult, MessageIn, RecoveryReport
from quorumq.store.read import Reader
from quorumq.store.recovery import Recovery
from quorumq.store.retention import Retention
from quorumq.store.state import FSYNC_LOG_NAME, FSYNC_LOG_VARIABLE, StoreState

__all__ = ["FSYNC_LOG_NAME", "FSYNC_LOG_VARIABLE", "MessageStore"]


class MessageStore:
    def __init__(self, root: Path, *, segment_bytes: int, store_host: str, clock: Clock,
                 consume_queue_entries_per_file: int = limits.CONSUME_QUEUE_ENTRIES_PER_FILE) -> None:
        if segment_bytes < limits.COMMIT_LOG_SEGMENT_BYTES_MIN:
            raise QuorumqError(Error.CONFIG_INVALID, f"segment size {segment_bytes} is below "
                               f"{limits.COMMIT_LOG_SEGMENT_BYTES_MIN}")
        self.root = Path(root)
        self.store_host = store_host
        self._state = StoreState(self.root, segment_bytes, store_host, clock, consume_queue_entries_per_file)
        self._appender = Appender(self._state)
        self._reader = Reader(self._state)
        self._recovery = Recovery(self._state)
        self._retention = Retention(self._state)

    # Offsets and state.

    @property
    def max_offset(self) -> int:
        return self._state.write_offset

    @property
    def min_offset(self) -> int:
        return self._state.min_offset

    @property
    def last_segment_start(self) -> int:
        """Where the segment the next append goes to begins (a record always starts there)."""
        return self._state.commit_log.segment_start(self._state.write_offset)

    @property
    def flushed_offset(self) -> int:
        return self._state.flushed_offset

    @property
    def corrupt_offset(self) -> int | None:
        return self._state.corrupt_offset

    @property
    def is_open(self) -> bool:
        return self._state.is_open

    @property
    def sync_count(self) -> int:
        """Commit-log fdatasync calls, to observe group commit."""
        return self._state.sync_count

    # Open, close, truncate (recovery.py).

    def open(self) -> RecoveryReport:
        """Open the store, recovering from an unclean exit when the abort marker says so."""
        return self._recovery.open()

    def close(self) -> None:
        """Flush everything, write the checkpoint and, when the store is sound, drop the abort marker."""
        self._recovery.close()

    def truncate(self, offset: int) -> None:
        """Cut the log back to `offset`, a record boundary, with the consume-queue entries past it;
        durable when it returns."""
        self._recovery.truncate(offset)

    # Appending (append.py).

    def append(self, messages: Sequence[MessageIn]) -> AppendResult:
        return self._appender.append(messages)

    def append_encoded(self, topic: str, queue_id: int, records: bytes | memoryview, count: int,
                       max_body_bytes: int, check_properties: Callable[[bytearray, int, int], None]) -> AppendResult:
        return self._appender.append_encoded(topic, queue_id, records, count, max_body_bytes, check_properties)

    def index_pending(self) -> None:
        self._appender.index_pending()

    def append_raw(self, offset: int, data: bytes) -> int:
        return self._appender.append_raw(offset, data)

    def delete_topic(self, topic: str) -> bool:
        """Drop the topic's queues with a deletion record in the log (append.py): replicas drop
        theirs at the same record. False, and nothing written, when it has no queues."""
        return self._appender.append_topic_deletion(topic)

    # Durability (state.py).

    def flush(self) -> int:
        return self._state.flush()

    def checkpoint(self) -> None:
        self._state.checkpoint()

    # Reading (read.py).

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                     tag_hashes: frozenset[int] | None = None, readable_end: int | None = None) -> GetResult:
        return self._reader.get_messages(topic, queue_id, offset, max_count, max_bytes, tag_hashes, readable_end)

    def get_records(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                    tag_hashes: frozenset[int] | None = None, readable_end: int | None = None) -> GetResult:
        return self._reader.get_records(topic, queue_id, offset, max_count, max_bytes, tag_hashes, readable_end)

    def topics(self) -> list[str]:
        return self._reader.topics()

    def topic_queue_ids(self, topic: str) -> list[int]:
        return self._reader.topic_queue_ids(topic)

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return self._reader.queue_min_offset(topic, queue_id)

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        return self._reader.queue_max_offset(topic, queue_id)

    def commit_log_offset_of(self, topic: str, queue_id: int, offset: int) -> int | None:
        return self._reader.commit_log_offset_of(topic, queue_id, offset)

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        return self._reader.offset_for_timestamp(topic, queue_id, timestamp_ms)

    def store_timestamp_at(self, offset: int) -> int | None:
        return self._reader.store_timestamp_at(offset)

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        return self._reader.read_raw(offset, max_bytes)

    def recent_message_ids(self, count: int) -> list[tuple[str, int, int, int]]:
        return self._reader.recent_message_ids(count)

    # Retention (retention.py).

    def clean_expired(self, now_ms: int, reserved_hours: float, force: bool) -> int:
        return self._retention.clean_expired(now_ms, reserved_hours, force)

    def disk_usage_ratio(self) -> float:
        return self._retention.disk_usage_ratio()
