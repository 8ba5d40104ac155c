"""MessageStore.truncate: a slave cuts its log back to the point where it agrees with its new
master (spec rocketmq-ha.md 2.9, #10666: durable before the handshake goes on)."""

import pytest
from test_store_recovery import TOPICS, all_messages, assert_holds_exactly, fill
from test_store_support import crash_copy, message, open_store, segment_files


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
