"""The message store: one commit log for all topics plus a consume queue per topic and queue id.

Layout under `root`:

    commitlog/<20-digit start offset>                      fixed-size segments of records
    consumequeue/<topic>/<queue id>/<20-digit start>       20-byte entries, built from the log
    checkpoint                                             flushed and dispatched offsets
    abort                                                  present while open: an unclean exit
    lock                                                   flock'ed by the process that has it open

Three ways in, one record format: `append` encodes MessageIn objects (the v5 path), `append_encoded`
takes records a producer encoded and patches the fields the store assigns (SendBatch), and
`append_raw` takes a master's log bytes as they are (replication). The first two write the same
bytes for the same message. Consume-queue entries are derived from the commit-log bytes alone (the
dispatcher), so a replica that appends the same bytes through `append_raw` builds the same queues.

Threads: every method runs on one thread (the event loop) except `flush` and `checkpoint`, which
may run in worker threads at the same time as appends. They only read offsets that the loop
publishes after the bytes below them are written, and hold locks while they sync descriptors.
"""

import fcntl
import logging
import os
import threading
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Callable, Iterator, Mapping, NoReturn, Sequence

from quorumq import limits
from quorumq.clock import Clock
from quorumq.core.message_rules import check_name
from quorumq.core.properties import MESSAGE_ID
from quorumq.core.recent_sends import window_start
from quorumq.errors import Error, QuorumqError, write_error
from quorumq.core import codec
from quorumq.store.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from quorumq.core.codec import (ASSIGNED_POSITION, BLANK_BYTES_MIN, BLANK_HEADER, HEADER, MESSAGE_MAGIC,
                                 TAGS_PROPERTY, Frame, StoredMessage, check_frame, whole_records_end)
from quorumq.store.commit_log import CommitLog, fsync_directory
from quorumq.store.consume_queue import ENTRY, ENTRY_SIZE, ConsumeQueue, DirtyFiles
from quorumq.store.recovery import scan_commit_log
from quorumq.store.retention import segments_to_delete

log = logging.getLogger(__name__)

_BUFFER_BYTES_INITIAL = 1024 * 1024
_READ_SPAN_BYTES = 1024 * 1024  # one pread may cover several records of a queue up to this span
_QUEUE_READ_ENTRIES = 1024
_REDISPATCH_WRITE_EVERY = 4096  # records staged before recovery writes the queues
_VERIFY_READ_ENTRIES = 4096  # consume-queue entries recovery reads at once to check them


@dataclass(slots=True, kw_only=True)
class MessageIn:
    topic: str
    queue_id: int
    body: bytes
    properties: Mapping[str, str]
    flag: int = 0
    sys_flag: int = 0
    born_timestamp_ms: int
    born_host: str
    reconsume_times: int = 0


@dataclass(slots=True)
class AppendResult:
    offsets: list[tuple[int, int]]  # (commit_log_offset, queue_offset) of each message, in order
    end_offset: int  # the commit-log write position after the batch


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


def _record_bytes(data: memoryview, position: int) -> bytes:
    """A checked record's bytes as they lie in the commit log (its size is its first field)."""
    size, _ = codec.BLANK_HEADER.unpack_from(data, position)
    return bytes(data[position:position + size])


# Fault tests model a power cut by cutting the commit log back to what was fsynced: with this set in
# the environment, the store keeps that offset in storeRoot/fsynced (20 digits), rewritten in place.
FSYNC_LOG_VARIABLE = "QUORUMQ_FSYNC_LOG"
FSYNC_LOG_NAME = "fsynced"


