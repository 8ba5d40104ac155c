"""Appending and reading through the store on real files: segments, consume queues, statuses."""

import os

import pytest
from test_store_support import SEGMENT_BYTES, ManualClock, message, open_store, queue_bodies, queue_files, segment_files

from quorumq.core import codec
from quorumq.core.codec import Frame, check_frame
from quorumq.errors import Error, QuorumqError
from quorumq.store import GetStatus, MessageIn, MessageStore


def test_append_assigns_offsets_and_reads_back(tmp_path):
    store = open_store(tmp_path / "s")
    first = store.append([message(0), message(1, queue_id=1), message(2)])
    assert [queue for _, queue in first.offsets] == [0, 0, 1]
    assert first.offsets[0][0] == 0 and first.end_offset == store.max_offset
    second = store.append([message(3), message(4, topic="U")])
    assert [queue for _, queue in second.offsets] == [2, 0]
    result = store.get_messages("T", 0, 0, 10, 1 << 20)
    assert result.status is GetStatus.FOUND
    assert [m.body for m in result.messages] == [message(i).body for i in (0, 2, 3)]
    assert (result.next_offset, result.min_offset, result.max_offset) == (3, 0, 3)
    stored = result.messages[1]
    assert (stored.topic, stored.queue_id, stored.queue_offset) == ("T", 0, 1)
    assert stored.commit_log_offset == first.offsets[2][0]
    assert stored.store_host == "10.0.0.1:10911" and stored.born_host == "10.0.0.9:40000"
    assert stored.store_timestamp_ms == ManualClock().now and stored.properties == {"KEYS": "key-2"}
    assert store.topics() == ["T", "U"] and store.topic_queue_ids("T") == [0, 1]
    store.close()


def test_segments_roll_with_blank_padding_and_records_never_span(tmp_path):
    store = open_store(tmp_path / "s")
    for batch in range(40):
        store.append([message(batch * 10 + i, queue_id=i % 4, body_bytes=700) for i in range(10)])
    store.flush()
    files = segment_files(store.root)
    assert len(files) > 3
    assert [int(path.name) for path in files] == [index * SEGMENT_BYTES for index in range(len(files))]
    assert all(len(path.name) == 20 and path.stat().st_size == SEGMENT_BYTES for path in files)
    for path in files[:-1]:  # every sealed segment is whole records and one BLANK up to its end
        data = path.read_bytes()
        start, position, blanks = int(path.name), 0, 0
        while position < SEGMENT_BYTES:
            frame, size = check_frame(data, position, SEGMENT_BYTES - position, start + position)
            assert frame in (Frame.MESSAGE, Frame.BLANK), (path.name, position, frame)
            blanks += frame is Frame.BLANK
            position += size
        assert position == SEGMENT_BYTES and blanks <= 1
    assert sum(len(queue_bodies(store, "T", q)) for q in range(4)) == 400
    store.close()


def test_record_ending_exactly_at_segment_end_needs_no_blank(tmp_path):
    store = open_store(tmp_path / "s")
    store.append([message(0)])
    probe = message(1)
    overhead = codec.HEADER.size + len(b"T") + len(probe.born_host) + len(codec.encode_properties(probe.properties))
    filler = message(1, body_bytes=SEGMENT_BYTES - store.max_offset - overhead)
    result = store.append([filler, message(2)])  # in one batch: the second starts the next segment
    assert result.offsets == [(SEGMENT_BYTES - filler_size(filler), 1), (SEGMENT_BYTES, 2)]
    store.append([message(3, body_bytes=SEGMENT_BYTES - result.end_offset % SEGMENT_BYTES - overhead)])
    assert store.max_offset == 2 * SEGMENT_BYTES
    assert store.append([message(4)]).offsets == [(2 * SEGMENT_BYTES, 4)]
    bodies = [body for _, body in queue_bodies(store, "T", 0)]
    assert bodies[:3] == [message(0).body, filler.body, message(2).body] and len(bodies) == 5
    store.close()


def filler_size(filler) -> int:
    return codec.record_size(b"T", filler.born_host.encode(), codec.encode_properties(filler.properties),
                             filler.body)


def test_bad_message_rejects_the_whole_batch(tmp_path):
    store = open_store(tmp_path / "s")
    store.append([message(0)])
    end = store.max_offset
    cases = [
        (message(2, body_bytes=SEGMENT_BYTES), Error.MESSAGE_BODY_TOO_LARGE),
        (message(2, topic=""), Error.ILLEGAL_TOPIC),
        (message(2, topic="x" * 128), Error.ILLEGAL_TOPIC),
        (message(2, queue_id=-1), Error.BAD_REQUEST),
        (MessageIn(topic="T", queue_id=0, body=b"x", properties={"a\x01": "b"}, born_timestamp_ms=0,
                   born_host=""), Error.ILLEGAL_MESSAGE_PROPERTY_KEY),
    ]
    for bad, error in cases:
        with pytest.raises(QuorumqError) as raised:
            store.append([message(1), bad])
        assert raised.value.error is error
    assert store.max_offset == end
    assert store.append([message(3)]).offsets[0][1] == 1  # no queue offset was used up
    store.close()


