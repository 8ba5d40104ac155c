"""Reading the store: a queue's messages (decoded, or as whole records), queue offsets and
timestamps, and the raw log bytes replication copies. Every record read is checked first; one that
fails marks the store corrupt from there and is never served.
"""

from collections.abc import Callable, Iterable, Iterator

from quorumq import limits
from quorumq.core import codec
from quorumq.core.codec import BLANK_HEADER, HEADER, MESSAGE_MAGIC, Frame, StoredMessage, check_frame, whole_records_end
from quorumq.core.properties import MESSAGE_ID
from quorumq.core.recent_sends import window_start
from quorumq.errors import Error, QuorumqError
from quorumq.store.consume_queue import ENTRY, ENTRY_SIZE, ConsumeQueue
from quorumq.store.interface import GetResult, GetStatus, Store
from quorumq.store.state import StoreState

_READ_SPAN_BYTES = 1024 * 1024  # one pread may cover several records of a queue up to this span
_QUEUE_READ_ENTRIES = 1024
WALK_BATCH = 256  # messages one read of walk_queue takes

Read = Callable[[memoryview, int], StoredMessage | bytes]  # one checked record to what a read returns


class Reader:
    def __init__(self, state: StoreState) -> None:
        self._state = state

    def topics(self) -> list[str]:
        return sorted(topic for topic, queues in self._state.queues.items()
                      if any(queue.files for queue in queues.values()))

    def topic_queue_ids(self, topic: str) -> list[int]:
        return sorted(queue_id for queue_id, queue in self._state.queues.get(topic, {}).items() if queue.files)

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._state.queue(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._state.queue(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def commit_log_offset_of(self, topic: str, queue_id: int, offset: int) -> int | None:
        """Where the queue's message at `offset` lies in the commit log; None if the queue lacks it."""
        queue = self._state.queue(topic, queue_id)
        if queue is None or not queue.min_offset <= offset < queue.max_offset:
            return None
        return queue.entry_at(offset)[0]

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                     tag_hashes: frozenset[int] | None = None, readable_end: int | None = None) -> GetResult:
        """Messages of one queue from `offset`; entries whose tag hash is not in `tag_hashes` are
        skipped without reading the commit log. At least one message unless none matched. Reads
        end before the first record that ends past `readable_end` (a commit-log offset; None: no
        bound), which a controller-mode broker sets to what every SyncStateSet member holds."""
        return self._get(topic, queue_id, offset, max_count, max_bytes, tag_hashes, readable_end, self._decode)

    def _decode(self, data: memoryview, position: int) -> StoredMessage:
        return codec.decode_message(data, position, self._state.store_host)

    def get_records(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                    tag_hashes: frozenset[int] | None = None, readable_end: int | None = None) -> GetResult:
        """As get_messages, but each item is a whole record's bytes, checked and not decoded."""
        return self._get(topic, queue_id, offset, max_count, max_bytes, tag_hashes, readable_end, _record_bytes)

    def _get(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
             tag_hashes: frozenset[int] | None, readable_end: int | None, read: Read) -> GetResult:
        self._state.check_open()
        queue = self._state.queue(topic, queue_id)
        low, high = (queue.min_offset, queue.max_offset) if queue is not None else (0, 0)
        unread = unread_result(low, high, offset)
        if unread is not None:
            return unread
        assert queue is not None  # a queue without messages is unread
        readable = _readable_high(queue, offset, high, readable_end)
        if offset == readable:  # stored, not yet readable: as at the end of the queue
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, low, high)
        matched, next_offset = match_entries(_entries(queue, offset, readable), offset, max_count, max_bytes,
                                             tag_hashes)
        messages = self._read_messages(matched, read)
        if len(messages) < len(matched):
            next_offset = matched[len(messages)][0]
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, messages, next_offset, low, high)

    def _read_messages(self, matched: list[tuple[int, int, int]], read: Read) -> list:
        """Check and `read` the records, reading neighbours in one segment with a single pread."""
        state = self._state
        messages: list = []
        index = 0
        while index < len(matched):
            first = matched[index][1]
            segment_end = state.commit_log.segment_start(first) + state.segment_bytes
            span_end = min(segment_end, first + max(_READ_SPAN_BYTES, matched[index][2]))
            group_end = index + 1
            while group_end < len(matched) and sum(matched[group_end][1:]) <= span_end:
                group_end += 1
            last = matched[group_end - 1]
            data = memoryview(state.commit_log.read(first, last[1] + last[2] - first))
            for queue_offset, commit_log_offset, size in matched[index:group_end]:
                if state.corrupt_offset is not None and commit_log_offset >= state.corrupt_offset:
                    return self._served_before(messages, commit_log_offset)
                position = commit_log_offset - first
                frame, found = check_frame(data, position, segment_end - commit_log_offset, commit_log_offset)
                if frame is not Frame.MESSAGE or found != size:
                    state.mark_corrupt(commit_log_offset, frame.name)
                    return self._served_before(messages, commit_log_offset)
                # The queue offset lies outside the CRC: the entry that led here vouches for it.
                if codec.queue_offset_of(data, position) != queue_offset:
                    state.mark_corrupt(commit_log_offset, f"queue offset is not {queue_offset}")
                    return self._served_before(messages, commit_log_offset)
                messages.append(read(data, position))
            index = group_end
        return messages

    def _served_before(self, messages: list, offset: int) -> list:
        """The messages read before a corrupt one; if there are none, the corruption error."""
        if not messages:
            raise self._state.corruption_error(offset)
        return messages

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after `timestamp_ms`; the max offset if none."""
        self._state.check_open()
        queue = self._state.queue(topic, queue_id)
        if queue is None:
            return 0
        return queue.first_offset_where(queue.min_offset, queue.max_offset,
                                        lambda entry: self._store_timestamp(entry[0]) >= timestamp_ms)

    def store_timestamp_at(self, offset: int) -> int | None:
        """The store timestamp of the record at commit-log `offset` (at a BLANK: of the next
        segment's first record); None outside the log."""
        state = self._state
        state.check_open()
        for _ in range(2):
            if not state.min_offset <= offset < state.write_offset:
                return None
            timestamp = codec.store_timestamp_of(state.commit_log.read(offset, HEADER.size))
            if timestamp is not None:
                return timestamp
            offset = state.commit_log.segment_start(offset) + state.segment_bytes
        return None

    def _store_timestamp(self, commit_log_offset: int) -> int:
        timestamp = codec.store_timestamp_of(self._state.commit_log.read(commit_log_offset, HEADER.size))
        if timestamp is None:
            raise QuorumqError(Error.STORE_CORRUPTED, f"no record at commit-log offset {commit_log_offset}")
        return timestamp

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Whole records from `offset`, within one segment, at most `max_bytes` unless the first
        record alone is larger. Empty at the end of the log."""
        state = self._state
        state.check_open()
        if not state.min_offset <= offset <= state.write_offset:
            raise QuorumqError(Error.ILLEGAL_OFFSET, f"offset {offset} outside the commit log "
                               f"[{state.min_offset}, {state.write_offset}]")
        limit = state.readable_limit
        if offset == state.write_offset:
            return b""
        if offset >= limit:
            raise state.corruption_error(offset)
        segment_end = state.commit_log.segment_start(offset) + state.segment_bytes
        data = memoryview(state.commit_log.read(offset, min(max(max_bytes, HEADER.size), limit - offset)))
        frame, size = check_frame(data, 0, segment_end - offset, offset)
        if frame in (Frame.SHORT, Frame.BLANK) and size > len(data):  # one record above max_bytes
            data = memoryview(state.commit_log.read(offset, size))
            frame, size = check_frame(data, 0, segment_end - offset, offset)
        if frame not in (Frame.MESSAGE, Frame.BLANK) or size > len(data):
            # The offset comes from the caller (a slave's report): no record starting there is the
            # caller's error, not proof of corruption, so the store is not marked for it.
            raise QuorumqError(Error.ILLEGAL_OFFSET, f"no whole record starts at commit-log offset {offset} "
                               f"({frame.name})")
        # The first record was checked whole: the offset is a record start. The rest were checked
        # when appended and the slave checks them again, so only their sizes are read here.
        return bytes(data[:whole_records_end(data, size)])

    def recent_message_ids(self, count: int) -> list[tuple[str, int, int, int]]:
        """(message id, queue id, queue offset, end offset) of each of the log's last `count`
        indexed records, oldest first: what a new master remembers of the sends it holds
        (core/recent_sends.py). Reads only that tail: the queues' newest entries to find where it
        begins, then the log from there."""
        state = self._state
        state.check_open()
        start = window_start(map(_newest_first, state.all_queues()), count)
        offset = state.min_offset if start is None else max(start, state.min_offset)
        end = state.readable_limit
        found = []
        while offset < end:
            data = self.read_raw(offset, _READ_SPAN_BYTES)
            position = 0
            while position < len(data):
                size, magic = BLANK_HEADER.unpack_from(data, position)
                header = HEADER.unpack_from(data, position) if magic == MESSAGE_MAGIC else None
                if header is not None and header[codec.SYS_FLAG_FIELD] != codec.TOPIC_DELETION:  # no send's
                    found.append((codec.message_property(data, position, MESSAGE_ID), header[codec.QUEUE_ID_FIELD],
                                  codec.queue_offset_of(data, position), offset + position + size))
                position += size
            offset += len(data)
        return found


def _record_bytes(data: memoryview, position: int) -> bytes:
    """A checked record's bytes as they lie in the commit log (its size is its first field)."""
    size, _ = codec.BLANK_HEADER.unpack_from(data, position)
    return bytes(data[position:position + size])


def unread_result(low: int, high: int, offset: int) -> GetResult | None:
    """What a read at `offset` of a queue holding [low, high) answers without reading anything;
    None when it reads."""
    if high == 0:
        return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, 0, 0)
    if offset < low:
        return GetResult(GetStatus.OFFSET_TOO_SMALL, [], low, low, high)
    if offset >= high:
        status = GetStatus.OFFSET_OVERFLOW_ONE if offset == high else GetStatus.OFFSET_OVERFLOW_BADLY
        return GetResult(status, [], high if offset > high else offset, low, high)
    return None


