"""Finding the end of the commit log after a restart, and telling a torn tail from corruption.

A kill -9 or a power loss can leave the last records torn; cutting them loses nothing that was
acknowledged, because an acknowledged record was flushed first. Damage anywhere else means data
that was once whole has gone bad: it is reported and the store stops serving past it instead of
dropping the records after it. `classify_damage` is the rule, kept pure for tests.
"""

import logging
from dataclasses import dataclass
from enum import Enum
from typing import Callable

from quorumq.core.codec import HEADER, Frame, check_frame
from quorumq.store.commit_log import CommitLog

log = logging.getLogger(__name__)

WINDOW_BYTES = 4 * 1024 * 1024


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
