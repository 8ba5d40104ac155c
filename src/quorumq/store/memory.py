"""A `Store` in memory, for pure tests of what reads and writes a store: no files, no threads.

It holds one growing log of the records `MessageStore` writes (encoded by the same codec, checked by
the same limits) and, per queue, the (log offset, size, tag hash) of each message. There are no
segments, so no BLANK padding and no retention; nothing is ever torn or corrupt.
"""

from collections.abc import Callable, Sequence

from quorumq import limits
from quorumq.clock import Clock
from quorumq.core import codec
from quorumq.core.codec import BLANK_BYTES_MIN, BLANK_HEADER, TAGS_PROPERTY
from quorumq.store.append import check_batch_size, encoded_fields
from quorumq.store.interface import AppendResult, GetResult, GetStatus, MessageIn
from quorumq.store.read import match_entries, unread_result

Entry = tuple[int, int, int]  # log offset, size, tag hash


class MemoryStore:
    def __init__(self, *, clock: Clock, store_host: str = "127.0.0.1:10911",
                 record_bytes_max: int = limits.COMMIT_LOG_SEGMENT_BYTES_DEFAULT - BLANK_BYTES_MIN) -> None:
        self._clock = clock
        self._store_host = store_host
        self._record_bytes_max = record_bytes_max
        self._log = bytearray()
        self._queues: dict[str, dict[int, list[Entry]]] = {}

    @property
    def max_offset(self) -> int:
        return len(self._log)

    @property
    def min_offset(self) -> int:
        return 0

    def append(self, messages: Sequence[MessageIn]) -> AppendResult:
        check_batch_size(messages)
        encoded = [encoded_fields(message, self._record_bytes_max) for message in messages]  # all or nothing
        store_timestamp_ms = self._clock.now_ms()
        offsets = []
        for message, (topic, born_host, properties, size) in zip(messages, encoded):
            entries = self._queues.setdefault(message.topic, {}).setdefault(message.queue_id, [])
            log_offset, queue_offset = len(self._log), len(entries)
            self._log.extend(bytes(size))
            with memoryview(self._log) as view:
                codec.encode_record(view, log_offset, size, topic, message.queue_id, message.flag, message.sys_flag,
                                    message.born_timestamp_ms, born_host, message.reconsume_times, properties,
                                    message.body, queue_offset, log_offset, store_timestamp_ms)
            entries.append((log_offset, size, codec.tag_hash(message.properties.get(TAGS_PROPERTY))))
            offsets.append((log_offset, queue_offset))
        return AppendResult(offsets, len(self._log))

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                     tag_hashes: frozenset[int] | None = None, readable_end: int | None = None) -> GetResult:
        return self._get(topic, queue_id, offset, max_count, max_bytes, tag_hashes, readable_end,
                         lambda position: self._decode(position, self._store_host))

    def get_records(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                    tag_hashes: frozenset[int] | None = None, readable_end: int | None = None) -> GetResult:
        return self._get(topic, queue_id, offset, max_count, max_bytes, tag_hashes, readable_end,
                         lambda position: bytes(self._log[position:position + _size_at(self._log, position)]))

    def _get(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
             tag_hashes: frozenset[int] | None, readable_end: int | None,
             read: Callable[[int], codec.StoredMessage | bytes]) -> GetResult:
        entries = self._entries(topic, queue_id)
        high = len(entries)
        unread = unread_result(0, high, offset)
        if unread is not None:
            return unread
        if readable_end is not None:  # the first record that ends past it is not readable yet
            high = next((index for index in range(offset, high) if sum(entries[index][:2]) > readable_end), high)
            if offset == high:
                return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, 0, len(entries))
        scan_end = min(high, offset + limits.CONSUME_QUEUE_SCAN_ENTRIES_MAX)
        matched, next_offset = match_entries(entries[offset:scan_end], offset, max_count, max_bytes, tag_hashes)
        messages: list = [read(log_offset) for _, log_offset, _ in matched]
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, messages, next_offset, 0, len(entries))

    def _decode(self, position: int, store_host: str) -> codec.StoredMessage:
        with memoryview(self._log) as view:  # released at once: the log grows
            return codec.decode_message(view, position, store_host)

    def _entries(self, topic: str, queue_id: int) -> list[Entry]:
        return self._queues.get(topic, {}).get(queue_id, [])

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        return 0

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        return len(self._entries(topic, queue_id))

    def commit_log_offset_of(self, topic: str, queue_id: int, offset: int) -> int | None:
        entries = self._entries(topic, queue_id)
        return entries[offset][0] if 0 <= offset < len(entries) else None

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        entries = self._entries(topic, queue_id)
        return next((index for index, (log_offset, _, _) in enumerate(entries)
                     if self._decode(log_offset, "").store_timestamp_ms >= timestamp_ms),
                    len(entries))

    def topics(self) -> list[str]:
        return sorted(self._queues)

    def topic_queue_ids(self, topic: str) -> list[int]:
        return sorted(self._queues.get(topic, {}))

    def delete_topic(self, topic: str) -> bool:
        return self._queues.pop(topic, None) is not None

    def truncate(self, offset: int) -> None:
        if not 0 <= offset <= len(self._log):
            raise ValueError(f"cannot truncate to {offset}: the log holds [0, {len(self._log)}]")
        position = 0
        while position < offset:
            position += _size_at(self._log, position)
        if position != offset:
            raise ValueError(f"commit-log offset {offset} is not where a record starts")
        del self._log[offset:]
        for queues in self._queues.values():
            for entries in queues.values():
                while entries and entries[-1][0] >= offset:
                    entries.pop()


def _size_at(log: bytearray, position: int) -> int:
    """The size of the record at `position` (its first field)."""
    return BLANK_HEADER.unpack_from(log, position)[0]