def match_entries(entries: Iterable[tuple[int, int, int]], offset: int, max_count: int, max_bytes: int,
                  tag_hashes: frozenset[int] | None) -> tuple[list[tuple[int, int, int]], int]:
    """Which of a queue's `entries` (commit-log offset, size, tag hash), from queue offset `offset`
    on, a read takes: (queue offset, commit-log offset, size) of each, and the next offset. At
    least one matched entry, then as many as `max_count` and `max_bytes` allow."""
    max_count = max(1, max_count)
    matched: list[tuple[int, int, int]] = []
    matched_bytes = 0
    for commit_log_offset, size, tag in entries:
        if tag_hashes is None or tag in tag_hashes:
            if matched and matched_bytes + size > max_bytes:
                return matched, offset
            matched.append((offset, commit_log_offset, size))
            matched_bytes += size
        offset += 1
        if len(matched) == max_count:
            return matched, offset
    return matched, offset


def walk_queue(store: Store, topic: str, queue_id: int, offset: int) -> Iterator[GetResult]:
    """A queue's messages in order from `offset`, WALK_BATCH at a time: each read that moves on,
    its next_offset where the walk has come to (one with no messages where retention took the
    oldest, OFFSET_TOO_SMALL: the walk goes on from the oldest kept). It ends at the first read that
    moves no further, so a caller that awaits between reads (serving other requests) also reads what
    was appended meanwhile. A corrupt record raises STORE_CORRUPTED when the walk reaches it."""
    while True:
        result = store.get_messages(topic, queue_id, offset, WALK_BATCH, limits.PULL_BYTES_MAX)
        if result.next_offset <= offset:
            return
        yield result
        offset = result.next_offset


