"""A topic deletion is a record in the commit log (core/codec.py TOPIC_DELETION): every store that
dispatches it, a master's append, a replica's copy and recovery, drops the topic's queues at that
record, and a truncation below it brings the earlier life's queues back."""

import shutil

import pytest
from test_store_replica import copy_raw
from test_store_retention import NOW, fill_segments
from test_store_support import ManualClock, message, open_store, queue_bodies, queue_files, segment_files

from quorumq.store.retention import HOUR_MS


def two_lives(store) -> tuple[list[bytes], list[bytes], int]:
    """Topic A written, deleted, made again and written; returns the bodies of each life and
    where the deletion record starts."""
    first = [message(index, topic="A", queue_id=index % 2) for index in range(5)]
    store.append(first[:3])
    store.append([message(100, topic="B")])
    store.append(first[3:])
    deleted_at = store.max_offset
    assert store.delete_topic("A") and not store.delete_topic("A")
    assert store.max_offset > deleted_at and store.topics() == ["B"]
    second = [message(200 + index, topic="A") for index in range(3)]
    store.append(second)
    store.append([message(101, topic="B")])
    return [m.body for m in first], [m.body for m in second], deleted_at


@pytest.mark.parametrize("max_bytes", [1, 1 << 20])  # record by record, and the deletion inside one copy
def test_a_replica_drops_the_queues_at_the_deletion_record_and_takes_the_new_life_from_0(tmp_path, max_bytes):
    master = open_store(tmp_path / "master")
    replica = open_store(tmp_path / "replica")
    _, second, _ = two_lives(master)
    copy_raw(master, replica, max_bytes)  # before deletion records: the new life's offset 0 was refused
    for store in (master, replica):
        assert store.topic_queue_ids("A") == [0]
        assert queue_bodies(store, "A", 0) == list(enumerate(second))
    master.close()
    replica.close()
    assert queue_files(master.root) == queue_files(replica.root)
    assert [path.read_bytes() for path in segment_files(master.root)] == \
        [path.read_bytes() for path in segment_files(replica.root)]


def test_recovery_drops_the_queues_at_a_deletion_record_past_the_checkpoint(tmp_path):
    """A replica that crashed with the earlier life's queues on disk and the deletion record, and
    the new life, in its log past the checkpoint."""
    master = open_store(tmp_path / "master")
    replica = open_store(tmp_path / "replica")
    _, second, deleted_at = two_lives(master)
    replica.append_raw(0, master.read_raw(0, deleted_at))
    replica.close()
    assert queue_bodies(master, "A", 0) == list(enumerate(second))
    master.flush()
    for segment in segment_files(master.root):
        shutil.copy(segment, replica.root / "commitlog" / segment.name)
    (replica.root / "abort").touch()
    report = replica.open()
    assert report.corrupt_offset is None and replica.max_offset == master.max_offset
    assert replica.topic_queue_ids("A") == [0]
    assert queue_bodies(replica, "A", 0) == list(enumerate(second))
    assert queue_bodies(replica, "B", 0) == queue_bodies(master, "B", 0)
    master.close()
    replica.close()


def test_a_truncation_below_a_deletion_brings_the_earlier_life_back(tmp_path):
    store = open_store(tmp_path / "store")
    first, _, deleted_at = two_lives(store)
    store.truncate(deleted_at)
    earlier = {0: list(enumerate(first[0::2])), 1: list(enumerate(first[1::2]))}
    assert {queue_id: queue_bodies(store, "A", queue_id) for queue_id in (0, 1)} == earlier
    # A new master that never saw the deletion goes on with the earlier life.
    assert store.append([message(300, topic="A")]).offsets[0][1] == len(earlier[0])
    store.close()
    store.open()
    assert queue_bodies(store, "A", 0) == earlier[0] + [(len(earlier[0]), message(300).body)]
    assert queue_bodies(store, "A", 1) == earlier[1]
    store.close()


def test_the_rebuild_starts_each_queue_where_retention_left_it(tmp_path):
    clock = ManualClock(NOW)
    store = open_store(tmp_path / "store", clock)
    index = fill_segments(store, 3, 0)
    clock.now = NOW + 50 * HOUR_MS
    fill_segments(store, 6, index)
    assert store.clean_expired(clock.now, reserved_hours=40, force=False) >= 2
    before = {queue_id: queue_bodies(store, "T", queue_id) for queue_id in (0, 1)}
    assert before[0][0][0] > 0  # retention took the queue's first entries
    deleted_at = store.max_offset
    store.delete_topic("T")
    store.append([message(999)])
    store.truncate(deleted_at)
    assert {queue_id: queue_bodies(store, "T", queue_id) for queue_id in (0, 1)} == before
    assert store.queue_min_offset("T", 0) == before[0][0][0]
    store.close()


def test_a_new_master_remembers_no_send_for_a_deletion_record(tmp_path):
    store = open_store(tmp_path / "s")
    try:
        sent = [store.append([message(1, topic="A")]).end_offset]
        store.delete_topic("A")
        sent.append(store.append([message(2, topic="B")]).end_offset)
        assert [end for *_, end in store.recent_message_ids(10)] == sent
    finally:
        store.close()
