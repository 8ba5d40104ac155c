"""A disk that fills between two appends (found by the chaos suite's F8 on a slave): the commit log
writes into its preallocated segment, the consume-queue write fails with ENOSPC. The append is
refused with DISK_FULL, the store keeps serving, and once there is room the next append indexes
the stored record first, so it is readable at its queue offset and nothing is indexed twice."""

import pytest
from test_store_support import SEGMENT_BYTES, message, open_store, queue_bodies

from quorumq.errors import Error, QuorumqError


def fill(path):
    with open(path, "wb", buffering=0) as out:
        try:
            while True:
                out.write(b"\0" * 4096)
        except OSError:
            pass


def test_a_consume_queue_write_on_a_full_disk_is_refused_then_indexed_once_there_is_room(small_disk):
    disk = small_disk("1m")
    store = open_store(disk / "store")
    store.append([message(0, queue_id=0)])
    ballast = disk / "ballast"
    fill(ballast)

    with pytest.raises(QuorumqError) as refused:
        store.append([message(1, queue_id=1)])  # a new queue's first file needs a block
    assert refused.value.error is Error.DISK_FULL
    with pytest.raises(QuorumqError) as still_full:
        store.append([message(2, queue_id=1)])
    assert still_full.value.error is Error.DISK_FULL
    assert [body for _, body in queue_bodies(store, "T", 0)] == [message(0).body]

    ballast.unlink()
    store.append([message(3, queue_id=1)])
    expected = [(0, message(1).body), (1, message(3).body)]
    assert queue_bodies(store, "T", 1) == expected
    store.close()
    reopened = open_store(disk / "store")
    assert queue_bodies(reopened, "T", 1) == expected
    reopened.close()


def test_a_queue_indexed_beside_one_that_hits_the_full_disk_is_indexed_again(small_disk):
    """F8 on a slave (the smoke run's seed 5007): indexing the records a failed append left behind
    failed on one queue's write while another queue had entries staged; that queue kept them
    unwritten and stopped growing on disk, so reads of it ended there, even after a reopen."""
    disk = small_disk("1m")
    store = open_store(disk / "store")
    store.append([message(0, queue_id=0)])
    ballast = disk / "ballast"
    fill(ballast)
    for batch in ([message(1, queue_id=1), message(2, queue_id=0)],  # queue 1's first file needs a block
                  [message(3, queue_id=0)]):  # indexing first: queue 1 fails again, queue 0 had staged
        with pytest.raises(QuorumqError) as refused:
            store.append(batch)
        assert refused.value.error is Error.DISK_FULL

    ballast.unlink()
    store.append([message(4, queue_id=0)])
    expected = [(0, message(0).body), (1, message(2).body), (2, message(4).body)]
    assert queue_bodies(store, "T", 0) == expected
    assert queue_bodies(store, "T", 1) == [(0, message(1).body)]
    store.close()
    reopened = open_store(disk / "store")
    assert queue_bodies(reopened, "T", 0) == expected
    reopened.close()


def test_a_replica_that_began_past_its_start_keeps_its_queues_start_through_a_full_disk(tmp_path, small_disk):
    """A slave whose log begins at a later segment of its master begins each queue at its first
    record's queue offset. When those entries could not be written (the disk filled after the
    segment was allocated), the queues forgot where they begin, so indexing again took their
    records for a deleted topic's and the next batch began the queues later: records lost."""
    master = open_store(tmp_path / "master")
    for index in range(400):
        master.append([message(index, queue_id=index % 3, body_bytes=500)])
    start = master.last_segment_start
    assert start > 0
    disk = small_disk("1m")
    replica = open_store(disk / "store")
    room, ballast = disk / "room-for-one-segment", disk / "ballast"
    room.write_bytes(b"\0" * SEGMENT_BYTES)
    fill(ballast)
    room.unlink()  # one segment free: the log's, none for the queues
    with pytest.raises(QuorumqError) as refused:
        replica.append_raw(start, master.read_raw(start, 5000))
    assert refused.value.error is Error.DISK_FULL

    ballast.unlink()
    offset = replica.max_offset
    while offset < master.max_offset:
        offset = replica.append_raw(offset, master.read_raw(offset, 5000))

    def stored_from_start(store, queue_id):
        result = store.get_messages("T", queue_id, store.queue_min_offset("T", queue_id), 1000, 1 << 30)
        return [(m.queue_offset, m.body) for m in result.messages if m.commit_log_offset >= start]

    for queue_id in range(3):
        assert queue_bodies(replica, "T", queue_id) == stored_from_start(master, queue_id)
    replica.close()
    master.close()