def _entries(queue: ConsumeQueue, offset: int, end: int) -> Iterator[tuple[int, int, int]]:
    """The queue's entries in [offset, end), at most CONSUME_QUEUE_SCAN_ENTRIES_MAX of them, read
    a chunk at a time."""
    scan_end = min(end, offset + limits.CONSUME_QUEUE_SCAN_ENTRIES_MAX)
    while offset < scan_end:
        data = queue.read_entries(offset, min(_QUEUE_READ_ENTRIES, scan_end - offset))
        yield from ENTRY.iter_unpack(data)
        offset += len(data) // ENTRY_SIZE


def _readable_high(queue: ConsumeQueue, offset: int, high: int, end: int | None) -> int:
    """The first queue offset in [offset, high) whose record ends past `end`, else high. A
    queue's records lie in commit-log order, so a binary search finds it."""
    if end is None:
        return high

    def past_end(entry: tuple[int, int, int]) -> bool:
        return entry[0] + entry[1] > end

    if not past_end(queue.entry_at(high - 1)):
        return high
    return queue.first_offset_where(offset, high, past_end)


def _newest_first(queue: ConsumeQueue) -> Iterator[int]:
    """The commit-log offsets of a queue's entries, newest first, read a chunk at a time."""
    end = queue.max_offset
    while end > queue.min_offset:
        data = queue.read_before(end, min(_QUEUE_READ_ENTRIES, end - queue.min_offset))
        for index in range(len(data) // ENTRY_SIZE - 1, -1, -1):
            yield ENTRY.unpack_from(data, index * ENTRY_SIZE)[0]
        end -= len(data) // ENTRY_SIZE
