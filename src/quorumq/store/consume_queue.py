"""Consume queues: per topic and queue id, an index of fixed 20-byte entries into the commit log.

Entry `queue_offset` sits at byte `(queue_offset - file.start) * 20` of the file named by its
20-digit start queue offset; each file holds `entries_per_file` entries. Files grow by appending
(no preallocation: a broker may hold thousands of queues), so the entry count is the file size / 20.
The last file is never deleted, so a queue keeps its max offset when retention empties it.

Descriptors: at most a bound of files are open at once (`OpenQueueFiles`, limits.queue_files_open_max);
opening one more closes the least recently used, which opens again on its next use. A file closed
with unsynced writes stays in `DirtyFiles`, and the checkpoint opens it again to sync it.

Threads: the event-loop thread writes, deletes, opens and closes; the checkpoint thread syncs the
files listed in `DirtyFiles`, holding the `OpenQueueFiles` lock so that no descriptor is closed under it.
"""

import os
import struct
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

from quorumq.errors import Error, QuorumqError
from quorumq.store.commit_log import file_name, parse_file_name, write_fully

ENTRY = struct.Struct(">qiq")  # commit-log offset, record size, tag hash
ENTRY_SIZE = ENTRY.size
_TAIL_READ_ENTRIES = 4096


@dataclass(slots=True, eq=False)
class QueueFile:
    start: int
    path: Path
    fd: int = -1  # opened on use, closed when it is the least recently used of too many


class OpenQueueFiles:
    """The consume-queue files with an open descriptor, at most `bound`, least recently used first."""

    def __init__(self, bound: int) -> None:
        assert bound >= 1, bound
        self.bound = bound
        self.lock = threading.Lock()  # held to close a descriptor and to sync one
        self._recent: OrderedDict[QueueFile, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._recent)

    def fd(self, queue_file: QueueFile) -> int:
        """The file's descriptor, opened (closing the least recently used past the bound) if need be."""
        if queue_file.fd >= 0:
            self._recent.move_to_end(queue_file)
            return queue_file.fd
        while len(self._recent) >= self.bound:
            self.close(next(iter(self._recent)))
        queue_file.fd = os.open(queue_file.path, os.O_RDWR | os.O_CREAT, 0o644)
        self._recent[queue_file] = None
        return queue_file.fd

    def close(self, queue_file: QueueFile) -> None:
        with self.lock:
            if queue_file.fd >= 0:
                os.close(queue_file.fd)
                queue_file.fd = -1
        self._recent.pop(queue_file, None)

    def sync(self, queue_file: QueueFile) -> None:
        """fdatasync the file (checkpoint thread). One closed since its writes is opened again for
        it: the unsynced pages belong to the file, not the descriptor, and Linux reports a write-back
        error no descriptor has seen to one opened after it. One deleted has nothing left to sync."""
        with self.lock:
            if queue_file.fd >= 0:
                os.fdatasync(queue_file.fd)
                return
            try:
                fd = os.open(queue_file.path, os.O_RDONLY)
            except FileNotFoundError:
                return
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)