def test_get_statuses(tmp_path):
    store = open_store(tmp_path / "s")
    assert store.get_messages("T", 0, 0, 10, 1 << 20).status is GetStatus.NO_MESSAGE_IN_QUEUE
    store.append([message(i) for i in range(5)])
    assert store.get_messages("T", 0, 5, 10, 1 << 20).status is GetStatus.OFFSET_OVERFLOW_ONE
    badly = store.get_messages("T", 0, 9, 10, 1 << 20)
    assert (badly.status, badly.next_offset) == (GetStatus.OFFSET_OVERFLOW_BADLY, 5)
    assert store.get_messages("T", 7, 0, 10, 1 << 20).status is GetStatus.NO_MESSAGE_IN_QUEUE
    limited = store.get_messages("T", 0, 1, 2, 1 << 20)
    assert [m.queue_offset for m in limited.messages] == [1, 2] and limited.next_offset == 3
    one = store.get_messages("T", 0, 0, 10, 1)  # max_bytes below one message still returns one
    assert len(one.messages) == 1 and one.next_offset == 1
    size = one.messages[0].store_size
    assert len(store.get_messages("T", 0, 0, 10, 3 * size).messages) == 3
    store.close()


def test_reads_end_where_the_caller_says_records_are_readable(tmp_path):
    """Controller mode bounds reads by what every SyncStateSet member holds: a record past the
    bound is stored but read as not there yet, on every queue and from any offset."""
    store = open_store(tmp_path / "s")
    appended = store.append([message(0), message(1, queue_id=1), message(2), message(3)])
    bound = appended.offsets[2][0]  # where message 2 starts: messages 0 and 1 are readable
    result = store.get_messages("T", 0, 0, 10, 1 << 20, readable_end=bound)
    assert [m.body for m in result.messages] == [message(0).body]
    assert (result.next_offset, result.max_offset) == (1, 3), "the stored end is still reported"
    for offset in (1, 2):  # at the bound, or past it inside what is stored
        waiting = store.get_messages("T", 0, offset, 10, 1 << 20, readable_end=bound)
        assert (waiting.status, waiting.messages, waiting.next_offset) == (GetStatus.OFFSET_OVERFLOW_ONE, [], offset)
    assert [m.body for m in store.get_messages("T", 1, 0, 10, 1 << 20, readable_end=bound).messages] == \
        [message(1).body]
    assert store.get_records("T", 0, 1, 10, 1 << 20, readable_end=bound).messages == []
    readable = store.get_messages("T", 0, 1, 10, 1 << 20, readable_end=appended.end_offset)
    assert [m.body for m in readable.messages] == [message(2).body, message(3).body]
    store.close()


def test_tag_filter_skips_entries_and_advances(tmp_path):
    store = open_store(tmp_path / "s")
    tags = ["red", "blue", None, "red", "green", "blue", "red"]
    store.append([message(i, tag=tag) for i, tag in enumerate(tags)])
    red = frozenset({codec.tag_hash("red")})
    found = store.get_messages("T", 0, 0, 2, 1 << 20, red)
    assert [m.queue_offset for m in found.messages] == [0, 3] and found.next_offset == 4
    rest = store.get_messages("T", 0, 4, 10, 1 << 20, red)
    assert [m.queue_offset for m in rest.messages] == [6] and rest.next_offset == 7
    none = store.get_messages("T", 0, 4, 10, 1 << 20, frozenset({codec.tag_hash("yellow")}))
    assert (none.status, none.messages, none.next_offset) == (GetStatus.NO_MATCHED_MESSAGE, [], 7)
    blue_or_green = frozenset({codec.tag_hash("blue"), codec.tag_hash("green")})
    both = store.get_messages("T", 0, 0, 10, 1 << 20, blue_or_green)
    assert [m.queue_offset for m in both.messages] == [1, 4, 5]
    store.close()


def test_offset_for_timestamp(tmp_path):
    clock = ManualClock(1_000_000)
    store = open_store(tmp_path / "s", clock)
    for step in range(10):
        clock.now = 1_000_000 + step * 1000
        store.append([message(step * 2), message(step * 2 + 1)])
    assert store.offset_for_timestamp("T", 0, 0) == 0
    assert store.offset_for_timestamp("T", 0, 1_000_000) == 0
    assert store.offset_for_timestamp("T", 0, 1_000_001) == 2
    assert store.offset_for_timestamp("T", 0, 1_005_000) == 10
    assert store.offset_for_timestamp("T", 0, 1_009_000) == 18
    assert store.offset_for_timestamp("T", 0, 2_000_000) == 20 == store.queue_max_offset("T", 0)
    assert store.offset_for_timestamp("missing", 0, 0) == 0
    store.close()


