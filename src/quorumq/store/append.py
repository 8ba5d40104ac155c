"""The three ways records enter the store, with one record format.

`append` encodes MessageIn objects (the v5 path), `append_encoded` takes records a producer encoded
and patches the fields the store assigns (SendBatch), and `append_raw` takes a master's log bytes as
they are (replication). The first two write the same bytes for the same message. Each stages a
batch in one buffer, writes it with one pwrite per segment it touches, then writes the
consume-queue entries it staged; all or nothing on bad input.
"""

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

from quorumq import limits
from quorumq.core import codec
from quorumq.core.codec import (
    ASSIGNED_POSITION,
    BLANK_BYTES_MIN,
    BLANK_HEADER,
    HEADER,
    MESSAGE_MAGIC,
    TAGS_PROPERTY,
    Frame,
    check_frame,
)
from quorumq.core.message_rules import check_name
from quorumq.errors import Error, QuorumqError, write_error
from quorumq.store.consume_queue import ConsumeQueue
from quorumq.store.interface import AppendResult, MessageIn, UnindexedAppend
from quorumq.store.recovery import Redispatcher, scan_commit_log
from quorumq.store.state import StoreState

log = logging.getLogger(__name__)

_BUFFER_BYTES_INITIAL = 1024 * 1024


@dataclass(slots=True)
class _Batch:
    """One append on its way: where its next record goes and what it has staged."""

    log_offset: int  # where the next record goes in the commit log
    segment_end: int  # the end of the segment it goes in
    buffer_offset: int  # where it goes in the store's buffer
    runs: list[tuple[int, int]]  # (commit-log offset, buffer offset) where each segment's bytes start
    staged: list[ConsumeQueue]  # the queues with entries staged
    offsets: list[tuple[int, int]]  # (commit-log offset, queue offset) of each record

    def discard(self) -> None:
        """The batch's records were not written."""
        for queue in self.staged:
            queue.discard_staged(forget_start=True)


