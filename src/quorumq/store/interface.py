"""What the rest of the broker sees of a store: the types it passes in and gets back, and `Store`,
the operations the send path and the consumers use. `MessageStore` (files) and `MemoryStore`
(pure tests) both satisfy it; replication's raw log bytes and durability stay `MessageStore`'s.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from quorumq.core.codec import MessageIn, StoredMessage
from quorumq.errors import QuorumqError


@dataclass(slots=True)
class AppendResult:
    offsets: list[tuple[int, int]]  # (commit_log_offset, queue_offset) of each message, in order
    end_offset: int  # the commit-log write position after the batch


class UnindexedAppend(QuorumqError):
    """The records reached the commit log but their consume-queue entries could not be written (a
    full disk): they are indexed before the next append, so they are stored, and a producer's
    resend of them must find them (`appended`, as a successful append would have answered)."""

    def __init__(self, error: QuorumqError, appended: AppendResult) -> None:
        super().__init__(error.error, error.detail)
        self.appended = appended


class GetStatus(Enum):
    FOUND = "FOUND"
    NO_MATCHED_MESSAGE = "NO_MATCHED_MESSAGE"  # entries were scanned but the tag filter took none
    OFFSET_TOO_SMALL = "OFFSET_TOO_SMALL"
    OFFSET_OVERFLOW_ONE = "OFFSET_OVERFLOW_ONE"  # offset == max: wait for the next message
    OFFSET_OVERFLOW_BADLY = "OFFSET_OVERFLOW_BADLY"
    NO_MESSAGE_IN_QUEUE = "NO_MESSAGE_IN_QUEUE"


@dataclass(slots=True)
class GetResult:
    status: GetStatus
    messages: list[StoredMessage] | list[bytes]  # whole records when read by `get_records`
    next_offset: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True, slots=True)
class RecoveryReport:
    clean_shutdown: bool
    scanned_from: int
    end_offset: int
    truncated_bytes: int  # torn bytes cut from the tail
    records_redispatched: int  # records whose consume-queue entries recovery wrote again
    entries_repaired: int  # consume-queue entries that disagreed with the log, written again
    corrupt_offset: int | None  # first corrupt record kept in the middle of the log


class Store(Protocol):
    """A commit log with a consume queue per (topic, queue id). Offsets in the log are byte
    positions; queue offsets count a queue's messages from 0."""

    @property
    def max_offset(self) -> int:
        """Where the next append goes in the log."""

    @property
    def min_offset(self) -> int:
        """The oldest offset the log still holds."""

    def append(self, messages: Sequence[MessageIn]) -> AppendResult:
        """Append a batch, all or nothing."""

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                     tag_hashes: frozenset[int] | None = None, readable_end: int | None = None) -> GetResult:
        """Messages of one queue from `offset`, none that ends past `readable_end`."""

    def get_records(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                    tag_hashes: frozenset[int] | None = None, readable_end: int | None = None) -> GetResult:
        """As get_messages, each item a whole record's bytes."""

    def queue_min_offset(self, topic: str, queue_id: int) -> int: ...

    def queue_max_offset(self, topic: str, queue_id: int) -> int: ...

    def commit_log_offset_of(self, topic: str, queue_id: int, offset: int) -> int | None:
        """Where the queue's message at `offset` lies in the log; None if the queue lacks it."""

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after `timestamp_ms`; the max offset if none."""

    def topics(self) -> list[str]: ...

    def topic_queue_ids(self, topic: str) -> list[int]: ...

    def delete_topic(self, topic: str) -> bool:
        """Drop the topic's queues (MessageStore: with a deletion record in its log); False if it had none."""

    def truncate(self, offset: int) -> None:
        """Cut the log back to `offset`, a record boundary, with the queue entries past it."""