def test_consume_queue_files_roll_and_have_twenty_byte_entries(tmp_path):
    store = open_store(tmp_path / "s", consume_queue_entries_per_file=10)
    results = store.append([message(i) for i in range(25)])
    files = queue_files(store.root)
    assert list(files) == [f"T/0/{start:020d}" for start in (0, 10, 20)]
    assert [len(data) for data in files.values()] == [200, 200, 100]
    entries = [codec_entry for data in files.values() for codec_entry in _entries(data)]
    assert [(offset, size > 0) for offset, size, _ in entries] == [(o, True) for o, _ in results.offsets]
    assert store.get_messages("T", 0, 8, 5, 1 << 20).next_offset == 13  # a read across two files
    store.close()


def _entries(data: bytes):
    from quorumq.store.consume_queue import ENTRY
    return list(ENTRY.iter_unpack(data))


def test_close_and_open_again_keeps_everything(tmp_path):
    store = open_store(tmp_path / "s", consume_queue_entries_per_file=16)
    for batch in range(20):
        store.append([message(batch * 5 + i, queue_id=i % 2, body_bytes=900) for i in range(5)])
    before = {q: queue_bodies(store, "T", q) for q in (0, 1)}
    end = store.max_offset
    store.close()
    assert not (store.root / "abort").exists()
    report = store.open()
    assert report.clean_shutdown and report.end_offset == end and report.records_redispatched == 0
    assert {q: queue_bodies(store, "T", q) for q in (0, 1)} == before
    assert store.append([message(999)]).offsets[0][1] == 60
    store.close()


def test_delete_topic_drops_its_queues_only(tmp_path):
    store = open_store(tmp_path / "s")
    store.append([message(0, topic="A"), message(1, topic="B"), message(2, topic="A", queue_id=3)])
    assert store.delete_topic("A") and not store.delete_topic("A")
    assert store.topics() == ["B"] and not (store.root / "consumequeue" / "A").exists()
    assert store.get_messages("A", 0, 0, 1, 1 << 20).status is GetStatus.NO_MESSAGE_IN_QUEUE
    store.append([message(3, topic="A")])
    assert store.queue_max_offset("A", 0) == 1  # a new topic of the same name starts again at 0
    store.close()
    # The old records of A stay in the commit log but do not come back after a crash either.
    (store.root / "abort").touch()
    store.open()
    assert store.queue_max_offset("A", 0) == 1 and store.topic_queue_ids("A") == [0]
    store.close()


def test_store_is_locked_against_a_second_opener(tmp_path):
    store = open_store(tmp_path / "s")
    with pytest.raises(QuorumqError):
        open_store(tmp_path / "s")
    store.close()
    open_store(tmp_path / "s").close()


def test_segment_size_change_is_refused(tmp_path):
    store = open_store(tmp_path / "s")
    store.append([message(i, body_bytes=1000) for i in range(100)])
    store.close()
    with pytest.raises(QuorumqError) as raised:
        open_store(tmp_path / "s", segment_bytes=3 * SEGMENT_BYTES)
    assert raised.value.error is Error.STORE_CORRUPTED


def test_full_disk_fails_at_segment_creation(tmp_path):
    mount_point = tmp_path / "small"
    mount_point.mkdir()
    if os.system(f"mount -t tmpfs -o size=256k tmpfs {mount_point} 2>/dev/null") != 0:
        pytest.skip("cannot mount a small tmpfs here")
    store = MessageStore(mount_point / "s", segment_bytes=SEGMENT_BYTES, store_host="h", clock=ManualClock())
    try:
        store.open()
        appended = 0
        with pytest.raises(QuorumqError) as raised:
            while True:
                store.append([message(appended, body_bytes=8000)])
                appended += 1
        assert raised.value.error is Error.DISK_FULL
        assert len(queue_bodies(store, "T", 0)) == appended > 0  # what was acked is intact
    finally:
        if store.is_open:
            store.close()
        os.system(f"umount -l {mount_point}")  # lazy: a mount must never outlive the test


def test_get_records_returns_checked_whole_records(tmp_path):
    store = open_store(tmp_path / "s")
    store.append([message(i, tag="red" if i % 2 else "blue") for i in range(6)])
    records = store.get_records("T", 0, 1, 2, 1 << 20, frozenset({codec.tag_hash("red")}))
    assert records.status is GetStatus.FOUND and records.next_offset == 4
    batch = memoryview(b"".join(records.messages))
    position, decoded = 0, []
    while position < len(batch):
        frame, size = codec.check_detached(batch, position)
        assert frame is Frame.MESSAGE
        decoded.append(codec.decode_message(batch, position, "reader's"))
        position += size
    assert [m.queue_offset for m in decoded] == [1, 3]
    assert [m.body for m in decoded] == [message(1).body, message(3).body]
    damaged = bytearray(batch)
    damaged[-1] ^= 1
    assert codec.check_detached(bytes(damaged), len(records.messages[0]))[0] is Frame.BAD_CRC
    assert codec.check_detached(bytes(batch[:-1]), len(records.messages[0]))[0] is not Frame.MESSAGE
    store.close()