class Appender:
    def __init__(self, state: StoreState) -> None:
        self._state = state
        self._buffer = bytearray(_BUFFER_BYTES_INITIAL)
        self._view = memoryview(self._buffer)

    def append(self, messages: Sequence[MessageIn]) -> AppendResult:
        """Append a batch with one pwrite per segment it touches; all or nothing on bad input."""
        self._check_writable()
        if not messages:
            return AppendResult([], self._state.write_offset)
        check_batch_size(messages)
        store_timestamp_ms = self._state.clock.now_ms()
        record_bytes_max = self._state.segment_bytes - BLANK_BYTES_MIN
        batch = self._new_batch()
        try:
            for message in messages:
                topic, born_host, properties, size = encoded_fields(message, record_bytes_max)
                self._fit(batch, size)
                if batch.buffer_offset + size > len(self._buffer):
                    self._reserve(batch.buffer_offset + size)
                queue = self._staging(batch, self._state.queue_for_append(message.topic, message.queue_id))
                tag_hash = codec.tag_hash(message.properties.get(TAGS_PROPERTY))
                queue_offset = queue.stage(batch.log_offset, size, tag_hash)
                # The producer's encoder, with the assigned fields given: the bytes a producer's
                # record gets once append_encoded has patched them.
                codec.encode_record(self._view, batch.buffer_offset, size, topic, message.queue_id, message.flag,
                                    message.sys_flag, message.born_timestamp_ms, born_host,
                                    message.reconsume_times, properties, message.body, queue_offset, batch.log_offset,
                                    store_timestamp_ms)
                batch.offsets.append((batch.log_offset, queue_offset))
                batch.buffer_offset += size
                batch.log_offset += size
            self._verify_encoded(batch.runs, batch.buffer_offset)
            self._write_runs(self._view, batch.runs, batch.buffer_offset)
        except BaseException:
            batch.discard()
            raise
        return self._publish(batch)

    def append_encoded(self, topic: str, queue_id: int, records: bytes | memoryview, count: int,
                       max_body_bytes: int, check_properties: Callable[[bytearray, int, int], None]) -> AppendResult:
        """Append `count` records of one topic and queue that a producer encoded with
        `codec.encode_record` (assigned fields left at 0), back to back in `records`.

        The request is copied into the batch buffer once and each record is patched there (queue
        offset, commit-log offset, store timestamp: outside its CRC) and then checked as recovery
        checks it, so the producer's CRC is this append's check of the bytes. A record must also
        name `topic` and `queue_id`, keep the limits append() keeps and pass `check_properties`
        (the topic's message rules, core/message_types.py RecordRules.check), given the buffer and
        where the record's properties start and end, which raises QuorumqError. All or nothing:
        the first bad record rejects the batch with an error naming its index and the rule.
        """
        self._check_writable()
        if not 0 < count <= limits.BATCH_MESSAGES_MAX:
            raise QuorumqError(Error.BATCH_TOO_LARGE,
                               f"{count} records in one append; 1..{limits.BATCH_MESSAGES_MAX} are allowed")
        _check_queue_name(topic, queue_id)
        topic_bytes = topic.encode()
        source = memoryview(records).cast("B")
        length = len(source)
        self._reserve(length)
        self._view[:length] = source  # one copy of the whole request (memoryview to memoryview)
        view, buffer = self._view, self._buffer
        store_timestamp_ms = self._state.clock.now_ms()
        record_bytes_max = self._state.segment_bytes - BLANK_BYTES_MIN
        patch, check_message, tags_of, tag_hash = codec.ASSIGNED.pack_into, codec.check_message, codec.tags_of, \
            codec.tag_hash  # looked up once: this loop runs for every message sent
        batch = self._new_batch()
        queue = self._staging(batch, self._state.queue_for_append(topic, queue_id))
        offsets = batch.offsets
        body_bytes = 0
        position = 0  # of the record in `source`; it lies at batch.buffer_offset in the buffer
        try:
            for index in range(count):
                if length - position < HEADER.size:
                    _bad_record(index, Error.RECORD_CORRUPTED, f"the records end {length - position} bytes into it")
                size, magic = BLANK_HEADER.unpack_from(source, position)
                if magic != MESSAGE_MAGIC or not HEADER.size <= size <= record_bytes_max or size > length - position:
                    _bad_frame(index, magic, size, length - position, record_bytes_max)
                if self._fit(batch, size):  # a BLANK went in before it: the rest moves up behind it
                    rest = length - position
                    self._reserve(batch.buffer_offset + rest)
                    view, buffer = self._view, self._buffer
                    view[batch.buffer_offset:batch.buffer_offset + rest] = source[position:]
                at, log_offset, queue_offset = batch.buffer_offset, batch.log_offset, queue.next_offset
                patch(view, at + ASSIGNED_POSITION, queue_offset, log_offset, store_timestamp_ms)
                frame, header = check_message(view, at, size, log_offset)
                if frame is not Frame.MESSAGE:
                    _bad_record(index, Error.RECORD_CORRUPTED, f"it fails its check ({frame.name})")
                (_, _, _, _, _, _, record_queue_id, _, sys_flag, _, reconsume_times, topic_length, born_host_length,
                 properties_length, body_length) = header
                topic_start = at + HEADER.size
                born_host_start = topic_start + topic_length
                properties_start = born_host_start + born_host_length
                properties_end = properties_start + properties_length
                if (record_queue_id != queue_id or topic_length != len(topic_bytes)
                        or not buffer.startswith(topic_bytes, topic_start) or sys_flag or reconsume_times
                        or not 0 < body_length <= max_body_bytes or properties_length > limits.PROPERTIES_BYTES_MAX
                        or properties_length and buffer[properties_end - 1] != 2):
                    _bad_fields(index, view, at, header, topic, queue_id, max_body_bytes)
                _check_text(index, view, born_host_start, properties_start, properties_end)
                try:
                    check_properties(buffer, properties_start, properties_end)
                except QuorumqError as error:
                    _bad_record(index, error.error, error.detail)
                body_bytes += body_length
                queue.stage(log_offset, size, tag_hash(tags_of(buffer, properties_start, properties_end)))
                offsets.append((log_offset, queue_offset))
                batch.buffer_offset, batch.log_offset = at + size, log_offset + size
                position += size
            if position != length:
                raise QuorumqError(Error.RECORD_CORRUPTED, f"{length - position} bytes follow the {count} records; "
                                                           "nothing was stored")
            if body_bytes > limits.BATCH_BYTES_MAX:
                raise QuorumqError(Error.BATCH_TOO_LARGE, f"{body_bytes} bytes of bodies in one append; at most "
                                                          f"{limits.BATCH_BYTES_MAX}")
            self._write_runs(view, batch.runs, batch.buffer_offset)
        except BaseException:
            batch.discard()
            raise
        return self._publish(batch)

    def append_topic_deletion(self, topic: str) -> bool:
        """Delete a topic's queues with a deletion record (core/codec.py) that replicas copy and
        dispatch alike; False, and nothing written, when the topic has no queues."""
        self._check_writable()
        if topic not in self._state.queues:
            return False
        topic_bytes = topic.encode()
        size = codec.record_size(topic_bytes, b"", b"", b"")
        batch = self._new_batch()
        self._fit(batch, size)
        self._reserve(batch.buffer_offset + size)
        now_ms = self._state.clock.now_ms()
        codec.encode_record(self._view, batch.buffer_offset, size, topic_bytes, 0, 0, codec.TOPIC_DELETION, now_ms,
                            b"", 0, b"", b"", 0, batch.log_offset, now_ms)
        self._write_runs(self._view, batch.runs, batch.buffer_offset + size)
        batch.log_offset += size
        self._drop_topic(topic, batch)
        self._publish(batch)
        return True

    def _drop_topic(self, topic: str, batch: _Batch) -> None:
        """Drop the topic's queues, with what `batch` staged in them, before the batch that ends
        with its deletion record is published: a checkpoint must never count the record dispatched
        while its queues stand. The removal is made durable at once."""
        dropped = self._state.queues.get(topic, {}).values()
        batch.staged = [queue for queue in batch.staged if queue not in dropped]
        self._state.drop_topic_queues(topic)
        self._state.checkpoint()

    def append_raw(self, offset: int, data: bytes) -> int:
        """Append whole records copied from a master's commit log; returns the new end offset.

        Every record is checked (framing, CRC, its own commit-log offset, the next queue offset of
        its queue) before anything is written, so the same bytes give the same consume queues.

        An empty log may begin at a segment start past 0: a slave that copies only the newer part
        of its master's log (HA spec scenarios 28 and 29); each queue then begins at the queue
        offset of its first record.
        """
        state = self._state
        self._check_writable()
        begins = state.write_offset == 0 < offset and not state.commit_log.segments \
            and offset % state.segment_bytes == 0
        if offset != state.write_offset and not begins:
            raise QuorumqError(Error.ILLEGAL_OFFSET,
                               f"raw append at {offset}, but the log ends at {state.write_offset}")
        if begins:
            state.write_offset = state.dispatched_offset = state.flushed_offset = offset
        data = bytes(data)
        view = memoryview(data)
        batch = self._new_batch()
        deleted = None  # the topic of a deletion record, which ends this batch
        try:
            position = 0
            while position < len(data) and deleted is None:
                log_offset = offset + position
                segment_end = state.commit_log.segment_start(log_offset) + state.segment_bytes
                if position and log_offset == segment_end - state.segment_bytes:
                    batch.runs.append((log_offset, position))
                frame, size = check_frame(view, position, segment_end - log_offset, log_offset)
                if frame is Frame.MESSAGE:
                    deleted = self._stage_raw(data, position, log_offset, size, batch)
                elif not (frame is Frame.BLANK and _whole_blank(data, position, size)):
                    raise QuorumqError(Error.BAD_REQUEST, f"raw data at commit-log offset {log_offset} is "
                                       f"not a whole valid record ({frame.name})")
                position += size
            self._write_runs(view, batch.runs, position)
        except BaseException:
            batch.discard()
            if begins:
                state.write_offset = state.dispatched_offset = state.flushed_offset = 0
            raise
        if begins:
            log.warning("the commit log begins at %d: older records stay on the master only", offset)
        batch.log_offset = offset + position
        if deleted is None:
            return self._publish(batch).end_offset
        # The records after a deletion belong to the topic's next life: its queues go first.
        self._drop_topic(deleted, batch)
        end = self._publish(batch).end_offset
        return self.append_raw(end, data[position:]) if position < len(data) else end

    def _stage_raw(self, data: bytes, position: int, log_offset: int, size: int, batch: _Batch) -> str | None:
        """Stage a master's record; returns the topic a deletion record deletes."""
        # A master's records are input like a client's: their topic and queue id name a directory,
        # so a name like `../..` must stop replication before any file is touched.
        try:
            fields = codec.dispatch_fields(data, position)
        except UnicodeDecodeError:
            raise QuorumqError(Error.ILLEGAL_TOPIC, f"record at {log_offset}: its topic is not UTF-8") from None
        queue = self._state.queue(fields.topic, fields.queue_id)
        if queue is None:  # a queue that exists had its name checked when it was made
            _check_queue_name(fields.topic, fields.queue_id)
        if fields.deletes_topic:
            return fields.topic
        if queue is None:
            queue = self._state.new_queue(fields.topic, fields.queue_id)
        if queue.next_offset == 0 and self._state.min_offset > 0:  # a log that began past its start
            # The queue offset names the queue's first file. Every earlier record of the queue
            # lies below this one in the log, each at least a header long.
            if not 0 <= fields.queue_offset <= log_offset // HEADER.size:
                raise QuorumqError(Error.BAD_REQUEST, f"record at {log_offset} has queue offset "
                                   f"{fields.queue_offset}, outside 0..{log_offset // HEADER.size}")
            queue.begin_at(fields.queue_offset)
        if fields.queue_offset != queue.next_offset:
            raise QuorumqError(Error.BAD_REQUEST, f"record at {log_offset} has queue offset "
                               f"{fields.queue_offset}, but {fields.topic}/{fields.queue_id} expects "
                               f"{queue.next_offset}")
        self._staging(batch, queue).stage(log_offset, size, fields.tag_hash)
        return None

    def _new_batch(self) -> _Batch:
        log_offset = self._state.write_offset
        segment_end = log_offset - log_offset % self._state.segment_bytes + self._state.segment_bytes
        return _Batch(log_offset, segment_end, 0, [(log_offset, 0)], [], [])

    def _fit(self, batch: _Batch, size: int) -> bool:
        """Make room for a record of `size` bytes at the batch's next offset. A record never spans
        segments: when it does not fit, a BLANK pads the segment (unless the last record filled it
        exactly) and the next segment begins. Returns whether a BLANK went into the buffer."""
        end = batch.log_offset + size
        segment_end = batch.segment_end
        if end == segment_end or end <= segment_end - BLANK_BYTES_MIN:
            return False
        padded = batch.log_offset < segment_end
        if padded:
            self._reserve(batch.buffer_offset + BLANK_BYTES_MIN)
            codec.encode_blank(self._view, batch.buffer_offset, segment_end - batch.log_offset)
            batch.buffer_offset += BLANK_BYTES_MIN
        batch.log_offset, batch.segment_end = segment_end, segment_end + self._state.segment_bytes
        batch.runs.append((batch.log_offset, batch.buffer_offset))
        return padded

    @staticmethod
    def _staging(batch: _Batch, queue: ConsumeQueue) -> ConsumeQueue:
        """The queue, listed in the batch before its first entry is staged (to write or discard)."""
        if queue.next_offset == queue.max_offset:
            batch.staged.append(queue)
        return queue

    def _publish(self, batch: _Batch) -> AppendResult:
        """After the batch's bytes are written: move the write offset, then write its entries. A
        failed entry write raises UnindexedAppend: the records are in the log all the same."""
        self._state.write_offset = batch.log_offset
        appended = AppendResult(batch.offsets, batch.log_offset)
        try:
            self._write_staged(batch.staged)
        except QuorumqError as error:
            raise UnindexedAppend(error, appended) from error
        self._state.dispatched_offset = batch.log_offset
        return appended

    def _check_writable(self) -> None:
        state = self._state
        state.check_open()
        if state.corrupt_offset is not None:
            raise QuorumqError(Error.STORE_CORRUPTED, f"commit log corrupt at offset {state.corrupt_offset}; "
                               "appends are refused until it is repaired")
        if state.write_failure is not None:
            raise QuorumqError(Error.INTERNAL_ERROR, f"an earlier write failed ({state.write_failure}); "
                               "appends are refused until the store is reopened")
        self.index_pending()

    def index_pending(self) -> None:
        """Index the records a failed consume-queue write left in the log only (a full disk);
        raises as that write does while the disk is still full."""
        if self._state.dispatched_offset < self._state.write_offset:
            self._index_undispatched()

    def _reserve(self, size: int) -> None:
        """Grow the batch buffer to hold `size` bytes, keeping what it holds."""
        if size <= len(self._buffer):
            return
        grown = bytearray(max(size, 2 * len(self._buffer)))
        grown[:len(self._buffer)] = self._view
        self._view.release()
        self._buffer, self._view = grown, memoryview(grown)

    def _verify_encoded(self, runs: list[tuple[int, int]], buffer_end: int) -> None:
        """Pair assertion: the batch passes the same framing and CRC check as recovery."""
        with self._view[:buffer_end] as view:
            for index, (log_offset, position) in enumerate(runs):
                run_end = runs[index + 1][1] if index + 1 < len(runs) else buffer_end
                segment_end = log_offset - log_offset % self._state.segment_bytes + self._state.segment_bytes
                while position < run_end:
                    frame, size = check_frame(view, position, segment_end - log_offset, log_offset)
                    if frame is Frame.BLANK:  # only its header is in the buffer; it ends the run
                        position += BLANK_BYTES_MIN
                        break
                    if frame is not Frame.MESSAGE:
                        raise AssertionError(f"encoded record at {log_offset} fails its check: {frame.name}")
                    position += size
                    log_offset += size
                assert position == run_end, (position, run_end)

    def _write_runs(self, view: memoryview, runs: list[tuple[int, int]], buffer_end: int) -> None:
        # Segments are allocated before any byte is written, so a full disk fails the whole batch.
        state = self._state
        for log_offset, _ in runs:
            if state.commit_log.segment_at(log_offset) is None:
                state.commit_log.create_segment(state.commit_log.segment_start(log_offset))
        try:
            for index, (log_offset, start) in enumerate(runs):
                end = runs[index + 1][1] if index + 1 < len(runs) else buffer_end
                if end > start:
                    state.commit_log.write(log_offset, view[start:end])
        except OSError as exc:
            # Part of the batch may be on disk past the write offset; a later, shorter batch must
            # not leave it there, so appends stop until recovery decides what the log holds.
            state.write_failure = f"commit-log write: {exc}"
            raise QuorumqError(Error.INTERNAL_ERROR, state.write_failure) from exc

    def _write_staged(self, queues: list[ConsumeQueue]) -> None:
        try:
            for queue in queues:
                queue.write_staged()
        except OSError as exc:
            for queue in queues:
                queue.discard_staged(forget_start=False)
            self._queue_write_failed(exc)

    def _index_undispatched(self) -> None:
        """After a consume-queue write failed (a full disk), index the records the commit log holds
        past the dispatched offset before anything else is appended; entries a queue already has
        are skipped. Until this succeeds appends are refused and those records cannot be read."""
        redispatch = Redispatcher(self._state, self._state.dispatched_offset)
        try:
            scan_commit_log(self._state.commit_log, self._state.dispatched_offset, self._state.flushed_offset,
                            redispatch.visit, check_residue=False)
            redispatch.write()
        except BaseException as exc:
            redispatch.discard()
            if isinstance(exc, OSError):
                self._queue_write_failed(exc)
            raise
        if redispatch.corrupt_offset is not None:
            self._state.mark_corrupt(redispatch.corrupt_offset, "queue offset out of sequence")
        state = self._state
        state.dispatched_offset = state.write_offset if state.corrupt_offset is None else state.corrupt_offset
        log.info("consume queues indexed up to %d again", self._state.write_offset)

    def _queue_write_failed(self, exc: OSError) -> NoReturn:
        log.error("consume-queue write: %s; the records are in the commit log and are indexed before "
                  "the next append", exc)
        raise write_error(exc, "consume-queue write") from exc


