"""Retention: the pure deletion rule, then deleting by age and by force on real files."""

from test_store_support import SEGMENT_BYTES, ManualClock, message, open_store, queue_bodies, queue_files, segment_files

from quorumq import limits
from quorumq.store import GetStatus, segments_to_delete
from quorumq.store.retention import HOUR_MS

NOW = 1_000 * HOUR_MS


def test_rule_deletes_the_expired_prefix_only():
    ends = [NOW - 80 * HOUR_MS, NOW - 73 * HOUR_MS, NOW - 10 * HOUR_MS, NOW - 90 * HOUR_MS]
    assert segments_to_delete(ends, NOW, 72, force=False) == 2  # stops at the first one kept
    assert segments_to_delete(ends, NOW, 100, force=False) == 0
    assert segments_to_delete(ends, NOW, 100, force=True) == 1  # a full disk takes the oldest anyway
    assert segments_to_delete(ends, NOW, 72, force=True) == 2
    assert segments_to_delete([NOW - 72 * HOUR_MS], NOW, 72, force=False) == 0  # exactly the limit is kept
    assert segments_to_delete([], NOW, 0, force=True) == 0  # the active segment is never a candidate
    many = [0] * (limits.RETENTION_SEGMENTS_PER_RUN_MAX + 5)
    assert segments_to_delete(many, NOW, 1, force=False) == limits.RETENTION_SEGMENTS_PER_RUN_MAX


def fill_segments(store, count: int, first_index: int) -> int:
    index = first_index
    while len(segment_files(store.root)) < count:
        store.append([message(index + i, queue_id=i % 2, body_bytes=3000) for i in range(4)])
        index += 4
    return index


def test_expired_segments_and_their_queue_files_are_deleted(tmp_path):
    clock = ManualClock(NOW)
    store = open_store(tmp_path / "s", clock, consume_queue_entries_per_file=8)
    index = fill_segments(store, 3, 0)
    clock.now = NOW + 50 * HOUR_MS
    fill_segments(store, 5, index)
    before = {q: queue_bodies(store, "T", q) for q in (0, 1)}
    queue_file_count = len(queue_files(store.root))

    assert store.clean_expired(clock.now, reserved_hours=60, force=False) == 0
    assert store.clean_expired(clock.now, reserved_hours=40, force=False) == 2
    assert int(segment_files(store.root)[0].name) == store.min_offset == 2 * SEGMENT_BYTES
    assert len(queue_files(store.root)) < queue_file_count
    for queue_id in (0, 1):
        low = store.queue_min_offset("T", queue_id)
        kept = [(offset, body) for offset, body in before[queue_id] if offset >= low]
        assert low > 0 and queue_bodies(store, "T", queue_id) == kept
        first = store.get_messages("T", queue_id, kept[0][0], 1, 1 << 20).messages[0]
        assert first.commit_log_offset >= store.min_offset
        too_small = store.get_messages("T", queue_id, 0, 10, 1 << 20)
        assert (too_small.status, too_small.next_offset) == (GetStatus.OFFSET_TOO_SMALL, low)
    mins = {q: store.queue_min_offset("T", q) for q in (0, 1)}
    store.close()
    store.open()
    assert {q: store.queue_min_offset("T", q) for q in (0, 1)} == mins and store.min_offset == 2 * SEGMENT_BYTES
    store.close()


def test_force_deletes_the_oldest_but_never_the_active_segment(tmp_path):
    clock = ManualClock(NOW)
    store = open_store(tmp_path / "s", clock)
    fill_segments(store, 3, 0)
    assert store.clean_expired(NOW, reserved_hours=72, force=True) == 1
    assert store.clean_expired(NOW, reserved_hours=72, force=True) == 1
    assert store.clean_expired(NOW + 1000 * HOUR_MS, reserved_hours=0, force=True) == 0
    assert len(segment_files(store.root)) == 1
    # The queues keep their max offsets, so producers and consumers continue where they were.
    max_offset = store.queue_max_offset("T", 0)
    assert store.append([message(0)]).offsets[0][1] == max_offset
    assert 0.0 < store.disk_usage_ratio() < 1.0
    store.close()


def test_queue_emptied_by_retention_keeps_its_offsets(tmp_path):
    clock = ManualClock(NOW)
    store = open_store(tmp_path / "s", clock, consume_queue_entries_per_file=4)
    store.append([message(i, topic="old", body_bytes=100) for i in range(10)])
    fill_segments(store, 3, 100)
    assert store.clean_expired(NOW, reserved_hours=0, force=True) == 1
    assert store.queue_min_offset("old", 0) == store.queue_max_offset("old", 0) == 10
    result = store.get_messages("old", 0, 3, 10, 1 << 20)
    assert (result.status, result.next_offset) == (GetStatus.OFFSET_TOO_SMALL, 10)
    assert store.get_messages("old", 0, 10, 10, 1 << 20).status is GetStatus.OFFSET_OVERFLOW_ONE
    store.close()
    store.open()
    assert store.queue_min_offset("old", 0) == store.queue_max_offset("old", 0) == 10
    assert store.append([message(0, topic="old")]).offsets[0][1] == 10
    store.close()
