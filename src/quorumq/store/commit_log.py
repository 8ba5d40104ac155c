"""Commit-log segment files: fixed-size, preallocated, named by their 20-digit start offset.

Segments start at multiples of `segment_bytes`, so the segment of any offset is found by
arithmetic. They are preallocated with posix_fallocate, which turns a full disk into an error at
segment creation rather than a failed write later, and accessed with pwrite/pread only.

Threads: the event-loop thread creates, writes and deletes segments; `sync` runs in a flush
thread. `_lock` keeps a descriptor from being closed (and its number reused) during a sync.
"""

import errno
import logging
import os
import threading
from dataclasses import dataclass
from pathlib import Path

from quorumq.errors import Error, QuorumqError

log = logging.getLogger(__name__)

NAME_DIGITS = 20


def file_name(start_offset: int) -> str:
    return f"{start_offset:0{NAME_DIGITS}d}"


def parse_file_name(name: str) -> int | None:
    return int(name) if len(name) == NAME_DIGITS and name.isdigit() else None


def fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_fully(fd: int, data: memoryview | bytes, file_offset: int) -> None:
    view = memoryview(data)
    while view:
        written = os.pwrite(fd, view, file_offset)
        view = view[written:]
        file_offset += written


@dataclass(slots=True)
class Segment:
    start: int
    path: Path
    fd: int
    end_timestamp_ms: int | None = None  # cached once known, for retention


class CommitLog:
    def __init__(self, directory: Path, segment_bytes: int) -> None:
        self.directory = directory
        self.segment_bytes = segment_bytes
        self.segments: list[Segment] = []  # contiguous, oldest first
        self._lock = threading.Lock()

    def load(self) -> None:
        """Open the segment files on disk; they must be aligned and contiguous."""
        self.directory.mkdir(parents=True, exist_ok=True)
        starts = []
        for entry in self.directory.iterdir():
            start = parse_file_name(entry.name)
            if start is None:
                log.warning("ignoring %s: not a commit-log segment name", entry)
                continue
            starts.append(start)
        starts.sort()
        for index, start in enumerate(starts):
            if start % self.segment_bytes or (index and start != starts[index - 1] + self.segment_bytes):
                raise QuorumqError(Error.STORE_CORRUPTED, f"commit-log segments in {self.directory} are not "
                                   f"contiguous multiples of {self.segment_bytes} (at {file_name(start)}); "
                                   "was the segment size changed?")
            path = self.directory / file_name(start)
            if path.stat().st_size > self.segment_bytes:
                raise QuorumqError(Error.STORE_CORRUPTED, f"{path} is larger than the segment size "
                                   f"{self.segment_bytes}; was the segment size changed?")
            self.segments.append(Segment(start, path, os.open(path, os.O_RDWR)))

    @property
    def min_offset(self) -> int:
        return self.segments[0].start if self.segments else 0

    def segment_start(self, offset: int) -> int:
        return offset - offset % self.segment_bytes

    def segment_at(self, offset: int) -> Segment | None:
        if not self.segments or offset < self.segments[0].start:
            return None
        index = (offset - self.segments[0].start) // self.segment_bytes
        return self.segments[index] if index < len(self.segments) else None

    def create_segment(self, start: int) -> Segment:
        """Add the segment that follows the last one, its whole size allocated on disk."""
        expected = self.segments[-1].start + self.segment_bytes if self.segments else start
        assert start == expected and start % self.segment_bytes == 0, (start, expected)
        path = self.directory / file_name(start)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o644)
        try:
            os.posix_fallocate(fd, 0, self.segment_bytes)
            fsync_directory(self.directory)
        except OSError as exc:
            os.close(fd)
            path.unlink()
            if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
                raise QuorumqError(Error.DISK_FULL, f"cannot allocate commit-log segment {path}: "
                                   f"{exc.strerror}") from None
            raise
        segment = Segment(start, path, fd)
        self.segments.append(segment)
        return segment

    def write(self, offset: int, data: memoryview | bytes) -> None:
        segment = self.segment_at(offset)
        assert segment is not None and offset + len(data) <= segment.start + self.segment_bytes
        write_fully(segment.fd, data, offset - segment.start)

    def read(self, offset: int, size: int) -> bytes:
        """Bytes from one segment; fewer than asked at the segment's end or a short file."""
        segment = self.segment_at(offset)
        if segment is None:
            return b""
        size = min(size, segment.start + self.segment_bytes - offset)
        return os.pread(segment.fd, size, offset - segment.start)

    def sync(self, from_offset: int, to_offset: int) -> int:
        """fdatasync the segments holding [from_offset, to_offset); returns how many were synced."""
        synced = 0
        with self._lock:
            for segment in list(self.segments):
                overlaps = segment.start < to_offset and segment.start + self.segment_bytes > from_offset
                if overlaps and segment.fd >= 0:  # a closed segment was deleted by retention
                    os.fdatasync(segment.fd)
                    synced += 1
        return synced

    def drop_segments_after(self, offset: int) -> None:
        """Delete the segments that would hold nothing below `offset` (keeping at least one)."""
        while self.segments and (self.segments[-1].start > offset
                                 or self.segments[-1].start == offset and len(self.segments) > 1):
            self._delete(self.segments.pop())

    def cut_after(self, offset: int) -> None:
        """Make `offset` the end of the log: zero the rest of its segment, delete later ones."""
        self.drop_segments_after(offset)
        if not self.segments or offset >= self.segments[-1].start + self.segment_bytes:
            return
        last = self.segments[-1]
        # Truncating and allocating again gives zeros without writing a whole segment.
        os.ftruncate(last.fd, offset - last.start)
        os.posix_fallocate(last.fd, 0, self.segment_bytes)
        os.fsync(last.fd)

    def extend_short_segments(self) -> None:
        """Give every segment its full size again, e.g. after a file was cut short."""
        for segment in self.segments:
            if os.fstat(segment.fd).st_size < self.segment_bytes:
                os.posix_fallocate(segment.fd, 0, self.segment_bytes)

    def delete_oldest(self, count: int) -> None:
        assert 0 <= count < len(self.segments), "the active segment is never deleted"
        for _ in range(count):
            self._delete(self.segments.pop(0))

    def _delete(self, segment: Segment) -> None:
        with self._lock:
            os.close(segment.fd)
            segment.fd = -1
        segment.path.unlink()

    def close(self) -> None:
        with self._lock:
            for segment in self.segments:
                os.close(segment.fd)
                segment.fd = -1
        self.segments = []