def _whole_blank(data: bytes, position: int, size: int) -> bool:
    """A BLANK copied whole: its header, then zeros up to the end of its segment."""
    end = position + size
    return end <= len(data) and data.count(0, position + BLANK_BYTES_MIN, end) == size - BLANK_BYTES_MIN


def check_batch_size(messages: Sequence[MessageIn]) -> None:
    if len(messages) > limits.BATCH_MESSAGES_MAX:
        raise QuorumqError(Error.BATCH_TOO_LARGE, f"{len(messages)} messages in one append")


def encoded_fields(message: MessageIn, record_bytes_max: int) -> tuple[bytes, bytes, bytes, int]:
    """A message's topic, born host and properties as its record holds them, and the record's
    size; a message that breaks a limit is refused with that limit's error."""
    topic = message.topic.encode()
    born_host = message.born_host.encode()
    properties = _encode_properties(message.properties)
    size = codec.record_size(topic, born_host, properties, message.body)
    if (size > record_bytes_max or not 0 < len(topic) <= limits.NAME_LENGTH_MAX
            or len(born_host) > limits.HOST_LENGTH_MAX
            or len(properties) > limits.PROPERTIES_BYTES_MAX
            or not 0 <= message.queue_id < limits.QUEUES_PER_TOPIC_MAX):
        _reject(message, size, record_bytes_max)
    return topic, born_host, properties, size


