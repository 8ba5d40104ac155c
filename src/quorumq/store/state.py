"""What the parts of a `MessageStore` share: the commit log, the consume queues, the offsets the
loop publishes, and making them durable (flush and checkpoint).

Threads: everything runs on the event loop except `flush` and `checkpoint`, which may run in worker
threads at the same time as appends. They only read offsets that the loop publishes after the
bytes below them are written, and hold locks while they sync descriptors.
"""

import logging
import os
import resource
import threading
from pathlib import Path

from quorumq import limits
from quorumq.clock import Clock
from quorumq.errors import Error, QuorumqError
from quorumq.store.checkpoint import Checkpoint, save_checkpoint
from quorumq.store.commit_log import CommitLog, fsync_directory
from quorumq.store.consume_queue import ConsumeQueue, DirtyFiles, OpenQueueFiles

log = logging.getLogger(__name__)

# Fault tests model a power cut by cutting the commit log back to what was fsynced: with this set in
# the environment, the store keeps that offset in storeRoot/fsynced (20 digits), rewritten in place.
FSYNC_LOG_VARIABLE = "QUORUMQ_FSYNC_LOG"
FSYNC_LOG_NAME = "fsynced"


class StoreState:
    def __init__(self, root: Path, segment_bytes: int, store_host: str, clock: Clock,
                 consume_queue_entries_per_file: int) -> None:
        # Not written into records: reads fill StoredMessage.store_host with it.
        self.store_host = store_host
        self.root = root
        self.clock = clock
        self.segment_bytes = segment_bytes
        self.entries_per_file = consume_queue_entries_per_file
        self.commit_log = CommitLog(root / "commitlog", segment_bytes)
        self.queues: dict[str, dict[int, ConsumeQueue]] = {}
        soft_open_files, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        self.queue_files = OpenQueueFiles(limits.queue_files_open_max(soft_open_files))
        self.dirty = DirtyFiles()
        self.flush_lock = threading.Lock()
        self.checkpoint_lock = threading.Lock()
        self.last_checkpoint: Checkpoint | None = None
        # Offsets the flush and checkpoint threads read: each is published after the work below it.
        self.write_offset = 0
        self.dispatched_offset = 0
        self.flushed_offset = 0
        self.corrupt_offset: int | None = None
        self.write_failure: str | None = None
        self.lock_fd = -1
        self.fsync_log_fd = -1
        self.sync_count = 0  # commit-log fdatasync calls, to observe group commit

    @property
    def min_offset(self) -> int:
        return self.commit_log.min_offset if self.commit_log.segments else self.write_offset

    @property
    def readable_limit(self) -> int:
        """Where reads of the log end: its end, or its first corrupt record."""
        return self.write_offset if self.corrupt_offset is None else min(self.write_offset, self.corrupt_offset)

    @property
    def is_open(self) -> bool:
        return self.lock_fd >= 0

    def check_open(self) -> None:
        if not self.is_open:
            raise QuorumqError(Error.INTERNAL_ERROR, "the store is not open")

    # The consume queues.

    def queue(self, topic: str, queue_id: int) -> ConsumeQueue | None:
        queues = self.queues.get(topic)
        return queues.get(queue_id) if queues is not None else None

    def all_queues(self) -> list[ConsumeQueue]:
        return [queue for queues in self.queues.values() for queue in queues.values()]

    def keyed_queues(self) -> list[tuple[tuple[str, int], ConsumeQueue]]:
        return [((topic, queue_id), queue) for topic, queues in self.queues.items()
                for queue_id, queue in queues.items()]

    def new_queue(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = ConsumeQueue(self.root / "consumequeue" / topic / str(queue_id), self.entries_per_file,
                             self.queue_files, self.dirty)
        self.queues.setdefault(topic, {})[queue_id] = queue
        return queue

    def queue_for_append(self, topic: str, queue_id: int) -> ConsumeQueue:
        queue = self.queue(topic, queue_id)
        return queue if queue is not None else self.new_queue(topic, queue_id)

    def drop_topic_queues(self, topic: str) -> None:
        """Delete the topic's consume queues (a deletion record was dispatched)."""
        for queue in self.queues.pop(topic, {}).values():
            if queue.files:
                queue.delete()
        topic_directory = self.root / "consumequeue" / topic
        if topic_directory.is_dir():
            topic_directory.rmdir()
            self.dirty.mark_directory(topic_directory.parent)

    # Corruption found after open.

    def mark_corrupt(self, offset: int, finding: str) -> None:
        log.error("commit log: record at offset %d fails its check (%s); the store refuses "
                  "reads at or past it and appends", offset, finding)
        if self.corrupt_offset is None or offset < self.corrupt_offset:
            self.corrupt_offset = offset

    def corruption_error(self, offset: int) -> QuorumqError:
        return QuorumqError(Error.STORE_CORRUPTED, f"cannot serve offset {offset}: the commit log is corrupt "
                            f"at {self.corrupt_offset}")

    # Durability.

    def flush(self) -> int:
        """fdatasync the commit log up to the write offset seen on entry; returns the flushed offset.

        Safe in a worker thread while the loop appends: bytes below the write offset it reads were
        written before that offset was published.
        """
        with self.flush_lock:
            target = self.write_offset
            if target > self.flushed_offset:
                self.sync_count += self.commit_log.sync(self.flushed_offset, target)
                self.flushed_offset = target
                if self.fsync_log_fd >= 0:
                    os.pwrite(self.fsync_log_fd, b"%020d" % target, 0)
            return self.flushed_offset

    def checkpoint(self) -> None:
        """Make the consume queues durable, flush the commit log, then record both offsets."""
        with self.checkpoint_lock:
            dispatched = self.dispatched_offset
            self._sync_queue_files()
            flushed = self.flush()
            if self.corrupt_offset is not None:
                # The next open scans from the corrupt record again; as it lies below the flushed
                # offset, it is found to be corruption again, never mistaken for a torn tail.
                dispatched = min(dispatched, self.corrupt_offset)
            checkpoint = Checkpoint(flushed, dispatched)
            if checkpoint != self.last_checkpoint:
                save_checkpoint(self.root / "checkpoint", checkpoint)
                self.last_checkpoint = checkpoint

    def _sync_queue_files(self) -> None:
        files, directories = self.dirty.take()
        try:
            while files:
                self.queue_files.sync(files[-1])
                files.pop()
            while directories:
                if directories[-1].is_dir():
                    fsync_directory(directories[-1])
                directories.pop()
        except BaseException:
            for queue_file in files:
                self.dirty.mark_file(queue_file)
            for directory in directories:
                self.dirty.mark_directory(directory)
            raise
