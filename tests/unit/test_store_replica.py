"""A replica fed the master's raw commit-log bytes ends with identical files, consume queues included."""

import random

import pytest
from test_store_support import SEGMENT_BYTES, message, open_store, queue_bodies, queue_files, segment_files

from quorumq.core import codec
from quorumq.errors import Error, QuorumqError


def fill_master(store, seed: int) -> None:
    generator = random.Random(seed)
    index = 0
    for _ in range(60):
        batch = []
        for _ in range(generator.randint(1, 12)):
            batch.append(message(index, topic=generator.choice(["A", "B", "C"]),
                                 queue_id=generator.randrange(3), body_bytes=generator.randint(1, 3000),
                                 tag=generator.choice([None, "x", "y"])))
            index += 1
        store.append(batch)


def copy_raw(master, replica, max_bytes: int) -> int:
    calls = 0
    while replica.max_offset < master.max_offset:
        data = master.read_raw(replica.max_offset, max_bytes)
        assert data, replica.max_offset
        replica.append_raw(replica.max_offset, data)
        calls += 1
    return calls


@pytest.mark.parametrize("max_bytes", [1, 5000, 1 << 20])
def test_replica_gets_identical_commit_log_and_consume_queues(tmp_path, max_bytes):
    master = open_store(tmp_path / "master", consume_queue_entries_per_file=8)
    replica = open_store(tmp_path / "replica", consume_queue_entries_per_file=8)
    fill_master(master, seed=max_bytes)
    assert copy_raw(master, replica, max_bytes) > 1
    assert master.read_raw(master.max_offset, max_bytes) == b""
    master.flush()
    replica.flush()
    assert len(segment_files(master.root)) > 2
    assert [path.read_bytes() for path in segment_files(master.root)] == \
        [path.read_bytes() for path in segment_files(replica.root)]
    assert queue_files(master.root) == queue_files(replica.root)
    for topic in "ABC":
        for queue_id in range(3):
            assert queue_bodies(replica, topic, queue_id) == queue_bodies(master, topic, queue_id)
    master.close()
    replica.close()
    assert queue_files(master.root) == queue_files(replica.root)


def test_read_raw_returns_whole_records_only(tmp_path):
    master = open_store(tmp_path / "master")
    results = master.append([message(i, body_bytes=500) for i in range(10)])
    starts = [offset for offset, _ in results.offsets]
    data = master.read_raw(0, starts[3] + 10)
    assert len(data) == starts[3]
    assert len(master.read_raw(starts[5], 1)) == starts[6] - starts[5]  # one record even above max_bytes
    with pytest.raises(QuorumqError) as raised:
        master.read_raw(master.max_offset + 1, 100)
    assert raised.value.error is Error.ILLEGAL_OFFSET
    master.close()


def test_append_raw_rejects_bad_bytes_and_wrong_offsets(tmp_path):
    master = open_store(tmp_path / "master")
    replica = open_store(tmp_path / "replica")
    master.append([message(i) for i in range(4)])
    data = master.read_raw(0, 1 << 20)
    with pytest.raises(QuorumqError):
        replica.append_raw(100, data)
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0xFF
    with pytest.raises(QuorumqError):
        replica.append_raw(0, bytes(damaged))
    with pytest.raises(QuorumqError):
        replica.append_raw(0, data[:-1])  # a torn last record
    assert replica.max_offset == 0 and replica.topics() == []
    second = master.read_raw(len(master.read_raw(0, 1)), 1 << 20)
    with pytest.raises(QuorumqError):  # skipping a record leaves its queue offset missing
        replica.append_raw(0, second)
    assert replica.append_raw(0, data) == master.max_offset
    assert queue_bodies(replica, "T", 0) == queue_bodies(master, "T", 0)
    master.close()
    replica.close()


def test_replica_rolls_segments_like_the_master(tmp_path):
    master = open_store(tmp_path / "master")
    replica = open_store(tmp_path / "replica")
    for batch in range(30):
        master.append([message(batch * 4 + i, body_bytes=2500) for i in range(4)])
    copy_raw(master, replica, 64 * 1024)
    assert replica.max_offset == master.max_offset > 3 * SEGMENT_BYTES
    assert [p.name for p in segment_files(replica.root)] == [p.name for p in segment_files(master.root)]
    master.close()
    replica.close()


