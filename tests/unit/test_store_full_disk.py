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