def _encode_properties(properties: Mapping[str, str]) -> bytes:
    try:
        return codec.encode_properties(properties)
    except ValueError as exc:
        raise QuorumqError(Error.ILLEGAL_MESSAGE_PROPERTY_KEY, str(exc)) from None


def _reject(message: MessageIn, size: int, record_bytes_max: int) -> None:
    if size > record_bytes_max:
        raise QuorumqError(Error.MESSAGE_BODY_TOO_LARGE, f"a record of {size} bytes does not fit a segment "
                           f"(at most {record_bytes_max})")
    _check_queue_name(message.topic, message.queue_id)
    if len(message.born_host.encode()) > limits.HOST_LENGTH_MAX:
        raise QuorumqError(Error.BAD_REQUEST, f"born host longer than {limits.HOST_LENGTH_MAX} bytes")
    raise QuorumqError(Error.MESSAGE_PROPERTIES_TOO_LARGE,
                       f"properties longer than {limits.PROPERTIES_BYTES_MAX} bytes")


def _check_queue_name(topic: str, queue_id: int) -> None:
    """A queue's topic and id name its directory: RocketMQ's name rule keeps it inside the store."""
    check_name(topic, Error.ILLEGAL_TOPIC, "topic")
    if not 0 <= queue_id < limits.QUEUES_PER_TOPIC_MAX:
        raise QuorumqError(Error.BAD_REQUEST, f"queue id {queue_id} outside 0..{limits.QUEUES_PER_TOPIC_MAX - 1}")