class MessageStore:
    def __init__(self, root: Path, *, segment_bytes: int, store_host: str, clock: Clock,
                 consume_queue_entries_per_file: int = limits.CONSUME_QUEUE_ENTRIES_PER_FILE) -> None:
        if segment_bytes < limits.COMMIT_LOG_SEGMENT_BYTES_MIN:
            raise QuorumqError(Error.CONFIG_INVALID, f"segment size {segment_bytes} is below "
                               f"{limits.COMMIT_LOG_SEGMENT_BYTES_MIN}")
        # Not written into records: reads fill StoredMessage.store_host with it.
        self.store_host = store_host
        self.root = Path(root)
        self._clock = clock
        self._segment_bytes = segment_bytes
        self._entries_per_file = consume_queue_entries_per_file
        self._commit_log = CommitLog(self.root / "commitlog", segment_bytes)
        self._queues: dict[str, dict[int, ConsumeQueue]] = {}
        self._queue_file_lock = threading.Lock()
        self._dirty = DirtyFiles()
        self._flush_lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._last_checkpoint: Checkpoint | None = None
        self._buffer = bytearray(_BUFFER_BYTES_INITIAL)
        self._view = memoryview(self._buffer)
        # Offsets the flush and checkpoint threads read: each is published after the work below it.
        self._write_offset = 0
        self._dispatched_offset = 0
        self._flushed_offset = 0
        self._corrupt_offset: int | None = None
        self._write_failure: str | None = None
        # Where reads of the queues end (a commit-log offset), or None for no bound: a controller-mode
        # broker bounds them by what every SyncStateSet member holds. Replication reads ignore it.
        self.readable_end: Callable[[], int | None] = lambda: None
        self._lock_fd = -1
        self._fsync_log_fd = -1
        self.sync_count = 0  # commit-log fdatasync calls, to observe group commit

    # Properties.

    @property
    def max_offset(self) -> int:
        return self._write_offset

    @property
    def min_offset(self) -> int:
        return self._commit_log.min_offset if self._commit_log.segments else self._write_offset

    @property
    def last_segment_start(self) -> int:
        """Where the segment the next append goes to begins (a record always starts there)."""
        return self._commit_log.segment_start(self._write_offset)

    @property
    def flushed_offset(self) -> int:
        return self._flushed_offset

    @property
    def corrupt_offset(self) -> int | None:
        return self._corrupt_offset

    @property
    def is_open(self) -> bool:
        return self._lock_fd >= 0

    # Open and close.

    def open(self) -> RecoveryReport:
        """Open the store, recovering from an unclean exit when the abort marker says so."""
        assert not self.is_open, "store is already open"
        self.root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        if os.environ.get(FSYNC_LOG_VARIABLE):
            self._fsync_log_fd = os.open(self.root / FSYNC_LOG_NAME, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            return self._recover()
        except BaseException:
            self._release_everything()
            raise

    def _take_lock(self) -> None:
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise QuorumqError(Error.INTERNAL_ERROR,
                               f"store {self.root} is open in another process") from None
        self._lock_fd = fd

    def _recover(self) -> RecoveryReport:
        abort_marker = self.root / "abort"
        clean = not abort_marker.exists()
        checkpoint = load_checkpoint(self.root / "checkpoint")
        # The marker goes down before any repair, so a crash during recovery recovers again.
        abort_marker.touch()
        fsync_directory(self.root)
        self._commit_log.load()
        self._load_queues()
        start, durable, dispatch_from = self._scan_plan(checkpoint, clean)
        if not clean:
            # Entries written after the last checkpoint may sit only in the page cache.
            for queue in self._all_queues():
                queue.mark_written_since(dispatch_from)
        # Every record is checked, not only those since the checkpoint: bits that rot in a sealed
        # segment or a consume queue while the broker is down are found now, before it can serve
        # or be elected from a damaged log (reliability spec F10); bench_store measures the cost.
        redispatch = _Redispatcher(self, dispatch_from)
        scan = scan_commit_log(self._commit_log, self._commit_log.min_offset, durable, redispatch.visit,
                               check_residue=not clean)
        redispatch.write()
        corrupt_offset = min((found for found in (scan.corrupt_offset, redispatch.corrupt_offset)
                              if found is not None), default=None)
        if scan.cut:
            self._commit_log.cut_after(scan.end_offset)
        else:
            self._commit_log.drop_segments_after(scan.end_offset)
        self._commit_log.extend_short_segments()
        self._write_offset = scan.end_offset
        self._dispatched_offset = scan.end_offset if corrupt_offset is None else corrupt_offset
        self._corrupt_offset = corrupt_offset
        for queue in self._all_queues():
            queue.truncate_beyond(scan.end_offset)
            queue.advance_min(self._commit_log.min_offset)
        # Recovered bytes may sit only in the page cache: sync them before anything relies on them.
        self._flushed_offset = min(start, scan.end_offset)
        self.checkpoint()
        return RecoveryReport(clean, start, scan.end_offset, scan.truncated_bytes, redispatch.count,
                              redispatch.repaired, corrupt_offset)

    def _scan_plan(self, checkpoint: Checkpoint | None, clean: bool) -> tuple[int, int, int]:
        """Where the scan starts, what is known durable, and where dispatch starts."""
        low = self._commit_log.min_offset
        high = self._commit_log.segments[-1].start + self._segment_bytes if self._commit_log.segments else 0
        if checkpoint is None or not low <= checkpoint.flushed_offset <= high:
            if checkpoint is not None:
                log.warning("checkpoint %s lies outside the commit log [%d, %d]; scanning it all",
                            checkpoint, low, high)
            return low, 0, low
        dispatch_from = max(low, min(checkpoint.dispatched_offset, checkpoint.flushed_offset))
        if clean and checkpoint.dispatched_offset == checkpoint.flushed_offset:
            return checkpoint.flushed_offset, checkpoint.flushed_offset, dispatch_from
        start = self._commit_log.segment_start(dispatch_from)
        return start, checkpoint.flushed_offset, dispatch_from

    def _load_queues(self) -> None:
        base = self.root / "consumequeue"
        if not base.is_dir():
            return
        for topic_directory in sorted(path for path in base.iterdir() if path.is_dir()):
            for queue_directory in sorted(topic_directory.iterdir()):
                if not (queue_directory.is_dir() and queue_directory.name.isdigit()):
                    log.warning("ignoring %s: not a consume-queue directory", queue_directory)
                    continue
                queue = self._new_queue(topic_directory.name, int(queue_directory.name))
                queue.load()

    def close(self) -> None:
        """Flush everything, write the checkpoint and, when the store is sound, drop the abort marker."""
        if not self.is_open:
            return
        try:
            self.checkpoint()
            if self._corrupt_offset is None and self._write_failure is None:
                (self.root / "abort").unlink(missing_ok=True)
                fsync_directory(self.root)
        finally:
            self._release_everything()

    def _release_everything(self) -> None:
        for queue in self._all_queues():
            queue.close()
        self._queues = {}
        self._commit_log.close()
        self._last_checkpoint = None
        self._write_offset = self._dispatched_offset = self._flushed_offset = 0
        self._corrupt_offset = self._write_failure = None
        if self._fsync_log_fd >= 0:
            os.close(self._fsync_log_fd)
            self._fsync_log_fd = -1
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1

    # Appending.

    def append(self, messages: Sequence[MessageIn]) -> AppendResult:
        """Append a batch with one pwrite per segment it touches; all or nothing on bad input."""
        self._check_writable()
        if not messages:
            return AppendResult([], self._write_offset)
        if len(messages) > limits.BATCH_MESSAGES_MAX:
            raise QuorumqError(Error.BATCH_TOO_LARGE, f"{len(messages)} messages in one append")
        store_timestamp_ms = self._clock.now_ms()
        record_bytes_max = self._segment_bytes - BLANK_BYTES_MIN
        batch = self._new_batch()
        try:
            for message in messages:
                topic = message.topic.encode()
                born_host = message.born_host.encode()
                properties = _encode_properties(message.properties)
                body = message.body
                size = codec.record_size(topic, born_host, properties, body)
                if (size > record_bytes_max or not 0 < len(topic) <= limits.NAME_LENGTH_MAX
                        or len(born_host) > limits.HOST_LENGTH_MAX
                        or len(properties) > limits.PROPERTIES_BYTES_MAX
                        or not 0 <= message.queue_id < limits.QUEUES_PER_TOPIC_MAX):
                    _reject(message, size, record_bytes_max)
                self._fit(batch, size)
                if batch.buffer_offset + size > len(self._buffer):
                    self._reserve(batch.buffer_offset + size)
                queue = self._staging(batch, self._queue_for_append(message.topic, message.queue_id))
                tag_hash = codec.tag_hash(message.properties.get(TAGS_PROPERTY))
                queue_offset = queue.stage(batch.log_offset, size, tag_hash)
                # The producer's encoder, with the assigned fields given: the bytes a producer's
                # record gets once append_encoded has patched them.
                codec.encode_record(self._view, batch.buffer_offset, size, topic, message.queue_id, message.flag,
                                    message.sys_flag, message.born_timestamp_ms, born_host,
                                    message.reconsume_times, properties, body, queue_offset, batch.log_offset,
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
                       max_body_bytes: int) -> AppendResult:
        """Append `count` records of one topic and queue that a producer encoded with
        `codec.encode_record` (assigned fields left at 0), back to back in `records`.

        The request is copied into the batch buffer once and each record is patched there (queue
        offset, commit-log offset, store timestamp: outside its CRC) and then checked as recovery
        checks it, so the producer's CRC is this append's check of the bytes. A record must also
        name `topic` and `queue_id` and keep the limits append() keeps. All or nothing: the first
        bad record rejects the batch with an error naming its index and the rule.
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
        store_timestamp_ms = self._clock.now_ms()
        record_bytes_max = self._segment_bytes - BLANK_BYTES_MIN
        patch, check_message, tags_of, tag_hash = codec.ASSIGNED.pack_into, codec.check_message, codec.tags_of, \
            codec.tag_hash  # looked up once: this loop runs for every message sent
        batch = self._new_batch()
        queue = self._staging(batch, self._queue_for_append(topic, queue_id))
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

    def _new_batch(self) -> _Batch:
        log_offset = self._write_offset
        segment_end = log_offset - log_offset % self._segment_bytes + self._segment_bytes
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
        batch.log_offset, batch.segment_end = segment_end, segment_end + self._segment_bytes
        batch.runs.append((batch.log_offset, batch.buffer_offset))
        return padded

    @staticmethod
    def _staging(batch: _Batch, queue: ConsumeQueue) -> ConsumeQueue:
        """The queue, listed in the batch before its first entry is staged (to write or discard)."""
        if queue.next_offset == queue.max_offset:
            batch.staged.append(queue)
        return queue

    def _publish(self, batch: _Batch) -> AppendResult:
        """After the batch's bytes are written: move the write offset, then write its entries."""
        self._write_offset = batch.log_offset
        self._write_staged(batch.staged)
        self._dispatched_offset = batch.log_offset
        return AppendResult(batch.offsets, batch.log_offset)

    def _check_writable(self) -> None:
        if not self.is_open:
            raise QuorumqError(Error.INTERNAL_ERROR, "the store is not open")
        if self._corrupt_offset is not None:
            raise QuorumqError(Error.STORE_CORRUPTED, f"commit log corrupt at offset {self._corrupt_offset}; "
                               "appends are refused until it is repaired")
        if self._write_failure is not None:
            raise QuorumqError(Error.INTERNAL_ERROR, f"an earlier write failed ({self._write_failure}); "
                               "appends are refused until the store is reopened")
        if self._dispatched_offset < self._write_offset:
            self._index_undispatched()

    def _queue_for_append(self, topic: str, queue_id: int) -> ConsumeQueue:
        queues = self._queues.get(topic)
        queue = queues.get(queue_id) if queues is not None else None
        return queue if queue is not None else self._new_queue(topic, queue_id)

    def _new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(self.root / "consumequeue" / topic / str(queue_id), self._entries_per_file,
                             self._queue_file_lock, self._dirty)
        self._queues.setdefault(topic, {})[queue_id] = queue
        return queue

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
                segment_end = log_offset - log_offset % self._segment_bytes + self._segment_bytes
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
        for log_offset, _ in runs:
            if self._commit_log.segment_at(log_offset) is None:
                self._commit_log.create_segment(self._commit_log.segment_start(log_offset))
        try:
            for index, (log_offset, start) in enumerate(runs):
                end = runs[index + 1][1] if index + 1 < len(runs) else buffer_end
                if end > start:
                    self._commit_log.write(log_offset, view[start:end])
        except OSError as exc:
            # Part of the batch may be on disk past the write offset; a later, shorter batch must
            # not leave it there, so appends stop until recovery decides what the log holds.
            self._write_failure = f"commit-log write: {exc}"
            raise QuorumqError(Error.INTERNAL_ERROR, self._write_failure) from exc

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
        redispatch = _Redispatcher(self, self._dispatched_offset)
        try:
            scan_commit_log(self._commit_log, self._dispatched_offset, self._flushed_offset, redispatch.visit,
                            check_residue=False)
            redispatch.write()
        except BaseException as exc:
            redispatch.discard()
            if isinstance(exc, OSError):
                self._queue_write_failed(exc)
            raise
        if redispatch.corrupt_offset is not None:
            self._mark_corrupt(redispatch.corrupt_offset, "queue offset out of sequence")
        self._dispatched_offset = self._write_offset if self._corrupt_offset is None else self._corrupt_offset
        log.info("consume queues indexed up to %d again", self._write_offset)

    def _queue_write_failed(self, exc: OSError) -> NoReturn:
        log.error("consume-queue write: %s; the records are in the commit log and are indexed before "
                  "the next append", exc)
        raise write_error(exc, "consume-queue write") from exc

    # Replication: raw commit-log bytes.

    def read_raw(self, offset: int, max_bytes: int) -> bytes:
        """Whole records from `offset`, within one segment, at most `max_bytes` unless the first
        record alone is larger. Empty at the end of the log."""
        self._check_open()
        if not self.min_offset <= offset <= self._write_offset:
            raise QuorumqError(Error.ILLEGAL_OFFSET, f"offset {offset} outside the commit log "
                               f"[{self.min_offset}, {self._write_offset}]")
        limit = self._write_offset if self._corrupt_offset is None else min(self._write_offset,
                                                                             self._corrupt_offset)
        if offset == self._write_offset:
            return b""
        if offset >= limit:
            raise self._corruption_error(offset)
        segment_end = self._commit_log.segment_start(offset) + self._segment_bytes
        data = memoryview(self._commit_log.read(offset, min(max(max_bytes, HEADER.size), limit - offset)))
        frame, size = check_frame(data, 0, segment_end - offset, offset)
        if frame in (Frame.SHORT, Frame.BLANK) and size > len(data):  # one record above max_bytes
            data = memoryview(self._commit_log.read(offset, size))
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
        self._check_open()
        start = window_start(map(_newest_first, self._all_queues()), count)
        offset = self.min_offset if start is None else max(start, self.min_offset)
        end = self._write_offset if self._corrupt_offset is None else min(self._write_offset, self._corrupt_offset)
        found = []
        while offset < end:
            data = self.read_raw(offset, _READ_SPAN_BYTES)
            position = 0
            while position < len(data):
                size, magic = BLANK_HEADER.unpack_from(data, position)
                if magic == MESSAGE_MAGIC:
                    header = HEADER.unpack_from(data, position)
                    found.append((codec.message_property(data, position, MESSAGE_ID), header[codec.QUEUE_ID_FIELD],
                                  codec.queue_offset_of(data, position), offset + position + size))
                position += size
            offset += len(data)
        return found

    def append_raw(self, offset: int, data: bytes) -> int:
        """Append whole records copied from a master's commit log; returns the new end offset.

        Every record is checked (framing, CRC, its own commit-log offset, the next queue offset of
        its queue) before anything is written, so the same bytes give the same consume queues.

        An empty log may begin at a segment start past 0: a slave that copies only the newer part
        of its master's log (HA spec scenarios 28 and 29); each queue then begins at the queue
        offset of its first record.
        """
        self._check_writable()
        begins = self._write_offset == 0 < offset and not self._commit_log.segments \
            and offset % self._segment_bytes == 0
        if offset != self._write_offset and not begins:
            raise QuorumqError(Error.ILLEGAL_OFFSET,
                               f"raw append at {offset}, but the log ends at {self._write_offset}")
        if begins:
            self._write_offset = self._dispatched_offset = self._flushed_offset = offset
        data = bytes(data)
        view = memoryview(data)
        batch = self._new_batch()
        try:
            position = 0
            while position < len(data):
                log_offset = offset + position
                segment_end = self._commit_log.segment_start(log_offset) + self._segment_bytes
                if position and log_offset == segment_end - self._segment_bytes:
                    batch.runs.append((log_offset, position))
                frame, size = check_frame(view, position, segment_end - log_offset, log_offset)
                if frame is Frame.MESSAGE:
                    self._stage_raw(view, position, log_offset, size, batch)
                elif not (frame is Frame.BLANK and _whole_blank(data, position, size)):
                    raise QuorumqError(Error.BAD_REQUEST, f"raw data at commit-log offset {log_offset} is "
                                       f"not a whole valid record ({frame.name})")
                position += size
            self._write_runs(view, batch.runs, len(data))
        except BaseException:
            batch.discard()
            if begins:
                self._write_offset = self._dispatched_offset = self._flushed_offset = 0
            raise
        if begins:
            log.warning("the commit log begins at %d: older records stay on the master only", offset)
        batch.log_offset = offset + len(data)
        return self._publish(batch).end_offset

    def _stage_raw(self, view: memoryview, position: int, log_offset: int, size: int, batch: _Batch) -> None:
        fields = codec.dispatch_fields(view, position)
        # A master's records are input like a client's: their topic and queue id name a directory,
        # so a name like `../..` must stop replication before any file is touched.
        _check_queue_name(fields.topic, fields.queue_id)
        queue = self._queue_for_append(fields.topic, fields.queue_id)
        if queue.next_offset == 0 and self.min_offset > 0:  # a log that began past its start
            queue.begin_at(fields.queue_offset)
        if fields.queue_offset != queue.next_offset:
            raise QuorumqError(Error.BAD_REQUEST, f"record at {log_offset} has queue offset "
                               f"{fields.queue_offset}, but {fields.topic}/{fields.queue_id} expects "
                               f"{queue.next_offset}")
        self._staging(batch, queue).stage(log_offset, size, fields.tag_hash)

    def truncate(self, offset: int) -> None:
        """Cut the log back to `offset`, a record boundary (a slave's consistent point with its
        new master), with the consume-queue entries past it; durable when it returns.

        The checkpoint is lowered first, then the log is cut: a crash in between leaves a tail
        that recovery keeps, and the epoch file (cut after this returns) still describes it, so
        the next handshake cuts it again. It never leaves a checkpoint above the log's end.
        """
        self._check_open()
        if not self.min_offset <= offset <= self._write_offset:
            raise ValueError(f"cannot truncate to {offset}: the log holds [{self.min_offset}, {self._write_offset}]")
        self._check_record_start(offset)
        if offset == self._write_offset:
            return
        with self._checkpoint_lock, self._flush_lock:
            self._write_offset = offset
            self._dispatched_offset = min(self._dispatched_offset, offset)
            self._flushed_offset = min(self._flushed_offset, offset)
            if self._corrupt_offset is not None and self._corrupt_offset >= offset:
                self._corrupt_offset = None
            self._last_checkpoint = Checkpoint(self._flushed_offset, self._dispatched_offset)
            save_checkpoint(self.root / "checkpoint", self._last_checkpoint)
            self._commit_log.cut_after(offset)
            fsync_directory(self._commit_log.directory)
            for queue in self._all_queues():
                queue.truncate_beyond(offset)
        self.checkpoint()
        log.warning("commit log truncated to %d", offset)

    def _check_record_start(self, offset: int) -> None:
        """`offset` is where a record starts (or the log ends): walk the record sizes from the
        start of its segment, where a record always starts."""
        segment_start = self._commit_log.segment_start(offset)
        position = segment_start
        while position < offset:
            size, _ = BLANK_HEADER.unpack(self._commit_log.read(position, BLANK_HEADER.size))
            if size <= 0:
                break
            position += size
        if position != offset:
            raise ValueError(f"commit-log offset {offset} is not where a record starts")

    # Flushing.

    def flush(self) -> int:
        """fdatasync the commit log up to the write offset seen on entry; returns the flushed offset.

        Safe in a worker thread while the loop appends: bytes below the write offset it reads were
        written before that offset was published.
        """
        with self._flush_lock:
            target = self._write_offset
            if target > self._flushed_offset:
                self.sync_count += self._commit_log.sync(self._flushed_offset, target)
                self._flushed_offset = target
                if self._fsync_log_fd >= 0:
                    os.pwrite(self._fsync_log_fd, b"%020d" % target, 0)
            return self._flushed_offset

    def checkpoint(self) -> None:
        """Make the consume queues durable, flush the commit log, then record both offsets."""
        with self._checkpoint_lock:
            dispatched = self._dispatched_offset
            self._sync_queue_files()
            flushed = self.flush()
            if self._corrupt_offset is not None:
                # The next open scans from the corrupt record again; as it lies below the flushed
                # offset, it is found to be corruption again, never mistaken for a torn tail.
                dispatched = min(dispatched, self._corrupt_offset)
            checkpoint = Checkpoint(flushed, dispatched)
            if checkpoint != self._last_checkpoint:
                save_checkpoint(self.root / "checkpoint", checkpoint)
                self._last_checkpoint = checkpoint

    def _sync_queue_files(self) -> None:
        files, directories = self._dirty.take()
        try:
            while files:
                with self._queue_file_lock:
                    if files[-1].fd >= 0:  # a closed file was deleted; nothing to sync
                        os.fdatasync(files[-1].fd)
                files.pop()
            while directories:
                if directories[-1].is_dir():
                    fsync_directory(directories[-1])
                directories.pop()
        except BaseException:
            for queue_file in files:
                self._dirty.mark_file(queue_file)
            for directory in directories:
                self._dirty.mark_directory(directory)
            raise

    # Reading.

    def _check_open(self) -> None:
        if not self.is_open:
            raise QuorumqError(Error.INTERNAL_ERROR, "the store is not open")

    def _queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self._queues.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def _all_queues(self) -> list[ConsumeQueue]:
        return [queue for queues in self._queues.values() for queue in queues.values()]

    def topics(self) -> list[str]:
        return sorted(topic for topic, queues in self._queues.items()
                      if any(queue.files for queue in queues.values()))

    def topic_queue_ids(self, topic: str) -> list[int]:
        return sorted(queue_id for queue_id, queue in self._queues.get(topic, {}).items() if queue.files)

    def queue_min_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queue(topic, queue_id)
        return queue.min_offset if queue is not None else 0

    def queue_max_offset(self, topic: str, queue_id: int) -> int:
        queue = self._queue(topic, queue_id)
        return queue.max_offset if queue is not None else 0

    def commit_log_offset_of(self, topic: str, queue_id: int, offset: int) -> int | None:
        """Where the queue's message at `offset` lies in the commit log; None if the queue lacks it."""
        queue = self._queue(topic, queue_id)
        if queue is None or not queue.min_offset <= offset < queue.max_offset:
            return None
        return queue.entry_at(offset)[0]

    def get_messages(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                     tag_hashes: frozenset[int] | None = None) -> GetResult:
        """Messages of one queue from `offset`; entries whose tag hash is not in `tag_hashes` are
        skipped without reading the commit log. At least one message unless none matched."""
        return self._get(topic, queue_id, offset, max_count, max_bytes, tag_hashes, self._decode)

    def _decode(self, data: memoryview, position: int) -> StoredMessage:
        return codec.decode_message(data, position, self.store_host)

    def get_records(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
                    tag_hashes: frozenset[int] | None = None) -> GetResult:
        """As get_messages, but each item is a whole record's bytes, checked and not decoded."""
        return self._get(topic, queue_id, offset, max_count, max_bytes, tag_hashes, _record_bytes)

    def _get(self, topic: str, queue_id: int, offset: int, max_count: int, max_bytes: int,
             tag_hashes: frozenset[int] | None, read) -> GetResult:
        self._check_open()
        queue = self._queue(topic, queue_id)
        if queue is None or queue.max_offset == 0:
            return GetResult(GetStatus.NO_MESSAGE_IN_QUEUE, [], 0, 0, 0)
        low, high = queue.min_offset, queue.max_offset
        if offset < low:
            return GetResult(GetStatus.OFFSET_TOO_SMALL, [], low, low, high)
        if offset >= high:
            status = GetStatus.OFFSET_OVERFLOW_ONE if offset == high else GetStatus.OFFSET_OVERFLOW_BADLY
            return GetResult(status, [], high if offset > high else offset, low, high)
        readable = self._readable_high(queue, offset, high)
        if offset == readable:  # stored, not yet readable: as at the end of the queue
            return GetResult(GetStatus.OFFSET_OVERFLOW_ONE, [], offset, low, high)
        matched, next_offset = self._match_entries(queue, offset, readable, max(1, max_count), max_bytes,
                                                   tag_hashes)
        messages = self._read_messages(matched, read)
        if len(messages) < len(matched):
            next_offset = matched[len(messages)][0]
        status = GetStatus.FOUND if messages else GetStatus.NO_MATCHED_MESSAGE
        return GetResult(status, messages, next_offset, low, high)

    def _readable_high(self, queue: ConsumeQueue, offset: int, high: int) -> int:
        """The first queue offset in [offset, high) whose record ends past `readable_end`, else
        high. A queue's records lie in commit-log order, so a binary search finds it."""
        end = self.readable_end()

        def past_end(entry: tuple[int, int, int]) -> bool:
            return entry[0] + entry[1] > end

        if end is None or not past_end(queue.entry_at(high - 1)):
            return high
        return queue.first_offset_where(offset, high, past_end)

    def _match_entries(self, queue: ConsumeQueue, offset: int, end: int, max_count: int, max_bytes: int,
                       tag_hashes: frozenset[int] | None) -> tuple[list[tuple[int, int, int]], int]:
        """(queue offset, commit-log offset, size) of the entries in [offset, end) to read, and the
        next offset."""
        matched: list[tuple[int, int, int]] = []
        matched_bytes = 0
        scan_end = min(end, offset + limits.CONSUME_QUEUE_SCAN_ENTRIES_MAX)
        while offset < scan_end:
            data = queue.read_entries(offset, min(_QUEUE_READ_ENTRIES, scan_end - offset))
            for commit_log_offset, size, tag in ENTRY.iter_unpack(data):
                if tag_hashes is None or tag in tag_hashes:
                    if matched and matched_bytes + size > max_bytes:
                        return matched, offset
                    matched.append((offset, commit_log_offset, size))
                    matched_bytes += size
                offset += 1
                if len(matched) == max_count:
                    return matched, offset
        return matched, offset

    def _read_messages(self, matched: list[tuple[int, int, int]], read) -> list:
        """Check and `read` the records, reading neighbours in one segment with a single pread."""
        messages: list[StoredMessage] = []
        index = 0
        while index < len(matched):
            first = matched[index][1]
            segment_end = self._commit_log.segment_start(first) + self._segment_bytes
            span_end = min(segment_end, first + max(_READ_SPAN_BYTES, matched[index][2]))
            group_end = index + 1
            while group_end < len(matched) and sum(matched[group_end][1:]) <= span_end:
                group_end += 1
            last = matched[group_end - 1]
            data = memoryview(self._commit_log.read(first, last[1] + last[2] - first))
            for queue_offset, commit_log_offset, size in matched[index:group_end]:
                if self._corrupt_offset is not None and commit_log_offset >= self._corrupt_offset:
                    return self._served_before(messages, commit_log_offset)
                position = commit_log_offset - first
                frame, found = check_frame(data, position, segment_end - commit_log_offset, commit_log_offset)
                if frame is not Frame.MESSAGE or found != size:
                    self._mark_corrupt(commit_log_offset, frame.name)
                    return self._served_before(messages, commit_log_offset)
                # The queue offset lies outside the CRC: the entry that led here vouches for it.
                if codec.queue_offset_of(data, position) != queue_offset:
                    self._mark_corrupt(commit_log_offset, f"queue offset is not {queue_offset}")
                    return self._served_before(messages, commit_log_offset)
                messages.append(read(data, position))
            index = group_end
        return messages

    def _served_before(self, messages: list, offset: int) -> list:
        """The messages read before a corrupt one; if there are none, the corruption error."""
        if not messages:
            raise self._corruption_error(offset)
        return messages

    def _mark_corrupt(self, offset: int, finding: str) -> None:
        log.error("commit log: record at offset %d fails its check (%s); the store refuses "
                  "reads at or past it and appends", offset, finding)
        if self._corrupt_offset is None or offset < self._corrupt_offset:
            self._corrupt_offset = offset

    def _corruption_error(self, offset: int) -> QuorumqError:
        return QuorumqError(Error.STORE_CORRUPTED, f"cannot serve offset {offset}: the commit log is corrupt "
                            f"at {self._corrupt_offset}")

    def offset_for_timestamp(self, topic: str, queue_id: int, timestamp_ms: int) -> int:
        """The first queue offset stored at or after `timestamp_ms`; the max offset if none."""
        self._check_open()
        queue = self._queue(topic, queue_id)
        if queue is None:
            return 0
        return queue.first_offset_where(queue.min_offset, queue.max_offset,
                                        lambda entry: self._store_timestamp(entry[0]) >= timestamp_ms)

    def store_timestamp_at(self, offset: int) -> int | None:
        """The store timestamp of the record at commit-log `offset` (at a BLANK: of the next
        segment's first record); None outside the log."""
        self._check_open()
        for _ in range(2):
            if not self.min_offset <= offset < self._write_offset:
                return None
            timestamp = codec.store_timestamp_of(self._commit_log.read(offset, HEADER.size))
            if timestamp is not None:
                return timestamp
            offset = self._commit_log.segment_start(offset) + self._segment_bytes
        return None

    def _store_timestamp(self, commit_log_offset: int) -> int:
        timestamp = codec.store_timestamp_of(self._commit_log.read(commit_log_offset, HEADER.size))
        if timestamp is None:
            raise QuorumqError(Error.STORE_CORRUPTED, f"no record at commit-log offset {commit_log_offset}")
        return timestamp

    # Topics and retention.

    def delete_topic(self, topic: str) -> bool:
        """Drop the topic's consume queues (its commit-log bytes stay until retention)."""
        self._check_open()
        queues = self._queues.pop(topic, None)
        if queues is None:
            return False
        for queue in queues.values():
            if queue.files:
                queue.delete()
        topic_directory = self.root / "consumequeue" / topic
        if topic_directory.is_dir():
            topic_directory.rmdir()
            self._dirty.mark_directory(topic_directory.parent)
        # Recovery dispatches records after the checkpoint; the topic's must all lie before it.
        self.checkpoint()
        return True

    def clean_expired(self, now_ms: int, reserved_hours: float, force: bool) -> int:
        """Delete the oldest expired commit-log segments (or the oldest one when `force`), then
        the consume-queue files that only point below the new minimum. Returns segments deleted."""
        self._check_open()
        segments = self._commit_log.segments
        candidates = min(len(segments) - 1, limits.RETENTION_SEGMENTS_PER_RUN_MAX)
        ends = [self._segment_end_timestamp(index) for index in range(max(candidates, 0))]
        count = segments_to_delete(ends, now_ms, reserved_hours, force)
        if count:
            log.info("retention: deleting %d commit-log segment(s) from offset %d", count, segments[0].start)
            self._commit_log.delete_oldest(count)
            for queue in self._all_queues():
                queue.advance_min(self._commit_log.min_offset)
        return count

    def _segment_end_timestamp(self, index: int) -> int:
        """The last store time of a sealed segment: that of the first record of the next one,
        or the file's modification time when that record cannot be read."""
        segment = self._commit_log.segments[index]
        if segment.end_timestamp_ms is None:
            following = self._commit_log.segments[index + 1]
            timestamp = codec.store_timestamp_of(self._commit_log.read(following.start, HEADER.size))
            if timestamp is None:
                timestamp = os.stat(segment.path).st_mtime_ns // 1_000_000
            segment.end_timestamp_ms = timestamp
        return segment.end_timestamp_ms

    def disk_usage_ratio(self) -> float:
        """The used fraction of the filesystem that holds the store, as an unprivileged user sees it."""
        stats = os.statvfs(self.root)
        return 1.0 - stats.f_bavail / stats.f_blocks if stats.f_blocks else 0.0


class _Redispatcher:
    """Checks, during recovery, that each record's consume-queue entry points at it: entries that
    do not (a queue file damaged while the broker was down) are written again, and those the
    queues lack past `dispatch_from` are rebuilt.

    The queue offset lies outside the CRC; within one queue the scan must find them in steps of
    one, which catches a damaged one. Such a record is `corrupt_offset`, like one failing its CRC:
    nothing after it is indexed."""

    def __init__(self, store: MessageStore, dispatch_from: int) -> None:
        self._store = store
        self._dispatch_from = dispatch_from
        self._staged: list[ConsumeQueue] = []
        self._last_seen: dict[tuple[str, int], int] = {}  # queue offset of each queue's last record
        self._first_records: dict[tuple[str, int], int] = {}  # where each queue's first entry points
        self._windows: dict[tuple[str, int], tuple[int, bytes]] = {}  # entries read ahead, per queue
        self.count = 0
        self.repaired = 0
        self.corrupt_offset: int | None = None

    def visit(self, offset: int, size: int, window: memoryview, position: int) -> None:
        if self.corrupt_offset is not None:
            return
        fields = codec.dispatch_fields(window, position)
        key = (fields.topic, fields.queue_id)
        queue = self._store._queue(fields.topic, fields.queue_id)
        if offset < self._dispatch_from and (queue is None or offset < self._first_record(key, queue)):
            return  # a record of a deleted topic (or of its earlier life, before it was made again)
        previous = self._last_seen.get(key)
        if previous is not None and fields.queue_offset != previous + 1:
            log.error("commit log: the record at %d has queue offset %d but the previous record of %s/%d has %d; "
                      "the store refuses reads at or past it", offset, fields.queue_offset, *key, previous)
            self.corrupt_offset = offset
            return
        self._last_seen[key] = fields.queue_offset
        if offset < self._dispatch_from:
            self._verify(queue, offset, size, fields)
        else:
            self._dispatch(queue, offset, size, fields)

    def _first_record(self, key: tuple[str, int], queue: ConsumeQueue) -> int:
        """Where the queue's first entry points: records before it belong to an earlier life of
        the topic. An entry that points at no whole record of its queue (damaged itself) cannot
        say: the queue's records before `dispatch_from` are then left unchecked rather than
        misjudged."""
        if key not in self._first_records:
            entry = queue.entry_at(queue.min_offset) if queue.min_offset < queue.max_offset else None
            sound = entry is not None and self._points_at_its_record(entry, *key)
            self._first_records[key] = entry[0] if sound else self._dispatch_from
        return self._first_records[key]

    def _points_at_its_record(self, entry: tuple[int, int, int], topic: str, queue_id: int,
                              queue_offset: int | None = None) -> bool:
        """Whether a consume-queue entry points at a whole record of its queue (and offset)."""
        commit_log = self._store._commit_log
        offset, size, _ = entry
        if size < HEADER.size or commit_log.segment_at(offset) is None:
            return False
        data = commit_log.read(offset, size)
        segment_end = commit_log.segment_start(offset) + commit_log.segment_bytes
        if check_frame(data, 0, segment_end - offset, offset) != (Frame.MESSAGE, size):
            return False
        fields = codec.dispatch_fields(data, 0)
        return (fields.topic, fields.queue_id) == (topic, queue_id) and queue_offset in (None, fields.queue_offset)

    def _verify(self, queue: ConsumeQueue, offset: int, size: int, fields: codec.RecordFields) -> None:
        if not queue.min_offset <= fields.queue_offset < queue.max_offset:
            return  # retention already dropped it from its queue
        entry = (offset, size, fields.tag_hash)
        found = self._entry(queue, (fields.topic, fields.queue_id), fields.queue_offset)
        if found == entry:
            return
        if found[0] != offset and self._points_at_its_record(found, fields.topic, fields.queue_id,
                                                             fields.queue_offset):
            # Another record of this life of the queue holds that offset: this one's is damaged.
            # (An entry that points at this record but differs is damaged itself: its tag hash.)
            log.error("commit log: the record at %d claims queue offset %d of %s/%d, which the record at %d "
                      "holds; the store refuses reads at or past it", offset, fields.queue_offset,
                      fields.topic, fields.queue_id, found[0])
            self.corrupt_offset = offset
        else:
            log.error("consume queue %s/%d: entry %d reads %s but the log holds %s; written again",
                      fields.topic, fields.queue_id, fields.queue_offset, found, entry)
            queue.repair(fields.queue_offset, entry)
            self._windows.pop((fields.topic, fields.queue_id), None)
            self.repaired += 1

    def _entry(self, queue: ConsumeQueue, key: tuple[str, int], queue_offset: int) -> tuple[int, int, int]:
        """One entry, from a window of them read ahead: a queue's records come in order."""
        start, window = self._windows.get(key, (0, b""))
        index = queue_offset - start
        if not 0 <= index < len(window) // ENTRY.size:
            start, window = queue_offset, queue.read_entries(queue_offset, _VERIFY_READ_ENTRIES)
            self._windows[key] = (start, window)
            index = 0
        return ENTRY.unpack_from(window, index * ENTRY.size)

    def _dispatch(self, queue: ConsumeQueue | None, offset: int, size: int, fields: codec.RecordFields) -> None:
        expected = queue.next_offset if queue is not None else 0
        if fields.queue_offset < expected:
            self._verify(queue, offset, size, fields)
            return
        if fields.queue_offset > expected:
            if queue is None or not queue.files:
                return  # a record of a deleted topic; its queue is not brought back
            raise QuorumqError(Error.STORE_CORRUPTED, f"consume queue {fields.topic}/{fields.queue_id} ends "
                               f"at {expected} but the record at {offset} has queue offset "
                               f"{fields.queue_offset}")
        queue = queue or self._store._new_queue(fields.topic, fields.queue_id)
        if queue.next_offset == queue.max_offset:
            self._staged.append(queue)
        queue.stage(offset, size, fields.tag_hash)
        self.count += 1
        if self.count % _REDISPATCH_WRITE_EVERY == 0:
            self.write()

    def write(self) -> None:
        for queue in self._staged:
            queue.write_staged()
        self._staged = []

    def discard(self) -> None:
        """After a failed attempt (a full disk): every queue drops what it staged, so the next
        attempt stages it again. A queue left holding staged entries would count them as indexed
        and never write them."""
        for queue in self._staged:
            queue.discard_staged(forget_start=False)
        self._staged = []


def _newest_first(queue: ConsumeQueue) -> Iterator[int]:
    """The commit-log offsets of a queue's entries, newest first, read a chunk at a time."""
    end = queue.max_offset
    while end > queue.min_offset:
        data = queue.read_before(end, min(_QUEUE_READ_ENTRIES, end - queue.min_offset))
        for index in range(len(data) // ENTRY_SIZE - 1, -1, -1):
            yield ENTRY.unpack_from(data, index * ENTRY_SIZE)[0]
        end -= len(data) // ENTRY_SIZE


def _whole_blank(data: bytes, position: int, size: int) -> bool:
    """A BLANK copied whole: its header, then zeros up to the end of its segment."""
    end = position + size
    return end <= len(data) and data.count(0, position + BLANK_BYTES_MIN, end) == size - BLANK_BYTES_MIN


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
