"""The bound on open consume-queue files: least recently used closed first, opened again on use, and
a file closed with unsynced writes still synced by the checkpoint."""

import os

from quorumq import limits
from quorumq.store.consume_queue import ConsumeQueue, DirtyFiles, OpenQueueFiles

BOUND = 4
QUEUES = 20
ENTRIES_PER_FILE = 8  # small, so a queue spans several files


def descriptors_under(directory) -> int:
    """This process's descriptors open on files under `directory`."""
    count = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            count += os.readlink(f"/proc/self/fd/{fd}").startswith(str(directory))
        except FileNotFoundError:  # the listing's own descriptor
            pass
    return count


def new_queues(root, open_files: OpenQueueFiles, dirty: DirtyFiles) -> list[ConsumeQueue]:
    return [ConsumeQueue(root / f"T{number}" / "0", ENTRIES_PER_FILE, open_files, dirty) for number in range(QUEUES)]


def test_open_files_never_exceed_the_bound_and_every_entry_reads_back(tmp_path):
    open_files = OpenQueueFiles(BOUND)
    queues = new_queues(tmp_path, open_files, DirtyFiles())
    for round_number in range(3 * ENTRIES_PER_FILE // 2):  # past a file's end: two files per queue
        for number, queue in enumerate(queues):
            queue.stage(number * 1000 + round_number, 100, number)
            queue.write_staged()
            assert len(open_files) <= BOUND
            assert descriptors_under(tmp_path) <= BOUND
    for number, queue in enumerate(queues):
        assert [queue.entry_at(offset) for offset in range(queue.max_offset)] == \
            [(number * 1000 + offset, 100, number) for offset in range(3 * ENTRIES_PER_FILE // 2)]
        assert descriptors_under(tmp_path) <= BOUND
    for queue in queues:
        queue.close()
    assert len(open_files) == 0 and descriptors_under(tmp_path) == 0


def test_checkpoint_syncs_files_closed_with_unsynced_writes(tmp_path, monkeypatch):
    open_files, dirty = OpenQueueFiles(BOUND), DirtyFiles()
    queues = new_queues(tmp_path, open_files, dirty)
    for number, queue in enumerate(queues):
        queue.stage(number, 100, 0)
        queue.write_staged()
    queues[-1].delete()  # listed dirty, then deleted: nothing to sync
    synced: set[int] = set()
    real_fdatasync = os.fdatasync

    def recording_fdatasync(fd: int) -> None:
        real_fdatasync(fd)
        synced.add(os.fstat(fd).st_ino)

    monkeypatch.setattr(os, "fdatasync", recording_fdatasync)
    files, _ = dirty.take()
    assert len(files) == QUEUES and sum(queue_file.fd < 0 for queue_file in files) >= QUEUES - BOUND
    for queue_file in files:
        open_files.sync(queue_file)
    assert synced == {queue.files[0].path.stat().st_ino for queue in queues[:-1]}
    assert len(open_files) <= BOUND


def test_the_default_bound_is_a_quarter_of_the_soft_limit():
    assert limits.queue_files_open_max(1024) == 256
    assert limits.queue_files_open_max(20) == limits.QUEUE_FILES_OPEN_MIN
    assert limits.queue_files_open_max(-1) == limits.QUEUE_FILES_OPEN_UNLIMITED  # RLIM_INFINITY
