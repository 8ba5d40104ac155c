"""MessageStore.truncate: a slave cuts its log back to the point where it agrees with its new
master (spec rocketmq-ha.md 2.9, #10666: durable before the handshake goes on)."""

import pytest
from test_store_recovery import TOPICS, all_messages, assert_holds_exactly, damage, fill, first_queue_file
from test_store_retention import NOW, fill_segments
from test_store_support import ManualClock, crash_copy, message, open_store, segment_files

from quorumq.store.consume_queue import ENTRY
from quorumq.store.retention import HOUR_MS


@pytest.fixture
def store(tmp_path):
    store = open_store(tmp_path / "store")
    yield store
    store.close()


def cut_point(messages, keep: int) -> int:
    """The commit-log offset where message `keep` starts."""
    return messages[keep].commit_log_offset


def test_truncate_inside_the_last_segment_and_across_segments(store, tmp_path):
    stored = fill(store, seed=1)
    segments_before = len(segment_files(store.root))
    for keep in (len(stored) - 3, len(stored) // 3):
        store.truncate(cut_point(stored, keep))
        assert store.max_offset == cut_point(stored, keep)
        assert_holds_exactly(store, stored[:keep])
    assert len(segment_files(store.root)) < segments_before


def test_appends_continue_where_the_log_was_cut_with_the_right_queue_offsets(store):
    stored = fill(store, seed=2)
    keep = len(stored) // 2
    store.truncate(cut_point(stored, keep))
    appended = store.append([message(9999, topic=TOPICS[0], queue_id=0)])
    expected_offset = sum(1 for m in stored[:keep] if (m.topic, m.queue_id) == (TOPICS[0], 0))
    assert appended.offsets[0][1] == expected_offset
    assert all_messages(store)[-1].body == message(9999).body


def test_a_truncation_survives_a_reopen_and_a_crash(store, tmp_path):
    stored = fill(store, seed=3)
    keep = len(stored) - 10
    store.truncate(cut_point(stored, keep))
    crashed = open_store(crash_copy(store, tmp_path / "crashed"))  # kill -9 right after truncate returned
    try:
        assert_holds_exactly(crashed, stored[:keep])
    finally:
        crashed.close()
    store.close()
    reopened = open_store(store.root)
    try:
        assert_holds_exactly(reopened, stored[:keep])
    finally:
        reopened.close()


def test_only_a_record_start_within_the_log_is_accepted(store):
    stored = fill(store, seed=4)
    for bad in (cut_point(stored, 5) + 1, store.max_offset + 1, -1):
        with pytest.raises(ValueError):
            store.truncate(bad)
    assert_holds_exactly(store, stored)
    store.truncate(store.max_offset)  # cutting nothing is allowed
    assert_holds_exactly(store, stored)


def point_entry_at(root, topic: str, queue_id: int, queue_offset: int, entry: tuple[int, int, int]) -> None:
    """Overwrite one consume-queue entry (the queue's first file holds every entry here)."""
    damage(first_queue_file(root, topic, queue_id), queue_offset * ENTRY.size, ENTRY.pack(*entry))


def test_a_damaged_entry_pointing_below_the_cut_does_not_keep_the_entries_past_it(store):
    """The F10 follow-up: the cut dropped entries from the end back to the first pointing below
    it, so a damaged last entry kept every entry past the cut before it."""
    stored = fill(store, seed=5)
    keep = len(stored) // 2
    past = [m for m in stored[keep:] if (m.topic, m.queue_id) == (TOPICS[0], 0)]
    assert len(past) >= 2
    point_entry_at(store.root, TOPICS[0], 0, past[-1].queue_offset, (0, stored[0].store_size, 0))
    store.truncate(cut_point(stored, keep))
    assert_holds_exactly(store, stored[:keep])
    appended = store.append([message(9999, topic=TOPICS[0], queue_id=0)])
    assert appended.offsets[0][1] == past[0].queue_offset  # the master's next record of the queue fits


def test_a_cut_keeps_the_offsets_of_a_queue_whose_records_retention_took(tmp_path):
    clock = ManualClock(NOW)
    store = open_store(tmp_path / "s", clock)
    try:
        for i in range(30):
            store.append([message(i, topic="OLD", body_bytes=3000)])
        index = fill_segments(store, 3, 100)
        clock.now = NOW + 50 * HOUR_MS
        fill_segments(store, 6, index)
        assert store.clean_expired(clock.now, reserved_hours=40, force=False) >= 2
        assert store.queue_min_offset("OLD", 0) == store.queue_max_offset("OLD", 0) == 30
        last = store.get_messages("T", 0, store.queue_max_offset("T", 0) - 1, 1, 1 << 20).messages[0]
        store.truncate(last.commit_log_offset)
        assert store.queue_max_offset("OLD", 0) == 30  # not taken back to 0: its consumers' offsets hold
    finally:
        store.close()


def test_a_cut_inside_a_topic_made_again_keeps_the_new_life_below_it(store):
    store.append([message(i, topic="A") for i in range(3)])
    store.delete_topic("A")
    for i in range(4):
        store.append([message(100 + i, topic="A")])
    cut = store.get_messages("A", 0, 2, 1, 1 << 20).messages[0].commit_log_offset
    store.truncate(cut)
    assert (store.queue_min_offset("A", 0), store.queue_max_offset("A", 0)) == (0, 2)
    assert [m.body for m in store.get_messages("A", 0, 0, 10, 1 << 20).messages] == [
        message(100).body, message(101).body]
