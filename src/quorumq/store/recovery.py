"""Opening a store: finding the end of the commit log after a restart, telling a torn tail from
corruption, and checking (and rebuilding) the consume queues against the log; closing it; and
truncating the log to a record boundary.

A kill -9 or a power loss can leave the last records torn; cutting them loses nothing that was
acknowledged, because an acknowledged record was flushed first. Damage anywhere else means data
that was once whole has gone bad: it is reported and the store stops serving past it instead of
dropping the records after it. `classify_damage` is the rule, kept pure for tests.
"""

import fcntl
import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from quorumq.core import codec
from quorumq.core.codec import BLANK_HEADER, HEADER, Frame, check_frame
from quorumq.errors import Error, QuorumqError
from quorumq.store.checkpoint import Checkpoint, load_checkpoint, save_checkpoint
from quorumq.store.commit_log import CommitLog, fsync_directory
from quorumq.store.consume_queue import ENTRY, ConsumeQueue
from quorumq.store.interface import RecoveryReport
from quorumq.store.state import FSYNC_LOG_NAME, FSYNC_LOG_VARIABLE, StoreState

log = logging.getLogger(__name__)

WINDOW_BYTES = 4 * 1024 * 1024
_REDISPATCH_WRITE_EVERY = 4096  # records staged before recovery writes the queues
_VERIFY_READ_ENTRIES = 4096  # consume-queue entries recovery reads at once to check them


class Damage(Enum):
    TAIL = "tail"  # cut it: nothing valid follows and nothing durable is lost
    MIDDLE = "middle"  # keep it, report it, refuse to serve past it


def classify_damage(frame: Frame, offset: int, durable_offset: int, later_segment_has_data: bool,
                    valid_record_follows: bool) -> Damage | None:
    """What a non-record at `offset` means; None when it is simply the end of the log.

    `durable_offset` is the flushed offset of the last checkpoint: everything before it was
    fsynced, so damage there is corruption, never a torn write.
    """
    if frame in (Frame.MESSAGE, Frame.BLANK):
        raise ValueError(f"{frame.name} is not damage")
    if offset < durable_offset or later_segment_has_data or valid_record_follows:
        return Damage.MIDDLE
    return None if frame is Frame.EMPTY else Damage.TAIL


@dataclass(frozen=True, slots=True)
class ScanResult:
    end_offset: int  # where the log ends, after any cut
    cut: bool  # bytes after end_offset in its segment must be zeroed
    truncated_bytes: int  # non-zero bytes found after the cut in its segment
    corrupt_offset: int | None  # the first damaged record kept in the middle of the log


class RecordReader:
    """Reads the commit log through windows of one segment, so a scan needs few preads."""

    def __init__(self, commit_log: CommitLog, window_bytes: int = WINDOW_BYTES) -> None:
        self._log = commit_log
        self._window_bytes = window_bytes
        self._window = memoryview(b"")
        self._window_start = 0

    def at(self, offset: int) -> tuple[Frame, int, memoryview, int]:
        """The finding and size at `offset`, plus the window and position that hold the record."""
        segment_remaining = self._log.segment_start(offset) + self._log.segment_bytes - offset
        position = offset - self._window_start
        if position < 0 or position + min(HEADER.size, segment_remaining) > len(self._window):
            position = self._load(offset, self._window_bytes)
        frame, size = check_frame(self._window, position, segment_remaining, offset)
        if frame is Frame.SHORT:  # the window, or the file, ends inside the record
            position = self._load(offset, max(self._window_bytes, size))
            frame, size = check_frame(self._window, position, segment_remaining, offset)
        return frame, size, self._window, position

    def _load(self, offset: int, size: int) -> int:
        self._window = memoryview(self._log.read(offset, size))
        self._window_start = offset
        return 0


def later_segment_has_data(commit_log: CommitLog, offset: int) -> bool:
    start = commit_log.segment_start(offset) + commit_log.segment_bytes
    while (segment := commit_log.segment_at(start)) is not None:
        if any(commit_log.read(segment.start, 8)):
            return True
        start += commit_log.segment_bytes
    return False


