"""A disk that fills between two appends (found by the chaos suite's F8 on a slave): the commit log
writes into its preallocated segment, the consume-queue write fails with ENOSPC. The append is
refused with DISK_FULL, the store keeps serving, and once there is room the next append indexes
the stored record first, so it is readable at its queue offset and nothing is indexed twice."""

import pytest
from test_store_support import message, open_store, queue_bodies

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