class DirtyFiles:
    """Queue files written, and directories given new entries, since the last checkpoint."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._files: set[QueueFile] = set()
        self._directories: set[Path] = set()

    def mark_file(self, queue_file: QueueFile) -> None:
        with self._lock:
            self._files.add(queue_file)

    def mark_directory(self, directory: Path) -> None:
        with self._lock:
            self._directories.add(directory)

    def take(self) -> tuple[list[QueueFile], list[Path]]:
        with self._lock:
            files, self._files = list(self._files), set()
            directories, self._directories = sorted(self._directories), set()
        return files, directories


class ConsumeQueue:
    def __init__(self, directory: Path, entries_per_file: int, open_files: OpenQueueFiles,
                 dirty: DirtyFiles) -> None:
        self.directory = directory
        self.entries_per_file = entries_per_file
        self.files: list[QueueFile] = []
        self.min_offset = 0
        self.max_offset = 0  # one past the last entry written
        self.next_offset = 0  # one past the last entry staged
        self._staged = bytearray()
        self._open_files = open_files
        self._dirty = dirty

    def load(self) -> None:
        """Open the files on disk; a torn entry at the tail is cut off."""
        names = map(parse_file_name, os.listdir(self.directory))
        starts = sorted(start for start in names if start is not None)
        for index, start in enumerate(starts):
            follows = index == 0 or start == starts[index - 1] + self.entries_per_file
            if start % self.entries_per_file or not follows:
                raise QuorumqError(Error.STORE_CORRUPTED, f"consume-queue files in {self.directory} are not "
                                   f"contiguous at {file_name(start)}")
            self.files.append(QueueFile(start, self.directory / file_name(start)))
        for queue_file in self.files[:-1]:
            if queue_file.path.stat().st_size != self.entries_per_file * ENTRY_SIZE:
                raise QuorumqError(Error.STORE_CORRUPTED, f"consume-queue file {queue_file.path} is not full "
                                   "but is followed by another")
        if self.files:
            tail = self.files[-1]
            size = tail.path.stat().st_size
            if size % ENTRY_SIZE:
                os.truncate(tail.path, size - size % ENTRY_SIZE)
            self.min_offset = self.files[0].start
            self.max_offset = self.next_offset = tail.start + size // ENTRY_SIZE

    def begin_at(self, offset: int) -> None:
        """An empty queue's first entry will be at `offset` (its log began past its start, see
        MessageStore.append_raw). The entries before it in its first file are a hole of zeros,
        which recovery skips as below the commit log's first offset (advance_min)."""
        assert not self.files and self.max_offset == self.next_offset == 0, (self.files, self.max_offset)
        self.min_offset = self.max_offset = self.next_offset = offset

    # Writing: stage entries during a batch, then write them with one pwrite per file.

    def stage(self, commit_log_offset: int, size: int, tag_hash: int) -> int:
        queue_offset = self.next_offset
        self._staged += ENTRY.pack(commit_log_offset, size, tag_hash)
        self.next_offset = queue_offset + 1
        return queue_offset

    def discard_staged(self, forget_start: bool) -> None:
        """Drop the staged entries. `forget_start`: their records were not written either, so a
        queue begun for them (begin_at) forgets where; records in the log keep it, to be staged again."""
        self._staged = bytearray()
        if forget_start and not self.files:
            self.min_offset = self.max_offset = 0
        self.next_offset = self.max_offset

    def write_staged(self) -> None:
        """Write the staged entries at the end of the queue: one pwrite per file they fall in."""
        try:
            with memoryview(self._staged) as staged:
                written = 0
                while written < len(staged):
                    offset = self.max_offset
                    queue_file = self._file_for_write(offset)
                    count = min((len(staged) - written) // ENTRY_SIZE,
                                queue_file.start + self.entries_per_file - offset)
                    end = written + count * ENTRY_SIZE
                    position = (offset - queue_file.start) * ENTRY_SIZE
                    write_fully(self._open(queue_file), staged[written:end], position)
                    self._dirty.mark_file(queue_file)
                    written = end
                    self.max_offset = offset + count
        finally:
            # A new buffer, not clear(): a failed pwrite's traceback may still hold a view of it.
            self._staged = bytearray()
            self.next_offset = self.max_offset

    def repair(self, offset: int, entry: tuple[int, int, int]) -> None:
        """Write the entry at `offset` again (recovery found it disagreeing with the log)."""
        assert self.min_offset <= offset < self.max_offset, (offset, self.min_offset, self.max_offset)
        queue_file = self._file_of(offset)
        write_fully(self._open(queue_file), ENTRY.pack(*entry), (offset - queue_file.start) * ENTRY_SIZE)
        self._dirty.mark_file(queue_file)

    def _file_for_write(self, offset: int) -> QueueFile:
        if self.files and offset < self.files[-1].start + self.entries_per_file:
            return self.files[-1]
        start = offset - offset % self.entries_per_file
        if not self.files:
            self._make_directories()
        queue_file = QueueFile(start, self.directory / file_name(start))
        self.files.append(queue_file)
        self._dirty.mark_directory(self.directory)
        return queue_file

    def _make_directories(self) -> None:
        lineage = (self.directory.parent.parent, self.directory.parent, self.directory)
        missing = [directory for directory in lineage if not directory.exists()]
        self.directory.mkdir(parents=True, exist_ok=True)
        for directory in missing:
            self._dirty.mark_directory(directory.parent)

    def _open(self, queue_file: QueueFile) -> int:
        return self._open_files.fd(queue_file)

    def mark_written_since(self, commit_log_offset: int) -> None:
        """List for the next sync the files that may hold entries of records from `commit_log_offset`."""
        for queue_file in reversed(self.files):
            self._dirty.mark_file(queue_file)
            if queue_file.start < self.max_offset and self.entry_at(queue_file.start)[0] < commit_log_offset:
                break

    # Reading.

    def read_entries(self, offset: int, count: int) -> bytes:
        """Up to `count` entries from `offset`, from one file (the caller asks again for more)."""
        assert self.files[0].start <= offset < self.max_offset, (offset, self.max_offset)
        queue_file = self._file_of(offset)
        count = min(count, queue_file.start + self.entries_per_file - offset, self.max_offset - offset)
        return os.pread(self._open(queue_file), count * ENTRY_SIZE, (offset - queue_file.start) * ENTRY_SIZE)

    def _file_of(self, offset: int) -> QueueFile:
        return self.files[(offset - self.files[0].start) // self.entries_per_file]

    def entry_at(self, offset: int) -> tuple[int, int, int]:
        return ENTRY.unpack(self.read_entries(offset, 1))

    def first_offset_where(self, low: int, high: int, accept) -> int:
        """The first offset in [low, high) whose entry `accept`s, entries being sorted for it."""
        while low < high:
            middle = (low + high) // 2
            if accept(self.entry_at(middle)):
                high = middle
            else:
                low = middle + 1
        return low

    # Trimming.

    def truncate(self, max_offset: int) -> None:
        """Drop the entries at and after `max_offset`; the first file always stays."""
        assert self.min_offset <= max_offset <= self.max_offset and not self._staged
        while len(self.files) > 1 and self.files[-1].start >= max_offset:
            self._delete_file(self.files.pop())
        tail = self.files[-1]
        os.ftruncate(self._open(tail), (max_offset - tail.start) * ENTRY_SIZE)
        self._dirty.mark_file(tail)
        self.max_offset = self.next_offset = max_offset

    def truncate_beyond(self, commit_log_end: int) -> None:
        """Drop the tail entries that are empty or point past `commit_log_end`."""
        end = self.max_offset
        while end > self.min_offset:
            count = min(_TAIL_READ_ENTRIES, end - self.min_offset)
            data = self.read_before(end, count)
            kept = len(data) // ENTRY_SIZE
            while kept:
                commit_log_offset, size, _ = ENTRY.unpack_from(data, (kept - 1) * ENTRY_SIZE)
                if size > 0 and commit_log_offset + size <= commit_log_end:
                    break
                kept -= 1
            end -= len(data) // ENTRY_SIZE - kept
            if kept:
                break
        if end < self.max_offset:
            self.truncate(end)

    def read_before(self, end: int, count: int) -> bytes:
        """Up to `count` entries that end at `end`, from the file holding entry end - 1."""
        queue_file = self.files[(end - 1 - self.files[0].start) // self.entries_per_file]
        start = max(end - count, queue_file.start)
        return os.pread(self._open(queue_file), (end - start) * ENTRY_SIZE,
                        (start - queue_file.start) * ENTRY_SIZE)

    def advance_min(self, commit_log_min: int) -> None:
        """Forget the entries below the commit log's first offset, deleting files they fill."""
        while len(self.files) > 1:
            last_of_first = self.files[1].start - 1
            if ENTRY.unpack(self.read_entries(last_of_first, 1))[0] >= commit_log_min:
                break
            self._delete_file(self.files.pop(0))
        low = max(self.min_offset, self.files[0].start) if self.files else 0
        self.min_offset = self.first_offset_where(low, self.max_offset,
                                                  lambda entry: entry[0] >= commit_log_min)

    def _delete_file(self, queue_file: QueueFile) -> None:
        self._open_files.close(queue_file)
        queue_file.path.unlink(missing_ok=True)
        self._dirty.mark_directory(self.directory)

    def close(self) -> None:
        for queue_file in self.files:
            self._open_files.close(queue_file)

    def delete(self) -> None:
        """Remove every file of the queue and its directory."""
        for queue_file in self.files:
            self._delete_file(queue_file)
        self.files = []
        self.directory.rmdir()
        self._dirty.mark_directory(self.directory.parent)