def nonzero_bytes_after(commit_log: CommitLog, offset: int) -> int:
    """How far past `offset`, within its segment, the last non-zero byte lies (0 if none)."""
    segment_end = commit_log.segment_start(offset) + commit_log.segment_bytes
    extent = 0
    position = offset
    while position < segment_end:
        chunk = commit_log.read(position, WINDOW_BYTES)
        if not chunk:
            break
        kept = len(chunk.rstrip(b"\x00"))
        if kept:
            extent = position + kept - offset
        position += len(chunk)
    return extent


RecordVisitor = Callable[[int, int, memoryview, int], None]


def scan_commit_log(commit_log: CommitLog, start: int, durable_offset: int, visit: RecordVisitor,
                    check_residue: bool) -> ScanResult:
    """Walk records from `start` (a record boundary) to the end, checking framing and CRC.

    `visit(offset, size, window, position)` sees every valid record before the first corruption.
    `check_residue` also looks for stray bytes after a clean end (after an unclean shutdown).
    """
    reader = RecordReader(commit_log)
    offset = start
    corrupt_offset = None
    while commit_log.segment_at(offset) is not None:
        frame, size, window, position = reader.at(offset)
        if frame is Frame.MESSAGE:
            if corrupt_offset is None:
                visit(offset, size, window, position)
            offset += size
            continue
        if frame is Frame.BLANK:
            offset += size
            continue
        segment_end = commit_log.segment_start(offset) + commit_log.segment_bytes
        follows = (frame is Frame.BAD_CRC and offset + size < segment_end
                   and reader.at(offset + size)[0] in (Frame.MESSAGE, Frame.BLANK))
        later_data = later_segment_has_data(commit_log, offset)
        damage = classify_damage(frame, offset, durable_offset, later_data, follows)
        if damage is not Damage.MIDDLE:
            residue = nonzero_bytes_after(commit_log, offset) if damage or check_residue else 0
            if residue:
                log.warning("commit log: cutting a torn tail at offset %d (%s, %d bytes after it)",
                            offset, frame.name, residue)
            return ScanResult(offset, residue > 0, residue, corrupt_offset)
        log.error("commit log: corrupt record at offset %d (%s) with data after it; it is kept and "
                  "the store refuses reads at or past it", offset, frame.name)
        if corrupt_offset is None:
            corrupt_offset = offset
        # A CRC failure keeps the framing, so the scan steps over the record; otherwise it resumes
        # at the next segment, which always starts with a record.
        offset = offset + size if frame is Frame.BAD_CRC else segment_end
    return ScanResult(offset, False, 0, corrupt_offset)


def points_at_its_record(commit_log: CommitLog, entry: tuple[int, int, int], topic: str, queue_id: int,
                         queue_offset: int | None = None) -> bool:
    """Whether a consume-queue entry points at a whole record of its queue (and offset)."""
    offset, size, _ = entry
    if size < HEADER.size or commit_log.segment_at(offset) is None:
        return False
    data = commit_log.read(offset, size)
    segment_end = commit_log.segment_start(offset) + commit_log.segment_bytes
    if check_frame(data, 0, segment_end - offset, offset) != (Frame.MESSAGE, size):
        return False
    fields = codec.dispatch_fields(data, 0)
    return (fields.topic, fields.queue_id) == (topic, queue_id) and queue_offset in (None, fields.queue_offset)


def cut_queue_tail(commit_log: CommitLog, queue: ConsumeQueue, topic: str, queue_id: int, end: int) -> None:
    """Cut a queue to the log cut at `end` (a slave's truncation): drop its entries past `end`,
    then while its last entry does not point at the record of its own queue and offset. A damaged
    entry that points low would otherwise keep itself and every entry before it, and the slave
    would refuse its master's records of that queue (reliability spec F10). Entries whose records
    retention took lie below the queue's min offset, which the walk never passes."""
    queue.truncate_beyond(end)
    kept = queue.max_offset
    while kept > queue.min_offset:
        entry = queue.entry_at(kept - 1)
        if entry[0] + entry[1] <= end and points_at_its_record(commit_log, entry, topic, queue_id, kept - 1):
            break
        kept -= 1
    if kept < queue.max_offset:
        log.error("consume queue %s/%d: entries %d to %d point at no record of theirs; dropped",
                  topic, queue_id, kept, queue.max_offset - 1)
        queue.truncate(kept)