def test_read_raw_inside_a_record_is_the_callers_error_not_corruption(tmp_path):
    """A slave may report an offset inside a record (its log diverged, or it is buggy): the master
    refuses that read and keeps serving everything, reads and appends alike."""
    store = open_store(tmp_path / "master")
    store.append([message(0), message(1)])
    with pytest.raises(QuorumqError) as raised:
        store.read_raw(7, 1 << 16)
    assert raised.value.error is Error.ILLEGAL_OFFSET
    assert store.corrupt_offset is None
    assert len(store.read_raw(0, 1 << 16)) == store.max_offset
    store.append([message(2)])
    assert [m.body for m in store.get_messages("T", 0, 0, 10, 1 << 20).messages] == [
        message(index).body for index in range(3)]
    store.close()


def test_a_replica_can_begin_at_a_later_segment_and_keeps_it_across_a_restart(tmp_path):
    """Scenarios 28 and 29: an empty replica copies only from a segment start of its master; its
    queues begin at their first records' queue offsets, and recovery finds the same."""
    master = open_store(tmp_path / "master", consume_queue_entries_per_file=8)
    replica = open_store(tmp_path / "replica", consume_queue_entries_per_file=8)
    fill_master(master, seed=7)
    start = master.last_segment_start
    assert start > 0
    for refused in (start - 1, start + 1):  # not a segment start
        with pytest.raises(QuorumqError) as caught:
            replica.append_raw(refused, master.read_raw(start, 5000))
        assert caught.value.error is Error.ILLEGAL_OFFSET and replica.max_offset == 0
    garbled = bytearray(master.read_raw(start, 5000))
    garbled[-1] ^= 0xFF
    with pytest.raises(QuorumqError):
        replica.append_raw(start, bytes(garbled))
    assert (replica.min_offset, replica.max_offset) == (0, 0), "a refused first batch begins nothing"
    offset = start
    while offset < master.max_offset:
        offset = replica.append_raw(offset, master.read_raw(offset, 5000))

    def stored_from(store, topic, queue_id):
        """(queue offset, body) of a queue's messages stored at or after `start`."""
        result = store.get_messages(topic, queue_id, store.queue_min_offset(topic, queue_id), 1000, 1 << 30)
        return [(m.queue_offset, m.body) for m in result.messages if m.commit_log_offset >= start]

    expected = {(t, q): stored_from(master, t, q) for t in "ABC" for q in range(3)}
    assert any(expected.values()) and all(queue_bodies(replica, t, q) == expected[t, q] for t, q in expected)
    assert replica.min_offset == start
    replica.close()
    replica = open_store(tmp_path / "replica", consume_queue_entries_per_file=8)
    assert replica.min_offset == start and replica.max_offset == master.max_offset
    assert all(queue_bodies(replica, t, q) == expected[t, q] for t, q in expected)
    master.close()
    replica.close()


def forged_record(topic: str, queue_id: int, commit_log_offset: int) -> bytes:
    """A record as a fake master would stream it: framed and checksummed, naming any queue."""
    body, topic_bytes = b"forged", topic.encode()
    size = codec.record_size(topic_bytes, b"127.0.0.1:1", b"", body)
    record = bytearray(size)
    codec.encode_record(memoryview(record), 0, size, topic_bytes, queue_id, 0, 0, 0, b"127.0.0.1:1", 0, b"", body,
                        commit_log_offset=commit_log_offset)
    return bytes(record)


@pytest.mark.parametrize("topic, queue_id, error", [
    ("../../../../PWNED_RELATIVE", 0, Error.ILLEGAL_TOPIC), ("/tmp/PWNED_ABSOLUTE", 0, Error.ILLEGAL_TOPIC),
    ("Orders\n", 0, Error.ILLEGAL_TOPIC), ("Orders", 5000, Error.BAD_REQUEST), ("Orders", -1, Error.BAD_REQUEST)])
def test_a_replicated_record_naming_no_valid_queue_touches_no_file(tmp_path, topic, queue_id, error):
    """A fake master's records are refused like a client's input: the replica creates nothing
    outside (or inside) its store for them and keeps its log as it was."""
    master = open_store(tmp_path / "master")
    replica = open_store(tmp_path / "data" / "replica")
    master.append([message(0)])
    copy_raw(master, replica, 1 << 20)
    end = replica.max_offset
    before = sorted(tmp_path.rglob("*"))
    with pytest.raises(QuorumqError) as refused:
        replica.append_raw(end, forged_record(topic, queue_id, end))
    assert refused.value.error is error
    assert replica.max_offset == end
    assert sorted(tmp_path.rglob("*")) == before
    master.close()
    replica.close()