# A producer's record breaking a rule (append_encoded).

def _bad_record(index: int, error: Error, rule: str) -> NoReturn:
    raise QuorumqError(error, f"record {index} of the batch: {rule}; nothing was stored")


def _bad_frame(index: int, magic: int, size: int, available: int, record_bytes_max: int) -> NoReturn:
    if magic != codec.MESSAGE_MAGIC:
        _bad_record(index, Error.RECORD_CORRUPTED, f"it starts with magic {magic:#x}, not a message record's")
    if size < HEADER.size or size > available:
        _bad_record(index, Error.RECORD_CORRUPTED, f"its size {size} does not fit the {available} bytes left")
    _bad_record(index, Error.MESSAGE_BODY_TOO_LARGE,
                f"a record of {size} bytes does not fit a segment (at most {record_bytes_max})")


def _bad_fields(index: int, view: memoryview, at: int, header: tuple, topic: str, queue_id: int,
                max_body_bytes: int) -> NoReturn:
    topic_start = at + HEADER.size
    named = bytes(view[topic_start:topic_start + header[codec.TOPIC_LENGTH_FIELD]])
    if named != topic.encode() or header[codec.QUEUE_ID_FIELD] != queue_id:
        _bad_record(index, Error.BAD_REQUEST, f"it names topic {named!r} queue {header[codec.QUEUE_ID_FIELD]}, "
                                              f"the request topic {topic} queue {queue_id}")
    # The system flag marks transactional and other kinds of message, which the v5 path refuses too;
    # a producer's message is on its first delivery.
    if header[codec.SYS_FLAG_FIELD]:
        _bad_record(index, Error.MESSAGE_TYPE_UNSUPPORTED, f"sys_flag {header[codec.SYS_FLAG_FIELD]:#x}: only "
                                                          "NORMAL messages (sys_flag 0) are supported")
    if header[codec.RECONSUME_TIMES_FIELD]:
        _bad_record(index, Error.BAD_REQUEST, "reconsume_times must be 0 on a new message")
    body_length = header[codec.BODY_LENGTH_FIELD]
    if not body_length:
        _bad_record(index, Error.MESSAGE_BODY_EMPTY, "message body is empty")
    if body_length > max_body_bytes:
        _bad_record(index, Error.MESSAGE_BODY_TOO_LARGE,
                    f"body of {body_length} bytes exceeds maxMessageSize={max_body_bytes}")
    if header[codec.PROPERTIES_LENGTH_FIELD] > limits.PROPERTIES_BYTES_MAX:
        _bad_record(index, Error.MESSAGE_PROPERTIES_TOO_LARGE,
                    f"properties longer than {limits.PROPERTIES_BYTES_MAX} bytes")
    _bad_record(index, Error.RECORD_CORRUPTED, "its properties do not end with \\x02")


def _check_text(index: int, view: memoryview, start: int, split: int, end: int) -> None:
    """The born host (`view[start:split]`) and properties (`view[split:end]`) must be UTF-8, or
    every read of the record would fail. One decode covers both; the one thing it misses, a
    character cut in two where they meet, shows as a continuation byte starting the properties."""
    try:
        str(view[start:end], "utf-8")
    except UnicodeDecodeError:
        _bad_record(index, Error.RECORD_CORRUPTED, "its born host or properties are not UTF-8")
    if split < end and 0x80 <= view[split] < 0xC0:
        _bad_record(index, Error.RECORD_CORRUPTED, "its born host ends inside a UTF-8 character")