class Recovery:
    """Open (recovering from an unclean exit), close and truncate a store."""

    def __init__(self, state: StoreState) -> None:
        self._state = state

    def open(self) -> RecoveryReport:
        """Open the store, recovering from an unclean exit when the abort marker says so."""
        assert not self._state.is_open, "store is already open"
        self._state.root.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        if os.environ.get(FSYNC_LOG_VARIABLE):
            self._state.fsync_log_fd = os.open(self._state.root / FSYNC_LOG_NAME, os.O_WRONLY | os.O_CREAT, 0o644)
        try:
            return self._recover()
        except BaseException:
            self._release_everything()
            raise

    def _take_lock(self) -> None:
        fd = os.open(self._state.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise QuorumqError(Error.INTERNAL_ERROR,
                               f"store {self._state.root} is open in another process") from None
        self._state.lock_fd = fd

    def _recover(self) -> RecoveryReport:
        state = self._state
        abort_marker = state.root / "abort"
        clean = not abort_marker.exists()
        checkpoint = load_checkpoint(state.root / "checkpoint")
        # The marker goes down before any repair, so a crash during recovery recovers again.
        abort_marker.touch()
        fsync_directory(state.root)
        state.commit_log.load()
        self._load_queues()
        start, durable, dispatch_from = self._scan_plan(checkpoint, clean)
        if not clean:
            # Entries written after the last checkpoint may sit only in the page cache.
            for queue in state.all_queues():
                queue.mark_written_since(dispatch_from)
        # Every record is checked, not only those since the checkpoint: bits that rot in a sealed
        # segment or a consume queue while the broker is down are found now, before it can serve
        # or be elected from a damaged log (reliability spec F10); bench_store measures the cost.
        redispatch = Redispatcher(self._state, dispatch_from)
        scan = scan_commit_log(state.commit_log, state.commit_log.min_offset, durable, redispatch.visit,
                               check_residue=not clean)
        redispatch.write()
        corrupt_offset = min((found for found in (scan.corrupt_offset, redispatch.corrupt_offset)
                              if found is not None), default=None)
        if scan.cut:
            state.commit_log.cut_after(scan.end_offset)
        else:
            state.commit_log.drop_segments_after(scan.end_offset)
        state.commit_log.extend_short_segments()
        state.write_offset = scan.end_offset
        state.dispatched_offset = scan.end_offset if corrupt_offset is None else corrupt_offset
        state.corrupt_offset = corrupt_offset
        for queue in state.all_queues():
            queue.truncate_beyond(scan.end_offset)
            queue.advance_min(state.commit_log.min_offset)
        # Recovered bytes may sit only in the page cache: sync them before anything relies on them.
        state.flushed_offset = min(start, scan.end_offset)
        state.checkpoint()
        return RecoveryReport(clean, start, scan.end_offset, scan.truncated_bytes, redispatch.count,
                              redispatch.repaired, corrupt_offset)

    def _scan_plan(self, checkpoint: Checkpoint | None, clean: bool) -> tuple[int, int, int]:
        """Where the scan starts, what is known durable, and where dispatch starts."""
        low = self._state.commit_log.min_offset
        segments = self._state.commit_log.segments
        high = segments[-1].start + self._state.segment_bytes if segments else 0
        if checkpoint is None or not low <= checkpoint.flushed_offset <= high:
            if checkpoint is not None:
                log.warning("checkpoint %s lies outside the commit log [%d, %d]; scanning it all",
                            checkpoint, low, high)
            return low, 0, low
        dispatch_from = max(low, min(checkpoint.dispatched_offset, checkpoint.flushed_offset))
        if clean and checkpoint.dispatched_offset == checkpoint.flushed_offset:
            return checkpoint.flushed_offset, checkpoint.flushed_offset, dispatch_from
        start = self._state.commit_log.segment_start(dispatch_from)
        return start, checkpoint.flushed_offset, dispatch_from

    def _load_queues(self) -> None:
        base = self._state.root / "consumequeue"
        if not base.is_dir():
            return
        for topic_directory in sorted(path for path in base.iterdir() if path.is_dir()):
            for queue_directory in sorted(topic_directory.iterdir()):
                if not (queue_directory.is_dir() and queue_directory.name.isdigit()):
                    log.warning("ignoring %s: not a consume-queue directory", queue_directory)
                    continue
                queue = self._state.new_queue(topic_directory.name, int(queue_directory.name))
                queue.load()

    def close(self) -> None:
        """Flush everything, write the checkpoint and, when the store is sound, drop the abort marker."""
        state = self._state
        if not state.is_open:
            return
        try:
            state.checkpoint()
            if state.corrupt_offset is None and state.write_failure is None:
                (state.root / "abort").unlink(missing_ok=True)
                fsync_directory(state.root)
        finally:
            self._release_everything()

    def _release_everything(self) -> None:
        state = self._state
        for queue in state.all_queues():
            queue.close()
        state.queues = {}
        state.commit_log.close()
        state.last_checkpoint = None
        state.write_offset = state.dispatched_offset = state.flushed_offset = 0
        state.corrupt_offset = state.write_failure = None
        if state.fsync_log_fd >= 0:
            os.close(state.fsync_log_fd)
            state.fsync_log_fd = -1
        if state.lock_fd >= 0:
            os.close(state.lock_fd)
            state.lock_fd = -1

    def truncate(self, offset: int) -> None:
        """Cut the log back to `offset`, a record boundary (a slave's consistent point with its
        new master), with the consume-queue entries past it; durable when it returns.

        The checkpoint is lowered first, then the log is cut: a crash in between leaves a tail
        that recovery keeps, and the epoch file (cut after this returns) still describes it, so
        the next handshake cuts it again. It never leaves a checkpoint above the log's end.
        """
        state = self._state
        state.check_open()
        if not state.min_offset <= offset <= state.write_offset:
            raise ValueError(f"cannot truncate to {offset}: the log holds "
                             f"[{state.min_offset}, {state.write_offset}]")
        self._check_record_start(offset)
        if offset == state.write_offset:
            return
        with state.checkpoint_lock, state.flush_lock:
            state.write_offset = offset
            state.dispatched_offset = min(state.dispatched_offset, offset)
            state.flushed_offset = min(state.flushed_offset, offset)
            if state.corrupt_offset is not None and state.corrupt_offset >= offset:
                state.corrupt_offset = None
            state.last_checkpoint = Checkpoint(state.flushed_offset, state.dispatched_offset)
            save_checkpoint(state.root / "checkpoint", state.last_checkpoint)
            deleted = self._deletions_past(offset)
            state.commit_log.cut_after(offset)
            fsync_directory(state.commit_log.directory)
            for (topic, queue_id), queue in state.keyed_queues():
                cut_queue_tail(state.commit_log, queue, topic, queue_id, offset)
            if deleted:
                self._rebuild(deleted)
        state.checkpoint()
        log.warning("commit log truncated to %d", offset)

    def _deletions_past(self, offset: int) -> set[str]:
        """The topics whose deletion records lie at or past `offset`."""
        deleted = set()

        def visit(record_offset: int, size: int, window: memoryview, position: int) -> None:
            fields = codec.dispatch_fields(window, position)
            if fields.deletes_topic:
                deleted.add(fields.topic)

        scan_commit_log(self._state.commit_log, offset, self._state.flushed_offset, visit, check_residue=False)
        return deleted

    def _rebuild(self, topics: set[str]) -> None:
        """The cut took deletions of `topics`: the lives they ended are theirs again. Their queues
        are built anew from the whole log, which truncation, rare, can afford."""
        state = self._state
        log.warning("the cut takes the deletion of %s: their queues are built again from the log",
                    ", ".join(sorted(topics)))
        for topic in topics:
            state.drop_topic_queues(topic)
        redispatch = Redispatcher(state, state.min_offset, topics)
        scan_commit_log(state.commit_log, state.min_offset, state.flushed_offset, redispatch.visit,
                        check_residue=False)
        redispatch.write()
        if redispatch.corrupt_offset is not None:
            state.mark_corrupt(redispatch.corrupt_offset, "queue offset out of sequence")

    def _check_record_start(self, offset: int) -> None:
        """`offset` is where a record starts (or the log ends): walk the record sizes from the
        start of its segment, where a record always starts."""
        segment_start = self._state.commit_log.segment_start(offset)
        position = segment_start
        while position < offset:
            size, _ = BLANK_HEADER.unpack(self._state.commit_log.read(position, BLANK_HEADER.size))
            if size <= 0:
                break
            position += size
        if position != offset:
            raise ValueError(f"commit-log offset {offset} is not where a record starts")


class Redispatcher:
    """Checks, during recovery, that each record's consume-queue entry points at it: entries that
    do not (a queue file damaged while the broker was down) are written again, and those the
    queues lack past `dispatch_from` are rebuilt.

    The queue offset lies outside the CRC; within one queue the scan must find them in steps of
    one, which catches a damaged one. Such a record is `corrupt_offset`, like one failing its CRC:
    nothing after it is indexed.

    A deletion record drops its topic's queues when it lies past `dispatch_from`; `topics`, when
    given, limits the dispatch to those topics, built from the log's first record on (a
    truncation's rebuild), each queue beginning where its first record is."""

    def __init__(self, state: StoreState, dispatch_from: int, topics: set[str] | None = None) -> None:
        self._state = state
        self._dispatch_from = dispatch_from
        self._topics = topics
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
        if self._topics is not None and fields.topic not in self._topics:
            return
        if fields.deletes_topic:
            self._delete(fields.topic, offset)
            return
        key = (fields.topic, fields.queue_id)
        queue = self._state.queue(fields.topic, fields.queue_id)
        if offset < self._dispatch_from:
            if queue is None or offset < self._first_record(key, queue):
                return  # a record of a deleted topic (or of its earlier life, before it was made again)
            if self._in_sequence(key, offset, fields.queue_offset):
                self._verify(queue, offset, size, fields)
        elif self._in_sequence(key, offset, fields.queue_offset):
            self._dispatch(queue, offset, size, fields)

    def _delete(self, topic: str, offset: int) -> None:
        """The topic's queue offsets start again after its deletion record. Below `dispatch_from`
        its queues were dropped before (those held now belong to a later life); past it they go
        now."""
        for known in (self._last_seen, self._first_records, self._windows):
            for key in [key for key in known if key[0] == topic]:
                del known[key]
        if offset >= self._dispatch_from:
            dropped = self._state.queues.get(topic, {}).values()
            self._staged = [queue for queue in self._staged if queue not in dropped]
            self._state.drop_topic_queues(topic)

    def _in_sequence(self, key: tuple[str, int], offset: int, queue_offset: int) -> bool:
        """Whether the record's queue offset follows the previous one of its queue; if not, the
        record is `corrupt_offset`."""
        previous = self._last_seen.get(key)
        if previous is not None and queue_offset != previous + 1:
            log.error("commit log: the record at %d has queue offset %d but the previous record of %s/%d has %d; "
                      "the store refuses reads at or past it", offset, queue_offset, *key, previous)
            self.corrupt_offset = offset
            return False
        self._last_seen[key] = queue_offset
        return True

    def _first_record(self, key: tuple[str, int], queue: ConsumeQueue) -> int:
        """Where the queue's first entry points: records before it belong to an earlier life of
        the topic. An entry that points at no whole record of its queue (damaged itself) cannot
        say: the queue's records before `dispatch_from` are then left unchecked rather than
        misjudged."""
        if key not in self._first_records:
            self._first_records[key] = self._dispatch_from
            if queue.min_offset < queue.max_offset:
                entry = queue.entry_at(queue.min_offset)
                if points_at_its_record(self._state.commit_log, entry, *key):
                    self._first_records[key] = entry[0]
        return self._first_records[key]

    def _verify(self, queue: ConsumeQueue, offset: int, size: int, fields: codec.RecordFields) -> None:
        if not queue.min_offset <= fields.queue_offset < queue.max_offset:
            return  # retention already dropped it from its queue
        entry = (offset, size, fields.tag_hash)
        found = self._entry(queue, (fields.topic, fields.queue_id), fields.queue_offset)
        if found == entry:
            return
        if found[0] != offset and points_at_its_record(self._state.commit_log, found, fields.topic,
                                                       fields.queue_id, fields.queue_offset):
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
        if queue is not None and fields.queue_offset < expected:
            self._verify(queue, offset, size, fields)
            return
        if fields.queue_offset > expected:
            if queue is None and self._topics is not None:  # a rebuild: retention took the queue's start
                queue = self._state.new_queue(fields.topic, fields.queue_id)
                queue.begin_at(fields.queue_offset)
            elif queue is None or not queue.files:
                return  # a record of a topic deleted before deletion records; its queue is not brought back
            else:
                raise QuorumqError(Error.STORE_CORRUPTED, f"consume queue {fields.topic}/{fields.queue_id} ends "
                                   f"at {expected} but the record at {offset} has queue offset "
                                   f"{fields.queue_offset}")
        queue = queue or self._state.new_queue(fields.topic, fields.queue_id)
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
